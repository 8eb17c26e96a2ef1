//! Nodes that behave as cloud instances, on the real control plane (`spec.lifecycle.nodes`):
//! they boot (NotReady, then Ready in the drawn window, pods waiting for them), some never
//! launch (reported and replaced until the pool has its count), spot nodes get interrupted
//! (notice, the kubelet's graceful shutdown, the node gone and replaced, the Deployment's pods
//! recreated elsewhere), and a zone goes down at once (the node lifecycle controller sees the
//! zone's state change).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(180);

/// Deletes the NodePool when dropped, pass or fail.
struct PoolCleanup(String);

impl Drop for PoolCleanup {
    fn drop(&mut self) {
        delete_quietly("nodepool", &self.0);
    }
}

fn condition(node: &Node, type_: &str) -> Option<(String, String, String)> {
    let c = node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| t.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

fn seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

fn created(node: &Node) -> f64 {
    node.metadata.creation_timestamp.as_ref().map(seconds).unwrap_or_default()
}

fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

/// A Deployment of `replicas` pods on the scope's nodes (they tolerate only the fake-node taint).
fn deployment(name: &str, ns: &str, scope: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n      terminationGracePeriodSeconds: 5\n      containers: [{{name: app, image: nginx}}]\n"
    )
}

async fn wait_available(client: &kube::Client, ns: &str, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{replicas} pods of {name} available"), T, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        let available = d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0);
        if available == replicas { Ok(()) } else { Err(format!("{available} available")) }
    })
    .await;
}

/// Warning events about `node` with `reason` (events.k8s.io, in `default`).
async fn node_events(client: &kube::Client, node: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let events = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    events
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

#[tokio::test]
async fn booting_nodes_are_not_ready_then_ready_in_their_window_and_pods_wait_for_them() {
    let client = client().await;
    let scope = unique("boot");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "boot").await;
    let pool = format!("{scope}-pool");
    let _cleanup = PoolCleanup(pool.clone());
    let knobs = "  lifecycle:\n    nodes:\n      boot:\n        after: {min: 30s, max: 60s}\n        startupTaints: [{key: example.com/agent-not-ready, effect: NoSchedule}]\n";
    apply(&NodePoolYaml::new(&pool, &scope).count(3).spec(knobs).yaml());
    apply(&deployment("web", &ns.name, &scope, 4));

    // At first: NotReady with the kubelet's reason, the API server's not-ready taint and the
    // startup taint; `kubectl get nodes` says so; no pod is placed.
    let nodes = wait_for("3 booting nodes", Duration::from_secs(30), || async {
        let nodes = pool_nodes(&client, &pool).await;
        if nodes.len() == 3 { Ok(nodes) } else { Err(format!("{} nodes", nodes.len())) }
    })
    .await;
    for n in &nodes {
        let (status, reason, message) = condition(n, "Ready").expect("a Ready condition from birth");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "KubeletNotReady"), "{message}");
        assert!(message.contains("cni plugin not initialized"), "the kubelet's network message: {message}");
        let taints = taint_keys(n);
        assert!(taints.contains(&"node.kubernetes.io/not-ready".to_string()), "{taints:?}");
        assert!(taints.contains(&"example.com/agent-not-ready".to_string()), "{taints:?}");
    }
    let table = kubectl_ok(&["get", "nodes", "-l", &format!("pools.kwok.x-k8s.io/pool={pool}"), "--no-headers"]);
    assert_eq!(table.lines().filter(|l| l.split_whitespace().nth(1) == Some("NotReady")).count(), 3, "{table}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let placed =
        |list: &[Pod]| list.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let early = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(placed(&early), 0, "no pod lands on a booting node");

    // Each node Ready between 30 and 60 s after its creation (a few seconds' slack for the
    // write and this poll).
    let ready_after: RefCell<HashMap<String, f64>> = RefCell::new(HashMap::new());
    wait_for("every node Ready after its boot", T, || async {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        let nodes = pool_nodes(&client, &pool).await;
        let mut ready_after = ready_after.borrow_mut();
        for n in nodes.iter().filter(|n| is_ready(n)) {
            ready_after.entry(n.metadata.name.clone().unwrap()).or_insert(now - created(n));
        }
        if ready_after.len() == 3 { Ok(()) } else { Err(format!("{ready_after:?}")) }
    })
    .await;
    let ready_after = ready_after.into_inner();
    eprintln!("nodes Ready after: {ready_after:?}");
    for (name, after) in &ready_after {
        assert!((29.0..=68.0).contains(after), "{name} Ready {after:.1}s after its creation, not in 30–60 s");
    }
    wait_for("startup taints removed", T, || async {
        let nodes = pool_nodes(&client, &pool).await;
        let left: Vec<Vec<String>> =
            nodes.iter().map(taint_keys).filter(|t| t.iter().any(|k| k.starts_with("example.com/"))).collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    })
    .await;
    wait_available(&client, &ns.name, "web", 4).await;
    // Every pod was placed after its node turned Ready.
    let ready_at: HashMap<String, f64> = pool_nodes(&client, &pool)
        .await
        .iter()
        .map(|n| {
            let c =
                n.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap();
            (n.metadata.name.clone().unwrap(), c.last_transition_time.as_ref().map(seconds).unwrap())
        })
        .collect();
    for p in pods.list(&ListParams::default()).await.unwrap().items {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        let scheduled =
            p.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "PodScheduled").unwrap();
        let at = scheduled.last_transition_time.as_ref().map(seconds).unwrap();
        assert!(
            at + 1.0 >= ready_at[&node],
            "{} placed at {at} before {node} was Ready at {}",
            p.metadata.name.unwrap(),
            ready_at[&node]
        );
    }
}

