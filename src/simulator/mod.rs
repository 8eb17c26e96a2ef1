//! The lifecycle simulator's shared machinery: the trait a kind implements when its children
//! need a kubelet or a controller played ([`Simulate`]), what every simulation gets from the
//! process ([`SimContext`]), the timer wheel, write budget and attempts ([`machinery`]), the
//! lifecycle engine ([`lifecycle`]), which nodes are simulated ([`manage`]) and which pods are
//! kept in memory ([`pod_filter`]). Names no kind: the kinds' simulators live in their
//! directories under `kinds/`, and the operator runs every registered one.

pub mod lifecycle;
pub mod machinery;
pub mod manage;
pub mod pod_filter;
pub mod selector;

pub use crate::backoff::{retry_after, timer_delay};

use crate::deploy::rule::Rule;
use crate::informer::pod::SlimPod;
use crate::informer::{Informers, SyncWait};
use crate::pool::PoolKind;
use crate::shard::Shard;
use crate::telemetry::metrics::Metrics;
use futures::future::BoxFuture;
use kube::Client;
use lifecycle::Lifecycles;
use machinery::WriteBudget;
use manage::Manage;
use std::sync::Arc;
use std::time::Duration;

/// What every simulation gets from the process: nothing global.
#[derive(Clone)]
pub struct SimContext {
    pub client: Client,
    pub informers: Arc<Informers>,
    pub metrics: Arc<Metrics>,
    /// The simulator's write budget, shared by every simulated kind (heartbeats have room
    /// reserved in it).
    pub writes: WriteBudget,
    /// Which nodes (and the pods and VMIs on them) are this replica's.
    pub shard: Shard,
    /// Which nodes are simulated at all (kwok's flags).
    pub manage: Manage,
    /// The pools' lifecycle knobs, looked up by owner.
    pub lifecycles: Lifecycles,
    /// Lease duration of simulated nodes; renewals come every quarter of it.
    pub node_lease_duration: Duration,
    /// How long a shard takes to take a dead replica's nodes over (zero when not sharded):
    /// stretched lease renewals leave it.
    pub shard_takeover: Duration,
    /// This replica's name, written on what it renews when the simulator is sharded.
    pub identity: Option<String>,
}

/// One long-running part of a kind's simulator, wired before the informers start (so it sees
/// their first lists).
pub struct Simulation {
    /// What the supervisor calls it when it stops.
    pub name: String,
    /// Stores whose first list the operator waits for before it says it is ready.
    pub ready: Vec<SyncWait>,
    /// Runs until the process ends; started once `ready` is done.
    pub run: BoxFuture<'static, ()>,
}

/// A kind whose children need a kubelet or a controller played, registered beside
/// [`PoolKind`] in the one list of kinds. Every item has a default: a kind with nothing to
/// simulate implements it empty.
pub trait Simulate: PoolKind {
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
}
