//! The reconcile loop of every pool kind, in stages: fetch from the stores, validate (pure),
//! plan (pure), apply, update status. An invalid spec waits for a change; an API error
//! requeues.

use super::apply;
use super::plan::{self, Observed, PlanInput};
use super::status::{self, Problem, StatusInput};
use super::{FIELD_MANAGER, PoolKind};
use crate::api::common::{HASH_LABEL, POOL_LABEL};
use crate::telemetry::metrics::{Metrics, PoolLabels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Everything a pool reconciler gets: no globals.
pub struct PoolContext<P: PoolKind> {
    pub client: Client,
    /// Every child object of this kind in the cluster (trimmed), from the shared informer.
    pub children: Store<P::Stored>,
    pub env: P::Env,
    pub metrics: Arc<Metrics>,
    /// Writes in flight across every pool of every kind.
    pub writes: Arc<Semaphore>,
    /// Writes in flight for one pool (the semaphore bounds the total).
    pub max_in_flight_per_pool: usize,
    /// Creations per round, so a big pool shows progress in its status.
    pub max_creates: usize,
    /// Writes made but not yet seen in the store.
    pub expectations: Expectations,
}

/// Children this operator created or deleted that the store does not show yet, per pool, so
/// a reconcile that runs before the watch catches up neither creates a child twice nor
/// counts a deleted one as present. Entries expire after a while in case an event is lost.
#[derive(Default)]
pub struct Expectations {
    /// pool UID → child name → (what, when)
    inner: std::sync::Mutex<HashMap<String, PoolExpectations>>,
}

type PoolExpectations = HashMap<String, (Expect, std::time::Instant)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Create,
    Delete,
}

const EXPECTATION_TTL: Duration = Duration::from_secs(30);

impl Expectations {
    pub fn expect(&self, pool_uid: &str, names: &[String], what: Expect) {
        if names.is_empty() {
            return;
        }
        let now = std::time::Instant::now();
        let mut inner = self.inner.lock().expect("expectations lock");
        // Pools deleted meanwhile leave entries nobody asks about again: sweep them.
        inner.retain(|_, e| e.values().any(|(_, at)| at.elapsed() < EXPECTATION_TTL));
        let entry = inner.entry(pool_uid.to_string()).or_default();
        for n in names {
            entry.insert(n.clone(), (what, now));
        }
    }

    /// Drops satisfied and expired entries and returns what is still pending.
    pub fn pending(&self, pool_uid: &str, satisfied: impl Fn(&str, Expect) -> bool) -> Vec<(String, Expect)> {
        let mut inner = self.inner.lock().expect("expectations lock");
        let Some(entry) = inner.get_mut(pool_uid) else { return vec![] };
        entry.retain(|name, (what, at)| at.elapsed() < EXPECTATION_TTL && !satisfied(name, *what));
        let out = entry.iter().map(|(n, (w, _))| (n.clone(), *w)).collect();
        if entry.is_empty() {
            inner.remove(pool_uid);
        }
        out
    }

