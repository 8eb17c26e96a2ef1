//! ConfigMapPool's own simulation: each ConfigMap of a pool whose `lifecycle.configMaps`
//! says `stampAfter` gets the annotation `pools.kwok.x-k8s.io/stamped` that long after it is
//! first seen, counted in its own metric. The knob is found by the shared lifecycle engine,
//! which knows the kind only as one of the registered ones.

use super::{ConfigMapPool, ConfigMapPoolMetrics};
use crate::informer::{Change, shared};
use crate::pool::{NoFlags, Simulate};
use crate::simulator::lifecycle::{Lifecycles, sample};
use crate::simulator::machinery::Timers;
use crate::simulator::{SimContext, Simulation};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// The annotation a stamped ConfigMap carries (its value: when, RFC 3339).
pub const STAMPED: &str = "pools.kwok.x-k8s.io/stamped";

/// How long after it is seen `cm` is stamped, if its pool says so.
fn stamp_after(lifecycles: &Lifecycles, cm: &ConfigMap) -> Option<Duration> {
    let ns = cm.namespace()?;
    let pool = lifecycles.governing(cm.owner_references(), Some(&ns))?;
    let knobs = pool.pool().downcast_ref::<ConfigMapPool>()?.spec.lifecycle.as_ref()?;
    let delay = knobs.config_maps.as_ref()?.stamp_after.as_ref();
    sample(delay, knobs.seed.unwrap_or(0), &[&ns, &cm.name_any()], "stamp")
}

async fn run(sim: SimContext, store: Store<ConfigMap>, mut changes: UnboundedReceiver<Change<ConfigMap>>) {
    let metrics = sim.metrics.kind::<ConfigMapPoolMetrics>();
    let mut timers: Timers<ObjectRef<ConfigMap>> = Timers::default();
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Some(Change::Applied(cm)) if !cm.annotations().contains_key(STAMPED) => {
                    if let Some(after) = stamp_after(&sim.lifecycles, &cm) {
                        timers.set_once(ObjectRef::from_obj(cm.as_ref()), after);
                    }
                }
                Some(Change::Deleted(cm)) => timers.cancel(&ObjectRef::from_obj(cm.as_ref())),
                Some(_) => {}
                None => return,
            },
            Some(key) = timers.next(), if !timers.is_empty() => {
                let Some(cm) = store.get(&key) else { continue };
                let (client, metrics, all) = (sim.client.clone(), metrics.clone(), sim.metrics.clone());
                let now = sim.clock.now().time();
                tokio::spawn(async move {
                    let api: Api<ConfigMap> = Api::namespaced(client, &cm.namespace().unwrap_or_default());
                    let patch = serde_json::json!({"metadata": {"annotations": {STAMPED: now}}});
                    let pp = crate::api::conventions::patch_params();
                    let done = api.patch(&cm.name_any(), &pp, &kube::api::Patch::Merge(&patch)).await;
                    all.write("configmaps", "patch", done.is_ok());
                    if done.is_ok() {
                        metrics.stamps.inc();
                    }
                });
            }
        }
    }
}

impl Simulate for ConfigMapPool {
    type Metrics = ConfigMapPoolMetrics;

    fn simulations(_env: &(), _flags: &NoFlags, sim: &SimContext) -> Vec<Simulation> {
        let children = shared::labelled::<ConfigMap>(&sim.informers);
        let (store, changes) = (children.store(), children.subscribe());
        let run = run(sim.clone(), store, changes);
        vec![Simulation { name: "ConfigMap stamper".into(), ready: vec![], run: Box::pin(run) }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::knobs::PoolStore;
    use std::sync::Arc;

    #[test]
    fn a_pools_knob_reaches_its_configmaps_through_the_lifecycle_engine() {
        use crate::pool::PoolKind;
        let pool = ConfigMapPool::example();
        let lifecycles =
            Lifecycles::new(vec![Arc::new(PoolStore(crate::pool::fixtures::store(vec![pool.clone()])))], None);
        let mut cm =
            ConfigMapPool::render(&pool, &crate::pool::ChildId { name: "settings-0".into(), index: 0 }, &()).unwrap();
        cm.metadata.namespace = Some("default".into());
        cm.metadata.name = Some("settings-0".into());
        assert_eq!(stamp_after(&lifecycles, &cm), None, "not the pool's child");
        cm.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "pools.kwok.x-k8s.io/v1alpha1".into(),
            kind: "ConfigMapPool".into(),
            name: "settings".into(),
            uid: "example-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert_eq!(stamp_after(&lifecycles, &cm), Some(Duration::from_secs(2)));
    }
}
