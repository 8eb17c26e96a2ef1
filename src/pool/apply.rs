//! The apply step: carry out a plan with server-side apply under one field manager, with a
//! bound on writes in flight shared by every pool.

use super::plan::Plan;
use super::status::Problem;
use super::{PoolKind, Write, child, refusal};
use crate::api::conventions::FIELD_MANAGER;
use crate::api::conventions::child_name;
use crate::telemetry::metrics::PoolLabels;
use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;

use super::context::PoolContext;

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
    /// Writes of the plan this round left for the next: it ran out of its time
    /// ([`PoolContext::round_time`]), so that the pool's status shows progress meanwhile.
    pub left: usize,
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

/// The steps of `plan` in order: deletes first, then creates and in-place updates.
#[derive(Clone, Copy)]
enum Step<'a> {
    Delete(&'a str),
    Create(u32),
    Update(u32),
}

fn steps(plan: &Plan) -> Vec<Step<'_>> {
    let deletes = plan.delete.iter().map(|n| Step::Delete(n));
    deletes
        .chain(plan.create.iter().map(|&i| Step::Create(i)))
        .chain(plan.update.iter().map(|&i| Step::Update(i)))
        .collect()
}

/// A round's operations, each rendered when the writes pull it, until the round's time is up.
/// (An iterator of its own rather than adapters with closures: the reconcile's future must
/// stay `Send` for every lifetime.)
struct Rendering<'a, P: PoolKind> {
    pool: &'a P,
    pool_name: String,
    steps: std::vec::IntoIter<Step<'a>>,
    owned: &'a HashMap<String, Arc<P::Stored>>,
    hash: &'a str,
    env: &'a P::Env,
    deadline: tokio::time::Instant,
    started: usize,
    writes: usize,
    problems: Vec<Problem>,
}

impl<P: PoolKind> Iterator for Rendering<'_, P> {
    type Item = Op<P::Child>;

    fn next(&mut self) -> Option<Self::Item> {
        while tokio::time::Instant::now() < self.deadline {
            let step = self.steps.next()?;
            self.started += 1;
            let (pool, name) = (self.pool, self.pool_name.as_str());
            if let Some(op) = operation(pool, name, step, self.owned, self.hash, self.env, &mut self.problems) {
                self.writes += if let Op::Update(_, w) = &op { w.len() } else { 1 };
                return Some(op);
            }
        }
        None
    }
}

/// The operation of one step, its child rendered only now (a round's children are not all
/// held at once, and the first write goes out without waiting for the last render).
/// `None`: nothing to write (a render problem, collected in `problems`; a child gone).
fn operation<P: PoolKind>(
    pool: &P,
    pool_name: &str,
    step: Step<'_>,
    owned: &HashMap<String, Arc<P::Stored>>,
    hash: &str,
    env: &P::Env,
    problems: &mut Vec<Problem>,
) -> Option<Op<P::Child>> {
    match step {
        Step::Delete(name) => Some(Op::Delete(name.to_string(), owned.get(name).and_then(|c| c.meta().uid.clone()))),
        Step::Create(i) => match child(pool, i, hash, env) {
            Ok(rendered) => Some(Op::Create(child_name(pool_name, i), rendered)),
            Err(p) => {
                problems.push(p);
                None
            }
        },
        Step::Update(i) => {
            let name = child_name(pool_name, i);
            let current = owned.get(&name)?;
            match child(pool, i, hash, env) {
                Ok(mut desired) => {
                    // Guard: if the object was replaced by another with the same name, the API
                    // server refuses a write that carries the old UID.
                    desired.meta_mut().uid = current.meta().uid.clone();
                    Some(Op::Update(name, P::in_place(current, desired)))
                }
                Err(p) => {
                    problems.push(p);
                    None
                }
            }
        }
    }
}

/// Creates a child: a POST (never takes over an object of the same name) or a forced apply.
async fn create<P: PoolKind>(api: &Api<P::Child>, name: &str, child: &P::Child) -> kube::Result<()> {
    if !P::CREATE_WITH_POST {
        let apply = crate::api::conventions::apply_params();
        return api.patch(name, &apply, &Patch::Apply(child)).await.map(|_| ());
    }
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match api.create(&pp, child).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(mut s)) if s.code == 409 => {
            // Ours already: an earlier POST that the API server carried out but whose answer
            // never came back (a client timeout under load).
            if ours_already(api, name, child).await {
                return Ok(());
            }
            s.message = format!("{name} already exists and is not owned by this pool; it is left alone");
            Err(kube::Error::Api(s))
        }
        Err(e) => Err(e),
    }
}

/// Whether the object called `name` is owned by the same controller as `child` (by UID), as
/// the reconcile tells its own children.
async fn ours_already<C>(api: &Api<C>, name: &str, child: &C) -> bool
where
    C: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let controller = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        refs.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.clone())
    };
    let Some(want) = controller(child.owner_references()) else { return false };
    matches!(api.get_metadata_opt(name).await, Ok(Some(found)) if controller(found.owner_references()) == Some(want))
}

