//! A NodePool's own heartbeat (`spec.lifecycle.nodes.heartbeat`), end to end: its nodes'
//! Leases carry its lease duration and are renewed on its cadence, its status reports come at
//! its interval, a change reaches the existing Leases on their next renewal, the nodes stay
//! Ready throughout, and a value outside the range is refused with the field named.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kwok_pools_test_support::pools::{is_ready, pool_nodes, scoped_nodepool, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

fn heartbeat(lease: u32, status: &str) -> String {
    format!(
        "  lifecycle:\n    nodes:\n      heartbeat: {{leaseDurationSeconds: {lease}, statusReportInterval: {status}}}\n"
    )
}

/// The leaseDurationSeconds of each of the pool's node Leases.
async fn durations(client: &kube::Client, pool: &str, n: usize) -> Vec<i32> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut out = Vec::new();
    for i in 0..n {
        let lease = api.get_opt(&format!("{pool}-{i}")).await.ok().flatten();
        out.push(lease.and_then(|l| l.spec).and_then(|s| s.lease_duration_seconds).unwrap_or(0));
    }
    out
}

/// The Ready condition's lastHeartbeatTime of node `name`.
async fn heartbeat_time(client: &kube::Client, name: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(name).await.ok()?;
    let ready = node.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
    ready.last_heartbeat_time.map(|t| t.0.to_string())
}

#[tokio::test]
async fn a_pools_heartbeat_sets_its_leases_and_status_reports_and_keeps_its_nodes_ready() {
    let client = client().await;
    let scope = unique("beat");
    let (own, plain) = (format!("{scope}-own"), format!("{scope}-plain"));
    let _op = Operator::start(&scope, &[]);
    apply(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(16, "2s")));
    apply(&scoped_nodepool(&plain, &scope, 2, "10.233.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &own, 2, T).await;
    wait_ready_nodes(&client, &plain, 2, T).await;

    // Its Leases carry its duration; the other pool's, the operator's (20 s in these tests).
    wait_for("the pools' lease durations", T, || async {
        let (a, b) = (durations(&client, &own, 2).await, durations(&client, &plain, 2).await);
        if a == [16, 16] && b == [20, 20] { Ok(()) } else { Err(format!("{a:?} {b:?}")) }
    })
    .await;

    // Its status reports every 2 s: the Ready condition's heartbeat time moves several times
    // in 10 s, with nothing else changing.
    let node = format!("{own}-0");
    let mut seen = HashSet::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(t) = heartbeat_time(&client, &node).await {
            seen.insert(t);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(seen.len() >= 3, "status reports in 10 s: {seen:?}");

    // A change reaches the existing Leases on their next renewal.
    apply(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(12, "30s")));
    wait_for("the new lease duration on the existing Leases", T, || async {
        let a = durations(&client, &own, 2).await;
        if a == [12, 12] { Ok(()) } else { Err(format!("{a:?}")) }
    })
    .await;
    // Ready all along, for a whole grace period: the controller manager never saw a lease lapse.
    let start = Instant::now();
    while start.elapsed() < node_grace_period() {
        for pool in [&own, &plain] {
            let nodes = pool_nodes(&client, pool).await;
            let ready = nodes.iter().filter(|n| is_ready(n)).count();
            assert_eq!(ready, 2, "{pool}: {ready} of 2 Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Out of range: refused, the field named.
    let out = kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(5, "30s"))),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("leaseDurationSeconds"), "{err}");
    kubectl_ok(&["delete", "nodepool", &own, &plain, "--wait=false"]);
}
