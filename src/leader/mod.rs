//! Leader election for the pool controllers and the webhook registration, on a
//! `coordination.k8s.io` Lease, with client-go's rules ([`record`]): a Lease is judged by how
//! long this process has seen it unchanged (never by its renew time against the local clock,
//! so a skewed clock neither takes the lead early nor keeps a dead leader's), writes are
//! guarded by the resourceVersion read, and a leader that cannot renew within the renew
//! deadline (two thirds of the lease) steps down before anyone else may take over. The
//! election runs on a thread and a client of its own ([`crate::dedicated`]): renewals never
//! queue behind the controllers' or the simulator's writes. One replica leads; the others
//! serve the webhook and simulate their shard. A replica that loses the lead stops its pool
//! controllers and campaigns again (its simulator and webhook go on; no exit, so no restart
//! loop after an API server blip); its controllers are built afresh each time it leads
//! ([`MakeWork`]). While its election has not heard from the API server past the renew
//! deadline it says it is not ready ([`Contact`]).

pub mod presence;
pub mod record;

use crate::dedicated::ThreadError;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use record::{Decision, Observed, cut_off, decide, must_step_down, renew_deadline};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    /// The Lease's name (`<instance>-leader`).
    pub lease: String,
    pub identity: String,
    /// How long the Lease holds without a renewal.
    pub duration: Duration,
}

impl LeaderConfig {
    /// How often the Lease is read and, when held, renewed (client-go's 2 s of 15 s).
    fn retry_period(&self) -> Duration {
        (self.duration / 7).clamp(Duration::from_millis(500), Duration::from_secs(2))
    }
}

/// What the election knows now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub leading: bool,
    /// Who holds the Lease and lives, as this process sees it.
    pub holder: Option<String>,
}

pub struct Leader {
    state: watch::Receiver<State>,
    release: Arc<Notify>,
    released: Arc<Notify>,
    config: LeaderConfig,
    contact: Contact,
}

/// When the election last heard from the API server (any answer, a conflict included).
#[derive(Clone, Debug)]
pub struct Contact {
    heard: Arc<std::sync::Mutex<Option<Instant>>>,
    started: Instant,
    deadline: Duration,
}

impl Contact {
    fn new(deadline: Duration) -> Self {
        Self { heard: Arc::default(), started: Instant::now(), deadline }
    }

    fn heard(&self) {
        *crate::sync::lock(&self.heard) = Some(Instant::now());
    }

    /// Why this replica is cut off from the API server (silent past the renew deadline), if
    /// it is: it is then not ready.
    pub fn problem(&self) -> Option<String> {
        let heard = *crate::sync::lock(&self.heard);
        cut_off(heard, self.started, Instant::now(), self.deadline).then(|| {
            format!(
                "the leader election has not reached the API server for over {:?} (the renew deadline)",
                self.deadline
            )
        })
    }
}

impl Leader {
    /// Joins the election on a thread and a client of its own; keeps taking part in it until
    /// the process ends or the lead is released.
    pub fn join(config: LeaderConfig) -> Result<Self, ThreadError> {
        let (tx, state) = watch::channel(State::default());
        let (release, released) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let contact = Contact::new(renew_deadline(config.duration));
        let (c, r, d, heard) = (config.clone(), release.clone(), released.clone(), contact.clone());
        crate::dedicated::spawn("leader-election", move || async move {
            match Client::try_default().await {
                Ok(client) => elect(client, c, tx, r, heard).await,
                Err(e) => tracing::error!(error = %e, "cannot build the leader election's Kubernetes client"),
            }
            d.notify_waiters();
        })
        .map_err(|source| ThreadError { what: "leader election", source })?;
        Ok(Self { state, release, released, config, contact })
    }

    /// Waits until this replica leads, saying who does meanwhile.
    pub async fn acquired(&mut self) {
        let start = Instant::now();
        loop {
            let now = self.state.borrow_and_update().clone();
            if now.leading {
                tracing::info!(identity = %self.config.identity, lease = %self.config.lease, waited = ?start.elapsed(), "leading: running the pool controllers");
                return;
            }
            if let Some(holder) = &now.holder {
                tracing::info!(identity = %self.config.identity, leader = %holder, "standing by: another replica runs the pool controllers");
            }
            let _ = tokio::time::timeout(Duration::from_secs(30), self.state.changed()).await;
        }
    }

    /// Resolves when this replica, having led, no longer does.
    pub async fn lost(&mut self) {
        loop {
            if !self.state.borrow_and_update().leading {
                return;
            }
            if self.state.changed().await.is_err() {
                return;
            }
        }
    }

    /// What the election knows, as it changes.
    pub fn watch(&self) -> watch::Receiver<State> {
        self.state.clone()
    }

    /// The election's contact with the API server, for readiness.
    pub fn contact(&self) -> Contact {
        self.contact.clone()
    }

    pub fn release_handle(&self) -> Release {
        Release { release: self.release.clone(), released: self.released.clone() }
    }
}

/// A handle that gives the lead up on shutdown.
#[derive(Clone)]
pub struct Release {
    release: Arc<Notify>,
    released: Arc<Notify>,
}

