//! The glue between the pool core and the API server for NodePool, driven through a mock API
//! server (no cluster): what reconcile writes and in what form, expectations, status writes,
//! errors and back-off, wake mapping, and the informer's re-list.

use super::NodePool;
use crate::informer::{Change, Informer, Informers};
use crate::pool::context::PoolContext;
use crate::pool::controller::pools_to_wake;
use crate::pool::fixtures::{Call, Reply, Seen, echo, mock_api, store, strict_api};
use crate::pool::reconcile::{reconcile, validate};
use crate::pool::{PoolKind, Shared, child};
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn nodepool(yaml: &str) -> NodePool {
    let mut p: NodePool = serde_yaml::from_str(yaml).unwrap();
    p.metadata.uid = Some("uid-np".into());
    p.metadata.generation = Some(1);
    p
}

fn plain_pool() -> NodePool {
    nodepool(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  nodeCount: 2\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n",
    )
}

const POOL: &str = "/apis/pools.kwok.x-k8s.io/v1alpha1/nodepools/np";
const POOL_STATUS: &str = "/apis/pools.kwok.x-k8s.io/v1alpha1/nodepools/np/status";
const NODES: &str = "/api/v1/nodes";

/// The one read of the pool before creating children, `times` times.
fn pool_read(times: usize) -> Call {
    Call::new("GET", POOL, times, |_| {
        Reply::json(
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"name": "np", "uid": "uid-np"}}),
        )
    })
}

/// The pool's status write, `times` times: the pool with the status sent.
fn status_write(times: usize) -> Call {
    Call::new("PATCH", POOL_STATUS, times, |seen| {
        let mut pool = serde_json::to_value(plain_pool()).unwrap();
        pool["status"] = seen.body["status"].clone();
        Reply::json(200, pool)
    })
}

/// Node creates (POST), `times` times, echoed.
fn node_creates(times: usize) -> Call {
    Call::new("POST", NODES, times, echo)
}

fn context(client: kube::Client, children: Vec<Node>, pools: Vec<NodePool>) -> Arc<PoolContext<NodePool>> {
    let flags = crate::kubelet::KubeletFlags { node_ip_range: "100.64.0.0/16".parse().unwrap(), ..Default::default() };
    let shared = Shared {
        client: client.clone(),
        informers: Informers::new(client.clone()),
        simulate: false,
        instance: "kwok-pools".into(),
        kubelet: crate::kubelet::Kubelet::new(&flags, "kwok-pools", false).unwrap(),
    };
    let env = NodePool::env(&crate::pool::NoFlags::default(), &shared).unwrap();
    Arc::new(PoolContext::new(client, store(children), store(pools), env, Arc::new(Metrics::default())))
}

fn node_writes(log: &[Seen]) -> Vec<&Seen> {
    log.iter().filter(|s| s.path == "/api/v1/nodes" || s.path.starts_with("/api/v1/nodes/")).collect()
}

fn status_writes(log: &[Seen]) -> Vec<&Seen> {
    log.iter().filter(|s| s.path.ends_with("/nodepools/np/status")).collect()
}

