//! JSON Schemas for editors and manifest validators, one per kind, made from the CRD's
//! openAPIV3Schema: OpenAPI's `nullable` becomes a null type, int-or-string becomes anyOf,
//! Kubernetes extensions are dropped, and objects refuse unknown fields (as the API server's
//! strict field validation does), and `metadata` is typed as ObjectMeta (names, labels,
//! annotations complete in an editor). Paths follow the CRDs catalog layout that kubeconform
//! and yaml-language-server know: `{group}/{kind}_{version}.json`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// (file name, schema) for every version of `crd`.
pub fn schemas(crd: &CustomResourceDefinition) -> Vec<(String, Value)> {
    let group = &crd.spec.group;
    let kind = &crd.spec.names.kind;
    crd.spec
        .versions
        .iter()
        .filter_map(|v| {
            let open_api = v.schema.as_ref()?.open_api_v3_schema.as_ref()?;
            let mut schema = serde_json::to_value(open_api).ok()?;
            convert(&mut schema);
            let root = schema.as_object_mut()?;
            root.insert("$schema".into(), "http://json-schema.org/draft-07/schema#".into());
            root.insert("title".into(), format!("{kind} ({group}/{})", v.name).into());
            let props = root.entry("properties").or_insert_with(|| json!({}));
            props["apiVersion"] = json!({"type": "string", "enum": [format!("{group}/{}", v.name)]});
            props["kind"] = json!({"type": "string", "enum": [kind]});
            props["metadata"] = object_meta();
            root.insert("required".into(), json!(["apiVersion", "kind", "metadata", "spec"]));
            root.insert("additionalProperties".into(), false.into());
            Some((format!("{group}/{}_{}.json", kind.to_lowercase(), v.name), schema))
        })
        .collect()
}

/// ObjectMeta as a manifest writes it: the fields people set typed and checked, the ones the
/// API server sets allowed (a manifest saved from `kubectl get -o yaml` still validates).
fn object_meta() -> Value {
    let strings = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "description": "Standard object metadata: name, namespace, labels, annotations.",
        "properties": {
            "name": {"type": "string", "maxLength": 253, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                     "description": "The object's name: a DNS subdomain (lower case letters, digits, '-' and '.')."},
            "generateName": {"type": "string", "maxLength": 253},
            "namespace": {"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                          "description": "The namespace (namespaced kinds only)."},
            "labels": strings.clone(),
            "annotations": strings,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "ownerReferences": {"type": "array", "items": {"type": "object",
                "required": ["apiVersion", "kind", "name", "uid"],
                "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
                               "uid": {"type": "string"}, "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}}},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "generation": {"type": "integer"},
            "creationTimestamp": {"type": ["string", "null"]},
            "deletionTimestamp": {"type": ["string", "null"]},
            "deletionGracePeriodSeconds": {"type": "integer"},
            "managedFields": {"type": "array"}
        }
    })
}

fn convert(value: &mut Value) {
    let Value::Object(map) = value else { return };
    if map.remove("nullable") == Some(Value::Bool(true))
        && let Some(Value::String(t)) = map.get("type").cloned()
    {
        map.insert("type".into(), json!([t, "null"]));
    }
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        map.remove("type");
        let branches = map.entry("anyOf").or_insert_with(|| json!([{}, {}]));
        // Structural schemas may not type anyOf branches; JSON Schema needs the types back:
        // a branch with a pattern is the string, one with bounds the integer, else by order.
        for (i, b) in branches.as_array_mut().into_iter().flatten().enumerate() {
            if let Value::Object(b) = b
                && !b.contains_key("type")
            {
                let t = if b.contains_key("pattern") {
                    "string"
                } else if b.contains_key("minimum") || b.contains_key("maximum") || i == 0 {
                    "integer"
                } else {
                    "string"
                };
                b.insert("type".into(), t.into());
            }
        }
    }
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let keys: Vec<String> = map.keys().filter(|k| k.starts_with("x-kubernetes-")).cloned().collect();
    for k in keys {
        map.remove(&k);
    }
    if map.contains_key("properties") && !map.contains_key("additionalProperties") && !preserve {
        map.insert("additionalProperties".into(), false.into());
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Value::Object(props) = child {
                    props.values_mut().for_each(convert);
                }
            }
            "items" | "additionalProperties" | "not" => convert(child),
            "anyOf" | "allOf" | "oneOf" => {
                if let Value::Array(items) = child {
                    items.iter_mut().for_each(convert);
                }
            }
            _ => {}
        }
    }
}

/// Every schema of the project: (file name, pretty JSON with a trailing newline).
pub fn all(crds: &[CustomResourceDefinition]) -> Vec<(String, String)> {
    crds.iter()
        .flat_map(schemas)
        .filter_map(|(name, v)| Some((name, format!("{}\n", serde_json::to_string_pretty(&v).ok()?))))
        .collect()
}
