//! Lifecycle policies on the real control plane: behaviour for nodes no pool made (as an
//! autoscaler makes them) and for pods of any owner; a node outage the controller manager sees;
//! a short-lived Job finishing after the policy's time; kwok's chaos label failing a container;
//! a policy over a pool's knobs; refusals at admission and ties reported; kwok's stage sets
//! imported. Every policy here selects on labels unique to its test (policies are
//! cluster-wide), and each test deletes its policies, pass or fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// Deletes the named policies when dropped, pass or fail.
struct Policies(Vec<String>);

impl Drop for Policies {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = kubectl(&["delete", "lifecyclepolicy", p, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// A node made by hand as an autoscaler's kwok provider makes it: kwok's annotation, the fake
/// taint, the test's scope and `labels`.
fn hand_made_node(name: &str, scope: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  annotations: {{kwok.x-k8s.io/node: fake}}\n  labels: {{{SCOPE_LABEL}: {scope}, type: kwok{labels}}}\nspec:\n  taints: [{{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}}]\n"
    )
}

fn condition(node: &Node, type_: &str) -> Option<String> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn pod_ready(p: &Pod) -> Option<String> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

/// A Deployment of `replicas` pods labelled `app: <app>` on the scope's simulated nodes.
fn deployment(name: &str, ns: &str, scope: &str, app: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n      containers: [{{name: app, image: nginx}}]\n"
    )
}

async fn policy_status(client: &kube::Client, name: &str) -> serde_json::Value {
    let gvk = kube::api::GroupVersionKind::gvk("pools.kwok.x-k8s.io", "v1alpha1", "LifecyclePolicy");
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &kube::api::ApiResource::from_gvk(&gvk));
    api.get(name).await.map(|p| p.data["status"].clone()).unwrap_or_default()
}

