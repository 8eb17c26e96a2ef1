//! The reconcile loop of every pool kind, as a pipeline of named stages: observe (stores and
//! pending writes) → validate (pure) → plan (pure) → apply (writes) → status. An invalid spec
//! waits for a change of the pool; API errors back off exponentially per pool.

use super::PoolKind;
use super::apply::{self, Outcome};
use super::context::PoolContext;
use super::expectations::Expect;
use super::plan::{self, Observed, Plan, PlanInput};
use super::status::{self, Problem, Reason, StatusInput};
use crate::api::PoolStatus;
use crate::api::conventions::{POOL_LABEL, child_index, child_name};
use crate::informer::owners::Owners;
use crate::telemetry::metrics::PoolLabels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

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

/// What the observe stage found: the pool's children as planner input, the objects by name,
/// and the indexes whose names other objects hold.
pub struct Observation<P: PoolKind> {
    pub observed: Vec<Observed>,
    pub owned: HashMap<String, Arc<P::Stored>>,
    pub taken: BTreeSet<u32>,
}

/// The children of `pool` in the store: owned ones (by controller owner UID) as planner input.
/// With the store's owner index, only the pool's own children are looked at; without it
/// (tests), every object of the store.
fn owned_children<P: PoolKind>(
    pool: &P,
    store: &Store<P::Stored>,
    owners: Option<&Owners<P::Stored>>,
) -> (Vec<Observed>, HashMap<String, Arc<P::Stored>>) {
    let uid = pool.meta().uid.clone().unwrap_or_default();
    let name = pool.name_any();
    let mut observed = Vec::new();
    let mut objects = HashMap::new();
    let candidates: Vec<Arc<P::Stored>> = match owners {
        Some(index) => {
            let refs = crate::sync::lock(index).owned_by(&uid);
            refs.iter().filter_map(|r| store.get(r)).collect()
        }
        None => store.state(),
    };
    for child in candidates {
        let owned = child.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid);
        if !owned || (pool.meta().namespace.is_some() && child.namespace() != pool.namespace()) {
            continue;
        }
        let child_name = child.name_any();
        let (delete_first, deletion_cost) = P::deletion_order(&child);
        observed.push(Observed {
            delete_first,
            deletion_cost,
            index: child_index(&name, &child_name),
            hash: P::child_hash(&child),
            ready: P::is_ready(&child),
            terminating: child.meta().deletion_timestamp.is_some(),
            finished: P::is_finished(&child),
            failing: P::is_failing(&child),
            conflict: child.annotations().get(crate::api::conventions::SIMULATOR_CONFLICT_ANNOTATION).cloned(),
            name: child_name.clone(),
        });
        objects.insert(child_name, child);
    }
    (observed, objects)
}

/// Writes the store does not show yet: created children count as present (not ready),
/// deleted ones as terminating.
fn add_pending(observed: &mut Vec<Observed>, pending: Vec<(String, Expect)>, pool: &str, hash: &str) {
    for (child, what) in pending {
        match what {
            Expect::Create => {
                observed.push(Observed::new(child.clone(), child_index(pool, &child), Some(hash.to_string()), false))
            }
            Expect::Delete => {
                if let Some(o) = observed.iter_mut().find(|o| o.name == child) {
                    o.terminating = true;
                }
            }
        }
    }
}

/// Indexes below the count whose name is held by an object this pool does not own.
fn taken<P: PoolKind>(pool: &P, store: &Store<P::Stored>, owned: &HashMap<String, Arc<P::Stored>>) -> BTreeSet<u32> {
    let name = pool.name_any();
    let ns = pool.namespace();
    (0..pool.count())
        .filter(|i| {
            let child = child_name(&name, *i);
            let mut r = ObjectRef::<P::Stored>::new(&child);
            if let Some(ns) = &ns {
                r = r.within(ns);
            }
            !owned.contains_key(&child) && store.get(&r).is_some()
        })
        .collect()
}

/// Stage 1, observe: the pool's children from the store, with the writes it does not show yet.
pub fn observe<P: PoolKind>(pool: &P, ctx: &PoolContext<P>, hash: &str) -> Observation<P> {
    let uid = pool.meta().uid.clone().unwrap_or_default();
    let (mut observed, owned) = owned_children(pool, &ctx.children, ctx.owners.as_ref());
    let pending = ctx.expectations.pending(&uid, |child, what| match what {
        Expect::Create => owned.contains_key(child),
        Expect::Delete => owned.get(child).is_none_or(|c| c.meta().deletion_timestamp.is_some()),
    });
    add_pending(&mut observed, pending, &pool.name_any(), hash);
    let taken = taken(pool, &ctx.children, &owned);
    Observation { observed, owned, taken }
}

