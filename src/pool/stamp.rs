//! What the core sets on every child, after the kind has rendered it: the name
//! `<pool>-<index>`, the pool's namespace, the pool, index and template-hash labels, the
//! controller owner reference, and — for a workload whose placement is `Simulated` — the
//! confinement to simulated nodes. A kind renders only what is its own, so the conventions other
//! tools rely on are written once, here.

use super::PoolKind;
use super::status::Problem;
use crate::api::TemplateMetadata;
use crate::api::conventions::{HASH_LABEL, INDEX_LABEL, INSTANCE_LABEL, POOL_LABEL, child_name};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

/// Which child is being rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildId {
    /// `<pool>-<index>`.
    pub name: String,
    pub index: u32,
}

impl ChildId {
    pub fn new(pool: &str, index: u32) -> Self {
        Self { name: child_name(pool, index), index }
    }
}

/// The metadata a kind copies from its template onto a child: labels, annotations and
/// finalizers (the rest of a template's metadata belongs to the pool or the API server).
pub fn from_template(template: Option<&TemplateMetadata>) -> ObjectMeta {
    let t = template.cloned().unwrap_or_default();
    ObjectMeta { labels: t.labels, annotations: t.annotations, finalizers: t.finalizers, ..Default::default() }
}

/// Sets what every child of `pool` shares on `meta` (see the module doc).
pub fn stamp<P: PoolKind>(meta: &mut ObjectMeta, pool: &P, index: u32, hash: &str) {
    let pool_name = pool.name_any();
    meta.name = Some(child_name(&pool_name, index));
    meta.generate_name = None;
    meta.namespace = pool.namespace();
    let labels = meta.labels.get_or_insert_default();
    labels.insert(POOL_LABEL.into(), pool_name);
    labels.insert(INDEX_LABEL.into(), index.to_string());
    labels.insert(HASH_LABEL.into(), hash.into());
    // A named instance's pool: its children are that instance's to simulate.
    match pool.labels().get(INSTANCE_LABEL) {
        Some(instance) => labels.insert(INSTANCE_LABEL.into(), instance.clone()),
        None => labels.remove(INSTANCE_LABEL),
    };
    meta.owner_references = pool.controller_owner_ref(&()).map(|o| vec![o]);
}

/// Child `index` of `pool` rendered from the template with hash `hash`: the kind's rendering,
/// stamped with the conventions.
pub fn child<P: PoolKind>(pool: &P, index: u32, hash: &str, env: &P::Env) -> Result<P::Child, Problem> {
    let id = ChildId::new(&pool.name_any(), index);
    let mut rendered = pool.render(&id, env)?;
    if pool.placement() == Some(crate::api::Placement::Simulated) {
        P::confine(&mut rendered);
    }
    stamp(rendered.meta_mut(), pool, index, hash);
    Ok(rendered)
}
