//! The custom resource types, their schemas and their validation rules. Depends on nothing
//! else in the crate.

pub mod common;
pub mod editor_schema;
pub mod lifecycle;
pub mod nodepool;
pub mod podpool;
pub mod schema;
pub mod validation;

#[cfg(test)]
mod cel_tests;

pub use common::{GROUP_VERSION, PoolStatus, SubnetRange, TemplateMetadata};
pub use nodepool::{NodePool, NodePoolSpec, NodeTemplate};
pub use podpool::{PodPool, PodPoolSpec, PodTemplate};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD of the project, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![NodePool::crd(), PodPool::crd()]
}

/// Every CRD as one multi-document YAML stream (what `kwok-pools crd` prints).
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| serde_yaml::to_string(crd).expect("a CRD serializes to YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

#[cfg(test)]
impl NodePool {
    pub fn crd_for_tests() -> CustomResourceDefinition {
        NodePool::crd()
    }
}