/// The pools a pool is compared with by the reconciler: the older ones (by creation time,
/// then name), so that of two overlapping pools only the newer is blamed and the older one
/// keeps working.
fn older_peers<P: PoolKind>(pool: &P, all: &[Arc<P>]) -> Vec<Arc<P>> {
    fn key<P: PoolKind>(p: &P) -> (Option<k8s_openapi::jiff::Timestamp>, Option<&str>, Option<&str>) {
        let m = p.meta();
        (m.creation_timestamp.as_ref().map(|t| t.0), m.name.as_deref(), m.namespace.as_deref())
    }
    let mine = key(pool);
    all.iter().filter(|p| key(p.as_ref()) < mine).cloned().collect()
}

/// Stage 2, validate (pure): the problem that stops the pool, and when to look again — on a
/// change of the pool, or (when only a comparison with other pools fails, which can change
/// without this pool changing) in 30 s.
pub fn validate<P: PoolKind>(pool: &P, all: &[Arc<P>]) -> Option<(Problem, Action)> {
    let problems = pool.problems(None, &older_peers(pool, all));
    if problems.is_empty() {
        return None;
    }
    let alone = pool.problems(None, &[]).is_empty();
    let problem = Problem {
        reason: Reason::InvalidSpec,
        message: format!("{}; nothing is done to the {}s until the spec is fixed", problems.join("; "), P::NOUN),
    };
    Some((problem, if alone { Action::requeue(Duration::from_secs(30)) } else { Action::await_change() }))
}

/// Stage 3, plan (pure).
fn plan_for<P: PoolKind>(pool: &P, seen: &Observation<P>, hash: &str, max_creates: usize) -> Plan {
    plan::plan(&PlanInput {
        count: pool.count(),
        hash,
        mode: pool.update_mode(),
        owned: &seen.observed,
        taken: &seen.taken,
        max_creates,
    })
}

/// What the apply stage's outcome means for the Degraded condition (pure).
pub fn problem_of(noun: &str, pool: &str, plan: &Plan, outcome: &Outcome) -> Option<Problem> {
    if let Some(p) = outcome.render_problems.first() {
        return Some(p.clone());
    }
    if !outcome.refused.is_empty() {
        return Some(Problem {
            reason: Reason::InvalidTemplate,
            message: format!(
                "the API server refuses the {noun}s this template renders: {}; fix the template (retrying every 30s)",
                outcome.refused.join("; ")
            ),
        });
    }
    if !outcome.failures.is_empty() {
        let shown: Vec<&str> = outcome.failures.iter().take(3).map(String::as_str).collect();
        return Some(Problem {
            reason: Reason::WriteFailed,
            message: format!(
                "{} of {} writes failed, retrying: {}",
                outcome.failures.len(),
                outcome.writes,
                shown.join("; ")
            ),
        });
    }
    status::conflict_problem(pool, &format!("{noun}s"), &plan.conflicts)
}

/// When to reconcile again after a round that applied `plan` (pure); `retry` is the pool's
/// back-off delay for failed writes.
pub fn next_action(plan: &Plan, outcome: &Outcome, retry: impl FnOnce() -> Duration) -> Action {
    if !outcome.refused.is_empty() {
        // The same writes would be refused again: wait for a change, or retry slowly (a
        // namespace policy that refused them may change without the pool changing).
        Action::requeue(Duration::from_secs(30))
    } else if !outcome.failures.is_empty() || !outcome.render_problems.is_empty() {
        Action::requeue(retry())
    } else if outcome.left > 0 {
        // The round ran out of time: the rest right away.
        Action::requeue(Duration::from_millis(50))
    } else if plan.pending {
        // More to create right away (the round was capped), or children still terminating.
        Action::requeue(Duration::from_millis(if plan.create.is_empty() { 1000 } else { 50 }))
    } else if outcome.writes > 0 {
        Action::requeue(Duration::from_secs(1))
    } else {
        Action::requeue(Duration::from_secs(300))
    }
}

/// The status input of `pool` before any plan.
fn status_input<'a, P: PoolKind>(pool: &'a P, hash: &'a str, observed: &'a [Observed]) -> StatusInput<'a> {
    StatusInput {
        count: pool.count(),
        hash,
        generation: pool.meta().generation,
        selector: format!("{POOL_LABEL}={}", pool.name_any()),
        owned: observed,
        plan: None,
        problem: None,
        previous: pool.pool_status(),
        now: Time(k8s_openapi::jiff::Timestamp::now()),
        noun: P::NOUN,
    }
}

/// Stage 4, apply: carries out the plan and remembers what the store does not show yet.
async fn apply_plan<P: PoolKind>(
    pool: &P,
    plan: &Plan,
    seen: &Observation<P>,
    hash: &str,
    ctx: &PoolContext<P>,
) -> Outcome {
    let uid = pool.meta().uid.clone().unwrap_or_default();
    let outcome = apply::execute(pool, plan, &seen.owned, hash, ctx).await;
    ctx.expectations.expect(&uid, &outcome.created, Expect::Create);
    ctx.expectations.expect(&uid, &outcome.deleted, Expect::Delete);
    let kind = P::kind(&());
    if let Some(first) = outcome.failures.first() {
        ctx.metrics.reconcile_failed(&kind, "child_write");
        tracing::warn!(failed = outcome.failures.len(), first = %first, "writes failed");
    }
    if outcome.writes > 0 {
        tracing::info!(
            create = plan.create.len(),
            update = plan.update.len(),
            delete = plan.delete.len(),
            failed = outcome.failures.len(),
            "applied plan"
        );
    }
    outcome
}

