//! The mutating half of the webhook: a quantity written as a YAML float (`cpu: 0.5`) is
//! rewritten as the string `"0.5"` before the schema sees it. The API server takes floats
//! for a real Node or Pod; a CRD schema can only say integer-or-string, so without this a
//! template that is a valid Pod would be refused. Pure: the pool's own CRD schema says where
//! the quantities are.

use crate::api::schema::QUANTITY_PATTERN;
use json_patch::{Patch, PatchOperation, ReplaceOperation};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::LazyLock;

/// The openAPIV3Schema of a CRD's first version, as JSON.
fn schema_of(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| serde_json::to_value(&s.open_api_v3_schema).ok())
        .unwrap_or(Value::Null)
}

/// The schema of every registered kind, by kind name.
static SCHEMAS: LazyLock<HashMap<String, Value>> = LazyLock::new(|| {
    crate::kinds::crds().into_iter().map(|crd| (crd.spec.names.kind.clone(), schema_of(crd))).collect()
});

fn is_quantity(schema: &Value) -> bool {
    schema.get("pattern").and_then(Value::as_str) == Some(QUANTITY_PATTERN)
}

/// Escapes a key for a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every float quantity in `object` (walking `schema` alongside it): its JSON pointer and the
/// string it becomes.
fn float_quantities(schema: &Value, object: &Value, pointer: &str, out: &mut Vec<(String, String)>) {
    match object {
        Value::Number(n) if is_quantity(schema) && !n.is_i64() && !n.is_u64() => {
            out.push((pointer.to_string(), n.to_string()));
        }
        Value::Object(map) => {
            let props = schema.get("properties");
            let additional = schema.get("additionalProperties");
            for (key, value) in map {
                let child = props.and_then(|p| p.get(key)).or(additional);
                if let Some(child) = child {
                    float_quantities(child, value, &format!("{pointer}/{}", escape(key)), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(child) = schema.get("items") {
                for (i, value) in items.iter().enumerate() {
                    float_quantities(child, value, &format!("{pointer}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

/// The JSON patch that turns the float quantities of a pool into strings, if it has any.
fn patch_for(kind: &str, object: &Value) -> Option<Patch> {
    let schema = SCHEMAS.get(kind)?;
    let mut found = Vec::new();
    float_quantities(schema, object, "", &mut found);
    if found.is_empty() {
        return None;
    }
    let ops = found
        .into_iter()
        .filter_map(|(path, text)| {
            let path = json_patch::jsonptr::PointerBuf::parse(&path).ok()?;
            Some(PatchOperation::Replace(ReplaceOperation { path, value: Value::String(text) }))
        })
        .collect();
    Some(Patch(ops))
}

/// Answers a mutating AdmissionReview: allowed, with a patch when a quantity needs one.
pub fn answer(review: AdmissionReview<DynamicObject>) -> Result<AdmissionReview<DynamicObject>, String> {
    let req: AdmissionRequest<DynamicObject> = review.try_into().map_err(|e| format!("{e}"))?;
    let resp = AdmissionResponse::from(&req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Ok(resp.into_review());
    }
    let object = req.object.as_ref().and_then(|o| serde_json::to_value(o).ok()).unwrap_or(Value::Null);
    let resp = match patch_for(&req.kind.kind, &object) {
        Some(patch) => match resp.clone().with_patch(patch) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not encode a quantity patch; the schema will judge the object as it is");
                resp
            }
        },
        None => resp,
    };
    Ok(resp.into_review())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn float_quantities_become_strings_and_nothing_else_changes() {
        let pool = json!({
            "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "PodPool",
            "metadata": {"name": "w", "namespace": "d", "labels": {"a/b": "1.5"}},
            "spec": {"podCount": 1, "podTemplate": {"spec": {
                "containers": [
                    {"name": "a", "image": "x", "resources": {"limits": {"cpu": 0.5, "memory": "1Gi"}, "requests": {"cpu": 1}}},
                    {"name": "b", "image": "y", "resources": {"requests": {"example.com/dev~ice": 2.25}}}
                ],
                "terminationGracePeriodSeconds": 30,
            }}}
        });
        let patch = patch_for("PodPool", &pool).expect("two floats");
        let text = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            text,
            json!([
                {"op": "replace", "path": "/spec/podTemplate/spec/containers/0/resources/limits/cpu", "value": "0.5"},
                {"op": "replace", "path": "/spec/podTemplate/spec/containers/1/resources/requests/example.com~1dev~0ice", "value": "2.25"}
            ])
        );
        let mut patched = pool.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched["spec"]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["cpu"], "0.5");
        let node =
            json!({"spec": {"nodeCount": 1, "nodeTemplate": {"status": {"capacity": {"cpu": 1.5, "pods": 110}}}}});
        let mut found = Vec::new();
        float_quantities(&SCHEMAS["NodePool"], &node, "", &mut found);
        assert_eq!(found, vec![("/spec/nodeTemplate/status/capacity/cpu".to_string(), "1.5".to_string())]);
        // Integers, strings and non-quantities are left alone.
        let plain =
            json!({"spec": {"nodeCount": 1, "nodeTemplate": {"status": {"capacity": {"cpu": 4, "memory": "1Gi"}}}}});
        assert!(patch_for("NodePool", &plain).is_none());
        assert!(patch_for("Other", &node).is_none());
    }
}
