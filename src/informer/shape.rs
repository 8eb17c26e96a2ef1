//! What the simulated kubelet reads of a pod's spec now and then beyond its containers, as the
//! pod store keeps it: one shared [`Shape`] per distinct spec shape (most pods of a template
//! share one) — where it may run ([`Placement`], for the kubelet's admission) and how long its
//! probes keep it from being started and Ready ([`Probes`]).

use k8s_openapi::api::core::v1::{Container, NodeSelectorTerm, PodSpec, Probe, Toleration};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// What a stored pod shares with the pods shaped like it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Shape {
    pub placement: Placement,
    pub probes: Probes,
}

impl Shape {
    /// The shape of `spec` (`None`: nothing in it beyond the defaults).
    pub fn of(spec: &PodSpec) -> Option<Self> {
        let shape = Shape { placement: Placement::of(spec).unwrap_or_default(), probes: Probes::of(spec) };
        (shape != Shape::default()).then_some(shape)
    }
}

/// How long after its containers start the pod's probes hold it back, as the kubelet's probe
/// workers time them: a startup probe's first success at its `initialDelaySeconds` (the
/// containers are not `started` until then, and no readiness probe runs before), a readiness
/// probe's first success at its `initialDelaySeconds` (not before the startup probe's) and
/// `successThreshold - 1` periods more. The slowest container sets the pod's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Probes {
    /// Until the containers are started (startup probes).
    pub started_after: Duration,
    /// Until the pod may be Ready (readiness probes, after the startup probes).
    pub ready_after: Duration,
    /// How often each kind of probe runs, for the pods that have one (the first container's).
    pub readiness_every: Option<Duration>,
    pub liveness_every: Option<Duration>,
    pub startup_every: Option<Duration>,
    /// The first container with a liveness probe (its index among the pod's containers), and
    /// how that probe kills it once it starts failing: not before its initial delay, then
    /// `failureThreshold` periods of failures.
    #[serde(default)]
    pub liveness: Option<Liveness>,
}

/// How a container's liveness probe times a kill.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Liveness {
    pub container: u16,
    pub initial_delay: Duration,
    /// `periodSeconds × failureThreshold`: from the first failure to the kill.
    pub kill_after: Duration,
    pub failure_threshold: u32,
}

impl Liveness {
    /// When a container whose probe starts failing `failing_from` after it started is killed.
    pub fn kill_at(&self, failing_from: Duration) -> Duration {
        failing_from.max(self.initial_delay) + self.kill_after
    }
}

impl Probes {
    pub fn of(spec: &PodSpec) -> Self {
        let secs = |v: Option<i32>, default: i32| Duration::from_secs(v.unwrap_or(default).max(0) as u64);
        let first_success = |p: &Probe| {
            let period = secs(p.period_seconds, 10);
            secs(p.initial_delay_seconds, 0) + period * (p.success_threshold.unwrap_or(1).max(1) as u32 - 1)
        };
        let one = |c: &Container| {
            let started = c.startup_probe.as_ref().map_or(Duration::ZERO, |p| secs(p.initial_delay_seconds, 0));
            let ready = c.readiness_probe.as_ref().map_or(started, |p| first_success(p).max(started));
            (started, ready)
        };
        let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let every = |probe: fn(&Container) -> Option<&Probe>| {
            spec.containers.iter().find_map(probe).map(|p| secs(p.period_seconds, 10).max(Duration::from_secs(1)))
        };
        let folded = spec
            .containers
            .iter()
            .chain(sidecars)
            .map(one)
            .fold((Duration::ZERO, Duration::ZERO), |acc, (s, r)| (acc.0.max(s), acc.1.max(r)));
        Probes {
            started_after: folded.0,
            ready_after: folded.1,
            readiness_every: every(|c| c.readiness_probe.as_ref()),
            liveness_every: every(|c| c.liveness_probe.as_ref()),
            startup_every: every(|c| c.startup_probe.as_ref()),
            liveness: spec.containers.iter().enumerate().find_map(|(i, c)| {
                let p = c.liveness_probe.as_ref()?;
                let failure_threshold = p.failure_threshold.unwrap_or(3).max(1) as u32;
                Some(Liveness {
                    container: u16::try_from(i).ok()?,
                    initial_delay: secs(p.initial_delay_seconds, 0),
                    kill_after: secs(p.period_seconds, 10).max(Duration::from_secs(1)) * failure_threshold,
                    failure_threshold,
                })
            }),
        }
    }
}

