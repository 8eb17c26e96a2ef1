//! A pool of any kind as the lifecycle engine sees it ([`Knobs`]), and the pools of one kind as
//! a source the engine looks owners up in ([`PoolStore`]): the operator gives the engine one
//! per registered kind.

use super::PoolKind;
use crate::api::lifecycle::{NodeLifecycle, PodLifecycle, Sections};
use crate::simulator::lifecycle::{Knobs, PoolLifecycles};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{ObjectRef, Store};
use std::any::Any;
use std::sync::Arc;

fn sections<P: PoolKind>(pool: &P) -> Sections<'_> {
    pool.lifecycle().map(|l| l.sections()).unwrap_or_default()
}

impl<P: PoolKind> Knobs for P {
    fn seed(&self) -> Option<i64> {
        sections(self).seed
    }

    fn pods(&self) -> Option<&PodLifecycle> {
        sections(self).pods
    }

    fn nodes(&self) -> Option<&NodeLifecycle> {
        sections(self).nodes
    }

    fn created(&self) -> f64 {
        self.meta().creation_timestamp.as_ref().map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0)
    }

    fn pool(&self) -> &dyn Any {
        self
    }
}

/// The pools of kind `P`, as a source of knobs.
pub struct PoolStore<P: PoolKind>(pub Store<P>);

impl<P: PoolKind> PoolLifecycles for PoolStore<P> {
    fn owner(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<Arc<dyn Knobs>> {
        if owner.kind != P::kind(&()) || owner.api_version != P::api_version(&()) {
            return None;
        }
        let mut key = ObjectRef::<P>::new(&owner.name);
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        let pool = self.0.get(&key)?;
        // Only the pool that owns the object: a name alone is not enough.
        (pool.meta().uid.as_deref() == Some(owner.uid.as_str())).then_some(pool as Arc<dyn Knobs>)
    }

    fn delay_annotations(&self) -> Vec<String> {
        self.0
            .state()
            .iter()
            .filter_map(|p| sections(p.as_ref()).pods)
            .flat_map(PodLifecycle::delay_annotations)
            .collect()
    }
}
