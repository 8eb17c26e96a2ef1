//! kwok-pools: typed pools of simulated Nodes and Pods in a real Kubernetes cluster, and the
//! lifecycle simulator that makes them behave like real ones (and plays KubeVirt for VMIs).

pub mod admission;
pub mod api;
pub mod backoff;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod controllers;
pub mod dedicated;
pub mod informer;
pub mod ipam;
pub mod kinds;
pub mod kubelet;
pub mod leader;
pub mod operator;
pub mod pool;
pub mod shard;
pub mod simulator;
pub mod telemetry;
