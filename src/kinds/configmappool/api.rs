#![allow(clippy::duplicated_attributes)] // kube(printcolumn(...)) repeats keys by design
//! The ConfigMapPool type.

use crate::api::common::{PoolStatus, TemplateMetadata};
use crate::api::lifecycle::{Delay, LifecycleSpec, Sections, delay_problem};
use crate::api::validation;
use garde::Validate;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A pool of `configMapCount` ConfigMaps named `<pool>-<index>`, each rendered from
/// `configMapTemplate`.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pools.kwok.x-k8s.io",
    version = "v1alpha1",
    kind = "ConfigMapPool",
    namespaced,
    status = "PoolStatus",
    shortname = "kcmp",
    category = "pools",
    derive = "PartialEq",
    doc = "A pool of ConfigMaps (a test kind)",
    scale(
        spec_replicas_path = ".spec.configMapCount",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.configMapCount", description = "wanted"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas", description = "present"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapPoolSpec {
    /// How many ConfigMaps the pool keeps (0 to 100000).
    #[schemars(range(min = 0, max = 100000))]
    #[garde(custom(validation::count))]
    pub config_map_count: i32,

    /// The ConfigMap every child is rendered from.
    #[serde(default)]
    #[garde(custom(ConfigMapTemplate::rules))]
    pub config_map_template: ConfigMapTemplate,

    /// How the ConfigMaps behave once made (the kind's own lifecycle section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(validation::lifecycle))]
    pub lifecycle: Option<ConfigMapPoolLifecycle>,
}

/// `spec.lifecycle` of a ConfigMapPool: a seed and what its ConfigMaps do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapPoolLifecycle {
    /// Makes every random choice reproducible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_maps: Option<ConfigMapLifecycle>,
}

/// What a pool's ConfigMaps do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapLifecycle {
    /// How long after it is seen a ConfigMap gets the annotation `pools.kwok.x-k8s.io/stamped`
    /// (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp_after: Option<Delay>,
}

impl LifecycleSpec for ConfigMapPoolLifecycle {
    fn sections(&self) -> Sections<'_> {
        Sections { seed: self.seed, ..Sections::default() }
    }

    fn own_problems(&self) -> Vec<String> {
        let stamp = self.config_maps.as_ref().and_then(|c| c.stamp_after.as_ref());
        delay_problem("configMaps.stampAfter", stamp).into_iter().collect()
    }
}

/// A ConfigMap template: metadata and data.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The data of every ConfigMap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
}
