//! Lifecycle policies against the same knobs on the pools (issue 42's cost target): beside a
//! NodePool of held nodes, `pools` PodPools of `size` pods start, once with the knobs in each
//! pool's `spec.lifecycle` and once with bare pools and one LifecyclePolicy per pool selecting
//! its pods by label (so every pod is matched by a policy, none by a catch-all). Rounds
//! alternate (pool, policy, pool, policy) to spread the machine's noise over both. Each round
//! measures the time from the pools' apply until every pod is Ready (pods Ready per second)
//! and the operator's CPU over that window, in all and less its idle rate (the held nodes'
//! heartbeats); a policy round also checks every policy governs its pool's pods (liveness
//! beside speed). Then it prints the ratios policy ÷ pool. The nodes are held at kwokctl's
//! heartbeat (200 s leases, controller manager monitor period 25 s, grace 200 s): at the
//! kubelet's, 5,000 nodes' lease renewals take most of this 2-core machine's API server and
//! pods start at ~10/s, which measures the API server, not the operator.

use super::harness::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kwok_pools::kinds::podpool::PodPool;
use std::time::{Duration, Instant};

const NS: &str = "bench-policies";
const NODES: &str = "bench-policy-nodes";
/// kwokctl's node lease (its heartbeat factor 5 on the kubelet's 40 s).
const LEASE_SECONDS: u32 = 200;

/// The knobs under test, the same in a pool and in a policy.
fn knobs() -> serde_json::Value {
    serde_json::json!({"startDelay": {"min": "0s", "max": "200ms"}, "exitDelay": {"fixed": "0s"}})
}

fn node_pool(nodes: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": NODES},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.64.0.0/10", "maskSize": 24},
            "lifecycle": {"nodes": {"heartbeat": {"leaseDurationSeconds": LEASE_SECONDS}}},
            "nodeTemplate": {"status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}
        }
    })
}

fn pod_pool(i: u32, size: u32, with_knobs: bool) -> serde_json::Value {
    let mut pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "PodPool",
        "metadata": {"name": format!("p{i}"), "namespace": NS},
        "spec": {"podCount": size, "podTemplate": {
            "metadata": {"labels": {"bench-policy": format!("p{i}")}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "main", "image": "fake-image",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
        }}
    });
    if with_knobs {
        pool["spec"]["lifecycle"] = serde_json::json!({"pods": knobs()});
    }
    pool
}

fn policy(i: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "LifecyclePolicy",
        "metadata": {"name": format!("bench-p{i}")},
        "spec": {"pods": {"selector": {"matchLabels": {"bench-policy": format!("p{i}")}, "namespaces": [NS]}, "lifecycle": knobs()}}
    })
}

