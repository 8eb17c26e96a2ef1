//! The external provisioner and resizer of the simulated driver: a claim of one of its
//! StorageClasses gets a PersistentVolume (after the class's `provisionDelay`; a drawn share
//! of attempts fails with `ProvisioningFailed` and is tried again), a bound claim asking for
//! more grows its volume and then its status, and a Released volume whose reclaim policy is
//! Delete is deleted. The PV controller binds.

use super::World;
use super::plan::{self, Claim};
use crate::api::storage::{VolumeClass, ZONE_LABEL};
use crate::informer::Change;
use crate::simulator::lifecycle::units;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How often every claim and volume is looked at again (a missed change is not lost).
const RESYNC: Duration = Duration::from_secs(10);
/// The longest wait between failed attempts.
const RETRY_CAP: Duration = Duration::from_secs(30);

pub async fn run(
    world: World,
    mut claims: UnboundedReceiver<Change<PersistentVolumeClaim>>,
    mut volumes: UnboundedReceiver<Change<PersistentVolume>>,
) {
    let mut refused: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            c = claims.recv() => match c {
                Some(Change::Applied(pvc)) => on_claim(&world, &pvc, &mut refused),
                Some(_) => {}
                None => return,
            },
            v = volumes.recv() => match v {
                Some(Change::Applied(pv)) => on_volume(&world, &pv),
                Some(_) => {}
                None => return,
            },
            _ = tick.tick() => {
                for pvc in world.claims.state() {
                    on_claim(&world, &pvc, &mut refused);
                }
                for pv in world.volumes.state() {
                    on_volume(&world, &pv);
                }
            }
        }
    }
}

/// Whether this replica provisions for `pvc`: the one that simulates its selected node, or
/// the owner of its name when it has none.
fn mine(world: &World, pvc: &PersistentVolumeClaim) -> bool {
    let key = plan::selected_node(pvc)
        .map_or_else(|| format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any()), str::to_string);
    world.sim.shard.owns(&key)
}

/// The zones of the simulated nodes, for a claim of `class` bound at once (a claim waiting for
/// its consumer takes its node's zone: no walk over every node for it, at every resync).
fn zones(world: &World, class: &k8s_openapi::api::storage::v1::StorageClass) -> Vec<String> {
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
        return Vec::new();
    }
    let set: BTreeSet<String> = world
        .nodes
        .state()
        .iter()
        .filter(|n| world.sim.manage.manages(n))
        .filter_map(|n| n.labels().get(ZONE_LABEL).cloned())
        .collect();
    set.into_iter().collect()
}

fn on_claim(world: &World, pvc: &Arc<PersistentVolumeClaim>, refused: &mut HashSet<String>) {
    let Some(class) = world.class(plan::class_of(pvc)) else { return };
    if !mine(world, pvc) {
        return;
    }
    let uid = pvc.uid().unwrap_or_default();
    if let Some(name) = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
        let pv = world.volumes.get(&ObjectRef::new(name));
        if let Some(r) = pv.as_deref().and_then(|pv| plan::resize(pvc, pv, &class)) {
            let (w, pvc, pv_name) = (world.clone(), pvc.clone(), name.to_string());
            world.spawn_once(format!("resize/{uid}"), async move { expand(w, pvc, pv_name, r).await });
        }
        return;
    }
    let selected = plan::selected_node(pvc).and_then(|n| world.nodes.get(&ObjectRef::new(n)));
    match plan::claim(pvc, &class, selected.as_deref(), &zones(world, &class)) {
        Claim::Wait => {}
        Claim::Refuse(note) => {
            if refused.insert(uid) {
                let (w, pvc) = (world.clone(), pvc.clone());
                tokio::spawn(async move { w.event(pvc.as_ref(), true, "ProvisioningFailed", "Provision", note).await });
            }
        }
        Claim::Provision { .. } => {
            let (w, key) = (world.clone(), ObjectRef::from_obj(pvc.as_ref()));
            world.spawn_once(format!("provision/{uid}"), async move { provision(w, key).await });
        }
    }
}

