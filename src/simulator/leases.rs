//! Node leases in `kube-node-lease`: the heartbeat the node lifecycle controller watches.

use crate::api::conventions::FIELD_MANAGER;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

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

/// The lease of `node_name` as a kubelet writes it.
pub fn lease(node_name: &str, node_uid: &str, duration_secs: i32, now: MicroTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node_name.into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![owner(node_name, node_uid)]),
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

/// Renews (or creates) the lease of a node: one write in the steady state. A sharded replica
/// names itself on the lease (`simulator`) when the lease names another.
pub async fn renew(
    api: &Api<Lease>,
    store: &Store<Lease>,
    node: &Node,
    duration_secs: i32,
    simulator: Option<&str>,
) -> Result<&'static str, kube::Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let existing = store.get(&ObjectRef::<Lease>::new(&name).within(LEASE_NAMESPACE));
    let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    if let Some(existing) = existing {
        let mut patch = serde_json::json!({
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_secs, "renewTime": now}
        });
        let owned_by_node = existing.owner_references().iter().any(|o| o.uid == uid);
        if !owned_by_node && !uid.is_empty() {
            patch["metadata"]["ownerReferences"] = serde_json::json!([owner(&name, &uid)]);
        }
        if let Some(me) = simulator
            && existing.annotations().get(SIMULATOR_ANNOTATION).map(String::as_str) != Some(me)
        {
            patch["metadata"]["annotations"] = serde_json::json!({ SIMULATOR_ANNOTATION: me });
        }
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok("renew"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let mut fresh = lease(&name, &uid, duration_secs, now.clone());
    if let Some(me) = simulator {
        fresh.metadata.annotations = Some([(SIMULATOR_ANNOTATION.to_string(), me.to_string())].into());
    }
    match api.create(&pp, &fresh).await {
        Ok(_) => Ok("create"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Created meanwhile (by us before a restart, or the store lags): renew it.
            let mut patch = serde_json::json!({
                "metadata": {"ownerReferences": [owner(&name, &uid)]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_secs, "renewTime": now}
            });
            if let Some(me) = simulator {
                patch["metadata"]["annotations"] = serde_json::json!({ SIMULATOR_ANNOTATION: me });
            }
            let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            api.patch(&name, &pp, &Patch::Merge(&patch)).await.map(|_| "renew")
        }
        Err(e) => Err(e),
    }
}
