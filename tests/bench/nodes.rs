//! NodePools of 1,000 and 5,000 nodes: time to Ready, writes per node, operator CPU and
//! memory, and a 2-minute hold checking that every lease is renewed on time.

use super::harness::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kwok_pools::kinds::nodepool::NodePool;
use std::time::Duration;

fn pool(name: &str, count: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "nodeCount": count,
            "nodeTemplate": {"status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
        }
    })
}

/// Nodes of the pool that are Ready according to the API server (one list).
async fn listed_ready(client: &kube::Client, name: &str) -> (usize, usize) {
    let lp = ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={name}"));
    let nodes = Api::<Node>::all(client.clone()).list(&lp).await.map(|l| l.items).unwrap_or_default();
    let ready = nodes.iter().filter(|n| kwok_pools::kubelet::status::node::is_ready(n)).count();
    (nodes.len(), ready)
}

pub async fn run(sizes: &[u32], hold: Duration) {
    println!("\n## NodePool scale ({})", machine());
    let bench = Bench::cluster("bench-nodes").await;
    let op = Operator::start(&bench, &[]).await;
    let client = bench.client.clone();
    let api: Api<NodePool> = Api::all(client.clone());
    let largest = *sizes.iter().max().unwrap_or(&0);
    for &n in sizes {
        let name = format!("bench-{n}");
        let writes_before = bench.writes().await;
        let op_writes_before = op.metric("kwok_pools_api_writes_total").await;
        let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
        api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(pool(&name, n))).await.unwrap();
        let ready = wait_until(&format!("{n} nodes Ready"), Duration::from_secs(600), || async {
            let r = ready_count(&client, &name).await;
            if r as u32 >= n { Ok(()) } else { Err(format!("{r} Ready")) }
        })
        .await;
        let (op_cpu, cp_cpu, wall) = cpu.read();
        let (listed, api_ready) = listed_ready(&client, &name).await;
        let writes = delta(&bench.writes().await, &writes_before);
        println!("- NodePool of {n}:");
        if ready.is_some() {
            println!(
                "  all Ready after {wall:.1}s: {:.0} nodes Ready/s ({listed} listed, {api_ready} Ready by the API)",
                n as f64 / wall
            );
        } else {
            println!("  NOT all Ready after {wall:.1}s ({listed} listed, {api_ready} Ready)");
        }
        let op_writes = op.metric("kwok_pools_api_writes_total").await - op_writes_before;
        report_writes("node", &writes, op_writes, n);
        report_cpu("CPU", op_cpu, &cp_cpu, wall);
        println!("  operator RSS now {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));

        if n == largest && !hold.is_zero() {
            let late_before = op.metric("kwok_pools_simulator_late_lease_renewals_total").await;
            let errors_before = op.metric("kwok_pools_simulator_lease_renewals_total{result=\"error\"}").await;
            let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
            let writes_before = bench.writes().await;
            println!("  holding {n} nodes for {}s…", hold.as_secs());
            let (mut worst_age, mut min_ready, mut samples) = (0.0f64, i32::MAX, 0);
            let end = std::time::Instant::now() + hold;
            while std::time::Instant::now() < end {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let (_, age) = oldest_lease(&client, &name).await;
                let (_, r) = listed_ready(&client, &name).await;
                worst_age = worst_age.max(age);
                min_ready = min_ready.min(r as i32);
                samples += 1;
                eprintln!("    … hold: oldest lease {age:.1}s, {r} Ready");
            }
            let (op_cpu, cp_cpu, wall) = cpu.read();
            let late = op.metric("kwok_pools_simulator_late_lease_renewals_total").await - late_before;
            let errors = op.metric("kwok_pools_simulator_lease_renewals_total{result=\"error\"}").await - errors_before;
            let writes = delta(&bench.writes().await, &writes_before);
            let lease_writes = writes.get("leases").copied().unwrap_or(0.0);
            // On time: no lease ever older than half its 40 s duration (renewals are due every
            // 10 s; the controller manager gives up after 50 s), none failed, no node NotReady.
            let on_time = worst_age < 20.0 && late == 0.0 && errors == 0.0 && min_ready as u32 == n;
            println!(
                "  hold {:.0}s: {samples} samples, oldest lease seen {worst_age:.1}s (due every 10s, valid 40s, grace 50s), \
                 fewest Ready {min_ready}, renewals more than 10s late {late}, failed renewals {errors} => every lease on time: {}",
                wall,
                if on_time { "yes" } else { "NO" }
            );
            println!(
                "  steady load: {:.0} lease writes/s ({:.2} per node per 10s)",
                lease_writes / wall,
                lease_writes / n as f64 / (wall / 10.0)
            );
            report_cpu("hold CPU", op_cpu, &cp_cpu, wall);
        }
        let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
        api.delete(&name, &DeleteParams::default()).await.unwrap();
        wait_until(&format!("{n} nodes deleted"), Duration::from_secs(600), || async {
            let (left, _) = listed_ready(&client, &name).await;
            if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
        })
        .await;
        let (_, _, wall) = cpu.read();
        println!("  pool deleted, all nodes gone after {wall:.1}s");
    }
    println!("  operator peak RSS over the run: {:.0} MiB", peak_rss_mib(op.pid()));
}
