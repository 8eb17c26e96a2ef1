//! What every pool reconciler is given: the client, the stores, the kind's environment, the
//! shared write budget and the bookkeeping kept between rounds. No globals.

use super::PoolKind;
use super::expectations::Expectations;
use crate::backoff::Backoffs;
use crate::informer::owners::Owners;
use crate::telemetry::metrics::Metrics;
use kube::Client;
use kube::runtime::reflector::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Everything a pool reconciler gets: no globals.
pub struct PoolContext<P: PoolKind> {
    pub client: Client,
    /// Every child object of this kind in the cluster (trimmed), from the shared informer.
    pub children: Store<P::Stored>,
    /// The children indexed by their controller pool's UID (kept by the shared informer).
    pub owners: Option<Owners<P::Stored>>,
    /// Every pool of this kind (for rules that compare pools).
    pub pools: Store<P>,
    pub env: P::Env,
    pub metrics: Arc<Metrics>,
    /// Writes in flight across every pool of every kind.
    pub writes: Arc<Semaphore>,
    /// Writes in flight for one pool (the semaphore bounds the total).
    pub max_in_flight_per_pool: usize,
    /// Creations per round, so a big pool shows progress in its status.
    pub max_creates: usize,
    /// How long a round may start writes: the rest wait for the next round, so the status of
    /// a pool whose writes are slow still shows progress.
    pub round_time: Duration,
    /// Writes made but not yet seen in the store.
    pub expectations: Expectations,
    /// Consecutive failed rounds per pool (by UID), for the retry delay.
    pub backoff: Backoffs<String>,
    /// Kubernetes Events on pools (none in tests that do not ask for them).
    pub events: Option<Arc<crate::pool::events::Events>>,
}

impl<P: PoolKind> PoolContext<P> {
    pub fn new(
        client: Client,
        children: Store<P::Stored>,
        pools: Store<P>,
        env: P::Env,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            children,
            owners: None,
            pools,
            env,
            metrics,
            writes: Arc::new(Semaphore::new(100)),
            max_in_flight_per_pool: 50,
            max_creates: 500,
            round_time: Duration::from_secs(10),
            expectations: Expectations::default(),
            backoff: Backoffs::new(Duration::from_secs(300)),
            events: None,
        }
    }
}
