//! The custom resource types, their schemas and their validation rules. Depends on nothing
//! else in the crate.

pub mod common;
pub mod conventions;
pub mod editor_schema;
pub mod kubevirt;
pub mod kubevirt_crd;
pub mod lifecycle;
pub mod nodepool;
pub mod podpool;
pub mod ranges;
pub mod schema;
pub mod validation;
pub mod vmipool;

#[cfg(test)]
mod cel_tests;

pub use common::{GROUP_VERSION, PoolStatus, SubnetRange, TemplateMetadata};
pub use nodepool::{NodePool, NodePoolSpec, NodeTemplate};
pub use podpool::{PodPool, PodPoolSpec, PodTemplate};
pub use vmipool::{VMIPool, VMIPoolSpec, VmiTemplate};
