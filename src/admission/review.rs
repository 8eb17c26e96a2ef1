//! Answering one AdmissionReview: decode, run the rules of the pool's kind, then have the API
//! server judge the child the pool would render (a server-side dry run), and allow or deny
//! with every message. The rules are pure apart from reading the NodePool store for
//! cross-pool rules; the dry run is the one request to the API server.

use crate::kinds::{self, Visitor};
use crate::pool::{PoolKind, dry_run};
use futures::future::BoxFuture;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::gvk::GroupVersionKind;
use kube::runtime::reflector::Store;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// The pools of each kind (for rules that compare a pool with its peers), by kind.
#[derive(Clone, Default)]
pub struct Peers(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Peers {
    pub fn with<P: PoolKind>(mut self, store: Store<P>) -> Self {
        self.0.insert(TypeId::of::<P>(), Arc::new(store));
        self
    }

    /// Every pool of kind `P` known (none when its store was not given).
    pub fn of<P: PoolKind>(&self) -> Vec<Arc<P>> {
        self.0.get(&TypeId::of::<P>()).and_then(|s| s.downcast_ref::<Store<P>>()).map(Store::state).unwrap_or_default()
    }
}

/// What answering needs: the pools of every kind (for cross-pool rules) and, when the webhook
/// runs beside an API server, a client for the dry run of the rendered child.
#[derive(Clone)]
pub struct Judge {
    pub peers: Peers,
    pub client: Option<kube::Client>,
}

/// Whether a request is about kind `P` (group and kind, as linkerd's `is_kind`).
fn is_kind<P: PoolKind>(gvk: &GroupVersionKind) -> bool {
    gvk.group == P::group(&()) && gvk.kind == P::kind(&())
}

/// Whether the API server must look at the children again: always on a create; on an update
/// only when what children are rendered from changed, or the last child's name grew longer.
fn needs_dry_run<K: PoolKind>(new: &K, old: Option<&K>) -> bool {
    let Some(old) = old else { return true };
    let digits = |k: &K| k.count().saturating_sub(1).to_string().len();
    new.template_hash() != old.template_hash() || digits(new) > digits(old)
}

/// The verdict on one request: (allowed, response).
async fn judge<K: PoolKind>(req: &AdmissionRequest<DynamicObject>, judge: &Judge) -> (bool, AdmissionResponse) {
    let mut resp = AdmissionResponse::from(req);
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
    let mut peers = if K::PEER_RULES { judge.peers.of::<K>() } else { Vec::new() };
    peers.retain(|p| p.meta().name != new.meta().name || p.meta().namespace != new.meta().namespace);
    let mut problems = new.problems(old.as_ref(), &peers);
    if problems.is_empty()
        && let Some(client) = &judge.client
    {
        // A pool creates its children on its creator's behalf: only someone who may create
        // them may ask for them.
        match may_create_children::<K>(client, req, &new).await {
            Ok(None) => {}
            Ok(Some(refusal)) => problems.push(refusal),
            Err(e) => {
                tracing::warn!(error = %e, kind = %req.kind.kind, "cannot ask whether the requester may create the children; not judged")
            }
        }
    }
    if problems.is_empty()
        && let Some(client) = &judge.client
        && needs_dry_run(&new, old.as_ref())
    {
        match dry_run::child_problems(client.clone(), &new, &K::validation_env()).await {
            Ok(found) => problems = found,
            // The API server did not judge (unreachable, forbidden): let the pool through, as
            // failurePolicy Ignore would; the reconciler reports what its writes meet.
            Err(e) => tracing::warn!(error = %e, kind = %req.kind.kind, "dry run of a child failed; not judged"),
        }
    }
    let warnings = new.warnings();
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    if problems.is_empty() { (true, resp) } else { (false, resp.deny(problems.join("; "))) }
}

/// Whether the person asking may create the pool's children where the pool would (a
/// SubjectAccessReview for each kind of child the pool asks for): `Some(refusal)` says what
/// they lack.
async fn may_create_children<K: PoolKind>(
    client: &kube::Client,
    req: &AdmissionRequest<DynamicObject>,
    pool: &K,
) -> kube::Result<Option<String>> {
    let child =
        (<K::Child as kube::Resource>::group(&()).into_owned(), <K::Child as kube::Resource>::plural(&()).into_owned());
    // The spec is read as JSON only for a kind whose fields ask for more.
    let spec = match K::ALSO_CREATES {
        [] => serde_json::Value::Null,
        _ => serde_json::to_value(pool).ok().and_then(|v| v.get("spec").cloned()).unwrap_or_default(),
    };
    let also = K::ALSO_CREATES.iter().filter(|a| !spec.get(a.field).unwrap_or(&serde_json::Value::Null).is_null());
    let wanted = std::iter::once(child).chain(also.map(|a| (a.group.to_string(), a.plural.to_string())));
    for (group, resource) in wanted {
        if let Some(refusal) = may_create::<K>(client, req, pool, &group, &resource).await? {
            return Ok(Some(refusal));
        }
    }
    Ok(None)
}

/// Whether the person asking may create `resource` where the pool would create its children.
async fn may_create<K: PoolKind>(
    client: &kube::Client,
    req: &AdmissionRequest<DynamicObject>,
    pool: &K,
    group: &str,
    resource: &str,
) -> kube::Result<Option<String>> {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
    let user = &req.user_info;
    let namespace = pool.meta().namespace.clone();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.as_ref().map(|e| e.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.clone(),
                verb: Some("create".into()),
                group: Some(group.to_string()),
                resource: Some(resource.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = kube::Api::<SubjectAccessReview>::all(client.clone()).create(&Default::default(), &review).await?;
    if answer.status.is_some_and(|s| s.allowed) {
        return Ok(None);
    }
    let who = user.username.clone().unwrap_or_else(|| "the requester".into());
    let place = namespace.map_or_else(|| "in the cluster".to_string(), |ns| format!("in namespace {ns}"));
    Ok(Some(format!(
        "{who} may not create {resource} {place}: a {} creates its {resource} on its creator's behalf, so creating or changing one needs create on {resource} there too (ask an administrator for it)",
        K::kind(&()),
    )))
}

/// Errors that make the answer an HTTP 400: the body is not an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not an AdmissionReview: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("the AdmissionReview has no request: {0}")]
    NoRequest(String),
}

/// The review that refuses the object whose judging panicked, with the reason (`None` when
/// the body is no AdmissionReview at all).
pub fn refused_after_panic(body: &[u8], message: &str) -> Option<AdmissionReview<DynamicObject>> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    let req: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
    let reason = format!("kwok-pools hit a bug judging this object ({message}); please report it with the manifest");
    Some(AdmissionResponse::from(&req).deny(reason).into_review())
}

/// The kind judged (a metric label from a fixed set: a registered kind or `other`), whether
/// it was allowed, and the review to send back.
pub type Answer = (&'static str, bool, AdmissionReview<DynamicObject>);

/// An AdmissionReview body, decoded.
pub fn decode(body: &[u8]) -> Result<AdmissionReview<DynamicObject>, BadReview> {
    Ok(serde_json::from_slice(body)?)
}

/// Answers an AdmissionReview body.
pub async fn answer(body: &[u8], judge_with: &Judge) -> Result<Answer, BadReview> {
    answer_decoded(decode(body)?, judge_with).await
}

/// Answers a decoded AdmissionReview.
pub async fn answer_decoded(review: AdmissionReview<DynamicObject>, judge_with: &Judge) -> Result<Answer, BadReview> {
    let req: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| BadReview::NoRequest(e.to_string()))?;
    if super::policy::is_policy(&req) {
        let (allowed, resp) = super::policy::judge(&req);
        return Ok(("LifecyclePolicy", allowed, resp.into_review()));
    }
    if crate::kinds::eviction::is_eviction(&req) {
        let (allowed, resp) = crate::kinds::eviction::judge(&req, judge_with.client.as_ref()).await;
        return Ok(("Eviction", allowed, resp.into_review()));
    }
    if super::storage_class::is_storage_class(&req) {
        let (allowed, resp) = super::storage_class::judge(&req);
        return Ok(("StorageClass", allowed, resp.into_review()));
    }
    let mut dispatch = Dispatch { req: &req, judge: judge_with, found: None };
    kinds::visit_all(&mut dispatch);
    let (kind, (allowed, resp)) = match dispatch.found {
        Some((kind, verdict)) => (kind, verdict.await),
        None => (
            "other",
            (
                true,
                AdmissionResponse::from(&req)
                    .deny(format!("kwok-pools does not validate {}", req.kind.kind))
                    .allow_anyway(),
            ),
        ),
    };
    Ok((kind, allowed, resp.into_review()))
}

/// Finds the registered kind of a request and starts judging it.
struct Dispatch<'a> {
    req: &'a AdmissionRequest<DynamicObject>,
    judge: &'a Judge,
    found: Option<(&'static str, BoxFuture<'a, (bool, AdmissionResponse)>)>,
}

