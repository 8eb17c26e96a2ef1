//! Exec, attach and port-forward over SPDY/3.1, as the API server speaks them to a kubelet
//! (kubectl talks WebSocket to the API server, which opens SPDY streams here): the upgrade
//! with the negotiated `X-Stream-Protocol-Version`, the streams named by their `streamType`
//! header, the exit status as a v4 JSON Status on the error stream. The protocol's framing is
//! [`framing`].

pub mod framing;

use super::exec::{self, Streams};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use framing::Stream;
use std::collections::HashMap;
use std::time::Duration;

/// The exec/attach protocols a kubelet speaks over SPDY, best first.
pub const EXEC_PROTOCOLS: [&str; 4] = ["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];
pub const PORT_FORWARD_PROTOCOLS: [&str; 1] = ["portforward.k8s.io"];
/// How long the client has to open its streams (the kubelet's streamCreationTimeout).
const STREAMS_WITHIN: Duration = Duration::from_secs(30);

/// The first protocol of `supported` the client offers (`X-Stream-Protocol-Version`, repeated
/// or comma-separated).
pub fn negotiate(headers: &HeaderMap, supported: &[&'static str]) -> Option<&'static str> {
    let offered: Vec<String> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .collect();
    if offered.is_empty() {
        // A client that names none gets the oldest (as the kubelet does).
        return supported.last().copied();
    }
    supported.iter().find(|p| offered.iter().any(|o| o == *p)).copied()
}

/// Whether the request asks for SPDY.
pub fn wants_spdy(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"))
}

/// The 101 that switches to SPDY with `protocol`.
pub fn switching(protocol: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert("x-stream-protocol-version", HeaderValue::from_static(protocol));
    r
}

/// Which streams an exec or attach request asks for (its query).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Asked {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Asked {
    pub fn from_query(query: &[(String, String)]) -> Self {
        let on = |k: &str| query.iter().any(|(n, v)| n == k && (v == "1" || v == "true"));
        // `error` is the stderr flag in the kubelet's query.
        let tty = on("tty");
        Self { stdin: on("input"), stdout: on("output"), stderr: on("error") && !tty, tty }
    }

    /// Streams the client opens: error, and each one asked for (and resize with a tty).
    fn count(&self) -> usize {
        1 + usize::from(self.stdin) + usize::from(self.stdout) + usize::from(self.stderr) + usize::from(self.tty)
    }
}

fn writer(s: &Stream) -> exec::Write {
    let out = s.outbound();
    Box::new(move |b: Vec<u8>| {
        let out = out.clone();
        Box::pin(async move {
            out.write(&b).await;
        })
    })
}

/// Collects the client's streams, runs `run` on them, writes the status and closes them.
pub async fn exec<IO, F, Fut>(io: IO, protocol: &'static str, asked: Asked, run: F)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    F: FnOnce(Streams) -> Fut,
    Fut: Future<Output = i32>,
{
    let mut incoming = framing::session(io);
    let mut by_type: HashMap<String, Stream> = HashMap::new();
    let collected = tokio::time::timeout(STREAMS_WITHIN, async {
        while by_type.len() < asked.count() {
            let Some(s) = incoming.recv().await else { return false };
            let kind = s.header("streamtype").unwrap_or_default().to_string();
            by_type.insert(kind, s);
        }
        true
    })
    .await
    .unwrap_or(false);
    let Some(error) = by_type.remove("error") else { return };
    if !collected {
        error.outbound().write(b"timed out waiting for the client to create streams").await;
        error.outbound().finish().await;
        return;
    }
    let outs: Vec<_> = ["stdout", "stderr"].iter().filter_map(|k| by_type.get(*k).map(Stream::outbound)).collect();
    let stdin = by_type.remove("stdin").map(|s| s.inbound);
    // A resize stream is read and ignored (there is no terminal).
    if let Some(mut resize) = by_type.remove("resize") {
        tokio::spawn(async move { while resize.inbound.recv().await.is_some() {} });
    }
    // The connection's end (the client read the status and closed, or went away).
    let closed = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let closed = closed.clone();
        tokio::spawn(async move {
            while incoming.recv().await.is_some() {}
            closed.cancel();
        })
    };
    let streams = Streams {
        stdin,
        stdout: by_type.get("stdout").map(writer),
        stderr: by_type.get("stderr").map(writer),
        tty: asked.tty,
        closed,
    };
    let code = run(streams).await;
    let status = if protocol == EXEC_PROTOCOLS[0] {
        exec::status(code)
    } else if code != 0 {
        format!("command terminated with non-zero exit code: exit status {code}").into_bytes()
    } else {
        Vec::new()
    };
    for o in &outs {
        o.finish().await;
    }
    let e = error.outbound();
    if !status.is_empty() {
        e.write(&status).await;
    }
    e.finish().await;
    // The connection stays until the client, having read the status, closes it.
    drop(by_type);
    let _ = watcher.await;
}

/// Answers every (error, data) stream pair the client opens with the pod's typed answer.
pub async fn port_forward<IO>(io: IO, namespace: String, pod: String)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let mut incoming = framing::session(io);
    let mut errors: HashMap<String, Stream> = HashMap::new();
    let mut data: HashMap<String, Stream> = HashMap::new();
    while let Some(s) = incoming.recv().await {
        let id = s.header("requestid").unwrap_or_default().to_string();
        match s.header("streamtype") {
            // Streams waiting for their pair are bounded: a client that opens only halves gets
            // the rest reset.
            Some(_) if errors.len() + data.len() >= framing::MAX_STREAMS => {
                s.outbound().reset().await;
                continue;
            }
            Some("error") => {
                errors.insert(id.clone(), s);
            }
            Some("data") => {
                data.insert(id.clone(), s);
            }
            _ => continue,
        }
        if errors.contains_key(&id)
            && data.contains_key(&id)
            && let (Some(e), Some(d)) = (errors.remove(&id), data.remove(&id))
        {
            tokio::spawn(answer_port(e, d, namespace.clone(), pod.clone()));
        }
    }
}

async fn answer_port(error: Stream, mut data: Stream, namespace: String, pod: String) {
    let port = data.header("port").and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0);
    let Some(port) = port else {
        let raw = data.header("port").unwrap_or_default().to_string();
        error.outbound().write(format!("invalid port {raw:?}: a port is a number from 1 to 65535").as_bytes()).await;
        error.outbound().finish().await;
        data.outbound().finish().await;
        return;
    };
    // The answer goes out once the client has spoken (or closed its side).
    let _ = tokio::time::timeout(Duration::from_secs(30), data.inbound.recv()).await;
    let out = data.outbound();
    out.write(&exec::port_answer(&namespace, &pod, port)).await;
    out.finish().await;
    error.outbound().finish().await;
    // Drain whatever else the client sends on it.
    while data.inbound.recv().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_protocol_both_speak() {
        let mut h = HeaderMap::new();
        h.append("x-stream-protocol-version", HeaderValue::from_static("v5.channel.k8s.io"));
        h.append("x-stream-protocol-version", HeaderValue::from_static("v4.channel.k8s.io, v3.channel.k8s.io"));
        assert_eq!(negotiate(&h, &EXEC_PROTOCOLS), Some("v4.channel.k8s.io"));
        let mut old = HeaderMap::new();
        old.append("x-stream-protocol-version", HeaderValue::from_static("v9.channel.k8s.io"));
        assert_eq!(negotiate(&old, &EXEC_PROTOCOLS), None);
        assert_eq!(negotiate(&HeaderMap::new(), &PORT_FORWARD_PROTOCOLS), Some("portforward.k8s.io"));
    }

    #[test]
    fn the_query_says_which_streams() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        let a = Asked::from_query(&q(&[("command", "ls"), ("output", "1"), ("error", "1")]));
        assert_eq!(a, Asked { stdin: false, stdout: true, stderr: true, tty: false });
        assert_eq!(a.count(), 3);
        let t = Asked::from_query(&q(&[("input", "1"), ("output", "1"), ("error", "1"), ("tty", "1")]));
        assert_eq!((t.stderr, t.count()), (false, 4), "a terminal has no stderr stream but a resize stream");
    }
}
