//! What the simulated CSI driver does with a claim, a volume or an attachment (pure): the
//! external provisioner's decision and the volume it creates, the resizer's, the attacher's
//! names, and how full a volume reports itself.

use crate::api::storage::{DRIVER, PROVISIONED_BY_ANNOTATION, SELECTED_NODE_ANNOTATION, VolumeClass, ZONE_LABEL};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;
use sha2::{Digest, Sha256};

/// What the provisioner does with a claim now.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// Nothing: bound, going, or waiting for the scheduler to pick its node.
    Wait,
    /// Create its volume, in this zone (none: no topology).
    Provision { zone: Option<String> },
    /// It cannot be provisioned as it is (the `ProvisioningFailed` note).
    Refuse(String),
}

/// Whether `class` is the driver's.
pub fn ours(class: &StorageClass) -> bool {
    class.provisioner == DRIVER
}

/// The claim's StorageClass name.
pub fn class_of(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec.as_ref()?.storage_class_name.as_deref()
}

/// The node the scheduler picked for a claim waiting for its first consumer.
pub fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata.annotations.as_ref()?.get(SELECTED_NODE_ANNOTATION).map(String::as_str)
}

/// What the provisioner does with `pvc` of `class` (the driver's). `selected`: the node the
/// scheduler picked (looked up); `zones`: the zones of the simulated nodes, for a claim bound
/// at once (one of them within the class's `allowedTopologies`; when none is, it waits).
pub fn claim(pvc: &PersistentVolumeClaim, class: &StorageClass, selected: Option<&Node>, zones: &[String]) -> Claim {
    let spec = pvc.spec.clone().unwrap_or_default();
    let bound = spec.volume_name.as_deref().is_some_and(|v| !v.is_empty());
    if bound || pvc.metadata.deletion_timestamp.is_some() {
        return Claim::Wait;
    }
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let failed = |why: String| Claim::Refuse(format!("failed to provision volume with StorageClass {name:?}: {why}"));
    let params = match VolumeClass::from_parameters(class.parameters.as_ref()) {
        Ok(p) => p,
        Err(e) => return failed(format!("rpc error: code = InvalidArgument desc = {e}")),
    };
    let modes = spec.access_modes.clone().unwrap_or_default();
    if let Some(m) = params.unsupported(&modes) {
        return failed(format!(
            "rpc error: code = InvalidArgument desc = access mode {m} is not supported by {DRIVER} (this class's parameters.accessModes: {}); use a class that lists it",
            params.access_modes.join(", ")
        ));
    }
    if requested_bytes(pvc).is_none() {
        return failed("the claim requests no storage: set spec.resources.requests.storage".into());
    }
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
        let Some(node) = selected else { return Claim::Wait };
        let zone = node.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned();
        return Claim::Provision { zone };
    }
    let allowed = allowed_zones(class);
    let candidates: Vec<&String> = zones.iter().filter(|z| allowed.as_ref().is_none_or(|a| a.contains(z))).collect();
    match (candidates.is_empty(), allowed) {
        (false, _) => Claim::Provision { zone: Some(candidates[pick(uid(pvc), candidates.len())].clone()) },
        // None of the allowed zones has a node simulated here (another instance's, or none yet).
        (true, Some(a)) if !a.is_empty() => Claim::Wait,
        _ => Claim::Provision { zone: None },
    }
}

fn uid(pvc: &PersistentVolumeClaim) -> &str {
    pvc.metadata.uid.as_deref().unwrap_or_default()
}

/// An index below `n` drawn from `key` (the same for the same key).
fn pick(key: &str, n: usize) -> usize {
    let d = Sha256::digest(key.as_bytes());
    (u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]) % n as u64) as usize
}

/// The zones a class's `allowedTopologies` allow (`None`: any).
fn allowed_zones(class: &StorageClass) -> Option<Vec<String>> {
    let terms = class.allowed_topologies.as_ref().filter(|t| !t.is_empty())?;
    let zones = terms
        .iter()
        .flat_map(|t| t.match_label_expressions.iter().flatten())
        .filter(|e| e.key == ZONE_LABEL)
        .flat_map(|e| e.values.iter().cloned())
        .collect();
    Some(zones)
}

/// The bytes a claim requests.
pub fn requested_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    let q = pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")?;
    bytes(q)
}

/// The storage a claim requests, as written.
pub fn requested(pvc: &PersistentVolumeClaim) -> Option<Quantity> {
    pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage").cloned()
}

pub fn bytes(q: &Quantity) -> Option<u64> {
    crate::api::validation::quantity::approximate(&q.0).filter(|b| *b >= 0.0).map(|b| b.round() as u64)
}

