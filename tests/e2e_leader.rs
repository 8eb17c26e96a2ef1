//! End-to-end: two `kwok-pools run` processes of one instance (a Deployment of two replicas, or
//! a rollout). One leads and reconciles; the other stands by, serves the webhook and
//! simulates its shard. Killed with SIGKILL, the leader is replaced within the leader Lease's
//! duration, and the pool converges to exactly its children.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kwok_pools_test_support::pools::{nodepool_yaml, pool_nodes, scoped_nodepool, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

async fn leader_holder(client: &kube::Client, scope: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get_opt(&format!("{scope}-leader")).await.ok()??.spec?.holder_identity
}

/// The pool's node names, checked to be exactly `<pool>-0 .. <pool>-{n-1}`.
async fn assert_exact_children(client: &kube::Client, pool: &str, n: usize) {
    let names: BTreeSet<String> = pool_nodes(client, pool).await.into_iter().filter_map(|n| n.metadata.name).collect();
    let want: BTreeSet<String> = (0..n).map(|i| format!("{pool}-{i}")).collect();
    assert_eq!(names, want, "the pool's nodes are not exactly its {n} children");
}

#[tokio::test]
async fn one_of_two_operators_leads_and_the_other_takes_over_when_it_dies() {
    let client = client().await;
    let scope = unique("lead");
    let pool = unique("led");
    let flags = |id: &'static str| vec!["--identity", id, "--leader-lease-duration", "6s"];
    let mut ops = [Operator::start(&scope, &flags("op-a")), Operator::start(&scope, &flags("op-b"))];
    for op in &mut ops {
        op.wait_ready().await;
    }
    apply(&scoped_nodepool(&pool, &scope, 40, "10.200.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &pool, 40, Duration::from_secs(120)).await;

    // Exactly one leads: the Lease names it, its gauge says so, and only it reconciles.
    let holder = leader_holder(&client, &scope).await.expect("a leader Lease with a holder");
    let (lead, standby) = if holder == "op-a" { (0, 1) } else { (1, 0) };
    assert_eq!(ops[lead].metric("kwok_pools_leader").await, 1.0);
    assert_eq!(ops[standby].metric("kwok_pools_leader").await, 0.0);
    assert!(ops[lead].metric("kwok_pools_reconciles_total").await > 0.0);
    assert_eq!(ops[standby].metric("kwok_pools_reconciles_total").await, 0.0, "the standby reconciled");
    // Both simulate: the nodes are split between them (once the shard's hand-over is done).
    wait_for("the nodes split between both replicas", Duration::from_secs(30), || async {
        let (a, b) = (
            ops[0].metric("kwok_pools_simulator_managed_nodes").await,
            ops[1].metric("kwok_pools_simulator_managed_nodes").await,
        );
        if a > 0.0 && b > 0.0 && a + b == 40.0 { Ok(()) } else { Err(format!("{a} + {b}")) }
    })
    .await;
    // The standby serves the webhook too: a bad pool is refused through it as well.
    assert!(ops[standby].is_running());

    // The leader dies mid-scale: the standby takes over and finishes the job, no duplicates.
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=120"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    ops[lead].kill();
    let took = wait_for("the standby to lead", Duration::from_secs(30), || async {
        match leader_holder(&client, &scope).await {
            Some(h) if h == ["op-a", "op-b"][standby] && ops[standby].metric("kwok_pools_leader").await == 1.0 => {
                Ok(killed.elapsed())
            }
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    eprintln!("standby leads {:.1}s after the leader was killed", took.as_secs_f64());
    assert!(took <= Duration::from_secs(6 + 5), "took over after {took:?} (lease 6s)");
    wait_ready_nodes(&client, &pool, 120, Duration::from_secs(120)).await;
    assert_exact_children(&client, &pool, 120).await;

    // Scaling down under the new leader leaves exactly the lower indices.
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=30"]);
    wait_for("30 nodes left", Duration::from_secs(60), || async {
        let n = pool_nodes(&client, &pool).await.len();
        if n == 30 { Ok(()) } else { Err(format!("{n} nodes")) }
    })
    .await;
    assert_exact_children(&client, &pool, 30).await;

    // The killed one comes back as a standby: it never reconciles while the other leads.
    ops[lead].start_again();
    ops[lead].wait_ready().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ops[lead].metric("kwok_pools_reconciles_total").await, 0.0, "the returning replica reconciled");
    assert_eq!(leader_holder(&client, &scope).await.as_deref(), Some(["op-a", "op-b"][standby]));
}

#[tokio::test]
async fn status_shows_pools_the_leader_and_each_simulators_nodes() {
    let client = client().await;
    let scope = unique("stat");
    let pool = unique("shown");
    let flags = |id: &'static str| vec!["--identity", id];
    let mut ops = [Operator::start(&scope, &flags("st-a")), Operator::start(&scope, &flags("st-b"))];
    for op in &mut ops {
        op.wait_ready().await;
    }
    apply(&scoped_nodepool(&pool, &scope, 20, "10.201.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &pool, 20, Duration::from_secs(120)).await;
    let text = wait_for("status to show both simulators with all 20 nodes", Duration::from_secs(60), || async {
        let out = std::process::Command::new(kwok_pools_bin())
            .args(["status", "--instance", &scope])
            .env("KUBECONFIG", kubeconfig())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let nodes: Vec<u32> = text
            .lines()
            .filter(|l| l.starts_with("st-a") || l.starts_with("st-b"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect();
        // The pool's status counts Ready nodes on the leader's next reconcile: wait for it too.
        let pool_line_ready =
            text.lines().any(|l| l.starts_with("NodePool") && l.contains(&pool) && l.contains("20/20"));
        if out.status.success() && nodes.len() == 2 && nodes.iter().sum::<u32>() == 20 && pool_line_ready {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let line = text.lines().find(|l| l.starts_with("NodePool") && l.contains(&pool)).expect("the pool's line");
    assert!(line.contains("20/20"), "{text}");
    assert!(text.contains("leader: st-"), "{text}");
}

// Multi-threaded: the proxy keeps forwarding while a blocking clean-up of `a` talks through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_steps_down_before_another_takes_over() {
    let client = client().await;
    let scope = unique("stall");
    // Replica a reaches the API server through a proxy the test can stall; b directly.
    let proxy =
        kwok_pools_test_support::proxy::Proxy::start(kwok_pools_test_support::proxy::api_server(&kubeconfig())).await;
    let dir = tempfile::tempdir().unwrap();
    let via_proxy = proxy.kubeconfig(&kubeconfig(), dir.path());
    let flags = |id: &'static str| vec!["--identity", id, "--leader-lease-duration", "6s", "--no-webhook"];
    let mut a = Operator::start_as(&scope, &flags("op-a"), via_proxy);
    a.wait_ready().await;
    wait_for("op-a to lead", Duration::from_secs(30), || async {
        if leader_holder(&client, &scope).await.as_deref() == Some("op-a") { Ok(()) } else { Err("not yet".into()) }
    })
    .await;
    let mut b = Operator::start(&scope, &flags("op-b"));
    b.wait_ready().await;
    assert_eq!(b.metric("kwok_pools_leader").await, 0.0, "b stands by");

    // The network stalls for a: it can neither renew nor learn that it cannot.
    proxy.pause();
    let cut = Instant::now();
    let (mut a_gone, mut b_leads) = (None, None);
    while (a_gone.is_none() || b_leads.is_none()) && cut.elapsed() < Duration::from_secs(60) {
        // Stopped leading: its gauge says so (its controllers are stopped with it), or it exited.
        if a_gone.is_none() && (!a.is_running() || a.metric("kwok_pools_leader").await == 0.0) {
            a_gone = Some(cut.elapsed());
        }
        if b_leads.is_none() && b.metric("kwok_pools_leader").await == 1.0 {
            b_leads = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.resume();
    let (a_gone, b_leads) = (a_gone.expect("a stepped down"), b_leads.expect("b took over"));
    eprintln!("  a stepped down after {a_gone:?}; b leads after {b_leads:?}");
    assert!(a_gone < b_leads, "a must stop leading ({a_gone:?}) before b starts ({b_leads:?})");
    assert!(a_gone <= Duration::from_secs(6), "within the renew deadline (4 s of a 6 s lease, plus a round)");
    assert_eq!(leader_holder(&client, &scope).await.as_deref(), Some("op-b"));
    // A replica that lost the lead stays up (no restart loop after an API server blip): it
    // stands by, and leads again once b is gone, with controllers built afresh.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(a.is_running(), "a exited on losing the lead: {}", a.log_tail());
    b.stop();
    wait_for("a to lead again", Duration::from_secs(60), || async {
        if a.metric("kwok_pools_leader").await == 1.0 { Ok(()) } else { Err("not yet".into()) }
    })
    .await;
    let pool = format!("{scope}-again");
    apply(&nodepool_yaml(&pool, &scope, 1, ""));
    wait_ready_nodes(&client, &pool, 1, Duration::from_secs(60)).await;
    a.stop();
    delete_quietly("nodepool", &pool);
}
