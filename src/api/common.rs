//! What every pool kind shares: the labels it puts on children, the template metadata,
//! the status with its conditions, and per-replica identity ranges.

use super::schema;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group of every pool kind.
pub const GROUP: &str = "pools.kwok.x-k8s.io";
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every pool kind (as owner references carry it).
pub const GROUP_VERSION: &str = "pools.kwok.x-k8s.io/v1alpha1";

/// `maxUnavailable` of a pool, parsed: a number of children, or a percentage of the count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    Percent(u32),
}

impl MaxUnavailable {
    /// The one parser of `maxUnavailable`: an integer of at least 0, or a percentage from 0%
    /// to 100%; the error says what is allowed.
    pub fn parse(value: &IntOrString) -> Result<Self, String> {
        let parsed = match value {
            IntOrString::Int(n) => u32::try_from(*n).ok().map(Self::Count),
            IntOrString::String(s) => {
                s.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).filter(|p| *p <= 100).map(Self::Percent)
            }
        };
        parsed.ok_or_else(|| {
            let shown = match value {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s.clone(),
            };
            format!("{shown:?} is not allowed: use a number of pods (0 or more) or a percentage such as 25%")
        })
    }

    /// Resolved against the count: a number, or a percentage rounded down; at least 1 so a
    /// rollout always progresses; a quarter of the count when unset.
    pub fn resolve(value: Option<&Self>, count: u32) -> u32 {
        let n = match value {
            None => count / 4,
            Some(Self::Count(n)) => *n,
            Some(Self::Percent(p)) => (u64::from(count) * u64::from(*p) / 100) as u32,
        };
        n.max(1)
    }
}

/// Where a workload pool's children may run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Only on simulated nodes: every child selects `type: kwok` and tolerates the fake-node
    /// taint, whatever else the template says (the default: a pool's children never run on a
    /// real node).
    #[default]
    Simulated,
    /// Wherever the template says. The operator creates such pods only in namespaces an
    /// administrator labelled `pools.kwok.x-k8s.io/unconfined=true` (its admission policy).
    Any,
}

impl Placement {
    pub fn is_default(&self) -> bool {
        *self == Placement::Simulated
    }
}

/// The largest count any pool accepts.
pub const MAX_COUNT: i32 = 100_000;

/// The metadata of a child template: an ObjectMeta as the API server takes it on a create.
/// The pool owns `name`, `generateName`, `namespace` and `ownerReferences` (children are
/// `<pool>-<index>` in the pool's namespace, owned by the pool), so those must stay empty.
/// Labels, annotations and finalizers are copied to every child. What the API server sets
/// itself on a create (`uid`, `resourceVersion`, `creationTimestamp`, `managedFields`, …) is
/// accepted, as in a pasted object, and ignored.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Must be empty: children are named `<pool>-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == ''").message("must be empty: children are named <pool>-<index>"))]
    pub name: Option<String>,

    /// Must be empty: children are named `<pool>-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == ''").message("must be empty: children are named <pool>-<index>"))]
    pub generate_name: Option<String>,

    /// Must be empty: children live in the pool's namespace (or none, for nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == ''").message("must be empty: children live in the pool's namespace"))]
    pub namespace: Option<String>,

    /// Labels copied to every child. Keys are qualified names (`[prefix/]name`), values at
    /// most 63 characters of `[A-Za-z0-9._-]` starting and ending alphanumeric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_map")]
    #[x_kube(validation = Rule::new("self.all(k, !format.qualifiedName().validate(k).hasValue())")
        .message("every label key must be a qualified name: an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric"))]
    #[x_kube(validation = Rule::new("self.all(k, !format.labelValue().validate(self[k]).hasValue())")
        .message("every label value must be empty or 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric"))]
    pub labels: Option<BTreeMap<String, String>>,

    /// Annotations copied to every child. Keys are qualified names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "annotation_map")]
    #[x_kube(validation = Rule::new("self.all(k, !format.qualifiedName().validate(k.lowerAscii()).hasValue())")
        .message("every annotation key must be a qualified name: an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric"))]
    pub annotations: Option<BTreeMap<String, String>>,

    /// Finalizers copied to every child (a child then waits for whoever removes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "finalizer_list")]
    #[x_kube(validation = Rule::new("self.all(f, !format.qualifiedName().validate(f).hasValue())")
        .message("every finalizer must be a qualified name such as example.com/cleanup"))]
    pub finalizers: Option<Vec<String>>,

    /// Must be empty: the pool is the controller owner of its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<Vec<OwnerReference>>")]
    #[x_kube(validation = Rule::new("size(self) == 0").message("must be empty: the pool owns its children"))]
    pub owner_references: Option<Vec<OwnerReference>>,

    /// Set by the API server: accepted (as in a pasted object) and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Set by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Set by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_link: Option<String>,
    /// Set by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Set by the API server: accepted (`null` too, as `kubectl create --dry-run=client`
    /// prints it) and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Set by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// Set by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// Kept by the API server: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "managed_fields")]
    pub managed_fields: Option<serde_json::Value>,
}