#[tokio::test]
async fn policies_give_hand_made_nodes_and_any_pods_their_behaviour() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-nodes").await;
    let scope = unique("pol");
    let _op = Operator::start(&scope, &[]);
    let (m5, c5) = ([format!("{scope}-m5-0"), format!("{scope}-m5-1")], format!("{scope}-c5-0"));
    for n in &m5 {
        apply(&hand_made_node(n, &scope, ", node.kubernetes.io/instance-type: m5.large"));
    }
    apply(&hand_made_node(&c5, &scope, ", node.kubernetes.io/instance-type: c5.large"));
    let (pressure, never) = (format!("{scope}-pressure"), format!("{scope}-never"));
    let _cleanup = Policies(vec![pressure.clone(), never.clone()]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {pressure}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}, node.kubernetes.io/instance-type: m5.large}}, owners: [{{kind: None}}]}}\n    lifecycle: {{conditions: [{{type: MemoryPressure, percent: 100}}]}}\n---\napiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {never}}}\nspec:\n  pods:\n    selector: {{matchLabels: {{app: {never}}}, namespaces: [{ns}]}}\n    lifecycle: {{notReadyPercent: 100}}\n",
        ns = ns.name
    ));
    // Nodes no pool made: the policy's pressure on the m5 ones, and the controller manager's
    // taint follows; the c5 node is healthy.
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("the m5 nodes under memory pressure, tainted", T, || async {
        for n in &m5 {
            let node = nodes.get(n).await.map_err(|e| e.to_string())?;
            let p = condition(&node, "MemoryPressure");
            if p.as_deref() != Some("True") || !has_taint(&node, "node.kubernetes.io/memory-pressure") {
                return Err(format!("{n}: MemoryPressure {p:?}"));
            }
        }
        Ok(())
    })
    .await;
    let other = nodes.get(&c5).await.unwrap();
    assert_eq!(condition(&other, "MemoryPressure").as_deref(), Some("False"), "the c5 node is not selected");
    assert_eq!(condition(&other, "Ready").as_deref(), Some("True"));
    // Pods of a Deployment: the policy's are never Ready, their siblings go Ready.
    apply(&deployment("never", &ns.name, &scope, &never, 2));
    apply(&deployment("fine", &ns.name, &scope, &format!("{scope}-fine"), 2));
    wait_for("the fine pods Ready", T, || async {
        let pods = list_pods(&client, &ns.name, &format!("app={scope}-fine")).await;
        let ready = pods.iter().filter(|p| pod_ready(p).as_deref() == Some("True")).count();
        if ready == 2 { Ok(()) } else { Err(format!("{ready} Ready")) }
    })
    .await;
    let seen_running = Instant::now();
    while seen_running.elapsed() < Duration::from_secs(10) {
        let pods = list_pods(&client, &ns.name, &format!("app={never}")).await;
        for p in &pods {
            assert_ne!(pod_ready(p).as_deref(), Some("True"), "a never-ready pod went Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pods = list_pods(&client, &ns.name, &format!("app={never}")).await;
    assert_eq!(pods.iter().filter(|p| phase(p) == "Running").count(), 2, "they run, unready");
    // Each policy says what it governs.
    wait_for("the policies' status", T, || async {
        let (a, b) = (policy_status(&client, &pressure).await, policy_status(&client, &never).await);
        let ready = |s: &serde_json::Value| {
            s["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        };
        if a["nodes"] == 2 && b["pods"] == 2 && ready(&a) && ready(&b) { Ok(()) } else { Err(format!("{a} {b}")) }
    })
    .await;
    for n in m5.iter().chain([&c5]) {
        delete_quietly("node", n);
    }
}

#[tokio::test]
async fn a_node_outage_goes_not_ready_and_back_with_the_controller_managers_taint() {
    let client = client().await;
    let scope = unique("outage");
    let _op = Operator::start(&scope, &[]);
    let name = format!("{scope}-0");
    apply(&hand_made_node(&name, &scope, ", chaos: outage"));
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("the node Ready", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) { Ok(()) } else { Err(ready_condition(&n)) }
    })
    .await;
    let policy = format!("{scope}-outage");
    let _cleanup = Policies(vec![policy.clone()]);
    // Away for 50 s: past the controller manager's grace period (20 s in `make test`).
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {policy}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}, chaos: outage}}}}\n    lifecycle: {{outage: {{lasts: {{fixed: 50s}}}}}}\n"
    ));
    let went = Instant::now();
    wait_for("the node NotReady (Unknown), tainted unreachable", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if ready_condition(&n) == "Unknown" && has_taint(&n, "node.kubernetes.io/unreachable") {
            Ok(())
        } else {
            Err(ready_condition(&n))
        }
    })
    .await;
    wait_for("the node back, untainted", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) && !has_taint(&n, "node.kubernetes.io/unreachable") { Ok(()) } else { Err(ready_condition(&n)) }
    })
    .await;
    let back = went.elapsed();
    assert!(back >= Duration::from_secs(45), "back after the outage's length, not before ({back:?})");
    // Once: it stays Ready.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(is_ready(&nodes.get(&name).await.unwrap()), "one outage, not a flapping node");
    delete_quietly("node", &name);
}

/// The time from a Job pod's start to its completion.
fn ran_for(p: &Pod) -> Option<f64> {
    let s = p.status.as_ref()?;
    let start = s.start_time.as_ref()?.0;
    let end = s.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0;
    Some((end.as_millisecond() - start.as_millisecond()) as f64 / 1000.0)
}

