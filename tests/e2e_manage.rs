//! Which nodes the simulator manages. Alone in its own test binary: an operator started with
//! `--manage-all-nodes` touches every node of the cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use std::time::Duration;

/// The tests here change which nodes are simulated cluster-wide; they take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn an_unannotated_node_is_left_alone_unless_all_nodes_are_managed() {
    let _turn = SERIAL.lock().await;
    let client = client().await;
    let scope = unique("plain");
    let _op = Operator::start(&scope, &[]);
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("{scope}-plain");
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(SCOPE_LABEL.to_string(), scope.clone())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    // The scoped operator manages annotated nodes only: give it time to (not) act.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let n = nodes.get(&name).await.unwrap();
    assert_eq!(ready_condition(&n), "none", "an unannotated node is not simulated");
    assert!(lease(&client, &name).await.is_none(), "and gets no lease");

    let _all = Operator::start(&format!("{scope}-all"), &["--manage-all-nodes"]);
    wait_for("the node to become Ready under --manage-all-nodes", Duration::from_secs(60), || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) { Ok(()) } else { Err(ready_condition(&n)) }
    })
    .await;
    wait_lease(&client, &name).await;
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
}

#[test]
fn conflicting_manage_flags_are_refused() {
    let out = std::process::Command::new(kwok_pools_bin())
        .args(["run", "--manage-all-nodes", "--manage-single-node", "x"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("--manage-all-nodes conflicts with --manage-single-node"), "{msg}");
}

#[tokio::test]
async fn controllers_and_simulator_run_apart() {
    let _turn = SERIAL.lock().await;
    let client = client().await;
    let scope = unique("apart");
    // Controllers only: the nodes are made, but nobody plays kubelet.
    let _controllers = Operator::start(&scope, &["--no-simulator"]);
    let pool = scope.clone();
    apply(&nodepool_yaml(&pool, &scope, 2, ""));
    wait_for("2 nodes created", Duration::from_secs(60), || async {
        let n = pool_nodes(&client, &pool).await.len();
        if n == 2 { Ok(()) } else { Err(format!("{n} nodes")) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for n in pool_nodes(&client, &pool).await {
        assert!(!is_ready(&n), "no simulator, no Ready condition");
        assert!(lease(&client, n.metadata.name.as_deref().unwrap()).await.is_none(), "and no lease");
    }
    // The simulator alone (as a real kwok would) makes them Ready; the pool sees it.
    let _sim = Operator::simulator_only(
        &format!("{scope}-sim"),
        &["--manage-nodes-with-label-selector", &format!("{SCOPE_LABEL}={scope}")],
    );
    wait_ready_nodes(&client, &pool, 2, Duration::from_secs(60)).await;
    wait_pool_status(&client, &pool, 2, Duration::from_secs(60)).await;
    for n in pool_nodes(&client, &pool).await {
        wait_lease(&client, n.metadata.name.as_deref().unwrap()).await;
    }
}
