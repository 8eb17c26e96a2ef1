//! Pods on fake nodes and PodPool, end to end: whoever creates a pod bound to a managed
//! node, it runs with an address from the node's podCIDR, completes if a Job owns it, and
//! goes away after its grace period when deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);

/// A NodePool of `count` nodes for `scope` allowing `pods` pods each, with its own podCIDRs.
fn nodes_yaml(name: &str, scope: &str, count: u32, pods: u32, cidr: &str, mask: u8) -> String {
    scoped_nodepool(name, scope, count, cidr, mask, pods, "")
}

/// A PodPool in `ns` pinned to the scope's nodes.
fn podpool_yaml(name: &str, ns: &str, scope: &str, count: u32, image: &str, extra_spec: &str) -> String {
    let pod_spec = format!(
        "      terminationGracePeriodSeconds: 2\n      containers:\n      - name: main\n        image: {image}\n"
    );
    scoped_podpool(name, ns, scope, count, extra_spec, &pod_spec)
}

async fn pods(client: &kube::Client, ns: &str, selector: &str) -> Vec<Pod> {
    list_pods(client, ns, selector).await
}

fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    pod_ready(p)
}

fn ip(p: &Pod) -> Option<IpAddr> {
    p.status.as_ref()?.pod_ip.as_ref()?.parse().ok()
}

fn node_of(p: &Pod) -> String {
    p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

async fn wait_running(client: &kube::Client, ns: &str, selector: &str, count: usize, timeout: Duration) -> Vec<Pod> {
    let what = format!("{count} Running and Ready pods ({selector})");
    wait_for(&what, timeout, || async {
        let ps = pods(client, ns, selector).await;
        let live: Vec<&Pod> = ps.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let running = live.iter().filter(|p| phase(p) == "Running" && ready(p)).count();
        if live.len() == count && running == count {
            Ok(ps)
        } else {
            Err(format!("{} pods, {running} running", live.len()))
        }
    })
    .await
}

/// Every live pod has a unique address inside its node's podCIDR.
async fn assert_addresses(client: &kube::Client, ps: &[Pod]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut cidr_of: HashMap<String, IpNet> = HashMap::new();
    let mut seen: HashSet<IpAddr> = HashSet::new();
    for p in ps.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && phase(p) == "Running") {
        let node = node_of(p);
        if !cidr_of.contains_key(&node) {
            let n = nodes.get(&node).await.unwrap();
            cidr_of.insert(node.clone(), n.spec.unwrap().pod_cidr.unwrap().parse().unwrap());
        }
        let addr = ip(p).unwrap_or_else(|| panic!("{} has no IP", p.metadata.name.as_deref().unwrap_or("")));
        assert!(cidr_of[&node].contains(&addr), "{addr} of {:?} is outside {}", p.metadata.name, cidr_of[&node]);
        assert!(seen.insert(addr), "{addr} is used twice");
    }
}

