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
}

impl Exit {
    /// A plain failure: `code`, reason `Error`, every container.
    pub fn error(code: i32) -> Self {
        Exit { code, reason: "Error".into(), message: None, container: None }
    }

    /// The kernel's OOM kill: exit 137, reason `OOMKilled`.
    pub fn oom_killed() -> Self {
        Exit { code: 137, reason: "OOMKilled".into(), message: None, container: None }
    }

    /// What a pod's annotation says.
    pub fn from_failure(f: &Failure) -> Self {
        Exit { code: f.exit_code, reason: f.reason.clone(), message: f.message.clone(), container: f.container.clone() }
    }

    /// Whether `container` is one that fails.
    pub fn hits(&self, container: &str) -> bool {
        self.container.as_deref().is_none_or(|c| c == container)
    }
}
