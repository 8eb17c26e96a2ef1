//! The kubelet's long-running parts in this process: the node worker (status and Lease
//! heartbeats), the pod worker and the kubelet API; the rights they need; and what a kind may
//! add to the nodes it owns ([`Devices`]).

use super::Kubelet;
use super::node::renewal::Stretch;
use super::node::{NodeSimConfig, NodeSimulator};
use super::pods::{PodSimConfig, PodSimulator};
use super::status::node as node_status;
use crate::deploy::rule::Rule;
use crate::informer::pod::SlimPod;
use crate::informer::{SyncWait, shared, wait_synced};
use crate::simulator::{SimContext, Simulation};
use crate::sync::lock;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::Device;
use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

/// Where the kubelet's prepare step for a pod's ResourceClaims stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepare {
    /// Nothing to prepare, or prepared: the pod starts.
    Ready,
    /// Its claims are not known yet: look again in a moment.
    Later,
    /// A driver failed to prepare one of its devices, for good (`FailedPrepareDynamicResources`,
    /// with this note): the pod stays ContainerCreating.
    Fails(String),
}

/// One GPU a node has, and the pod whose ResourceClaim holds it (namespace, name).
#[derive(Clone, Debug)]
pub struct Gpu {
    pub device: Device,
    pub holder: Option<(String, String)>,
}

/// What a kind adds to the nodes the kubelet simulates (NodePool's `spec.devices`): the
/// kubelet asks every registered kind's and takes the first answer that is not `Ready`.
pub trait Devices: Send + Sync {
    /// The prepare step of `pod`'s ResourceClaims on `node` (`uid`: the pod's).
    fn prepare(&self, node: &Node, pod: &SlimPod) -> Prepare;
    /// The GPUs `node` publishes now (none when its kind gives it none).
    fn gpus(&self, node: &Node) -> Vec<Gpu>;
}

/// Every kind's device hooks, asked in turn.
#[derive(Clone, Default)]
pub struct AllDevices(pub Vec<Arc<dyn Devices>>);

impl AllDevices {
    pub fn prepare(&self, node: &Node, pod: &SlimPod) -> Prepare {
        self.0.iter().map(|d| d.prepare(node, pod)).find(|p| *p != Prepare::Ready).unwrap_or(Prepare::Ready)
    }

    pub fn gpus(&self, node: &Node) -> Vec<Gpu> {
        self.0.iter().flat_map(|d| d.gpus(node)).collect()
    }
}

/// Where the kubelet's volume manager stands for a pod's volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mount {
    /// Attached and mounted (or nothing to wait for): the pod starts.
    Ready,
    /// A claim is not bound or a volume not attached yet: look again in a moment.
    Later,
    /// A volume cannot be mounted (the kubelet's `FailedMount` note): look again in a while.
    Fails(String),
}

/// One mounted volume of a pod as `/stats/summary` and `kubelet_volume_stats_*` report it.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeStat {
    /// The pod's volume name.
    pub name: String,
    /// The claim it mounts.
    pub claim: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
}

/// The volumes the kubelet mounts (the storage simulation's answer): whether a pod's volumes
/// are there, and what its mounted claims hold.
pub trait Volumes: Send + Sync {
    fn mount(&self, node: &Node, pod: &SlimPod) -> Mount;
    fn stats(&self, pod: &SlimPod) -> Vec<VolumeStat>;
}

/// No storage simulation: every volume is there, none reports usage.
pub struct NoVolumes;

impl Volumes for NoVolumes {
    fn mount(&self, _: &Node, _: &SlimPod) -> Mount {
        Mount::Ready
    }
    fn stats(&self, _: &SlimPod) -> Vec<VolumeStat> {
        Vec::new()
    }
}

/// Pod labels the kubelet reads: an indexed Job's pods are planned by their index (a retry
/// repeats its run time).
pub const POD_LABELS: &[&str] = &[super::status::fate::COMPLETION_INDEX_LABEL];

