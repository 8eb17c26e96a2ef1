//! Bad node conditions from a NodePool's knobs, end to end: the seeded share of nodes reports
//! MemoryPressure (for good) and Ready=False (in windows) with the kubelet's reasons; the real
//! node lifecycle controller taints them, the real scheduler keeps pods off the pressured ones,
//! and the windowed ones come back Ready.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Node;
use kwok_pools::api::lifecycle::{BadCondition, NodeLifecycle};
use kwok_pools::kubelet::status::fate::plan_conditions;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

fn condition(n: &Node, type_: &str) -> (String, String) {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
        .unwrap_or_default()
}

fn tainted(n: &Node, key: &str) -> bool {
    n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

fn names(nodes: &[Node]) -> Vec<String> {
    nodes.iter().filter_map(|n| n.metadata.name.clone()).collect()
}

#[tokio::test]
async fn pressured_and_not_ready_nodes_are_tainted_avoided_and_come_back() {
    let client = client().await;
    let scope = unique("cond");
    let ns = TestNamespace::new(&client, "cond").await;
    let _op = Operator::start(&scope, &[]);
    let conditions = "{conditions: [{type: MemoryPressure, percent: 50}, {type: NotReady, percent: 50, lasts: {fixed: 12s}, every: 36s}]}";
    let knobs = format!("  lifecycle:\n    seed: 5\n    nodes: {conditions}\n");
    apply(&scoped_nodepool(&scope, &scope, 20, "10.220.0.0/16", 24, 110, &knobs));
    let nodes = wait_for("20 nodes", T, || async {
        let n = pool_nodes(&client, &scope).await;
        if n.len() == 20 { Ok(n) } else { Err(format!("{}", n.len())) }
    })
    .await;
    let settings: NodeLifecycle = serde_yaml::from_str(conditions).unwrap();
    let plans: Vec<(String, Vec<BadCondition>)> = names(&nodes)
        .into_iter()
        .map(|n| {
            let bad = plan_conditions(&settings, Some(5), &n, "").into_iter().map(|p| p.condition).collect();
            (n, bad)
        })
        .collect();
    let with = |c: BadCondition| -> BTreeSet<String> {
        plans.iter().filter(|(_, bad)| bad.contains(&c)).map(|(n, _)| n.clone()).collect()
    };
    let (pressured, flapping) = (with(BadCondition::MemoryPressure), with(BadCondition::NotReady));
    assert!(!pressured.is_empty() && pressured.len() < 20, "about half: {pressured:?}");
    assert!(!flapping.is_empty(), "about half: {flapping:?}");

    // For good: MemoryPressure=True with the kubelet's reason, and the controller's taint; the
    // other nodes report no pressure.
    wait_for("the memory-pressure taints", T, || async {
        let nodes = pool_nodes(&client, &scope).await;
        let tainted_now: BTreeSet<String> = nodes
            .iter()
            .filter(|n| tainted(n, "node.kubernetes.io/memory-pressure"))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        if tainted_now == pressured { Ok(()) } else { Err(format!("tainted {tainted_now:?}, want {pressured:?}")) }
    })
    .await;
    for n in pool_nodes(&client, &scope).await {
        let name = n.metadata.name.clone().unwrap();
        let (status, reason) = condition(&n, "MemoryPressure");
        if pressured.contains(&name) {
            assert_eq!((status.as_str(), reason.as_str()), ("True", "KubeletHasInsufficientMemory"), "{name}");
        } else {
            assert_eq!(status, "False", "{name}");
        }
    }

    // The scheduler keeps pods off the pressured nodes.
    apply(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: spread, namespace: {ns}}}
spec:
  replicas: 20
  selector: {{matchLabels: {{app: spread}}}}
  template:
    metadata: {{labels: {{app: spread}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: app, image: nginx, resources: {{requests: {{memory: 64Mi}}}}}}]
",
        ns = ns.name
    ));
    let placed = wait_for("20 pods placed", T, || async {
        let pods = list_pods(&client, &ns.name, "app=spread").await;
        let nodes: Vec<String> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
        if nodes.len() == 20 { Ok(nodes) } else { Err(format!("{} placed", nodes.len())) }
    })
    .await;
    let on_pressured: Vec<&String> = placed.iter().filter(|n| pressured.contains(*n)).collect();
    assert!(on_pressured.is_empty(), "pods on memory-pressure nodes: {on_pressured:?}");

    // In windows: Ready=False with the kubelet's reason (the node keeps heartbeating), tainted
    // not-ready, then Ready again. Two cycles see every flapping node go and come back.
    let (mut went, mut back, mut tainted_not_ready) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let start = Instant::now();
    let mut report = Instant::now();
    while start.elapsed() < Duration::from_secs(80) && back != flapping {
        for n in pool_nodes(&client, &scope).await {
            let name = n.metadata.name.clone().unwrap();
            let (status, reason) = condition(&n, "Ready");
            if status == "False" {
                assert_eq!(reason, "KubeletNotReady", "{name}");
                went.insert(name.clone());
            } else if status == "True" && went.contains(&name) {
                back.insert(name.clone());
            }
            if tainted(&n, "node.kubernetes.io/not-ready") {
                tainted_not_ready.insert(name);
            }
        }
        if report.elapsed() > Duration::from_secs(10) {
            eprintln!("  … {}s: Ready=False seen on {went:?}, back {back:?}", start.elapsed().as_secs());
            report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(went, flapping, "the seed's nodes report Ready=False");
    assert_eq!(back, flapping, "and come back Ready");
    assert!(
        !tainted_not_ready.is_empty() && tainted_not_ready.is_subset(&flapping),
        "the controller taints them not-ready: {tainted_not_ready:?} of {flapping:?}"
    );
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
