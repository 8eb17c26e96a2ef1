//! kwok-pools: typed pools of simulated Nodes, Pods and KubeVirt VMIs in a real Kubernetes
//! cluster, and the lifecycle simulator that makes them behave like real ones. Each kind is a
//! directory under `kinds/`, registered once; the rooms beside it are shared and name no kind.

pub mod admission;
pub mod api;
pub mod backoff;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod dedicated;
pub mod deploy;
pub mod fdlimit;
pub mod informer;
pub mod ipam;
pub mod kinds;
pub mod kubelet;
pub mod leader;
pub mod netlimit;
pub mod operator;
pub mod policy;
pub mod pool;
pub mod setup;
pub mod shard;
pub mod simulator;
pub mod stage;
pub mod storage;
pub mod sync;
pub mod telemetry;