#[tokio::test]
async fn a_short_lived_job_completes_after_the_policys_time() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-jobs").await;
    let scope = unique("jobs");
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let policy = format!("{scope}-short");
    let _cleanup = Policies(vec![policy.clone()]);
    // As clusterloader2 labels its short-lived Jobs' pods.
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {policy}}}\nspec:\n  pods:\n    selector: {{matchLabels: {{workload: short-{scope}}}, owners: [{{apiGroup: batch, kind: Job}}]}}\n    lifecycle: {{jobRunTime: {{fixed: 14s}}}}\n"
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let job = |name: &str, label: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  template:\n    metadata: {{labels: {{workload: {label}}}}}\n    spec:\n      restartPolicy: Never\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists}}]\n      containers: [{{name: c, image: busybox}}]\n",
            ns = ns.name
        )
    };
    apply(&job("short", &format!("short-{scope}")));
    apply(&job("plain", "plain"));
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns.name);
    for name in ["short", "plain"] {
        wait_for(&format!("Job {name} complete"), T, || async {
            let j = jobs.get(name).await.map_err(|e| e.to_string())?;
            if j.status.and_then(|s| s.succeeded) == Some(1) { Ok(()) } else { Err("not yet".into()) }
        })
        .await;
    }
    let took = |label: &str| {
        let (client, ns) = (client.clone(), ns.name.clone());
        let label = label.to_string();
        async move { list_pods(&client, &ns, &format!("workload={label}")).await.iter().find_map(ran_for).unwrap() }
    };
    let (short, plain) = (took(&format!("short-{scope}")).await, took("plain").await);
    assert!((13.0..20.0).contains(&short), "the policy's 14s, not the default 5s: ran {short}s");
    assert!(plain < 10.0, "a Job the policy does not select keeps the default 5s: ran {plain}s");
}

#[tokio::test]
async fn kwoks_chaos_label_fails_the_named_container_as_kwok_does() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-chaos").await;
    let scope = unique("chaos");
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: victim\n  namespace: {ns}\n  labels: {{pod-container-running-failed.stage.kwok.x-k8s.io: 'true'}}\n  annotations:\n    pod-container-running-failed.stage.kwok.x-k8s.io/container-name: b\n    pod-container-running-failed.stage.kwok.x-k8s.io/exit-code: '3'\n    pod-container-running-failed.stage.kwok.x-k8s.io/delay: 2s\n    pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay: 3s\nspec:\n  nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists}}]\n  containers: [{{name: a, image: nginx}}, {{name: b, image: nginx}}]\n",
        ns = ns.name
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let failed = wait_for("the pod Failed", T, || async {
        let p = pods.get("victim").await.map_err(|e| e.to_string())?;
        if phase(&p) == "Failed" { Ok(p) } else { Err(phase(&p)) }
    })
    .await;
    let statuses = failed.status.unwrap().container_statuses.unwrap();
    let b = statuses.iter().find(|c| c.name == "b").unwrap();
    let terminated = b.state.as_ref().unwrap().terminated.as_ref().expect("b terminated");
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (3, Some("containerFailed")));
    assert_eq!(terminated.message.as_deref(), Some("container failed"), "kwok's default message");
}

#[tokio::test]
async fn a_policy_over_a_pools_knobs_wins_only_for_what_it_sets() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-pool").await;
    let scope = unique("over");
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let pool = format!("{scope}-web");
    // The pool starts its pods after 4 s; the policy makes them never Ready.
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: {pool}, namespace: {ns}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  podCount: 2\n  lifecycle: {{pods: {{startDelay: {{fixed: 4s}}}}}}\n  podTemplate:\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      containers: [{{name: a, image: nginx}}]\n",
        ns = ns.name
    ));
    let policy = format!("{scope}-unready");
    let _cleanup = Policies(vec![policy.clone()]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {policy}}}\nspec:\n  pods:\n    selector: {{matchLabels: {{pools.kwok.x-k8s.io/pool: {pool}}}, namespaces: [{ns}]}}\n    lifecycle: {{notReadyPercent: 100}}\n",
        ns = ns.name
    ));
    let pods = wait_for("the pool's pods Running", T, || async {
        let pods = list_pods(&client, &ns.name, &format!("pools.kwok.x-k8s.io/pool={pool}")).await;
        if pods.len() == 2 && pods.iter().all(|p| phase(p) == "Running") {
            Ok(pods)
        } else {
            Err(format!("{}", pods.len()))
        }
    })
    .await;
    for p in &pods {
        assert_eq!(pod_ready(p).as_deref(), Some("False"), "the policy's knob wins");
        let s = p.status.as_ref().unwrap();
        let (start, running) = (
            s.start_time.as_ref().unwrap().0,
            s.container_statuses.as_ref().unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .running
                .as_ref()
                .unwrap()
                .started_at
                .as_ref()
                .unwrap()
                .0,
        );
        let waited = (running.as_millisecond() - start.as_millisecond()) as f64 / 1000.0;
        assert!(waited >= 3.5, "the pool's own start delay still holds where the policy says nothing ({waited}s)");
    }
}

