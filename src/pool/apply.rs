//! The apply step: carry out a plan with server-side apply under one field manager, with a
//! bound on writes in flight shared by every pool.

use super::plan::Plan;
use super::status::Problem;
use super::{PoolKind, Write, refusal};
use crate::api::conventions::FIELD_MANAGER;
use crate::api::conventions::child_name;
use crate::telemetry::metrics::PoolLabels;
use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;

use super::reconcile::PoolContext;

/// What went wrong while applying, for the Degraded condition.
#[derive(Debug, Default)]
pub struct Outcome {
    pub failures: Vec<String>,
    /// What the API server refused about the rendered children (422), at the pool
    /// manifest's paths: the template must change, retrying the same writes cannot help.
    pub refused: Vec<String>,
    pub render_problems: Vec<Problem>,
    pub writes: usize,
    /// Children created by this round (the store may not show them yet).
    pub created: Vec<String>,
    /// Children deleted by this round.
    pub deleted: Vec<String>,
}

/// One write's verb, child name, error (if it failed) and the API server's refusal of the
/// object, at the pool manifest's paths (if it refused it).
type WriteResult = (&'static str, String, Option<String>, Vec<String>);

enum Op<C> {
    Create(String, C),
    /// In-place writes to one child, in order; the first failure stops the rest (so a
    /// child never carries the new template hash without its new status).
    Update(String, Vec<Write<C>>),
    Delete(String, Option<String>),
}

/// The operations of `plan`: deletes first, then creates and in-place updates, each child
/// rendered (render problems are collected in `outcome`).
fn operations<P: PoolKind>(
    pool: &P,
    plan: &Plan,
    owned: &HashMap<String, Arc<P::Stored>>,
    hash: &str,
    env: &P::Env,
    outcome: &mut Outcome,
) -> Vec<Op<P::Child>> {
    let pool_name = pool.name_any();
    let mut ops: Vec<Op<P::Child>> = Vec::new();
    for name in &plan.delete {
        let uid = owned.get(name).and_then(|c| c.meta().uid.clone());
        ops.push(Op::Delete(name.clone(), uid));
    }
    for &i in &plan.create {
        match pool.render(i, hash, env) {
            Ok(child) => ops.push(Op::Create(child_name(&pool_name, i), child)),
            Err(p) => outcome.render_problems.push(p),
        }
    }
    for &i in &plan.update {
        let name = child_name(&pool_name, i);
        let Some(current) = owned.get(&name) else { continue };
        match pool.render(i, hash, env) {
            Ok(mut desired) => {
                // Guard: if the object was replaced by another with the same name, the API
                // server refuses a write that carries the old UID.
                desired.meta_mut().uid = current.meta().uid.clone();
                ops.push(Op::Update(name, P::in_place(current, desired)));
            }
            Err(p) => outcome.render_problems.push(p),
        }
    }
    outcome.writes = ops.iter().map(|op| if let Op::Update(_, w) = op { w.len() } else { 1 }).sum();
    ops
}

/// Creates a child: a POST (never takes over an object of the same name) or a forced apply.
async fn create<P: PoolKind>(api: &Api<P::Child>, name: &str, child: &P::Child) -> kube::Result<()> {
    if !P::CREATE_WITH_POST {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        return api.patch(name, &apply, &Patch::Apply(child)).await.map(|_| ());
    }
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match api.create(&pp, child).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(mut s)) if s.code == 409 => {
            s.message = format!("{name} already exists and is not owned by this pool; it is left alone");
            Err(kube::Error::Api(s))
        }
        Err(e) => Err(e),
    }
}

/// The in-place writes to one child, in order; the first failure stops the rest.
async fn update<C>(api: &Api<C>, name: &str, writes: Vec<Write<C>>) -> Vec<(&'static str, String, kube::Result<()>)>
where
    C: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let merge = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let mut done = Vec::new();
    for w in writes {
        let (verb, r) = match w {
            Write::Apply(c) => ("apply", api.patch(name, &apply, &Patch::Apply(&c)).await.map(|_| ())),
            Write::MergeStatus(v) => {
                ("patch-status", api.patch_status(name, &merge, &Patch::Merge(&v)).await.map(|_| ()))
            }
        };
        let failed = r.is_err();
        done.push((verb, name.to_string(), r));
        if failed {
            break;
        }
    }
    done
}

/// Deletes a child by UID: already gone, or replaced by another object, is nothing to do.
async fn delete<C>(api: &Api<C>, name: &str, uid: Option<String>) -> kube::Result<()>
where
    C: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let dp = DeleteParams {
        preconditions: uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs one operation (holding a permit of the shared write budget) and reports each write:
/// counted in the metrics, with its error and the API server's refusal at manifest paths.
async fn run_op<P: PoolKind>(
    api: Api<P::Child>,
    op: Op<P::Child>,
    ctx: &PoolContext<P>,
    pool: &PoolLabels,
) -> Vec<WriteResult> {
    let _permit = ctx.writes.acquire().await.ok();
    let done = match op {
        Op::Create(name, child) => {
            let r = create::<P>(&api, &name, &child).await;
            vec![("create", name, r)]
        }
        Op::Update(name, writes) => update(&api, &name, writes).await,
        Op::Delete(name, uid) => {
            let r = delete(&api, &name, uid).await;
            vec![("delete", name, r)]
        }
    };
    let resource = P::Child::plural(&());
    done.into_iter()
        .map(|(verb, name, result)| {
            ctx.metrics.write(&resource, verb, result.is_ok());
            ctx.metrics.child_write(pool, verb, result.is_ok());
            let refused = match &result {
                Err(kube::Error::Api(s)) if refusal::is_refusal(s) => refusal::messages(s, P::TEMPLATE_PATH, &name),
                _ => vec![],
            };
            let error = result.err().map(|e| format!("{verb} {resource}/{name}: {}", describe(&e)));
            (verb, name, error, refused)
        })
        .collect()
}

/// Adds the results of the writes to `outcome`.
fn tally(outcome: &mut Outcome, results: impl IntoIterator<Item = WriteResult>) {
    for (verb, name, error, refused) in results {
        for line in refused {
            if !outcome.refused.contains(&line) {
                outcome.refused.push(line);
            }
        }
        match (verb, error) {
            (_, Some(e)) => outcome.failures.push(e),
            ("create", None) => outcome.created.push(name),
            ("delete", None) => outcome.deleted.push(name),
            _ => {}
        }
    }
}

/// Executes `plan` for `pool`. Never fails as a whole: each write's error is collected.
pub async fn execute<P: PoolKind>(
    pool: &P,
    plan: &Plan,
    owned: &HashMap<String, Arc<P::Stored>>,
    hash: &str,
    ctx: &PoolContext<P>,
) -> Outcome {
    let mut outcome = Outcome::default();
    let ops = operations(pool, plan, owned, hash, &ctx.env, &mut outcome);
    if ops.is_empty() {
        return outcome;
    }
    let api: Api<P::Child> = P::child_api(ctx.client.clone(), pool);
    let labels = PoolLabels {
        kind: P::kind(&()).into_owned(),
        namespace: pool.namespace().unwrap_or_default(),
        name: pool.name_any(),
    };
    let results: Vec<Vec<WriteResult>> = futures::stream::iter(ops)
        .map(|op| run_op(api.clone(), op, ctx, &labels))
        .buffer_unordered(ctx.max_in_flight_per_pool)
        .collect()
        .await;
    tally(&mut outcome, results.into_iter().flatten());
    outcome
}

/// A short description of an API error, without the noise.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