#[tokio::test]
async fn missing_children_are_applied_with_the_conventions_and_the_status_is_written_once() {
    let (client, verifier) = strict_api(vec![pool_read(1), node_creates(2), status_write(1)]);
    let ctx = context(client, vec![], vec![]);
    reconcile(Arc::new(plain_pool()), ctx).await.unwrap();
    verifier.assert_done();
    let log = verifier.seen();
    let nodes = node_writes(&log);
    assert_eq!(nodes.len(), 2, "{log:?}");
    let np1 = nodes.iter().find(|s| s.body["metadata"]["name"] == "np-1").expect("np-1 created");
    // A POST: never takes over a Node that appeared under this name meanwhile (a forced apply would).
    assert_eq!((np1.method.as_str(), np1.path.as_str()), ("POST", "/api/v1/nodes"));
    assert!(np1.query.contains("fieldManager=kwok-pools") && !np1.query.contains("force"), "{}", np1.query);
    let body = &np1.body;
    let fake_taint = json!({"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"});
    assert!(body["spec"]["taints"].as_array().unwrap().contains(&fake_taint), "{body}");
    assert_eq!(body["metadata"]["labels"]["type"], "kwok");
    assert_eq!(body["metadata"]["labels"]["kubernetes.io/hostname"], "np-1");
    assert_eq!(body["metadata"]["labels"]["pools.kwok.x-k8s.io/index"], "1");
    assert_eq!(body["metadata"]["annotations"]["kwok.x-k8s.io/node"], "fake");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-np");
    assert_eq!(body["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(body["spec"]["podCIDR"], "10.0.1.0/24");
    let status = status_writes(&log);
    assert_eq!(status.len(), 1, "one status write per reconcile");
    assert_eq!(status[0].body["status"]["replicas"], 0, "the store showed none");
    assert_eq!(status[0].body["status"]["selector"], "pools.kwok.x-k8s.io/pool=np");
}

#[tokio::test]
async fn children_created_but_not_yet_seen_are_not_created_again() {
    // Two rounds, one create of each child and no read before the second (nothing to create).
    let (client, verifier) = strict_api(vec![pool_read(1), node_creates(2), status_write(2)]);
    let ctx = context(client, vec![], vec![]);
    reconcile(Arc::new(plain_pool()), ctx.clone()).await.unwrap();
    // The store still shows nothing (the watch has not caught up).
    reconcile(Arc::new(plain_pool()), ctx).await.unwrap();
    verifier.assert_done();
    let log = verifier.seen();
    let status = status_writes(&log);
    assert_eq!(status.last().unwrap().body["status"]["replicas"], 2, "created children count as present");
    assert_eq!(status.last().unwrap().body["status"]["readyReplicas"], 0);
}

#[tokio::test]
async fn a_round_out_of_time_leaves_its_writes_for_the_next_one_at_once() {
    let (client, verifier) = strict_api(vec![pool_read(2), node_creates(2), status_write(2)]);
    // No time at all: the round starts no write and asks to come back at once.
    let mut hurried = Arc::into_inner(context(client.clone(), vec![], vec![])).unwrap();
    hurried.round_time = Duration::ZERO;
    let action = reconcile(Arc::new(plain_pool()), Arc::new(hurried)).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_millis(50)));
    assert!(node_writes(&verifier.seen()).is_empty(), "{:?}", verifier.seen());
    // The next round (time enough) makes both.
    reconcile(Arc::new(plain_pool()), context(client, vec![], vec![])).await.unwrap();
    verifier.assert_done();
    assert_eq!(node_writes(&verifier.seen()).len(), 2);
}

#[tokio::test]
async fn an_invalid_pool_is_reported_and_waits_for_a_change_without_touching_children() {
    // Only the status is written: no read, no child.
    let (client, verifier) = strict_api(vec![status_write(1)]);
    let ctx = context(client, vec![], vec![]);
    let bad = nodepool(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  nodeCount: 2\n  nodeTemplate: {metadata: {labels: {pools.kwok.x-k8s.io/pool: x}}}\n",
    );
    let action = reconcile(Arc::new(bad), ctx).await.unwrap();
    assert_eq!(action, Action::await_change());
    verifier.assert_done();
    let log = verifier.seen();
    let status = status_writes(&log);
    let degraded =
        status[0].body["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Degraded").cloned();
    let degraded = degraded.expect("a Degraded condition");
    assert_eq!((degraded["status"].clone(), degraded["reason"].clone()), (json!("True"), json!("InvalidSpec")));
    assert!(degraded["message"].as_str().unwrap().contains("spec.nodeTemplate.metadata.labels"), "{degraded}");
}

