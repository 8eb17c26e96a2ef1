//! Simulated storage: a CSI driver ([`crate::api::storage::DRIVER`]) played without a
//! container. Its controller side as Kubernetes' CSI sidecars do it — the external
//! provisioner creates PersistentVolumes for claims of its StorageClasses ([`provisioner`],
//! with the resizer and the reclaim of Released volumes), the external attacher marks its
//! VolumeAttachments attached ([`attacher`]) — and its node side: a CSINode for every simulated
//! node with its attach limit and topology ([`nodes`]), and the kubelet's volume manager view
//! of a pod's volumes ([`mounts`]). Decisions are pure ([`plan`]); the real control plane does
//! the rest (the PV controller binds, the scheduler's VolumeBinding and NodeVolumeLimits
//! place, the attach/detach controller attaches).

mod attacher;
mod mounts;
mod nodes;
pub mod plan;
mod provisioner;

use crate::deploy::rule::Rule;
use crate::informer::shared;
use crate::kubelet::recorder::KubeletRecorder;
use crate::simulator::{SimContext, Simulation};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

pub use mounts::Mounts;

/// What the storage loops read and share.
#[derive(Clone)]
pub struct World {
    pub client: Client,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub attachments: Store<VolumeAttachment>,
    pub classes: Store<StorageClass>,
    pub csi_nodes: Store<CSINode>,
    pub nodes: Store<Node>,
    pub sim: SimContext,
    recorder: KubeletRecorder,
    /// Keys with a task running (one task per claim, volume or attachment at a time).
    busy: Arc<Mutex<HashSet<String>>>,
}

impl World {
    /// The StorageClass named `name`, when it is the driver's.
    pub fn class(&self, name: Option<&str>) -> Option<Arc<StorageClass>> {
        let name = name?;
        self.classes.state().into_iter().find(|c| c.metadata.name.as_deref() == Some(name) && plan::ours(c))
    }

    /// Whether any StorageClass is the driver's (the node side registers only then).
    pub fn enabled(&self) -> bool {
        self.classes.state().iter().any(|c| plan::ours(c))
    }

    /// Runs `task` for `key` unless one runs already.
    fn spawn_once<F>(&self, key: String, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if !crate::sync::lock(&self.busy).insert(key.clone()) {
            return;
        }
        let busy = self.busy.clone();
        tokio::spawn(async move {
            task.await;
            crate::sync::lock(&busy).remove(&key);
        });
    }

    /// An event from the driver about `about`.
    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        about: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        let ev = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
        if let Err(e) = self.recorder.publish(&ev, &about.object_ref(&())).await {
            tracing::debug!(error = %e, "storage event not published");
        }
    }
}

/// The storage simulation: its loops, and the volume view the kubelet asks before it starts a
/// pod.
pub fn simulations(sim: &SimContext) -> (Vec<Simulation>, Arc<Mounts>) {
    let i = &sim.informers;
    let (claims, volumes, attachments) = (
        shared::all::<PersistentVolumeClaim>(i),
        shared::all::<PersistentVolume>(i),
        shared::all::<VolumeAttachment>(i),
    );
    let (classes, csi_nodes, nodes) = (shared::all::<StorageClass>(i), shared::all::<CSINode>(i), shared::nodes(i));
    let world = World {
        client: sim.client.clone(),
        claims: claims.store(),
        volumes: volumes.store(),
        attachments: attachments.store(),
        classes: classes.store(),
        csi_nodes: csi_nodes.store(),
        nodes: nodes.store(),
        sim: sim.clone(),
        recorder: KubeletRecorder::new(sim.client.clone(), crate::api::storage::DRIVER),
        busy: Arc::default(),
    };
    let provision = provisioner::run(world.clone(), claims.subscribe(), volumes.subscribe());
    let attach = attacher::run(world.clone(), attachments.subscribe());
    let register = nodes::run(world.clone(), nodes.subscribe(), classes.subscribe());
    let simulations = vec![
        Simulation {
            name: "storage provisioner".into(),
            ready: vec![
                crate::informer::sync_wait("persistentvolumeclaims".into(), claims.store()),
                crate::informer::sync_wait("persistentvolumes".into(), volumes.store()),
            ],
            run: Box::pin(provision),
        },
        Simulation {
            name: "storage attacher".into(),
            ready: vec![crate::informer::sync_wait("volumeattachments".into(), attachments.store())],
            run: Box::pin(attach),
        },
        Simulation {
            name: "storage node plugin".into(),
            ready: vec![
                crate::informer::sync_wait("storageclasses".into(), classes.store()),
                crate::informer::sync_wait("csinodes".into(), csi_nodes.store()),
            ],
            run: Box::pin(register),
        },
    ];
    (simulations, Arc::new(Mounts::new(world)))
}

/// The rights the storage simulation needs (RBAC is generated from these).
pub fn rules() -> Vec<Rule> {
    let storage = "storage.k8s.io";
    vec![
        Rule::cluster(
            "",
            &["persistentvolumeclaims"],
            &["list", "watch"],
            "claims of the simulated CSI driver's StorageClasses: provisioned",
        ),
        Rule::cluster("", &["persistentvolumeclaims/status"], &["patch"], "an expanded claim's new size"),
        Rule::cluster(
            "",
            &["persistentvolumes"],
            &["list", "watch", "create", "patch", "delete"],
            "the simulated CSI driver's volumes: created, expanded, deleted when Released (reclaim policy Delete)",
        ),
        Rule::cluster(
            storage,
            &["storageclasses"],
            &["list", "watch"],
            "which StorageClasses are the simulated CSI driver's",
        ),
        Rule::cluster(storage, &["volumeattachments"], &["list", "watch"], "the simulated CSI driver's attachments"),
        Rule::cluster(storage, &["volumeattachments/status"], &["patch"], "attached, or the attach error"),
        Rule::cluster(
            storage,
            &["csinodes"],
            &["list", "watch", "create", "delete"],
            "a CSINode for every simulated node: the driver's attach limit and topology",
        ),
        Rule::cluster(
            storage,
            &["csidrivers"],
            &["get", "create", "patch"],
            "the simulated CSI driver's CSIDriver object",
        ),
    ]
}
