//! The API server's refusal of a rendered child, told in the pool's own terms: each cause at
//! its path in the pool manifest (`spec.podTemplate.spec.containers[0].image: Required
//! value`), so a user fixes the template they wrote. Pure.

use kube::core::Status;

/// Whether an API error is the API server refusing the object itself: 422 Invalid, a 400
/// about its body, or a 403 from an admission plugin about the object (a priority without
/// its class, a pod security level). Not a refusal: transient failures, a 403 from
/// authorization (`User "…" cannot create resource …`), a full quota or a namespace being
/// deleted: they say nothing about the template, and pass (a roll frees quota as it goes).
pub fn is_refusal(status: &Status) -> bool {
    match status.code {
        422 => true,
        400 => status.reason == "BadRequest",
        403 => !is_authorization_denial(&status.message) && !is_about_the_namespace(&status.message),
        _ => false,
    }
}

fn is_about_the_namespace(message: &str) -> bool {
    // A full quota, a namespace being deleted, or one so new that its default ServiceAccount
    // is not there yet (a Namespace and a PodPool applied together).
    ["exceeded quota", "because it is being terminated", "error looking up service account"]
        .iter()
        .any(|m| message.contains(m))
}

fn is_authorization_denial(message: &str) -> bool {
    message.contains("User \"") && message.contains(" cannot ") && message.contains(" resource ")
}

/// Where a child's field sits in the pool manifest. `template` is the template's path
/// (`spec.nodeTemplate`); the child's `metadata.name` is the pool's business (`<pool>-<index>`).
fn manifest_path(template: &str, child: &str, field: &str) -> String {
    match field {
        "" => template.to_string(),
        "metadata.name" => format!("metadata.name (child name {child:?})"),
        // The API server reports a Node's taints under `metadata` (its validation starts the
        // taints' path there); in the manifest they are `spec.taints`.
        f if f.starts_with("metadata.taints") => format!("{template}.spec{}", &f["metadata".len()..]),
        f => format!("{template}.{f}"),
    }
}

/// One line per cause of `status`, each at its manifest path; the plain message when the API
/// server gave no causes.
pub fn messages(status: &Status, template: &str, child: &str) -> Vec<String> {
    let causes = status.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
    let lines: Vec<String> = causes
        .iter()
        .map(|c| {
            let path = manifest_path(template, child, &c.field);
            let message = if c.message.is_empty() { c.reason.clone() } else { c.message.clone() };
            format!("{path}: {message}")
        })
        .collect();
    if lines.is_empty() { vec![format!("{template}: {}", status.message)] } else { lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: serde_json::Value) -> Status {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn causes_are_placed_in_the_template() {
        let s = status(serde_json::json!({
            "kind": "Status", "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Pod \"w-0\" is invalid: spec.containers[0].image: Required value",
            "details": {"name": "w-0", "kind": "Pod", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"},
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"x\"", "field": "metadata.labels"},
                {"reason": "FieldValueTooLong", "message": "must be no more than 253 characters", "field": "metadata.name"}
            ]}
        }));
        assert!(is_refusal(&s));
        assert_eq!(
            messages(&s, "spec.podTemplate", "w-0"),
            vec![
                "spec.podTemplate.spec.containers[0].image: Required value",
                "spec.podTemplate.metadata.labels: Invalid value: \"x\"",
                "metadata.name (child name \"w-0\"): must be no more than 253 characters",
            ]
        );
    }

    #[test]
    fn node_taints_are_placed_where_the_manifest_has_them() {
        assert_eq!(manifest_path("spec.nodeTemplate", "n-0", "metadata.taints[1]"), "spec.nodeTemplate.spec.taints[1]");
        assert_eq!(
            manifest_path("spec.nodeTemplate", "n-0", "metadata.taints[0].effect"),
            "spec.nodeTemplate.spec.taints[0].effect"
        );
        assert_eq!(manifest_path("spec.nodeTemplate", "n-0", "metadata.labels"), "spec.nodeTemplate.metadata.labels");
    }

    #[test]
    fn a_refusal_without_causes_keeps_its_message() {
        let s = status(serde_json::json!({"code": 400, "reason": "BadRequest", "message": "the body is bad"}));
        assert!(is_refusal(&s));
        assert_eq!(messages(&s, "spec.nodeTemplate", "n-0"), vec!["spec.nodeTemplate: the body is bad"]);
    }

    #[test]
    fn admission_plugins_refuse_but_authorization_does_not_judge() {
        let admission = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"w-0\" is forbidden: the integer value of priority (1000) must not be provided in pod spec"}));
        assert!(is_refusal(&admission));
        let rbac = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"w-0\" is forbidden: User \"system:serviceaccount:kwok-pools:kwok-pools\" cannot create resource \"pods\" in API group \"\" in the namespace \"d\""}));
        assert!(!is_refusal(&rbac));
        let quota = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"w-9\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=10, limited: pods=10"}));
        assert!(!is_refusal(&quota), "a full quota is no verdict on the template");
        let terminating = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"w-0\" is forbidden: unable to create new content in namespace d because it is being terminated"}));
        assert!(!is_refusal(&terminating));
        let fresh = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"w-0\" is forbidden: error looking up service account d/default: serviceaccount \"default\" not found"}));
        assert!(!is_refusal(&fresh), "a namespace applied together with its pool is not a bad template");
    }

    #[test]
    fn transient_and_permission_errors_are_not_refusals() {
        for code in [401, 404, 409, 429, 500, 503] {
            let s = status(serde_json::json!({"code": code, "reason": "Whatever", "message": "m"}));
            assert!(!is_refusal(&s), "{code}");
        }
    }
}
