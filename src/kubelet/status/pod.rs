//! What a kubelet's pod status says: readiness, phase and addresses, as the pool controllers
//! and the simulator both read them. Pure.

use crate::api::annotations::Failure;
use crate::informer::pod::SlimPod;
use std::net::IpAddr;

/// Whether every readiness gate of the pod has its condition True.
pub fn gates_ready(pod: &SlimPod) -> bool {
    pod.readiness_gates.iter().all(|g| pod.condition(g) == Some("True"))
}

pub fn phase(pod: &SlimPod) -> &str {
    pod.phase()
}

/// Whether the pod reached a terminal phase (Succeeded or Failed).
pub fn is_terminal(pod: &SlimPod) -> bool {
    matches!(pod.phase(), "Succeeded" | "Failed")
}

pub fn is_ready(pod: &SlimPod) -> bool {
    pod.condition("Ready") == Some("True")
}

pub fn host_network(pod: &SlimPod) -> bool {
    pod.host_network
}

pub fn pod_ips(pod: &SlimPod) -> Vec<IpAddr> {
    pod.pod_ips.clone()
}

/// Whether the pod already looks the way the simulator makes running pods look.
pub fn is_running(pod: &SlimPod) -> bool {
    pod.phase() == "Running" && (pod.host_network || !pod.pod_ips.is_empty()) && pod.condition("Initialized").is_some()
}

/// How a failing container exits, as its status shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Exit {
    pub code: i32,
    pub reason: String,
    pub message: Option<String>,
    /// The container that fails (`None`: every one).
    pub container: Option<String>,
    /// Its liveness probe failed and the kubelet killed it (`Unhealthy` and `Killing` events).
    pub liveness: bool,
}

impl Exit {
    /// A plain failure: `code`, reason `Error`, every container.
    pub fn error(code: i32) -> Self {
        Exit { code, reason: "Error".into(), message: None, container: None, liveness: false }
    }

    /// The kernel's OOM kill: exit 137, reason `OOMKilled`.
    pub fn oom_killed() -> Self {
        Exit { code: 137, reason: "OOMKilled".into(), message: None, container: None, liveness: false }
    }

    /// The kubelet killed `container` because its liveness probe failed: SIGTERM (exit 143),
    /// or SIGKILL at the end of the grace period for a process that ignores it (137).
    pub fn liveness_killed(container: String, ignores_sigterm: bool) -> Self {
        let code = if ignores_sigterm { 137 } else { 143 };
        Exit { container: Some(container), liveness: true, ..Exit::error(code) }
    }

    /// What a pod's annotation says.
    pub fn from_failure(f: &Failure) -> Self {
        Exit {
            code: f.exit_code,
            reason: f.reason.clone(),
            message: f.message.clone(),
            container: f.container.clone(),
            liveness: false,
        }
    }

    /// Whether `container` is one that fails.
    pub fn hits(&self, container: &str) -> bool {
        self.container.as_deref().is_none_or(|c| c == container)
    }
}

/// Whether something keeps the pod after its final delete: a finalizer, such as the tracking
/// finalizer of a Job's pods, whose controller then reads the pod's last status.
fn outlives_final_delete(pod: &SlimPod) -> bool {
    pod.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty())
}

/// Whether a deleted pod whose containers stopped has its terminal status (phase, terminated
/// containers) written before the final delete, given the simulator's write `pressure` (0 to
/// 1). The kubelet always writes it. The simulator leaves it out while its writes queue behind
/// a saturated API server, for a pod nothing keeps after the final delete — that pod is gone
/// a moment later whatever its status said, and the write would cost the workload a third of
/// a delete's writes (kwok's delete stage never writes it). A pod that outlives the final
/// delete always gets it: its controller judges it by that status (`podFailurePolicy`,
/// `podReplacementPolicy: Failed`).
pub fn reports_termination(pod: &SlimPod, pressure: f64) -> bool {
    outlives_final_delete(pod) || pressure <= 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn deleted(finalizers: &[&str]) -> SlimPod {
        let mut pod = Pod::default();
        pod.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
        SlimPod::from(pod)
    }

    #[test]
    fn a_deleted_pod_reports_its_end_unless_writes_queue_and_nothing_keeps_it() {
        let plain = deleted(&[]);
        let job = deleted(&["batch.kubernetes.io/job-tracking"]);
        assert!(reports_termination(&plain, 0.0), "with room, as the kubelet does");
        assert!(!reports_termination(&plain, 0.3), "writes queue: straight to the final delete");
        assert!(!reports_termination(&plain, 1.0));
        assert!(reports_termination(&job, 1.0), "a Job's pod outlives the delete: its controller reads the status");
        assert!(!outlives_final_delete(&plain), "an empty list keeps nothing");
    }
}
