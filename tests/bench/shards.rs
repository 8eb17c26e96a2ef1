//! The simulator sharded over three `kwok-pools simulate` processes: a NodePool of 20,000
//! nodes (created by a controllers-only `kwok-pools run`), held for two minutes; per-process
//! share, CPU and memory, and whether every lease was renewed on time.

use super::harness::*;
use kube::api::{Api, Patch, PatchParams};
use kwok_pools::kinds::nodepool::NodePool;
use std::time::{Duration, Instant};

pub async fn run(n: u32, hold: Duration) {
    println!("\n## Sharded simulator: {n} nodes, 3 simulate processes ({})", machine());
    let bench = Bench::cluster("bench-shards").await;
    let controllers = Operator::start_command(&bench, "run", "controllers", &["--no-simulator", "--no-webhook"]).await;
    let mut sims = Vec::new();
    for id in ["sim-0", "sim-1", "sim-2"] {
        sims.push(Operator::start_command(&bench, "simulate", id, &["--identity", id]).await);
    }
    let client = bench.client.clone();
    let name = format!("shards-{n}");
    let pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"nodeCount": n, "nodeTemplate": {"status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}}
    });
    let start = Instant::now();
    Api::<NodePool>::all(client.clone())
        .patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(pool))
        .await
        .unwrap();
    let all_ready = wait_until(&format!("{n} nodes Ready"), Duration::from_secs(1200), || async {
        let r = ready_count(&client, &name).await;
        if r as u32 >= n { Ok(()) } else { Err(format!("{r} Ready")) }
    })
    .await;
    let took = start.elapsed().as_secs_f64();
    match all_ready {
        Some(()) => println!("- all {n} Ready after {took:.1}s ({:.0} nodes/s)", f64::from(n) / took),
        None => println!("- NOT all Ready after {took:.1}s"),
    }
    let pids: Vec<i32> = sims.iter().map(Operator::pid).collect();
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let cp = CpuMeter::start(controllers.pid(), bench.control_plane_pids());
    let writes_before = bench.writes().await;
    let late_before: f64 =
        futures::future::join_all(sims.iter().map(|s| s.metric("kwok_pools_simulator_late_lease_renewals_total")))
            .await
            .iter()
            .sum();
    println!("  holding {n} nodes for {}s…", hold.as_secs());
    let (mut worst_age, mut min_ready) = (0.0f64, i32::MAX);
    let end = Instant::now() + hold;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (_, age) = oldest_lease(&client, &name).await;
        let r = ready_count(&client, &name).await;
        worst_age = worst_age.max(age);
        min_ready = min_ready.min(r);
        eprintln!("    … hold: oldest lease {age:.1}s, {r} Ready");
    }
    let (_, cp_cpu, wall) = cp.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let late_after: f64 =
        futures::future::join_all(sims.iter().map(|s| s.metric("kwok_pools_simulator_late_lease_renewals_total")))
            .await
            .iter()
            .sum();
    for (i, s) in sims.iter().enumerate() {
        let nodes = s.metric("kwok_pools_simulator_managed_nodes").await;
        let cpu = cpu_seconds(pids[i]) - cpu_before[i];
        println!(
            "  sim-{i}: {nodes:.0} nodes, {cpu:.1} CPU-s over the hold ({:.0}% of a core), RSS {:.0} MiB (peak {:.0})",
            cpu / wall * 100.0,
            rss_mib(pids[i]),
            peak_rss_mib(pids[i])
        );
    }
    let lease_writes = writes.get("leases").copied().unwrap_or(0.0);
    let late = late_after - late_before;
    let on_time = worst_age < 20.0 && late == 0.0 && min_ready as u32 == n;
    println!(
        "  hold {wall:.0}s: {:.0} lease writes/s, oldest lease seen {worst_age:.1}s (due every 10s, valid 40s), fewest Ready {min_ready}, late renewals {late} => every lease on time: {}",
        lease_writes / wall,
        if on_time { "yes" } else { "NO" }
    );
    report_cpu("control plane during the hold", 0.0, &cp_cpu, wall);
}
