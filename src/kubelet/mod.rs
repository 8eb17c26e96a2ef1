//! The simulated kubelet of every managed node, whoever made it (a NodePool, an autoscaler's
//! kwok provider, a test with kwok's annotation), and of every pod bound to one. One room,
//! split by concern as the kubelet's own packages are:
//!
//! | room | the kubelet's | what it holds |
//! |---|---|---|
//! | [`status`] | `pkg/kubelet/status` | pure: what the kubelet reports of a node and a pod, each pod's fate, resize |
//! | [`pods`] | `pod_workers.go` | the pod worker: a pure [`pods::step`], the loop that applies it, the writer |
//! | [`node`] | `nodestatus`, `nodelease` | node status heartbeats, Leases and their renewal cadence |
//! | [`server`] | `pkg/kubelet/server` | the HTTP API: routes, auth, TLS, streaming, each renderer beside its route |
//!
//! It names no pool kind: what a kind adds to its nodes (NodePool's devices) comes through
//! [`Devices`], and the knobs of whatever pool governs an object through the lifecycle engine
//! ([`crate::simulator::lifecycle`]). The operator runs it once per process
//! ([`simulations`]), whichever kinds are registered.

#[cfg(test)]
pub mod fixtures;
pub mod flags;
pub mod images;
pub mod node;
pub mod pods;
pub mod recorder;
pub mod server;
mod simulations;
pub mod status;

pub use flags::{Kubelet, KubeletFlags};
pub use simulations::{
    AllDevices, Devices, Gpu, Mount, NoVolumes, POD_LABELS, Prepare, VolumeStat, Volumes, rules, simulations,
};
