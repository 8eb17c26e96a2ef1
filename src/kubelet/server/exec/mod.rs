//! What happens on an exec or attach connection, whatever carries it (SPDY from the API
//! server, WebSocket from a direct caller): the typed answer of the pod's `exec` knob, stdin
//! echoed where the knob echoes, an attached container's new log lines. Nothing runs. The
//! answer itself is pure ([`answer`], over the minimal [`shell`] and the container's
//! [`environment`]).

pub mod answer;
pub mod environment;
pub mod shell;

use crate::kubelet::server::logs::script::Script;
use answer::{Answer, Stdin};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Writes to one of the client's output streams, waiting while its transport's queue is full:
/// a client that does not read holds the session back instead of filling memory.
pub type Write = Box<dyn Fn(Vec<u8>) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// The streams the client opened.
pub struct Streams {
    pub stdin: Option<mpsc::Receiver<Vec<u8>>>,
    pub stdout: Option<Write>,
    pub stderr: Option<Write>,
    /// A terminal: stderr goes to stdout.
    pub tty: bool,
    /// Fires when the client's connection ends.
    pub closed: CancellationToken,
}

/// The longest an echoing exec or an attach lasts.
const MOST: Duration = Duration::from_secs(3600);
/// The most input one session echoes back (more ends the echo, with a word on stderr).
pub const ECHO_LIMIT: usize = 64 * 1024 * 1024;

impl Streams {
    async fn out(&self, b: &[u8]) {
        if let Some(w) = &self.stdout {
            w(b.to_vec()).await;
        }
    }

    async fn err(&self, b: &[u8]) {
        match (&self.stderr, self.tty) {
            (Some(w), false) => w(b.to_vec()).await,
            _ => self.out(b).await,
        }
    }

    /// Copies stdin to stdout until it ends, the session's echo limit is reached, or the time
    /// is up; each chunk waits until the client has room for it.
    async fn echo(&mut self) {
        let Some(mut stdin) = self.stdin.take() else { return };
        let mut echoed = 0usize;
        let _ = tokio::time::timeout(MOST, async {
            while let Some(chunk) = stdin.recv().await {
                echoed += chunk.len();
                if echoed > ECHO_LIMIT {
                    let note = format!(
                        "kwok-pools: this session echoed its limit of {} MiB of input; input is no longer read\n",
                        ECHO_LIMIT >> 20
                    );
                    self.err(note.as_bytes()).await;
                    return;
                }
                self.out(&chunk).await;
            }
        })
        .await;
    }
}

/// Runs an exec: the answer, the time the command lasts, then what it does with stdin. The
/// exit code.
pub async fn exec(answer: &Answer, stdin_open: bool, streams: &mut Streams) -> i32 {
    streams.out(answer.stdout.as_bytes()).await;
    streams.err(answer.stderr.as_bytes()).await;
    if !answer.lasts.is_zero() {
        let closed = streams.closed.clone();
        tokio::select! {
            () = tokio::time::sleep(answer.lasts) => {}
            () = closed.cancelled() => return answer.exit_code,
        }
    }
    match &answer.stdin {
        Stdin::Echoed if stdin_open => streams.echo().await,
        Stdin::Shell(container) if stdin_open => return streams.shell(container).await,
        _ => {}
    }
    answer.exit_code
}

impl Streams {
    /// An interactive shell: each line of stdin run as a script, a prompt on a terminal, until
    /// `exit`, the end of input or the time is up. The last command's exit code.
    async fn shell(&mut self, container: &shell::Container) -> i32 {
        let Some(mut stdin) = self.stdin.take() else { return 0 };
        let mut status = 0;
        let mut pending: Vec<u8> = Vec::new();
        let prompt = |tty: bool| if tty { "# " } else { "" };
        self.out(prompt(self.tty).as_bytes()).await;
        let deadline = tokio::time::Instant::now() + MOST;
        loop {
            let chunk = tokio::select! {
                c = stdin.recv() => c,
                () = tokio::time::sleep_until(deadline) => None,
            };
            let Some(chunk) = chunk else { return status };
            if self.tty {
                // A terminal echoes what is typed; carriage returns end lines.
                self.out(&chunk).await;
            }
            pending.extend(chunk.iter().map(|b| if *b == b'\r' { b'\n' } else { *b }));
            if pending.len() > ECHO_LIMIT {
                self.err(b"kwok-pools: input line too long for the simulated shell\n").await;
                return 2;
            }
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let o = shell::run_script(&String::from_utf8_lossy(&line), container, status);
                self.out(o.stdout.as_bytes()).await;
                self.err(o.stderr.as_bytes()).await;
                status = o.exit_code;
                if !o.sleep.is_zero() {
                    tokio::time::sleep(o.sleep).await;
                }
                if o.exited {
                    return status;
                }
                self.out(prompt(self.tty).as_bytes()).await;
            }
        }
    }
}