#[tokio::test]
async fn failed_launches_are_reported_and_replaced_until_the_pool_has_its_count() {
    let client = client().await;
    let scope = unique("launch");
    let _op = Operator::start(&scope, &[]);
    let pool = format!("{scope}-pool");
    let _cleanup = PoolCleanup(pool.clone());
    let knobs = "  lifecycle:\n    nodes:\n      launchFailures: {percent: 20, replaceAfter: 15s}\n";
    apply(&NodePoolYaml::new(&pool, &scope).count(30).spec(knobs).yaml());
    let uids: RefCell<BTreeMap<String, HashSet<String>>> = RefCell::default();
    let failed_seen: RefCell<HashSet<String>> = RefCell::default();
    let most_failed = std::cell::Cell::new(0);
    let pools: Api<kwok_pools::kinds::nodepool::NodePool> = Api::all(client.clone());
    wait_for("30 Ready nodes, the failed ones replaced", Duration::from_secs(300), || async {
        let nodes = pool_nodes(&client, &pool).await;
        for n in &nodes {
            let name = n.metadata.name.clone().unwrap();
            uids.borrow_mut().entry(name.clone()).or_default().insert(n.metadata.uid.clone().unwrap());
            if let Some((status, reason, message)) = condition(n, "LaunchFailed") {
                assert_eq!(status, "True");
                assert!(["InstanceLaunchFailed", "ReplacementDue"].contains(&reason.as_str()), "{reason}");
                assert!(message.contains("launchFailures"), "{message}");
                assert!(!is_ready(n), "a failed launch never becomes Ready");
                failed_seen.borrow_mut().insert(name);
            }
        }
        let status = pools.get(&pool).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        most_failed.set(most_failed.get().max(status.pool.failed_replicas));
        let ready = nodes.iter().filter(|n| is_ready(n)).count();
        if ready == 30 && nodes.len() == 30 && status.pool.ready_replicas == 30 {
            Ok(())
        } else {
            Err(format!("{ready} Ready of {}, status failed {}", nodes.len(), status.pool.failed_replicas))
        }
    })
    .await;
    let (uids, failed_seen, most_failed) = (uids.into_inner(), failed_seen.into_inner(), most_failed.get());
    eprintln!("failed launches seen: {} nodes; the pool reported at most {most_failed} at once", failed_seen.len());
    assert!(!failed_seen.is_empty(), "20% of 30 nodes (and their replacements): some must fail");
    assert!(most_failed > 0, "the pool's status counts failed launches (failedReplicas)");
    for name in &failed_seen {
        assert!(
            uids[name].len() >= 2,
            "{name} failed and was replaced by a new node of the same name: {:?}",
            uids[name]
        );
    }
    let name = failed_seen.iter().next().unwrap();
    let events = wait_for("the LaunchFailed event", Duration::from_secs(30), || async {
        let e = node_events(&client, name, "LaunchFailed").await;
        if e.is_empty() { Err("none".to_string()) } else { Ok(e) }
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
}

#[tokio::test]
async fn interrupted_spot_nodes_end_their_pods_and_the_pool_and_deployment_recover() {
    let client = client().await;
    let scope = unique("spot");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "spot").await;
    let pool = format!("{scope}-pool");
    let _cleanup = PoolCleanup(pool.clone());
    let capacity = "  capacity: {spotPercent: 100, spotPrice: '0.031', onDemandPrice: '0.096'}\n";
    let knobs = "  lifecycle:\n    nodes:\n      interruptions: {every: 90s, notice: 10s, shutdownGracePeriod: 10s, spotOnly: true}\n";
    let yaml = |with: &str| NodePoolYaml::new(&pool, &scope).count(4).spec(capacity).spec(with).yaml();
    apply(&yaml(knobs));
    apply(&deployment("web", &ns.name, &scope, 8));
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    // The notice: the taint and a Warning event on the node.
    let (victim, uid) = wait_for("an interruption notice", Duration::from_secs(240), || async {
        for n in pool_nodes(&client, &pool).await {
            if taint_keys(&n).contains(&"pools.kwok.x-k8s.io/interruption".to_string()) {
                return Ok((n.metadata.name.clone().unwrap(), n.metadata.uid.clone().unwrap()));
            }
        }
        Err("no node noticed yet".to_string())
    })
    .await;
    let noticed = Instant::now();
    let on_victim: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str()) && phase(p) == "Running"
        })
        .map(|p| p.metadata.name.unwrap())
        .collect();
    eprintln!("{victim} noticed with {} running pods", on_victim.len());
    let events = wait_for("the InterruptionNotice event", Duration::from_secs(30), || async {
        let e = node_events(&client, &victim, "InterruptionNotice").await;
        if e.is_empty() { Err("none".to_string()) } else { Ok(e) }
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));

    // The shutdown: every running pod of the node ends Failed, `Terminated`, with the kubelet's
    // message and DisruptionTarget; then the node is deleted.
    let ended: RefCell<HashSet<String>> = RefCell::default();
    wait_for("the victim's pods Terminated and the node gone", Duration::from_secs(90), || async {
        for p in pods.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items {
            let name = p.metadata.name.clone().unwrap();
            if !on_victim.contains(&name) || phase(&p) != "Failed" {
                continue;
            }
            let s = p.status.as_ref().unwrap();
            assert_eq!(s.reason.as_deref(), Some("Terminated"), "{name}");
            assert_eq!(s.message.as_deref(), Some("Pod was terminated in response to imminent node shutdown."));
            let dt = s
                .conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "DisruptionTarget")
                .expect("DisruptionTarget");
            assert_eq!((dt.status.as_str(), dt.reason.as_deref()), ("True", Some("TerminationByKubelet")));
            ended.borrow_mut().insert(name);
        }
        let gone = nodes
            .get_opt(&victim)
            .await
            .map_err(|e| e.to_string())?
            .is_none_or(|n| n.metadata.uid.as_deref() != Some(uid.as_str()));
        let ended = ended.borrow().len();
        if gone && ended == on_victim.len() {
            Ok(())
        } else {
            Err(format!("{ended} of {} pods ended, node gone: {gone}", on_victim.len()))
        }
    })
    .await;
    let took = noticed.elapsed().as_secs_f64();
    // The notice is cut short when the interruption falls within 10 s of the node coming up
    // (it never precedes the node), so only the shutdown's 10 s are sure (less polling slack).
    assert!(took >= 9.0, "gone after the shutdown grace period (10 s), not before: {took:.1}s");

    // Interruptions off: the pool returns to its count and the Deployment to its replicas.
    apply(&yaml(""));
    wait_ready_nodes(&client, &pool, 4, T).await;
    wait_available(&client, &ns.name, "web", 8).await;
    for n in pool_nodes(&client, &pool).await {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("karpenter.sh/capacity-type").map(String::as_str), Some("spot"));
        assert_eq!(labels.get("pools.kwok.x-k8s.io/price-per-hour").map(String::as_str), Some("0.031"));
    }
}

