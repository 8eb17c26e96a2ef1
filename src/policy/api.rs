#![allow(clippy::duplicated_attributes)] // kube(printcolumn(...)) repeats keys by design
//! LifecyclePolicy: behaviour for any simulated node or pod a selector picks, whoever made it
//! (an autoscaler's nodes, a Deployment's pods, `kubectl run`), with the knob types a pool's
//! `spec.lifecycle` has.

use crate::api::lifecycle::{LifecycleSpec, NodeLifecycle, PodLifecycle, Sections};
use garde::Validate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, LabelSelectorRequirement};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Behaviour (the knobs of a pool's `spec.lifecycle`) for the simulated pods and nodes its
/// selectors pick. Precedence: an object's own annotations, then the most specific matching
/// policy (ties: the higher `weight`, then the name first in order), then the owning pool's
/// `spec.lifecycle`, then the operator's flags; a policy's knobs that are unset fall through.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "pools.kwok.x-k8s.io",
    version = "v1alpha1",
    kind = "LifecyclePolicy",
    status = "PolicyStatus",
    shortname = "klp",
    category = "pools",
    derive = "PartialEq",
    derive = "Default",
    doc = "Behaviour for the simulated pods and nodes a selector picks",
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        description = "breaks ties between equally specific policies"
    ),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".status.pods", description = "pods it governs"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes", description = "nodes it governs"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Shadowed",
        type_ = "integer",
        json_path = ".status.shadowed",
        description = "objects it selects that a more specific or heavier policy governs",
        priority = 1
    ),
    cel
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.pods) || has(self.nodes)")
    .message("Required value: a policy says what pods do (pods), what nodes do (nodes), or both"))]
pub struct LifecyclePolicySpec {
    /// Between policies that select an object equally specifically, the higher weight
    /// governs it (then the policy whose name sorts first). 0 to 1000; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    #[garde(skip)]
    pub weight: Option<i32>,

    /// Makes every random choice about the objects it governs reproducible (which fail, each
    /// delay). Without it, each run differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub seed: Option<i64>,

    /// Which pods, and what they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub pods: Option<PodRule>,

    /// Which nodes, and what they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub nodes: Option<NodeRule>,
}

/// The pods a policy governs and what they do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodRule {
    /// Which pods (every term must hold; an empty selector picks every simulated pod).
    #[serde(default)]
    pub selector: PodSelector,
    /// What they do: the knobs of a pool's `spec.lifecycle.pods`.
    #[serde(default)]
    pub lifecycle: PodLifecycle,
}

/// The nodes a policy governs and what they do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRule {
    /// Which nodes (every term must hold; an empty selector picks every simulated node).
    #[serde(default)]
    pub selector: NodeSelector,
    /// What they do: the knobs of a NodePool's `spec.lifecycle.nodes`.
    #[serde(default)]
    pub lifecycle: NodeLifecycle,
    /// Their DRA devices, as a NodePool's `spec.devices` (presets, partitions, taints, prepare
    /// failures): published as ResourceSlices for the selected nodes that no pool made (a
    /// pool's nodes publish their pool's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub devices: Vec<crate::kinds::nodepool::devices::DeviceSet>,
}

pub use crate::api::owners::OwnerKind;

/// Which pods a policy picks: labels, annotations, namespace, owner and node, all of which
/// must hold.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    /// Labels the pod has, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 20))]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on the pod's labels (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Annotations the pod has, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 20))]
    pub match_annotations: BTreeMap<String, String>,
    /// The pod is in one of these namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub namespaces: Vec<String>,
    /// The pod's controller is of one of these kinds (`{apiGroup: batch, kind: Job}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub owners: Vec<OwnerKind>,
    /// The labels of the node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<LabelSelector>,
}

/// Which nodes a policy picks: labels, annotations and owner, all of which must hold.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    /// Labels the node has, with these values (an instance type, a zone, a node group).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 20))]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on the node's labels (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Annotations the node has, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 20))]
    pub match_annotations: BTreeMap<String, String>,
    /// The node's controller is of one of these kinds (`{apiGroup: pools.kwok.x-k8s.io, kind:
    /// NodePool}`, or `{kind: None}` for nodes no one owns, as an autoscaler makes them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub owners: Vec<OwnerKind>,
}

/// What the policy governs now.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Simulated pods it governs.
    #[serde(default)]
    pub pods: u32,
    /// Simulated nodes it governs.
    #[serde(default)]
    pub nodes: u32,
    /// Objects it selects that another policy governs (more specific, heavier, or first by
    /// name).
    #[serde(default)]
    pub shadowed: u32,
    /// `Ready` (it is valid and in use) and `Conflicting` (another policy selects some of the
    /// same objects as specifically and with the same weight: the name decides, which is rarely
    /// what was meant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::api::common::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl LifecycleSpec for LifecyclePolicySpec {
    fn sections(&self) -> Sections<'_> {
        Sections {
            seed: self.seed,
            pods: self.pods.as_ref().map(|p| &p.lifecycle),
            nodes: self.nodes.as_ref().map(|n| &n.lifecycle),
        }
    }
}
