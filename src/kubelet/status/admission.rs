//! The kubelet's admission of a pod bound to its node (v1.37 `pkg/kubelet/lifecycle`
//! `predicate.go`, over the scheduler's `AdmissionCheck`): whoever bound it — a second
//! scheduler, `spec.nodeName` set by hand — a pod that does not fit is rejected: Failed, with
//! the first failing check's reason (`OutOfpods`, `OutOfcpu`, `OutOfmemory`,
//! `OutOfephemeral-storage`, `OutOf<extended resource>`, `NodeAffinity`, `NodePorts`,
//! `TaintToleration`) and the kubelet's message. Pure: the pod, its node and the pods the
//! kubelet admitted before it.

use crate::informer::pod::{SlimContainer, SlimPod};
use crate::informer::shape::Placement;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use std::collections::BTreeMap;

pub use super::rejection::Rejection;

/// How the kubelet counts a resource: millicores for CPU, units for the rest.
fn scale(resource: &str) -> f64 {
    if resource == "cpu" { 1000.0 } else { 1.0 }
}

fn amount(text: &str, resource: &str) -> i64 {
    crate::api::kubelet::quantity(text).map_or(0, |v| (v * scale(resource)).ceil() as i64)
}

/// One container's requests (`resources.requests`, else its limits as the API server
/// defaults them).
fn container_requests(c: &SlimContainer) -> BTreeMap<String, i64> {
    let Some(json) = c.resources.as_deref() else { return BTreeMap::new() };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    for key in ["limits", "requests"] {
        for (resource, q) in v.get(key).and_then(|m| m.as_object()).into_iter().flatten() {
            if let Some(text) = q.as_str() {
                out.insert(resource.clone(), amount(text, resource));
            }
        }
    }
    out
}

/// What a pod asks of its node: its containers and sidecars together, or its largest init
/// container (with the sidecars started before it) if that is more.
pub fn pod_requests(pod: &SlimPod) -> BTreeMap<String, i64> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    let add = |into: &mut BTreeMap<String, i64>, from: &BTreeMap<String, i64>| {
        for (k, v) in from {
            *into.entry(k.clone()).or_default() += v;
        }
    };
    for c in &pod.containers {
        add(&mut total, &container_requests(c));
    }
    let mut sidecars: BTreeMap<String, i64> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, i64> = BTreeMap::new();
    for c in &pod.init_containers {
        let r = container_requests(c);
        if c.sidecar {
            add(&mut sidecars, &r);
        } else {
            for (k, v) in &r {
                let with_sidecars = v + sidecars.get(k).copied().unwrap_or(0);
                let peak = init_peak.entry(k.clone()).or_default();
                *peak = (*peak).max(with_sidecars);
            }
        }
    }
    add(&mut total, &sidecars);
    for (k, v) in init_peak {
        let e = total.entry(k).or_default();
        *e = (*e).max(v);
    }
    total
}

fn placement(pod: &SlimPod) -> &Placement {
    static NONE: std::sync::LazyLock<Placement> = std::sync::LazyLock::new(Placement::default);
    pod.shape.as_deref().map_or(&NONE, |s| &s.placement)
}

/// The kubelet's answer to `pod` on `node`, beside `admitted` (the node's pods it admitted
/// before, still holding resources): `None` admits it.
pub fn admit<'a>(pod: &SlimPod, node: &Node, admitted: impl IntoIterator<Item = &'a SlimPod>) -> Option<Rejection> {
    // The eviction manager's admit handler comes first: a node under pressure refuses pods.
    if let Some(r) = super::eviction::admit(pod, &super::eviction::pressure(node)) {
        return Some(r);
    }
    let admitted: Vec<&SlimPod> = admitted.into_iter().collect();
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let own = placement(pod);
    if let Some(r) = resources(pod, &allocatable, &admitted) {
        return Some(r);
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let selected = own.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    let affine = own.required_terms.is_empty() || own.required_terms.iter().any(|t| term_matches(t, &labels, name));
    if !(selected && affine) {
        return Some(Rejection::predicate("NodeAffinity", "node(s) didn't match Pod's node affinity/selector"));
    }
    if !own.host_ports.is_empty() {
        let taken: Vec<&(i32, String, String)> = admitted.iter().flat_map(|p| &placement(p).host_ports).collect();
        let clash = own.host_ports.iter().any(|(port, proto, ip)| {
            taken.iter().any(|(p, pr, i)| {
                p == port
                    && pr == proto
                    && (ip.is_empty() || i.is_empty() || ip == i || ip == "0.0.0.0" || i == "0.0.0.0")
            })
        });
        if clash {
            return Some(Rejection::predicate(
                "NodePorts",
                "node(s) didn't have free ports for the requested pod ports",
            ));
        }
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let untolerated =
        taints.iter().filter(|t| t.effect == "NoExecute").any(|t| !own.tolerations.iter().any(|tol| tolerates(tol, t)));
    if untolerated {
        return Some(Rejection::predicate("TaintToleration", "node(s) had taints that the pod didn't tolerate"));
    }
    None
}

/// The resource check (the scheduler's `Fits`, in its order): pods, then CPU, memory,
/// ephemeral storage, then each extended resource the node has (one it lacks is not checked,
/// as the kubelet drops it first).
fn resources(
    pod: &SlimPod,
    allocatable: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    admitted: &[&SlimPod],
) -> Option<Rejection> {
    let capacity = |r: &str| allocatable.get(r).map(|q| amount(&q.0, r));
    let insufficient = |resource: &str, requested: i64, used: i64, capacity: i64| Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    };
    if let Some(max) = capacity("pods") {
        let used = admitted.len() as i64;
        if used + 1 > max {
            return Some(insufficient("pods", 1, used, max));
        }
    }
    let asked = pod_requests(pod);
    let order = ["cpu", "memory", "ephemeral-storage"].into_iter().map(String::from).chain(
        asked.keys().filter(|k| !matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods")).cloned(),
    );
    let held: Vec<BTreeMap<String, i64>> = admitted.iter().map(|p| pod_requests(p)).collect();
    for resource in order {
        let requested = asked.get(&resource).copied().unwrap_or(0);
        let Some(cap) = capacity(&resource) else { continue };
        if requested == 0 {
            continue;
        }
        let used: i64 = held.iter().map(|h| h.get(&resource).copied().unwrap_or(0)).sum();
        if requested > cap - used {
            return Some(insufficient(&resource, requested, used, cap));
        }
    }
    None
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = term.match_expressions.iter().flatten();
    let fields = term.match_fields.iter().flatten();
    let empty = term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty);
    if empty {
        return false; // an empty term matches nothing
    }
    exprs.clone().all(|e| requirement(e, labels.get(&e.key).map(String::as_str)))
        && fields.clone().all(|f| f.key == "metadata.name" && requirement(f, Some(name)))
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

/// Whether a toleration tolerates a taint (`v1helper.ToleratesTaint`).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
