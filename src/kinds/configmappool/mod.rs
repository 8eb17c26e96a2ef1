//! ConfigMapPool: a namespaced pool of ConfigMaps. It exists only in the tests' build (feature
//! `test-kinds`) as the proof that a kind is this directory plus one line in the registry, knobs,
//! metrics and simulation included: tests/kind_proof.rs drives it through admission, reconcile,
//! its lifecycle section (`configMaps.stampAfter`) and its metric, CRD and schema generation,
//! RBAC generation, fuzzing and the harness's cleanup.

pub mod api;
pub mod kind;
pub mod metrics;
pub mod rules;
pub mod simulator;

pub use api::{ConfigMapLifecycle, ConfigMapPool, ConfigMapPoolLifecycle, ConfigMapPoolSpec, ConfigMapTemplate};
pub use metrics::ConfigMapPoolMetrics;
