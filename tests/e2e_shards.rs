//! End-to-end: the simulator sharded over three `kwok-pools simulate` processes on a real
//! control plane. Nodes split about evenly by rendezvous hashing; a replica killed with
//! SIGKILL has its nodes taken over before any goes NotReady, never with two replicas renewing
//! one lease, and without a pod IP handed out twice; started again, it gets its share back.
//!
//! The test gets a cluster of its own with Kubernetes' default node grace period, and runs the
//! simulators with their defaults (node leases of 40 s, membership leases of 12 s): "no node
//! NotReady" then means what it means for users, nodes taken over before their leases lapse.
//! The node count is `E2E_SHARD_NODES` (6,000 by default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kwok_pools::kubelet::node::lease::SIMULATOR_ANNOTATION;
use kwok_pools::shard::rendezvous;
use kwok_pools_test_support::pools::{list_pods, scoped_nodepool, scoped_podpool};
use kwok_pools_test_support::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn node_count() -> usize {
    std::env::var("E2E_SHARD_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(6000)
}

/// `kwok_pools_simulator_managed_nodes` of one process.
async fn managed(op: &Operator) -> Option<usize> {
    let text = op.metrics().await;
    text.lines().find_map(|l| l.strip_prefix("kwok_pools_simulator_managed_nodes ")).and_then(|v| v.trim().parse().ok())
}

/// Every renewal of the pool's node leases (renew time, the replica named on it), and every
/// node of the pool seen not Ready, recorded by watches for the whole test.
#[derive(Default)]
struct Record {
    renewals: HashMap<String, BTreeMap<Timestamp, String>>,
    /// Per lease, every event seen in order: (renew time, replica, resourceVersion).
    events: HashMap<String, Vec<(Timestamp, String, String)>>,
    not_ready: HashSet<String>,
}

fn watch_leases(client: kube::Client, prefix: String, record: Arc<Mutex<Record>>) {
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, "kube-node-lease");
        // A watch error (a re-list under load) must not end the record.
        let mut s = watcher(api, watcher::Config::default()).default_backoff().applied_objects().boxed();
        while let Some(event) = s.next().await {
            let Ok(lease) = event else { continue };
            let name = lease.metadata.name.clone().unwrap_or_default();
            if !name.starts_with(&prefix) {
                continue;
            }
            let sim = lease.metadata.annotations.as_ref().and_then(|a| a.get(SIMULATOR_ANNOTATION)).cloned();
            let renewed = lease.spec.as_ref().and_then(|s| s.renew_time.clone());
            if let (Some(sim), Some(t)) = (sim, renewed) {
                let version = lease.metadata.resource_version.clone().unwrap_or_default();
                let mut r = record.lock().unwrap();
                r.events.entry(name.clone()).or_default().push((t.0, sim.clone(), version));
                r.renewals.entry(name).or_default().insert(t.0, sim);
            }
        }
    });
}

fn watch_nodes(client: kube::Client, prefix: String, record: Arc<Mutex<Record>>) {
    tokio::spawn(async move {
        let api: Api<Node> = Api::all(client);
        let mut s = watcher(api, watcher::Config::default()).default_backoff().applied_objects().boxed();
        while let Some(event) = s.next().await {
            let Ok(node) = event else { continue };
            let name = node.metadata.name.clone().unwrap_or_default();
            let conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            let ready = conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone());
            // A node is born Ready; anything else afterwards means its lease lapsed.
            if name.starts_with(&prefix) && ready.is_some_and(|r| r != "True") {
                record.lock().unwrap().not_ready.insert(name);
            }
        }
    });
}

/// Waits until the simulators together hold all `n` nodes, each about its share of the
/// members that run; returns the counts.
async fn wait_shares(ops: &[&Operator], n: usize, timeout: Duration) -> Vec<usize> {
    let what = format!("{n} nodes split among {} simulators", ops.len());
    wait_for(&what, timeout, || async {
        let mut counts = Vec::new();
        for op in ops {
            counts.push(managed(op).await.ok_or("no metrics yet")?);
        }
        let total: usize = counts.iter().sum();
        let share = n / ops.len();
        let even = counts.iter().all(|c| *c * 4 >= share * 3 && *c * 4 <= share * 5);
        if total == n && even { Ok(counts) } else { Err(format!("{counts:?}")) }
    })
    .await
}

