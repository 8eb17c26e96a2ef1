//! Many small pools against few large ones: the operator's CPU per PodPool reconcile must not
//! grow with the number of pools (a reconcile reads its own pool's pods from the owner index,
//! not every pod of the cluster). Shapes run one after another in one cluster, so the pod
//! store only grows: 10 × 10 pods, 100 × 10, 1,000 × 10, then 10 × 1,000. For each shape,
//! once every pod runs, every pool is touched (an annotation: one reconcile each, nothing to
//! write), in rounds until about 1,000 reconciles, and the operator's CPU over those
//! reconciles (the admission reviews of the touches included), less its idle rate, is divided
//! by their number.

use super::harness::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kwok_pools::kinds::podpool::PodPool;
use std::time::{Duration, Instant};

fn node_pool(nodes: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "bench-many-nodes"},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.0.0.0/12", "maskSize": 24},
            "nodeTemplate": {"status": {"capacity": {"cpu": "256", "memory": "1Ti", "pods": "250"}}}
        }
    })
}

fn pod_pool(name: &str, ns: &str, count: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "PodPool",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podCount": count, "podTemplate": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "fake-image"}]}
        }}
    })
}

/// Pods Ready in the namespace's pools (from their status).
async fn ready(client: &kube::Client, ns: &str) -> i64 {
    let api: Api<PodPool> = Api::namespaced(client.clone(), ns);
    let list = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    list.iter().map(|p| i64::from(p.status.as_ref().map_or(0, |s| s.ready_replicas))).sum()
}

/// Applies `pools` PodPools of `size` pods each in a namespace of their own, in parallel.
async fn create(client: &kube::Client, ns: &str, pools: u32, size: u32) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &namespace).await;
    let api: Api<PodPool> = Api::namespaced(client.clone(), ns);
    let pp = PatchParams::apply("bench").force();
    let names: Vec<String> = (0..pools).map(|i| format!("p{i}")).collect();
    futures::stream::iter(names)
        .for_each_concurrent(32, |name| {
            let (api, pp) = (api.clone(), pp.clone());
            async move {
                // The namespace's default ServiceAccount comes a moment after it.
                for _ in 0..50 {
                    if api.patch(&name, &pp, &Patch::Apply(pod_pool(&name, ns, size))).await.is_ok() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("cannot create PodPool {ns}/{name}");
            }
        })
        .await;
}

/// Touches every pool of the namespace (an annotation: a reconcile each with nothing to do).
async fn touch(client: &kube::Client, ns: &str, pools: u32, round: u32) {
    let api: Api<PodPool> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {"bench/touch": round.to_string()}}});
    futures::stream::iter(0..pools)
        .for_each_concurrent(32, |i| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                let _ = api.patch(&format!("p{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        })
        .await;
}

use futures::StreamExt;

pub async fn run(total: u32) {
    let bench = Bench::cluster("bench-many-pools").await;
    let client = bench.client.clone();
    println!("\n## many pools: CPU per PodPool reconcile by number of pools ({})", machine());
    let op = Operator::start(&bench, &[]).await;
    let nodes = total / 100 + 20;
    let api: Api<kwok_pools::kinds::nodepool::NodePool> = Api::all(client.clone());
    api.patch("bench-many-nodes", &PatchParams::apply("bench").force(), &Patch::Apply(node_pool(nodes))).await.unwrap();
    if !nodes_ready(&client, "bench-many-nodes", node_pool(nodes), nodes).await {
        println!("  ! {nodes} nodes not Ready; giving up");
        return;
    }
    let small = (total / 1000).max(1);
    let shapes = [(10, small), (100, small), (1000, small), (10, total / 10)];
    println!(
        "| pools × pods | pods in the store | reconciles | operator CPU ms per reconcile | µs per reconcile per pod of its pool |"
    );
    println!("|---|---|---|---|---|");
    let mut in_store = 0;
    for (round, (pools, size)) in shapes.into_iter().enumerate() {
        let ns = format!("many-{pools}x{size}");
        let start = Instant::now();
        create(&client, &ns, pools, size).await;
        let want = i64::from(pools * size);
        let done = wait_until(&format!("{ns}: {want} pods ready"), Duration::from_secs(600), || async {
            let n = ready(&client, &ns).await;
            if n >= want { Ok(n) } else { Err(format!("{n}/{want}")) }
        })
        .await;
        if done.is_none() {
            println!("  ! {ns}: not every pod Ready within 600 s");
            continue;
        }
        in_store += pools * size;
        eprintln!("    {ns}: {want} pods Ready in {:.1} s", start.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Idle rate first (heartbeats, the simulator's timers), then the touches.
        let idle = CpuMeter::start(op.pid(), vec![]);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (idle_cpu, _, idle_wall) = idle.read();
        let before = op.metric_with("kwok_pools_reconciles_total", "kind=\"PodPool\"").await;
        let meter = CpuMeter::start(op.pid(), vec![]);
        // BENCH_PERF=<prefix>: a CPU profile of the operator over the touches (perf record).
        let perf = std::env::var("BENCH_PERF").ok().and_then(|prefix| {
            std::process::Command::new("perf")
                .args(["record", "-F", "999", "-g", "-p", &op.pid().to_string(), "-o", &format!("{prefix}-{ns}.data")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
        });
        // Rounds until about 1,000 reconciles, so every shape is measured over as many: a
        // round touches every pool and waits until each has been reconciled (polled every
        // 250 ms; a scrape costs the operator more with more pools, a series per pool).
        let rounds = (1000 / pools).max(1);
        let mut reached = None;
        for r in 0..rounds {
            touch(&client, &ns, pools, (round as u32 + 1) * 10_000 + r).await;
            let target = before + f64::from(pools * (r + 1));
            reached = None;
            for _ in 0..480 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let n = op.metric_with("kwok_pools_reconciles_total", "kind=\"PodPool\"").await;
                if n >= target {
                    reached = Some(n);
                    break;
                }
            }
            if reached.is_none() {
                break;
            }
        }
        let (cpu, _, wall) = meter.read();
        if let Some(p) = perf {
            let _ = std::process::Command::new("kill").args(["-INT", &p.id().to_string()]).status();
            let _ = p.wait_with_output();
        }
        let Some(after) = reached else {
            println!("  ! {ns}: the touched pools were not all reconciled within 120 s a round");
            continue;
        };
        let reconciles = after - before;
        let busy = (cpu - idle_cpu / idle_wall * wall).max(0.0);
        let per = busy / reconciles * 1000.0;
        println!(
            "| {pools} × {size} | {in_store} | {reconciles:.0} | {per:.2} | {:.1} |",
            per * 1000.0 / f64::from(size)
        );
    }
    drop(op);
    bench.delete();
}