#[tokio::test]
async fn bad_policies_are_refused_with_their_field_and_ties_are_reported() {
    let client = client().await;
    let scope = unique("ties");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    let bad = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {scope}-bad, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  pods:\n    selector: {{matchExpressions: [{{key: app, operator: In}}]}}\n    lifecycle: {{}}\n"
    );
    wait_for("the webhook to refuse a bad policy naming its field", T, || async {
        // (A server-side dry run: it goes through admission every time, and creates nothing.)
        let out = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&bad));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() && err.contains("spec.pods.selector.matchExpressions[0].values") {
            Ok(())
        } else {
            Err(err)
        }
    })
    .await;
    let empty = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {scope}-empty, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec: {{weight: 2}}\n"
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], Some(&empty));
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("pods"),
        "a policy that says nothing"
    );
    // Two equally specific, equally heavy policies on the same pods: both say so.
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let (a, b) = (format!("{scope}-a"), format!("{scope}-b"));
    let _cleanup = Policies(vec![a.clone(), b.clone(), format!("{scope}-bad")]);
    for name in [&a, &b] {
        apply(&format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {name}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}}}}}\n    lifecycle: {{}}\n"
        ));
    }
    wait_for("both policies Conflicting, naming each other", T, || async {
        let (sa, sb) = (policy_status(&client, &a).await, policy_status(&client, &b).await);
        let conflicting = |s: &serde_json::Value, other: &str| {
            s["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Conflicting"
                        && c["status"] == "True"
                        && c["message"].as_str().is_some_and(|m| m.contains(other))
                })
            })
        };
        if conflicting(&sa, &b) && conflicting(&sb, &a) && sa["nodes"] == 1 && sb["nodes"] == 0 {
            Ok(())
        } else {
            Err(format!("{sa} {sb}"))
        }
    })
    .await;
}

#[test]
fn kwoks_stage_sets_import_with_every_field_mapped_or_reported() {
    let stages = kwok_pools_test_support::kwok_stages();
    // (set, exit code without --allow-partial: 1 when some field is reported not mapped)
    let sets = [
        ("fast", 0),
        ("node/fast", 0),
        ("node/heartbeat", 0),
        ("node/heartbeat-with-lease", 0),
        ("node/chaos", 0),
        ("pod/fast", 0),
        ("pod/general", 1),
        ("pod/chaos", 0),
        ("volume/fast", 1),
    ];
    for (set, code) in sets {
        let out = Command::new(kwok_pools_bin()).args(["stage", "import"]).arg(stages.join(set)).output().unwrap();
        let report = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{set}:\n{report}");
        // Every line names its file and stage (or the file), and says mapped or not.
        for line in report.lines().filter(|l| l.contains(": Stage ")) {
            assert!(line.contains(": mapped: ") || line.contains(": NOT MAPPED: "), "{line}");
        }
        let written = Command::new(kwok_pools_bin())
            .args(["stage", "import", "--allow-partial"])
            .arg(stages.join(set))
            .output()
            .unwrap();
        assert!(written.status.success(), "{set}: {}", String::from_utf8_lossy(&written.stderr));
        let yaml = String::from_utf8(written.stdout).unwrap();
        if !yaml.trim().is_empty() {
            // The API server takes every imported policy as it is (schema, CEL and webhook).
            let out = kubectl_stdin(&["apply", "--server-side", "--dry-run=server", "-f", "-"], Some(&yaml));
            assert!(out.status.success(), "{set}: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
        }
    }
    // What kwok's fast set (kwokctl's default) becomes.
    let out = Command::new(kwok_pools_bin()).args(["stage", "import"]).arg(stages.join("fast")).output().unwrap();
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(
        yaml.contains("statusReportInterval: 600s") && yaml.contains("jobRunTime:") && yaml.contains("exitDelay:"),
        "{yaml}"
    );
    // A kind it does not simulate is named as such.
    let out =
        Command::new(kwok_pools_bin()).args(["stage", "import"]).arg(stages.join("volume/fast")).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PersistentVolumeClaim: kwok-pools does not simulate this kind")
    );
}

