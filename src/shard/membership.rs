//! The membership loop: has this replica's membership Lease renewed (`renewal`), watches the
//! other members' Leases, and publishes which keys are ours. A view change is published in two steps: keys
//! we lose go at once, keys we gain come `handover` later, by when their previous owner has
//! let go. A replica that cannot renew its own Lease for twice its duration stops simulating
//! anything (the others have taken its keys by then).

pub use super::config::{MembershipConfig, NODES_ANNOTATION, SHARD_LABEL, lease_name};
use super::members::{self, Member, Observations};
use super::renewal::Renewer;
use super::view::{Ownership, Shard};
use crate::telemetry::metrics::Metrics;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DeleteParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub struct Membership {
    config: MembershipConfig,
    metrics: Arc<Metrics>,
    tx: watch::Sender<Arc<Ownership>>,
    /// The last view published in full (not handing over).
    settled: Ownership,
    /// When the current hand-over ends, if one is under way (and the view it ends in).
    handing_over: Option<(Instant, Ownership)>,
    /// When the last renewal that went through was sent (see `renewal`).
    renewed: Option<Instant>,
    /// The members as a direct read last showed them, and when (see `members::merge`).
    /// Direct reads of members that looked expired, by identity: what each showed (`None`:
    /// no Lease) and when.
    fresh: HashMap<String, (Option<Member>, Instant)>,
    /// When each member's current renewal was first seen here (what liveness is judged by).
    observations: Observations,
    /// The members as last observed (see [`Membership::observe`]).
    members: Vec<Member>,
}

/// Starts nothing yet: returns the simulators' handle and the loop to run.
pub fn membership(config: MembershipConfig, metrics: Arc<Metrics>) -> (Shard, Membership) {
    let nothing = Ownership::nothing(&config.identity);
    let (tx, rx) = watch::channel(Arc::new(nothing.clone()));
    let m = Membership {
        config,
        metrics,
        tx,
        settled: nothing,
        handing_over: None,
        renewed: None,
        fresh: HashMap::new(),
        observations: Observations::default(),
        members: Vec::new(),
    };
    (Shard::new(rx), m)
}

impl Membership {
    /// Runs until the process ends. Give it a runtime and a client of its own (see
    /// `operator::join_shard`): renewals must not queue behind the simulator's own work.
    pub async fn run(mut self, client: Client) {
        let api: Api<Lease> = Api::namespaced(client, &self.config.namespace);
        let (renewer, mut renewed) = Renewer::new(api.clone(), self.config.clone(), self.metrics.clone());
        tokio::spawn(renewer.run());
        let (store, writer) = reflector::store();
        let watch = watcher::Config::default().labels(&format!("{SHARD_LABEL}={}", self.config.instance));
        let mut events =
            watcher(api.clone(), watch).backoff(crate::backoff::WatchBackoff::default()).reflect(writer).boxed();
        let mut next_gc = Instant::now();
        // No view before the first list of the members: alone by ignorance is not alone.
        let mut synced = false;
        tracing::info!(identity = %self.config.identity, lease = %self.config.lease_name(), namespace = %self.config.namespace, "joining the simulator shard");
        loop {
            self.renewed = *renewed.borrow_and_update();
            self.observe(&store);
            if synced && Instant::now() >= next_gc {
                self.collect_garbage(&api).await;
                next_gc = Instant::now() + self.config.renew_every();
            }
            if synced && self.someone_expires(&store) {
                self.read_fresh(&api, &store).await;
                self.observe(&store);
            }
            if synced {
                self.recompute(&store);
            }
            let wake = self.next_wake(&store);
            tokio::select! {
                event = events.next() => match event {
                    Some(Err(e)) => tracing::warn!(error = %e, namespace = %self.config.namespace, "watching membership Leases failed (the operator needs list/watch on leases there); retrying"),
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Ok(_)) => {}
                    None => return,
                },
                changed = renewed.changed() => if changed.is_err() {
                    tracing::error!("the membership renewal loop ended");
                    return;
                },
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// The members as the watch (and any fresher direct read) shows them, each aged by how
    /// long this process has seen its renewal unchanged.
    fn observe(&mut self, store: &Store<Lease>) {
        let now = Instant::now();
        let watched: Vec<Member> = store.state().iter().filter_map(|l| Member::from_lease(l, now)).collect();
        let fresh: Vec<Member> = self
            .fresh
            .values()
            .filter(|(_, at)| at.elapsed() < self.config.duration)
            .filter_map(|(m, _)| m.clone())
            .collect();
        let merged = members::merge(watched, &fresh);
        let observed: Vec<Member> = merged.into_iter().map(|m| self.observations.observe(m, now)).collect();
        self.observations.retain(&observed);
        self.members = observed;
    }

    /// Deletes membership Leases unchanged for long (replicas that died and never came back
    /// under that name), so the list stays as long as the live members.
    async fn collect_garbage(&self, api: &Api<Lease>) {
        for m in &self.members {
            let limit = (m.duration * 10).max(Duration::from_secs(300));
            if m.identity != self.config.identity && m.seen.elapsed() > limit {
                let name = lease_name(&self.config.instance, &m.identity);
                if api.delete(&name, &DeleteParams::default()).await.is_ok() {
                    tracing::info!(lease = %name, member = %m.identity, "deleted the membership Lease of a replica gone for long");
                }
            }
        }
    }

    fn fenced(&self) -> bool {
        self.renewed.is_none_or(|at| at.elapsed() > self.config.fence_after())
    }

    /// The members as last observed.
    fn members_now(&self, _store: &Store<Lease>) -> Vec<Member> {
        self.members.clone()
    }

    /// Whether `identity`'s Lease was read directly (past the watch) within `within`.
    fn read_within(&self, identity: &str, within: Duration) -> bool {
        self.fresh.get(identity).is_some_and(|(_, at)| at.elapsed() < within)
    }

    /// The members of the view (other than this replica) that look expired.
    fn expiring(&self, store: &Store<Lease>) -> Vec<String> {
        let sharing = members::sharing(&self.members_now(store), Instant::now());
        let aiming_at = self.handing_over.as_ref().map_or(&self.settled, |(_, o)| o);
        aiming_at.members().iter().filter(|m| **m != self.config.identity && !sharing.contains(m)).cloned().collect()
    }

    /// Whether a member of the view looks expired and no direct read of it confirmed it lately.
    fn someone_expires(&self, store: &Store<Lease>) -> bool {
        self.expiring(store).iter().any(|m| !self.read_within(m, Duration::from_secs(1)))
    }

    /// Reads the Leases of the members that look expired directly: a GET goes to etcd, past
    /// the watch (which lags under load) and past the watch cache (which a consistent LIST
    /// waits for, and which is busiest for Leases when thousands of nodes renew theirs).
    async fn read_fresh(&mut self, api: &Api<Lease>, store: &Store<Lease>) {
        let mut fresh = Vec::new();
        for identity in self.expiring(store) {
            if self.read_within(&identity, Duration::from_secs(1)) {
                continue;
            }
            let name = lease_name(&self.config.instance, &identity);
            match tokio::time::timeout(self.config.read_timeout(), api.get_opt(&name)).await {
                Ok(Ok(Some(lease))) => fresh.push((identity, Member::from_lease(&lease, Instant::now()))),
                Ok(Ok(None)) => fresh.push((identity, None)),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, lease = %name, "reading a membership Lease failed");
                    return;
                }
                Err(_) => {
                    tracing::warn!(lease = %name, "reading a membership Lease timed out");
                    return;
                }
            }
        }
        let now = Instant::now();
        for (identity, member) in fresh {
            self.fresh.insert(identity, (member, now));
        }
        let keep = self.config.duration;
        self.fresh.retain(|_, (_, at)| at.elapsed() < keep);
    }

