//! Which pods the operator keeps in memory: pods of pools, pods a registered simulator asks
//! for ([`super::Simulate::keeps_pod`]: KubeVirt's launcher pods), and pods bound to nodes it
//! simulates (or to nodes it has not seen yet: a new node's pods can arrive
//! before the node). Pending pods of no pool and pods on other nodes are dropped on arrival,
//! so memory does not grow with unrelated pods; a pending pod comes back when it is bound.
//! When a node whose pods were dropped becomes managed, the pods are listed again.

use super::manage::Manage;
use crate::api::conventions::POOL_LABEL;
use crate::informer::pod::SlimPod;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::HashSet;
use std::sync::Mutex;

pub struct PodFilter {
    nodes: Store<Node>,
    /// Which nodes are simulated (`None`: this process does not simulate).
    manage: Option<Manage>,
    /// Nodes whose pods were dropped.
    dropped: Mutex<HashSet<String>>,
    /// What the registered simulators need kept wherever it runs.
    wanted: Vec<Wanted>,
}

/// Pods a simulator needs kept.
pub type Wanted = fn(&SlimPod) -> bool;

impl PodFilter {
    pub fn new(nodes: Store<Node>, manage: Option<Manage>, wanted: Vec<Wanted>) -> Self {
        Self { nodes, manage, dropped: Mutex::default(), wanted }
    }

    pub fn keep(&self, pod: &SlimPod) -> bool {
        if pod.label(POOL_LABEL).is_some() || self.wanted.iter().any(|w| w(pod)) {
            return true;
        }
        let (Some(manage), Some(node)) = (&self.manage, pod.node_name.as_deref()) else { return false };
        match self.nodes.get(&ObjectRef::new(node)) {
            None => true,
            Some(n) if manage.manages(&n) => true,
            Some(_) => {
                crate::sync::lock(&self.dropped).insert(node.to_string());
                false
            }
        }
    }

    /// `node` changed: true when it is managed now and pods on it were dropped before (list
    /// the pods again).
    pub fn now_managed(&self, node: &Node) -> bool {
        let managed = self.manage.as_ref().is_some_and(|m| m.manages(node));
        managed && crate::sync::lock(&self.dropped).remove(&node.name_any())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    fn node(name: &str, fake: bool) -> Node {
        use crate::informer::fixtures::TestNode;
        if fake { Node::test(name).fake() } else { Node::test(name) }
    }

    const LAUNCHER_LABEL: &str = "example.com/launcher";

    fn pod(node: Option<&str>, label: Option<&str>) -> SlimPod {
        // Through the store's own conversion: what the filter sees is what the store keeps.
        let labels = label.map(|l| [(l.to_string(), "x".to_string())].into());
        SlimPod::new(
            k8s_openapi::api::core::v1::Pod {
                metadata: ObjectMeta {
                    name: Some("p".into()),
                    namespace: Some("ns".into()),
                    labels,
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    node_name: node.map(String::from),
                    ..Default::default()
                }),
                ..Default::default()
            },
            &[POOL_LABEL, LAUNCHER_LABEL],
        )
    }

    fn filter(manage: Option<Manage>) -> (PodFilter, kube::runtime::reflector::store::Writer<Node>) {
        let mut writer = kube::runtime::reflector::store::Writer::<Node>::default();
        writer.apply_watcher_event(&Event::Apply(node("fake-0", true)));
        writer.apply_watcher_event(&Event::Apply(node("real-0", false)));
        let launchers: Wanted = |p| p.label(LAUNCHER_LABEL).is_some();
        (PodFilter::new(writer.as_reader(), manage, vec![launchers]), writer)
    }

    fn fake_nodes() -> Manage {
        Manage::from_flags(false, None, Some("kwok.x-k8s.io/node=fake"), None).unwrap()
    }

    #[test]
    fn keeps_pool_pods_launchers_and_pods_on_managed_or_unseen_nodes() {
        let (f, _w) = filter(Some(fake_nodes()));
        assert!(f.keep(&pod(None, Some(POOL_LABEL))), "a pending pool pod");
        assert!(f.keep(&pod(Some("real-0"), Some(LAUNCHER_LABEL))), "a pod a simulator wants");
        assert!(f.keep(&pod(Some("fake-0"), None)), "on a managed node");
        assert!(f.keep(&pod(Some("new-node"), None)), "on a node not seen yet");
        assert!(!f.keep(&pod(None, None)), "pending, of no pool");
        assert!(!f.keep(&pod(Some("real-0"), None)), "on a node that is not simulated");
    }

    #[test]
    fn a_node_that_becomes_managed_asks_for_its_dropped_pods_once() {
        let (f, mut w) = filter(Some(fake_nodes()));
        assert!(!f.keep(&pod(Some("real-0"), None)));
        assert!(!f.now_managed(&node("real-0", false)), "still not managed");
        let now_fake = node("real-0", true);
        w.apply_watcher_event(&Event::Apply(now_fake.clone()));
        assert!(f.now_managed(&now_fake), "list again");
        assert!(!f.now_managed(&now_fake), "once");
        assert!(!f.now_managed(&node("fake-0", true)), "nothing was dropped there");
    }

    #[test]
    fn without_simulation_only_pool_and_launcher_pods() {
        let (f, _w) = filter(None);
        assert!(f.keep(&pod(None, Some(POOL_LABEL))));
        assert!(!f.keep(&pod(Some("fake-0"), None)));
    }
}