fn pod_ips(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter_map(|p| p.status.as_ref()?.pod_ip.clone()).collect()
}

fn assert_unique_ips(pods: &[Pod]) {
    let ips = pod_ips(pods);
    let unique: HashSet<&String> = ips.iter().collect();
    assert_eq!(unique.len(), ips.len(), "a pod IP is shared: {ips:?}");
}

async fn wait_pods_running(client: &kube::Client, ns: &str, app: &str, count: usize) -> Vec<Pod> {
    let what = format!("{count} pods of {app} running with IPs");
    wait_for(&what, Duration::from_secs(180), || async {
        let pods = list_pods(client, ns, &format!("app={app}")).await;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().is_some_and(|s| s.phase.as_deref() == Some("Running") && s.pod_ip.is_some()))
            .count();
        if running == count && pods.len() == count { Ok(pods) } else { Err(format!("{running}/{count} running")) }
    })
    .await
}

/// For each lease, the runs of consecutive renewals by one replica.
fn runs(renewals: &BTreeMap<Timestamp, String>) -> Vec<(String, Timestamp, Timestamp)> {
    let mut out: Vec<(String, Timestamp, Timestamp)> = Vec::new();
    for (t, sim) in renewals {
        match out.last_mut() {
            Some((s, _, last)) if s == sim => *last = *t,
            _ => out.push((sim.clone(), *t, *t)),
        }
    }
    out
}