/// Provisions the claim `key` names: tried until its volume exists or it no longer needs one.
async fn provision(world: World, key: ObjectRef<PersistentVolumeClaim>) {
    let api: Api<PersistentVolume> = Api::all(world.client.clone());
    for attempt in 0u32.. {
        let Some(pvc) = world.claims.get(&key) else { return };
        let Some(class) = world.class(plan::class_of(&pvc)) else { return };
        let selected = plan::selected_node(&pvc).and_then(|n| world.nodes.get(&ObjectRef::new(n)));
        let Claim::Provision { zone } = plan::claim(&pvc, &class, selected.as_deref(), &zones(&world, &class)) else {
            return;
        };
        let knobs = VolumeClass::from_parameters(class.parameters.as_ref()).unwrap_or_default();
        let uid = pvc.uid().unwrap_or_default();
        if attempt == 0 {
            let note = format!(
                "External provisioner is provisioning volume for claim \"{}/{}\"",
                key.namespace.as_deref().unwrap_or_default(),
                key.name
            );
            world.event(pvc.as_ref(), false, "Provisioning", "Provision", note).await;
        }
        let (u1, u2) = units(0, &[&uid, &attempt.to_string()], "provision");
        tokio::time::sleep(knobs.provision_delay.sample(u1, u2)).await;
        if plan::draw(&format!("{uid}/provision"), attempt) * 100.0 < f64::from(knobs.provision_failure_percent) {
            world.sim.metrics.injected("volume_provision_failure");
            let note = format!(
                "failed to provision volume with StorageClass {:?}: rpc error: code = ResourceExhausted desc = simulated provisioning failure (parameters.provisionFailurePercent: {}); retrying",
                class.name_any(),
                knobs.provision_failure_percent
            );
            world.event(pvc.as_ref(), true, "ProvisioningFailed", "Provision", note).await;
            tokio::time::sleep(crate::backoff::retry_after(attempt + 1, RETRY_CAP)).await;
            continue;
        }
        let pv = plan::volume(&pvc, &class, zone.as_deref());
        let name = pv.name_any();
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                world.sim.metrics.write("persistentvolumes", "create", true);
                let note = format!("Successfully provisioned volume {name}");
                world.event(pvc.as_ref(), false, "ProvisioningSucceeded", "Provision", note).await;
                return;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => return,
            Err(e) => {
                world.sim.metrics.write("persistentvolumes", "create", false);
                tracing::warn!(volume = %name, error = %e, "creating a volume failed; trying again");
                tokio::time::sleep(crate::backoff::retry_after(attempt + 1, RETRY_CAP)).await;
            }
        }
    }
}

/// Grows the volume, then the claim's status, to what the claim asks.
async fn expand(world: World, pvc: Arc<PersistentVolumeClaim>, pv: String, r: plan::Resize) {
    let params = crate::api::conventions::patch_params();
    let size = r.to.0.clone();
    if r.volume {
        world
            .event(pvc.as_ref(), false, "Resizing", "Resize", format!("External resizer is resizing volume {pv}"))
            .await;
        let patch = json!({"spec": {"capacity": {"storage": size}}});
        let api: Api<PersistentVolume> = Api::all(world.client.clone());
        if let Err(e) = api.patch(&pv, &params, &kube::api::Patch::Merge(patch)).await {
            tracing::warn!(volume = %pv, error = %e, "expanding a volume failed; the next look tries again");
            return;
        }
    }
    let patch = json!({"status": {"capacity": {"storage": size}, "allocatedResources": {"storage": size}, "allocatedResourceStatuses": null, "conditions": null}});
    let api: Api<PersistentVolumeClaim> = Api::namespaced(world.client.clone(), &pvc.namespace().unwrap_or_default());
    match api.patch_status(&pvc.name_any(), &params, &kube::api::Patch::Merge(patch)).await {
        Ok(_) => {
            world.event(pvc.as_ref(), false, "VolumeResizeSuccessful", "Resize", "Resize volume succeeded".into()).await
        }
        Err(e) => {
            tracing::warn!(claim = %pvc.name_any(), error = %e, "reporting an expanded claim failed; the next look tries again")
        }
    }
}

fn on_volume(world: &World, pv: &Arc<PersistentVolume>) {
    if !plan::reclaim(pv) {
        return;
    }
    let name = pv.name_any();
    if !world.sim.shard.owns(&name) {
        return;
    }
    let (w, uid) = (world.clone(), pv.uid().unwrap_or_default());
    world.spawn_once(format!("delete/{name}"), async move {
        let api: Api<PersistentVolume> = Api::all(w.client.clone());
        let dp = kube::api::DeleteParams { preconditions: Some(kube::api::Preconditions { uid: Some(uid), resource_version: None }), ..Default::default() };
        match api.delete(&name, &dp).await {
            Ok(_) => w.sim.metrics.write("persistentvolumes", "delete", true),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                w.sim.metrics.write("persistentvolumes", "delete", false);
                tracing::warn!(volume = %name, error = %e, "deleting a Released volume failed; the next look tries again");
            }
        }
    });
}