/// The kubelet's simulations in this process: the node worker, the pod worker and, when it is
/// served here, the kubelet API. `devices`: what the registered kinds add to their nodes.
pub fn simulations(
    kubelet: &Kubelet,
    sim: &SimContext,
    devices: Vec<Arc<dyn Devices>>,
    volumes: Arc<dyn Volumes>,
) -> Vec<Simulation> {
    let flags = &kubelet.flags;
    let devices = AllDevices(devices);
    let (nodes, pods) = (shared::nodes(&sim.informers), shared::pods(&sim.informers));
    let (node_changes, node_changes_for_pods, pod_changes) = (nodes.subscribe(), nodes.subscribe(), pods.subscribe());
    let (images, image_news) = crate::kubelet::images::NodeImages::listing(flags.node_status_max_images);
    let node_sim = NodeSimulator {
        client: sim.client.clone(),
        config: NodeSimConfig {
            manage: sim.manage.clone(),
            lease_duration: sim.node_lease_duration,
            status_frequency: flags.node_status_frequency.max(Duration::from_secs(1)),
            defaults: kubelet.defaults.clone(),
            clock: sim.clock,
        },
        nodes: nodes.store(),
        addresses: kubelet.addresses.clone(),
        metrics: sim.metrics.clone(),
        writes: sim.writes.clone(),
        lifecycles: sim.lifecycles.clone(),
        shard: sim.shard.clone(),
        identity: sim.identity.clone(),
        kubelet: kubelet.server.as_ref().map(|k| k.endpoints.clone()),
        stretch: Stretch { fraction: flags.lease_stretch, reserve: sim.shard_takeover },
        images: images.clone(),
        image_news,
    };
    let pod_sim = PodSimulator {
        client: sim.client.clone(),
        config: PodSimConfig {
            manage: sim.manage.clone(),
            lifecycles: sim.lifecycles.clone(),
            defaults: flags.pod_defaults(),
            // Checked when the kubelet was set up: a bad mask never gets here.
            fallback: flags.fallback().ok().flatten(),
            clock: sim.clock,
        },
        nodes: nodes.store(),
        pods: pods.store(),
        metrics: sim.metrics.clone(),
        writes: sim.writes.clone(),
        shard: sim.shard.clone(),
        devices: devices.clone(),
        images,
        volumes: volumes.clone(),
    };
    // Before anything renders or simulates a node: the default address allocator learns
    // the addresses the nodes have.
    let (store, addresses) = (nodes.store(), kubelet.addresses.clone());
    let (checked, manages) = (flags.clone(), sim.manage.clone());
    let nodes_ready: SyncWait = Box::pin(async move {
        wait_synced("nodes", &store).await?;
        let all = store.state();
        // Ranges that hold a real node's address or pod range: said once, naming the flag.
        for collision in checked.collisions(all.iter().filter(|n| !manages.manages(n)).map(|n| n.as_ref())) {
            tracing::warn!("{collision}");
        }
        let mut a = lock(&addresses);
        for node in all {
            for ip in node_status::internal_ips(&node) {
                a.observe(&node.name_any(), ip);
            }
        }
        Ok(())
    });
    let (manage, shard) = (sim.manage.clone(), sim.shard.clone());
    let serves = Box::new(move |node: &Node| {
        node.metadata.deletion_timestamp.is_none() && manage.manages(node) && shard.owns(&node.name_any())
    });
    let api = kubelet.server.as_ref().and_then(|k| super::server::simulation(k, sim, serves, devices, volumes));
    let mut simulations = vec![
        Simulation {
            name: "node simulator".into(),
            ready: vec![nodes_ready],
            run: Box::pin(node_sim.run(node_changes)),
        },
        Simulation {
            name: "pod simulator".into(),
            ready: vec![crate::informer::sync_wait("pods".into(), pods.store())],
            run: Box::pin(pod_sim.run(pod_changes, node_changes_for_pods)),
        },
    ];
    simulations.extend(api);
    simulations
}

/// The rights the simulated kubelet needs (RBAC is generated from these).
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::cluster("", &["nodes/status"], &["patch"], "node status heartbeats and conditions"),
        Rule::cluster(
            "",
            &["pods"],
            &["get", "list", "watch", "delete"],
            "every pod on a simulated node: watched, removed once it has exited",
        ),
        Rule::cluster("", &["pods/status"], &["patch"], "pod status: Running, addresses, exits"),
        Rule::namespace(
            crate::informer::shared::LEASE_NAMESPACE,
            "coordination.k8s.io",
            &["leases"],
            &["get", "list", "create", "patch"],
            "node heartbeats (one Lease per simulated node) and claims of fallback pod ranges (one per block, owned by its node)",
        ),
        Rule::cluster(
            "events.k8s.io",
            &["events"],
            &["create", "patch"],
            "events about pods and nodes (an exhausted pod range)",
        ),
        Rule::cluster(
            "authentication.k8s.io",
            &["tokenreviews"],
            &["create"],
            "the simulated kubelets' API: whose bearer token a caller presents (the kubelet's webhook authentication)",
        ),
        Rule::namespace(
            "kube-system",
            "",
            &["configmaps"],
            &["get"],
            "the simulated kubelets' API: the API server's client CA, to accept its client certificates",
        )
        .named_only(&["extension-apiserver-authentication"]),
    ]
}