#[tokio::test]
async fn kwoks_node_chaos_label_makes_a_node_not_ready_until_it_is_removed() {
    let client = client().await;
    let scope = unique("nodechaos");
    let _op = Operator::start(&scope, &[]);
    let name = format!("{scope}-0");
    apply(&hand_made_node(&name, &scope, ""));
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("the node Ready", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) { Ok(()) } else { Err(ready_condition(&n)) }
    })
    .await;
    kubectl_ok(&[
        "annotate",
        "node",
        &name,
        "node-not-ready.stage.kwok.x-k8s.io/type=KernelDeadlock",
        "node-not-ready.stage.kwok.x-k8s.io/reason=DiskGone",
    ]);
    kubectl_ok(&["label", "node", &name, "node-not-ready.stage.kwok.x-k8s.io=true"]);
    let hit = wait_for("Ready=False with the chaos's reason, and its condition True", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready").cloned());
        match (ready, condition(&n, "KernelDeadlock")) {
            (Some(r), Some(k)) if r.status == "False" && r.reason.as_deref() == Some("DiskGone") && k == "True" => {
                Ok(n)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = hit.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap().message;
    assert_eq!(message.as_deref(), Some("node failed"), "kwok's default message");
    // The node heartbeats on (Ready=False, not Unknown): its lease is renewed.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(
        condition(&nodes.get(&name).await.unwrap(), "Ready").as_deref(),
        Some("False"),
        "not Unknown: it still reports"
    );
    kubectl_ok(&["label", "node", &name, "node-not-ready.stage.kwok.x-k8s.io-"]);
    wait_for("Ready again once the label is gone", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) { Ok(()) } else { Err(ready_condition(&n)) }
    })
    .await;
    delete_quietly("node", &name);
}

#[tokio::test]
async fn a_node_policy_gives_hand_made_nodes_devices_the_scheduler_allocates() {
    use kwok_pools_test_support::devices::{claim_template, claiming};
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-dev").await;
    let scope = unique("poldev");
    let _op = Operator::start(&scope, &[]);
    // Two nodes as an autoscaler makes them, one of the instance type the policy selects.
    let (gpu, plain) = (format!("{scope}-p4d-0"), format!("{scope}-m5-0"));
    apply(&hand_made_node(&gpu, &scope, ", node.kubernetes.io/instance-type: p4d.24xlarge"));
    apply(&hand_made_node(&plain, &scope, ", node.kubernetes.io/instance-type: m5.large"));
    let (policy, driver) = (format!("{scope}-gpus"), format!("{scope}.gpu.example.com"));
    let _cleanup = Policies(vec![policy.clone()]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {policy}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}, node.kubernetes.io/instance-type: p4d.24xlarge}}}}\n    devices: [{{driver: {driver}, count: 2, capacity: {{memory: 80Gi}}}}]\n"
    ));
    let slices: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(client.clone());
    let published = wait_for("the selected node's ResourceSlice", T, || async {
        let list = slices.list(&Default::default()).await.map_err(|e| e.to_string())?;
        let ours: Vec<_> = list.items.into_iter().filter(|s| s.spec.driver == driver).collect();
        if ours.is_empty() { Err("none yet".into()) } else { Ok(ours) }
    })
    .await;
    assert!(published.iter().all(|s| s.spec.node_name.as_deref() == Some(gpu.as_str())), "only the selected node");
    let devices: usize = published.iter().map(|s| s.spec.devices.as_ref().map_or(0, Vec::len)).sum();
    assert_eq!(devices, 2);
    // The real scheduler allocates claims on them: two pods land on the GPU node, a third waits.
    apply(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {scope}}}\nspec:\n  selectors:\n  - cel: {{expression: \"device.driver == '{driver}'\"}}\n"
    ));
    apply(&claim_template(&ns.name, "one", &scope, ""));
    apply(&claiming("trainer", &ns.name, &scope, 3, "one"));
    wait_for("two claiming pods Running on the GPU node, one Pending", T, || async {
        let pods = list_pods(&client, &ns.name, "app=trainer").await;
        let running: Vec<_> = pods.iter().filter(|p| phase(p) == "Running").collect();
        let on_gpu = running.iter().all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(gpu.as_str()));
        let pending = pods.iter().filter(|p| phase(p) == "Pending").count();
        if running.len() == 2 && on_gpu && pending == 1 {
            Ok(())
        } else {
            Err(format!("{} running, {pending} pending", running.len()))
        }
    })
    .await;
    delete_quietly("deviceclass", &scope);
    for n in [&gpu, &plain] {
        delete_quietly("node", n);
    }
}

