//! A NodePool's own heartbeat (`spec.lifecycle.nodes.heartbeat`), end to end: its nodes'
//! Leases carry its lease duration and are renewed on its cadence, its status reports come at
//! its interval, a change reaches the existing Leases on their next renewal, the nodes stay
//! Ready throughout, and a value outside the range is refused with the field named.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kwok_pools_test_support::pools::{is_ready, pool_nodes, scoped_nodepool, scoped_podpool, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
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

/// What the recorder saw: each node's distinct lease renew times (seconds since the epoch,
/// with when the test saw them), and every node seen NotReady after it was first Ready.
#[derive(Default)]
struct Seen {
    renewals: std::collections::HashMap<String, Vec<(f64, Instant)>>,
    not_ready: HashSet<String>,
}

/// Polls the pool's Leases and Nodes twice a second until aborted.
fn record(client: kube::Client, pool: String, n: usize) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        loop {
            for i in 0..n {
                let name = format!("{pool}-{i}");
                let renew = leases.get_opt(&name).await.ok().flatten().and_then(|l| l.spec?.renew_time);
                if let Some(t) = renew {
                    let secs = t.0.as_millisecond() as f64 / 1000.0;
                    let mut s = out.lock().unwrap();
                    let list = s.renewals.entry(name).or_default();
                    if list.last().is_none_or(|(last, _)| *last != secs) {
                        list.push((secs, Instant::now()));
                    }
                }
            }
            for node in pool_nodes(&client, &pool).await {
                if !is_ready(&node) {
                    out.lock().unwrap().not_ready.insert(node.metadata.name.clone().unwrap_or_default());
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    (seen, task)
}

/// The gaps between successive renewals whose later one the test saw within `from..to`.
fn gaps(seen: &Seen, from: Instant, to: Instant) -> Vec<f64> {
    let mut out = Vec::new();
    for list in seen.renewals.values() {
        for w in list.windows(2) {
            if w[1].1 >= from && w[1].1 <= to {
                out.push(w[1].0 - w[0].0);
            }
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

fn median(v: &[f64]) -> f64 {
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// An API server slowed on purpose (every request 300 ms longer, through a proxy) while a
/// PodPool's pods flood the simulator's writes: lease renewals stretch past the kubelet's
/// cadence (the workload gets the writes), no node goes NotReady, and once the API server
/// has room again renewals come back to the cadence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_yield_to_a_saturated_api_server_and_no_node_goes_not_ready() {
    let client = client().await;
    let scope = unique("yield");
    let (pool, app) = (format!("{scope}-np"), format!("{scope}-app"));
    let ns = TestNamespace::new(&client, "yield").await;
    let proxy =
        kwok_pools_test_support::proxy::Proxy::start(kwok_pools_test_support::proxy::api_server(&kubeconfig())).await;
    let dir = tempfile::tempdir().unwrap();
    let via_proxy = proxy.kubeconfig(&kubeconfig(), dir.path());
    // A small write budget (3 places for pod writes, 1 kept for heartbeats), one replica.
    let flags = ["--no-shard", "--max-simulator-writes-in-flight", "4", "--no-webhook"];
    let mut op = Operator::start_as(&scope, &flags, via_proxy);
    op.wait_ready().await;
    // Leases as long as the cluster's grace period: the kubelet renews every quarter of it.
    let lease_secs = node_grace_period().as_secs() as u32;
    let cadence = f64::from(lease_secs) / 4.0;
    let nodes = 8;
    apply(&scoped_nodepool(&pool, &scope, nodes, "10.234.0.0/16", 24, 110, &heartbeat(lease_secs, "5m")));
    wait_ready_nodes(&client, &pool, nodes as usize, T).await;
    let (seen, recorder) = record(client.clone(), pool.clone(), nodes as usize);

    // With room: the kubelet's cadence.
    let calm = Instant::now();
    tokio::time::sleep(Duration::from_secs(4 * lease_secs as u64 / 4 + 2)).await;
    let before = gaps(&seen.lock().unwrap(), calm, Instant::now());
    assert!(!before.is_empty() && median(&before) <= cadence * 1.15, "gaps with room: {before:?}");

    // Slowed, and 500 pods to run: the simulator's pod writes queue behind it.
    proxy.slow_down(Duration::from_millis(150));
    let busy = Instant::now();
    apply(&scoped_podpool(&app, &ns.name, &scope, 500, "", "      containers: [{name: c, image: nginx}]\n"));
    let running = wait_for("500 pods Running through the slowed API server", Duration::from_secs(300), || async {
        let pods = kwok_pools_test_support::pools::list_pods(&client, &ns.name, &format!("app={app}")).await;
        let n = pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
        if n >= 500 { Ok(Instant::now()) } else { Err(format!("{n}/500 Running")) }
    })
    .await;
    let during = gaps(&seen.lock().unwrap(), busy + Duration::from_secs(5), running);
    let deferred = op.metric("kwok_pools_simulator_deferred_lease_renewals_total").await;
    eprintln!(
        "  renewal gaps (cadence {cadence} s): with room median {:.1} s, under load median {:.1} s (longest {:.1} s), {deferred} renewals put off",
        median(&before),
        median(&during),
        during.last().copied().unwrap_or(0.0)
    );
    assert!(deferred > 0.0, "renewals put off: {deferred}");
    assert!(median(&during) >= cadence * 1.5, "stretched gaps under load: {during:?} (cadence {cadence} s)");
    // Never past the share the monitor period and the margin leave (a renewal the controller
    // manager would take for a lapse).
    let longest = during.last().copied().unwrap_or(0.0);
    assert!(longest < f64::from(lease_secs) * 0.8, "longest gap {longest} s of a {lease_secs} s lease");

    // Room again: back to the cadence.
    proxy.slow_down(Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(lease_secs as u64 / 2)).await;
    let calm_again = Instant::now();
    tokio::time::sleep(Duration::from_secs(lease_secs as u64 + 2)).await;
    let after = gaps(&seen.lock().unwrap(), calm_again, Instant::now());
    assert!(!after.is_empty() && median(&after) <= cadence * 1.15, "gaps with room again: {after:?}");

    recorder.abort();
    let not_ready = seen.lock().unwrap().not_ready.clone();
    assert!(not_ready.is_empty(), "nodes seen NotReady: {not_ready:?}");
    assert_eq!(pool_nodes(&client, &pool).await.iter().filter(|n| is_ready(n)).count(), nodes as usize);
    kubectl_ok(&["delete", "podpool", &app, "-n", &ns.name, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}