/// The bytes a volume holds.
pub fn capacity_bytes(pv: &PersistentVolume) -> Option<u64> {
    bytes(pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?)
}

/// The volume the provisioner creates for `pvc` of `class`, in `zone`.
pub fn volume(pvc: &PersistentVolumeClaim, class: &StorageClass, zone: Option<&str>) -> PersistentVolume {
    let spec = pvc.spec.clone().unwrap_or_default();
    let storage = requested(pvc).unwrap_or_else(|| Quantity("0".into()));
    let fs = spec.volume_mode.as_deref() != Some("Block");
    let fs_type = class.parameters.as_ref().and_then(|p| p.get("csi.storage.k8s.io/fstype")).cloned();
    let affinity = zone.map(|z| {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [z]}]}]}})
    });
    let v = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(pvc),
            "annotations": {PROVISIONED_BY_ANNOTATION: DRIVER},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.access_modes.clone().unwrap_or_default(),
            "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            "storageClassName": class.metadata.name,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "mountOptions": class.mount_options,
            "claimRef": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": pvc.metadata.namespace, "name": pvc.metadata.name, "uid": pvc.metadata.uid,
                "resourceVersion": pvc.metadata.resource_version,
            },
            "csi": {
                "driver": DRIVER,
                "volumeHandle": handle(pvc),
                "fsType": if fs { Some(fs_type.unwrap_or_else(|| "ext4".into())) } else { None },
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": format!("{DRIVER}-kwok-pools")},
            },
            "nodeAffinity": affinity,
        },
    });
    serde_json::from_value(strip_nulls(v)).unwrap_or_default()
}

fn strip_nulls(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect(),
        ),
        other => other,
    }
}

/// The volume's name: the external provisioner's `pvc-<claim uid>`.
pub fn volume_name(pvc: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", uid(pvc))
}

/// The driver's id of the volume.
fn handle(pvc: &PersistentVolumeClaim) -> String {
    format!("vol-{}", uid(pvc))
}

/// The VolumeAttachment of the volume with `handle` on `node` (the attach/detach controller's
/// name: `csi-` and the SHA-256 of handle, driver and node).
pub fn attachment_name(handle: &str, node: &str) -> String {
    let d = Sha256::digest(format!("{handle}{DRIVER}{node}").as_bytes());
    format!("csi-{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Whether `pv` is one of the driver's.
pub fn is_ours(pv: &PersistentVolume) -> bool {
    pv.spec.as_ref().and_then(|s| s.csi.as_ref()).is_some_and(|c| c.driver == DRIVER)
}

/// The driver's handle of `pv`.
pub fn handle_of(pv: &PersistentVolume) -> Option<&str> {
    pv.spec.as_ref()?.csi.as_ref().map(|c| c.volume_handle.as_str())
}

/// Whether the provisioner deletes `pv` now: its claim is gone (Released) and its reclaim
/// policy is Delete.
pub fn reclaim(pv: &PersistentVolume) -> bool {
    let made =
        pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY_ANNOTATION)).is_some_and(|d| d == DRIVER);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) == Some("Delete");
    made && released && delete && pv.metadata.deletion_timestamp.is_none()
}

/// What the resizer does for a bound claim of an expandable class: grow the volume, then
/// report the new size in the claim's status.
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    pub to: Quantity,
    /// The volume still has the old size.
    pub volume: bool,
}

pub fn resize(pvc: &PersistentVolumeClaim, pv: &PersistentVolume, class: &StorageClass) -> Option<Resize> {
    if class.allow_volume_expansion != Some(true) || pvc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let to = requested(pvc)?;
    let want = bytes(&to)?;
    let reported = pvc.status.as_ref().and_then(|s| s.capacity.as_ref()?.get("storage")).and_then(bytes).unwrap_or(0);
    let volume = capacity_bytes(pv).unwrap_or(0) < want;
    (volume || (reported > 0 && reported < want)).then_some(Resize { to, volume })
}

/// How many bytes a volume of `capacity` reports used: a share drawn in the class's
/// `usedPercent` range for the claim `uid`.
pub fn used_bytes(capacity: u64, class: &VolumeClass, uid: &str) -> u64 {
    let (lo, hi) = class.used_percent;
    let pct = u64::from(lo) + pick(&format!("{uid}/used"), usize::from(hi - lo) + 1) as u64;
    capacity / 100 * pct + capacity % 100 * pct / 100
}

/// A seeded unit number for attempt `attempt` of what `key` names.
pub fn draw(key: &str, attempt: u32) -> f64 {
    pick(&format!("{key}/{attempt}"), 1_000_000) as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests;
