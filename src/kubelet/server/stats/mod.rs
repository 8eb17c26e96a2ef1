//! A node's usage reading at a moment: its running pods' containers under the knobs of the
//! pool that governs each pod, plus the node's own base, with the node's CPU counter kept
//! monotonic across pods that come and go. What `/metrics/resource` and `/stats/summary`
//! render ([`resource_metrics`], [`summary`]).

pub mod cadvisor;
pub mod kubelet_metrics;
pub mod probes;
pub mod resource_metrics;
pub mod summary;
pub mod traffic;
pub mod volumes;

use crate::informer::pod::SlimPod;
use crate::kubelet::status::usage::{self, Identity, Model, NodeCounter, Overrides};
use crate::simulator::lifecycle::{Knobs, Lifecycles};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use resource_metrics::{ContainerReading, NodeReading};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

fn secs(t: &k8s_openapi::jiff::Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

/// The node counters of this replica's nodes.
#[derive(Default)]
pub struct Counters(Mutex<HashMap<String, NodeCounter>>);

impl Counters {
    pub fn forget(&self, node: &str) {
        crate::sync::lock(&self.0).remove(node);
    }

    fn read(&self, node: &str, now: f64, base: f64, since: f64, containers: &[ContainerReading<'_>]) -> f64 {
        let mut all = crate::sync::lock(&self.0);
        let running = containers.iter().map(|c| (format!("{}/{}", c.uid, c.container), c.cpu_seconds));
        all.entry(node.to_string()).or_default().read(now, base, since, running)
    }
}

/// The memory capacity a node reports (bytes), if it says.
fn memory_capacity(node: &Node) -> Option<f64> {
    let q = node.status.as_ref()?.capacity.as_ref()?.get("memory")?;
    crate::api::kubelet::quantity(&q.0)
}

/// The reading of `node` with `pods` on it at `now` (seconds since the epoch).
pub fn reading<'a>(
    node: &'a Node,
    pods: &'a [Arc<SlimPod>],
    lifecycles: &Lifecycles,
    counters: &Counters,
    now: f64,
) -> NodeReading<'a> {
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let node_started = node.metadata.creation_timestamp.as_ref().map_or(now, |t| secs(&t.0));
    let node_pool = lifecycles.node_knobs(node);
    let (base_cpu, base_memory) =
        usage::node_base(node_pool.as_deref().and_then(Knobs::nodes).and_then(|n| n.usage.as_ref()));
    // Each governing pool's knobs parsed once per reading.
    let mut models: HashMap<usize, Model> = HashMap::new();
    let mut containers = Vec::new();
    let mut pod_starts = Vec::new();
    for pod in pods.iter().filter(|p| p.phase() == "Running") {
        let pool = lifecycles.pod_knobs(pod, node);
        let key = pool.as_ref().map_or(0, |p| Arc::as_ptr(p) as *const () as usize);
        let model = models.entry(key).or_insert_with(|| match pool.as_deref() {
            Some(p) => Model::new(p.pods().and_then(|p| p.usage.as_ref()), p.seed(), p.created()),
            None => Model::default(),
        });
        let started = pod.running_since.as_ref().or(pod.start_time.as_ref()).map_or(now, secs);
        let overrides = pod.usage.as_deref().copied().unwrap_or(Overrides::default());
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let sidecars = pod.init_containers.iter().filter(|c| c.sidecar);
        let probes = pod.shape.as_deref().map(|s| s.probes).unwrap_or_default();
        let ready = pod.condition("Ready") == Some("True");
        if let (Some(running), Some(taken)) = (pod.running_since.as_ref(), pod.start_time.as_ref()) {
            pod_starts.push((secs(running) - secs(taken)).max(0.0));
        }
        for c in pod.containers.iter().chain(sidecars) {
            let id = Identity { namespace: ns, pod: pod.name(), uid: pod.uid(), container: &c.name };
            let s = usage::container(model, &id, overrides, started, now);
            containers.push(ContainerReading {
                namespace: ns,
                pod: pod.name(),
                uid: pod.uid(),
                container: &c.name,
                cpu_cores: s.cpu,
                cpu_seconds: s.cpu_seconds,
                memory_bytes: s.memory,
                started,
                image: &c.image,
                ready,
                restarts: pod.restart_count,
                probes,
            });
        }
    }
    let cpu_cores = base_cpu + containers.iter().map(|c| c.cpu_cores).sum::<f64>();
    let memory_bytes = base_memory + containers.iter().map(|c| c.memory_bytes).sum::<f64>();
    NodeReading {
        node: node_name,
        started: node_started,
        cpu_cores,
        cpu_seconds: counters.read(&node.name_any(), now, base_cpu, node_started, &containers),
        memory_capacity: memory_capacity(node).unwrap_or(256.0 * 1024.0 * 1024.0 * 1024.0),
        memory_bytes,
        storage_capacity: storage_capacity(node).unwrap_or(100.0 * traffic::GIB),
        containers,
        pod_starts,
    }
}

/// The ephemeral storage capacity a node reports (bytes), if it says.
fn storage_capacity(node: &Node) -> Option<f64> {
    let q = node.status.as_ref()?.capacity.as_ref()?.get("ephemeral-storage")?;
    crate::api::kubelet::quantity(&q.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, annotations: serde_json::Value) -> Arc<SlimPod> {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "d", "uid": format!("u-{name}"), "annotations": annotations},
            "spec": {"nodeName": "n", "containers": [{"name": "app", "image": "i"}],
                     "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always"}, {"name": "init", "image": "i"}]},
            "status": {"phase": phase, "startTime": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        Arc::new(SlimPod::from(p))
    }

    #[test]
    fn running_pods_containers_and_sidecars_count_with_annotations_and_the_node_base() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"capacity": {"memory": "8Gi"}}
        }))
        .unwrap();
        let pods = vec![
            pod(
                "a",
                "Running",
                serde_json::json!({"kwok.x-k8s.io/usage-cpu": "500m", "kwok.x-k8s.io/usage-memory": "100Mi"}),
            ),
            pod("b", "Pending", serde_json::json!({})),
        ];
        let lifecycles = Lifecycles::default();
        let counters = Counters::default();
        let now = secs(&"2026-01-01T00:01:40Z".parse().unwrap());
        let r = reading(&node, &pods, &lifecycles, &counters, now);
        let names: Vec<&str> = r.containers.iter().map(|c| c.container).collect();
        assert_eq!(names, vec!["app", "side"], "a sidecar runs; a plain init container does not");
        assert!((r.containers[0].cpu_cores - 0.5).abs() < 1e-9);
        assert!((r.containers[0].cpu_seconds - 50.0).abs() < 1e-6, "{:?}", r.containers[0]);
        assert_eq!(r.containers[0].memory_bytes, 100.0 * 1024.0 * 1024.0);
        assert!((r.cpu_cores - (0.1 + 1.0)).abs() < 1e-9, "the base and both containers: {}", r.cpu_cores);
        assert_eq!(r.memory_capacity, 8.0 * 1024.0 * 1024.0 * 1024.0);
        let later = reading(&node, &pods, &lifecycles, &counters, now + 10.0);
        assert!(later.cpu_seconds > r.cpu_seconds);
    }
}