#[tokio::test]
async fn the_deployment_sample_runs_on_a_one_node_pool() {
    let client = client().await;
    let scope = unique("deploy");
    let ns = TestNamespace::new(&client, "deploy").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.210.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;

    // The sample as published, moved to the test namespace and pinned to this test's node.
    let mut d: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/deployment.yaml")).unwrap();
    d["metadata"]["namespace"] = ns.name.clone().into();
    d["spec"]["template"]["spec"]["nodeSelector"] =
        serde_yaml::from_str(&format!("{{{SCOPE_LABEL}: {scope}}}")).unwrap();
    let start = Instant::now();
    apply(&serde_yaml::to_string(&d).unwrap());
    let ps = wait_running(&client, &ns.name, "app=fake-pod", 10, T).await;
    eprintln!("  10 pods Running after {:.1}s", start.elapsed().as_secs_f64());
    assert_addresses(&client, &ps).await;
    let node = format!("{scope}-0");
    assert!(ps.iter().all(|p| node_of(p) == node));

    let wide = kubectl_ok(&["get", "pods", "-n", &ns.name, "-l", "app=fake-pod", "-o", "wide"]);
    let rows: Vec<&str> = wide.lines().skip(1).collect();
    assert_eq!(rows.len(), 10, "{wide}");
    for (row, p) in rows.iter().zip({
        let mut sorted = ps.clone();
        sorted.sort_by_key(|p| p.metadata.name.clone());
        sorted
    }) {
        assert!(row.contains("1/1") && row.contains("Running"), "{row}");
        assert!(row.contains(&ip(&p).unwrap().to_string()) && row.contains(&node), "IP and NODE: {row}");
    }
    wait_for("the Deployment to report 10/10 available", T, || async {
        let out = kubectl_ok(&[
            "get",
            "deployment",
            "fake-pod",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.status.availableReplicas}/{.status.replicas}",
        ]);
        if out == "10/10" { Ok(()) } else { Err(out) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_podpool_spreads_over_nodes_and_respects_the_pods_limit() {
    let client = client().await;
    let scope = unique("spread");
    let ns = TestNamespace::new(&client, "spread").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 3, 110, "10.211.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 3, T).await;
    apply(&podpool_yaml("web", &ns.name, &scope, 50, "nginx:1.27", ""));
    let ps = wait_running(&client, &ns.name, "app=web", 50, T).await;
    assert_addresses(&client, &ps).await;
    let used: HashSet<String> = ps.iter().map(node_of).collect();
    assert_eq!(used.len(), 3, "the scheduler spreads them over the 3 nodes");
    let names: HashSet<String> = ps.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert!((0..50).all(|i| names.contains(&format!("web-{i}"))));
    wait_for("PodPool status 50/50", T, || async {
        let out = kubectl_ok(&[
            "get",
            "kpp",
            "web",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.status.readyReplicas}/{.status.replicas}",
        ]);
        if out == "50/50" { Ok(()) } else { Err(out) }
    })
    .await;

    // Nodes that take 2 pods each: 4 of 5 pods run, one waits with the scheduler's reason.
    let small = format!("{scope}-small");
    let small_scope = format!("{scope}s");
    let _op2 = Operator::start(&small_scope, &[]);
    apply(&nodes_yaml(&small, &small_scope, 2, 2, "10.212.0.0/16", 24));
    wait_ready_nodes(&client, &small, 2, T).await;
    apply(&podpool_yaml("tight", &ns.name, &small_scope, 5, "nginx:1.27", ""));
    let pending = wait_for("4 Running and 1 Pending", T, || async {
        let ps = pods(&client, &ns.name, "app=tight").await;
        let running: Vec<&Pod> = ps.iter().filter(|p| phase(p) == "Running").collect();
        let pending: Vec<&Pod> = ps.iter().filter(|p| phase(p) == "Pending").collect();
        let unschedulable = pending.iter().any(|p| {
            p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
                })
            })
        });
        if running.len() == 4 && pending.len() == 1 && unschedulable {
            Ok(pending[0].clone())
        } else {
            Err(format!("{} running, {} pending", running.len(), pending.len()))
        }
    })
    .await;
    let msg = pending
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap()
        .message
        .unwrap_or_default();
    assert!(msg.contains("Too many pods"), "the scheduler's reason: {msg}");
    let per_node: HashMap<String, usize> = pods(&client, &ns.name, "app=tight")
        .await
        .iter()
        .filter(|p| phase(p) == "Running")
        .fold(HashMap::new(), |mut m, p| {
            *m.entry(node_of(p)).or_default() += 1;
            m
        });
    assert!(per_node.values().all(|n| *n == 2), "{per_node:?}");
    kubectl_ok(&["delete", "nodepool", &scope, &small, "--wait=false"]);
}

#[tokio::test]
async fn a_template_change_rolls_within_max_unavailable() {
    let client = client().await;
    let scope = unique("roll");
    let ns = TestNamespace::new(&client, "roll").await;
    let _op = Operator::start(&scope, &["--pod-termination-delay", "500ms"]);
    apply(&nodes_yaml(&scope, &scope, 2, 110, "10.213.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 2, T).await;
    apply(&podpool_yaml("app", &ns.name, &scope, 10, "app:v1", "  maxUnavailable: 2\n"));
    let before = wait_running(&client, &ns.name, "app=app", 10, T).await;
    let old_uids: HashSet<String> = before.iter().filter_map(|p| p.metadata.uid.clone()).collect();

    apply(&podpool_yaml("app", &ns.name, &scope, 10, "app:v2", "  maxUnavailable: 2\n"));
    let mut worst = 0usize;
    let start = Instant::now();
    loop {
        let ps = pods(&client, &ns.name, "app=app").await;
        let available = ps.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p)).count();
        worst = worst.max(10usize.saturating_sub(available));
        let updated = ps
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p))
            .filter(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("app:v2"))
            .count();
        if updated == 10 && ps.len() == 10 {
            break;
        }
        assert!(start.elapsed() < T, "rollout did not finish: {updated} updated");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worst <= 2, "{worst} pods were unavailable at once; maxUnavailable is 2");
    assert!(worst >= 1, "the rollout replaced pods");
    let after = pods(&client, &ns.name, "app=app").await;
    assert!(after.iter().all(|p| !old_uids.contains(p.metadata.uid.as_deref().unwrap())), "every pod replaced");
    assert_addresses(&client, &after).await;

    // Scale down removes the highest indexes, then deleting the pool removes the rest.
    kubectl_ok(&["scale", "podpool", "app", "-n", &ns.name, "--replicas", "4"]);
    let ps = wait_running(&client, &ns.name, "app=app", 4, T).await;
    let names: HashSet<String> =
        ps.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names, (0..4).map(|i| format!("app-{i}")).collect());
    kubectl_ok(&["delete", "podpool", "app", "-n", &ns.name]);
    wait_for("the pool's pods to go", T, || async {
        let left = pods(&client, &ns.name, "app=app").await.len();
        if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn jobs_complete_and_deleted_pods_take_their_grace_period() {
    let client = client().await;
    let scope = unique("job");
    let ns = TestNamespace::new(&client, "job").await;
    let _op = Operator::start(&scope, &["--job-run-time", "2s"]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.214.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let job = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: three, namespace: {}}}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: work, image: busybox}}]
