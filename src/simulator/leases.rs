//! Node leases in `kube-node-lease`: the heartbeat the node lifecycle controller watches.

use crate::api::conventions::FIELD_MANAGER;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource};

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

/// Renews (or creates) the lease of a node: one write in the steady state.
pub async fn renew(
    api: &Api<Lease>,
    store: &Store<Lease>,
    node: &Node,
    duration_secs: i32,
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
            patch["metadata"] = serde_json::json!({"ownerReferences": [owner(&name, &uid)]});
        }
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => return Ok("renew"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match api.create(&pp, &lease(&name, &uid, duration_secs, now.clone())).await {
        Ok(_) => Ok("create"),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Created meanwhile (by us before a restart, or the store lags): renew it.
            let patch = serde_json::json!({
                "metadata": {"ownerReferences": [owner(&name, &uid)]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_secs, "renewTime": now}
            });
            let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            api.patch(&name, &pp, &Patch::Merge(&patch)).await.map(|_| "renew")
        }
        Err(e) => Err(e),
    }
}

trait OwnerRefs {
    fn owner_references(&self) -> &[OwnerReference];
}

impl OwnerRefs for Lease {
    fn owner_references(&self) -> &[OwnerReference] {
        self.meta().owner_references.as_deref().unwrap_or_default()
    }
}
