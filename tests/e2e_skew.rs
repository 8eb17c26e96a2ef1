//! Clock skew between replicas (Debian's `faketime`): three sharded simulators of one
//! instance, one's clock 15 s behind and one's 15 s ahead. Membership is judged by what each
//! replica has seen change, not by remote renew times against its own clock, so every node is
//! simulated by exactly one replica (never two, never none), no node goes NotReady and no two
//! pods share an address.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kwok_pools_test_support::pools::{
    is_ready, list_pods, pool_nodes, scoped_nodepool, scoped_podpool, wait_ready_nodes,
};
use kwok_pools_test_support::*;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// Which replica renews each node's Lease now.
async fn renewers(client: &kube::Client, pool: &str) -> BTreeMap<String, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut out = BTreeMap::new();
    for node in pool_nodes(client, pool).await {
        let name = node.metadata.name.clone().unwrap();
        let by = leases
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.metadata.annotations.and_then(|a| a.get("kwok-pools.x-k8s.io/simulator").cloned()));
        out.insert(name, by.unwrap_or_default());
    }
    out
}

#[tokio::test]
async fn skewed_clocks_neither_double_nor_drop_a_node() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "skew").await;
    let scope = unique("skew");
    let pool = unique("skewed");
    let flags = |id: &'static str| vec!["--simulate-only", "--identity", id, "--node-lease-duration-seconds", "40"];
    let mut sims = vec![
        Operator::start(&scope, &flags("s-right")),
        Operator::start_with_clock(&scope, &flags("s-behind"), "-15s"),
        Operator::start_with_clock(&scope, &flags("s-ahead"), "+15s"),
    ];
    for s in &mut sims {
        s.wait_ready().await;
    }
    // A controller (no simulator) makes the pools.
    let mut controller = Operator::start(&scope, &["--no-simulator", "--no-webhook"]);
    controller.wait_ready().await;
    let n = 60;
    apply(&scoped_nodepool(&pool, &scope, n, "10.210.0.0/16", 24, 110, ""));
    apply(&scoped_podpool("web", &ns.name, &scope, 60, "", "      containers: [{name: app, image: nginx}]\n"));
    wait_ready_nodes(&client, &pool, n as usize, Duration::from_secs(120)).await;
    // Settled: every node simulated by exactly one replica.
    wait_for("the nodes split among the three replicas, each once", Duration::from_secs(60), || async {
        let mut total = 0.0;
        for s in &sims {
            total += s.metric("kwok_pools_simulator_managed_nodes").await;
        }
        if total == f64::from(n) { Ok(()) } else { Err(format!("{total} managed of {n}")) }
    })
    .await;
    let before = renewers(&client, &pool).await;
    // For a while (longer than a membership Lease, twice): nobody's view changes, nothing is
    // taken twice, nothing goes NotReady.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let mut total = 0.0;
        for s in &sims {
            total += s.metric("kwok_pools_simulator_managed_nodes").await;
        }
        assert_eq!(total, f64::from(n), "a node simulated twice or by nobody after {:?}", start.elapsed());
        let not_ready: Vec<String> = pool_nodes(&client, &pool)
            .await
            .iter()
            .filter(|node| !is_ready(node))
            .filter_map(|node| node.metadata.name.clone())
            .collect();
        assert!(not_ready.is_empty(), "NotReady: {not_ready:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert_eq!(renewers(&client, &pool).await, before, "a node changed hands without a member changing");
    let by: HashSet<&String> = before.values().collect();
    assert_eq!(by.len(), 3, "each replica simulates some: {by:?}");
    // Pod addresses: one each.
    let pods = list_pods(&client, &ns.name, "app=web").await;
    let ips: Vec<String> = pods.iter().filter_map(|p| p.status.as_ref()?.pod_ip.clone()).collect();
    let unique_ips: HashSet<&String> = ips.iter().collect();
    assert_eq!(ips.len(), 60, "every pod has an address");
    assert_eq!(unique_ips.len(), ips.len(), "no address shared");
    controller.stop();
    for s in &mut sims {
        s.stop();
    }
}