    fn target(&self, store: &Store<Lease>) -> Ownership {
        if self.fenced() {
            return Ownership::nothing(&self.config.identity);
        }
        // The others as the watch (or a fresher read) shows them; this replica by its own
        // renewals. A member of the current view that looks expired stays until a direct read
        // of the last second agrees (a failed read proves nothing).
        let all = self.members_now(store);
        let live = members::sharing(&all, Instant::now());
        let aiming_at = self.handing_over.as_ref().map_or(&self.settled, |(_, o)| o);
        let mut sharing =
            members::sharing_confirmed(live, aiming_at.members(), |m| self.read_within(m, Duration::from_secs(2)));
        sharing.push(self.config.identity.clone());
        Ownership::settled(&self.config.identity, sharing)
    }

    /// Publishes the view the leases call for, in two steps when it changes.
    fn recompute(&mut self, store: &Store<Lease>) {
        let target = self.target(store);
        let aiming_at = self.handing_over.as_ref().map_or(&self.settled, |(_, o)| o);
        if !aiming_at.same_members(&target) {
            let published = self.tx.borrow().clone();
            let step = published.handing_over_to(&target);
            tracing::info!(members = ?target.members(), "simulator shard changes; handing over");
            self.metrics.shard_members.set(target.members().len() as i64);
            self.metrics.shard_handovers.inc();
            self.tx.send_replace(Arc::new(step));
            // Alone, nobody else may still be writing what comes to this replica: no wait.
            let alone = target.members() == [self.config.identity.clone()];
            let wait = if alone { Duration::ZERO } else { self.config.handover };
            self.handing_over = Some((Instant::now() + wait, target));
        }
        if let Some((until, _)) = &self.handing_over
            && Instant::now() >= *until
            && let Some((_, target)) = self.handing_over.take()
        {
            tracing::info!(members = ?target.members(), "simulator shard hand-over done");
            self.settled = target.clone();
            self.tx.send_replace(Arc::new(target));
        }
    }

    fn next_wake(&self, store: &Store<Lease>) -> Instant {
        let mut wake = Instant::now() + Duration::from_secs(1);
        if let Some((until, _)) = &self.handing_over {
            wake = wake.min(*until);
        }
        let all = self.members_now(store);
        if let Some(at) = members::next_change(&all, Instant::now()) {
            wake = wake.min(at);
        }
        if let Some(at) = self.renewed {
            wake = wake.min(at + self.config.fence_after());
        }
        wake.max(Instant::now())
    }
}

/// Leaves the shard: deletes this replica's membership Lease so the others take over now
/// rather than when it expires.
pub async fn leave(client: Client, config: &MembershipConfig) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    match api.delete(&config.lease_name(), &DeleteParams::default()).await {
        Ok(_) => tracing::info!(lease = %config.lease_name(), "left the simulator shard"),
        Err(e) => {
            tracing::warn!(error = %e, "could not delete the membership Lease; the others take over when it expires")
        }
    }
}