",
        ns.name
    );
    apply(&job);
    wait_for("the Job to complete", T, || async {
        let out = kubectl_ok(&[
            "get",
            "job",
            "three",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.status.succeeded}/{.status.conditions[?(@.type==\"Complete\")].status}",
        ]);
        if out == "3/True" { Ok(()) } else { Err(out) }
    })
    .await;
    let done = pods(&client, &ns.name, "batch.kubernetes.io/job-name=three").await;
    assert!(done.iter().filter(|p| phase(p) == "Succeeded").count() >= 3);
    let c = &done
        .iter()
        .find(|p| phase(p) == "Succeeded")
        .unwrap()
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let term = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (0, Some("Completed")));

    // A running pod deleted with kubectl goes in about a second, as a process that honours
    // SIGTERM; with the node pool's `ignoreSIGTERM` it holds on for its grace period (10 s).
    let delete_took = |name: &'static str| {
        let pod = scoped_pod(name, &ns.name, &scope, "  terminationGracePeriodSeconds: 10\n");
        let client = client.clone();
        let ns = ns.name.clone();
        async move {
            apply(&pod);
            wait_for("the pod to run", T, || async {
                let ps = pods(&client, &ns, "").await;
                let p = ps.iter().find(|p| p.metadata.name.as_deref() == Some(name));
                if p.is_some_and(|p| phase(p) == "Running") { Ok(()) } else { Err("not yet".into()) }
            })
            .await;
            let start = Instant::now();
            kubectl_ok(&["delete", "pod", name, "-n", &ns, "--timeout=60s"]);
            start.elapsed().as_secs_f64()
        }
    };
    let took = delete_took("prompt").await;
    assert!(
        took < 8.0,
        "kubectl delete took {took:.1}s: a pod that honours SIGTERM exits in about a second, not its 10s grace"
    );
    kubectl_ok(&[
        "patch",
        "nodepool",
        &scope,
        "--type=merge",
        "-p",
        r#"{"spec":{"lifecycle":{"pods":{"ignoreSIGTERM":true}}}}"#,
    ]);
    // The simulator reads the pool from its watch: give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let took = delete_took("stubborn").await;
    assert!((9.5..20.0).contains(&took), "kubectl delete took {took:.1}s for a 10s grace period ignoring SIGTERM");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn addresses_stay_unique_across_a_simulator_restart() {
    let client = client().await;
    let scope = unique("ipam");
    let ns = TestNamespace::new(&client, "ipam").await;
    let mut op = Operator::start(&scope, &["--pod-termination-delay", "200ms"]);
    apply(&nodes_yaml(&scope, &scope, 2, 250, "10.215.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 2, T).await;
    apply(&podpool_yaml("many", &ns.name, &scope, 300, "nginx", ""));
    let ps = wait_running(&client, &ns.name, "app=many", 300, T).await;
    assert_addresses(&client, &ps).await;

    // Restart; then churn: delete some, add more. Rebuilt state must hand out no address twice.
    op.restart();
    kubectl_ok(&["delete", "pods", "-n", &ns.name, "many-3", "many-7", "many-11", "--wait=false"]);
    kubectl_ok(&["scale", "podpool", "many", "-n", &ns.name, "--replicas", "400"]);
    let ps = wait_running(&client, &ns.name, "app=many", 400, T).await;
    assert_addresses(&client, &ps).await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn readiness_gates_host_network_and_exhausted_ranges() {
    let client = client().await;
    let scope = unique("gate");
    let ns = TestNamespace::new(&client, "gate").await;
    let _op = Operator::start(&scope, &[]);
    // A /30 per node: two pod addresses.
    apply(&nodes_yaml(&scope, &scope, 1, 20, "10.216.0.0/24", 30));
    let nodes = wait_ready_nodes(&client, &scope, 1, T).await;
    let node_ip = nodes[0]
        .status
        .as_ref()
        .unwrap()
        .addresses
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .unwrap()
        .address
        .clone();
    let pod = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {}, labels: {{t: gate}}}}
spec:
  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers: [{{name: c, image: nginx}}]
{extra}",
            ns.name
        )
    };
    apply(&pod("gated", "  readinessGates: [{conditionType: example.com/ready}]\n"));
    apply(&pod("host", "  hostNetwork: true\n"));
    let get = |name: &'static str| {
        let client = client.clone();
        let ns = ns.name.clone();
        async move { Api::<Pod>::namespaced(client, &ns).get(name).await.unwrap() }
    };
    wait_for("the gated pod to run without being Ready", T, || async {
        let p = get("gated").await;
        if phase(&p) == "Running" && !ready(&p) { Ok(()) } else { Err(phase(&p)) }
    })
    .await;
    let patch = r#"{"status":{"conditions":[{"type":"example.com/ready","status":"True"}]}}"#;
    kubectl_ok(&[
        "patch",
        "pod",
        "gated",
        "-n",
        &ns.name,
        "--subresource",
        "status",
        "--type",
        "strategic",
        "-p",
        patch,
    ]);
    wait_for("the gate to make it Ready", T, || async {
        let p = get("gated").await;
        if ready(&p) { Ok(()) } else { Err("not ready".into()) }
    })
    .await;
    let host = wait_for("the host-network pod to run", T, || async {
        let p = get("host").await;
        if phase(&p) == "Running" { Ok(p) } else { Err(phase(&p)) }
    })
    .await;
    assert_eq!(host.status.unwrap().pod_ip.as_deref(), Some(node_ip.as_str()), "host network pods get the node's IP");

    // gated took one of the two addresses; two more pods: one runs, one waits with an event.
    apply(&pod("second", ""));
    apply(&pod("third", ""));
    let ev = wait_for("a PodCIDRExhausted event", T, || async {
        let out = kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "reason=PodCIDRExhausted",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        if out.contains("no free address") { Ok(out) } else { Err(out) }
    })
    .await;
    assert!(ev.contains("10.216.0.0/30"), "{ev}");
    let phases: Vec<String> = futures::future::join_all(["second", "third"].map(get)).await.iter().map(phase).collect();
    assert_eq!(phases.iter().filter(|p| *p == "Running").count(), 1, "{phases:?}");
    // Freeing an address lets the waiting pod run.
    kubectl_ok(&["delete", "pod", "gated", "-n", &ns.name, "--grace-period=0", "--force"]);
    wait_for("the waiting pod to run once an address is free", T, || async {
        let phases: Vec<String> =
            futures::future::join_all(["second", "third"].map(get)).await.iter().map(phase).collect();
        if phases.iter().all(|p| p == "Running") { Ok(()) } else { Err(format!("{phases:?}")) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_deleted_job_pod_ends_failed_before_it_goes_and_the_job_replaces_it() {
    // Since 1.27 the kubelet writes a deleted pod's terminal phase before the final delete. A
    // Job with podReplacementPolicy: Failed (or a podFailurePolicy) keeps its tracking
    // finalizer on a pod until it sees that phase: without it the pod stays Terminating and
    // the Job never replaces it.
    let client = client().await;
    let scope = unique("jobdel");
    let ns = TestNamespace::new(&client, "jobdel").await;
    let _op = Operator::start(&scope, &["--job-run-time", "10m"]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.215.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: replaced, namespace: {}}}
spec:
  backoffLimit: 3
  podReplacementPolicy: Failed
  podFailurePolicy:
    rules: [{{action: FailJob, onExitCodes: {{operator: In, values: [42]}}}}]
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 30
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: work, image: busybox}}]
",
        ns.name
    ));
    let selector = "batch.kubernetes.io/job-name=replaced";
    let first = wait_running(&client, &ns.name, selector, 1, T).await.remove(0);
    let (name, uid) = (first.metadata.name.clone().unwrap(), first.metadata.uid.clone().unwrap());
    let versions = record_versions(Api::<Pod>::namespaced(client.clone(), &ns.name), &name);
    tokio::time::sleep(Duration::from_millis(500)).await; // the watch is established
    kubectl_ok(&["delete", "pod", &name, "-n", &ns.name, "--wait=false"]);

    let versions = tokio::time::timeout(T, versions)
        .await
        .unwrap_or_else(|_| panic!("the deleted pod {name} was still there after {T:?} (stuck Terminating?)"))
        .unwrap();
    let terminal = versions.iter().find(|p| phase(p) == "Failed").unwrap_or_else(|| {
        panic!("no Failed version before the pod went: {:?}", versions.iter().map(phase).collect::<Vec<_>>())
    });
    assert!(terminal.metadata.deletion_timestamp.is_some(), "the terminal phase is written on the deleted pod");
    let state = terminal.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].state.clone().unwrap();
    let ended = state.terminated.expect("the container is terminated");
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (143, Some("Error")),
        "a process that stops on SIGTERM within its grace period exits 143"
    );

    // The Job counts the failure (143 is not the FailJob exit code) and starts another pod.
    let second = wait_running(&client, &ns.name, selector, 1, T).await.remove(0);
    assert_ne!(second.metadata.uid.as_deref(), Some(uid.as_str()));
    wait_for("the Job to count the deleted pod as failed", T, || async {
        let failed = kubectl_ok(&["get", "job", "replaced", "-n", &ns.name, "-o", "jsonpath={.status.failed}"]);
        if failed == "1" { Ok(()) } else { Err(format!("failed={failed:?}")) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_pod_past_its_active_deadline_fails_with_deadline_exceeded() {
    let client = client().await;
    let scope = unique("deadline");
    let ns = TestNamespace::new(&client, "deadline").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.216.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&scoped_pod("bounded", &ns.name, &scope, "  activeDeadlineSeconds: 4\n"));
    apply(&scoped_pod("unbounded", &ns.name, &scope, ""));
    let get = |name: &'static str| {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        async move { api.get(name).await.unwrap() }
    };
    wait_for("the bounded pod to run", T, || async {
        let p = get("bounded").await;
        if phase(&p) == "Running" { Ok(()) } else { Err(phase(&p)) }
    })
    .await;
    let failed = wait_for("the pod to fail past its deadline", T, || async {
        let p = get("bounded").await;
        if phase(&p) == "Failed" { Ok(p) } else { Err(phase(&p)) }
    })
    .await;
    let status = failed.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    let started = status.start_time.unwrap().0;
    let ended = status.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    let ran = (ended.finished_at.unwrap().0 - started).total(k8s_openapi::jiff::Unit::Second).unwrap();
    assert!((3.0..15.0).contains(&ran), "it ran {ran:.1}s for a 4s deadline");
    assert_eq!(phase(&get("unbounded").await), "Running", "a pod without a deadline keeps running");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

/// A minimal CRD (`<plural>.<group>`, kind `kind`) that keeps whatever it is given.
fn owner_crd(group: &str, kind: &str, plural: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.{group}}}
spec:
  group: {group}
  names: {{kind: {kind}, plural: {plural}, singular: {singular}}}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
",
        singular = kind.to_ascii_lowercase()
    )
}

