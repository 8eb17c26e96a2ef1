//! KubeVirt VirtualMachines and live migration without KubeVirt (issue 45): `vms`
//! VirtualMachines (`runStrategy: Always`, masquerade on the pod network, so migratable) on
//! `vms / 10` simulated nodes until every one is Running, then `migrations` migrations created
//! at once for as many VMs, run within KubeVirt's default limits (5 at a time in the cluster,
//! 2 out of a node) until every one Succeeded. For each phase: wall time, API writes per
//! object, operator and control-plane CPU, operator RSS; liveness beside speed: every migrated
//! VMI Running on another node, none lost.

use super::harness::*;
use futures::StreamExt;
use kube::api::{Api, ListParams, PostParams};
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use kwok_pools::kinds::vmipool::migration::VirtualMachineInstanceMigration;
use kwok_pools::kinds::vmipool::vm::VirtualMachine;
use std::collections::HashMap;
use std::time::Duration;

const NS: &str = "default";
const NODES: &str = "bench-vm-nodes";

/// A NodePool `name` of `nodes` nodes that advertise the KVM device (room for many VMs each);
/// `pod_cidr`: with a preset podCIDR range (else the controller manager assigns them).
pub fn kvm_node_pool(name: &str, nodes: u32, pod_cidr: bool) -> serde_json::Value {
    let capacity = serde_json::json!({"cpu": "256", "memory": "2Ti", "pods": "250", "devices.kubevirt.io/kvm": "1k"});
    let mut pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"nodeCount": nodes, "nodeTemplate": {"status": {"capacity": capacity, "allocatable": capacity}}}
    });
    if pod_cidr {
        pool["spec"]["podCIDR"] = serde_json::json!({"cidr": "10.0.0.0/12", "maskSize": 24});
    }
    pool
}

fn vm(i: u32) -> VirtualMachine {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": format!("bench-vm-{i}"), "namespace": NS, "labels": {"bench": "vms"}},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"bench": "vms"}}, "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "evictionStrategy": "LiveMigrate",
            "domain": {"devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                                   "interfaces": [{"name": "default", "masquerade": {}}]},
                       "memory": {"guest": "128Mi"}},
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo"}}]
        }}}
    }))
    .unwrap()
}

async fn vms_running(client: &kube::Client) -> usize {
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), NS);
    let list = api.list(&ListParams::default().labels("bench=vms")).await.map(|l| l.items).unwrap_or_default();
    list.iter().filter(|v| v.status.as_ref().and_then(|s| s.printable_status.as_deref()) == Some("Running")).count()
}

async fn vmi_nodes(client: &kube::Client) -> HashMap<String, (String, bool)> {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), NS);
    let list = api.list(&ListParams::default().labels("bench=vms")).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .map(|v| {
            let node = v.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let up = v.phase() == "Running" && v.metadata.deletion_timestamp.is_none();
            (v.metadata.name.unwrap_or_default(), (node, up))
        })
        .collect()
}

pub async fn run(vms: u32, migrations: u32) {
    let nodes = (vms / 10).max(2);
    println!("\n## {vms} VirtualMachines on {nodes} nodes, then {migrations} live migrations ({})", machine());
    let bench = Bench::cluster("bench-vms").await;
    let op = Operator::start(&bench, &[]).await;
    let client = bench.client.clone();
    if !nodes_ready(&client, NODES, kvm_node_pool(NODES, nodes, true), nodes).await {
        println!("  ! {nodes} nodes not Ready; giving up");
        return;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_idle = rss_mib(op.pid());

    // The VMs, created by a client with 64 requests in flight.
    let (writes_before, op_before) = (bench.writes().await, op.metric("kwok_pools_api_writes_total").await);
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), NS);
    let failed: Vec<String> = futures::stream::iter(0..vms)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &vm(i)).await.err().map(|e| format!("bench-vm-{i}: {e}")) }
        })
        .buffer_unordered(64)
        .filter_map(|e| async move { e })
        .collect()
        .await;
    if let Some(first) = failed.first() {
        println!("  ! {} VMs not created, e.g. {first}; giving up", failed.len());
        return;
    }
    let done = wait_until(&format!("{vms} VMs Running"), Duration::from_secs(900), || async {
        let r = vms_running(&client).await;
        if r as u32 >= vms { Ok(()) } else { Err(format!("{r} Running")) }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let op_writes = op.metric("kwok_pools_api_writes_total").await - op_before;
    println!("- {vms} VirtualMachines (runStrategy Always):");
    match done {
        Some(()) => println!("  all Running after {wall:.1}s: {:.0} VMs Running/s", f64::from(vms) / wall),
        None => println!("  NOT all Running after {wall:.1}s"),
    }
    report_writes("VM", &writes, op_writes, vms);
    report_cpu("CPU", op_cpu, &cp_cpu, wall);
    println!("  operator RSS {:.0} MiB with the VMs ({rss_idle:.0} MiB before)", rss_mib(op.pid()));
    if done.is_none() {
        return;
    }

    // The migrations, created at once.
    let before = vmi_nodes(&client).await;
    let (writes_before, op_before) = (bench.writes().await, op.metric("kwok_pools_api_writes_total").await);
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let mapi: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), NS);
    let failed: Vec<String> = futures::stream::iter(0..migrations)
        .map(|i| {
            let mapi = mapi.clone();
            async move {
                let mut m = VirtualMachineInstanceMigration::of(&format!("bench-vm-{i}"));
                m.metadata.name = Some(format!("bench-migration-{i}"));
                mapi.create(&PostParams::default(), &m).await.err().map(|e| format!("bench-migration-{i}: {e}"))
            }
        })
        .buffer_unordered(64)
        .filter_map(|e| async move { e })
        .collect()
        .await;
    if let Some(first) = failed.first() {
        println!("  ! {} migrations not created, e.g. {first}; giving up", failed.len());
        return;
    }
    let ended = wait_until(&format!("{migrations} migrations ended"), Duration::from_secs(1800), || async {
        let list = mapi.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
        let (ok, failed) = (
            list.iter().filter(|m| m.phase() == "Succeeded").count(),
            list.iter().filter(|m| m.phase() == "Failed").count(),
        );
        if (ok + failed) as u32 >= migrations {
            Ok((ok, failed))
        } else {
            Err(format!("{ok} Succeeded, {failed} Failed"))
        }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let op_writes = op.metric("kwok_pools_api_writes_total").await - op_before;
    println!("- {migrations} live migrations created at once (5 at a time in the cluster, 2 out of a node):");
    match ended {
        Some((ok, failed)) => println!(
            "  all ended after {wall:.1}s: {ok} Succeeded, {failed} Failed; {:.1} migrations/s",
            f64::from(migrations) / wall
        ),
        None => println!("  NOT all ended after {wall:.1}s"),
    }
    report_writes("migration", &writes, op_writes, migrations);
    report_cpu("CPU", op_cpu, &cp_cpu, wall);
    let after = vmi_nodes(&client).await;
    let moved = (0..migrations)
        .map(|i| format!("bench-vm-{i}"))
        .filter(|n| matches!((before.get(n), after.get(n)), (Some((a, _)), Some((b, true))) if a != b))
        .count();
    let lost = before.keys().filter(|n| !after.get(*n).is_some_and(|(_, up)| *up)).count();
    println!(
        "  liveness: {moved} of {migrations} migrated VMIs Running on another node; {lost} of {vms} VMIs not Running"
    );
    println!("  operator RSS {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));
    drop(op);
    bench.delete();
}