impl Visitor for Dispatch<'_> {
    fn visit<P: PoolKind>(&mut self) {
        if self.found.is_none() && is_kind::<P>(&self.req.kind) {
            self.found = Some((kinds::kind_name::<P>(), Box::pin(judge::<P>(self.req, self.judge))));
        }
    }
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
    use crate::kinds::nodepool::NodePool;
    use crate::pool::fixtures::{Call, Reply, strict_api};
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

    fn offline(store: Store<NodePool>) -> Judge {
        Judge { peers: Peers::default().with(store), client: None }
    }

    fn podpool(image: Option<&str>) -> serde_json::Value {
        json!({
            "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "PodPool",
            "metadata": {"name": "w", "namespace": "d", "uid": "u"},
            "spec": {"podCount": 12, "podTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}
        })
    }

    #[tokio::test]
    async fn allows_a_good_pool_and_warns_about_allocatable_above_capacity() {
        let judge = offline(store_with(vec![]));
        let (kind, allowed, r) =
            answer(&review("NodePool", pool("a", "10.0.0.0/16", "4"), None), &judge).await.unwrap();
        assert_eq!((kind, allowed), ("NodePool", true));
        let resp = r.response.unwrap();
        assert_eq!(resp.uid, "u-1");
        assert_eq!(resp.warnings, None);
        // The API server takes such a Node: a warning, not a refusal.
        let (_, allowed, r) = answer(&review("NodePool", pool("a", "10.0.0.0/16", "8"), None), &judge).await.unwrap();
        assert!(allowed);
        let warnings = r.response.unwrap().warnings.unwrap_or_default();
        assert!(warnings[0].starts_with("spec.nodeTemplate.status.allocatable.cpu: 8 is more than"), "{warnings:?}");
    }

    #[tokio::test]
    async fn overlapping_pools_are_denied() {
        let judge = offline(store_with(vec![pool("other", "10.0.0.0/16", "4")]));
        let (_, allowed, r) = answer(&review("NodePool", pool("a", "10.0.16.0/20", "4"), None), &judge).await.unwrap();
        assert!(!allowed);
        assert!(message(&r).contains("NodePool other"), "{}", message(&r));
        // A pool never overlaps itself on update.
        let (_, allowed, _) = answer(
            &review("NodePool", pool("other", "10.0.0.0/16", "4"), Some(pool("other", "10.0.0.0/16", "4"))),
            &judge,
        )
        .await
        .unwrap();
        assert!(allowed);
    }

    #[tokio::test]
    async fn garbage_is_a_bad_request_not_a_crash() {
        let judge = offline(store_with(vec![]));
        assert!(matches!(answer(b"not json", &judge).await, Err(BadReview::Decode(_))));
        assert!(matches!(
            answer(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#, &judge).await,
            Err(BadReview::NoRequest(_))
        ));
        assert!(answer(br#"{"request": 5}"#, &judge).await.is_err());
    }

    const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    const DRY_RUN: &str = "/api/v1/namespaces/d/pods";

    /// The API server's answer to a SubjectAccessReview, `times` times.
    fn access(allowed: bool, times: usize) -> Call {
        Call::new("POST", SAR, times, move |seen| {
            let mut review = seen.body.clone();
            review["status"] = json!({"allowed": allowed});
            Reply::json(201, review)
        })
    }

    fn dry_run(times: usize, code: u16, body: serde_json::Value) -> Call {
        Call::new("POST", DRY_RUN, times, move |_| Reply::json(code, body.clone()))
    }

    #[tokio::test]
    async fn the_api_server_judges_the_rendered_child_at_its_template_path() {
        let (client, verifier) = strict_api(vec![
            access(true, 1),
            dry_run(
                1,
                422,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
                   "message": "Pod \"w-11\" is invalid: spec.containers[0].image: Required value",
                   "details": {"name": "w-11", "kind": "Pod", "causes": [
                       {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}]}}),
            ),
        ]);
        let judge = Judge { peers: Peers::default(), client: Some(client) };
        let (kind, allowed, r) = answer(&review("PodPool", podpool(None), None), &judge).await.unwrap();
        assert_eq!((kind, allowed), ("PodPool", false));
        assert_eq!(message(&r), "spec.podTemplate.spec.containers[0].image: Required value");
        verifier.assert_done();
        let seen = verifier.seen();
        assert!(seen[1].query.contains("dryRun=All"), "{:?}", seen[1]);
        // The access review asks about the requester, for the pool's children where they go.
        let spec = &seen[0].body["spec"];
        assert_eq!(spec["user"], "admin");
        assert_eq!(
            spec["resourceAttributes"],
            json!({"namespace": "d", "verb": "create", "group": "", "resource": "pods"})
        );
    }

    #[tokio::test]
    async fn a_requester_who_may_not_create_the_children_is_refused_before_any_dry_run() {
        let (client, verifier) = strict_api(vec![access(false, 1)]);
        let judge = Judge { peers: Peers::default(), client: Some(client) };
        let (_, allowed, r) = answer(&review("PodPool", podpool(Some("nginx")), None), &judge).await.unwrap();
        assert!(!allowed);
        let m = message(&r);
        assert!(m.contains("admin may not create pods in namespace d") && m.contains("on its creator's behalf"), "{m}");
        verifier.assert_done();
    }

    #[tokio::test]
    async fn an_update_that_renders_the_same_children_is_not_sent_again() {
        let (client, verifier) = strict_api(vec![
            access(true, 2),
            dry_run(1, 500, json!({"code": 500, "message": "the API server cannot judge"})),
        ]);
        let judge = Judge { peers: Peers::default(), client: Some(client) };
        let mut scaled = podpool(Some("nginx"));
        scaled["spec"]["podCount"] = json!(15);
        let (_, allowed, _) = answer(&review("PodPool", scaled, Some(podpool(Some("nginx")))), &judge).await.unwrap();
        assert!(allowed);
        assert!(!verifier.seen().iter().any(|s| s.path == DRY_RUN), "no dry run for a scale");
        // A new template, or a longer child name (101 pods: `w-100`), is judged again.
        let mut grown = podpool(Some("nginx"));
        grown["spec"]["podCount"] = json!(101);
        let (_, allowed, _) = answer(&review("PodPool", grown, Some(podpool(Some("nginx")))), &judge).await.unwrap();
        assert!(allowed, "an API server that cannot judge lets the pool through");
        verifier.assert_done();
    }

    #[tokio::test]
    async fn a_child_that_exists_already_passed_validation() {
        let (client, verifier) = strict_api(vec![
            access(true, 1),
            dry_run(1, 409, json!({"code": 409, "reason": "AlreadyExists", "message": "exists"})),
        ]);
        let judge = Judge { peers: Peers::default(), client: Some(client) };
        let (_, allowed, r) = answer(&review("PodPool", podpool(Some("nginx")), None), &judge).await.unwrap();
        assert!(allowed, "{}", message(&r));
        verifier.assert_done();
    }

    #[test]
    fn a_panic_refuses_the_object_with_the_reason() {
        let body = review("NodePool", pool("a", "10.0.0.0/16", "4"), None);
        let r = refused_after_panic(&body, "index out of bounds").unwrap();
        let resp = r.response.unwrap();
        assert!(!resp.allowed);
        assert_eq!(resp.uid, "u-1");
        assert!(resp.result.message.contains("index out of bounds"), "{}", resp.result.message);
        assert!(refused_after_panic(b"garbage", "x").is_none());
        let payload: Box<dyn std::any::Any + Send> = Box::new(String::from("boom"));
        assert_eq!(crate::pool::reconcile::panic_message(payload.as_ref()), "boom");
        let payload: Box<dyn std::any::Any + Send> = Box::new("static boom");
        assert_eq!(crate::pool::reconcile::panic_message(payload.as_ref()), "static boom");
        let payload: Box<dyn std::any::Any + Send> = Box::new(42);
        assert_eq!(crate::pool::reconcile::panic_message(payload.as_ref()), "a panic without a message");
    }

    #[tokio::test]
    async fn kinds_are_metric_labels_from_a_fixed_set() {
        let judge = offline(store_with(vec![]));
        let (kind, allowed, _) = answer(&review("SomethingElse", json!({}), None), &judge).await.unwrap();
        assert_eq!((kind, allowed), ("other", true));
        let (kind, _, _) = answer(&review("PodPool", podpool(Some("nginx")), None), &judge).await.unwrap();
        assert_eq!(kind, "PodPool");
    }
}
