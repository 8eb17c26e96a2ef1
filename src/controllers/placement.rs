//! Where workload children (pods, VMIs) go by default: onto fake nodes. They always tolerate
//! the fake-node taint; without placement of their own they select `type: kwok`.

use crate::api::TemplateMetadata;
use crate::api::conventions::{
    FAKE_TAINT_KEY, HASH_LABEL, INDEX_LABEL, POOL_LABEL, TYPE_LABEL, TYPE_VALUE, child_name,
};
use k8s_openapi::api::core::v1::Toleration;
use kube::Resource;
use kube::api::ObjectMeta;
use std::collections::BTreeMap;

/// Whether the tolerations already tolerate the fake-node taint.
pub fn tolerates_fake_nodes(tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = match t.key.as_deref() {
            None | Some("") => exists,
            // Equal (the default operator) tolerates only the taint's own value.
            Some(k) => {
                k == FAKE_TAINT_KEY && (exists || t.value.as_deref() == Some(crate::api::conventions::FAKE_VALUE))
            }
        };
        key_ok && effect_ok
    })
}

/// `tolerations` with the fake-node toleration added unless one already covers it.
pub fn with_fake_node_toleration(tolerations: Option<Vec<Toleration>>) -> Vec<Toleration> {
    let mut tolerations = tolerations.unwrap_or_default();
    if !tolerates_fake_nodes(&tolerations) {
        tolerations.push(Toleration {
            key: Some(FAKE_TAINT_KEY.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        });
    }
    tolerations
}

/// The node selector of fake nodes.
pub fn fake_node_selector() -> BTreeMap<String, String> {
    [(TYPE_LABEL.to_string(), TYPE_VALUE.to_string())].into()
}

/// The metadata of child `index` of a namespaced workload pool: its name, the pool's
/// namespace, the template's labels (plus the pool's), annotations and finalizers, and a
/// controller reference to the pool.
pub fn child_meta<P: Resource<DynamicType = ()>>(
    pool: &P,
    template: Option<&TemplateMetadata>,
    index: u32,
    hash: &str,
) -> ObjectMeta {
    let tmeta = template.cloned().unwrap_or_default();
    let name = pool.meta().name.clone().unwrap_or_default();
    ObjectMeta {
        name: Some(child_name(&name, index)),
        namespace: pool.meta().namespace.clone(),
        labels: Some(child_labels(tmeta.labels, &name, index, hash)),
        annotations: tmeta.annotations,
        finalizers: tmeta.finalizers,
        owner_references: pool.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

/// A child's labels: the template's, plus the pool, index and template-hash labels.
pub fn child_labels(
    template: Option<BTreeMap<String, String>>,
    pool: &str,
    index: u32,
    hash: &str,
) -> BTreeMap<String, String> {
    let mut labels = template.unwrap_or_default();
    labels.insert(POOL_LABEL.into(), pool.to_string());
    labels.insert(INDEX_LABEL.into(), index.to_string());
    labels.insert(HASH_LABEL.into(), hash.into());
    labels
}
