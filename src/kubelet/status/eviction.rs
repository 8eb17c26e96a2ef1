//! The kubelet's eviction manager under node pressure (v1.37 `pkg/kubelet/eviction`), for the
//! pressure conditions a node's knobs make it report: while a node reports `MemoryPressure`,
//! `DiskPressure` or `PIDPressure`, new pods are refused as its admit handler refuses them
//! (only BestEffort pods under memory pressure alone, every pod under the others; reason
//! `Evicted`, "The node had condition: [MemoryPressure]. "), and its running BestEffort pods
//! are evicted one per monitoring interval, Failed with reason `Evicted`. The pressure is a
//! knob, not a reading, so eviction stops at the BestEffort pods: Burstable and Guaranteed pods
//! stay. Pure.

use super::rejection::Rejection;
use crate::informer::pod::SlimPod;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use std::time::Duration;

/// How often the eviction manager looks (and evicts at most one pod).
pub const MONITORING_INTERVAL: Duration = Duration::from_secs(10);

/// The kubelet's reason for evicted and refused pods.
pub const REASON: &str = "Evicted";

/// The pressure conditions `node` reports True, in the kubelet's order.
pub fn pressure(node: &Node) -> Vec<&'static str> {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    ["MemoryPressure", "DiskPressure", "PIDPressure"]
        .into_iter()
        .filter(|t| conditions.iter().any(|c| c.type_ == *t && c.status == "True"))
        .collect()
}

/// Whether a pod is BestEffort (its `status.qosClass`, else no requests or limits at all).
pub fn best_effort(pod: &SlimPod) -> bool {
    match pod.qos_class.as_deref() {
        Some(q) => q == "BestEffort",
        None => pod.containers.iter().chain(&pod.init_containers).all(|c| c.resources.is_none()),
    }
}

/// The eviction manager's answer to a new pod on a node under `pressure` (`None` admits it).
pub fn admit(pod: &SlimPod, pressure: &[&str]) -> Option<Rejection> {
    if pressure.is_empty() {
        return None;
    }
    let tolerates_memory_pressure = pod.shape.as_deref().is_some_and(|s| {
        s.placement.tolerations.iter().any(|t| {
            let key = t.key.as_deref().unwrap_or_default();
            let exists = t.operator.as_deref() == Some("Exists");
            (key.is_empty() && exists) || (key == "node.kubernetes.io/memory-pressure")
        })
    });
    if pressure == ["MemoryPressure"] && (!best_effort(pod) || tolerates_memory_pressure) {
        return None;
    }
    Some(Rejection { reason: REASON.into(), message: format!("The node had condition: [{}]. ", pressure.join(" ")) })
}

/// What the eviction manager reclaims under each condition, and its threshold.
fn reclaimed(condition: &str) -> (&'static str, &'static str) {
    match condition {
        "DiskPressure" => ("ephemeral-storage", "10%"),
        "PIDPressure" => ("pids", "0"),
        _ => ("memory", "100Mi"),
    }
}

/// Whether a pod on a node under `pressure` is the kind the eviction manager evicts here: a
/// running BestEffort pod not being deleted.
pub fn evictable(pod: &SlimPod, pressure: &[&str]) -> bool {
    !pressure.is_empty() && pod.metadata.deletion_timestamp.is_none() && pod.phase() == "Running" && best_effort(pod)
}

/// The eviction of a pod under `pressure` (its first condition): the status patch (Failed,
/// `Evicted`, the kubelet's message, `DisruptionTarget`) and the message for its event.
pub fn evicted(pod: &SlimPod, pressure: &[&str], now: &Value) -> (Value, String) {
    let (resource, threshold) = reclaimed(pressure.first().copied().unwrap_or("MemoryPressure"));
    let mut message =
        format!("The node was low on resource: {resource}. Threshold quantity: {threshold}, available: 0. ");
    if let Some(c) = pod.containers.first() {
        message.push_str(&format!("Container {} was using more {resource} than its request of 0. ", c.name));
    }
    let patch = json!({"status": {
        "phase": "Failed",
        "reason": REASON,
        "message": message,
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": message,
             "lastTransitionTime": now, "lastProbeTime": null},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now, "lastProbeTime": null},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": now, "lastProbeTime": null},
        ],
    }});
    (patch, message)
}

/// Why the kubelet ends a pod on its own: its node's pressure (the eviction manager) or its
/// node's shutdown (the shutdown manager).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Eviction {
    Pressure(Vec<&'static str>),
    Shutdown,
}

impl Eviction {
    /// Whether it ends `pod`: under pressure a running BestEffort pod, in a shutdown every pod
    /// not finished nor being deleted.
    pub fn applies(&self, pod: &SlimPod) -> bool {
        match self {
            Eviction::Pressure(p) => evictable(pod, p),
            Eviction::Shutdown => pod.metadata.deletion_timestamp.is_none(),
        }
    }

    /// The status patch, the event's reason and message.
    pub fn patch(&self, pod: &SlimPod, now: &Value) -> (Value, &'static str, String) {
        match self {
            Eviction::Pressure(p) => {
                let (patch, note) = evicted(pod, p, now);
                (patch, REASON, note)
            }
            Eviction::Shutdown => shut_down(pod, now),
        }
    }
}

