//! The pod worker end to end under tokio's paused clock, against the fixtures' world (a fake
//! API server and its watch): each test drives one behaviour a user sees — when a status is
//! written and what it says — and fails when that behaviour breaks.

use super::{PodSimConfig, PodSimulator};
use crate::api::lifecycle::{NodeLifecycle, PodLifecycle};
use crate::kubelet::AllDevices;
use crate::kubelet::fixtures::{World, Write, node, pass, pod, settle, world};
use crate::kubelet::status::fate::Defaults;
use crate::shard::Shard;
use crate::shard::view::Ownership;
use crate::simulator::lifecycle::{Knobs, Lifecycles, PoolLifecycles};
use crate::simulator::machinery::WriteBudget;
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// A pool with pod knobs, for the pods it owns (owner `TestPool/pool`).
struct TestPool(PodLifecycle);

impl Knobs for TestPool {
    fn seed(&self) -> Option<i64> {
        Some(1)
    }
    fn pods(&self) -> Option<&PodLifecycle> {
        Some(&self.0)
    }
    fn nodes(&self) -> Option<&NodeLifecycle> {
        None
    }
    fn created(&self) -> f64 {
        0.0
    }
    fn pool(&self) -> &dyn Any {
        self
    }
}

struct Pools(Arc<TestPool>);

impl PoolLifecycles for Pools {
    fn owner(&self, owner: &OwnerReference, _namespace: Option<&str>) -> Option<Arc<dyn Knobs>> {
        (owner.kind == "TestPool" && owner.name == "pool").then(|| self.0.clone() as Arc<dyn Knobs>)
    }
}

fn knobs(yaml: &str) -> Lifecycles {
    let pool = TestPool(serde_yaml::from_str(yaml).unwrap());
    Lifecycles::new(vec![Arc::new(Pools(Arc::new(pool)))], None)
}

