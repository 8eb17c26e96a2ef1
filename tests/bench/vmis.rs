//! 1,000 VMIs on 100 fake nodes from one VMIPool, the simulator playing KubeVirt: time until
//! all Running, VMIs Running per second, writes per VMI (VMI, launcher pod, binding, statuses),
//! operator CPU and memory, and time to delete them all.

use super::harness::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kwok_pools::kinds::vmipool::VMIPool;
use std::time::Duration;

const NS: &str = "default";

fn node_pool(nodes: u32) -> serde_json::Value {
    let capacity = serde_json::json!({"cpu": "256", "memory": "2Ti", "pods": "250", "devices.kubevirt.io/kvm": "1k"});
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "bench-vmi-nodes"},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.0.0.0/12", "maskSize": 24},
            "nodeTemplate": {"status": {"capacity": capacity, "allocatable": capacity}}
        }
    })
}

fn vmi_pool(count: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "VMIPool",
        "metadata": {"name": "bench-vmis", "namespace": NS},
        "spec": {"vmiCount": count, "vmiTemplate": {"spec": {
            "domain": {"devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]}, "memory": {"guest": "128Mi"}},
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo"}}]
        }}}
    })
}

async fn ready(client: &kube::Client) -> i32 {
    Api::<VMIPool>::namespaced(client.clone(), NS)
        .get("bench-vmis")
        .await
        .ok()
        .and_then(|p| p.status)
        .map(|s| s.ready_replicas)
        .unwrap_or(0)
}

async fn launchers_left(client: &kube::Client) -> usize {
    let lp = ListParams::default().labels("kubevirt.io=virt-launcher");
    Api::<Pod>::namespaced(client.clone(), NS).list_metadata(&lp).await.map_or(usize::MAX, |l| l.items.len())
}

pub async fn run(nodes: u32, vmis: u32) {
    println!("\n## {vmis} VMIs on {nodes} nodes ({})", machine());
    let bench = Bench::cluster("bench-vmis").await;
    let op = Operator::start(&bench, &["--pod-termination-delay", "0s"]).await;
    let client = bench.client.clone();
    let pp = PatchParams::apply("bench").force();
    if !nodes_ready(&client, "bench-vmi-nodes", node_pool(nodes), nodes).await {
        return;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_idle = rss_mib(op.pid());
    let writes_before = bench.writes().await;
    let op_writes_before = op.metric("kwok_pools_api_writes_total").await;
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    Api::<VMIPool>::namespaced(client.clone(), NS)
        .patch("bench-vmis", &pp, &Patch::Apply(vmi_pool(vmis)))
        .await
        .unwrap();
    let done = wait_until(&format!("{vmis} VMIs Running"), Duration::from_secs(900), || async {
        let r = ready(&client).await;
        if r as u32 >= vmis { Ok(()) } else { Err(format!("{r} Running")) }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let op_writes = op.metric("kwok_pools_api_writes_total").await - op_writes_before;
    println!("- VMIPool of {vmis}:");
    match done {
        Some(_) => println!("  all Running after {wall:.1}s: {:.0} VMIs Running/s", vmis as f64 / wall),
        None => println!("  NOT all Running after {wall:.1}s"),
    }
    report_writes("VMI", &writes, op_writes, vmis);
    report_cpu("CPU", op_cpu, &cp_cpu, wall);
    let rss = rss_mib(op.pid());
    println!(
        "  operator RSS {rss:.0} MiB with the VMIs ({rss_idle:.0} MiB before), peak {:.0} MiB",
        peak_rss_mib(op.pid())
    );
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    Api::<VMIPool>::namespaced(client.clone(), NS).delete("bench-vmis", &DeleteParams::default()).await.unwrap();
    let gone = wait_until("VMIs and launcher pods deleted", Duration::from_secs(900), || async {
        let api: Api<kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance> =
            Api::namespaced(client.clone(), NS);
        let left = api.list_metadata(&ListParams::default()).await.map_or(usize::MAX, |l| l.items.len());
        let pods = launchers_left(&client).await;
        if left == 0 && pods == 0 { Ok(()) } else { Err(format!("{left} VMIs, {pods} launcher pods left")) }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    if gone.is_some() {
        println!("  deleted, all {vmis} VMIs and their pods gone after {wall:.1}s");
    }
    report_cpu("delete CPU", op_cpu, &cp_cpu, wall);
}
