//! Where a pod's addresses come from: its node's podCIDR, or — for a node without one — a block
//! of the fallback range the node claims ([`super::fallback`]); rebuilt from the live pods at
//! start and on a shard's hand-over, so a restart never hands an address out twice.

use super::fallback;
use super::worker::{Loop, Timer, holds_no_address};
use crate::informer::pod::SlimPod;
use crate::ipam::pods::Allocation;
use crate::kubelet::status::node as node_status;
use crate::kubelet::status::patches as pod_status;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

impl Loop {
    /// Addresses of live pods survive a restart: record them before anything is allocated.
    pub(super) fn rebuild(&mut self) {
        let mut conflicts = 0;
        for pod in self.sim.pods.state() {
            let Some(node) = self.managed_node(&pod) else { continue };
            if holds_no_address(&pod) {
                continue;
            }
            let ips = pod_status::pod_ips(&pod);
            if ips.is_empty() {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.adopt_block(&node, &ips);
            if !self.ipam.observe(&node.name_any(), &self.cidrs(&node), &uid, &ips) {
                conflicts += 1;
                tracing::warn!(pod = %pod.name_any(), ?ips, "pod address outside its node's podCIDR or held by another pod");
            }
        }
        tracing::info!(pods = self.sim.pods.len(), conflicts, "pod addresses rebuilt from the existing pods");
    }

    /// The pod's addresses from its node's podCIDR (the node's own with host networking).
    /// `None` when it has to wait: no range yet, or the range is full (reported once).
    pub(super) fn addresses(&mut self, pod: &Arc<SlimPod>, node: &Node, uid: &str) -> Option<Vec<std::net::IpAddr>> {
        if pod_status::host_network(pod) {
            return Some(node_status::internal_ips(node));
        }
        let node_name = node.name_any();
        let key = ObjectRef::from_obj(pod.as_ref());
        match self.ipam.allocate(&node_name, &self.cidrs(node), uid) {
            Allocation::Ips(ips) => Some(ips),
            Allocation::NoRange => {
                self.waiting.entry(node_name).or_default().insert(key);
                self.fall_back(node);
                None
            }
            Allocation::Exhausted(net) => {
                self.waiting.entry(node_name.clone()).or_default().insert(key);
                if let Some(t) = self.tracked.get_mut(uid)
                    && !t.exhausted_reported
                {
                    t.exhausted_reported = true;
                    self.report_exhausted(pod, &node_name, net);
                }
                None
            }
        }
    }

    /// The ranges a node's pods get addresses from: its podCIDRs, else its fallback block.
    pub(super) fn cidrs(&self, node: &Node) -> Vec<IpNet> {
        let own = super::node_cidrs(node);
        if !own.is_empty() {
            return own;
        }
        let block = self.fallback.as_ref().and_then(|f| f.block_of(node.metadata.uid.as_deref().unwrap_or_default()));
        block.into_iter().collect()
    }

    /// A pod with addresses on a node without a podCIDR: the node's fallback block is the one
    /// holding them, if this replica does not know its claim yet (it took the node over).
    pub(super) fn adopt_block(&mut self, node: &Node, ips: &[std::net::IpAddr]) {
        if let (Some(f), Some(ip)) = (self.fallback.as_mut(), ips.first())
            && super::node_cidrs(node).is_empty()
        {
            f.adopt(node.metadata.uid.as_deref().unwrap_or_default(), *ip);
        }
    }

    /// A node without a podCIDR whose pods wait: once it has gone without one for a while, it
    /// claims a block of the fallback range.
    fn fall_back(&mut self, node: &Node) {
        let Some(f) = self.fallback.as_mut() else { return };
        let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let age = created.map_or(Duration::MAX, |t| {
            let secs = (self.sim.config.clock.now().wall - t).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0);
            Duration::from_secs_f64(secs.clamp(0.0, 1e9))
        });
        match f.next(node, age) {
            fallback::Next::Nothing | fallback::Next::Full(false) => {}
            fallback::Next::Wait(left) => self.timers.set(Timer::NodeRange(node.name_any()), left),
            fallback::Next::Claim(block) => {
                let (client, claims, node) = (self.sim.client.clone(), self.claims.clone(), node.clone());
                tokio::spawn(async move {
                    let _ = claims.send(fallback::claim(client, &node, block).await);
                });
            }
            fallback::Next::Full(true) => {
                let note = format!(
                    "node {} has no podCIDR and every /{} block of the fallback range {} is claimed: its pods wait for an address; give the operator a larger --pod-cidr-fallback (or a longer --pod-cidr-fallback-mask)",
                    node.name_any(),
                    f.range.mask,
                    f.range.net
                );
                tracing::warn!(node = %node.name_any(), "fallback pod range full");
                self.node_event(node, EventType::Warning, "PodCIDRFallbackFull", note);
            }
        }
    }

    /// How a fallback claim went: the node's pods get addresses, or it tries again.
    pub(super) fn on_claim(&mut self, claim: fallback::Claim) {
        let Some(f) = self.fallback.as_mut() else { return };
        f.on_claim(&claim);
        let node =
            self.sim.nodes.get(&ObjectRef::new(&claim.node)).filter(|n| n.metadata.uid.as_deref() == Some(&claim.uid));
        let Some(node) = node else { return };
        match &claim.outcome {
            fallback::Outcome::Claimed { new } => {
                if *new {
                    let note = format!(
                        "node {} has no spec.podCIDR (the controller manager does not allocate node CIDRs here): its pods get addresses from {}, a block of the simulator's --pod-cidr-fallback {}",
                        claim.node, claim.block, f.range.net
                    );
                    tracing::info!(node = %claim.node, block = %claim.block, "node without a podCIDR: fallback block claimed");
                    self.node_event(&node, EventType::Normal, "NodeHasNoPodCIDR", note);
                }
                self.retry_waiting(&claim.node);
            }
            fallback::Outcome::Taken => self.fall_back(&node),
            fallback::Outcome::Failed(e) => {
                tracing::warn!(node = %claim.node, block = %claim.block, error = %e, "claiming a fallback pod range failed; retrying in 5s");
                self.timers.set(Timer::NodeRange(claim.node), Duration::from_secs(5));
            }
        }
    }

    /// An event on a node.
    fn node_event(&self, node: &Node, type_: EventType, reason: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = node.object_ref(&());
        let reason = reason.to_string();
        tokio::spawn(async move {
            let ev = Event { type_, reason, note: Some(note), action: "AllocatePodIP".into(), secondary: None };
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "event not published");
            }
        });
    }

    /// Reports (once per pod) that its node's range has no free address.
    fn report_exhausted(&self, pod: &SlimPod, node: &str, net: IpNet) {
        let note = format!(
            "node {node} has no free address in its podCIDR {net}: delete pods on it, or give the node a larger range (NodePool spec.podCIDR.maskSize)"
        );
        tracing::warn!(pod = %pod.name_any(), node, %net, "pod address range exhausted");
        self.warn(pod, "PodCIDRExhausted", "AllocatePodIP", note);
    }
}
