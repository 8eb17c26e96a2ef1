//! What the kubelet's admission reads of a pod's spec besides its containers' requests, as the
//! pod store keeps it (see [`crate::kubelet::status::admission`]).

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PodSpec, Toleration};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

/// What of a pod's spec its admission reads beside its containers' requests, kept by the store
/// as shared JSON (most pods of a template ask the same): its node selector, required node
/// affinity, tolerations and host ports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_terms: Vec<NodeSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// (hostPort, protocol, hostIP) of each container port with a host port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<(i32, String, String)>,
}

impl Placement {
    /// What admission reads of `spec` (`None`: nothing to check beyond resources).
    pub fn of(spec: &PodSpec) -> Option<Self> {
        let required_terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|r| r.node_selector_terms.clone())
            .unwrap_or_default();
        let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
        let host_ports = containers
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.is_some_and(|h| h > 0))
            .map(|p| {
                let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                (p.host_port.unwrap_or(0), protocol, p.host_ip.clone().unwrap_or_default())
            })
            .collect();
        let p = Placement {
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_terms,
            // Only tolerations that can tolerate NoExecute matter to the kubelet.
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .filter(|t| t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoExecute"))
                .cloned()
                .collect(),
            host_ports,
        };
        (p != Placement::default()).then_some(p)
    }
}

/// One shared copy of each placement JSON seen (few distinct shapes in a cluster), behind a
/// thin pointer.
/// thin pointer. Shapes no pod holds any more are dropped whenever the set has doubled since
/// the last sweep (a DaemonSet's pods each name their node: many shapes come and go).
#[allow(clippy::rc_buffer)]
pub fn interned(json: String) -> Arc<String> {
    struct Seen {
        set: HashSet<Arc<String>>,
        sweep_at: usize,
    }
    static SEEN: LazyLock<Mutex<Seen>> = LazyLock::new(|| Mutex::new(Seen { set: HashSet::new(), sweep_at: 1024 }));
    let mut seen = crate::sync::lock(&SEEN);
    if let Some(hit) = seen.set.get(&json) {
        return hit.clone();
    }
    let shared = Arc::new(json);
    seen.set.insert(shared.clone());
    if seen.set.len() >= seen.sweep_at {
        seen.set.retain(|s| Arc::strong_count(s) > 1);
        seen.sweep_at = (seen.set.len() * 2).max(1024);
    }
    shared
}
