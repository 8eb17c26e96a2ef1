//! Lifecycle knobs end to end: how fast and how badly children behave, declared on the pool.
//! Rolls with prompt and with SIGTERM-ignoring pods, crash loops and failures as kubectl shows
//! them (also for a Deployment's pods on a pool's nodes), and nodes that flap so the node
//! lifecycle controller marks them NotReady, taints them and evicts their pods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kwok_pools::api::lifecycle::{NodeLifecycle, PodLifecycle};
use kwok_pools::informer::pod::SlimPod;
use kwok_pools::kubelet::status::fate::{Defaults, Fate, plan_node, plan_pod};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);

fn nodepool(name: &str, scope: &str, count: u32, cidr: &str, extra_spec: &str) -> String {
    scoped_nodepool(name, scope, count, cidr, 24, 110, extra_spec)
}

fn podpool(name: &str, ns: &str, scope: &str, count: u32, extra_spec: &str, pod_spec: &str) -> String {
    scoped_podpool(name, ns, scope, count, extra_spec, pod_spec)
}

fn ready(p: &Pod) -> bool {
    pod_ready(p) && p.metadata.deletion_timestamp.is_none()
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
}

/// Rolls the PodPool to `image` and returns (seconds taken, fewest Ready pods seen), sampling
/// every 100 ms.
async fn roll(client: &kube::Client, ns: &str, pool: &str, count: usize, yaml: String) -> (f64, usize) {
    apply(&yaml);
    let start = Instant::now();
    let mut fewest = usize::MAX;
    let api: Api<kwok_pools::kinds::podpool::PodPool> = Api::namespaced(client.clone(), ns);
    loop {
        let pods = list_pods(client, ns, &format!("app={pool}")).await;
        fewest = fewest.min(pods.iter().filter(|p| ready(p)).count());
        let p = api.get(pool).await.unwrap();
        let s = p.status.clone().unwrap_or_default();
        let done = s.observed_generation == p.metadata.generation
            && s.updated_replicas == count as i32
            && s.ready_replicas == count as i32
            && s.replicas == count as i32;
        if done && pods.len() == count {
            return (start.elapsed().as_secs_f64(), fewest);
        }
        assert!(start.elapsed() < Duration::from_secs(300), "the roll did not finish in 300s: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn rolls_are_quick_when_pods_honour_sigterm_and_wait_when_they_ignore_it() {
    let client = client().await;
    let scope = unique("roll");
    let ns = TestNamespace::new(&client, "roll").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool(&scope, &scope, 3, "10.220.0.0/16", ""));
    wait_ready_nodes(&client, &scope, 3, T).await;
    let pool = "web";
    let spec = |image: &str, grace: &str| format!("      {grace}containers: [{{name: app, image: {image}}}]\n");
    apply(&podpool(pool, &ns.name, &scope, 20, "  maxUnavailable: 3\n", &spec("nginx:1.26", "")));
    roll(
        &client,
        &ns.name,
        pool,
        20,
        podpool(pool, &ns.name, &scope, 20, "  maxUnavailable: 3\n", &spec("nginx:1.26", "")),
    )
    .await;

    // Defaults: a deleted pod exits in about a second, so 7 batches of 3 take seconds, not
    // 7 × the 30 s grace period.
    let (took, fewest) = roll(
        &client,
        &ns.name,
        pool,
        20,
        podpool(pool, &ns.name, &scope, 20, "  maxUnavailable: 3\n", &spec("nginx:1.27", "")),
    )
    .await;
    eprintln!("  roll of 20 with maxUnavailable 3, pods honouring SIGTERM: {took:.1}s, fewest Ready {fewest}");
    // (Measured at about 10 s here; waiting the 30 s grace period would take 7 × 30 s.)
    assert!(took < 70.0, "the roll took {took:.1}s: deleted pods waited for their grace period");
    assert!(fewest >= 17, "maxUnavailable 3 was not respected: {fewest} Ready");

    // Pods that ignore SIGTERM hold on for their whole grace period (5 s here, so the test is
    // short; E2E_ROLL_GRACE_SECONDS=30 shows the default): each of the 7 batches waits for it.
    let seconds: u64 = std::env::var("E2E_ROLL_GRACE_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let grace = format!("terminationGracePeriodSeconds: {seconds}\n      ");
    let grace = grace.as_str();
    roll(
        &client,
        &ns.name,
        pool,
        20,
        podpool(pool, &ns.name, &scope, 20, "  maxUnavailable: 3\n", &spec("nginx:1.27", grace)),
    )
    .await;
    let stubborn = "  maxUnavailable: 3\n  lifecycle: {pods: {ignoreSIGTERM: true}}\n";
    let (took, fewest) =
        roll(&client, &ns.name, pool, 20, podpool(pool, &ns.name, &scope, 20, stubborn, &spec("nginx:1.28", grace)))
            .await;
    eprintln!(
        "  roll of 20 with maxUnavailable 3, pods ignoring SIGTERM (grace {seconds}s): {took:.1}s, fewest Ready {fewest}"
    );
    let least = 7.0 * seconds as f64 - 1.0;
    assert!(took >= least, "pods ignoring SIGTERM must wait their grace period: {took:.1}s");
    assert!(fewest >= 17, "maxUnavailable 3 was not respected: {fewest} Ready");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

fn slim(ns: &str, name: &str) -> SlimPod {
    let mut p = SlimPod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(name.into());
    p
}

#[tokio::test]
async fn crash_loops_and_failures_show_as_a_kubelet_shows_them() {
    let client = client().await;
    let scope = unique("crash");
    let ns = TestNamespace::new(&client, "crash").await;
    let op = Operator::start(&scope, &[]);
    // The NodePool's knobs govern every pod on its nodes that no PodPool governs.
    let node_knobs = "  lifecycle: {pods: {crashLoopPercent: 100, crashAfter: {fixed: 2s}}}\n";
    apply(&nodepool(&scope, &scope, 2, "10.221.0.0/16", node_knobs));
    wait_ready_nodes(&client, &scope, 2, T).await;

    // With a seed the crash-looping pods are a pure function of the seed and their names
    // (namespace included). The namespace is random, so pick the first seed that makes about a
    // fifth of these 30 crash-loop: every later check is then exact.
    let pool = "svc";
    let settings: PodLifecycle = serde_yaml::from_str("{crashLoopPercent: 20, crashAfter: {fixed: 2s}}").unwrap();
    let defaults = Defaults { exit_delay: None, job_run_time: Duration::from_secs(5), normal_events: false };
    let crash_looping = |seed: i64| -> BTreeSet<String> {
        (0..30)
            .map(|i| format!("{pool}-{i}"))
            .filter(|n| {
                matches!(
                    plan_pod(Some(&settings), Some(seed), &slim(&ns.name, n), &defaults).fate,
                    Fate::CrashLoops { .. }
                )
            })
            .collect()
    };
    let seed = (1..1000).find(|s| (4..=8).contains(&crash_looping(*s).len())).unwrap();
    let predicted = crash_looping(seed);
    let knobs = format!(
        "  lifecycle:\n    seed: {seed}\n    pods: {{crashLoopPercent: 20, crashAfter: {{fixed: 2s}}, startDelay: {{fixed: 2s}}}}\n"
    );
    apply(&podpool(pool, &ns.name, &scope, 30, &knobs, "      containers: [{name: app, image: nginx}]\n"));

    let deployment = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: plain, namespace: {}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: plain}}}}
  template:
    metadata: {{labels: {{app: plain}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: app, image: nginx}}]
