//! The lifecycle simulator's shared machinery: what every simulation gets from the process
//! ([`SimContext`]), the timer wheel, write budget and attempts ([`machinery`]), the lifecycle
//! engine ([`lifecycle`]), which nodes are simulated ([`manage`]), which pods are kept in
//! memory ([`pod_filter`]) and selectors ([`selector`]). Names no kind and no pool: the
//! simulated kubelet (`kubelet/`) and the kinds' own simulations (`Simulate`, beside
//! `PoolKind` in `pool/`) are built on it.

pub mod clock;
pub mod fair;
pub mod lifecycle;
pub mod machinery;
pub mod manage;
pub mod pod_filter;
pub mod selector;

pub use crate::backoff::{retry_after, timer_delay};

use crate::informer::{Informers, SyncWait};
use crate::shard::Shard;
use crate::telemetry::metrics::Metrics;
use clock::Clock;
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
    /// Where the simulations read the time (the system's; tests follow tokio's paused clock).
    pub clock: Clock,
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