    pub fn forget(&self, pool_uid: &str) {
        self.inner.lock().expect("expectations lock").remove(pool_uid);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the pool status failed: {0}")]
    Status(#[source] kube::Error),
    #[error("the {0} store has not synced yet")]
    NotSynced(&'static str),
    /// A bug met this pool: the reconcile panicked. The operator goes on (the pool says so in
    /// its Degraded condition); the message is what to report.
    #[error("reconciling this pool panicked: {0}; please report it with the pool's manifest")]
    Panicked(String),
}

impl Error {
    /// A low-cardinality label for the error metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Status(_) => "status_write",
            Error::NotSynced(_) => "not_synced",
            Error::Panicked(_) => "panicked",
        }
    }
}

/// The children of `pool` in the store: owned ones (by controller owner UID) as planner input.
pub fn observe<P: PoolKind>(pool: &P, store: &Store<P::Stored>) -> (Vec<Observed>, HashMap<String, Arc<P::Stored>>) {
    let uid = pool.meta().uid.clone().unwrap_or_default();
    let name = pool.name_any();
    let mut observed = Vec::new();
    let mut objects = HashMap::new();
    for child in store.state() {
        let owned = child.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
        if !owned {
            continue;
        }
        let child_name = child.name_any();
        if pool.meta().namespace.is_some() && child.namespace() != pool.namespace() {
            continue;
        }
        observed.push(Observed {
            index: plan::parse_index(&name, &child_name),
            hash: child.labels().get(HASH_LABEL).cloned(),
            ready: P::is_ready(&child),
            terminating: child.meta().deletion_timestamp.is_some(),
            finished: P::is_finished(&child),
            failing: P::is_failing(&child),
            name: child_name.clone(),
        });
        objects.insert(child_name, child);
    }
    (observed, objects)
}

/// Indexes below the count whose name is held by an object this pool does not own.
fn taken<P: PoolKind>(pool: &P, store: &Store<P::Stored>, owned: &HashMap<String, Arc<P::Stored>>) -> BTreeSet<u32> {
    let name = pool.name_any();
    let ns = pool.namespace();
    (0..pool.count())
        .filter(|i| {
            let child = plan::child_name(&name, *i);
            if owned.contains_key(&child) {
                return false;
            }
            let mut r = ObjectRef::<P::Stored>::new(&child);
            if let Some(ns) = &ns {
                r = r.within(ns);
            }
            store.get(&r).is_some()
        })
        .collect()
}

pub async fn reconcile<P: PoolKind>(pool: Arc<P>, ctx: Arc<PoolContext<P>>) -> Result<Action, Error> {
    let kind = P::kind(&()).to_string();
    let _timer = ctx.metrics.reconcile_timer(&kind);
    if pool.meta().deletion_timestamp.is_some() {
        // Children go with the pool through their owner references (garbage collector).
        ctx.expectations.forget(pool.meta().uid.as_deref().unwrap_or_default());
        return Ok(Action::await_change());
    }
    if tokio::time::timeout(Duration::from_secs(30), ctx.children.wait_until_ready()).await.is_err() {
        return Err(Error::NotSynced(P::NOUN));
    }

    let name = pool.name_any();
    let uid = pool.meta().uid.clone().unwrap_or_default();
    let hash = pool.template_hash();
    let (mut observed, owned) = observe(pool.as_ref(), &ctx.children);
    // Writes the store does not show yet: created children count as present (not ready),
    // deleted ones as terminating.
    let pending = ctx.expectations.pending(&uid, |child, what| match what {
        Expect::Create => owned.contains_key(child),
        Expect::Delete => owned.get(child).is_none_or(|c| c.meta().deletion_timestamp.is_some()),
    });
    for (child, what) in pending {
        match what {
            Expect::Create => observed.push(Observed {
                index: plan::parse_index(&name, &child),
                hash: Some(hash.clone()),
                ready: false,
                terminating: false,
                finished: false,
                failing: false,
                name: child,
            }),
            Expect::Delete => {
                if let Some(o) = observed.iter_mut().find(|o| o.name == child) {
                    o.terminating = true;
                }
            }
        }
    }
    let selector = format!("{POOL_LABEL}={name}");
    let mut status_input = StatusInput {
        count: pool.count(),
        hash: &hash,
        generation: pool.meta().generation,
        selector,
        owned: &observed,
        plan: None,
        problem: None,
        previous: pool.pool_status(),
        now: Time(k8s_openapi::jiff::Timestamp::now()),
        noun: P::NOUN,
    };

    // Validate: an invalid pool is reported, never acted on.
    if let Err(message) = pool.validate(&ctx.env) {
        status_input.problem = Some(Problem {
            reason: "InvalidSpec".into(),
            message: format!("{message}; nothing is done to the {}s until the spec is fixed", P::NOUN),
        });
        write_status(pool.as_ref(), &ctx, status::build(&status_input)).await?;
        // Rules that look at other pools can change their verdict without this pool changing.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }

    let taken = taken(pool.as_ref(), &ctx.children, &owned);
    let plan = plan::plan(&PlanInput {
        count: pool.count(),
        hash: &hash,
        mode: pool.update_mode(),
        owned: &observed,
        taken: &taken,
        max_creates: ctx.max_creates,
    });
    if !plan.create.is_empty() && !still_there(pool.as_ref(), &ctx).await {
        // Deleted meanwhile: creating children now would only hand the garbage collector work.
        return Ok(Action::await_change());
    }
    let outcome = apply::execute(pool.as_ref(), &plan, &owned, &hash, &ctx).await;
    ctx.expectations.expect(&uid, &outcome.created, Expect::Create);
    ctx.expectations.expect(&uid, &outcome.deleted, Expect::Delete);
    if let Some(first) = outcome.failures.first() {
        tracing::warn!(kind, pool = %name, failed = outcome.failures.len(), first = %first, "writes failed");
    }
    if outcome.writes > 0 {
        tracing::info!(
            kind, pool = %name, create = plan.create.len(), update = plan.update.len(),
            delete = plan.delete.len(), failed = outcome.failures.len(), "applied plan"
        );
    }

    let problem = if let Some(p) = outcome.render_problems.first() {
        Some(p.clone())
    } else if !outcome.refused.is_empty() {
        Some(Problem {
            reason: "InvalidTemplate".into(),
            message: format!(
                "the API server refuses the {}s this template renders: {}; fix the template (retrying every 30s)",
                P::NOUN,
                outcome.refused.join("; ")
            ),
        })
    } else if !outcome.failures.is_empty() {
        let shown: Vec<&str> = outcome.failures.iter().take(3).map(String::as_str).collect();
        Some(Problem {
            reason: "WriteFailed".into(),
            message: format!(
                "{} of {} writes failed, retrying: {}",
                outcome.failures.len(),
                outcome.writes,
                shown.join("; ")
            ),
        })
    } else {
        status::conflict_problem(&name, &format!("{}s", P::NOUN), &plan.conflicts)
    };
    status_input.problem = problem;
    status_input.plan = Some(&plan);
    let new_status = status::build(&status_input);
    let labels = PoolLabels { kind: kind.clone(), namespace: pool.namespace().unwrap_or_default(), name: name.clone() };
    ctx.metrics.pool_desired.get_or_create(&labels).set(i64::from(pool.count()));
    ctx.metrics.pool_ready.get_or_create(&labels).set(i64::from(new_status.ready_replicas));
    ctx.metrics.pool_updated.get_or_create(&labels).set(i64::from(new_status.updated_replicas));
    write_status(pool.as_ref(), &ctx, new_status).await?;

    let busy = plan.pending || !outcome.failures.is_empty() || !outcome.render_problems.is_empty();
    Ok(if !outcome.refused.is_empty() {
        // The same writes would be refused again: wait for a change, or retry slowly (a
        // namespace policy that refused them may change without the pool changing).
        Action::requeue(Duration::from_secs(30))
    } else if !outcome.failures.is_empty() || !outcome.render_problems.is_empty() {
        Action::requeue(Duration::from_secs(5))
    } else if plan.pending {
        // More to create right away (the round was capped), or children still terminating.
        Action::requeue(Duration::from_millis(if plan.create.is_empty() { 1000 } else { 50 }))
    } else if outcome.writes > 0 || busy {
        Action::requeue(Duration::from_secs(1))
    } else {
        Action::requeue(Duration::from_secs(300))
    })
}

/// Whether the pool still exists, undeleted, with the same UID (one read before creating).
async fn still_there<P: PoolKind>(pool: &P, ctx: &PoolContext<P>) -> bool {
    match P::pool_api(ctx.client.clone(), pool).get_metadata_opt(&pool.name_any()).await {
        Ok(Some(live)) => live.metadata.uid == pool.meta().uid && live.metadata.deletion_timestamp.is_none(),
        Ok(None) => false,
        // Unknown: go ahead; the garbage collector covers the rare loss.
        Err(_) => true,
    }
}

async fn write_status<P: PoolKind>(
    pool: &P,
    ctx: &PoolContext<P>,
    status: crate::api::PoolStatus,
) -> Result<(), Error> {
    if pool.pool_status() == Some(&status) {
        return Ok(());
    }
    let api = P::pool_api(ctx.client.clone(), pool);
    let patch = serde_json::json!({ "status": status });
    let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let result = api.patch_status(&pool.name_any(), &pp, &Patch::Merge(&patch)).await;
    ctx.metrics.write(&P::plural(&()), "patch-status", result.is_ok());
    match result {
        Ok(_) => Ok(()),
        // The pool was deleted meanwhile.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::Status(e)),
    }
}

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// [`reconcile`], with a panic contained: kube-runtime would re-raise it and end the process
/// (every fake node would then lose its heartbeat). The pool gets `Degraded` with reason
/// `Panicked` and the message, and is retried after the usual back-off.
pub async fn reconcile_contained<P: PoolKind>(pool: Arc<P>, ctx: Arc<PoolContext<P>>) -> Result<Action, Error> {
    use futures::FutureExt;
    let run = std::panic::AssertUnwindSafe(reconcile(pool.clone(), ctx.clone())).catch_unwind().await;
    let message = match run {
        Ok(result) => return result,
        Err(payload) => panic_message(payload.as_ref()),
    };
    tracing::error!(kind = %P::kind(&()), pool = %pool.name_any(), panic = %message, "reconcile panicked; the operator carries on");
    let mut status = pool.pool_status().cloned().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    status.conditions.retain(|c| c.type_ != crate::api::common::conditions::DEGRADED);
    status.conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: crate::api::common::conditions::DEGRADED.into(),
        status: "True".into(),
        reason: "Panicked".into(),
        message: format!("the operator hit a bug on this pool ({message}); nothing else is affected; please report it"),
        last_transition_time: now,
        observed_generation: pool.meta().generation,
    });
    // Best effort: the error below is counted and retried whatever happens here.
    let _ = write_status(pool.as_ref(), &ctx, status).await;
    Err(Error::Panicked(message))
}

pub fn error_policy<P: PoolKind>(pool: Arc<P>, error: &Error, ctx: Arc<PoolContext<P>>) -> Action {
    tracing::warn!(kind = %P::kind(&()), pool = %pool.name_any(), %error, "reconcile failed; retrying in 5s");
    ctx.metrics.reconcile_failed(&P::kind(&()), error.metric_label());
    Action::requeue(Duration::from_secs(5))
}
