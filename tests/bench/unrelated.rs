//! The operator's memory beside pods it has nothing to do with: `count` pods, half pending
//! (no pool, a selector nothing matches), half bound to a Node it does not simulate, while it
//! keeps a small pool of its own running. What it caches is read from its
//! `informer_cached_objects` gauge; its RSS from /proc.

use super::harness::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

const NS: &str = "default";

fn unrelated_pod(i: u32, bound: bool) -> Pod {
    let mut spec = serde_json::json!({
        "containers": [{"name": "c", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "10m"}}}],
        "terminationGracePeriodSeconds": 1,
    });
    if bound {
        spec["nodeName"] = "real-node-0".into();
    } else {
        spec["nodeSelector"] = serde_json::json!({"no-such-label": "anywhere"});
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("unrelated-{i}"), "namespace": NS, "labels": {"app": "unrelated", "team": "someone-else"}},
        "spec": spec,
    }))
    .unwrap()
}

async fn cached_pods(op: &Operator) -> f64 {
    op.metric_with("kwok_pools_informer_cached_objects", "resource=\"pods\"").await
}

pub async fn run(count: u32) {
    println!("\n## {count} unrelated pods beside a pool ({})", machine());
    let bench = Bench::cluster("bench-unrelated").await;
    let client = bench.client.clone();
    let op = Operator::start(&bench, &[]).await;
    let pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "bench-own"},
        "spec": {"nodeCount": 10, "podCIDR": {"cidr": "10.0.0.0/16", "maskSize": 24}}
    });
    if !nodes_ready(&client, "bench-own", pool, 10).await {
        return;
    }
    // A node of someone else's (no kwok annotation): the operator does not simulate it.
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "real-node-0"}})).unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_before, cached_before) = (rss_mib(op.pid()), cached_pods(&op).await);
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let start = Instant::now();
    let mut made = 0u32;
    let mut failed = 0u32;
    let mut creates = futures::stream::iter(0..count)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &unrelated_pod(i, i % 2 == 0)).await.is_ok() }
        })
        .buffer_unordered(64);
    while let Some(ok) = creates.next().await {
        if ok {
            made += 1
        } else {
            failed += 1
        }
        if (made + failed).is_multiple_of(5000) {
            println!(
                "  … {} of {count} created ({:.0}/s); operator RSS {:.0} MiB, cached pods {}",
                made + failed,
                f64::from(made + failed) / start.elapsed().as_secs_f64(),
                rss_mib(op.pid()),
                cached_pods(&op).await
            );
        }
    }
    // Let the watch deliver the last of them.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (op_cpu, _, wall) = cpu.read();
    let (rss_after, cached_after) = (rss_mib(op.pid()), cached_pods(&op).await);
    println!("| | operator RSS | pods cached by the operator |");
    println!("|---|---|---|");
    println!("| before | {rss_before:.0} MiB | {cached_before} |");
    println!("| after {made} unrelated pods ({failed} creates failed) | {rss_after:.0} MiB | {cached_after} |");
    println!(
        "RSS grew {:.1} MiB ({:.2} KiB per unrelated pod); operator CPU {op_cpu:.1} s over {wall:.0} s (decoding the watch events it drops)",
        rss_after - rss_before,
        (rss_after - rss_before) * 1024.0 / f64::from(made.max(1))
    );
    bench.delete();
}
