//! A kind of controller owner, as policies and pod knobs name one (`{apiGroup, kind}`). Pure.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The owner a selected object's controller reference names.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct OwnerKind {
    /// The owner's API group (`""` or omitted: the core group; `batch` for a Job; `*`: any
    /// group, so `{apiGroup: '*', kind: Job}` is a batch Job, a Volcano Job, a Kubeflow one).
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub api_group: String,
    /// The owner's kind (`Job`, `ReplicaSet`, `NodePool`, or `None` for objects with no
    /// controller).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

impl OwnerKind {
    /// Whether an object whose controller is `owner` (its API group and kind; `None`: it has
    /// no controller) is of this kind.
    pub fn holds(&self, owner: Option<(&str, &str)>) -> bool {
        match owner {
            Some((group, kind)) => self.kind == kind && (self.api_group == group || self.api_group == "*"),
            None => self.kind == "None",
        }
    }

    /// The API group of an `apiVersion` (`""` for the core group's `v1`).
    pub fn group_of(api_version: &str) -> &str {
        api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}
