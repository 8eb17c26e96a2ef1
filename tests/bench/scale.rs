//! `make bench`: scale benchmarks against a fresh local control plane, printing numbers.
//! Usage: cargo bench --bench scale -- [nodes[=N,..]] [pods[=N]] [events[=N]] [vmis] [webhook] [shards[=N]]
//! [unrelated[=N]] [leases[=N]] [kubelet[=NODES[:PODS_PER_NODE]]] [devices[=NODES[:PODS]]] [many-pools[=PODS]]
//! [policies[=PODS]] [karpenter[=PODS]] [storage[=PODS]] [vms[=VMS]] [vmpool[=VMS]] [--quick]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

mod devices;
mod harness;
mod karpenter;
mod kubelet;
mod leases;
mod many_pools;
mod nodes;
mod pods;
mod policies;
mod shards;
mod storage;
mod unrelated;
mod vm_pools;
mod vmis;
mod vms;
mod webhook;

use std::time::Duration;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let quick = args.iter().any(|a| a == "--quick");
    let picked: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with("--")).collect();
    let all = picked.is_empty();
    println!("# kwok-pools benchmarks{}", if quick { " (quick)" } else { "" });
    let sizes: Vec<u32> = picked
        .iter()
        .filter_map(|a| a.strip_prefix("nodes="))
        .flat_map(|v| v.split(','))
        .filter_map(|v| v.parse().ok())
        .collect();
    if all || picked.contains(&"webhook") {
        webhook::run(if quick { 2000 } else { 20_000 }, 16).await;
    }
    let pod_counts: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("pods=")).filter_map(|v| v.parse().ok()).collect();
    let kinds: &[&str] =
        if args.iter().any(|a| a == "--podpool-only") { &["PodPool"] } else { &["PodPool", "Deployment"] };
    if let Some(n) = pod_counts.first() {
        pods::run((*n / 100).max(1), *n, kinds).await;
    } else if all || picked.contains(&"pods") {
        if quick {
            pods::run(10, 1000, kinds).await;
        } else {
            pods::run(100, 10_000, kinds).await;
        }
    }
    // events[=PODS]: the kubelet's Normal events off, then on.
    let event_pods: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("events=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = event_pods.first() {
        pods::run_events((*n / 100).max(1), *n).await;
    } else if all || picked.contains(&"events") {
        if quick {
            pods::run_events(10, 1000).await;
        } else {
            pods::run_events(100, 10_000).await;
        }
    }
    if all || picked.contains(&"vmis") {
        if quick {
            vmis::run(10, 100).await;
        } else {
            vmis::run(100, 1000).await;
        }
    }
    // vms[=VMS]: VirtualMachines to Running on VMS/10 nodes, then VMS/10 live migrations.
    let vm_counts: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("vms=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = vm_counts.first() {
        vms::run(*n, (*n / 10).max(1)).await;
    } else if all || picked.contains(&"vms") {
        if quick {
            vms::run(100, 10).await;
        } else {
            vms::run(1000, 100).await;
        }
    }
    // vmpool=VMS: one VMIPool of VMS VirtualMachines run, stopped and started by its runStrategy.
    let vm_pool_counts: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("vmpool=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = vm_pool_counts.first() {
        vm_pools::run(*n).await;
    } else if all || picked.contains(&"vmpool") {
        vm_pools::run(if quick { 50 } else { 500 }).await;
    }
    let shard_nodes: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("shards=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = shard_nodes.first() {
        shards::run(*n, Duration::from_secs(120)).await;
    } else if all || picked.contains(&"shards") {
        shards::run(if quick { 2000 } else { 20_000 }, Duration::from_secs(if quick { 20 } else { 120 })).await;
    }
    let unrelated_pods: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("unrelated=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = unrelated_pods.first() {
        unrelated::run(*n).await;
    } else if all || picked.contains(&"unrelated") {
        unrelated::run(if quick { 5000 } else { 50_000 }).await;
    }
    let lease_counts: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("leases=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = lease_counts.first() {
        leases::run(*n, 3).await;
    } else if all || picked.contains(&"leases") {
        leases::run(if quick { 1000 } else { 5000 }, 3).await;
    }
    // kubelet=NODES[:PODS_PER_NODE]
    let kubelet_sizes: Vec<(u32, u32)> = picked
        .iter()
        .filter_map(|a| a.strip_prefix("kubelet="))
        .filter_map(|v| match v.split_once(':') {
            Some((n, p)) => Some((n.parse().ok()?, p.parse().ok()?)),
            None => v.parse().ok().map(|n: u32| (n, 20)),
        })
        .collect();
    if let Some((n, p)) = kubelet_sizes.first() {
        kubelet::run(*n, *p, 120).await;
    } else if all || picked.contains(&"kubelet") {
        if quick {
            kubelet::run(500, 20, 45).await;
        } else {
            kubelet::run(5000, 20, 120).await;
        }
    }
    // devices=NODES[:PODS]
    let device_sizes: Vec<(u32, u32)> = picked
        .iter()
        .filter_map(|a| a.strip_prefix("devices="))
        .filter_map(|v| match v.split_once(':') {
            Some((n, p)) => Some((n.parse().ok()?, p.parse().ok()?)),
            None => v.parse().ok().map(|n: u32| (n, n * 2)),
        })
        .collect();
    if let Some((n, p)) = device_sizes.first() {
        devices::run(*n, *p).await;
    } else if all || picked.contains(&"devices") {
        if quick {
            devices::run(100, 400).await;
        } else {
            devices::run(1000, 2000).await;
        }
    }
    let many: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("many-pools=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = many.first() {
        many_pools::run(*n).await;
    } else if all || picked.contains(&"many-pools") {
        many_pools::run(if quick { 1000 } else { 10_000 }).await;
    }
    // policies=PODS: in pools of 100, beside half as many held nodes.
    let policy_pods: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("policies=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = policy_pods.first() {
        policies::run((n / 2).max(1), (n / 100).max(1), 100).await;
    } else if all || picked.contains(&"policies") {
        if quick {
            policies::run(500, 10, 100).await;
        } else {
            policies::run(5000, 100, 100).await;
        }
    }
    // karpenter[=PODS]: Karpenter's kwok provider on kwok-pools and on kwok (only when named:
    // it needs `make kwok karpenter`).
    let karpenter_pods: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("karpenter=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = karpenter_pods.first() {
        karpenter::run(*n).await;
    } else if picked.contains(&"karpenter") {
        karpenter::run(if quick { 1000 } else { 10_000 }).await;
    }
    // storage[=PODS]: a StatefulSet with one claim per replica vs none, on PODS/10 nodes.
    let storage_pods: Vec<u32> =
        picked.iter().filter_map(|a| a.strip_prefix("storage=")).filter_map(|v| v.parse().ok()).collect();
    if let Some(n) = storage_pods.first() {
        storage::run((*n / 10).max(1), *n).await;
    } else if all || picked.contains(&"storage") {
        if quick {
            storage::run(10, 100).await;
        } else {
            storage::run(100, 1000).await;
        }
    }
    if !sizes.is_empty() {
        nodes::run(&sizes, Duration::from_secs(if quick { 20 } else { 120 })).await;
    } else if all || picked.contains(&"nodes") {
        if quick {
            nodes::run(&[200], Duration::from_secs(20)).await;
        } else {
            nodes::run(&[1000, 5000], Duration::from_secs(120)).await;
        }
    }
}
