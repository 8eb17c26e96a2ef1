//! The kubelet's volume manager as the simulated kubelet asks it: a pod starts once each
//! claim it uses is bound and, for the driver's volumes on a node the attach/detach
//! controller serves, its VolumeAttachment is attached; a ConfigMap or Secret it mounts
//! (not `optional`) must exist, else the kubelet's `FailedMount` and another look shortly.
//! Existence is read with a GET of the object's metadata, remembered for a while per
//! namespace and name; where the operator may not read them (its in-cluster role grants no
//! ConfigMaps or Secrets), it says so once and takes them as there.

use super::World;
use super::plan;
use crate::api::storage::{CONTROLLER_ATTACH_ANNOTATION, VolumeClass};
use crate::informer::pod::SlimPod;
use crate::informer::volumes::SourceKind;
use crate::kubelet::{Mount, VolumeStat, Volumes};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an object seen is taken as still there.
const FOUND_FOR: Duration = Duration::from_secs(300);
/// How long an object found missing is taken as still missing.
const MISSING_FOR: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Seen {
    Found,
    Missing,
    /// A lookup runs.
    Asking,
}

type Key = (SourceKind, String, String);

pub struct Mounts {
    world: World,
    seen: Arc<Mutex<HashMap<Key, (Seen, Instant)>>>,
    /// A lookup was refused (no right to read): said once.
    refused: Arc<std::sync::atomic::AtomicBool>,
}

impl Mounts {
    pub fn new(world: World) -> Self {
        Self { world, seen: Arc::default(), refused: Arc::default() }
    }

    /// Whether the ConfigMap or Secret exists as last seen; a lookup starts when it is not
    /// known or no longer fresh.
    fn exists(&self, kind: SourceKind, namespace: &str, name: &str) -> Option<bool> {
        let key = (kind, namespace.to_string(), name.to_string());
        let now = Instant::now();
        let mut seen = crate::sync::lock(&self.seen);
        let last = seen.get(&key).copied();
        let fresh = |(s, at): (Seen, Instant)| match s {
            Seen::Found => now.duration_since(at) < FOUND_FOR,
            Seen::Missing => now.duration_since(at) < MISSING_FOR,
            Seen::Asking => true,
        };
        if last.is_some_and(fresh) {
            return match last.map(|l| l.0) {
                Some(Seen::Found) => Some(true),
                Some(Seen::Missing) => Some(false),
                _ => None,
            };
        }
        if seen.len() > 100_000 {
            seen.retain(|_, (_, at)| now.duration_since(*at) < FOUND_FOR);
        }
        seen.insert(key.clone(), (Seen::Asking, now));
        drop(seen);
        let (client, cache, refused) = (self.world.client.clone(), self.seen.clone(), self.refused.clone());
        tokio::spawn(async move {
            let (kind, ns, name) = key.clone();
            let found = match kind {
                SourceKind::ConfigMap => {
                    Api::<ConfigMap>::namespaced(client, &ns).get_metadata_opt(&name).await.map(|o| o.is_some())
                }
                SourceKind::Secret => {
                    Api::<Secret>::namespaced(client, &ns).get_metadata_opt(&name).await.map(|o| o.is_some())
                }
            };
            let seen = match found {
                Ok(true) => Seen::Found,
                Ok(false) => Seen::Missing,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    if !refused.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(
                            "the simulated kubelet may not read {}s ({}): pods mount ConfigMaps and Secrets without checking they exist; grant get on configmaps and secrets to check them",
                            kind.word(),
                            e.message
                        );
                    }
                    Seen::Found
                }
                Err(e) => {
                    tracing::debug!(error = %e, "looking up a mounted object failed; looking again");
                    crate::sync::lock(&cache).remove(&key);
                    return;
                }
            };
            crate::sync::lock(&cache).insert(key, (seen, Instant::now()));
        });
        last.and_then(|(s, _)| match s {
            Seen::Found => Some(true),
            Seen::Missing => Some(false),
            Seen::Asking => None,
        })
    }

    /// Whether the claim's volume is bound and, where it must be, attached to `node`.
    fn claim_ready(&self, node: &Node, namespace: &str, claim: &str) -> bool {
        let Some(pvc) = self.world.claims.get(&ObjectRef::new(claim).within(namespace)) else { return false };
        let Some(pv_name) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty()) else {
            return false;
        };
        let Some(pv) = self.world.volumes.get(&ObjectRef::new(&pv_name)) else { return false };
        let attaches = node.annotations().get(CONTROLLER_ATTACH_ANNOTATION).is_some_and(|v| v == "true");
        if !plan::is_ours(&pv) || !attaches {
            return true;
        }
        let Some(handle) = plan::handle_of(&pv) else { return true };
        let va = self.world.attachments.get(&ObjectRef::new(&plan::attachment_name(handle, &node.name_any())));
        va.is_some_and(|va| va.status.as_ref().is_some_and(|s| s.attached))
    }
}

impl Volumes for Mounts {
    fn mount(&self, node: &Node, pod: &SlimPod) -> Mount {
        let Some(v) = pod.volumes() else { return Mount::Ready };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut later = false;
        let mut missing = Vec::new();
        for s in v.sources.iter() {
            match self.exists(s.kind, ns, &s.name) {
                Some(true) => {}
                Some(false) => missing.push(format!(
                    "MountVolume.SetUp failed for volume \"{}\" : {} \"{}\" not found",
                    s.volume,
                    s.kind.word(),
                    s.name
                )),
                None => later = true,
            }
        }
        // Reported once every source is known, so the one FailedMount names all that are missing.
        if !missing.is_empty() && !later {
            return Mount::Fails(missing.join("; "));
        }
        if later || v.claims.iter().any(|(_, claim)| !self.claim_ready(node, ns, claim)) {
            return Mount::Later;
        }
        Mount::Ready
    }

    fn stats(&self, pod: &SlimPod) -> Vec<VolumeStat> {
        let Some(v) = pod.volumes() else { return Vec::new() };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        v.claims
            .iter()
            .filter_map(|(volume, claim)| {
                let pvc = self.world.claims.get(&ObjectRef::new(claim).within(ns))?;
                let pv_name = pvc.spec.as_ref()?.volume_name.clone()?;
                let pv = self.world.volumes.get(&ObjectRef::new(&pv_name))?;
                let capacity = plan::capacity_bytes(&pv)?;
                let class = self.world.class(pv.spec.as_ref()?.storage_class_name.as_deref());
                let knobs =
                    class.and_then(|c| VolumeClass::from_parameters(c.parameters.as_ref()).ok()).unwrap_or_default();
                let used = plan::used_bytes(capacity, &knobs, &pvc.uid().unwrap_or_default());
                Some(VolumeStat {
                    name: volume.to_string(),
                    claim: claim.to_string(),
                    capacity_bytes: capacity,
                    used_bytes: used,
                })
            })
            .collect()
    }
}
