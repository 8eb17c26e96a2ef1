//! The pod worker: every pod bound to a managed node, whoever made it, runs (one status
//! write), gets addresses from its node's podCIDR, completes when it may finish (a Job's pod,
//! or any `Never`/`OnFailure` pod its knobs or annotations give a run time), and is removed
//! when deleted once its exit delay (at most its grace period) passes. What happens next to a
//! pod is decided by the pure [`step`]; the [`worker`] loop applies it (timers, addresses,
//! events) and the [`writer`] sends the writes. Addresses come from the node's podCIDR, or a
//! claimed block of the fallback range ([`addresses`], [`fallback`]).

mod addresses;
pub mod fallback;
pub mod step;
mod worker;
mod writer;

use super::AllDevices;
use super::status::fate::Defaults;
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::shard::Shard;
use crate::simulator::clock::Clock;
use crate::simulator::lifecycle::Lifecycles;
use crate::simulator::machinery::WriteBudget;
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::Metrics;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Clone)]
pub struct PodSimConfig {
    pub manage: Manage,
    /// The lifecycle knobs of the pools.
    pub lifecycles: Lifecycles,
    /// What pods whose pools say nothing get (the kubelet's flags).
    pub defaults: Defaults,
    /// Where pods on nodes without a podCIDR get addresses (`--pod-cidr-fallback`), and how
    /// long a node goes without one first.
    pub fallback: Option<(crate::ipam::fallback::FallbackRange, Duration)>,
    /// Where the worker reads the time.
    pub clock: Clock,
}

pub struct PodSimulator {
    pub client: Client,
    pub config: PodSimConfig,
    pub nodes: Store<Node>,
    pub pods: Store<SlimPod>,
    pub metrics: Arc<Metrics>,
    pub writes: WriteBudget,
    /// Which nodes' pods are this replica's (all, unless the simulator is sharded).
    pub shard: Shard,
    /// What the kinds add to their nodes: the prepare step of pods with claims.
    pub devices: AllDevices,
    /// The images each node's pods pulled (`None`: nodes list none).
    pub images: Option<Arc<crate::kubelet::images::NodeImages>>,
    /// Whether a pod's volumes are attached and mounted.
    pub volumes: Arc<dyn super::Volumes>,
}

impl PodSimulator {
    /// Runs until a change stream ends.
    pub async fn run(self, pods: UnboundedReceiver<Change<SlimPod>>, nodes: UnboundedReceiver<Change<Node>>) {
        worker::run(self, pods, nodes).await;
    }
}

/// A write came back.
pub enum Done {
    Write { uid: String, key: ObjectRef<SlimPod>, ok: bool, removed: bool },
}

impl Done {
    fn after(pod: &SlimPod, ok: bool, removed: bool) -> Self {
        Done::Write { uid: pod.uid().to_string(), key: ObjectRef::from_obj(pod), ok, removed }
    }
}

/// The podCIDRs of a node.
pub fn node_cidrs(node: &Node) -> Vec<IpNet> {
    let spec = node.spec.as_ref();
    let mut cidrs: Vec<IpNet> = spec
        .and_then(|s| s.pod_cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.parse::<IpNet>().ok().map(|n| n.trunc()))
        .collect();
    if cidrs.is_empty()
        && let Some(c) = spec.and_then(|s| s.pod_cidr.as_ref()).and_then(|c| c.parse::<IpNet>().ok())
    {
        cidrs.push(c.trunc());
    }
    cidrs
}

/// The shard key of a pod's writes: its node (every write is for a pod bound to one).
fn shard_key(pod: &SlimPod) -> String {
    pod.node_name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests;