#[tokio::test]
async fn a_zone_outage_takes_its_nodes_down_together_and_the_controller_manager_sees_the_zone() {
    let client = client().await;
    let scope = unique("zone");
    let _op = Operator::start(&scope, &[]);
    let pool = format!("{scope}-pool");
    let _cleanup = PoolCleanup(pool.clone());
    let zone = |z: &str| format!("{scope}-{z}");
    let spec = format!(
        "  topology: {{region: {scope}, zones: [{}, {}, {}]}}\n  lifecycle:\n    nodes:\n      outage: {{after: {{fixed: 25s}}, lasts: {{fixed: 60s}}, scope: {{values: [{}]}}}}\n",
        zone("a"),
        zone("b"),
        zone("c"),
        zone("c")
    );
    apply(&NodePoolYaml::new(&pool, &scope).count(6).spec(&spec).yaml());
    wait_ready_nodes(&client, &pool, 6, Duration::from_secs(60)).await;
    let zone_of = |n: &Node| n.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"].clone();
    // A third of the nodes (zone c's two) go silent together; the others stay Ready.
    wait_for("zone c's nodes Unknown, the others Ready", Duration::from_secs(120), || async {
        let nodes = pool_nodes(&client, &pool).await;
        let states: Vec<(String, String)> =
            nodes.iter().map(|n| (zone_of(n), condition(n, "Ready").map(|c| c.0).unwrap_or_default())).collect();
        let down = states.iter().filter(|(z, s)| *z == zone("c") && s == "Unknown").count();
        let up = states.iter().filter(|(z, s)| *z != zone("c") && s == "True").count();
        assert_eq!(up + states.iter().filter(|(z, _)| *z == zone("c")).count(), 6, "only zone c goes: {states:?}");
        if down == 2 { Ok(()) } else { Err(format!("{states:?}")) }
    })
    .await;
    let log = kubeconfig().parent().unwrap().join("logs").join("kube-controller-manager.log");
    // The zone's states in the order the controller manager logged them.
    let states = || -> Vec<String> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("zone is now in new state") && l.contains(&zone("c")))
            .filter_map(|l| ["FullDisruption", "PartialDisruption", "Normal"].into_iter().find(|s| l.contains(s)))
            .map(String::from)
            .collect()
    };
    let seen = |state: &str| states().contains(&state.to_string());
    wait_for("the controller manager's FullDisruption of zone c", Duration::from_secs(30), || async {
        if seen("FullDisruption") { Ok(()) } else { Err(format!("not in {}", log.display())) }
    })
    .await;
    wait_for("zone c back Ready", Duration::from_secs(120), || async {
        let nodes = pool_nodes(&client, &pool).await;
        if nodes.iter().all(is_ready) { Ok(()) } else { Err("not yet".to_string()) }
    })
    .await;
    wait_for("the controller manager's zone c back to Normal", Duration::from_secs(30), || async {
        let all = states();
        let down = all.iter().position(|s| s == "FullDisruption");
        if down.is_some_and(|i| all[i..].contains(&"Normal".to_string())) { Ok(()) } else { Err(format!("{all:?}")) }
    })
    .await;
}

