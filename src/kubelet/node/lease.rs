//! Node leases in `kube-node-lease`: the heartbeat the node lifecycle controller watches. Every
//! Lease the simulator writes is annotated `kwok.x-k8s.io/node=fake`, as its node is: the
//! admission policy lets the operator's identity write no other Lease there.

use crate::api::conventions::{FAKE_NODE_ANNOTATION, FAKE_VALUE, FIELD_MANAGER};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PostParams};

pub use crate::informer::shared::LEASE_NAMESPACE;

fn owner(node_name: &str, node_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.into(),
        uid: node_uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

/// The lease of `node_name` as a kubelet writes it, marked as a simulated node's.
pub fn lease(node_name: &str, node_uid: &str, duration_secs: i32, now: MicroTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node_name.into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![owner(node_name, node_uid)]),
            annotations: Some([(FAKE_NODE_ANNOTATION.to_string(), FAKE_VALUE.to_string())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.into()),
            lease_duration_seconds: Some(duration_secs),
            renew_time: Some(now),
            ..Default::default()
        }),
    }
}

/// On a node Lease: the simulator replica that renews it (sharded simulators only).
pub const SIMULATOR_ANNOTATION: &str = "kwok-pools.x-k8s.io/simulator";

/// A renewal that went through: its verb, and whether the Lease still names this replica (a
/// renewal that finds another replica's name must write the lease whole next time: another
/// replica held the node for a while and this one did not notice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    pub verb: &'static str,
    pub ours: bool,
    /// The Lease's resourceVersion after this write: the next renewal expects it.
    pub version: Option<String>,
    /// Another writer renewed the Lease since this replica's last renewal: its field manager
    /// (kwok-controller, a kubelet, another simulator).
    pub foreign: Option<String>,
}

/// On a node simulated here: another writer renews its Lease too (the value names it). The
/// pool controller reports it on the node's pool.
pub const CONFLICT_ANNOTATION: &str = crate::api::conventions::SIMULATOR_CONFLICT_ANNOTATION;

/// The field manager, not this operator, that owns the Lease's renewTime, if any (pure).
fn other_renewer(lease: &Lease) -> Option<String> {
    lease.metadata.managed_fields.iter().flatten().find_map(|entry| {
        let manager = entry.manager.as_deref()?;
        let fields = entry.fields_v1.as_ref()?;
        let renews = fields.0.get("f:spec").and_then(|spec| spec.get("f:renewTime")).is_some();
        (renews && manager != FIELD_MANAGER).then(|| manager.to_string())
    })
}

/// Whether `lease` names `simulator` (always, when not sharded).
pub fn names(lease: &Lease, simulator: Option<&str>) -> bool {
    simulator.is_none_or(|me| {
        lease.metadata.annotations.as_ref().and_then(|a| a.get(SIMULATOR_ANNOTATION)).map(String::as_str) == Some(me)
    })
}