/// A pod of `owner` (apiVersion, kind, name, uid), `Never` restarted, on the scope's nodes.
fn owned_pod(name: &str, ns: &str, scope: &str, owner: (&str, &str, &str, &str)) -> String {
    let (api_version, kind, owner_name, uid) = owner;
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  ownerReferences: [{{apiVersion: {api_version}, kind: {kind}, name: {owner_name}, uid: {uid}, controller: true}}]
spec:
  restartPolicy: Never
  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers: [{{name: main, image: busybox}}]
"
    )
}

#[tokio::test]
async fn batch_pods_of_any_framework_finish_and_long_running_ones_keep_running() {
    let client = client().await;
    let scope = unique("frameworks");
    let ns = TestNamespace::new(&client, "frameworks").await;
    let _op = Operator::start(&scope, &[]);
    // A Volcano-like Job (a `Job` kind of another group) and an Argo-like Workflow.
    apply(&owner_crd("batch.volcano.e2e.example", "Job", "jobs"));
    apply(&owner_crd("argoproj.e2e.example", "Workflow", "workflows"));
    let established = |name: &'static str| async move {
        let out =
            kubectl_ok(&["get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"]);
        if out == "True" { Ok(()) } else { Err(out) }
    };
    wait_for("the test CRDs to be served", T, || established("jobs.batch.volcano.e2e.example")).await;
    wait_for("the test CRDs to be served", T, || established("workflows.argoproj.e2e.example")).await;
    // The pool finishes Workflow pods after 3s; a Deployment on it must keep running.
    let knobs = "  lifecycle:\n    pods:\n      runTime: {fixed: 3s}\n      runTimeOwners: [{apiGroup: argoproj.e2e.example, kind: Workflow}]\n";
    apply(&scoped_nodepool(&scope, &scope, 1, "10.219.0.0/16", 24, 110, knobs));
    wait_ready_nodes(&client, &scope, 1, T).await;

    let n = &ns.name;
    apply(&format!(
        "apiVersion: batch.volcano.e2e.example/v1alpha1\nkind: Job\nmetadata: {{name: vc, namespace: {n}}}\n"
    ));
    apply(&format!(
        "apiVersion: argoproj.e2e.example/v1alpha1\nkind: Workflow\nmetadata: {{name: wf, namespace: {n}}}\n"
    ));
    let uid = |kind: &str, name: &str| kubectl_ok(&["get", kind, name, "-n", n, "-o", "jsonpath={.metadata.uid}"]);
    let (vc, wf) = (uid("jobs.batch.volcano.e2e.example", "vc"), uid("workflows.argoproj.e2e.example", "wf"));
    apply(&owned_pod("vc-task-0", n, &scope, ("batch.volcano.e2e.example/v1alpha1", "Job", "vc", &vc)));
    apply(&owned_pod("wf-step-0", n, &scope, ("argoproj.e2e.example/v1alpha1", "Workflow", "wf", &wf)));
    // Another controller's `Never` child (as a VMI's launcher pod is): no knob meant for
    // plain pods reaches it.
    apply(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: holder, namespace: {n}}}\n"));
    let holder = uid("configmap", "holder");
    apply(&owned_pod("held-0", n, &scope, ("v1", "ConfigMap", "holder", &holder)));
    let mut d: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/deployment.yaml")).unwrap();
    d["metadata"]["namespace"] = n.clone().into();
    d["spec"]["replicas"] = 2.into();
    d["spec"]["template"]["spec"]["nodeSelector"] =
        serde_yaml::from_str(&format!("{{{SCOPE_LABEL}: {scope}}}")).unwrap();
    apply(&serde_yaml::to_string(&d).unwrap());

    let api: Api<Pod> = Api::namespaced(client.clone(), n);
    for name in ["vc-task-0", "wf-step-0"] {
        let done = wait_for(&format!("{name} Succeeded"), T, || async {
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            if phase(&p) == "Succeeded" { Ok(p) } else { Err(phase(&p)) }
        })
        .await;
        let exit = done.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!((exit.exit_code, exit.reason.as_deref()), (0, Some("Completed")), "{name}");
    }
    // The Deployment's pods and the held pod (other controllers' children) never take the
    // pool's runTime.
    let mut running = wait_running(&client, n, "app=fake-pod", 2, T).await;
    running.push(api.get("held-0").await.unwrap());
    tokio::time::sleep(Duration::from_secs(8)).await;
    for p in running {
        let name = p.metadata.name.unwrap();
        let now = api.get(&name).await.unwrap();
        assert_eq!(phase(&now), "Running", "{name} keeps running past the pool's 3s runTime");
    }
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
    for crd in ["jobs.batch.volcano.e2e.example", "workflows.argoproj.e2e.example"] {
        kubectl_ok(&["delete", "crd", crd, "--wait=false"]);
    }
}

