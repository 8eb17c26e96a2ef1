#![allow(clippy::duplicated_attributes)] // kube(printcolumn(...)) repeats keys by design
//! PodPool: a namespaced pool of Pods that, by default, land on fake nodes.

use crate::api::common::{Placement, PoolStatus, TemplateMetadata};
use crate::api::lifecycle::PodsLifecycle;
use crate::api::schema;
use crate::api::validation;
use garde::Validate;
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A pool of `podCount` Pods named `<pool>-<index>`, each rendered from `podTemplate`.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pools.kwok.x-k8s.io",
    version = "v1alpha1",
    kind = "PodPool",
    namespaced,
    status = "PoolStatus",
    shortname = "kpp",
    category = "pools",
    derive = "PartialEq",
    doc = "A pool of Pods that run on fake nodes",
    scale(
        spec_replicas_path = ".spec.podCount",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.podCount", description = "pods wanted"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas", description = "pods Ready"),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "pods rendered from the current template"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Not-Ready",
        type_ = "integer",
        json_path = ".status.notReadyReplicas",
        description = "pods that exist but are not ready",
        priority = 1
    ),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.failedReplicas",
        description = "pods that Failed or crash-loop",
        priority = 1
    ),
    cel
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.podTemplate) && has(self.podTemplate.spec) && has(self.podTemplate.spec.containers) && size(self.podTemplate.spec.containers) > 0")
    .message("Required value: a Pod needs at least one container, e.g. containers: [{name: app, image: nginx}]")
    .field_path(".podTemplate.spec.containers"))]
pub struct PodPoolSpec {
    /// How many pods the pool keeps (0 to 100000).
    #[schemars(range(min = 0, max = 100000))]
    #[garde(custom(validation::count))]
    pub pod_count: i32,

    /// The Pod every child is rendered from (it needs at least one container).
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    #[garde(custom(PodTemplate::rules))]
    pub pod_template: PodTemplate,

    /// How many pods may be unavailable while a template change rolls out: a number or a
    /// percentage of podCount (default 25%, at least one pod at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    #[garde(custom(validation::max_unavailable))]
    pub max_unavailable: Option<IntOrString>,

    /// How the pods behave: start delays, exits, failures, crash loops. See the README's
    /// "Lifecycle" section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(validation::lifecycle))]
    pub lifecycle: Option<PodsLifecycle>,

    /// Where the children may run: `Simulated` (default) confines them to simulated nodes
    /// whatever the template says; `Any` leaves placement to the template (the operator then
    /// creates them only in namespaces labelled `pools.kwok.x-k8s.io/unconfined=true`).
    #[serde(default, skip_serializing_if = "Placement::is_default")]
    #[garde(skip)]
    pub placement: Placement,
}

/// A PodTemplateSpec whose metadata leaves the name to the pool. A whole Pod is accepted
/// for copy-paste: `apiVersion: v1`, `kind: Pod` and a `status` (ignored: the API server
/// resets a new Pod's status) may stay in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'v1'").message("must be v1 (or omitted)"))]
    pub api_version: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'Pod'").message("must be Pod (or omitted)"))]
    pub kind: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,

    /// The Pod spec. Unless it sets nodeName, nodeSelector or affinity, the pool adds the
    /// nodeSelector `type: kwok`; it always tolerates the fake-node taint.
    #[serde(default)]
    #[schemars(schema_with = "schema::template_type::<PodSpec>")]
    pub spec: PodSpec,

    /// Ignored, as the API server ignores the status of a Pod it creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<PodStatus>")]
    pub status: Option<PodStatus>,
}

impl PodTemplate {
    /// What children are rendered from (for the template hash): the template without what
    /// the API server ignores on a Pod create (`status`, server-set metadata, apiVersion/kind).
    pub fn rendered_part(&self) -> PodTemplate {
        PodTemplate {
            metadata: self.metadata.as_ref().map(TemplateMetadata::rendered_part),
            spec: self.spec.clone(),
            ..Default::default()
        }
    }
}
