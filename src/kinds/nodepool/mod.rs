//! NodePool: a cluster-scoped pool of fake Nodes ([`api`]), its rules ([`rules`]), its place
//! on the pool core ([`kind`]), its fake accelerators ([`devices`]) and the kubelet the simulator plays for every simulated node
//! and the pods bound to it ([`simulator`]).

pub mod api;
pub mod devices;
pub mod kind;
pub mod rules;
pub mod simulator;

#[cfg(test)]
mod cel_tests;
#[cfg(test)]
mod glue_tests;

pub use api::{NodePool, NodePoolSpec, NodePoolStatus, NodeTemplate};
pub use kind::{NodeEnv, NodeFlags};