/// The JSON patch that hands the fields a POST gave our field manager (operation `Update`)
/// to its server-side apply (operation `Apply`), so that an apply which leaves a field out
/// removes it — as `kubectl`'s client-side-apply upgrade does. `None`: nothing to hand over
/// (already applied once, or not ours). Guarded by the child's UID.
fn claim_patch(
    entries: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    uid: &str,
) -> Option<serde_json::Value> {
    let ours = |e: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry, op: &str| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some(op)
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    if entries.iter().any(|e| ours(&e, "Apply")) {
        return None;
    }
    let mut ops = vec![serde_json::json!({"op": "test", "path": "/metadata/uid", "value": uid})];
    for (i, _) in entries.iter().enumerate().filter(|(_, e)| ours(e, "Update")) {
        ops.push(serde_json::json!({"op": "replace", "path": format!("/metadata/managedFields/{i}/operation"), "value": "Apply"}));
    }
    (ops.len() > 1).then_some(serde_json::Value::Array(ops))
}

/// Before the first apply to a child created by POST: [`claim_patch`] on its current fields.
async fn claim_fields<C>(api: &Api<C>, name: &str, uid: &str) -> kube::Result<()>
where
    C: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let meta = api.get_metadata(name).await?;
    if meta.metadata.uid.as_deref() != Some(uid) {
        return Ok(()); // replaced: the apply below is refused by its UID
    }
    let Some(ops) = claim_patch(meta.metadata.managed_fields.as_deref().unwrap_or_default(), uid) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await.map(|_| ())
}

/// The in-place writes to one child, in order; the first failure stops the rest. `posted`:
/// the child was created by POST (its fields are claimed for apply first).
async fn update<C>(
    api: &Api<C>,
    name: &str,
    writes: Vec<Write<C>>,
    posted: bool,
) -> Vec<(&'static str, String, kube::Result<()>)>
where
    C: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let apply = crate::api::conventions::apply_params();
    let merge = crate::api::conventions::patch_params();
    let mut done = Vec::new();
    for w in writes {
        let (verb, r) = match w {
            Write::Apply(c) if posted && c.meta().uid.is_some() => {
                let uid = c.meta().uid.clone().unwrap_or_default();
                match claim_fields(api, name, &uid).await {
                    Ok(()) => ("apply", api.patch(name, &apply, &Patch::Apply(&c)).await.map(|_| ())),
                    Err(e) => ("claim", Err(e)),
                }
            }
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
        Op::Update(name, writes) => update(&api, &name, writes, P::CREATE_WITH_POST).await,
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
    let planned = plan.delete.len() + plan.create.len() + plan.update.len();
    if planned == 0 {
        return outcome;
    }
    let api: Api<P::Child> = P::child_api(ctx.client.clone(), pool);
    let labels = PoolLabels {
        kind: P::kind(&()).into_owned(),
        namespace: pool.namespace().unwrap_or_default(),
        name: pool.name_any(),
    };
    // A step not started when the round's time is up is left for the next round (the plan
    // is made again from what the store shows then).
    let deadline = tokio::time::Instant::now() + ctx.round_time;
    let mut ops = Rendering {
        pool,
        pool_name: pool.name_any(),
        steps: steps(plan).into_iter(),
        owned,
        hash,
        env: &ctx.env,
        deadline,
        started: 0,
        writes: 0,
        problems: Vec::new(),
    };
    let results: Vec<Vec<WriteResult>> = futures::stream::iter(ops.by_ref())
        .map(|op| run_op(api.clone(), op, ctx, &labels))
        .buffer_unordered(ctx.max_in_flight_per_pool)
        .collect()
        .await;
    outcome.left = planned - ops.started;
    outcome.writes = ops.writes;
    outcome.render_problems = ops.problems;
    tally(&mut outcome, results.into_iter().flatten());
    outcome
}

/// A short description of an API error, without the noise.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 && s.message.contains("cannot create") => format!(
            "{} ({}): the operator creates children only where it is allowed to; bind the ClusterRole kwok-pools-pool-children in this namespace (see README, Install in a cluster)",
            s.message, s.code
        ),
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod claim_tests {
    use super::claim_patch;
    use crate::api::conventions::FIELD_MANAGER;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn the_fields_of_a_post_are_handed_to_apply_once_and_only_ours() {
        let entries = vec![
            entry("kube-controller-manager", "Update", None),
            entry(FIELD_MANAGER, "Update", Some("status")),
            entry(FIELD_MANAGER, "Update", None),
        ];
        let patch = claim_patch(&entries, "u-1").expect("ours to hand over");
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "replace", "path": "/metadata/managedFields/2/operation", "value": "Apply"},
            ])
        );
        let mut applied = entries.clone();
        applied.push(entry(FIELD_MANAGER, "Apply", None));
        assert_eq!(claim_patch(&applied, "u-1"), None, "already applied once: nothing to do");
        assert_eq!(claim_patch(&entries[..2], "u-1"), None, "nothing of ours outside status");
    }
}