#[tokio::test]
async fn a_pod_bound_past_what_its_node_has_is_rejected_as_the_kubelet_rejects_it() {
    let client = client().await;
    let scope = unique("admit");
    let ns = TestNamespace::new(&client, "admit").await;
    let _op = Operator::start(&scope, &[]);
    // One node with 2 CPUs and a NoExecute taint (the pods below tolerate it).
    let pool = NodePoolYaml::new(&scope, &scope)
        .count(1)
        .pod_cidr("10.221.0.0/16", 24)
        .capacity(Some("{cpu: 2, memory: 8Gi, pods: 110}"))
        .yaml();
    let mut pool: serde_yaml::Value = serde_yaml::from_str(&pool).unwrap();
    pool["spec"]["nodeTemplate"]["spec"] =
        serde_yaml::from_str("{taints: [{key: maintenance, value: soon, effect: NoExecute}]}").unwrap();
    apply(&serde_yaml::to_string(&pool).unwrap());
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0).metadata.name.unwrap();
    let n = &ns.name;
    // Bound by hand (spec.nodeName): the scheduler never weighs them; the kubelet does.
    let bound = |name: &str, cpu: &str, extra: &str| {
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {n}}}
spec:
  nodeName: {node}
  tolerations: [{{key: maintenance, operator: Exists}}]
{extra}  containers: [{{name: app, image: busybox, resources: {{requests: {{cpu: '{cpu}'}}}}}}]
"
        )
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), n);
    let status_of = |name: &'static str| {
        let api = api.clone();
        async move {
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            let s = p.status.clone().unwrap_or_default();
            match s.phase.as_deref() {
                Some("Running" | "Failed") => Ok(s),
                other => Err(format!("{other:?}")),
            }
        }
    };
    apply(&bound("big", "1500m", ""));
    let big = wait_for("big Running", T, || status_of("big")).await;
    assert_eq!(big.phase.as_deref(), Some("Running"));

    apply(&bound("extra", "1", ""));
    let extra = wait_for("extra decided", T, || status_of("extra")).await;
    assert_eq!((extra.phase.as_deref(), extra.reason.as_deref()), (Some("Failed"), Some("OutOfcpu")));
    assert_eq!(
        extra.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000")
    );
    // The kubelet's event, as `kubectl describe pod` shows it.
    let events = wait_for("the OutOfcpu event", T, || async {
        let out = kubectl_ok(&[
            "get",
            "events",
            "-n",
            n,
            "--field-selector",
            "involvedObject.name=extra",
            "-o",
            "jsonpath={.items[*].reason}",
        ]);
        if out.contains("OutOfcpu") { Ok(out) } else { Err(out) }
    })
    .await;
    assert!(events.contains("OutOfcpu"));

    // A node selector the node does not match. (An untolerated NoExecute taint is refused the
    // same way — unit-tested — but here the controller manager's taint eviction deletes such a
    // pod first, as it does beside a real kubelet.)
    apply(&bound("elsewhere", "100m", "  nodeSelector: {zone: nowhere}\n"));
    let s = wait_for("elsewhere decided", T, || status_of("elsewhere")).await;
    assert_eq!((s.phase.as_deref(), s.reason.as_deref()), (Some("Failed"), Some("NodeAffinity")));
    // Room left for a pod that fits: admitted and Running.
    apply(&bound("small", "400m", ""));
    let s = wait_for("small decided", T, || status_of("small")).await;
    assert_eq!(s.phase.as_deref(), Some("Running"), "{s:?}");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_rollout_waits_for_each_pods_readiness_probe_and_min_ready_seconds() {
    let client = client().await;
    let scope = unique("probes");
    let ns = TestNamespace::new(&client, "probes").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.222.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let deployment = |image: &str| {
        format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {n}}}
