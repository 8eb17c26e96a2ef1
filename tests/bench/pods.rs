//! 10,000 pods on 100 fake nodes, once from a PodPool and once from a Deployment: time until
//! all Running, pods Running per second, writes per pod, operator CPU and memory, and time
//! to delete them all.

use super::harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kwok_pools::kinds::podpool::PodPool;
use std::time::Duration;

const NS: &str = "default";

fn node_pool(nodes: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "bench-pod-nodes"},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.0.0.0/12", "maskSize": 24},
            "nodeTemplate": {"status": {"capacity": {"cpu": "256", "memory": "1Ti", "pods": "250"}}}
        }
    })
}

fn pod_template(app: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "fake-image", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
        }
    })
}

fn pod_pool(count: u32, normal_events: bool) -> serde_json::Value {
    let mut pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "PodPool",
        "metadata": {"name": "bench-podpool", "namespace": NS},
        "spec": {"podCount": count, "podTemplate": pod_template("bench-podpool")}
    });
    if normal_events {
        pool["spec"]["lifecycle"] = serde_json::json!({"pods": {"normalEvents": true}});
    }
    pool
}

fn deployment(count: u32) -> serde_json::Value {
    let mut template = pod_template("bench-deploy");
    template["spec"]["tolerations"] =
        serde_json::json!([{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]);
    template["spec"]["nodeSelector"] = serde_json::json!({"type": "kwok"});
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench-deploy", "namespace": NS},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": {"app": "bench-deploy"}},
            "template": template
        }
    })
}

async fn count_pods(client: &kube::Client, app: &str) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("app={app}"));
    match api.list_metadata(&lp).await {
        Ok(l) => l.items.len(),
        Err(_) => usize::MAX,
    }
}

async fn podpool_ready(client: &kube::Client) -> i32 {
    Api::<PodPool>::namespaced(client.clone(), NS)
        .get("bench-podpool")
        .await
        .ok()
        .and_then(|p| p.status)
        .map(|s| s.ready_replicas)
        .unwrap_or(0)
}

async fn deployment_available(client: &kube::Client) -> i32 {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get("bench-deploy")
        .await
        .ok()
        .and_then(|d| d.status)
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// What one round measured: how long until all Running, and the API server's CPU meanwhile.
struct Round {
    wall: f64,
    done: bool,
    apiserver_cpu: f64,
    events_per_pod: f64,
}

pub async fn run(nodes: u32, pods: u32, kinds: &[&str]) {
    println!("\n## {pods} pods on {nodes} nodes ({})", machine());
    let Some((bench, op)) = cluster(nodes).await else { return };
    let rss_idle = rss_mib(op.pid());
    for &kind in kinds {
        round(&bench, &op, kind, pods, false, rss_idle).await;
    }
    println!("  operator peak RSS over the run: {:.0} MiB", peak_rss_mib(op.pid()));
}

/// The cost of the kubelet's Normal events: the same PodPool with them off, then on
/// (`lifecycle.pods.normalEvents`), on one cluster.
pub async fn run_events(nodes: u32, pods: u32) {
    println!("\n## Normal events: {pods} pods of a PodPool on {nodes} nodes, off then on ({})", machine());
    let Some((bench, op)) = cluster(nodes).await else { return };
    let rss_idle = rss_mib(op.pid());
    let off = round(&bench, &op, "PodPool", pods, false, rss_idle).await;
    let pools = Api::<PodPool>::namespaced(bench.client.clone(), NS);
    wait_until("the first PodPool gone", Duration::from_secs(300), || async {
        match pools.get_opt("bench-podpool").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.is_some()))),
        }
    })
    .await;
    let on = round(&bench, &op, "PodPool", pods, true, rss_idle).await;
    if off.done && on.done {
        println!(
            "- events on ÷ off: {:.2}× the time to all Running ({:.0} vs {:.0} pods/s), {:.2}× the API server's CPU ({:.1} vs {:.1} CPU-s), {:.1} vs {:.1} event writes per pod",
            on.wall / off.wall,
            f64::from(pods) / on.wall,
            f64::from(pods) / off.wall,
            on.apiserver_cpu / off.apiserver_cpu.max(0.001),
            on.apiserver_cpu,
            off.apiserver_cpu,
            on.events_per_pod,
            off.events_per_pod
        );
    }
}

