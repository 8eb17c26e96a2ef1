//! Faults, end to end, on a cluster of the test's own: the operator SIGKILLed at random points
//! of a scale-up, a scale-down and a template roll (several rounds); a second operator that
//! reconciles the same pools by mistake; kube-apiserver stopped for 20 s mid-scale, then etcd.
//! After each: exactly the desired nodes (names 0..n-1, owned by the pool, Ready, on the
//! current template), no node Lease without its node, every pod Running with an address of its
//! own — and the time to get there after the fault ends is printed.
//!
//! Sizes: `CHAOS_NODES` (default 300) and `CHAOS_ROUNDS` (default 2); `make chaos` runs 2,000
//! nodes and 3 rounds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kwok_pools::kinds::nodepool::NodePool;
use kwok_pools_test_support::pools::{NodePoolYaml, is_ready, list_pods, pool_nodes, scoped_podpool};
use kwok_pools_test_support::{Operator, OwnCluster, unique, wait_for};
use rand::Rng;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the cluster must show: `nodes` nodes on template `tier`, `pods` pods Running.
struct Goal<'a> {
    pool: &'a str,
    nodes: u32,
    tier: &'a str,
    ns: &'a str,
    app: &'a str,
    pods: usize,
}

async fn check(client: &kube::Client, goal: &Goal<'_>) -> Result<(), String> {
    let pool_uid = Api::<NodePool>::all(client.clone()).get(goal.pool).await.map_err(|e| e.to_string())?.metadata.uid;
    let nodes = pool_nodes(client, goal.pool).await;
    let names: HashSet<String> = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
    let want: HashSet<String> = (0..goal.nodes).map(|i| format!("{}-{i}", goal.pool)).collect();
    if names != want {
        let extra: Vec<_> = names.difference(&want).take(3).collect();
        let missing: Vec<_> = want.difference(&names).take(3).collect();
        return Err(format!("{} nodes (extra {extra:?}, missing {missing:?})", names.len()));
    }
    for n in &nodes {
        let owner = n.metadata.owner_references.as_deref().unwrap_or_default();
        if owner.len() != 1 || owner[0].uid != pool_uid.clone().unwrap_or_default() {
            return Err(format!("{:?} is not owned by the pool alone: {owner:?}", n.metadata.name));
        }
        let tier = n.metadata.labels.as_ref().and_then(|l| l.get("tier")).map(String::as_str);
        if tier != Some(goal.tier) || !is_ready(n) || n.metadata.deletion_timestamp.is_some() {
            return Err(format!("{:?}: tier {tier:?}, ready {}", n.metadata.name, is_ready(n)));
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let orphans: Vec<String> = leases
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .filter(|n| n.starts_with(&format!("{}-", goal.pool)) && !names.contains(n))
        .collect();
    if !orphans.is_empty() {
        return Err(format!("{} leases without a node, e.g. {:?}", orphans.len(), &orphans[..orphans.len().min(3)]));
    }
    let pods = list_pods(client, goal.ns, &format!("app={}", goal.app)).await;
    let running: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect();
    let ips: Vec<String> = running.iter().filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone())).collect();
    let unique_ips: HashSet<&String> = ips.iter().collect();
    if unique_ips.len() != ips.len() {
        return Err(format!("pod IPs shared: {} addresses for {} pods", unique_ips.len(), ips.len()));
    }
    if running.len() != goal.pods || ips.len() != goal.pods {
        return Err(format!("{} of {} pods Running with an address", ips.len(), goal.pods));
    }
    Ok(())
}

/// Waits for the goal and returns how long it took.
async fn converge(client: &kube::Client, what: &str, goal: &Goal<'_>) -> Duration {
    let start = Instant::now();
    wait_for(what, Duration::from_secs(600), || async { check(client, goal).await }).await;
    let took = start.elapsed();
    eprintln!("  {what}: converged in {:.1}s", took.as_secs_f64());
    took
}

fn nodepool(pool: &str, scope: &str, count: u32, tier: &str) -> String {
    let capacity = Some("{cpu: 64, memory: 256Gi, pods: 110}");
    NodePoolYaml::new(pool, scope)
        .count(count)
        .pod_cidr("10.64.0.0/12", 24)
        .capacity(capacity)
        .node_label("tier", tier)
        .yaml()
}

/// A supervisor's part: the operator no longer exits when it loses its lead, but a Deployment
/// would restart one that did.
fn keep_running(op: &mut Operator) {
    if !op.is_running() {
        eprintln!("  the operator exited; started again");
        op.start_again();
    }
}

