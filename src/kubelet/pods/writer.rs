//! The pod worker's writes, sent once the write budget has room: a status patch, the answer to
//! an in-place resize, the final delete. Each reports back on the worker's channel.

use super::{Done, PodSimulator};
use crate::informer::pod::SlimPod;
use crate::kubelet::recorder::KubeletRecorder;
use crate::kubelet::status::resize::{self, Decision};
use crate::simulator::machinery::{object_gone, status_patch};
use crate::telemetry::metrics::ResultLabels;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use std::sync::Arc;

/// Writes a pod's status transition; the UID makes the API server refuse the write if the pod
/// was replaced meanwhile by another of the same name (a pool reuses names).
pub async fn status(
    sim: Arc<PodSimulator>,
    pod: Arc<SlimPod>,
    patch: serde_json::Value,
    transition: &'static str,
) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let result = status_patch(&api, &pod.name_any(), pod.uid(), patch).await;
    let ok = result.is_ok();
    sim.metrics.write("pods", "patch-status", ok);
    sim.metrics.pod_transitions.get_or_create(&ResultLabels { result: transition.into() }).inc();
    // Gone or replaced: nothing to retry for this pod.
    let gone = object_gone(&result);
    if let Err(e) = &result
        && !gone
    {
        tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "pod status write failed; will retry");
    }
    Done::after(&pod, ok || gone, false)
}

/// Answers a pod's in-place resize as the kubelet does: it fits beside the node's other pods
/// (done at once) or it is Deferred until room comes free.
pub async fn resize(sim: Arc<PodSimulator>, pod: Arc<SlimPod>, node: Arc<Node>, recorder: KubeletRecorder) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let full = match api.get_opt(pod.name()).await {
        Ok(Some(p)) if p.metadata.uid.as_deref() == Some(pod.uid()) => p,
        Ok(_) => return Done::after(&pod, true, false),
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "reading a resized pod failed; will retry");
            return Done::after(&pod, false, false);
        }
    };
    let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={}", node.name_any()));
    let others = match Api::<Pod>::all(sim.client.clone()).list(&on_node).await {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(node = %node.name_any(), error = %e, "listing a node's pods for a resize failed; will retry");
            return Done::after(&pod, false, false);
        }
    };
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let now = sim.config.clock.now().value();
    let shown = full
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodResizePending").and_then(|c| c.message.clone()));
    let decision = resize::decide(&full, &allocatable, &others, &now);
    if let Decision::Deferred(_, message) = &decision
        && shown.as_deref() == Some(message.as_str())
        && full.status.as_ref().and_then(|s| s.observed_generation) == full.metadata.generation
    {
        return Done::after(&pod, true, false); // still pending for the same reason: nothing to write
    }
    let (patch, event) = match decision {
        Decision::Fits(patch) => {
            let note = format!("Pod resize completed (generation {})", full.metadata.generation.unwrap_or(1));
            (patch, Some((EventType::Normal, "ResizeCompleted", note)))
        }
        Decision::Deferred(patch, message) => {
            let event = (shown.as_deref() != Some(message.as_str()))
                .then(|| (EventType::Warning, "ResizeDeferred", format!("Pod resize Deferred: {message}")));
            (patch, event)
        }
    };
    let done = status(sim, pod.clone(), patch, "resize").await;
    if let (Done::Write { ok: true, .. }, Some((type_, reason, note))) = (&done, event) {
        let ev = Event { type_, reason: reason.into(), note: Some(note), action: "Resize".into(), secondary: None };
        if let Err(e) = recorder.publish(&ev, &pod.object_ref(&())).await {
            tracing::debug!(error = %e, "event not published");
        }
    }
    done
}

/// Removes a terminated pod (grace 0, on its UID), as the kubelet's final delete does.
pub async fn remove(sim: Arc<PodSimulator>, pod: Arc<SlimPod>) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    let result = api.delete(&pod.name_any(), &dp).await;
    let ok = match &result {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "removing a terminated pod failed");
            false
        }
    };
    sim.metrics.write("pods", "delete", ok);
    Done::after(&pod, ok, ok)
}