impl TemplateMetadata {
    /// The template without what the API server would set or ignore on a create, for the
    /// template hash: pasting a fresh `uid` or `creationTimestamp` rolls no child.
    pub fn rendered_part(&self) -> TemplateMetadata {
        TemplateMetadata {
            name: self.name.clone(),
            generate_name: self.generate_name.clone(),
            namespace: self.namespace.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            finalizers: self.finalizers.clone(),
            owner_references: self.owner_references.clone(),
            ..Default::default()
        }
    }
}

fn finalizer_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 64,
        "items": {"type": "string", "maxLength": 316},
    })
}

fn managed_fields(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

fn label_map(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 256,
        "additionalProperties": {"type": "string", "maxLength": 63},
    })
}

fn annotation_map(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 256,
        // The API server limits all annotations of an object to 256 KiB together.
        "additionalProperties": {"type": "string", "maxLength": 262144},
    })
}

/// A range split into equal subnets, one per child: child `i` gets the `i`-th subnet.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!isCIDR(self.cidr) || (self.maskSize > cidr(self.cidr).prefixLength() && self.maskSize <= (cidr(self.cidr).ip().family() == 4 ? 32 : 128))")
    .message("maskSize must be longer than the cidr's prefix length and at most 32 (IPv4) or 128 (IPv6)")
    .field_path(".maskSize"))]
pub struct SubnetRange {
    /// The range, e.g. `10.0.0.0/16` or `fd00:10::/56`.
    #[schemars(schema_with = "schema::cidr_string")]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("must be a CIDR such as 10.0.0.0/16 or fd00::/48"))]
    pub cidr: String,
    /// The prefix length of each child's subnet, e.g. 24.
    #[schemars(range(min = 1, max = 128))]
    pub mask_size: u8,
}

/// Status of every pool kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// Children that exist (owned by this pool, index below the count).
    #[serde(default)]
    pub replicas: i32,
    /// Children that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Children that exist but are not ready (a flapping node, a pod starting or crashing).
    #[serde(default)]
    pub not_ready_replicas: i32,
    /// Children that fail: pods that Failed or crash-loop.
    #[serde(default)]
    pub failed_replicas: i32,
    /// Children rendered from the current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// The pool generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The label selector of the children, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Ready, Progressing and Degraded, each with a reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

pub fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut value = schema::core_type::<Vec<Condition>>(generator).to_value();
    value["x-kubernetes-list-type"] = "map".into();
    value["x-kubernetes-list-map-keys"] = serde_json::json!(["type"]);
    // A list schema with two keys added is still an object schema.
    schemars::Schema::try_from(value).unwrap_or_default()
}

impl PoolStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Condition types and reasons used by every pool.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
}
