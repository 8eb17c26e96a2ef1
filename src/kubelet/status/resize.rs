//! In-place pod resize, answered as the kubelet (v1.37) answers it. Pure: given the pod after
//! a `resize`, its node's allocatable and the other pods on the node, either the resize fits
//! (each container's `allocatedResources` and `resources` take the new values, the resize
//! conditions go) or it is Deferred (`PodResizePending`, with the kubelet's message) until room
//! comes free (with the kubelet's default feature gates and managers no resize is Infeasible
//! in v1.37: one larger than the node is Deferred too; the API server itself refuses a resize
//! on a Windows node). Either way `status.observedGeneration` says the kubelet saw the change.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The resources the kubelet's admission weighs, in its order, with how it counts them
/// (millicores for CPU, bytes for the rest).
const WEIGHED: [(&str, f64); 3] = [("cpu", 1000.0), ("memory", 1.0), ("ephemeral-storage", 1.0)];

/// How a resize went.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// It fits: the status patch that reports it done.
    Fits(Value),
    /// No room now: the status patch with `PodResizePending` (Deferred), and its message.
    Deferred(Value, String),
}

/// The status patch of a pending resize (`reason`: Deferred).
fn pending(generation: i64, reason: &str, message: &str, now: &Value) -> Value {
    json!({"status": {
        "observedGeneration": generation,
        "conditions": [{
            "type": "PodResizePending", "status": "True", "reason": reason, "message": message,
            "observedGeneration": generation, "lastProbeTime": null, "lastTransitionTime": now,
        }],
    }})
}

fn amount(q: Option<&Quantity>, scale: f64) -> i64 {
    q.and_then(|q| crate::api::validation::quantity::approximate(&q.0)).map_or(0, |v| (v * scale).ceil() as i64)
}

fn requests(c: &Container) -> BTreeMap<String, Quantity> {
    c.resources.as_ref().and_then(|r| r.requests.clone()).unwrap_or_default()
}

/// What `pod` holds of `resource` on its node: its containers' requests (for a pod being
/// resized elsewhere, the larger of what it asks and what it was given).
fn held(pod: &Pod, resource: &str, scale: f64) -> i64 {
    let Some(spec) = pod.spec.as_ref() else { return 0 };
    let given: BTreeMap<&str, i64> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.name.as_str(), amount(c.allocated_resources.as_ref().and_then(|a| a.get(resource)), scale)))
        .collect();
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .map(|c| amount(requests(c).get(resource), scale).max(given.get(c.name.as_str()).copied().unwrap_or(0)))
        .sum()
}

/// Whether a pod still holds resources on its node (not ended).
fn holds_resources(pod: &Pod) -> bool {
    !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The answer to `pod`'s resize on a node with `allocatable`, beside `others` (the node's
/// other pods).
pub fn decide(pod: &Pod, allocatable: &BTreeMap<String, Quantity>, others: &[Pod], now: &Value) -> Decision {
    let generation = pod.metadata.generation.unwrap_or(1);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    for (resource, scale) in WEIGHED {
        let Some(capacity) = allocatable.get(resource).map(|q| amount(Some(q), scale)) else { continue };
        let requested: i64 = containers.iter().map(|c| amount(requests(c).get(resource), scale)).sum();
        if requested == 0 {
            continue;
        }
        let used: i64 = others
            .iter()
            .filter(|p| p.metadata.uid.as_deref() != Some(uid) && holds_resources(p))
            .map(|p| held(p, resource, scale))
            .sum();
        if requested + used > capacity {
            let message = format!(
                "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
            );
            let patch = pending(generation, "Deferred", &message, now);
            return Decision::Deferred(patch, message);
        }
    }
    let mut statuses: Vec<Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        .collect();
    for status in &mut statuses {
        let Some(c) = containers.iter().find(|c| Some(c.name.as_str()) == status["name"].as_str()) else { continue };
        let resources = c.resources.clone().unwrap_or_default();
        status["allocatedResources"] = json!(resources.requests.clone().unwrap_or_default());
        status["resources"] = json!({
            "requests": resources.requests.unwrap_or_default(),
            "limits": resources.limits.unwrap_or_default(),
        });
    }
    Decision::Fits(json!({"status": {
        "observedGeneration": generation,
        "containerStatuses": statuses,
        "conditions": [
            {"type": "PodResizePending", "$patch": "delete"},
            {"type": "PodResizeInProgress", "$patch": "delete"},
        ],
    }}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, cpu: &str, given_cpu: Option<&str>, phase: &str) -> Pod {
        let mut status = json!({"phase": phase, "containerStatuses": [{
            "name": "app", "image": "nginx", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }]});
        if let Some(g) = given_cpu {
            status["containerStatuses"][0]["allocatedResources"] = json!({"cpu": g});
        }
        serde_json::from_value(json!({
            "metadata": {"name": uid, "uid": uid, "generation": 3},
            "spec": {"containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]},
            "status": status,
        }))
        .unwrap()
    }

    fn node(cpu: &str) -> BTreeMap<String, Quantity> {
        [("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity("8Gi".into()))].into()
    }

    #[test]
    fn a_resize_that_fits_is_reported_done() {
        let me = pod("a", "1500m", Some("500m"), "Running");
        let others = [pod("b", "2", None, "Running"), pod("c", "3", None, "Succeeded")];
        let Decision::Fits(patch) = decide(&me, &node("4"), &others, &json!("now")) else {
            panic!("fits: 1.5 + 2 of 4")
        };
        let s = &patch["status"];
        assert_eq!(s["observedGeneration"], 3);
        let c = &s["containerStatuses"][0];
        assert_eq!(c["allocatedResources"]["cpu"], "1500m");
        assert_eq!(c["resources"]["requests"]["cpu"], "1500m");
        assert_eq!(c["resources"]["limits"]["memory"], "128Mi");
        assert_eq!(c["state"]["running"]["startedAt"], "2026-01-01T00:00:00Z", "the rest of the status stays");
        assert_eq!(s["conditions"][0], json!({"type": "PodResizePending", "$patch": "delete"}));
    }

    #[test]
    fn a_resize_without_room_is_deferred_with_the_kubelets_message() {
        let me = pod("a", "3", Some("1"), "Running");
        let others = [pod("b", "1", Some("1500m"), "Running")];
        let Decision::Deferred(patch, message) = decide(&me, &node("4"), &others, &json!("now")) else {
            panic!("3 + 1.5 > 4")
        };
        assert_eq!(message, "Node didn't have enough resource: cpu, requested: 3000, used: 1500, capacity: 4000");
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["reason"].as_str(), c["observedGeneration"].as_i64()),
            (Some("PodResizePending"), Some("Deferred"), Some(3))
        );
        assert!(patch["status"].get("containerStatuses").is_none(), "what was given stays");
        let big = pod("a", "5", Some("1"), "Running");
        let Decision::Deferred(_, m) = decide(&big, &node("4"), &[], &json!("now")) else { panic!() };
        assert!(m.contains("requested: 5000, used: 0, capacity: 4000"), "{m}");
    }
}
