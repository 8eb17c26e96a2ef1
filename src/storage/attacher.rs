//! The external attacher of the simulated driver: a VolumeAttachment the attach/detach
//! controller creates for one of the driver's volumes is marked attached after its class's
//! `attachDelay`; a drawn share of attempts fails (`attachError`, which the controller reports
//! on the pod as `FailedAttachVolume`) and is tried again. Detaching is the controller's
//! delete: the driver keeps no finalizer.

use super::World;
use crate::api::storage::VolumeClass;
use crate::informer::Change;
use crate::simulator::lifecycle::units;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

const RESYNC: Duration = Duration::from_secs(10);
const RETRY_CAP: Duration = Duration::from_secs(30);

pub async fn run(world: World, mut changes: UnboundedReceiver<Change<VolumeAttachment>>) {
    let mut tick = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            c = changes.recv() => match c {
                Some(Change::Applied(va)) => on_attachment(&world, &va),
                Some(_) => {}
                None => return,
            },
            _ = tick.tick() => {
                for va in world.attachments.state() {
                    on_attachment(&world, &va);
                }
            }
        }
    }
}

/// Whether `va` waits for the driver to attach it here.
fn waiting(world: &World, va: &VolumeAttachment) -> bool {
    let attached = va.status.as_ref().is_some_and(|s| s.attached);
    va.spec.attacher == crate::api::storage::DRIVER
        && !attached
        && va.metadata.deletion_timestamp.is_none()
        && world.sim.shard.owns(&va.spec.node_name)
        && world.nodes.get(&ObjectRef::new(&va.spec.node_name)).is_some_and(|n| world.sim.manage.manages(&n))
}

fn on_attachment(world: &World, va: &Arc<VolumeAttachment>) {
    if !waiting(world, va) {
        return;
    }
    let (w, key) = (world.clone(), ObjectRef::from_obj(va.as_ref()));
    world.spawn_once(format!("attach/{}", va.name_any()), async move { attach(w, key).await });
}

/// The class of the volume `va` attaches (its parameters: delay, failures).
fn knobs(world: &World, va: &VolumeAttachment) -> (VolumeClass, Option<String>) {
    let pv = va.spec.source.persistent_volume_name.as_deref().and_then(|n| world.volumes.get(&ObjectRef::new(n)));
    let class_name = pv.as_ref().and_then(|pv| pv.spec.as_ref()?.storage_class_name.clone());
    let class = world.class(class_name.as_deref());
    let knobs = class.and_then(|c| VolumeClass::from_parameters(c.parameters.as_ref()).ok()).unwrap_or_default();
    (knobs, class_name)
}

async fn attach(world: World, key: ObjectRef<VolumeAttachment>) {
    let api: Api<VolumeAttachment> = Api::all(world.client.clone());
    let params = crate::api::conventions::patch_params();
    for attempt in 0u32.. {
        let Some(va) = world.attachments.get(&key) else { return };
        if !waiting(&world, &va) {
            return;
        }
        let (knobs, class) = knobs(&world, &va);
        let uid = va.uid().unwrap_or_default();
        let (u1, u2) = units(0, &[&uid, &attempt.to_string()], "attach");
        tokio::time::sleep(knobs.attach_delay.sample(u1, u2)).await;
        let fails =
            super::plan::draw(&format!("{uid}/attach"), attempt) * 100.0 < f64::from(knobs.attach_failure_percent);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = if fails {
            world.sim.metrics.injected("volume_attach_failure");
            let message = format!(
                "rpc error: code = Internal desc = simulated attach failure of {} on node {} (StorageClass {:?}, parameters.attachFailurePercent: {}); retrying",
                va.spec.source.persistent_volume_name.as_deref().unwrap_or_default(),
                va.spec.node_name,
                class.unwrap_or_default(),
                knobs.attach_failure_percent
            );
            json!({"attached": false, "attachError": {"time": now, "message": message}})
        } else {
            json!({"attached": true, "attachError": null})
        };
        let ok = api.patch_status(&key.name, &params, &Patch::Merge(json!({"status": status}))).await;
        world.sim.metrics.write("volumeattachments", "patch", ok.is_ok());
        match ok {
            Ok(_) if !fails => return,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) => tracing::warn!(attachment = %key.name, error = %e, "marking an attachment failed; trying again"),
            Ok(_) => {}
        }
        tokio::time::sleep(crate::backoff::retry_after(attempt + 1, RETRY_CAP)).await;
    }
}