fn policies(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("pools.kwok.x-k8s.io", "v1alpha1", "LifecyclePolicy");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Applies `items` concurrently, retrying a while (a new namespace's ServiceAccount lags).
async fn apply_all(items: Vec<(String, serde_json::Value)>, api: impl Fn(&str) -> Api<DynamicObject>) {
    let pp = PatchParams::apply("bench").force();
    futures::stream::iter(items)
        .for_each_concurrent(32, |(name, body)| {
            let (api, pp) = (api(&name), pp.clone());
            async move {
                for _ in 0..50 {
                    if api.patch(&name, &pp, &Patch::Apply(&body)).await.is_ok() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("cannot apply {name}");
            }
        })
        .await;
}

/// Pods Ready in the namespace's pools, from their status.
async fn ready(client: &kube::Client) -> i64 {
    let api: Api<PodPool> = Api::namespaced(client.clone(), NS);
    let list = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    list.iter().map(|p| i64::from(p.status.as_ref().map_or(0, |s| s.ready_replicas))).sum()
}

/// The pods each policy governs, from its status.
async fn governed(client: &kube::Client, pools: u32) -> Vec<u64> {
    let api = policies(client);
    let mut out = Vec::new();
    for i in 0..pools {
        let p = api.get(&format!("bench-p{i}")).await.ok();
        out.push(p.and_then(|p| p.data["status"]["pods"].as_u64()).unwrap_or(0));
    }
    out
}

struct Round {
    rate: f64,
    cpu: f64,
    net: f64,
}

async fn round(op: &Operator, client: &kube::Client, pools: u32, size: u32, by_policy: bool) -> Option<Round> {
    let what = if by_policy { "policies" } else { "pool knobs" };
    if by_policy {
        let items = (0..pools).map(|i| (format!("bench-p{i}"), policy(i))).collect();
        apply_all(items, |_| policies(client)).await;
        // Indexed, and their first status written (the leader's steady work), before the
        // idle reading and the pods.
        wait_until("every policy's first status", Duration::from_secs(60), || async {
            let api = policies(client);
            let list = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
            let written = list.items.iter().filter(|p| p.data["status"]["observedGeneration"].is_i64()).count();
            if written as u32 >= pools { Ok(()) } else { Err(format!("{written}/{pools}")) }
        })
        .await;
    }
    let idle = CpuMeter::start(op.pid(), vec![]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (idle_cpu, _, idle_wall) = idle.read();

    let meter = CpuMeter::start(op.pid(), vec![]);
    let pool_api = ApiResource::erase::<PodPool>(&());
    let items = (0..pools).map(|i| (format!("p{i}"), pod_pool(i, size, !by_policy))).collect();
    apply_all(items, |_| Api::namespaced_with(client.clone(), NS, &pool_api)).await;
    let want = i64::from(pools * size);
    let done = wait_until(&format!("{want} pods Ready ({what})"), Duration::from_secs(900), || async {
        let n = ready(client).await;
        if n >= want { Ok(()) } else { Err(format!("{n}/{want}")) }
    })
    .await;
    let (cpu, _, wall) = meter.read();
    let result = done.map(|()| Round {
        rate: f64::from(pools * size) / wall,
        cpu,
        net: (cpu - idle_cpu / idle_wall * wall).max(0.0),
    });
    match &result {
        Some(r) => println!(
            "| {what} | {wall:.1} | {:.0} | {:.1} | {:.1} | {:.2} |",
            r.rate,
            r.cpu,
            r.net,
            r.net * 1000.0 / f64::from(pools * size)
        ),
        None => println!("| {what} | not all Ready within 900 s | | | | |"),
    }
    if by_policy {
        // Every policy governs its own pool's pods (their status is written every 15 s).
        let all = wait_until("every policy governing its pool's pods", Duration::from_secs(60), || async {
            let g = governed(client, pools).await;
            let short = g.iter().filter(|n| **n < u64::from(size)).count();
            if short == 0 { Ok(()) } else { Err(format!("{short} policies short")) }
        })
        .await;
        if all.is_none() {
            println!("  ! some policy does not govern its pool's pods: the policy figures above are void");
        }
    }
    // Clean up: pools first (their pods go), then the policies.
    let api: Api<PodPool> = Api::namespaced(client.clone(), NS);
    let _ = api.delete_collection(&DeleteParams::default(), &ListParams::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait_until("the round's pods gone", Duration::from_secs(900), || async {
        let left = pods.list_metadata(&ListParams::default()).await.map_or(usize::MAX, |l| l.items.len());
        if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
    })
    .await;
    if by_policy {
        let _ = policies(client).delete_collection(&DeleteParams::default(), &ListParams::default()).await;
    }
    result
}

pub async fn run(nodes: u32, pools: u32, size: u32) {
    println!(
        "\n## {} pods of {pools} pools matched by {pools} policies vs the same knobs on the pools, beside {nodes} held nodes ({})",
        pools * size,
        machine()
    );
    use kwok_pools::cluster::component::Component::KubeControllerManager as Kcm;
    let kwokctl = vec![
        (Kcm, "--node-monitor-period=25s".to_string()),
        (Kcm, format!("--node-monitor-grace-period={LEASE_SECONDS}s")),
    ];
    let bench = Bench::cluster_with("bench-policies", kwokctl).await;
    let client = bench.client.clone();
    let op = Operator::start(&bench, &[]).await;
    let started = Instant::now();
    if !nodes_ready(&client, NODES, node_pool(nodes), nodes).await {
        println!("  ! {nodes} nodes not Ready; giving up");
        return;
    }
    eprintln!("    {nodes} nodes Ready in {:.0} s", started.elapsed().as_secs_f64());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).unwrap();
    let _ = namespaces.create(&Default::default(), &ns).await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    println!("| knobs from | s until all Ready | pods Ready/s | operator CPU-s | less idle | ms per pod |");
    println!("|---|---|---|---|---|---|");
    let mut by = [Vec::new(), Vec::new()];
    for by_policy in [false, true, false, true] {
        if let Some(r) = round(&op, &client, pools, size, by_policy).await {
            by[usize::from(by_policy)].push(r);
        }
    }
    let mean = |rs: &[Round], f: fn(&Round) -> f64| rs.iter().map(f).sum::<f64>() / rs.len().max(1) as f64;
    let [pool, policy] = &by;
    if pool.len() == 2 && policy.len() == 2 {
        let ratio = |f: fn(&Round) -> f64| mean(policy, f) / mean(pool, f);
        println!(
            "  policy ÷ pool (means of two rounds each): operator CPU {:.3} (less idle {:.3}; target ≤ 1.10), pods Ready/s {:.3} (target ≥ 0.95)",
            ratio(|r| r.cpu),
            ratio(|r| r.net),
            ratio(|r| r.rate)
        );
    } else {
        println!("  ! a round did not finish: no ratio");
    }
    println!("  operator RSS {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));
    drop(op);
    bench.delete();
}
