//! NodePool: a cluster-scoped pool of fake Nodes ([`api`]), its rules ([`rules`]), its place
//! on the pool core ([`kind`]), its fake accelerators ([`devices`]), its own metrics
//! ([`metrics`]) and its own simulation ([`simulator`]: the nodes' DRA drivers). The kubelet
//! of its nodes is the shared one in `kubelet/`.

pub mod api;
pub mod devices;
pub mod kind;
pub mod metrics;
pub mod rules;
pub mod simulator;

#[cfg(test)]
mod cel_tests;
#[cfg(test)]
mod glue_tests;

pub use api::{NodePool, NodePoolLifecycle, NodePoolSpec, NodePoolStatus, NodeTemplate};
pub use metrics::NodePoolMetrics;