/// Runs an attach: a line that says what this is, the container's log lines as they come, and
/// stdin echoed, until stdin ends or the client goes.
pub async fn attach(pod: &str, container: &str, script: &Script, started: f64, streams: &mut Streams) {
    streams.out(format!("kwok-pools: attached to container {container} of pod {pod} (simulated: new log lines follow; input is echoed)\n").as_bytes()).await;
    let mut stdin = streams.stdin.take();
    let deadline = tokio::time::Instant::now() + MOST;
    let closed = streams.closed.clone();
    loop {
        let now = crate::simulator::lifecycle::epoch_now().as_secs_f64();
        let next = script.next_after(started, now).map(|at| Duration::from_secs_f64((at - now).max(0.0)));
        tokio::select! {
            () = tokio::time::sleep(next.unwrap_or(MOST)) => {
                let now = crate::simulator::lifecycle::epoch_now().as_secs_f64();
                if let Some(last) = script.total(started, now).checked_sub(1) {
                    streams.out(format!("{}\n", script.line(last, pod, started).text).as_bytes()).await;
                }
            }
            chunk = async { match stdin.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => match chunk {
                Some(c) => streams.out(&c).await,
                None => return,
            },
            () = closed.cancelled() => return,
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// The v4 status an exec ends with (JSON, on the error stream / channel 3).
pub fn status(exit_code: i32) -> Vec<u8> {
    let v = if exit_code == 0 {
        serde_json::json!({"metadata": {}, "status": "Success"})
    } else {
        serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {exit_code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]}
        })
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What a forwarded port answers: an HTTP 200 naming the pod and port, so tools that probe a
/// port get a well-formed reply.
pub fn port_answer(namespace: &str, pod: &str, port: u16) -> Vec<u8> {
    let body = format!(
        "kwok-pools: pod {namespace}/{pod} port {port} (simulated; nothing listens, this is its typed answer)\n"
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn collect() -> (Write, Arc<Mutex<Vec<u8>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let write: Write = Box::new(move |b: Vec<u8>| {
            g.lock().unwrap().extend_from_slice(&b);
            Box::pin(async {})
        });
        (write, got)
    }

    #[tokio::test]
    async fn exec_answers_then_echoes_stdin_and_a_tty_merges_stderr() {
        let (out, got) = collect();
        let (tx, rx) = mpsc::channel(4);
        let mut s =
            Streams { stdin: Some(rx), stdout: Some(out), stderr: None, tty: true, closed: CancellationToken::new() };
        tx.send(b"typed\n".to_vec()).await.unwrap();
        drop(tx);
        let a = Answer {
            stdout: "cat\n".into(),
            stderr: "warn\n".into(),
            exit_code: 0,
            lasts: Duration::ZERO,
            stdin: Stdin::Echoed,
        };
        assert_eq!(exec(&a, true, &mut s).await, 0);
        assert_eq!(String::from_utf8(got.lock().unwrap().clone()).unwrap(), "cat\nwarn\ntyped\n");
    }

    #[tokio::test]
    async fn echo_waits_for_a_client_that_does_not_read_and_stops_at_its_limit() {
        // A client that never reads: its transport holds one chunk, then the writer waits.
        let (room_tx, mut room_rx) = mpsc::channel::<Vec<u8>>(1);
        let out: Write = Box::new(move |b: Vec<u8>| {
            let tx = room_tx.clone();
            Box::pin(async move {
                let _ = tx.send(b).await;
            })
        });
        let (tx, rx) = mpsc::channel(4);
        let mut s =
            Streams { stdin: Some(rx), stdout: Some(out), stderr: None, tty: true, closed: CancellationToken::new() };
        let session = tokio::spawn(async move { s.echo().await });
        let mut sent = 0usize;
        let feeding = async {
            while tx.send(vec![0u8; 64 * 1024]).await.is_ok() {
                sent += 1;
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(200), feeding).await;
        assert!(sent <= 8, "input stops being read while output waits: {sent} chunks taken");
        // The client reads at last: the echo goes on until the session's limit.
        let drain = tokio::spawn(async move {
            let mut bytes = 0usize;
            while let Some(b) = room_rx.recv().await {
                bytes += b.len();
            }
            bytes
        });
        let chunk = vec![0u8; 1024 * 1024];
        while tx.send(chunk.clone()).await.is_ok() {}
        session.await.unwrap();
        let echoed = drain.await.unwrap();
        assert!(echoed <= ECHO_LIMIT + 256, "at most the limit is echoed: {echoed}");
    }

    #[tokio::test]
    async fn an_interactive_shell_runs_each_line_until_exit() {
        let (out, got) = collect();
        let (tx, rx) = mpsc::channel(4);
        let mut s =
            Streams { stdin: Some(rx), stdout: Some(out), stderr: None, tty: false, closed: CancellationToken::new() };
        tx.send(b"echo one; fal".to_vec()).await.unwrap();
        tx.send(b"se\necho $?\nexit 4\necho never\n".to_vec()).await.unwrap();
        let env = shell::Container::default();
        let a = answer::answer(None, &["sh".to_string()], "p", "c", &env);
        assert_eq!(exec(&a, true, &mut s).await, 4);
        assert_eq!(String::from_utf8(got.lock().unwrap().clone()).unwrap(), "one\n1\n");
    }

    #[test]
    fn statuses_and_port_answers() {
        let ok: serde_json::Value = serde_json::from_slice(&status(0)).unwrap();
        assert_eq!(ok["status"], "Success");
        let bad: serde_json::Value = serde_json::from_slice(&status(3)).unwrap();
        assert_eq!(bad["details"]["causes"][0]["message"], "3");
        assert_eq!(bad["reason"], "NonZeroExitCode");
        let http = String::from_utf8(port_answer("d", "web-0", 8080)).unwrap();
        assert!(http.starts_with("HTTP/1.1 200 OK\r\n") && http.contains("d/web-0 port 8080"));
        let (head, body) = http.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