/// What of a pod's spec its admission reads beside its containers' requests: its node
/// selector, required node affinity, tolerations and host ports.
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
            // Only tolerations that can tolerate NoExecute matter to the kubelet (and the memory
            // pressure taint's, which its eviction manager reads).
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .filter(|t| {
                    t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoExecute")
                        || t.key.as_deref() == Some("node.kubernetes.io/memory-pressure")
                })
                .cloned()
                .collect(),
            host_ports,
        };
        (p != Placement::default()).then_some(p)
    }
}

/// One shared copy of each shape seen (few distinct ones in a cluster), behind a thin pointer.
/// Shapes no pod holds any more are dropped whenever the set has doubled since the last sweep
/// (a DaemonSet's pods each name their node: many shapes come and go).
pub fn interned(shape: Shape) -> Arc<Shape> {
    struct Seen {
        by_json: HashMap<String, Arc<Shape>>,
        sweep_at: usize,
    }
    static SEEN: LazyLock<Mutex<Seen>> = LazyLock::new(|| Mutex::new(Seen { by_json: HashMap::new(), sweep_at: 1024 }));
    let key = serde_json::to_string(&shape).unwrap_or_default();
    let mut seen = crate::sync::lock(&SEEN);
    if let Some(hit) = seen.by_json.get(&key) {
        return hit.clone();
    }
    let shared = Arc::new(shape);
    seen.by_json.insert(key, shared.clone());
    if seen.by_json.len() >= seen.sweep_at {
        seen.by_json.retain(|_, s| Arc::strong_count(s) > 1);
        seen.sweep_at = (seen.by_json.len() * 2).max(1024);
    }
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn probes_hold_a_pod_back_as_the_kubelets_probe_workers_time_them() {
        let none = spec("containers: [{name: a}]");
        assert_eq!(Probes::of(&none), Probes::default());
        assert_eq!(Shape::of(&none), None);
        let ready = spec(
            "containers: [{name: a, readinessProbe: {initialDelaySeconds: 10, periodSeconds: 5, successThreshold: 3}}]",
        );
        assert_eq!(Probes::of(&ready).ready_after, Duration::from_secs(20));
        let startup = spec(
            "containers: [{name: a, startupProbe: {initialDelaySeconds: 30}, readinessProbe: {initialDelaySeconds: 5}}, {name: b, readinessProbe: {}}]",
        );
        let p = Probes::of(&startup);
        assert_eq!((p.started_after, p.ready_after), (Duration::from_secs(30), Duration::from_secs(30)));
        let sidecar = spec(
            "initContainers: [{name: s, restartPolicy: Always, readinessProbe: {initialDelaySeconds: 7}}]\ncontainers: [{name: a}]",
        );
        assert_eq!(Probes::of(&sidecar).ready_after, Duration::from_secs(7));
    }

    #[test]
    fn a_liveness_probe_kills_after_its_initial_delay_and_failure_threshold_periods() {
        let live = spec(
            "containers: [{name: a}, {name: b, livenessProbe: {initialDelaySeconds: 15, periodSeconds: 5, failureThreshold: 2}}]",
        );
        let l = Probes::of(&live).liveness.unwrap();
        assert_eq!((l.container, l.failure_threshold), (1, 2));
        // Failing from 5s after start: not before the initial delay (15s), then 2 × 5s.
        assert_eq!(l.kill_at(Duration::from_secs(5)), Duration::from_secs(25));
        assert_eq!(l.kill_at(Duration::from_secs(60)), Duration::from_secs(70));
        let defaults = Probes::of(&spec("containers: [{name: a, livenessProbe: {}}]")).liveness.unwrap();
        assert_eq!(defaults.kill_at(Duration::ZERO), Duration::from_secs(30), "period 10s × threshold 3");
    }

    #[test]
    fn one_shape_is_shared_by_the_pods_shaped_alike() {
        let a = Shape::of(&spec("nodeSelector: {zone: shared-a}\ncontainers: [{name: a}]")).unwrap();
        let (x, y) = (interned(a.clone()), interned(a));
        assert!(Arc::ptr_eq(&x, &y));
    }
}
