//! A VMIPool that keeps VirtualMachines (issue 45): one manifest of `vms` VMs
//! (`spec.virtualMachine: {runStrategy: Always}`) on `vms / 10` simulated nodes until every VM
//! is Running and the pool counts them ready; then the pool's run strategy set to `Halted`
//! until every VM is Stopped with no VMI left, and back to `Always` until all run again. For
//! each phase: wall time, API writes per VM, operator and control-plane CPU; liveness beside
//! speed: the same VMs (by UID) throughout, the pool's ready count.

use super::harness::*;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kwok_pools::kinds::vmipool::VMIPool;
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use kwok_pools::kinds::vmipool::vm::VirtualMachine;
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "default";
const NODES: &str = "bench-vmpool-nodes";
const POOL: &str = "bench-vmpool";

fn vm_pool(vms: u32, strategy: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "VMIPool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {"vmiCount": vms, "virtualMachine": {"runStrategy": strategy}, "vmiTemplate": {"spec": {
            "domain": {"devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                                   "interfaces": [{"name": "default", "masquerade": {}}]},
                       "memory": {"guest": "128Mi"}},
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo"}}]
        }}}
    })
}

fn of_pool() -> ListParams {
    ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={POOL}"))
}

/// The pool's VMs: UID by name, and how many show `status`.
async fn vms_showing(client: &kube::Client, status: &str) -> (BTreeMap<String, String>, usize) {
    let list = Api::<VirtualMachine>::namespaced(client.clone(), NS).list(&of_pool()).await.map(|l| l.items);
    let list = list.unwrap_or_default();
    let showing = list.iter().filter(|v| v.status.as_ref().and_then(|s| s.printable_status.as_deref()) == Some(status));
    let uids =
        list.iter().map(|v| (v.metadata.name.clone().unwrap_or_default(), v.metadata.uid.clone().unwrap_or_default()));
    (uids.collect(), showing.count())
}

async fn live_vmis(client: &kube::Client) -> usize {
    let list = Api::<VirtualMachineInstance>::namespaced(client.clone(), NS).list(&of_pool()).await;
    list.map(|l| l.items.iter().filter(|v| v.metadata.deletion_timestamp.is_none()).count()).unwrap_or(usize::MAX)
}

async fn pool_ready(client: &kube::Client) -> i32 {
    let pool = Api::<VMIPool>::namespaced(client.clone(), NS).get(POOL).await.ok();
    pool.and_then(|p| p.status).map_or(-1, |s| s.ready_replicas)
}

/// One phase: applies the pool with `strategy`, waits until every VM shows `status` (and,
/// for `Stopped`, no VMI is left), then prints time, writes, CPU and the pool's ready count.
/// The VMs' UIDs by name at the end, or `None` when the phase did not end.
async fn phase(
    bench: &Bench,
    op: &Operator,
    vms: u32,
    strategy: &str,
    status: &str,
) -> Option<BTreeMap<String, String>> {
    let client = bench.client.clone();
    let (writes_before, op_before) = (bench.writes().await, op.metric("kwok_pools_api_writes_total").await);
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let api = Api::<VMIPool>::namespaced(client.clone(), NS);
    let pp = PatchParams::apply("bench").force();
    if let Err(e) = api.patch(POOL, &pp, &Patch::Apply(vm_pool(vms, strategy))).await {
        println!("  ! applying the VMIPool failed: {e}");
        return None;
    }
    let want = if status == "Running" { i32::try_from(vms).unwrap_or(i32::MAX) } else { 0 };
    let done = wait_until(&format!("{vms} VMs {status}"), Duration::from_secs(900), || async {
        let (uids, showing) = vms_showing(&client, status).await;
        let vmis = if status == "Stopped" { live_vmis(&client).await } else { 0 };
        let ready = pool_ready(&client).await;
        if showing as u32 >= vms && vmis == 0 && ready == want {
            Ok(uids)
        } else {
            Err(format!("{showing} {status}, {vmis} VMIs left, pool ready {ready}"))
        }
    })
    .await;
    let (op_cpu, cp_cpu, wall) = cpu.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let op_writes = op.metric("kwok_pools_api_writes_total").await - op_before;
    println!("- runStrategy {strategy}:");
    match &done {
        Some(_) => println!(
            "  all {vms} VMs {status} after {wall:.1}s ({:.0} VMs/s), pool ready {want}",
            f64::from(vms) / wall
        ),
        None => println!("  NOT all {status} after {wall:.1}s"),
    }
    report_writes("VM", &writes, op_writes, vms);
    report_cpu("CPU", op_cpu, &cp_cpu, wall);
    done
}

pub async fn run(vms: u32) {
    let nodes = (vms / 10).max(2);
    println!("\n## A VMIPool of {vms} VirtualMachines on {nodes} nodes: run, stop, start ({})", machine());
    let bench = Bench::cluster("bench-vmpool").await;
    let op = Operator::start(&bench, &[]).await;
    if !nodes_ready(&bench.client, NODES, super::vms::kvm_node_pool(NODES, nodes, false), nodes).await {
        println!("  ! {nodes} nodes not Ready; giving up");
        return;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_idle = rss_mib(op.pid());
    let Some(first) = phase(&bench, &op, vms, "Always", "Running").await else { return };
    println!("  operator RSS {:.0} MiB with the VMs ({rss_idle:.0} MiB before)", rss_mib(op.pid()));
    let Some(stopped) = phase(&bench, &op, vms, "Halted", "Stopped").await else { return };
    let Some(again) = phase(&bench, &op, vms, "Always", "Running").await else { return };
    let same = first.iter().filter(|(n, uid)| stopped.get(*n) == Some(uid) && again.get(*n) == Some(uid)).count();
    println!("  liveness: {same} of {vms} VMs the same objects (by UID) through stop and start");
    println!("  operator RSS {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));
    drop(op);
    bench.delete();
}