spec:
  replicas: 2
  minReadySeconds: 5
  strategy: {{rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      terminationGracePeriodSeconds: 2
      containers:
      - name: app
        image: {image}
        readinessProbe: {{httpGet: {{path: /, port: 80}}, initialDelaySeconds: 10, periodSeconds: 5}}
"
        )
    };
    let rollout = || {
        kubectl_ok(&["rollout", "status", "deployment/web", "-n", n, "--timeout=180s"]);
    };
    let t0 = Instant::now();
    apply(&deployment("nginx:1"));
    rollout();
    let first = t0.elapsed();
    // Both pods start at once; each is Ready 10s after its container starts, available 5s later.
    assert!(first >= Duration::from_secs(14), "the first rollout took {first:?}, under 10s + 5s");

    // A rolling update of two batches (one new pod at a time): at least 15s each.
    let t1 = Instant::now();
    apply(&deployment("nginx:2"));
    rollout();
    let second = t1.elapsed();
    eprintln!("  first rollout {first:?}, rolling update of 2 batches {second:?}");
    assert!(second >= Duration::from_secs(29), "two batches of 10s + 5s took {second:?}");
    // Each pod was Ready no sooner than 10s after its container started.
    for p in list_pods(&client, n, "app=web").await {
        let status = p.status.unwrap();
        let started = status.container_statuses.unwrap()[0].state.clone().unwrap().running.unwrap().started_at.unwrap();
        let ready = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        let waited =
            (ready.last_transition_time.unwrap().0 - started.0).total(k8s_openapi::jiff::Unit::Second).unwrap();
        assert!(waited >= 9.5, "Ready {waited:.1}s after its container started");
    }
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn memory_pressure_evicts_best_effort_pods_first_and_refuses_new_ones() {
    let client = client().await;
    let scope = unique("pressure");
    let ns = TestNamespace::new(&client, "pressure").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.226.0.0/16", 24));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0).metadata.name.unwrap();
    let n = &ns.name;
    let bound = |name: &str, resources: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {n}}}\nspec:\n  nodeName: {node}\n  containers: [{{name: app, image: busybox{resources}}}]\n"
        )
    };
    let requests = ", resources: {requests: {cpu: 100m, memory: 64Mi}}";
    for (name, resources) in [("be-a", ""), ("be-b", ""), ("burstable", requests)] {
        apply(&bound(name, resources));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), n);
    for name in ["be-a", "be-b", "burstable"] {
        wait_for(&format!("{name} Running"), T, || async {
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            if phase(&p) == "Running" { Ok(()) } else { Err(phase(&p)) }
        })
        .await;
    }
    // The node comes under memory pressure for good (a policy: its change applies at once).
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {scope}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}}}}}\n    lifecycle: {{conditions: [{{type: MemoryPressure, percent: 100}}]}}\n"
    ));
    let t0 = Instant::now();
    // Its BestEffort pods are evicted, one per monitoring interval; the Burstable one stays.
    for name in ["be-a", "be-b"] {
        let p = wait_for(&format!("{name} evicted"), T, || async {
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            if phase(&p) == "Failed" { Ok(p) } else { Err(phase(&p)) }
        })
        .await;
        let s = p.status.unwrap();
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert!(s.message.unwrap().starts_with("The node was low on resource: memory."));
    }
    assert!(t0.elapsed() >= Duration::from_secs(9), "one eviction per 10 s interval: both in {:?}", t0.elapsed());
    assert_eq!(phase(&api.get("burstable").await.unwrap()), "Running", "Burstable pods are not evicted");
    // A new BestEffort pod is refused while the pressure lasts; a Burstable one runs.
    apply(&bound("late", ""));
    apply(&bound("late-burstable", requests));
    let late = wait_for("late decided", T, || async {
        let p = api.get("late").await.map_err(|e| e.to_string())?;
        if phase(&p) == "Failed" { Ok(p) } else { Err(phase(&p)) }
    })
    .await;
    let s = late.status.unwrap();
    assert_eq!(
        (s.reason.as_deref(), s.message.as_deref()),
        (Some("Evicted"), Some("Pod was rejected: The node had condition: [MemoryPressure]. "))
    );
    wait_for("late-burstable Running", T, || async {
        let p = api.get("late-burstable").await.map_err(|e| e.to_string())?;
        if phase(&p) == "Running" { Ok(()) } else { Err(phase(&p)) }
    })
    .await;
    kubectl_ok(&["delete", "lifecyclepolicy", &scope, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_podpool_scales_down_its_cheapest_pods_first_as_a_replica_set_does() {
    let client = client().await;
    let scope = unique("cost");
    let ns = TestNamespace::new(&client, "cost").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodes_yaml(&scope, &scope, 1, 110, "10.230.0.0/16", 24));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    apply(&podpool_yaml("cost", n, &scope, 4, "nginx", ""));
    wait_running(&client, n, "app=cost", 4, T).await;
    // The cheapest pod goes first, then one marked for deletion; the costly one stays.
    kubectl_ok(&["annotate", "pod", "cost-1", "-n", n, "controller.kubernetes.io/pod-deletion-cost=-50"]);
    kubectl_ok(&["annotate", "pod", "cost-3", "-n", n, "controller.kubernetes.io/pod-deletion-cost=1000"]);
    kubectl_ok(&["scale", "podpool", "cost", "-n", n, "--replicas", "3"]);
    let kept = |ps: &[Pod]| -> Vec<String> {
        let mut names: Vec<String> = ps
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        names
    };
    let after = wait_running(&client, n, "app=cost", 3, T).await;
    assert_eq!(kept(&after), ["cost-0", "cost-2", "cost-3"]);
    kubectl_ok(&["annotate", "pod", "cost-0", "-n", n, "pools.kwok.x-k8s.io/delete=true"]);
    kubectl_ok(&["scale", "podpool", "cost", "-n", n, "--replicas", "2"]);
    let after = wait_running(&client, n, "app=cost", 2, T).await;
    assert_eq!(kept(&after), ["cost-2", "cost-3"]);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