/// When a pod started Running, seconds after it was created.
fn started_after(p: &Pod) -> Option<f64> {
    let created = p.metadata.creation_timestamp.as_ref()?.0;
    let running = p.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?;
    let at = running
        .running
        .as_ref()
        .and_then(|r| r.started_at.as_ref())
        .or_else(|| running.terminated.as_ref()?.started_at.as_ref())?
        .0;
    Some((at.as_millisecond() - created.as_millisecond()) as f64 / 1000.0)
}

/// How long its first container ran, from its terminated state.
fn containers_ran(p: &Pod) -> Option<f64> {
    let t = p.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.clone()?;
    Some((t.finished_at?.0.as_millisecond() - t.started_at?.0.as_millisecond()) as f64 / 1000.0)
}

#[tokio::test]
async fn delays_read_from_each_pods_annotation_as_kwoks_duration_from() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pol-from").await;
    let scope = unique("from");
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let policy = format!("{scope}-replay");
    let _cleanup = Policies(vec![policy.clone()]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {policy}}}\nspec:\n  pods:\n    selector: {{matchLabels: {{replay: {scope}}}}}\n    lifecycle:\n      startDelay: {{fromAnnotation: replay.example.com/start-after}}\n      runTime: {{fromAnnotation: replay.example.com/ran-for, fixed: 10m}}\n"
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let until = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(25);
    let pod = |name: &str, annotations: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{replay: {scope}}}, annotations: {{{annotations}}}}}\nspec:\n  restartPolicy: Never\n  nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists}}]\n  containers: [{{name: c, image: busybox}}]\n",
            ns = ns.name
        )
    };
    apply(&pod("short", "replay.example.com/ran-for: 5s"));
    apply(&pod("until", &format!("replay.example.com/ran-for: '{until}'")));
    apply(&pod("late", "replay.example.com/start-after: 12s, replay.example.com/ran-for: 4s"));
    apply(&pod("plain", ""));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for name in ["short", "until", "late"] {
        wait_for(&format!("pod {name} Succeeded"), T, || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            if phase(&p) == "Succeeded" { Ok(()) } else { Err(phase(&p)) }
        })
        .await;
    }
    let get = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.unwrap() }
    };
    let short = ran_for(&get("short").await).unwrap();
    assert!((4.0..10.0).contains(&short), "a duration: ran {short}s for its 5s");
    let until_pod = get("until").await;
    let ended = until_pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref()?.first()?.state.clone()?.terminated?.finished_at)
        .unwrap()
        .0;
    let off = (ended.as_millisecond() - until.as_millisecond()).abs();
    assert!(off < 4000, "a time: it ended at {ended}, {off} ms from the annotation's {until}");
    let late = get("late").await;
    let (started, ran) = (started_after(&late).unwrap(), containers_ran(&late).unwrap());
    assert!(started >= 11.0, "its start waited the annotation's 12s: started after {started}s");
    assert!((3.0..9.0).contains(&ran), "then ran its own 4s: {ran}s");
    // A pod without the annotations takes the fallbacks: no start delay, a ten-minute run.
    let plain = get("plain").await;
    assert_eq!(phase(&plain), "Running", "the fallback run time is ten minutes");
    assert!(started_after(&plain).unwrap() < 8.0, "no start delay without the annotation");
}

