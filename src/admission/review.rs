//! Answering one AdmissionReview: decode, run the rules of the pool's kind, allow or deny
//! with every message. Pure apart from reading the NodePool store for cross-pool rules.

use crate::api::validation::{self, NodePoolRules};
use crate::api::{NodePool, PodPool};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::reflector::Store;
use std::sync::Arc;

/// A spec that can be checked at admission (one impl per pool kind).
pub trait Validate: Sized {
    /// Every problem with `self`, given the object before an update.
    fn problems(&self, old: Option<&Self>, pools: &[Arc<NodePool>]) -> Vec<String>;
}

impl Validate for NodePool {
    fn problems(&self, old: Option<&Self>, pools: &[Arc<NodePool>]) -> Vec<String> {
        // Children of a live pool: what its status last counted (all of them if unknown).
        let old =
            old.map(|o| (o, o.status.as_ref().map_or(o.spec.node_count.max(0) as u32, |s| s.replicas.max(0) as u32)));
        let ctx = NodePoolRules::new(&self.name_any(), pools, old);
        validation::check_nodepool(&self.spec, &ctx).err().unwrap_or_default()
    }
}

impl Validate for PodPool {
    fn problems(&self, _old: Option<&Self>, _pools: &[Arc<NodePool>]) -> Vec<String> {
        validation::check_podpool(&self.spec).err().unwrap_or_default()
    }
}

/// The verdict on one request: (kind, allowed, response).
fn judge<K: Validate + serde::de::DeserializeOwned>(
    req: &AdmissionRequest<DynamicObject>,
    pools: &[Arc<NodePool>],
) -> (bool, AdmissionResponse) {
    let resp = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return (true, resp);
    }
    let decode = |o: &DynamicObject| serde_json::to_value(o).and_then(serde_json::from_value::<K>);
    let Some(obj) = req.object.as_ref() else { return (true, resp) };
    let new = match decode(obj) {
        Ok(k) => k,
        Err(e) => return (false, resp.deny(format!("the object does not decode as {}: {e}", req.kind.kind))),
    };
    let old = req.old_object.as_ref().and_then(|o| decode(o).ok());
    let problems = new.problems(old.as_ref(), pools);
    if problems.is_empty() { (true, resp) } else { (false, resp.deny(problems.join("; "))) }
}

/// Errors that make the answer an HTTP 400: the body is not an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not an AdmissionReview: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("the AdmissionReview has no request: {0}")]
    NoRequest(String),
}

/// Answers an AdmissionReview body. Returns the kind judged, whether it was allowed, and
/// the review to send back.
pub fn answer(
    body: &[u8],
    pools: &Store<NodePool>,
) -> Result<(String, bool, AdmissionReview<DynamicObject>), BadReview> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
    let req: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| BadReview::NoRequest(e.to_string()))?;
    let kind = req.kind.kind.clone();
    let all = pools.state();
    let (allowed, resp) = match kind.as_str() {
        "NodePool" => judge::<NodePool>(&req, &all),
        "PodPool" => judge::<PodPool>(&req, &all),
        other => {
            (true, AdmissionResponse::from(&req).deny(format!("kwok-pools does not validate {other}")).allow_anyway())
        }
    };
    Ok((kind, allowed, resp.into_review()))
}

trait AllowAnyway {
    fn allow_anyway(self) -> Self;
}

impl AllowAnyway for AdmissionResponse {
    /// Objects this webhook was not meant to see are let through.
    fn allow_anyway(mut self) -> Self {
        self.allowed = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use serde_json::json;

    fn review(kind: &str, object: serde_json::Value, old: Option<serde_json::Value>) -> Vec<u8> {
        let resource = format!("{}s", kind.to_lowercase());
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": resource},
                "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": old,
            }
        }))
        .unwrap()
    }

    fn pool(name: &str, cidr: &str, alloc: &str) -> serde_json::Value {
        json!({
            "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"nodeCount": 2, "podCIDR": {"cidr": cidr, "maskSize": 24},
                     "nodeTemplate": {"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": alloc}}}}
        })
    }

    fn store_with(pools: Vec<serde_json::Value>) -> Store<NodePool> {
        let mut w = Writer::<NodePool>::default();
        w.apply_watcher_event(&kube::runtime::watcher::Event::Init);
        for p in pools {
            w.apply_watcher_event(&kube::runtime::watcher::Event::InitApply(serde_json::from_value(p).unwrap()));
        }
        w.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        w.as_reader()
    }

    fn message(r: &AdmissionReview<DynamicObject>) -> String {
        r.response.as_ref().unwrap().result.message.clone()
    }

    #[test]
    fn allows_a_good_pool_and_denies_a_bad_one_with_the_path() {
        let store = store_with(vec![]);
        let (kind, allowed, r) = answer(&review("NodePool", pool("a", "10.0.0.0/16", "4"), None), &store).unwrap();
        assert_eq!((kind.as_str(), allowed), ("NodePool", true));
        assert_eq!(r.response.unwrap().uid, "u-1");
        let (_, allowed, r) = answer(&review("NodePool", pool("a", "10.0.0.0/16", "8"), None), &store).unwrap();
        assert!(!allowed);
        assert!(message(&r).contains("spec.nodeTemplate.status.allocatable.cpu"), "{}", message(&r));
    }

    #[test]
    fn overlapping_pools_are_denied() {
        let store = store_with(vec![pool("other", "10.0.0.0/16", "4")]);
        let (_, allowed, r) = answer(&review("NodePool", pool("a", "10.0.16.0/20", "4"), None), &store).unwrap();
        assert!(!allowed);
        assert!(message(&r).contains("NodePool other"), "{}", message(&r));
        // A pool never overlaps itself on update.
        let (_, allowed, _) = answer(
            &review("NodePool", pool("other", "10.0.0.0/16", "4"), Some(pool("other", "10.0.0.0/16", "4"))),
            &store,
        )
        .unwrap();
        assert!(allowed);
    }

    #[test]
    fn garbage_is_a_bad_request_not_a_crash() {
        let store = store_with(vec![]);
        assert!(matches!(answer(b"not json", &store), Err(BadReview::Decode(_))));
        assert!(matches!(
            answer(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#, &store),
            Err(BadReview::NoRequest(_))
        ));
        assert!(answer(br#"{"request": 5}"#, &store).is_err());
    }

    #[test]
    fn pod_pools_are_checked_too() {
        let store = store_with(vec![]);
        let pp = json!({
            "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "PodPool",
            "metadata": {"name": "w", "namespace": "d"},
            "spec": {"podCount": 1, "podTemplate": {"spec": {"containers": [{"name": "c"}]}}}
        });
        let (_, allowed, r) = answer(&review("PodPool", pp, None), &store).unwrap();
        assert!(!allowed);
        assert!(message(&r).contains("spec.podTemplate.spec.containers[0].image"), "{}", message(&r));
    }
}
