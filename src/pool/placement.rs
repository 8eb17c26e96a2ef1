//! Where workload children (pods, VMIs) go by default: onto fake nodes. They always tolerate
//! the fake-node taint; without placement of their own they select `type: kwok`.

use crate::api::conventions::{FAKE_TAINT_KEY, FAKE_VALUE, TYPE_LABEL, TYPE_VALUE};
use k8s_openapi::api::core::v1::Toleration;
use std::collections::BTreeMap;

/// Whether the tolerations already tolerate the fake-node taint.
pub fn tolerates_fake_nodes(tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = match t.key.as_deref() {
            None | Some("") => exists,
            // Equal (the default operator) tolerates only the taint's own value.
            Some(k) => k == FAKE_TAINT_KEY && (exists || t.value.as_deref() == Some(FAKE_VALUE)),
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

/// Confines a workload to simulated nodes: `type: kwok` in its node selector (beside what the
/// template selects) and the fake-node toleration.
pub fn confine(node_selector: &mut Option<BTreeMap<String, String>>, tolerations: &mut Option<Vec<Toleration>>) {
    node_selector.get_or_insert_default().insert(TYPE_LABEL.into(), TYPE_VALUE.into());
    *tolerations = Some(with_fake_node_toleration(tolerations.take()));
}

/// A template that selects a `type` other than simulated nodes' contradicts `Simulated`
/// placement: the message says what to do.
pub fn selector_conflict(node_selector: Option<&BTreeMap<String, String>>, path: &str) -> Option<String> {
    let other = node_selector?.get(TYPE_LABEL).filter(|v| v.as_str() != TYPE_VALUE)?;
    Some(format!(
        "{path}.nodeSelector.{TYPE_LABEL}: {other:?} selects nodes that are not simulated, but placement is Simulated: drop it, or set spec.placement: Any"
    ))
}

/// A template's `nodeName` under Simulated placement: it would bind every pod to one node past
/// the scheduler (a real node's kubelet refuses the pod, which is then recreated for ever), so
/// it is refused with the two ways to say what was meant.
pub fn node_name_conflict(node_name: Option<&str>, path: &str) -> Option<String> {
    let name = node_name.filter(|n| !n.is_empty())?;
    Some(format!(
        "{path}.nodeName: {name:?} binds every pod past the scheduler, but placement is Simulated (pods go to simulated nodes through the scheduler): select the node instead (nodeSelector: {{kubernetes.io/hostname: {name}}}), or set spec.placement: Any"
    ))
}

/// The node selector of fake nodes.
pub fn fake_node_selector() -> BTreeMap<String, String> {
    [(TYPE_LABEL.to_string(), TYPE_VALUE.to_string())].into()
}