impl Release {
    /// Gives the Lease up (if held) so a standby takes over at once, waiting a little for it.
    pub async fn release(&self) {
        let done = self.released.notified();
        self.release.notify_one();
        if tokio::time::timeout(Duration::from_secs(3), done).await.is_err() {
            tracing::warn!("could not release the leader Lease in time; a standby takes over when it expires");
        }
    }
}

fn spec_of(lease: &Lease) -> (Option<String>, Option<String>, Option<Duration>) {
    let spec = lease.spec.clone().unwrap_or_default();
    let renew = spec.renew_time.map(|t| t.0.to_string());
    let duration = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs);
    (spec.holder_identity, renew, duration)
}

/// The Lease as this replica writes it when it takes or renews the lead.
fn ours(config: &LeaderConfig, current: Option<&Lease>, acquire: bool) -> Lease {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let old = current.and_then(|l| l.spec.clone()).unwrap_or_default();
    let transitions = old.lease_transitions.unwrap_or(0);
    Lease {
        metadata: ObjectMeta {
            name: Some(config.lease.clone()),
            namespace: Some(config.namespace.clone()),
            resource_version: current.and_then(|l| l.metadata.resource_version.clone()),
            ..current.map(|l| l.metadata.clone()).unwrap_or_default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: i32::try_from(config.duration.as_secs().max(1)).ok(),
            acquire_time: if acquire { Some(now.clone()) } else { old.acquire_time },
            renew_time: Some(now),
            lease_transitions: Some(if acquire && current.is_some() {
                transitions.saturating_add(1)
            } else {
                transitions
            }),
            ..Default::default()
        }),
    }
}

/// The election's state between rounds.
struct Election {
    api: Api<Lease>,
    config: LeaderConfig,
    deadline: Duration,
    io_timeout: Duration,
    /// The Lease as last read, and when its record was first seen.
    observed: Option<Observed>,
    current: Option<Lease>,
    /// When this replica last renewed (or took) the Lease.
    renewed: Option<Instant>,
    leading: bool,
    contact: Contact,
}

impl Election {
    /// How long the next call may take. While leading: until the renew deadline, as client-go's
    /// renew loop allows (a busy API server answering a renewal in 3 s must not make a leader
    /// step down), and never past it, so a leader steps down on time whatever the network does.
    fn timeout(&self) -> Duration {
        if !self.leading {
            return self.io_timeout;
        }
        let left =
            self.renewed.map_or(self.io_timeout, |at| (at + self.deadline).saturating_duration_since(Instant::now()));
        left.max(Duration::from_millis(1))
    }

    async fn read(&mut self) {
        match tokio::time::timeout(self.timeout(), self.api.get_opt(&self.config.lease)).await {
            Ok(Ok(found)) => {
                self.contact.heard();
                let now = Instant::now();
                self.observed = found.as_ref().map(|l| {
                    let (holder, renew, duration) = spec_of(l);
                    Observed::update(
                        self.observed.as_ref(),
                        holder,
                        renew,
                        duration.unwrap_or(self.config.duration),
                        now,
                    )
                });
                self.current = found;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lease = %self.config.lease, "leader election: reading the Lease failed (the operator needs get/create/update on leases in its namespace)")
            }
            Err(_) => tracing::warn!(lease = %self.config.lease, "leader election: reading the Lease timed out"),
        }
    }

    /// Takes or renews the Lease (guarded by the resourceVersion read).
    async fn write(&mut self, acquire: bool) {
        let write = ours(&self.config, self.current.as_ref(), acquire);
        let pp = PostParams {
            field_manager: Some(format!("kwok-pools-leader-{}", self.config.identity)),
            ..Default::default()
        };
        let written = match &self.current {
            None => tokio::time::timeout(self.timeout(), self.api.create(&pp, &write)).await,
            Some(_) => tokio::time::timeout(self.timeout(), self.api.replace(&self.config.lease, &pp, &write)).await,
        };
        match written {
            Ok(Ok(lease)) => {
                self.contact.heard();
                let now = Instant::now();
                self.renewed = Some(now);
                let (holder, renew, duration) = spec_of(&lease);
                self.observed =
                    Some(Observed::update(None, holder, renew, duration.unwrap_or(self.config.duration), now));
                self.current = Some(lease);
                self.leading = true;
            }
            // Someone else wrote it first (a conflict): read again next round.
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => self.contact.heard(),
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election: writing the Lease failed"),
            Err(_) => tracing::warn!("leader election: writing the Lease timed out"),
        }
    }

    fn step_down_if_late(&mut self) {
        if self.leading && must_step_down(self.renewed, Instant::now(), self.deadline) {
            tracing::error!(deadline = ?self.deadline, "could not renew the leader Lease within the renew deadline: stepping down before another replica may take over");
            self.leading = false;
        }
    }

    /// One round: read, decide, write.
    async fn round(&mut self) {
        self.read().await;
        self.step_down_if_late();
        match decide(&self.config.identity, self.observed.as_ref(), Instant::now()) {
            Decision::Renew => self.write(false).await,
            Decision::Acquire => self.write(true).await,
            Decision::Wait if self.leading => {
                tracing::warn!("another replica took the leader Lease");
                self.leading = false;
            }
            Decision::Wait => {}
        }
        self.step_down_if_late();
    }

    fn state(&self) -> State {
        let now = Instant::now();
        let holder =
            self.observed.as_ref().filter(|o| !o.expired(now)).and_then(|o| o.holder.clone()).filter(|h| !h.is_empty());
        State { leading: self.leading, holder }
    }
}

