//! `/containerLogs`: what a simulated container printed (its pool's `logs` knob, or the pod's
//! `pools.kwok.x-k8s.io/logs` annotation), with the kubelet's options — follow, previous,
//! timestamps, sinceSeconds, sinceTime, tailLines, limitBytes. Following ends when the pod goes.
//! The lines themselves come from the pure [`script`].

pub mod script;

use super::state::{KubeletApi, text};
use crate::api::kubelet::LOGS_ANNOTATION;
use crate::informer::pod::SlimPod;
use crate::simulator::lifecycle::{Knobs, epoch_now};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use script::{Options, Script};
use std::sync::Arc;
use std::time::Duration;

fn secs(t: &k8s_openapi::jiff::Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

/// When the container's current run started.
pub fn started(pod: &SlimPod) -> f64 {
    pod.running_since.as_ref().or(pod.start_time.as_ref()).map_or_else(|| epoch_now().as_secs_f64(), secs)
}

/// What the container prints: the annotation (read from the API server: the store keeps no
/// annotations) or the governing pool's knob.
pub async fn script(api: &KubeletApi, node: &Node, pod: &SlimPod, container: &str) -> Script {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let annotation = match Api::<Pod>::namespaced(api.client.clone(), ns).get_opt(pod.name()).await {
        Ok(Some(p)) => p.metadata.annotations.and_then(|mut a| a.remove(LOGS_ANNOTATION)),
        _ => None,
    };
    let pool = api.lifecycles.pod_knobs(pod, node);
    let knob = pool.as_deref().and_then(Knobs::pods).and_then(|p| p.logs.clone());
    Script::new(knob.as_ref(), annotation.as_deref(), pod.name(), container)
}

/// How many bytes a chunk of the answer holds at most (a huge log streams, never buffers).
const CHUNK: usize = 64 * 1024;

/// The lines `range` of a run from `started`, rendered chunk by chunk as the client reads,
/// stopping at `limit` bytes; what is left of the limit comes back with the last chunk.
struct Lines {
    script: Arc<Script>,
    options: Arc<Options>,
    pod: String,
    started: f64,
    range: std::ops::Range<u64>,
    left: Option<usize>,
}

impl Lines {
    /// The next chunk, if any is left.
    fn next_chunk(&mut self) -> Option<String> {
        let mut chunk = String::new();
        while chunk.len() < CHUNK && self.left != Some(0) {
            let Some(i) = self.range.next() else { break };
            let line = self.options.render(&self.script.line(i, &self.pod, self.started));
            let line = match &mut self.left {
                None => line,
                Some(n) => {
                    let line = script::cut(line, *n);
                    *n -= line.len();
                    line
                }
            };
            chunk.push_str(&line);
        }
        (!chunk.is_empty()).then_some(chunk)
    }
}

pub async fn container_logs(
    api: Arc<KubeletApi>,
    node: Arc<Node>,
    pod: Arc<SlimPod>,
    container: String,
    query: Vec<(String, String)>,
) -> Response {
    let options = match Options::parse(&query) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    if !pod.containers.iter().chain(&pod.init_containers).any(|c| c.name == container) {
        return text(StatusCode::BAD_REQUEST, format!("container {container} is not valid for pod {}", pod.name()));
    }
    if pod.start_time.is_none() || pod.phase() == "Pending" && pod.running_since.is_none() {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container \"{container}\" in pod \"{}\" is waiting to start: ContainerCreating", pod.name()),
        );
    }
    let script = Arc::new(script(&api, &node, &pod, &container).await);
    let now = epoch_now().as_secs_f64();
    let current = started(&pod);
    let (run, end) = if options.previous {
        if pod.restart_count == 0 {
            return text(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{}\" not found", pod.name()),
            );
        }
        // The run before this one: from the pod's start to the current run's start.
        (pod.start_time.as_ref().map_or(current, secs), current.min(now))
    } else {
        (current, now)
    };
    let options = Arc::new(options);
    let head = Lines {
        script: script.clone(),
        options: options.clone(),
        pod: pod.name().to_string(),
        started: run,
        range: script.shown(&options, run, end),
        left: options.limit_bytes,
    };
    if !options.follow || options.previous {
        let chunks = futures::stream::unfold(head, |mut lines| async move {
            lines.next_chunk().map(|c| (Ok::<_, std::io::Error>(c), lines))
        });
        return plain(Body::from_stream(chunks));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(4);
    tokio::spawn(follow(api, pod, head, tx));
    plain(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// Sends `lines`, then each line as it is written, until the pod goes, the client leaves or
/// the byte limit is reached. Lines are made one chunk at a time, as the client takes them.
async fn follow(
    api: Arc<KubeletApi>,
    pod: Arc<SlimPod>,
    mut lines: Lines,
    tx: tokio::sync::mpsc::Sender<Result<String, std::io::Error>>,
) {
    let key = ObjectRef::<SlimPod>::new(pod.name()).within(pod.metadata.namespace.as_deref().unwrap_or_default());
    loop {
        while let Some(chunk) = lines.next_chunk() {
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        if lines.left == Some(0) {
            return;
        }
        let now = epoch_now().as_secs_f64();
        let wait = lines.script.next_after(lines.started, now).map_or(5.0, |at| (at - now).clamp(0.0, 5.0));
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        // Following ends with the pod (or its replacement under the same name).
        if api.pods.get(&key).is_none_or(|p| p.uid() != pod.uid()) {
            return;
        }
        let now = epoch_now().as_secs_f64();
        let end = lines.script.total(lines.started, now);
        lines.range = lines.range.end..end;
    }
}

fn plain(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
