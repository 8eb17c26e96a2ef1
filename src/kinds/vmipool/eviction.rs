//! The webhook's verdict on an eviction of a VMI's launcher pod, as KubeVirt's virt-api
//! gives it (`pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go`)
//! when no KubeVirt runs: a VMI whose `evictionStrategy` is `LiveMigrate` (or
//! `LiveMigrateIfPossible` and migratable, or `External`) is marked for evacuation off the
//! pod's node (`status.evacuationNodeName`, not on a dry run) and the eviction is refused with
//! 429, so `kubectl drain` tries again until the migration the simulator then makes has moved
//! the VMI and its source pod has ended. Any other pod's eviction is allowed.

use crate::kinds::vmipool::kubevirt::VirtualMachineInstance;
use crate::kinds::vmipool::simulator::status::{APP_LABEL, CREATED_BY_LABEL};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

/// Whether a request is an eviction (the `pods/eviction` subresource).
pub fn is_eviction(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.resource.resource == "pods" && req.sub_resource.as_deref() == Some("eviction")
}

/// What the webhook does with an eviction of a launcher pod.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Evicted as any pod (not a launcher pod, or a VMI that does not migrate on eviction).
    Allow,
    /// Refused; the VMI is marked for evacuation off this node.
    Evacuate { node: String },
}

/// The verdict on evicting `pod` of `vmi` (pure). `migratable`: the VMI's LiveMigratable
/// condition.
pub fn verdict(pod: &Pod, vmi: &VirtualMachineInstance) -> Verdict {
    let strategy = vmi.spec.eviction_strategy.as_deref().unwrap_or("None");
    let migratable = vmi.condition("LiveMigratable").is_some_and(|c| c.status == "True");
    let migrates = match strategy {
        "LiveMigrate" | "External" => true,
        "LiveMigrateIfPossible" => migratable,
        _ => false,
    };
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let vmi_node = vmi.status.as_ref().and_then(|s| s.node_name.clone());
    let running = vmi.metadata.deletion_timestamp.is_none() && matches!(vmi.phase(), "Running" | "Scheduled");
    match node {
        // Only the pod the VMI runs in holds it: a source pod it left, or a migration's target
        // that has not taken over, goes as any pod.
        Some(node) if migrates && running && vmi_node.as_deref() == Some(node.as_str()) => Verdict::Evacuate { node },
        _ => Verdict::Allow,
    }
}

/// KubeVirt's refusal.
pub fn refusal(namespace: &str, vmi: &str) -> String {
    format!("Eviction triggered evacuation of VMI \"{namespace}/{vmi}\"")
}

fn too_many_requests(resp: AdmissionResponse, message: String) -> AdmissionResponse {
    let mut resp = resp.deny(message);
    resp.result.code = 429;
    resp.result.reason = "TooManyRequests".into();
    resp
}

/// The verdict on one eviction: (allowed, response). Without a client (a webhook run without
/// one), every eviction is allowed.
pub async fn judge(req: &AdmissionRequest<DynamicObject>, client: Option<&kube::Client>) -> (bool, AdmissionResponse) {
    let resp = AdmissionResponse::from(req);
    let (Some(client), Some(ns)) = (client, req.namespace.as_deref()) else { return (true, resp) };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = match pods.get_opt(&req.name).await {
        Ok(Some(p)) => p,
        Ok(None) => return (true, resp),
        Err(e) => {
            return (
                false,
                too_many_requests(resp, format!("kwok-pools cannot read pod {ns}/{}: {e}; try again", req.name)),
            );
        }
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if labels.get(APP_LABEL).map(String::as_str) != Some("virt-launcher") || !labels.contains_key(CREATED_BY_LABEL) {
        return (true, resp);
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "VirtualMachineInstance");
    let Some(owner) = owner else { return (true, resp) };
    // Beside a real KubeVirt its own webhook answers.
    if crate::pool::controller::crd_established(client, "kubevirts.kubevirt.io").await.unwrap_or(false) {
        return (true, resp);
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi = match vmis.get_opt(&owner.name).await {
        Ok(Some(v)) if v.metadata.uid.as_deref() == Some(owner.uid.as_str()) => v,
        Ok(_) => return (true, resp),
        Err(e) => {
            return (
                false,
                too_many_requests(resp, format!("kwok-pools cannot read VMI {ns}/{}: {e}; try again", owner.name)),
            );
        }
    };
    let Verdict::Evacuate { node } = verdict(&pod, &vmi) else { return (true, resp) };
    let marked = vmi.status.as_ref().and_then(|s| s.rest.get("evacuationNodeName")).and_then(|v| v.as_str())
        == Some(node.as_str());
    if !req.dry_run && !marked {
        let patch = serde_json::json!({"metadata": {"uid": vmi.metadata.uid}, "status": {"evacuationNodeName": node}});
        let pp = crate::api::conventions::patch_params();
        if let Err(e) = vmis.patch(&owner.name, &pp, &Patch::Merge(&patch)).await {
            let why = format!("kwok-pools cannot mark VMI {ns}/{} for evacuation: {e}; try again", owner.name);
            return (false, too_many_requests(resp, why));
        }
        tracing::info!(vmi = %owner.name, namespace = %ns, node = %node, "eviction of a launcher pod: the VMI is marked for evacuation");
    }
    (false, too_many_requests(resp, refusal(ns, &owner.name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(strategy: Option<&str>, phase: &str, node: &str, migratable: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "d", "uid": "u"},
            "spec": {"evictionStrategy": strategy},
            "status": {"phase": phase, "nodeName": node,
                       "conditions": [{"type": "LiveMigratable", "status": migratable}]},
        }))
        .unwrap()
    }

    fn pod(node: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "virt-launcher-vm-x"}, "spec": {"nodeName": node, "containers": []}}),
        )
        .unwrap()
    }

    #[test]
    fn live_migrate_vmis_are_evacuated_off_the_pods_node_and_others_are_evicted() {
        let evacuate = Verdict::Evacuate { node: "n1".into() };
        assert_eq!(verdict(&pod("n1"), &vmi(Some("LiveMigrate"), "Running", "n1", "True")), evacuate);
        assert_eq!(verdict(&pod("n1"), &vmi(Some("External"), "Running", "n1", "False")), evacuate);
        assert_eq!(verdict(&pod("n1"), &vmi(Some("LiveMigrateIfPossible"), "Running", "n1", "True")), evacuate);
        assert_eq!(verdict(&pod("n1"), &vmi(Some("LiveMigrateIfPossible"), "Running", "n1", "False")), Verdict::Allow);
        assert_eq!(verdict(&pod("n1"), &vmi(Some("None"), "Running", "n1", "True")), Verdict::Allow);
        assert_eq!(
            verdict(&pod("n1"), &vmi(None, "Running", "n1", "True")),
            Verdict::Allow,
            "no cluster-wide default without KubeVirt"
        );
        assert_eq!(
            verdict(&pod("n2"), &vmi(Some("LiveMigrate"), "Running", "n1", "True")),
            Verdict::Allow,
            "a pod the VMI left"
        );
        assert_eq!(verdict(&pod("n1"), &vmi(Some("LiveMigrate"), "Failed", "n1", "True")), Verdict::Allow);
        assert_eq!(refusal("d", "vm"), "Eviction triggered evacuation of VMI \"d/vm\"");
    }
}