/// The election loop (see the module doc).
async fn elect(client: Client, config: LeaderConfig, tx: watch::Sender<State>, release: Arc<Notify>, contact: Contact) {
    let mut e = Election {
        api: Api::namespaced(client, &config.namespace),
        deadline: renew_deadline(config.duration),
        io_timeout: config.retry_period().max(Duration::from_secs(1)),
        config,
        observed: None,
        current: None,
        renewed: None,
        leading: false,
        contact,
    };
    loop {
        e.round().await;
        let state = e.state();
        tx.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
        tokio::select! {
            () = release.notified() => {
                if e.leading && let Some(lease) = &e.current {
                    give_up(&e.api, &e.config, lease).await;
                }
                return;
            }
            () = tokio::time::sleep(e.config.retry_period()) => {}
        }
    }
}

/// Gives the Lease up on shutdown (holder cleared, as client-go's ReleaseOnCancel does).
async fn give_up(api: &Api<Lease>, config: &LeaderConfig, lease: &Lease) {
    let mut released = lease.clone();
    if let Some(spec) = released.spec.as_mut() {
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
    }
    match api.replace(&config.lease, &PostParams::default(), &released).await {
        Ok(_) => tracing::info!("leader Lease released"),
        Err(e) => {
            tracing::warn!(error = %e, "could not release the leader Lease; a standby takes over when it expires")
        }
    }
}

/// Work only the leader does; its output names it for the supervisor.
pub type Work = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// Builds one piece of the leader's work afresh, each time this replica leads.
pub type MakeWork = Arc<dyn Fn() -> Work + Send + Sync>;

/// How a term of leadership ended.
enum Term {
    /// The lead was lost: campaign again.
    Lost,
    /// A controller stopped (a bug): the process ends, named.
    Stopped(String),
}

/// The leader's part of the process: waits for the lead (if elected), registers the webhook
/// (in the background, retrying: a registration that fails leaves this replica not Ready, with
/// the reason in `webhook_problem`, and ends nothing), runs the controllers. When the lead is
/// lost the controllers stop (the registration too) and the replica stands by for the next
/// term; it returns, ending the process, only when a controller stops.
pub async fn lead(
    mut leader: Option<Leader>,
    registration: Option<crate::admission::Registration>,
    work: Vec<MakeWork>,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
    leading: Arc<std::sync::atomic::AtomicBool>,
    webhook_problem: Arc<std::sync::Mutex<Option<String>>>,
) -> String {
    loop {
        if let Some(l) = leader.as_mut() {
            l.acquired().await;
        }
        metrics.leader.set(1);
        match term(&mut leader, registration.clone(), &work, &leading, &webhook_problem).await {
            Term::Stopped(name) => return name,
            Term::Lost => {
                metrics.leader.set(0);
                leading.store(false, std::sync::atomic::Ordering::Relaxed);
                // A standby registers nothing: only the leader's registration decides readiness.
                *crate::sync::lock(&webhook_problem) = None;
                tracing::warn!(
                    "this replica lost the lead: its pool controllers are stopped (the simulator and webhook go on); it campaigns again"
                );
            }
        }
    }
}

/// One term of leadership: the controllers built afresh, run until the lead is lost (they are
/// stopped then, with the registration) or one of them stops.
async fn term(
    leader: &mut Option<Leader>,
    registration: Option<crate::admission::Registration>,
    work: &[MakeWork],
    leading: &std::sync::atomic::AtomicBool,
    webhook_problem: &Arc<std::sync::Mutex<Option<String>>>,
) -> Term {
    let mut controllers = tokio::task::JoinSet::new();
    if let Some(r) = registration {
        // Not registered until the first attempt says so.
        *crate::sync::lock(webhook_problem) = Some("webhook not registered yet".into());
        let problem = webhook_problem.clone();
        match r.once().await {
            Ok(()) => {
                *crate::sync::lock(&problem) = None;
                tracing::info!("admission webhook registered");
            }
            Err(e) => *crate::sync::lock(&problem) = Some(format!("webhook not registered: {e}")),
        }
        controllers.spawn(async move {
            r.until_done(problem).await;
            "webhook registration".to_string()
        });
    }
    leading.store(true, std::sync::atomic::Ordering::Relaxed);
    for make in work {
        controllers.spawn(make());
    }
    let lost = async {
        match leader.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    // Dropping the set at the end of the term aborts every controller still running.
    tokio::select! {
        () = lost => Term::Lost,
        Some(done) = controllers.join_next() => Term::Stopped(match done {
            Ok(name) => name,
            Err(e) => format!("controller task ({e})"),
        }),
    }
}
