//! The simulated driver's node side, as its node plugin registers with each kubelet: once any
//! StorageClass is the driver's, every simulated node gets a CSINode naming the driver with
//! the node's attach limit (`allocatable.count`, which the scheduler's NodeVolumeLimits
//! reads) and the zone as its topology key, and the annotation that lets the attach/detach
//! controller attach its volumes. The driver's CSIDriver object is applied at start.

use super::World;
use crate::api::storage::{ATTACH_LIMIT_ANNOTATION, CONTROLLER_ATTACH_ANNOTATION, DRIVER, ZONE_LABEL, attach_limit};
use crate::informer::Change;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

const RETRY: Duration = Duration::from_secs(5);

/// What a node's CSINode says of the driver: (attach limit, topology zone).
type Registration = (u32, Option<String>);

pub async fn run(
    world: World,
    mut nodes: UnboundedReceiver<Change<Node>>,
    mut classes: UnboundedReceiver<Change<StorageClass>>,
) {
    tokio::spawn(apply_driver(world.client.clone()));
    let mut done: HashMap<String, Registration> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tokio::select! {
            c = nodes.recv() => match c {
                Some(Change::Applied(node)) => on_node(&world, &node, &mut done),
                Some(Change::Deleted(node)) => { done.remove(&node.name_any()); }
                Some(Change::Synced) => {}
                None => return,
            },
            c = classes.recv() => match c {
                Some(_) => all(&world, &mut done),
                None => return,
            },
            _ = tick.tick() => all(&world, &mut done),
        }
    }
}

fn all(world: &World, done: &mut HashMap<String, Registration>) {
    for node in world.nodes.state() {
        on_node(world, &node, done);
    }
}

/// What `node`'s CSINode should say; `Err` when its attach-limit annotation does not read.
fn wanted(node: &Node) -> Result<Registration, String> {
    let limit = attach_limit(node.annotations().get(ATTACH_LIMIT_ANNOTATION).map(String::as_str))?;
    Ok((limit, node.labels().get(ZONE_LABEL).cloned()))
}

/// What `csi` says of the driver.
fn registered(csi: &CSINode) -> Option<Registration> {
    let d = csi.spec.drivers.iter().find(|d| d.name == DRIVER)?;
    let limit = d.allocatable.as_ref().and_then(|a| a.count).map_or(u32::MAX, |c| c.max(0) as u32);
    let zone = d.topology_keys.iter().flatten().any(|k| k == ZONE_LABEL);
    Some((limit, zone.then(String::new)))
}

/// Whether `csi` says what `node` wants, and belongs to this node object (not a former node
/// of the same name).
fn up_to_date(csi: &CSINode, node: &Node, want: &Registration) -> bool {
    let same = registered(csi).is_some_and(|(l, z)| l == want.0 && z.is_some() == want.1.is_some());
    same && csi.owner_references().iter().any(|o| Some(&o.uid) == node.uid().as_ref())
}

fn on_node(world: &World, node: &Arc<Node>, done: &mut HashMap<String, Registration>) {
    let name = node.name_any();
    let serves =
        node.metadata.deletion_timestamp.is_none() && world.sim.manage.manages(node) && world.sim.shard.owns(&name);
    if !serves || !world.enabled() {
        return;
    }
    let want = match wanted(node) {
        Ok(w) => w,
        Err(e) => {
            if done.get(&name).is_none() {
                tracing::warn!(node = %name, "{e}: its CSINode keeps the default limit; fix the annotation (a NodePool's spec.storage.attachLimit)");
            }
            (crate::api::storage::DEFAULT_ATTACH_LIMIT, node.labels().get(ZONE_LABEL).cloned())
        }
    };
    done.insert(name.clone(), want.clone());
    let existing = world.csi_nodes.get(&ObjectRef::new(&name));
    if existing.is_some_and(|c| up_to_date(&c, node, &want)) {
        return;
    }
    let (w, node) = (world.clone(), node.clone());
    world.spawn_once(format!("csinode/{name}"), async move { register(w, node, want).await });
}

/// The CSINode `node` gets.
fn csi_node(node: &Node, (limit, zone): &Registration) -> CSINode {
    let owner = json!({"apiVersion": "v1", "kind": "Node", "name": node.name_any(), "uid": node.uid()});
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node.name_any(), "ownerReferences": [owner]},
        "spec": {"drivers": [{
            "name": DRIVER,
            "nodeID": node.name_any(),
            "topologyKeys": if zone.is_some() { vec![ZONE_LABEL] } else { vec![] },
            "allocatable": {"count": limit},
        }]},
    }))
    .unwrap_or_default()
}

async fn register(world: World, node: Arc<Node>, want: Registration) {
    let name = node.name_any();
    let api: Api<CSINode> = Api::all(world.client.clone());
    let nodes: Api<Node> = Api::all(world.client.clone());
    let params = crate::api::conventions::patch_params();
    for _ in 0..5 {
        if !node.annotations().contains_key(CONTROLLER_ATTACH_ANNOTATION) {
            let patch = json!({"metadata": {"annotations": {CONTROLLER_ATTACH_ANNOTATION: "true"}}});
            let ok = nodes.patch(&name, &params, &Patch::Merge(patch)).await;
            world.sim.metrics.write("nodes", "patch", ok.is_ok());
        }
        let existing = world.csi_nodes.get(&ObjectRef::new(&name));
        if existing.as_ref().is_some_and(|c| up_to_date(c, &node, &want)) {
            return;
        }
        if existing.is_some() {
            // A driver's entry does not change in place: the registration is made again.
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
        match api.create(&PostParams::default(), &csi_node(&node, &want)).await {
            Ok(_) => {
                world.sim.metrics.write("csinodes", "create", true);
                return;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {} // made meanwhile: looked at again
            Err(e) => {
                world.sim.metrics.write("csinodes", "create", false);
                tracing::debug!(node = %name, error = %e, "registering the storage driver failed; trying again");
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The driver's CSIDriver: attach required (the attach/detach controller creates
/// VolumeAttachments), persistent volumes, no pod info on mount.
async fn apply_driver(client: kube::Client) {
    let api: Api<CSIDriver> = Api::all(client);
    let driver = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": DRIVER, "labels": {"app.kubernetes.io/managed-by": "kwok-pools"}},
        "spec": {"attachRequired": true, "podInfoOnMount": false, "volumeLifecycleModes": ["Persistent"], "fsGroupPolicy": "File", "storageCapacity": false},
    });
    loop {
        match api.patch(DRIVER, &crate::api::conventions::apply_params(), &Patch::Apply(&driver)).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "applying the simulated CSI driver's CSIDriver failed; trying again in 30s")
            }
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
}
