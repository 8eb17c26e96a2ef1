//! The informers every part of the operator shares, each asked for by type from
//! [`Informers`]: nodes (trimmed), pods (as [`SlimPod`]), the pools of a kind, and any other
//! kind's objects (all of them, or only those with the pool label). Node
//! leases are written, never watched (a watch of every lease in every replica would multiply
//! the API server's work for each renewal).

use super::pod::SlimPod;
use super::{Informer, Informers, trim_meta, trimmed};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;

/// The namespace of node leases (as kubelets use).
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A node less what nobody here reads (images and volumes can be most of a node).
fn trim_node(mut node: Node) -> Node {
    trim_meta(&mut node);
    if let Some(s) = node.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
    }
    node
}

/// Every node of the cluster.
pub fn nodes(informers: &Informers) -> Arc<Informer<Node>> {
    informers.shared(|i: &Arc<Informer<Node>>, client| {
        i.start(Api::<Node>::all(client), watcher::Config::default(), trim_node)
    })
}

/// The pods of the cluster the operator needs (see [`Informers::keep`]), compact, with the
/// labels someone reads ([`Informers::pod_labels`]).
pub fn pods(informers: &Informers) -> Arc<Informer<SlimPod>> {
    let keep = informers.kept::<SlimPod>();
    let keys = informers.pod_keys();
    informers.shared(move |i: &Arc<Informer<SlimPod>>, client| {
        let convert = move |pod: Pod| keys.slim(pod);
        i.start_filtered(Api::<Pod>::all(client), watcher::Config::default(), convert, keep)
    })
}

/// The objects of `K` in the cluster that carry the pool label: the children of a kind whose
/// children nobody else needs to see.
pub fn labelled<K>(informers: &Informers) -> Arc<Informer<K>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    informers.shared(|i: &Arc<Informer<K>>, client| {
        i.start(Api::<K>::all(client), watcher::Config::default().labels(crate::api::conventions::POOL_LABEL), trimmed)
    })
}

/// Every pool of kind `P`, in every namespace.
pub fn pools<P>(informers: &Informers) -> Arc<Informer<P>>
where
    P: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    informers.shared(|i: &Arc<Informer<P>>, client| i.start(Api::<P>::all(client), watcher::Config::default(), trimmed))
}

/// The pools of kind `P` that `keep` keeps: the store of a second view of a kind (a VMIPool
/// that keeps VirtualMachines), which holds only its own pools (a watch of its own).
pub fn pools_kept<P>(informers: &Informers, keep: super::Keep<P>) -> Arc<Informer<P>>
where
    P: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    informers.shared(|i: &Arc<Informer<P>>, client| {
        i.start_filtered(Api::<P>::all(client), watcher::Config::default(), trimmed, Some(keep))
    })
}

/// Every object of `K` in the cluster, trimmed (for a child CRD, ask only once it is installed).
pub fn all<K>(informers: &Informers) -> Arc<Informer<K>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    informers.shared(|i: &Arc<Informer<K>>, client| i.start(Api::<K>::all(client), watcher::Config::default(), trimmed))
}
