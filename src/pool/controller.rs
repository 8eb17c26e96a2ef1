//! The controller loop of a pool kind, written once for every kind: which pools a child event
//! wakes, and waiting for a missing child CRD without holding up anything else.

use super::context::PoolContext;
use super::reconcile::{error_policy, reconcile_contained};
use super::{ChildCrd, PoolKind};
use crate::api::common::GROUP;
use crate::api::common::conditions::DEGRADED;
use crate::api::conventions::split_child_name;
use crate::informer::{Change, Informer};
use crate::simulator::selector::Selector;
use crate::telemetry::metrics::PoolLabels;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// The pools a child event should wake: its controller owner of kind `P`, and the pool its
/// name would belong to (`<pool>-<index>`), so that a foreign object taking or freeing a
/// child's name is noticed too.
pub fn pools_to_wake<P: PoolKind>(child: &P::Stored) -> Vec<ObjectRef<P>> {
    let kind = P::kind(&());
    let ns = child.namespace();
    let with_ns = |r: ObjectRef<P>| match &ns {
        Some(ns) => r.within(ns),
        None => r,
    };
    let mut out: Vec<ObjectRef<P>> = child
        .owner_references()
        .iter()
        .filter(|o| o.kind == kind && o.api_version.starts_with(GROUP))
        .map(|o| with_ns(ObjectRef::new(&o.name)))
        .collect();
    let name = child.name_any();
    if let Some((pool, _)) = split_child_name(&name) {
        let r = with_ns(ObjectRef::new(pool));
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// How often, at most, changes of its children wake a pool.
const WAKE_PERIOD: Duration = Duration::from_millis(200);

/// Runs the controller of kind `P` until shutdown, on the operator's shared informer of the
/// kind's pools (one watch of the kind per process, whoever reads it). `handles` selects which
/// pools this instance handles; `children` carries every change of the child kind.
pub async fn run<P>(
    pools: Arc<Informer<P>>,
    handles: Selector,
    children: UnboundedReceiver<Change<P::Stored>>,
    ctx: Arc<PoolContext<P>>,
) where
    P: PoolKind,
{
    let store = pools.store();
    let ours = {
        let handles = handles.clone();
        move |pool: &P| pool.handled_here() && handles.matches(pool.meta().labels.as_ref())
    };
    // Every pool stored now, then each pool's changes (deletions included: its reconcile
    // finds it gone and forgets it). Subscribed first, so nothing falls between.
    let own = {
        let (changes, ours) = (pools.subscribe(), ours.clone());
        let now: Vec<Arc<P>> = store.state().into_iter().filter(|p| ours(p)).collect();
        let later = UnboundedReceiverStream::new(changes).filter_map(move |change| {
            futures::future::ready(match change {
                Change::Applied(p) | Change::Deleted(p) if ours(&p) => Some(p),
                _ => None,
            })
        });
        futures::stream::iter(now).chain(later)
    };
    // A child's change that alters what its pools see of it wakes the pools of this instance
    // it names, each pool at most once per period (see `wake`: kube-runtime's debounce starves
    // a pool whose children keep changing).
    let wake = {
        let (ours, store) = (ours.clone(), store.clone());
        let mut views = super::wake::Views::default();
        UnboundedReceiverStream::new(children).flat_map(move |change| {
            let (child, gone) = match change {
                Change::Applied(c) => (c, false),
                Change::Deleted(c) => (c, true),
                Change::Synced => return futures::stream::iter(Vec::new()),
            };
            let refs: Vec<_> =
                pools_to_wake::<P>(&child).into_iter().filter(|r| store.get(r).is_some_and(|p| ours(&p))).collect();
            let news = if gone {
                views.forget(child.as_ref());
                true
            } else {
                !refs.is_empty() && views.changed::<P>(child.as_ref())
            };
            futures::stream::iter(if news { refs } else { Vec::new() })
        })
    };
    let wake = super::wake::coalesce(wake, WAKE_PERIOD);
    let reconcile = move |pool: Arc<P>, ctx: Arc<PoolContext<P>>| {
        // A retry scheduled before the pool moved to another instance: not this one's now.
        let handled = ours(&pool);
        async move { if handled { reconcile_contained(pool, ctx).await } else { Ok(Action::await_change()) } }
    };
    Controller::for_shared_stream(own, store)
        .reconcile_on(wake)
        .run(reconcile, error_policy::<P>, ctx.clone())
        .for_each(|result| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = &result {
                // A pool that is gone (or never was): drop its per-pool metrics.
                let labels = PoolLabels {
                    kind: P::kind(&()).to_string(),
                    namespace: gone.namespace.clone().unwrap_or_default(),
                    name: gone.name.clone(),
                };
                ctx.metrics.forget_pool(&labels);
                // Back-off entries by UID: only live pools keep theirs.
                let live: std::collections::HashSet<String> =
                    ctx.pools.state().iter().filter_map(|p| p.meta().uid.clone()).collect();
                ctx.backoff.retain(|uid| live.contains(uid));
            } else if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
            futures::future::ready(())
        })
        .await;
}

/// Whether the CRD named `name` exists and is Established.
pub async fn crd_established(client: &Client, name: &str) -> kube::Result<bool> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get_opt(name).await?;
    Ok(crd
        .and_then(|c| c.status)
        .and_then(|s| s.conditions)
        .is_some_and(|conds| conds.iter().any(|c| c.type_ == "Established" && c.status == "True")))
}

/// The Degraded condition of a pool whose child CRD is missing.
fn missing_crd_condition(crd: &ChildCrd, noun: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: DEGRADED.into(),
        status: "True".into(),
        reason: super::status::Reason::ChildCrdMissing.as_str().into(),
        message: format!(
            "the {noun}s of this pool need the CRD {}, which is not installed: {}; the pool starts by itself once it is",
            crd.name, crd.install
        ),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: generation,
    }
}

/// Waits until the child CRD of kind `P` is installed, telling every pool of the kind why it
/// waits (a Degraded condition), checking every `every`. Returns once it is Established.
pub async fn await_child_crd<P: PoolKind>(client: &Client, crd: ChildCrd, pools: &Store<P>, every: Duration) {
    let mut told = std::collections::HashSet::new();
    loop {
        match crd_established(client, crd.name).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(crd = crd.name, error = %e, "cannot read CRDs (the operator needs get on customresourcedefinitions); retrying")
            }
        }
        for pool in pools.state().into_iter().filter(|p| p.handled_here()) {
            let key = (pool.meta().uid.clone(), pool.meta().generation);
            if told.contains(&key) {
                continue;
            }
            let condition = missing_crd_condition(&crd, P::NOUN, pool.meta().generation);
            // The pool's other conditions stay; Degraded says why nothing happens.
            let mut conditions: Vec<Condition> = pool.pool_status().map(|s| s.conditions.clone()).unwrap_or_default();
            conditions.retain(|c| c.type_ != DEGRADED);
            conditions.push(condition);
            let patch = serde_json::json!({ "status": { "conditions": conditions } });
            let pp = crate::api::conventions::patch_params();
            match P::pool_api(client.clone(), &pool).patch_status(&pool.name_any(), &pp, &Patch::Merge(&patch)).await {
                Ok(_) => {
                    told.insert(key);
                }
                Err(e) => tracing::warn!(pool = %pool.name_any(), error = %e, "cannot mark the pool Degraded"),
            }
        }
        tracing::warn!(kind = %P::kind(&()), crd = crd.name, install = crd.install, "waiting for the child CRD");
        tokio::time::sleep(every).await;
    }
}
