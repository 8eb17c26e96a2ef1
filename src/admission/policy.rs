//! The webhook's verdict on a LifecyclePolicy: its rules ([`crate::policy::rules::validate`]),
//! each problem naming its field by its manifest path. A policy creates nothing, so there is
//! no one's right to check and nothing to dry-run.

use crate::policy::LifecyclePolicy;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

/// Whether a request is about a LifecyclePolicy.
pub fn is_policy(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.kind.group == crate::api::common::GROUP && req.kind.kind == "LifecyclePolicy"
}

/// The verdict on one request: (allowed, response).
pub fn judge(req: &AdmissionRequest<DynamicObject>) -> (bool, AdmissionResponse) {
    let resp = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return (true, resp);
    }
    let Some(obj) = req.object.as_ref() else { return (true, resp) };
    let policy = match serde_json::to_value(obj).and_then(serde_json::from_value::<LifecyclePolicy>) {
        Ok(p) => p,
        Err(e) => return (false, resp.deny(format!("the object does not decode as a LifecyclePolicy: {e}"))),
    };
    let problems = crate::policy::rules::validate(&policy);
    if problems.is_empty() { (true, resp) } else { (false, resp.deny(problems.join("; "))) }
}