/// Renews (or creates) the lease of a node: one write. The first renewal by this replica
/// (`first`) creates the lease, or on a conflict writes it whole (holder, duration, the node as
/// owner, and `simulator`, the replica, when sharded); later renewals send only the renew time
/// and the duration.
/// No lease store is needed (and none is kept: a watch of every lease by every replica would
/// multiply the API server's work for each renewal).
///
/// A renewal that knows the resourceVersion its last one left (`expect`) sends it as a
/// precondition: a conflict means someone else wrote the Lease meanwhile. The renewal then
/// reads it, names the other renewer if there is one ([`Renewed::foreign`]) and renews anyway.
pub async fn renew(
    api: &Api<Lease>,
    node: &Node,
    duration_secs: i32,
    (simulator, now): (Option<&str>, k8s_openapi::jiff::Timestamp),
    first: bool,
    expect: Option<&str>,
) -> Result<Renewed, kube::Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let now = MicroTime(now);
    let pp = crate::api::conventions::patch_params();
    let renewed = |lease: Lease, verb: &'static str, foreign: Option<String>| Renewed {
        verb,
        ours: names(&lease, simulator),
        version: lease.metadata.resource_version,
        foreign,
    };
    if !first {
        // The duration rides along: a pool whose heartbeat changed gets it on the next renewal.
        let mut patch = serde_json::json!({ "spec": { "renewTime": now, "leaseDurationSeconds": duration_secs } });
        if let Some(version) = expect {
            patch["metadata"] = serde_json::json!({ "resourceVersion": version });
        }
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(lease) => return Ok(renewed(lease, "renew", None)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.code == 409 && expect.is_some() => {
                // Written since this replica's last renewal: by whom, then renewed anyway.
                let foreign = api.get(&name).await.ok().as_ref().and_then(other_renewer);
                let patch = serde_json::json!({ "spec": { "renewTime": now } });
                let lease = api.patch(&name, &pp, &Patch::Merge(&patch)).await?;
                return Ok(renewed(lease, "renew", foreign));
            }
            Err(e) => return Err(e),
        }
    }
    let post = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let mut fresh = lease(&name, &uid, duration_secs, now.clone());
    if let Some(me) = simulator {
        fresh.metadata.annotations.get_or_insert_default().insert(SIMULATOR_ANNOTATION.to_string(), me.to_string());
    }
    match api.create(&post, &fresh).await {
        Ok(made) => Ok(Renewed { verb: "create", ours: true, version: made.metadata.resource_version, foreign: None }),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // It exists (kept from before a restart, or another replica's until now): make it
            // this node's and this replica's.
            let mut patch = serde_json::json!({
                "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_secs, "renewTime": now}
            });
            if !uid.is_empty() {
                patch["metadata"]["ownerReferences"] = serde_json::json!([owner(&name, &uid)]);
            }
            patch["metadata"]["annotations"] = serde_json::json!({ FAKE_NODE_ANNOTATION: FAKE_VALUE });
            if let Some(me) = simulator {
                patch["metadata"]["annotations"][SIMULATOR_ANNOTATION] = me.into();
            }
            api.patch(&name, &pp, &Patch::Merge(&patch)).await.map(|lease| Renewed {
                verb: "renew",
                ours: true,
                version: lease.metadata.resource_version,
                foreign: None,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_names_the_replica_in_its_annotation() {
        let mut l = lease("n", "u", 40, MicroTime(k8s_openapi::jiff::Timestamp::now()));
        assert!(names(&l, None), "unsharded: always ours");
        assert!(!names(&l, Some("sim-a")), "no annotation: not ours");
        l.metadata.annotations = Some([(SIMULATOR_ANNOTATION.to_string(), "sim-b".to_string())].into());
        assert!(!names(&l, Some("sim-a")), "another replica's");
        assert!(names(&l, Some("sim-b")));
    }

    #[test]
    fn the_other_renewer_is_the_manager_of_renew_time_that_is_not_us() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |manager: &str, fields: serde_json::Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let mut l = lease("n", "u", 40, MicroTime(k8s_openapi::jiff::Timestamp::now()));
        let renew = serde_json::json!({"f:spec": {"f:renewTime": {}}});
        l.metadata.managed_fields = Some(vec![entry(FIELD_MANAGER, renew.clone())]);
        assert_eq!(other_renewer(&l), None, "only us");
        l.metadata.managed_fields = Some(vec![
            entry(FIELD_MANAGER, serde_json::json!({"f:spec": {"f:holderIdentity": {}}})),
            entry("kube-controller-manager", serde_json::json!({"f:metadata": {"f:ownerReferences": {}}})),
        ]);
        assert_eq!(other_renewer(&l), None, "another writer of other fields is no simulator");
        l.metadata.managed_fields = Some(vec![entry(FIELD_MANAGER, serde_json::json!({})), entry("kwok", renew)]);
        assert_eq!(other_renewer(&l).as_deref(), Some("kwok"));
    }
}
