//! Shared API primitives: what every pool kind's type is built from (status and conditions,
//! template metadata, lifecycle knobs, identity ranges, the child conventions, schema helpers
//! and the rule primitives). Names no kind and depends on nothing else of ours; a kind's own
//! type and rules live in its directory under `kinds/`.

pub mod annotations;
pub mod cloud;
pub mod common;
pub mod conventions;
pub mod delay;
pub mod duration;
pub mod editor_schema;
pub mod kubelet;
pub mod lifecycle;
pub mod names;
pub mod owners;
pub mod ranges;
pub mod schema;
pub mod storage;
pub mod validation;

pub use common::{GROUP_VERSION, Placement, PoolStatus, SubnetRange, TemplateMetadata};