",
        ns.name
    );
    apply(&deployment);

    let crashing = wait_for("a fifth of the pool crash-looping, restarts growing", T, || async {
        let pods = list_pods(&client, &ns.name, &format!("app={pool}")).await;
        let looping: BTreeSet<String> =
            pods.iter().filter(|p| restarts(p) > 0).filter_map(|p| p.metadata.name.clone()).collect();
        let grown = pods.iter().filter(|p| restarts(p) >= 2).count();
        let running = pods.iter().filter(|p| ready(p)).count();
        if looping == predicted && grown > 0 && running == 30 - predicted.len() {
            Ok(pods)
        } else {
            Err(format!("looping {looping:?} (want {predicted:?}), {grown} with 2+ restarts, {running} ready"))
        }
    })
    .await;
    // What kubectl shows: CrashLoopBackOff in STATUS (at least once), RESTARTS growing.
    let out = kubectl_ok(&["get", "pods", "-n", &ns.name, "-l", &format!("app={pool}")]);
    eprintln!("{out}");
    let shown = wait_for("kubectl to show CrashLoopBackOff", T, || async {
        let out = kubectl_ok(&["get", "pods", "-n", &ns.name, "-l", &format!("app={pool}")]);
        if out.contains("CrashLoopBackOff") { Ok(out) } else { Err(out) }
    })
    .await;
    assert!(shown.lines().any(|l| l.contains("CrashLoopBackOff") && l.contains("0/1")), "{shown}");
    // Taken by the "kubelet" at once (startTime), Ready only after the start delay (2 s;
    // timestamps have whole seconds), and the scheduler's PodScheduled time left as it set it.
    let seconds = |a: &k8s_openapi::jiff::Timestamp, b: &k8s_openapi::jiff::Timestamp| {
        (*b - *a).total(k8s_openapi::jiff::Unit::Second).unwrap()
    };
    for p in crashing.iter().filter(|p| !predicted.contains(p.metadata.name.as_deref().unwrap())) {
        let s = p.status.as_ref().unwrap();
        let name = p.metadata.name.as_deref().unwrap();
        let at = |type_: &str| {
            s.conditions.iter().flatten().find(|c| c.type_ == type_).and_then(|c| c.last_transition_time.clone())
        };
        let created = p.metadata.creation_timestamp.clone().unwrap().0;
        let started = s.start_time.clone().unwrap().0;
        let ready = at("Ready").unwrap_or_else(|| panic!("{name} has no Ready")).0;
        let scheduled = at("PodScheduled").unwrap_or_else(|| panic!("{name} has no PodScheduled")).0;
        // Whole seconds, and the scheduler's binding in between: how soon after creation it was
        // taken depends on the machine's load; that the start delay lies between being taken and
        // Ready does not.
        let taken = seconds(&created, &started);
        let became_ready = seconds(&created, &ready);
        assert!(
            became_ready - taken >= 1.0,
            "{name} was taken {taken}s and Ready {became_ready}s after it was created: the 2 s start delay lies between"
        );
        assert!(scheduled <= started, "{name}: PodScheduled at {scheduled:?}, started {started:?}");
    }
    // The pool's status counts them.
    let api: Api<kwok_pools::kinds::podpool::PodPool> = Api::namespaced(client.clone(), &ns.name);
    wait_for("failedReplicas in the pool status", T, || async {
        let s = api.get(pool).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let want = predicted.len() as i32;
        if s.failed_replicas == want && s.not_ready_replicas >= want { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
    let wide = kubectl_ok(&["get", "podpool", pool, "-n", &ns.name, "-o", "wide"]);
    assert!(wide.contains("NOT-READY") && wide.contains("FAILED"), "{wide}");
    let row = wide.lines().find(|l| l.starts_with(pool)).unwrap_or_default().to_string();
    assert!(row.split_whitespace().any(|c| c == predicted.len().to_string()), "{wide}");
    // The Deployment's pods follow their nodes' pool: all crash-loop.
    wait_for("the Deployment's pods crash-looping", T, || async {
        let pods = list_pods(&client, &ns.name, "app=plain").await;
        let looping =
            pods.iter().filter(|p| restarts(p) > 0 || waiting_reason(p).as_deref() == Some("CrashLoopBackOff")).count();
        if pods.len() == 3 && looping == 3 { Ok(()) } else { Err(format!("{looping} of {} looping", pods.len())) }
    })
    .await;
    // A container that fails at start with restartPolicy Never: the pod Failed, exit code 1.
    kubectl_ok(&[
        "patch",
        "nodepool",
        &scope,
        "--type=merge",
        "-p",
        r#"{"spec":{"lifecycle":{"pods":{"failPercent":100,"crashLoopPercent":0}}}}"#,
    ]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    apply(&scoped_pod("once", &ns.name, &scope, "  restartPolicy: Never\n"));
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let failed = wait_for("the pod to fail", T, || async {
        let p = api.get("once").await.map_err(|e| e.to_string())?;
        let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if phase == "Failed" { Ok(p) } else { Err(phase) }
    })
    .await;
    let term = failed.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
    let metrics = op.metrics().await;
    assert!(
        metrics.lines().any(|l| l.starts_with("kwok_pools_simulator_injected_events_total{event=\"pod_crash\"}")),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with("kwok_pools_simulator_injected_events_total{event=\"pod_fail\"}")),
        "{metrics}"
    );
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

fn ready_status(n: &Node) -> String {
    ready_condition(n)
}

fn unreachable_no_execute(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute"))
}

fn unreachable_tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == "node.kubernetes.io/unreachable"))
}

