//! Leader election for the pool controllers and the webhook registration, on a
//! `coordination.k8s.io` Lease (kube-lease-manager). One replica leads; the others serve the
//! webhook and simulate their shard, and take over when the leader's Lease expires. A replica
//! that loses the lead exits (its supervisor restarts it as a standby), so two controllers
//! never write children at once for longer than the lease's grace.

use kube::Client;
use kube::api::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    /// The Lease's name (`<instance>-leader`).
    pub lease: String,
    pub identity: String,
    /// How long the Lease holds without a renewal (the leader renews a third of it early).
    pub duration: Duration,
}

pub struct Leader {
    manager: Arc<LeaseManager>,
    state: watch::Receiver<bool>,
    config: LeaderConfig,
    client: Client,
}

impl Leader {
    /// Joins the election (creating the Lease if needed) and keeps taking part in it.
    pub async fn join(client: Client, config: LeaderConfig) -> anyhow::Result<Self> {
        let secs = config.duration.as_secs().max(3);
        let manager = LeaseManagerBuilder::new(client.clone(), &config.lease)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity)
            .with_duration(secs)
            .with_grace((secs / 3).max(1))
            .with_field_manager(format!("kwok-pools-leader-{}", config.identity))
            .build()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot join the leader election on Lease {}/{}: {e}; the operator needs get/create/patch on leases in {} (or pass --no-leader-elect when only one operator runs)",
                    config.namespace,
                    config.lease,
                    config.namespace
                )
            })?;
        let manager = Arc::new(manager);
        let (tx, state) = watch::channel(false);
        let m = manager.clone();
        tokio::spawn(async move {
            loop {
                match m.changed().await {
                    Ok(leading) => {
                        if tx.send(leading).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "leader election: the Lease could not be read or written; trying again in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Self { manager, state, config, client })
    }

    /// Waits until this replica leads, saying who does meanwhile.
    pub async fn acquired(&mut self) {
        let start = Instant::now();
        // The first answer comes within a round trip; only then is there something to say.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.state.changed()).await;
        loop {
            if *self.state.borrow_and_update() {
                tracing::info!(identity = %self.config.identity, lease = %self.config.lease, waited = ?start.elapsed(), "leading: running the pool controllers");
                return;
            }
            let holder = self.holder().await.unwrap_or_else(|| "nobody".into());
            tracing::info!(identity = %self.config.identity, leader = %holder, "standing by: another replica runs the pool controllers");
            let _ = tokio::time::timeout(Duration::from_secs(30), self.state.changed()).await;
        }
    }

    /// Resolves when this replica, having led, no longer does.
    pub async fn lost(&mut self) {
        loop {
            if !*self.state.borrow_and_update() {
                return;
            }
            if self.state.changed().await.is_err() {
                return;
            }
        }
    }

    /// The identity the Lease names, if it can be read.
    pub async fn holder(&self) -> Option<String> {
        let api: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &self.config.namespace);
        api.get_opt(&self.config.lease).await.ok().flatten()?.spec?.holder_identity
    }
}

/// Work only the leader does; its output names it for the supervisor.
pub type Work = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// A handle that gives the lead up on shutdown.
#[derive(Clone)]
pub struct Release(Arc<LeaseManager>);

impl Release {
    pub async fn release(&self) {
        match self.0.release().await {
            Ok(()) => tracing::info!("leader Lease released"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the leader Lease; a standby takes over when it expires")
            }
        }
    }
}

impl Leader {
    pub fn release_handle(&self) -> Release {
        Release(self.manager.clone())
    }
}

/// Whether a live Lease names another holder (this replica stands by).
pub async fn held_by_other(client: &Client, config: &LeaderConfig) -> bool {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), &config.namespace);
    let Ok(Some(lease)) = api.get_opt(&config.lease).await else { return false };
    let Some(spec) = lease.spec else { return false };
    let other = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty() && h != config.identity);
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let live = spec.renew_time.is_some_and(|t| {
        t.0.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .is_ok_and(|until| until > k8s_openapi::jiff::Timestamp::now())
    });
    other && live
}

/// The leader's part of the process: waits for the lead (if elected), registers the webhook
/// (in the background, retrying: a registration that fails leaves this replica not Ready, with
/// the reason in `webhook_problem`, and ends nothing), runs the controllers. Returns, ending
/// the process, when the lead is lost or a controller stops.
pub async fn lead(
    mut leader: Option<Leader>,
    registration: Option<crate::admission::Registration>,
    work: Vec<Work>,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
    leading: Arc<std::sync::atomic::AtomicBool>,
    webhook_problem: Arc<std::sync::Mutex<Option<String>>>,
) -> String {
    if let Some(l) = leader.as_mut() {
        l.acquired().await;
    }
    metrics.leader.set(1);
    let mut controllers = tokio::task::JoinSet::new();
    if let Some(r) = registration {
        // Not registered until the first attempt says so.
        *webhook_problem.lock().unwrap_or_else(|e| e.into_inner()) = Some("webhook not registered yet".into());
        let problem = webhook_problem.clone();
        match r.once().await {
            Ok(()) => {
                *problem.lock().unwrap_or_else(|e| e.into_inner()) = None;
                tracing::info!("admission webhook registered");
            }
            Err(e) => *problem.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("webhook not registered: {e}")),
        }
        controllers.spawn(async move {
            r.until_done(problem).await;
            "webhook registration".to_string()
        });
    }
    leading.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in work {
        controllers.spawn(w);
    }
    let lost = async {
        match leader.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = lost => {
            metrics.leader.set(0);
            "leader election (this replica lost the lead; a restart makes it a standby)".into()
        }
        Some(done) = controllers.join_next() => match done {
            Ok(name) => name,
            Err(e) => format!("controller task ({e})"),
        },
    }
}
