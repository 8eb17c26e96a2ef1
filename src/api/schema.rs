//! Schema helpers for embedding core Kubernetes types in the CRDs.
//!
//! k8s-openapi's schemas carry long descriptions; a full PodTemplateSpec with them would make
//! a CRD larger than the API server's limits. We strip descriptions from embedded core types,
//! make every Quantity an int-or-string with the Quantity pattern (as controller-gen does), and
//! keep our own fields documented.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

/// A Quantity: `32`, `256Gi`, `500m`, `1.5`, `1e3`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

const QUANTITY_DESCRIPTION_START: &str = "Quantity is a fixed-point representation";

/// The schema of core type `T` with descriptions removed and quantities tightened.
pub fn core_type<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let schema = generator.subschema_for::<T>();
    let mut value = schema.clone().to_value();
    rewrite(&mut value);
    // Rewriting keeps an object an object; were it not, the schema stays as generated.
    Schema::try_from(value).unwrap_or(schema)
}

/// The schema of core type `T` as a template embeds it: like [`core_type`], and with no
/// field required. The OpenAPI of core/v1 marks fields required that the API server itself
/// defaults (every `nodeInfo` field, for one), so the schema leaves presence to the API
/// server: the webhook and the reconciler have it validate the rendered child.
pub fn template_type<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let schema = core_type::<T>(generator);
    let mut value = schema.clone().to_value();
    drop_required(&mut value);
    Schema::try_from(value).unwrap_or(schema)
}

/// Calls `visit` on every schema object in `value`, top down. `visit` returns false to stop
/// below that schema. Under `properties` the keys are field names, so only their values are
/// schemas (a field may be called `required` or `description`).
fn walk(value: &mut Value, visit: &impl Fn(&mut serde_json::Map<String, Value>) -> bool) {
    match value {
        Value::Object(map) => {
            if !visit(map) {
                return;
            }
            for (key, child) in map.iter_mut() {
                match (key.as_str(), child) {
                    ("properties", Value::Object(props)) => props.values_mut().for_each(|v| walk(v, visit)),
                    (_, child) => walk(child, visit),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, visit)),
        _ => {}
    }
}

/// Removes `required` from a schema and every schema below it.
fn drop_required(value: &mut Value) {
    walk(value, &|map| {
        map.remove("required");
        true
    });
}

/// Descriptions out, quantities as int-or-string with the Quantity pattern.
fn rewrite(value: &mut Value) {
    walk(value, &|map| {
        let is_quantity =
            map.get("description").and_then(Value::as_str).is_some_and(|d| d.starts_with(QUANTITY_DESCRIPTION_START));
        if is_quantity {
            *map = quantity_schema();
            return false;
        }
        map.remove("description");
        true
    });
}

fn quantity_schema() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    }) else {
        unreachable!("a json object literal")
    };
    map
}

/// A CIDR such as `10.0.0.0/16` or `fd00::/64`: a string in the schema (ipnet's own schema
/// is not structural).
pub fn cidr_string(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 64,
    })
}

/// `maxUnavailable`: an integer or a percentage.
pub fn int_or_percent(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^(100|[1-9]?[0-9])%$"}],
        // anyOf alone does not hold: a structural schema may not type its branches.
        "x-kubernetes-validations": [{
            "rule": "string(self).matches('^([0-9]+|(100|[1-9]?[0-9])%)$')",
            "message": "must be a number of pods (0 or more) or a percentage from 0% to 100%, such as 25%",
        }],
    })
}

/// Drops the `default` that `#[serde(default)]` puts on each property: the Rust types decode
/// leniently, but the API server must not fill in (and a CRD may not carry) empty defaults.
pub fn no_defaults(schema: &mut Schema) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for prop in props.values_mut() {
            if let Some(p) = prop.as_object_mut() {
                p.remove("default");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;

    #[test]
    fn strips_descriptions_and_rewrites_quantities() {
        let mut generator =
            schemars::generate::SchemaSettings::openapi3().with(|s| s.inline_subschemas = true).into_generator();
        let schema = core_type::<NodeStatus>(&mut generator).to_value();
        let text = schema.to_string();
        assert!(!text.contains("\"description\""), "descriptions left");
        let cpu = &schema["properties"]["capacity"]["additionalProperties"];
        assert_eq!(cpu["x-kubernetes-int-or-string"], json!(true));
        assert_eq!(cpu["pattern"], json!(QUANTITY_PATTERN));
    }

    #[test]
    fn template_types_require_nothing_the_api_server_defaults() {
        let mut generator =
            schemars::generate::SchemaSettings::openapi3().with(|s| s.inline_subschemas = true).into_generator();
        let core = core_type::<NodeStatus>(&mut generator).to_value();
        assert!(core.to_string().contains("\"required\""), "core/v1 marks nodeInfo fields required");
        let template = template_type::<NodeStatus>(&mut generator).to_value();
        assert!(!template.to_string().contains("\"required\""), "{template}");
        // A field that happens to be called `required` is a property, not a rule: kept.
        let mut v = json!({"properties": {"required": {"type": "string"}}, "required": ["required"]});
        drop_required(&mut v);
        assert_eq!(v, json!({"properties": {"required": {"type": "string"}}}));
    }

    #[test]
    fn quantity_pattern_accepts_the_usual_forms() {
        let re = regex::Regex::new(QUANTITY_PATTERN).unwrap();
        for good in ["32", "256Gi", "500m", "1.5", "1e3", "-1", ".5"] {
            assert!(re.is_match(good), "{good}");
        }
        for bad in ["lots", "1GiB", "", "1 Gi"] {
            assert!(!re.is_match(bad), "{bad}");
        }
    }
}
