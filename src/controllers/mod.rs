//! One controller per pool kind, wiring its API type to the pool core.

pub mod nodepool;
pub mod podpool;

use crate::api::common::GROUP;
use crate::informer::Change;
use crate::pool::PoolKind;
use crate::pool::reconcile::{PoolContext, error_policy, reconcile_contained};
use crate::telemetry::metrics::PoolLabels;
use futures::StreamExt;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
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
    if let Some((pool, index)) = name.rsplit_once('-')
        && !pool.is_empty()
        && !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
    {
        let r = with_ns(ObjectRef::new(pool));
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// Runs the controller of kind `P` until shutdown. `pool_watch` selects which pools this
/// instance handles; `children` carries every change of the child kind.
pub async fn run<P>(
    pools: Api<P>,
    pool_watch: watcher::Config,
    children: UnboundedReceiver<Change<P::Stored>>,
    ctx: Arc<PoolContext<P>>,
) where
    P: PoolKind,
{
    let wake = UnboundedReceiverStream::new(children).flat_map(|change| {
        let refs = match change {
            Change::Applied(c) | Change::Deleted(c) => pools_to_wake::<P>(&c),
            Change::Synced => vec![],
        };
        futures::stream::iter(refs)
    });
    Controller::new(pools, pool_watch)
        .with_config(Config::default().debounce(Duration::from_millis(200)))
        .reconcile_on(wake)
        .shutdown_on_signal()
        .run(reconcile_contained::<P>, error_policy::<P>, ctx.clone())
        .for_each(|result| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = &result {
                // A pool that is gone (or never was): drop its per-pool metrics.
                let labels = PoolLabels {
                    kind: P::kind(&()).to_string(),
                    namespace: gone.namespace.clone().unwrap_or_default(),
                    name: gone.name.clone(),
                };
                ctx.metrics.pool_desired.remove(&labels);
                ctx.metrics.pool_ready.remove(&labels);
                ctx.metrics.pool_updated.remove(&labels);
            } else if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
            futures::future::ready(())
        })
        .await;
}
