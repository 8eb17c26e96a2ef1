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
    let pool = api.lifecycles.pod_pool(pod, node);
    let knob = pool.as_deref().and_then(Knobs::pods).and_then(|p| p.logs.clone());
    Script::new(knob.as_ref(), annotation.as_deref(), pod.name(), container)
}

fn limited(text: String, left: &mut Option<usize>) -> String {
    match left {
        None => text,
        Some(n) => {
            let mut cut = text.len().min(*n);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            *n -= cut;
            text[..cut].to_string()
        }
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
    let script = script(&api, &node, &pod, &container).await;
    let now = epoch_now().as_secs_f64();
    let current = started(&pod);
    let lines = if options.previous {
        if pod.restart_count == 0 {
            return text(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{}\" not found", pod.name()),
            );
        }
        // The run before this one: from the pod's start to the current run's start.
        let before = pod.start_time.as_ref().map_or(current, secs);
        script.until(pod.name(), before, current.min(now))
    } else {
        script.until(pod.name(), current, now)
    };
    let mut left = options.limit_bytes;
    let head: String = options.select(lines, now).iter().map(|l| options.render(l)).collect();
    let head = limited(head, &mut left);
    if !options.follow || options.previous {
        return plain(Body::from(head));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(16);
    tokio::spawn(async move {
        if tx.send(Ok(head)).await.is_err() {
            return;
        }
        let key = ObjectRef::<SlimPod>::new(pod.name()).within(pod.metadata.namespace.as_deref().unwrap_or_default());
        let mut shown = now;
        loop {
            let now = epoch_now().as_secs_f64();
            let wait = script.next_after(current, now).map_or(5.0, |at| (at - now).clamp(0.0, 5.0));
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            // Following ends with the pod (or its replacement under the same name).
            if api.pods.get(&key).is_none_or(|p| p.uid() != pod.uid()) {
                return;
            }
            let now = epoch_now().as_secs_f64();
            let new: String = script
                .until(pod.name(), current, now)
                .iter()
                .filter(|l| l.at > shown && l.at <= now)
                .map(|l| options.render(l))
                .collect();
            shown = now;
            if new.is_empty() {
                continue;
            }
            let new = limited(new, &mut left);
            if tx.send(Ok(new)).await.is_err() || left == Some(0) {
                return;
            }
        }
    });
    plain(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

fn plain(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