#[tokio::test]
async fn no_fault_loses_or_duplicates_a_child() {
    let (n, rounds) = (env_or("CHAOS_NODES", 300), env_or("CHAOS_ROUNDS", 2));
    let cluster = OwnCluster::create(&unique("chaos"), &[]);
    let client = cluster.client().await;
    let kc = cluster.kubeconfig.clone();
    let (scope, pool, app, ns) = (unique("chaos"), unique("np"), unique("app"), unique("chaos"));
    cluster.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the namespace's default ServiceAccount", Duration::from_secs(60), || async {
        accounts.get_opt("default").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string())
    })
    .await;
    let mut op = Operator::start_as(&scope, &[], kc.clone());
    op.wait_ready().await;
    let pods = 60usize;
    cluster.apply(&nodepool(&pool, &scope, 10, "t0"));
    cluster.apply(&scoped_podpool(&app, &ns, &scope, pods as u32, "", "      containers: [{name: c, image: nginx}]\n"));
    let goal = |nodes: u32, tier: &'static str| Goal { pool: &pool, nodes, tier, ns: &ns, app: &app, pods };
    converge(&client, "the first pool", &goal(10, "t0")).await;

    let mut rng = rand::rng();
    let mut times = Vec::new();
    let tiers = ["t1", "t2", "t3", "t4", "t5", "t6"];
    let mut tier = "t0";
    for round in 0..rounds as usize {
        for (what, count, next_tier) in
            [("scale-up", n, tier), ("scale-down", n / 4, tier), ("template roll", n / 4, tiers[round % tiers.len()])]
        {
            cluster.apply(&nodepool(&pool, &scope, count, next_tier));
            tier = next_tier;
            let after = Duration::from_millis(rng.random_range(50..3000));
            tokio::time::sleep(after).await;
            op.kill();
            eprintln!("  round {round}: {what} to {count}: operator SIGKILLed after {after:?}");
            op.start_again();
            times.push(converge(&client, &format!("round {round} {what}"), &goal(count, tier)).await);
        }
    }
    eprintln!("SIGKILL rounds: {} faults, convergence {:?}", times.len(), times);

    // A second operator reconciling the same pools by mistake (its own leader Lease, so both
    // lead): the pool still ends with exactly its children, and once there neither writes.
    let mut other = Operator::start_as(&scope, &["--no-simulator", "--lease-namespace", "default"], kc.clone());
    other.wait_ready().await;
    cluster.apply(&nodepool(&pool, &scope, n / 2, tier));
    converge(&client, "two operators: scale-up", &goal(n / 2, tier)).await;
    cluster.apply(&nodepool(&pool, &scope, n / 8, tier));
    converge(&client, "two operators: scale-down", &goal(n / 8, tier)).await;
    let uids = |nodes: Vec<k8s_openapi::api::core::v1::Node>| -> HashSet<String> {
        nodes.into_iter().filter_map(|n| n.metadata.uid).collect()
    };
    let before = (uids(pool_nodes(&client, &pool).await), op.metrics().await, other.metrics().await);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = (uids(pool_nodes(&client, &pool).await), op.metrics().await, other.metrics().await);
    assert_eq!(before.0, after.0, "no node was replaced while both ran");
    let writes = |m: &str| -> f64 {
        m.lines()
            .filter(|l| l.starts_with("kwok_pools_pool_child_writes_total") && l.contains(&pool))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(writes(&before.1), writes(&after.1), "the first operator went on writing children");
    assert_eq!(writes(&before.2), writes(&after.2), "the second operator went on writing children");
    other.stop();

    // kube-apiserver away for 20 s in the middle of a scale-up; then etcd.
    for component in ["kube-apiserver", "etcd"] {
        cluster.apply(&nodepool(&pool, &scope, n / 2, tier));
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
        cluster.kill_component(component);
        // Asked every half second while it is down: past the leader's renew deadline (10 s of
        // its 15 s Lease; it learns the API server is gone from its failing renewals) the
        // operator never says ready: its election has not heard from the API server, 503.
        let down = Instant::now();
        let (mut said_ready, mut unready) = (Vec::new(), 0);
        while down.elapsed() < Duration::from_secs(18) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let readyz = reqwest::get(format!("http://127.0.0.1:{}/readyz", op.metrics_port)).await;
            match readyz.map(|r| r.status()) {
                Ok(s) if s.is_success() => {
                    if down.elapsed() > Duration::from_secs(11) {
                        said_ready.push(down.elapsed().as_secs_f64());
                    }
                }
                _ => unready += 1,
            }
        }
        eprintln!(
            "  {component} down 18 s: /readyz not ready {unready} times of 36, ready after 8 s at {said_ready:?}"
        );
        let unready = unready > 0 && said_ready.is_empty();
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.start_stopped();
        let back = Instant::now();
        keep_running(&mut op);
        let took = converge(&client, &format!("after {component} came back"), &goal(n / 2, tier)).await;
        eprintln!("{component} outage of 20 s: converged {:.1}s after it came back", back.elapsed().as_secs_f64());
        if component == "kube-apiserver" {
            assert!(unready, "the operator said ready while it could not reach the API server");
        }
        let _ = took;
        cluster.apply(&nodepool(&pool, &scope, n / 8, tier));
        converge(&client, &format!("after {component}: scale-down"), &goal(n / 8, tier)).await;
    }
}
