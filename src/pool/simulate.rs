//! What a kind tells the process about its simulator, beside [`PoolKind`]: the simulations it
//! runs, the pods and labels they need kept, the rights they need, its own metrics, and what
//! it adds to the nodes the kubelet simulates.

use super::PoolKind;
use crate::deploy::rule::Rule;
use crate::informer::pod::SlimPod;
use crate::kubelet::Devices;
use crate::simulator::{SimContext, Simulation};
use crate::telemetry::metrics::KindMetrics;
use std::sync::Arc;

/// A kind whose children need a kubelet or a controller played, registered beside
/// [`PoolKind`] in the one list of kinds. Every item but `Metrics` has a default: a kind with
/// nothing to simulate implements it with `type Metrics = ();` alone.
pub trait Simulate: PoolKind {
    /// The kind's own simulator metrics (`()` for none), registered once per process and read
    /// with `sim.metrics.kind::<Self::Metrics>()`.
    type Metrics: KindMetrics;

    /// Finalizers the simulator puts on children and removes when it plays their deletion
    /// (KubeVirt's on VMIs): `kwok-pools uninstall` removes them from children whose deletion
    /// no simulator will play.
    const FINALIZERS: &'static [&'static str] = &[];

    /// Pod labels the kind's simulator reads (stored pods keep only the labels someone reads).
    const POD_LABELS: &'static [&'static str] = &[];

    /// Pods the simulator needs in memory besides pool children and pods on simulated nodes.
    fn keeps_pod(pod: &SlimPod) -> bool {
        let _ = pod;
        false
    }

    /// The simulations this kind runs in this process (none by default).
    fn simulations(env: &Self::Env, flags: &Self::Flags, sim: &SimContext) -> Vec<Simulation> {
        let _ = (env, flags, sim);
        Vec::new()
    }

    /// The rights the simulator needs beyond the pool's and its children's (RBAC is generated
    /// from these, see [`crate::deploy::rbac`]).
    fn simulator_rules() -> Vec<Rule> {
        Vec::new()
    }

    /// What the kind adds to the nodes the kubelet simulates (NodePool's devices), if anything.
    fn devices(env: &Self::Env, sim: &SimContext) -> Option<Arc<dyn Devices>> {
        let _ = (env, sim);
        None
    }
}
