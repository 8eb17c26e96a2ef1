//! kwok-pools: typed pools of simulated Nodes and Pods in a real Kubernetes cluster, and the
//! lifecycle simulator that makes them behave like real ones.

pub mod api;
pub mod certs;
pub mod cluster;