#[tokio::test]
async fn flapping_nodes_go_not_ready_get_tainted_evict_their_pods_and_come_back() {
    // The node lifecycle controller judges a whole zone: other tests' NotReady nodes would
    // sway it (a "disrupted" zone gets no evictions). This test gets a cluster of its own, with
    // the short node-monitor grace period of the test cluster.
    let grace = node_grace_period().as_secs();
    let grace_flag = format!("kube-controller-manager=--node-monitor-grace-period={grace}s");
    let cluster = OwnCluster::create(&unique("flapping"), &[&grace_flag]);
    let client = cluster.client().await;
    let scope = unique("flap");
    let ns = TestNamespace::new(&client, "flap").await;
    let _op = Operator::start_as(&scope, &[], cluster.kubeconfig.clone());
    // Away long enough for the controller manager to notice (its grace period) and to taint
    // (it taints at most one node every 10 s by default), then back.
    let away = grace + 20;
    let every = 2 * away;
    let knobs = format!(
        "  lifecycle:\n    seed: 7\n    nodes: {{notReadyPercent: 10, notReadyFor: {{fixed: {away}s}}, every: {every}s}}\n"
    );
    let pool = format!("{scope}-n");
    cluster.apply(&nodepool(&pool, &scope, 100, "10.160.0.0/16", &knobs));
    let nodes = wait_for("100 nodes", T, || async {
        let n = pool_nodes(&client, &pool).await;
        if n.len() == 100 { Ok(n) } else { Err(format!("{}", n.len())) }
    })
    .await;
    let settings: NodeLifecycle =
        serde_yaml::from_str(&format!("{{notReadyPercent: 10, notReadyFor: {{fixed: {away}s}}, every: {every}s}}"))
            .unwrap();
    // With a seed, which nodes flap is a pure function of the seed and the node names: every
    // run with these names flaps these nodes.
    let predicted: BTreeSet<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .filter(|n| plan_node(&settings, Some(7), n, "").is_some())
        .collect();
    // The share itself is the unit tests' (1,000 names); here the scope is random, so a count
    // a few standard deviations from ten must not fail the run. More than 30 would sway the
    // node lifecycle controller's zone judgement.
    assert!((1..=30).contains(&predicted.len()), "about a tenth of 100: {predicted:?}");

    // Pods that tolerate an unreachable node for one second only, one on each flapping node
    // and a few on steady ones (bound by name: the scheduler would steer clear of tainted
    // nodes, and evictions would soon leave the flapping ones empty).
    let steady: Vec<String> =
        nodes.iter().filter_map(|n| n.metadata.name.clone()).filter(|n| !predicted.contains(n)).take(5).collect();
    let pinned: HashMap<String, String> = predicted
        .iter()
        .chain(steady.iter())
        .enumerate()
        .map(|(i, node)| (format!("pinned-{i}"), node.clone()))
        .collect();
    for (pod, node) in &pinned {
        cluster.apply(&format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {pod}, namespace: {ns}, labels: {{app: pinned}}}}
spec:
  nodeName: {node}
  tolerations:
  - {{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}
  - {{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 1}}
  containers: [{{name: app, image: nginx}}]
",
            ns = ns.name
        ));
    }
    let placed: HashMap<String, String> = wait_for("the pinned pods", T, || async {
        let pods = list_pods(&client, &ns.name, "app=pinned").await;
        let placed: HashMap<String, String> =
            pods.iter().filter_map(|p| Some((p.metadata.uid.clone()?, p.spec.as_ref()?.node_name.clone()?))).collect();
        if placed.len() == pinned.len() { Ok(placed) } else { Err(format!("{} of {}", placed.len(), pinned.len())) }
    })
    .await;

    // Watch a whole cycle and a window more: every flapping node is away once in it.
    let start = Instant::now();
    let mut went: BTreeSet<String> = BTreeSet::new();
    let mut tainted: BTreeSet<String> = BTreeSet::new();
    let mut no_execute: BTreeSet<String> = BTreeSet::new();
    let mut came_back: BTreeSet<String> = BTreeSet::new();
    // A node counts as gone only once it was seen Ready (new nodes are born Ready).
    let mut was_ready: BTreeSet<String> = BTreeSet::new();
    let watch = Duration::from_secs(every + away + 10);
    let mut last_report = Instant::now();
    while start.elapsed() < watch {
        for n in pool_nodes(&client, &pool).await {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = ready_status(&n);
            if status == "True" {
                was_ready.insert(name.clone());
                if went.contains(&name) {
                    came_back.insert(name.clone());
                }
            } else if was_ready.contains(&name) {
                went.insert(name.clone());
            }
            if unreachable_tainted(&n) {
                tainted.insert(name.clone());
            }
            if unreachable_no_execute(&n) {
                no_execute.insert(name);
            }
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  … {}s: NotReady so far {went:?}, back {came_back:?}", start.elapsed().as_secs());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(went, predicted, "the nodes that went NotReady are the seed's");
    assert_eq!(tainted, predicted, "the node lifecycle controller taints them unreachable");
    assert_eq!(came_back, predicted, "and they come back Ready");
    // Pods that sat on a node tainted unreachable:NoExecute were evicted (they tolerate it for
    // a second); the pods on steady nodes are still the same pods.
    eprintln!("  NoExecute-tainted: {no_execute:?}");
    assert!(
        !no_execute.is_empty() && no_execute.is_subset(&predicted),
        "NoExecute-tainted {no_execute:?}; the controller manager said:\n{}",
        cluster.log("kube-controller-manager", "isruption|Evict|evict|Deleting pod|NoExecute")
    );
    let now: BTreeSet<String> =
        // Evicted: deleted by the taint eviction controller. A pod on a node that is still
        // away stays Terminating until the node is back (nobody confirms its exit).
        list_pods(&client, &ns.name, "app=pinned")
            .await
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
    let evictable: Vec<(&String, &String)> = placed.iter().filter(|(_, node)| no_execute.contains(*node)).collect();
    let elsewhere: Vec<&String> =
        placed.iter().filter(|(_, node)| !predicted.contains(*node)).map(|(uid, _)| uid).collect();
    assert!(!evictable.is_empty(), "no pod sat on a node that got tainted NoExecute");
    let kept: Vec<_> = evictable.iter().filter(|(uid, _)| now.contains(*uid)).collect();
    assert!(kept.is_empty(), "pods on NoExecute-tainted nodes are evicted; still there: {kept:?}");
    assert!(elsewhere.iter().all(|uid| now.contains(*uid)), "pods on steady nodes stay");
}