#[tokio::test]
async fn the_cloud_sample_boots_labelled_nodes_over_its_zones() {
    let client = client().await;
    let scope = unique("cloudsample");
    let _op = Operator::start(&scope, &[]);
    let sample = scoped_sample(&read_repo_file("samples/nodepool-cloud.yaml"), &scope);
    let pool = format!("{scope}-cloud");
    let _cleanup = PoolCleanup(pool.clone());
    apply(&sample.replace("name: nodepool-cloud", &format!("name: {pool}")));
    let nodes = wait_for("6 booting nodes", Duration::from_secs(30), || async {
        let nodes = pool_nodes(&client, &pool).await;
        if nodes.len() == 6 { Ok(nodes) } else { Err(format!("{} nodes", nodes.len())) }
    })
    .await;
    assert!(nodes.iter().all(|n| !is_ready(n)), "born booting");
    // Ready within the boot window, or replaced after a failed launch (2 minutes) — and a
    // replacement fails again one time in twenty (each launch is drawn anew): room for up to
    // four launches of one node (6 × 0.05⁴ of runs would need more).
    wait_ready_nodes(&client, &pool, 6, Duration::from_secs(600)).await;
    let nodes = pool_nodes(&client, &pool).await;
    let label = |n: &Node, k: &str| n.metadata.labels.as_ref().unwrap().get(k).cloned().unwrap_or_default();
    let spot = nodes.iter().filter(|n| label(n, "karpenter.sh/capacity-type") == "spot").count();
    assert_eq!(spot, 2, "34% of 6 nodes spread by index");
    for n in &nodes {
        let price = if label(n, "karpenter.sh/capacity-type") == "spot" { "0.058" } else { "0.192" };
        assert_eq!(label(n, "pools.kwok.x-k8s.io/price-per-hour"), price);
        assert!(label(n, "topology.kubernetes.io/zone").starts_with("sim-zone-"));
    }
    wait_for("the startup taint gone from every node", Duration::from_secs(30), || async {
        let tainted = pool_nodes(&client, &pool)
            .await
            .iter()
            .filter(|n| taint_keys(n).contains(&"node.cilium.io/agent-not-ready".to_string()))
            .count();
        if tainted == 0 { Ok(()) } else { Err(format!("{tainted} nodes")) }
    })
    .await;
}