#[tokio::test]
async fn failed_child_writes_are_counted_reported_and_retried_with_backoff() {
    // Six rounds: each reads the pool, tries both creates again and writes the status once.
    let sad = |_: &Seen| {
        Reply::json(500, json!({"kind": "Status", "apiVersion": "v1", "code": 500, "message": "etcd is sad"}))
    };
    let (client, verifier) = strict_api(vec![pool_read(6), Call::new("POST", NODES, 12, sad), status_write(6)]);
    let ctx = context(client, vec![], vec![]);
    let first = reconcile(Arc::new(plain_pool()), ctx.clone()).await.unwrap();
    let metrics = ctx.metrics.encode();
    assert!(metrics.contains(r#"error="child_write""#), "{metrics}");
    for _ in 0..4 {
        reconcile(Arc::new(plain_pool()), ctx.clone()).await.unwrap();
    }
    let later = reconcile(Arc::new(plain_pool()), ctx.clone()).await.unwrap();
    verifier.assert_done();
    // Retried on the pool's back-off: neither parked until a change nor left to the resync.
    for action in [&first, &later] {
        assert_ne!(*action, Action::await_change());
        assert_ne!(*action, Action::requeue(Duration::from_secs(300)));
    }
    assert_eq!(ctx.backoff.failures(&"uid-np".to_string()), 6, "each failed round counts");
    assert_ne!(later, first, "the retry delay grows");
    let degraded = verifier.seen().iter().rev().find(|s| s.path == POOL_STATUS).unwrap().body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(degraded["reason"], "WriteFailed");
    assert!(degraded["message"].as_str().unwrap().contains("etcd is sad"), "{degraded}");
}

#[test]
fn an_in_place_update_keeps_the_podcidr_the_node_has() {
    let pool = plain_pool();
    let env = NodePool::validation_env();
    let mut current = child(&pool, 1, "old", &env).unwrap();
    current.spec.as_mut().unwrap().pod_cidr = Some("10.9.0.0/24".into());
    current.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.9.0.0/24".into()]);
    let desired = child(&pool, 1, "new", &env).unwrap();
    let writes = NodePool::in_place(&current, desired);
    let applied =
        writes.iter().find_map(|w| if let crate::pool::Write::Apply(n) = w { Some(n) } else { None }).unwrap();
    let spec = applied.spec.as_ref().unwrap();
    assert_eq!(spec.pod_cidr.as_deref(), Some("10.9.0.0/24"));
    assert_eq!(spec.pod_cidrs.as_deref(), Some(&["10.9.0.0/24".to_string()][..]));
    assert!(matches!(writes.last(), Some(crate::pool::Write::Apply(_))), "the apply (new hash) goes last");
}

#[test]
fn a_child_event_wakes_its_owner_and_the_pool_its_name_belongs_to() {
    let mut node = Node::default();
    node.metadata.name = Some("other-3".into());
    node.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "pools.kwok.x-k8s.io/v1alpha1".into(),
        kind: "NodePool".into(),
        name: "owner".into(),
        uid: "u".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    let woken = pools_to_wake::<NodePool>(&node);
    assert_eq!(woken, vec![ObjectRef::new("owner"), ObjectRef::new("other")]);
    node.metadata.owner_references = None;
    node.metadata.name = Some("other-03".into());
    assert!(pools_to_wake::<NodePool>(&node).is_empty(), "not a name a pool makes");
}

#[test]
fn only_the_newer_of_two_overlapping_pools_is_blamed() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |yaml: &str, name: &str, s: i64| {
        let mut p = nodepool(yaml);
        p.metadata.name = Some(name.into());
        p.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()));
        Arc::new(p)
    };
    let spec = |cidr: &str| {
        format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: x}}\nspec:\n  nodeCount: 1\n  podCIDR: {{cidr: {cidr}, maskSize: 24}}\n"
        )
    };
    let old = at(&spec("10.0.0.0/16"), "old", 100);
    let new = at(&spec("10.0.0.0/17"), "new", 200);
    let all = vec![old.clone(), new.clone()];
    assert!(validate(old.as_ref(), &all).is_none(), "the older pool keeps working");
    let (problem, then) = validate(new.as_ref(), &all).expect("the newer one is blamed");
    assert!(problem.message.contains("NodePool old"), "{}", problem.message);
    // Only the comparison fails: it can change without this pool changing.
    assert_eq!(then, Action::requeue(Duration::from_secs(30)));
}

/// A list, then a watch that expires at once, so the watcher lists again.
fn relisting_scenario(lists: Arc<Mutex<Vec<Value>>>) -> impl Fn(&Seen) -> Reply + Send + Sync + 'static {
    move |seen: &Seen| {
        if seen.query.contains("watch=true") {
            let expired = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410, "reason": "Expired", "message": "too old"}});
            return Reply(200, format!("{expired}\n"));
        }
        let mut lists = lists.lock().unwrap();
        let items = if lists.len() > 1 { lists.remove(0) } else { lists[0].clone() };
        Reply::json(
            200,
            json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}),
        )
    }
}

#[tokio::test]
async fn a_relist_reports_what_disappeared_as_deleted() {
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d", "uid": format!("u-{name}")}});
    let lists = Arc::new(Mutex::new(vec![json!([cm("a"), cm("b")]), json!([cm("a")])]));
    let (client, _) = mock_api(relisting_scenario(lists));
    let informer = Informer::<ConfigMap>::new();
    let mut changes = informer.subscribe();
    informer.start(kube::Api::<ConfigMap>::all(client), Default::default(), crate::informer::trimmed);
    let deleted = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(change) = changes.recv().await {
            if let Change::Deleted(c) = change {
                return c.metadata.name.clone();
            }
        }
        None
    })
    .await
    .expect("a deletion within 20 s");
    assert_eq!(deleted.as_deref(), Some("b"));
    assert!(informer.store().get(&ObjectRef::new("b").within("d")).is_none());
    assert!(informer.store().get(&ObjectRef::new("a").within("d")).is_some());
}

