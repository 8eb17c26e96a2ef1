//! The webhook's verdict on a StorageClass of the simulated CSI driver: its `parameters` read
//! ([`crate::api::storage::VolumeClass::from_parameters`]), a problem naming the parameter.
//! Other provisioners' classes are not judged. Parameters are immutable, so only a create is
//! judged.

use crate::api::storage::{DRIVER, VolumeClass};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

/// Whether a request is about a StorageClass.
pub fn is_storage_class(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.kind.group == "storage.k8s.io" && req.kind.kind == "StorageClass"
}

/// The verdict on one request: (allowed, response).
pub fn judge(req: &AdmissionRequest<DynamicObject>) -> (bool, AdmissionResponse) {
    let resp = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create) {
        return (true, resp);
    }
    let Some(obj) = req.object.as_ref() else { return (true, resp) };
    if obj.data.get("provisioner").and_then(|p| p.as_str()) != Some(DRIVER) {
        return (true, resp);
    }
    let parameters = obj.data.get("parameters").cloned().map(serde_json::from_value);
    let parameters = match parameters.transpose() {
        Ok(p) => p,
        Err(e) => return (false, resp.deny(format!("parameters: not a map of strings: {e}"))),
    };
    match VolumeClass::from_parameters(parameters.as_ref()) {
        Ok(_) => (true, resp),
        Err(e) => (false, resp.deny(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionReview;

    fn request(provisioner: &str, parameters: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "storage.k8s.io", "version": "v1", "kind": "StorageClass"},
                "resource": {"group": "storage.k8s.io", "version": "v1", "resource": "storageclasses"},
                "operation": "CREATE",
                "userInfo": {},
                "object": {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "c"},
                           "provisioner": provisioner, "parameters": parameters},
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn the_drivers_classes_are_judged_by_their_parameters() {
        let req = request(DRIVER, serde_json::json!({"attachDelay": "1s..2s"}));
        assert!(is_storage_class(&req));
        assert!(judge(&req).0);
        let (allowed, resp) = judge(&request(DRIVER, serde_json::json!({"attachDelay": "soon"})));
        assert!(!allowed);
        assert!(resp.result.message.contains("parameters.attachDelay"), "{}", resp.result.message);
        assert!(judge(&request("ebs.csi.aws.com", serde_json::json!({"type": "gp3"}))).0, "another driver's class");
    }
}