#[tokio::test]
async fn three_simulators_share_the_nodes_and_take_over_a_killed_one() {
    let cluster = OwnCluster::create(&unique("shards"), &[]);
    let client = cluster.client().await;
    let kc = cluster.kubeconfig.clone();
    let kubectl_here = |args: &[&str]| {
        let out = std::process::Command::new(kubectl_bin()).args(args).env("KUBECONFIG", &kc).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let n = node_count();
    let scope = unique("shard");
    let pool = unique("sharded");
    // The namespace goes with the cluster.
    let ns = unique("shard");
    cluster.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the namespace's default ServiceAccount", Duration::from_secs(60), || async {
        accounts.get_opt("default").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string())
    })
    .await;
    let record = Arc::new(Mutex::new(Record::default()));
    watch_leases(client.clone(), format!("{pool}-"), record.clone());
    watch_nodes(client.clone(), format!("{pool}-"), record.clone());

    // Pool controllers in one process; three simulators of one instance beside it, with the
    // defaults a user gets (node leases of 40 s renewed every 10 s, membership of 12 s).
    let mut controllers = Operator::start_as(&scope, &["--no-simulator"], kc.clone());
    controllers.wait_ready().await;
    let sim_flags = |id: &'static str| vec!["--simulate-only", "--identity", id, "--node-lease-duration-seconds", "40"];
    let mut sims: Vec<Operator> = ["sim-a", "sim-b", "sim-c"]
        .into_iter()
        .map(|id| Operator::start_as(&scope, &sim_flags(id), kc.clone()))
        .collect();
    for s in &mut sims {
        s.wait_ready().await;
    }

    let start = Instant::now();
    cluster.apply(&scoped_nodepool(&pool, &scope, n as u32, "10.96.0.0/11", 24, 110, ""));
    pools::wait_ready_nodes(&client, &pool, n, Duration::from_secs(600)).await;
    eprintln!("{n} nodes Ready in {:.1}s", start.elapsed().as_secs_f64());
    let counts = wait_shares(&sims.iter().collect::<Vec<_>>(), n, Duration::from_secs(60)).await;
    eprintln!("shares: {counts:?}");

    // Each node's lease names the replica rendezvous hashing gives it.
    let members: Vec<String> = ["sim-a", "sim-b", "sim-c"].map(String::from).to_vec();
    wait_for("every lease renewed by its node's replica", Duration::from_secs(30), || async {
        // Node addresses, chosen by three replicas apart: none shared.
        let nodes = pools::pool_nodes(&client, &pool).await;
        let ips: Vec<String> = nodes
            .iter()
            .flat_map(|n| n.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default())
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .collect();
        let unique: HashSet<&String> = ips.iter().collect();
        assert_eq!((ips.len(), unique.len()), (n, n), "every node has one InternalIP of its own");

        let r = record.lock().unwrap();
        let wrong: Vec<String> = (0..n)
            .map(|i| format!("{pool}-{i}"))
            .filter(|node| {
                let last = r.renewals.get(node).and_then(|m| m.values().last());
                last.map(String::as_str) != rendezvous::owner(&members, node)
            })
            .take(3)
            .collect();
        if wrong.is_empty() { Ok(()) } else { Err(format!("e.g. {wrong:?}")) }
    })
    .await;

    // Pods on those nodes, with their addresses.
    let app = unique("web");
    cluster.apply(&scoped_podpool(&app, &ns, &scope, 300, "", "      containers: [{name: c, image: nginx}]\n"));
    assert_unique_ips(&wait_pods_running(&client, &ns, &app, 300).await);

    // sim-c dies without a word: the others take its nodes before their leases lapse.
    let killed = Instant::now();
    sims[2].kill();
    let counts = wait_shares(&[&sims[0], &sims[1]], n, Duration::from_secs(90)).await;
    eprintln!("sim-c's nodes taken over in {:.1}s: {counts:?}", killed.elapsed().as_secs_f64());

    // New pods while sim-c is gone: addresses on the taken-over nodes stay unique.
    kubectl_here(&["scale", "podpool", &app, "-n", &ns, "--replicas=450"]);
    assert_unique_ips(&wait_pods_running(&client, &ns, &app, 450).await);

    // Back again: it gets its share back.
    let back = Instant::now();
    sims[2].start_again();
    sims[2].wait_ready().await;
    let counts = wait_shares(&sims.iter().collect::<Vec<_>>(), n, Duration::from_secs(60)).await;
    eprintln!("sim-c back with its share in {:.1}s: {counts:?}", back.elapsed().as_secs_f64());
    kubectl_here(&["scale", "podpool", &app, "-n", &ns, "--replicas=600"]);
    assert_unique_ips(&wait_pods_running(&client, &ns, &app, 600).await);
    // A renewal round after the hand-back, then judge the record. Under the pods' writes a
    // renewal may be stretched up to 21 s after the last (a 40 s lease less the monitor
    // period's share and the shard's takeover reserve), so wait past that.
    tokio::time::sleep(Duration::from_secs(25)).await;

    let r = record.lock().unwrap();
    assert!(r.not_ready.is_empty(), "nodes went NotReady: {:?}", r.not_ready.iter().take(10).collect::<Vec<_>>());
    let mut moved = 0;
    for (lease, renewals) in &r.renewals {
        let runs = runs(renewals);
        // A node is sim-c's and goes away and back, or it never moves.
        assert!(
            runs.len() == 1 || (runs.len() == 3 && runs[0].0 == "sim-c" && runs[2].0 == "sim-c"),
            "{lease}: {runs:?}"
        );
        moved += usize::from(runs.len() == 3);
        // Never two replicas at once: a replica's first renewal comes after the previous
        // one's last, with the hand-over between them.
        for pair in runs.windows(2) {
            let gap = pair[1].1.duration_since(pair[0].2);
            assert!(
                gap.as_secs_f64() >= 0.5,
                "{lease}: {} renewed {gap:?} after {} stopped; its events (renew time, replica, version): {:?}",
                pair[1].0,
                pair[0].0,
                r.events.get(lease)
            );
        }
    }
    assert!(moved * 4 >= n, "only {moved} of {n} leases moved to another replica and back");
    drop(sims);
    drop(controllers);
}
