//! ConfigMapPool: a namespaced pool of ConfigMaps, with no simulator. It exists only in the
//! tests' build (feature `test-kinds`) as the proof that a kind is this directory plus one
//! line in the registry: tests/kind_proof.rs drives it through admission, reconcile,
//! CRD and schema generation, RBAC generation, fuzzing and the harness's cleanup.

pub mod api;
pub mod kind;
pub mod rules;

pub use api::{ConfigMapPool, ConfigMapPoolSpec, ConfigMapTemplate};

impl crate::pool::Simulate for ConfigMapPool {
    type Metrics = ();
}
