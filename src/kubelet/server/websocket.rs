//! Exec, attach and port-forward over WebSocket, as a kubelet serves them to a caller that
//! speaks it directly: the channel protocols (`v5.channel.k8s.io` … `channel.k8s.io`), one
//! byte of channel before each binary message (0 stdin, 1 stdout, 2 stderr, 3 status,
//! 4 resize; v5's 255 closes a channel), and port-forward's two channels per `port` (data,
//! error), each first carrying the port as two little-endian bytes.

use super::exec::{self, Streams};
use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

pub const EXEC_PROTOCOLS: [&str; 4] = ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "channel.k8s.io"];
pub const PORT_FORWARD_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "portforward.k8s.io"];
/// The most ports one WebSocket port-forward takes: each has two channels of one byte.
pub const MAX_PORTS: usize = 128;

fn framed(channel: u8, data: &[u8]) -> Message {
    let mut m = Vec::with_capacity(1 + data.len());
    m.push(channel);
    m.extend_from_slice(data);
    Message::Binary(m.into())
}

/// Runs an exec or attach on `socket`.
pub async fn exec<F, Fut>(socket: WebSocket, asked: super::spdy::Asked, run: F)
where
    F: FnOnce(Streams) -> Fut,
    Fut: Future<Output = i32>,
{
    let (mut sink, mut source) = socket.split();
    // Bounded: a client that does not read holds the session back (writes await room).
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if sink.send(m).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>(64);
    let closed = tokio_util::sync::CancellationToken::new();
    let gone = closed.clone();
    let reader = tokio::spawn(async move {
        let _cancel_on_exit = gone.drop_guard();
        let mut stdin = Some(stdin_tx);
        while let Some(Ok(m)) = source.next().await {
            match m {
                Message::Binary(b) if b.first() == Some(&0) => {
                    if let Some(tx) = &stdin
                        && tx.send(b[1..].to_vec()).await.is_err()
                    {
                        stdin = None;
                    }
                }
                // v5: the client closed stdin.
                Message::Binary(b) if b.as_ref() == [255, 0] => stdin = None,
                Message::Close(_) => return,
                _ => {}
            }
        }
    });
    let out = |channel: u8| -> exec::Write {
        let tx = out_tx.clone();
        Box::new(move |b: Vec<u8>| {
            let tx = tx.clone();
            Box::pin(async move {
                let _ = tx.send(framed(channel, &b)).await;
            })
        })
    };
    let streams = Streams {
        stdin: asked.stdin.then_some(stdin_rx),
        stdout: asked.stdout.then(|| out(1)),
        stderr: asked.stderr.then(|| out(2)),
        tty: asked.tty,
        closed,
    };
    let code = run(streams).await;
    let _ = out_tx.send(framed(3, &exec::status(code))).await;
    let _ = out_tx.send(Message::Close(None)).await;
    drop(out_tx);
    let _ = writer.await;
    reader.abort();
}

/// Answers each port of `ports` on its data channel once the client writes to it.
pub async fn port_forward(socket: WebSocket, ports: Vec<u16>, namespace: String, pod: String) {
    let (mut sink, mut source) = socket.split();
    for (i, port) in ports.iter().enumerate().take(MAX_PORTS) {
        let Ok(first) = u8::try_from(2 * i) else { return };
        for channel in [first, first + 1] {
            if sink.send(framed(channel, &port.to_le_bytes())).await.is_err() {
                return;
            }
        }
    }
    let mut answered = vec![false; ports.len()];
    while let Some(Ok(m)) = source.next().await {
        match m {
            Message::Binary(b) if !b.is_empty() && b[0] % 2 == 0 => {
                let i = usize::from(b[0] / 2);
                if let Some(port) = ports.get(i)
                    && !answered[i]
                {
                    answered[i] = true;
                    if sink.send(framed(b[0], &exec::port_answer(&namespace, &pod, *port))).await.is_err() {
                        return;
                    }
                }
            }
            Message::Close(_) => return,
            _ => {}
        }
    }
}