/// A pod of the test pool.
fn pooled(name: &str) -> serde_json::Value {
    let mut p = pod(name, "n1");
    p["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "x/v1", "kind": "TestPool", "name": "pool", "uid": "p", "controller": true}]);
    p
}

fn simulator(world: &World, client: kube::Client, lifecycles: Lifecycles, shard: Shard) -> PodSimulator {
    PodSimulator {
        client,
        config: PodSimConfig {
            manage: Manage::from_flags(false, None, None, None).unwrap(),
            lifecycles,
            defaults: Defaults::default(),
            fallback: None,
            clock: world.clock,
        },
        nodes: world.nodes.clone(),
        pods: world.pods.clone(),
        metrics: Arc::new(Metrics::default()),
        writes: WriteBudget::new(8),
        shard,
        devices: AllDevices::default(),
        images: None,
        volumes: Arc::new(crate::kubelet::NoVolumes),
    }
}

/// A world with node `n1`, the pods given, and the worker running on it.
async fn running(pods: Vec<serde_json::Value>, lifecycles: Lifecycles, shard: Shard) -> World {
    let (world, client, pod_rx, node_rx) = world();
    world.put_node(node("n1"));
    for p in pods {
        world.put_pod(p);
    }
    tokio::spawn(simulator(&world, client, lifecycles, shard).run(pod_rx, node_rx));
    settle().await;
    world
}

/// (seconds since the start, what it shows) of each status write: its first container's
/// waiting or terminated reason, `Running` for a running one, else its phase.
fn shown(writes: &[Write]) -> Vec<(u64, String)> {
    writes
        .iter()
        .map(|w| {
            let running = w.body["status"]["containerStatuses"][0]["state"].get("running").map(|_| "Running");
            let what = w.container_reason().or(running).or(w.phase()).unwrap_or("-").to_string();
            (w.at.as_secs(), what)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_start_delay_acknowledges_the_pod_at_once_and_runs_it_when_over() {
    let mut p = pod("p", "n1");
    p["metadata"]["annotations"] = json!({"pod-ready.stage.kwok.x-k8s.io/delay": "5s"});
    let world = running(vec![p], Lifecycles::default(), Shard::whole()).await;
    let first = world.pod_status_writes("p");
    assert_eq!(shown(&first), [(0, "ContainerCreating".to_string())], "acknowledged, not running");
    assert!(first[0].body["status"]["startTime"].is_string());
    pass(Duration::from_millis(4500)).await;
    assert_eq!(world.pod_status_writes("p").len(), 1, "not before the delay");
    pass(Duration::from_secs(1)).await;
    let writes = world.pod_status_writes("p");
    assert_eq!(writes.len(), 2, "{:?}", shown(&writes));
    assert_eq!((writes[1].at.as_secs(), writes[1].phase()), (5, Some("Running")));
    let ip = writes[1].body["status"]["podIP"].as_str().unwrap();
    assert!(ip.starts_with("10.244.1."), "an address of the node's podCIDR: {ip}");
}

#[tokio::test(start_paused = true)]
async fn a_run_time_counts_from_when_the_containers_start_not_from_the_acknowledgement() {
    let lifecycles = knobs("{startDelay: {fixed: 8s}, runTime: {fixed: 5s}}");
    let mut p = pooled("r");
    p["spec"]["restartPolicy"] = json!("Never");
    let world = running(vec![p], lifecycles, Shard::whole()).await;
    pass(Duration::from_secs(20)).await;
    let writes = world.pod_status_writes("r");
    let phases: Vec<(u64, Option<&str>)> = writes.iter().map(|w| (w.at.as_secs(), w.phase())).collect();
    let ran = phases.iter().find(|(_, p)| *p == Some("Running")).map(|(t, _)| *t);
    let done = phases.iter().find(|(_, p)| *p == Some("Succeeded")).map(|(t, _)| *t);
    assert_eq!(ran, Some(8), "{phases:?}");
    assert!(done.is_some_and(|t| (12..=14).contains(&t)), "five seconds after it started: {phases:?}");
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_one_by_one_for_their_run_time_then_the_pod_runs() {
    let mut p = pooled("i");
    p["spec"]["initContainers"] = json!([
        {"name": "migrate", "image": "db:1"},
        {"name": "proxy", "image": "envoy:1", "restartPolicy": "Always"},
        {"name": "warm", "image": "cache:1"},
    ]);
    let world = running(vec![p], knobs("{initRunTime: {fixed: 4s}}"), Shard::whole()).await;
    pass(Duration::from_secs(10)).await;
    let writes = world.pod_status_writes("i");
    let states = |w: &Write| -> Vec<String> {
        let list = w.body["status"]["initContainerStatuses"].as_array().cloned().unwrap_or_default();
        list.iter()
            .map(|c| {
                let state = c["state"].as_object().and_then(|s| s.keys().next().cloned()).unwrap_or_default();
                format!("{}:{state}", c["name"].as_str().unwrap_or_default())
            })
            .collect()
    };
    let at: Vec<(u64, Option<&str>)> = writes.iter().map(|w| (w.at.as_secs(), w.phase())).collect();
    assert_eq!(at, [(0, Some("Pending")), (4, Some("Pending")), (8, Some("Running"))], "one write per init container");
    // The first runs; the sidecar after it and the second wait.
    assert_eq!(states(&writes[0]), ["migrate:running", "proxy:waiting", "warm:waiting"]);
    assert_eq!(writes[0].body["status"]["conditions"][1]["reason"], "ContainersNotInitialized");
    // The first completed; the sidecar before the second runs beside it.
    assert_eq!(states(&writes[1]), ["migrate:terminated", "proxy:running", "warm:running"]);
    let done = &writes[2].body["status"]["initContainerStatuses"];
    assert_eq!(states(&writes[2]), ["migrate:terminated", "proxy:running", "warm:terminated"]);
    // Each says when it ran: four seconds apart.
    let secs = |v: &serde_json::Value| v.as_str().unwrap().parse::<k8s_openapi::jiff::Timestamp>().unwrap().as_second();
    let (m, w) = (&done[0]["state"]["terminated"], &done[2]["state"]["terminated"]);
    assert_eq!(
        (secs(&m["finishedAt"]) - secs(&m["startedAt"]), secs(&w["finishedAt"]) - secs(&w["startedAt"])),
        (4, 4)
    );
    assert_eq!(secs(&w["startedAt"]), secs(&m["finishedAt"]));
}

#[tokio::test(start_paused = true)]
async fn a_crash_loop_backs_off_ten_then_twenty_seconds_between_restarts() {
    let lifecycles = knobs("{crashLoopPercent: 100, crashAfter: {fixed: 3s}}");
    let world = running(vec![pooled("c")], lifecycles, Shard::whole()).await;
    pass(Duration::from_secs(38)).await;
    let writes = world.pod_status_writes("c");
    let crashes: Vec<(u64, i64)> = writes
        .iter()
        .map(|w| (w.at.as_secs(), w.body["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(-1)))
        .collect();
    // Runs at 0, crashes at 3 (CrashLoopBackOff, restart 1), runs again after 10s, crashes
    // 3s later (restart 2), runs again after 20s.
    assert_eq!(
        shown(&writes),
        [
            (0, "Running".to_string()),
            (3, "CrashLoopBackOff".to_string()),
            (13, "Running".to_string()),
            (16, "CrashLoopBackOff".to_string()),
            (36, "Running".to_string()),
        ]
        .map(|(t, s)| (t, s.to_string())),
        "{crashes:?} {:#}",
        writes[3].body
    );
    assert_eq!(crashes.iter().map(|c| c.1).collect::<Vec<_>>(), [0, 1, 1, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_pod_past_its_active_deadline_fails_with_deadline_exceeded() {
    let mut p = pod("d", "n1");
    p["spec"]["activeDeadlineSeconds"] = json!(30);
    let world = running(vec![p], Lifecycles::default(), Shard::whole()).await;
    pass(Duration::from_secs(29)).await;
    assert_eq!(shown(&world.pod_status_writes("d")), [(0, "Running".to_string())]);
    pass(Duration::from_secs(2)).await;
    let writes = world.pod_status_writes("d");
    assert_eq!(writes.len(), 2, "{:?}", shown(&writes));
    // Counted from its startTime, which has whole seconds.
    assert!((29..=30).contains(&writes[1].at.as_secs()) && writes[1].phase() == Some("Failed"), "{:?}", shown(&writes));
    assert_eq!(writes[1].body["status"]["reason"], "DeadlineExceeded");
}

/// Deletes pod `name` gracefully (`grace` seconds), as the API server marks it.
fn delete(world: &World, name: &str, grace: i64) {
    let at = world.clock.now().wall + k8s_openapi::jiff::SignedDuration::from_secs(grace);
    world.edit_pod(name, |p| {
        p["metadata"]["deletionTimestamp"] =
            serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)).unwrap();
        p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    });
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_ends_with_a_terminal_status_then_goes_after_its_exit_delay() {
    let world = running(vec![pod("g", "n1")], Lifecycles::default(), Shard::whole()).await;
    pass(Duration::from_secs(2)).await;
    delete(&world, "g", 30);
    settle().await;
    pass(Duration::from_millis(500)).await;
    let w = world.pod_status_writes("g");
    assert_eq!(w.len(), 1, "the process takes about a second to exit: {:?} {:#}", shown(&w), w.last().unwrap().body);
    pass(Duration::from_secs(1)).await;
    let writes = world.pod_status_writes("g");
    assert_eq!(writes.len(), 2);
    // It honoured SIGTERM: exit 143, as the kubelet reports a process a signal ended.
    let terminated = &writes[1].body["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!((terminated["exitCode"].as_i64(), writes[1].at.as_secs()), (Some(143), 3));
    let deletes: Vec<Write> = world.writes().into_iter().filter(|w| w.method == "DELETE").collect();
    assert_eq!(deletes.len(), 1, "the final delete follows the terminal status");
    assert_eq!(deletes[0].body["gracePeriodSeconds"], 0);
    assert_eq!(deletes[0].body["preconditions"]["uid"], "uid-g");
    assert!(world.pod("g").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_ignores_sigterm_is_killed_when_its_grace_period_is_over() {
    let world = running(vec![pooled("k")], knobs("{ignoreSIGTERM: true}"), Shard::whole()).await;
    pass(Duration::from_secs(1)).await;
    delete(&world, "k", 20);
    settle().await;
    pass(Duration::from_secs(19)).await;
    assert_eq!(world.pod_status_writes("k").len(), 1, "still running inside its grace period");
    pass(Duration::from_secs(2)).await;
    let writes = world.pod_status_writes("k");
    let terminated = &writes[1].body["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!((terminated["exitCode"].as_i64(), writes[1].at.as_secs()), (Some(137), 21));
}

/// A running pod resized to `cpu` (its spec's generation moves on, as the API server does).
fn resize(world: &World, name: &str, cpu: &str) {
    world.edit_pod(name, |p| {
        p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}});
        p["metadata"]["generation"] = json!(p["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
    });
}

#[tokio::test(start_paused = true)]
async fn a_resize_that_fits_is_done_and_one_that_does_not_is_deferred_and_tried_again() {
    let mut n = node("n1");
    n.status.get_or_insert_default().allocatable =
        Some([("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()))].into());
    let (world, client, pod_rx, node_rx) = world();
    world.put_node(n);
    let mut p = pod("r", "n1");
    p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}});
    world.put_pod(p);
    tokio::spawn(simulator(&world, client, Lifecycles::default(), Shard::whole()).run(pod_rx, node_rx));
    pass(Duration::from_secs(1)).await;
    resize(&world, "r", "1");
    pass(Duration::from_secs(1)).await;
    let done = world.pod_status_writes("r").pop().unwrap();
    assert_eq!(done.body["status"]["containerStatuses"][0]["allocatedResources"]["cpu"], "1", "{:#}", done.body);
    resize(&world, "r", "4");
    pass(Duration::from_secs(1)).await;
    let deferred = world.pod_status_writes("r").pop().unwrap();
    let pending = deferred.body["status"]["conditions"].as_array().unwrap();
    assert!(
        pending.iter().any(|c| c["type"] == "PodResizePending" && c["reason"] == "Deferred"),
        "{:#}",
        deferred.body
    );
    // Looked at again every 5 s: while nothing changed, nothing is written again.
    let before = world.pod_status_writes("r").len();
    pass(Duration::from_secs(11)).await;
    assert_eq!(world.pod_status_writes("r").len(), before, "the same answer is not written twice");
    // Room comes (the node grows): the next try does it.
    let mut bigger = node("n1");
    bigger.status.get_or_insert_default().allocatable =
        Some([("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".into()))].into());
    world.put_node(bigger);
    pass(Duration::from_secs(6)).await;
    let done = world.pod_status_writes("r").pop().unwrap();
    assert_eq!(done.body["status"]["containerStatuses"][0]["allocatedResources"]["cpu"], "4", "{:#}", done.body);
}

#[tokio::test(start_paused = true)]
async fn a_node_handed_to_another_replica_takes_its_pods_along_and_back() {
    let (view, rx) = tokio::sync::watch::channel(Arc::new(Ownership::settled("a", vec!["a".into()])));
    let mut p = pod("s", "n1");
    p["metadata"]["annotations"] = json!({"pod-ready.stage.kwok.x-k8s.io/delay": "5s"});
    let world = running(vec![p], Lifecycles::default(), Shard::new(rx)).await;
    assert_eq!(world.pod_status_writes("s").len(), 1, "acknowledged by replica a");
    pass(Duration::from_secs(2)).await;
    // Node n1 goes to replica b: its pods are b's to start.
    view.send_replace(Arc::new(Ownership::settled("a", vec!["b".into()])));
    pass(Duration::from_secs(10)).await;
    assert_eq!(world.pod_status_writes("s").len(), 1, "never started by a replica that no longer owns its node");
    view.send_replace(Arc::new(Ownership::settled("a", vec!["a".into()])));
    // Back at 12s: first seen again now, its start delay counts from here (as on any replica
    // taking a node over).
    pass(Duration::from_secs(4)).await;
    assert_eq!(world.pod_status_writes("s").len(), 1);
    pass(Duration::from_secs(2)).await;
    let writes = world.pod_status_writes("s");
    assert_eq!(shown(&writes), [(0, "ContainerCreating".to_string()), (17, "Running".to_string())]);
}
