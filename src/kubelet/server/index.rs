//! The pods on each node, kept from the pod store's changes: a scrape of one node's
//! `/metrics/resource` reads its twenty pods, not the hundred thousand in the store.

use crate::informer::Change;
use crate::informer::pod::SlimPod;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Default)]
pub struct PodsByNode {
    nodes: RwLock<HashMap<String, Vec<Arc<SlimPod>>>>,
}

impl PodsByNode {
    /// The pods bound to `node`.
    pub fn on(&self, node: &str) -> Vec<Arc<SlimPod>> {
        crate::sync::read(&self.nodes).get(node).cloned().unwrap_or_default()
    }

    pub fn apply(&self, pod: &Arc<SlimPod>) {
        let mut nodes = crate::sync::write(&self.nodes);
        let Some(node) = pod.node_name.as_deref() else { return };
        let list = nodes.entry(node.to_string()).or_default();
        match list.iter_mut().find(|p| same(p, pod)) {
            Some(slot) => *slot = pod.clone(),
            None => list.push(pod.clone()),
        }
    }

    pub fn delete(&self, pod: &SlimPod) {
        let mut nodes = crate::sync::write(&self.nodes);
        let Some(node) = pod.node_name.as_deref() else { return };
        if let Some(list) = nodes.get_mut(node) {
            list.retain(|p| !same(p, pod));
            if list.is_empty() {
                nodes.remove(node);
            }
        }
    }

    /// Follows the pod store until its change stream ends.
    pub async fn follow(self: Arc<Self>, mut changes: UnboundedReceiver<Change<SlimPod>>) {
        while let Some(change) = changes.recv().await {
            match change {
                Change::Applied(p) => self.apply(&p),
                Change::Deleted(p) => self.delete(&p),
                Change::Synced => {}
            }
        }
    }
}

fn same(a: &SlimPod, b: &SlimPod) -> bool {
    a.name() == b.name() && a.namespace() == b.namespace()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str) -> Arc<SlimPod> {
        use crate::informer::fixtures::TestPod;
        Arc::new(k8s_openapi::api::core::v1::Pod::test(name).on(node).slim())
    }

    #[test]
    fn pods_are_found_by_node() {
        let i = PodsByNode::default();
        i.apply(&pod("a", "n1"));
        i.apply(&pod("b", "n1"));
        i.apply(&pod("a", "n1"));
        i.apply(&pod("c", "n2"));
        assert_eq!(i.on("n1").len(), 2);
        i.delete(&pod("b", "n1"));
        assert_eq!(i.on("n1").len(), 1);
        i.delete(&pod("c", "n2"));
        assert!(i.on("n2").is_empty());
    }
}