/// A fresh cluster with the operator and `nodes` Ready nodes for the pods.
async fn cluster(nodes: u32) -> Option<(Bench, Operator)> {
    let bench = Bench::cluster("bench-pods").await;
    let op = Operator::start(&bench, &["--pod-termination-delay", "0s"]).await;
    if !nodes_ready(&bench.client, "bench-pod-nodes", node_pool(nodes), nodes).await {
        return None;
    }
    // Let node IPAM and the first heartbeats settle before measuring.
    tokio::time::sleep(Duration::from_secs(5)).await;
    Some((bench, op))
}

/// `pods` pods of a `kind` (PodPool or Deployment) until all Running, then deleted.
async fn round(bench: &Bench, op: &Operator, kind: &str, pods: u32, normal_events: bool, rss_idle: f64) -> Round {
    let client = bench.client.clone();
    let pp = PatchParams::apply("bench").force();
    {
        let writes_before = bench.writes().await;
        let op_writes_before = op.metric("kwok_pools_api_writes_total").await;
        let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
        let app = if kind == "PodPool" { "bench-podpool" } else { "bench-deploy" };
        if kind == "PodPool" {
            Api::<PodPool>::namespaced(client.clone(), NS)
                .patch("bench-podpool", &pp, &Patch::Apply(pod_pool(pods, normal_events)))
                .await
                .unwrap();
        } else {
            Api::<Deployment>::namespaced(client.clone(), NS)
                .patch("bench-deploy", &pp, &Patch::Apply(deployment(pods)))
                .await
                .unwrap();
        }
        let done = wait_until(&format!("{pods} pods of a {kind} Running"), Duration::from_secs(900), || async {
            let r = if kind == "PodPool" { podpool_ready(&client).await } else { deployment_available(&client).await };
            if r as u32 >= pods { Ok(()) } else { Err(format!("{r} ready")) }
        })
        .await;
        let (op_cpu, cp_cpu, wall) = cpu.read();
        let writes = delta(&bench.writes().await, &writes_before);
        let op_writes = op.metric("kwok_pools_api_writes_total").await - op_writes_before;
        let events = if normal_events { " with Normal events" } else { "" };
        println!("- {kind} of {pods}{events}:");
        if done.is_some() {
            println!("  all Running after {wall:.1}s: {:.0} pods Running/s", pods as f64 / wall);
        } else {
            println!("  NOT all Running after {wall:.1}s");
        }
        report_writes("pod", &writes, op_writes, pods);
        report_cpu("CPU", op_cpu, &cp_cpu, wall);
        let rss = rss_mib(op.pid());
        println!(
            "  operator RSS {rss:.0} MiB with the pods ({rss_idle:.0} MiB before: {:.1} KiB per pod), peak {:.0} MiB",
            (rss - rss_idle).max(0.0) * 1024.0 / pods as f64,
            peak_rss_mib(op.pid())
        );
        let measured = Round {
            wall,
            done: done.is_some(),
            apiserver_cpu: cp_cpu.iter().filter(|(n, _)| n.contains("apiserver")).map(|(_, c)| c).sum(),
            events_per_pod: writes.get("events").copied().unwrap_or(0.0) / f64::from(pods.max(1)),
        };

        let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
        if kind == "PodPool" {
            Api::<PodPool>::namespaced(client.clone(), NS)
                .delete("bench-podpool", &DeleteParams::default())
                .await
                .unwrap();
        } else {
            Api::<Deployment>::namespaced(client.clone(), NS)
                .delete("bench-deploy", &DeleteParams::default())
                .await
                .unwrap();
        }
        let gone = wait_until(&format!("{pods} pods deleted"), Duration::from_secs(900), || async {
            let left = count_pods(&client, app).await;
            if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
        })
        .await;
        let (op_cpu, cp_cpu, wall) = cpu.read();
        if gone.is_some() {
            println!("  deleted, all {pods} pods gone after {wall:.1}s ({:.0} pods/s)", pods as f64 / wall);
        }
        report_cpu("delete CPU", op_cpu, &cp_cpu, wall);
        measured
    }
}