#[tokio::test]
async fn a_missing_child_crd_marks_the_pools_degraded_until_it_is_established() {
    use crate::pool::ChildCrd;
    use crate::pool::controller::await_child_crd;
    let established = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = established.clone();
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/things.example.com";
    let (client, verifier) = strict_api(vec![
        Call::polled("GET", crd_path, move |_| {
            if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                return Reply::json(
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "message": "not found"}),
                );
            }
            Reply::json(
                200,
                json!({
                    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "things.example.com"},
                    "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "things", "kind": "Thing"}, "versions": []},
                    "status": {"conditions": [{"type": "Established", "status": "True"}]}
                }),
            )
        }),
        // Told once per generation, not on every check.
        status_write(1),
    ]);
    let crd = ChildCrd {
        name: "things.example.com",
        install: "kubectl apply -f things.yaml",
        stand_in: crate::kinds::vmipool::kubevirt_crd::crd,
        companions: Vec::new,
    };
    let pools = store(vec![plain_pool()]);
    let wait =
        tokio::spawn(async move { await_child_crd::<NodePool>(&client, crd, &pools, Duration::from_millis(50)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!wait.is_finished(), "waits while the CRD is missing");
    let patches: Vec<Seen> = verifier.seen().into_iter().filter(|s| s.path == POOL_STATUS).collect();
    assert_eq!(patches.len(), 1, "told once per generation, not on every check");
    let condition = &patches[0].body["status"]["conditions"][0];
    assert_eq!((condition["type"].as_str(), condition["reason"].as_str()), (Some("Degraded"), Some("ChildCRDMissing")));
    let message = condition["message"].as_str().unwrap();
    assert!(message.contains("things.example.com") && message.contains("kubectl apply -f things.yaml"), "{message}");
    established.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(5), wait).await.expect("returns once established").unwrap();
    verifier.assert_done();
}

#[test]
fn what_a_round_reports_and_when_it_looks_again() {
    use crate::pool::apply::Outcome;
    use crate::pool::plan::Plan;
    use crate::pool::reconcile::{next_action, problem_of};
    let plan = Plan::default();
    let quiet = Outcome::default();
    assert_eq!(problem_of("node", "np", &plan, &quiet), None);
    assert_eq!(next_action(&plan, &quiet, || Duration::from_secs(7)), Action::requeue(Duration::from_secs(300)));
    let failed = Outcome { failures: vec!["create nodes/np-0: boom (500)".into()], writes: 2, ..Default::default() };
    let p = problem_of("node", "np", &plan, &failed).unwrap();
    assert_eq!(p.reason, "WriteFailed");
    assert!(p.message.starts_with("1 of 2 writes failed"), "{}", p.message);
    assert_eq!(
        next_action(&plan, &failed, || Duration::from_secs(7)),
        Action::requeue(Duration::from_secs(7)),
        "the pool's back-off"
    );
    let refused = Outcome {
        refused: vec!["spec.nodeTemplate.spec.taints[0].effect: Unsupported value".into()],
        ..Default::default()
    };
    assert_eq!(problem_of("node", "np", &plan, &refused).unwrap().reason, "InvalidTemplate");
    assert_eq!(next_action(&plan, &refused, || Duration::from_secs(7)), Action::requeue(Duration::from_secs(30)));
    let cut_short = Outcome { left: 40, writes: 60, ..Default::default() };
    assert_eq!(next_action(&plan, &cut_short, || Duration::from_secs(7)), Action::requeue(Duration::from_millis(50)));
    let busy = Plan { pending: true, create: vec![3], ..Default::default() };
    assert_eq!(next_action(&busy, &quiet, || Duration::from_secs(7)), Action::requeue(Duration::from_millis(50)));
    let conflict = Plan { conflicts: vec![1], ..Default::default() };
    assert_eq!(problem_of("node", "np", &conflict, &quiet).unwrap().reason, "NameConflict");
}

#[test]
fn only_changes_a_pool_reads_wake_it_not_a_nodes_heartbeat() {
    use crate::pool::wake::Views;
    let node = |hash: &str, ready: &str, heartbeat: &str| -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "np-0", "uid": "u-0",
                         "labels": {crate::api::conventions::HASH_LABEL: hash},
                         "ownerReferences": [{"apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool",
                                              "name": "np", "uid": "uid-np", "controller": true}]},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    };
    let mut views = Views::default();
    assert!(views.changed::<NodePool>(&node("h1", "True", "2026-01-01T00:00:00Z")), "a new child is news");
    assert!(!views.changed::<NodePool>(&node("h1", "True", "2026-01-01T00:05:00Z")), "a heartbeat is not");
    assert!(views.changed::<NodePool>(&node("h1", "Unknown", "2026-01-01T00:05:00Z")), "readiness is");
    assert!(views.changed::<NodePool>(&node("h2", "Unknown", "2026-01-01T00:05:00Z")), "the template hash is");
    let mut going = node("h2", "Unknown", "2026-01-01T00:06:00Z");
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
    ));
    assert!(views.changed::<NodePool>(&going), "a deletion is");
    let mut foreign = node("h2", "Unknown", "2026-01-01T00:06:00Z");
    foreign.metadata.owner_references = None;
    assert!(views.changed::<NodePool>(&foreign), "whose it is, is");
    views.forget(&foreign);
    assert!(views.changed::<NodePool>(&foreign), "a child forgotten (deleted) is new again");
}