/// `kubectl top nodes NAME`: (CPU millicores, memory MiB).
fn top_node(name: &str) -> Result<(u64, u64), String> {
    let out =
        Command::new("kubectl").args(["top", "nodes", name, "--no-headers"]).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let w: Vec<&str> = text.split_whitespace().collect();
    let num = |s: Option<&&str>, unit: &str| s.and_then(|s| s.strip_suffix(unit)).and_then(|n| n.parse::<u64>().ok());
    match (num(w.get(1), "m"), w.iter().skip(2).find_map(|x| num(Some(x), "Mi"))) {
        (Some(cpu), Some(mem)) => Ok((cpu, mem)),
        _ => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
    }
}

#[tokio::test]
async fn hand_made_nodes_get_a_policys_usage_and_flapping() {
    let client = client().await;
    let scope = unique("poluse");
    let _op = Operator::start(&scope, &[]);
    let (busy, flaky) = (format!("{scope}-busy-0"), format!("{scope}-flaky-0"));
    apply(&hand_made_node(&busy, &scope, ", role: busy"));
    apply(&hand_made_node(&flaky, &scope, ", role: flaky"));
    let (usage, flap) = (format!("{scope}-usage"), format!("{scope}-flap"));
    let _cleanup = Policies(vec![usage.clone(), flap.clone()]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {usage}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}, role: busy}}}}\n    lifecycle: {{usage: {{cpu: 300m, memory: 2Gi}}}}\n---\napiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {flap}}}\nspec:\n  nodes:\n    selector: {{matchLabels: {{{SCOPE_LABEL}: {scope}, role: flaky}}}}\n    lifecycle: {{notReadyPercent: 100, notReadyFor: {{fixed: 45s}}, every: 90s}}\n"
    ));
    // metrics-server scrapes the simulated kubelet of a node no pool made: the policy's usage.
    let (cpu, mem) = wait_for("kubectl top nodes for the busy node", T, || async {
        let (cpu, mem) = top_node(&busy)?;
        if cpu.abs_diff(300) <= 5 && mem.abs_diff(2048) <= 2 { Ok((cpu, mem)) } else { Err(format!("{cpu}m {mem}Mi")) }
    })
    .await;
    assert!(cpu.abs_diff(300) <= 5 && mem.abs_diff(2048) <= 2);
    // The flaky node goes away in its window and comes back, the controller manager's taint
    // following; the busy one stays Ready throughout.
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = |n: &Node| condition(n, "Ready").as_deref() == Some("True");
    wait_for("the flaky node NotReady, tainted", Duration::from_secs(180), || async {
        let n = nodes.get(&flaky).await.map_err(|e| e.to_string())?;
        let tainted = has_taint(&n, "node.kubernetes.io/unreachable") || has_taint(&n, "node.kubernetes.io/not-ready");
        if !ready(&n) && tainted { Ok(()) } else { Err(format!("Ready {:?}", condition(&n, "Ready"))) }
    })
    .await;
    assert!(ready(&nodes.get(&busy).await.unwrap()), "the busy node is not in the flapping policy");
    wait_for("the flaky node back, untainted", Duration::from_secs(120), || async {
        let n = nodes.get(&flaky).await.map_err(|e| e.to_string())?;
        let tainted = has_taint(&n, "node.kubernetes.io/unreachable") || has_taint(&n, "node.kubernetes.io/not-ready");
        if ready(&n) && !tainted { Ok(()) } else { Err(format!("Ready {:?}", condition(&n, "Ready"))) }
    })
    .await;
    for n in [&busy, &flaky] {
        delete_quietly("node", n);
    }
}