/// Stage 5, status: the gauges and the one status write of the round.
async fn publish<P: PoolKind>(pool: &P, ctx: &PoolContext<P>, status: PoolStatus) -> Result<(), Error> {
    let labels = PoolLabels {
        kind: P::kind(&()).to_string(),
        namespace: pool.namespace().unwrap_or_default(),
        name: pool.name_any(),
    };
    ctx.metrics.pool_desired.get_or_create(&labels).set(i64::from(pool.count()));
    ctx.metrics.pool_ready.get_or_create(&labels).set(i64::from(status.ready_replicas));
    ctx.metrics.pool_updated.get_or_create(&labels).set(i64::from(status.updated_replicas));
    write_status(pool, ctx, status).await
}

/// One reconcile of `pool`, in a tracing span naming it.
pub async fn reconcile<P: PoolKind>(pool: Arc<P>, ctx: Arc<PoolContext<P>>) -> Result<Action, Error> {
    let span = tracing::info_span!("reconcile", kind = %P::kind(&()), namespace = pool.namespace().unwrap_or_default(), name = %pool.name_any());
    reconcile_stages(pool, ctx).instrument(span).await
}

async fn reconcile_stages<P: PoolKind>(pool: Arc<P>, ctx: Arc<PoolContext<P>>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_timer(&P::kind(&()));
    let uid = pool.meta().uid.clone().unwrap_or_default();
    if pool.meta().deletion_timestamp.is_some() {
        // Children go with the pool through their owner references (garbage collector).
        ctx.expectations.forget(&uid);
        return Ok(Action::await_change());
    }
    if tokio::time::timeout(Duration::from_secs(30), ctx.children.wait_until_ready()).await.is_err() {
        return Err(Error::NotSynced(P::NOUN));
    }
    let hash = pool.template_hash();
    let seen = observe(pool.as_ref(), &ctx, &hash);
    let mut input = status_input(pool.as_ref(), &hash, &seen.observed);
    let peers = if P::PEER_RULES { ctx.pools.state() } else { Vec::new() };
    if let Some((problem, then)) = validate(pool.as_ref(), &peers) {
        input.problem = Some(problem);
        write_status(pool.as_ref(), &ctx, status::build(&input)).await?;
        return Ok(then);
    }
    let plan = plan_for(pool.as_ref(), &seen, &hash, ctx.max_creates);
    if !plan.create.is_empty() && !still_there(pool.as_ref(), &ctx).await {
        // Deleted meanwhile: creating children now would only hand the garbage collector work.
        return Ok(Action::await_change());
    }
    let outcome = apply_plan(pool.as_ref(), &plan, &seen, &hash, &ctx).await;
    input.problem = problem_of(P::NOUN, &pool.name_any(), &plan, &outcome)
        .or_else(|| status::simulator_conflict_problem(P::NOUN, &seen.observed));
    input.plan = Some(&plan);
    publish(pool.as_ref(), &ctx, status::build(&input)).await?;
    let failed = !outcome.failures.is_empty() || !outcome.render_problems.is_empty();
    if !failed {
        ctx.backoff.succeeded(&uid);
    }
    Ok(next_action(&plan, &outcome, || ctx.backoff.failed(uid.clone())))
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

async fn write_status<P: PoolKind>(pool: &P, ctx: &PoolContext<P>, status: PoolStatus) -> Result<(), Error> {
    if pool.pool_status() == Some(&status) {
        return Ok(());
    }
    if let Some(events) = &ctx.events {
        let changes = crate::pool::events::changes(pool.pool_status(), &status);
        events.emit(pool.object_ref(&()), pool.meta().uid.as_deref().unwrap_or_default(), changes);
    }
    let api = P::pool_api(ctx.client.clone(), pool);
    let patch = serde_json::json!({ "status": status });
    let pp = crate::api::conventions::patch_params();
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
        reason: crate::pool::status::Reason::Panicked.as_str().into(),
        message: format!("the operator hit a bug on this pool ({message}); nothing else is affected; please report it"),
        last_transition_time: now,
        observed_generation: pool.meta().generation,
    });
    // Best effort: the error below is counted and retried whatever happens here.
    let _ = write_status(pool.as_ref(), &ctx, status).await;
    Err(Error::Panicked(message))
}

/// An error ends the round: counted, logged, retried after the pool's own back-off.
pub fn error_policy<P: PoolKind>(pool: Arc<P>, error: &Error, ctx: Arc<PoolContext<P>>) -> Action {
    let delay = ctx.backoff.failed(pool.meta().uid.clone().unwrap_or_default());
    tracing::warn!(kind = %P::kind(&()), pool = %pool.name_any(), %error, retry_in = ?delay, "reconcile failed");
    ctx.metrics.reconcile_failed(&P::kind(&()), error.metric_label());
    Action::requeue(delay)
}