/// The kubelet's reason and message for pods its graceful node shutdown ends (v1.37
/// `nodeshutdown` manager), and for pods it refuses meanwhile.
pub const SHUTDOWN_REASON: &str = "Terminated";
pub const SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
pub const SHUTDOWN_REFUSED_REASON: &str = "NodeShutdown";
pub const SHUTDOWN_REFUSED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";

/// A pod on a node that shuts down: Failed, `Terminated`, with `DisruptionTarget`, once it
/// started; refused (`NodeShutdown`) before.
pub fn shut_down(pod: &SlimPod, now: &Value) -> (Value, &'static str, String) {
    let ready = |t: &str| json!({"type": t, "status": "False", "reason": "PodFailed", "lastTransitionTime": now, "lastProbeTime": null});
    if pod.start_time.is_none() && pod.phase() != "Running" {
        let patch = json!({"status": {"phase": "Failed", "reason": SHUTDOWN_REFUSED_REASON, "message": SHUTDOWN_REFUSED_MESSAGE}});
        return (patch, SHUTDOWN_REFUSED_REASON, SHUTDOWN_REFUSED_MESSAGE.to_string());
    }
    let patch = json!({"status": {
        "phase": "Failed",
        "reason": SHUTDOWN_REASON,
        "message": SHUTDOWN_MESSAGE,
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": SHUTDOWN_MESSAGE,
             "lastTransitionTime": now, "lastProbeTime": null},
            ready("Ready"),
            ready("ContainersReady"),
        ],
    }});
    (patch, SHUTDOWN_REASON, SHUTDOWN_MESSAGE.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::fixtures::TestPod;
    use k8s_openapi::api::core::v1::Pod;

    fn node(conditions: &[(&str, &str)]) -> Node {
        let conds: Vec<Value> = conditions.iter().map(|(t, s)| json!({"type": t, "status": s})).collect();
        serde_json::from_value(json!({"metadata": {"name": "n"}, "status": {"conditions": conds}})).unwrap()
    }

    fn burstable() -> SlimPod {
        let mut p = Pod::test("b").on("n");
        p.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(json!({"requests": {"cpu": "100m"}})).unwrap());
        p.slim()
    }

    #[test]
    fn memory_pressure_refuses_best_effort_pods_and_other_pressure_every_pod() {
        let memory = pressure(&node(&[("Ready", "True"), ("MemoryPressure", "True"), ("DiskPressure", "False")]));
        assert_eq!(memory, ["MemoryPressure"]);
        let be = Pod::test("be").on("n").slim();
        let r = admit(&be, &memory).unwrap();
        assert_eq!((r.reason.as_str(), r.message.as_str()), ("Evicted", "The node had condition: [MemoryPressure]. "));
        assert_eq!(admit(&burstable(), &memory), None);
        let tolerant = Pod::test("t").on("n");
        let mut tolerant = tolerant;
        tolerant.spec.as_mut().unwrap().tolerations = Some(vec![
            serde_json::from_value(
                json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
            )
            .unwrap(),
        ]);
        assert_eq!(admit(&tolerant.slim(), &memory), None, "a BestEffort pod that tolerates the taint");
        let disk = pressure(&node(&[("DiskPressure", "True")]));
        assert_eq!(admit(&burstable(), &disk).unwrap().message, "The node had condition: [DiskPressure]. ");
        assert_eq!(admit(&be, &[]), None);
    }

    #[test]
    fn running_best_effort_pods_are_evicted_with_the_kubelets_reason() {
        let memory = ["MemoryPressure"];
        let running = Pod::test("be").on("n").phase("Running").slim();
        assert!(evictable(&running, &memory));
        assert!(!evictable(&running, &[]));
        let mut b = burstable();
        b.phase = Some("Running".into());
        assert!(!evictable(&b, &memory), "Burstable pods stay");
        let (patch, message) = evicted(&running, &memory, &json!("t"));
        assert_eq!(
            (patch["status"]["phase"].as_str(), patch["status"]["reason"].as_str()),
            (Some("Failed"), Some("Evicted"))
        );
        assert!(message.starts_with("The node was low on resource: memory. Threshold quantity: 100Mi"), "{message}");
        assert_eq!(patch["status"]["conditions"][0]["type"], "DisruptionTarget");
    }

    #[test]
    fn a_shutdown_ends_every_pod_as_the_kubelets_shutdown_manager_does() {
        let running = burstable_running();
        assert!(Eviction::Shutdown.applies(&running), "Burstable pods too, unlike pressure");
        let (patch, reason, message) = Eviction::Shutdown.patch(&running, &json!("t"));
        assert_eq!(
            (reason, message.as_str()),
            ("Terminated", "Pod was terminated in response to imminent node shutdown.")
        );
        assert_eq!(patch["status"]["phase"], "Failed");
        assert_eq!(patch["status"]["reason"], "Terminated");
        assert_eq!(patch["status"]["conditions"][0]["reason"], "TerminationByKubelet");
        let pending = Pod::test("p").on("n").slim();
        let (patch, reason, _) = shut_down(&pending, &json!("t"));
        assert_eq!(
            (reason, patch["status"]["message"].as_str()),
            ("NodeShutdown", Some("Pod was rejected as the node is shutting down."))
        );
        let mut deleted = Pod::test("d").on("n").phase("Running");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(!Eviction::Shutdown.applies(&deleted.slim()), "a pod being deleted goes its own way");
    }

    fn burstable_running() -> SlimPod {
        let mut b = burstable();
        b.phase = Some("Running".into());
        b
    }
}
