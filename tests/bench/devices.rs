//! The scheduler's cost of Dynamic Resource Allocation, on simulated accelerators: NODES fake
//! nodes with 8 devices each (one ResourceSlice per node), then a Deployment of PODS pods twice
//! — without claims, then with one ResourceClaim per pod from a template through a DeviceClass
//! with a CEL selector. Prints pods Ready per second for each, their ratio, the control plane's
//! CPU by component (where the cost lands), the time to publish the slices, and the operator's
//! CPU and RSS.

use super::harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use std::time::Duration;

const NS: &str = "default";
const POOL: &str = "bench-gpus";
const DRIVER: &str = "gpu.bench.example.com";
const DEVICES: u32 = 8;

fn node_pool(nodes: u32) -> serde_json::Value {
    let capacity = serde_json::json!({"cpu": "256", "memory": "2Ti", "pods": "110"});
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.0.0.0/12", "maskSize": 24},
            "devices": [{"driver": DRIVER, "count": DEVICES, "attributes": {"model": {"string": "A100"}}, "capacity": {"memory": "80Gi"}}],
            "nodeTemplate": {"metadata": {"labels": {"bench": POOL}}, "status": {"capacity": capacity, "allocatable": capacity}}
        }
    })
}

fn deployment(name: &str, replicas: u32, claims: bool) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "nodeSelector": {"bench": POOL},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "cuda"}]
    });
    if claims {
        spec["resourceClaims"] = serde_json::json!([{"name": "gpu", "resourceClaimTemplateName": "bench-one-gpu"}]);
        spec["containers"][0]["resources"] = serde_json::json!({"claims": [{"name": "gpu"}]});
    }
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

fn class_and_template() -> [serde_json::Value; 2] {
    [
        serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "bench-gpu"},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].model == 'A100'")}}]}
        }),
        serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "bench-one-gpu", "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "bench-gpu"}}]}}}
        }),
    ]
}

/// Runs a Deployment of `pods` until every pod is Ready; pods/s (None if not all were).
async fn round(bench: &Bench, op: &Operator, name: &str, pods: u32, claims: bool) -> Option<f64> {
    let client = bench.client.clone();
    let api = Api::<Deployment>::namespaced(client.clone(), NS);
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    api.patch(name, &PatchParams::apply("bench").force(), &Patch::Apply(deployment(name, pods, claims))).await.unwrap();
    let what = format!("{pods} pods {} Ready", if claims { "with claims" } else { "without claims" });
    let done = wait_until(&what, Duration::from_secs(1200), || async {
        let ready = api.get(name).await.ok().and_then(|d| d.status).and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready as u32 >= pods { Ok(()) } else { Err(format!("{ready} Ready")) }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    let rate = done.map(|()| f64::from(pods) / wall);
    match rate {
        Some(r) => println!("- {what} after {wall:.1}s: {r:.0} pods/s"),
        None => println!("- NOT all {what} after {wall:.1}s"),
    }
    report_cpu("  CPU", op_cpu, &cp_cpu, wall);
    println!("  operator RSS {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));
    let _ = api.delete(name, &DeleteParams::background()).await;
    let pods_api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("app={name}"));
    wait_until(&format!("{name}'s pods gone"), Duration::from_secs(600), || async {
        let left = pods_api.list_metadata(&lp).await.map_or(usize::MAX, |l| l.items.len());
        if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
    })
    .await;
    rate
}

pub async fn run(nodes: u32, pods: u32) {
    let pods = pods.min(nodes * DEVICES);
    println!(
        "\n## DRA: {pods} pods on {nodes} nodes x {DEVICES} simulated devices, without and with claims ({})",
        machine()
    );
    let bench = Bench::cluster("bench-dra").await;
    let op = Operator::start(&bench, &["--pod-termination-delay", "0s"]).await;
    let client = bench.client.clone();
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    if !nodes_ready(&client, POOL, node_pool(nodes), nodes).await {
        return;
    }
    let slices = Api::<ResourceSlice>::all(client.clone());
    let lp = ListParams::default().labels(&format!("{}={POOL}", kwok_pools::kinds::nodepool::devices::POOL_LABEL));
    let published = wait_until("a ResourceSlice per node", Duration::from_secs(600), || async {
        let n = slices.list_metadata(&lp).await.map_or(0, |l| l.items.len());
        if n as u32 >= nodes { Ok(()) } else { Err(format!("{n} slices")) }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    if published.is_none() {
        return;
    }
    println!(
        "- {nodes} nodes Ready and their {nodes} ResourceSlices ({} devices) published after {wall:.1}s",
        nodes * DEVICES
    );
    report_cpu("  CPU", op_cpu, &cp_cpu, wall);
    let pp = PatchParams::apply("bench").force();
    let [class, template] = class_and_template();
    let classes = Api::<k8s_openapi::api::resource::v1::DeviceClass>::all(client.clone());
    classes.patch("bench-gpu", &pp, &Patch::Apply(class)).await.unwrap();
    let templates = Api::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>::namespaced(client.clone(), NS);
    templates.patch("bench-one-gpu", &pp, &Patch::Apply(template)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let plain = round(&bench, &op, "bench-plain", pods, false).await;
    let claimed = round(&bench, &op, "bench-claims", pods, true).await;
    if let (Some(p), Some(c)) = (plain, claimed) {
        println!("- with claims {c:.0} pods/s, without {p:.0} pods/s: DRA runs at {:.2}x the rate without", c / p);
    }
    drop(op);
    bench.delete();
}
