//! Storage (issue 46): a StatefulSet of `pods` replicas with one claim each, beside the same
//! StatefulSet without claims, on `nodes` simulated nodes in three zones. Each round measures
//! the time from the apply until every replica is Ready, the API writes per pod by resource,
//! and the CPU of the operator and the control plane; a round with claims also checks every
//! claim is Bound to a volume in its pod's zone and attached (liveness beside speed). Rounds
//! alternate (without, with, without, with) to spread the machine's noise over both.

use super::harness::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const NODES: &str = "bench-storage-nodes";
const CLASS: &str = "bench-disk";
const ZONE: &str = "topology.kubernetes.io/zone";

fn node_pool(nodes: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": NODES},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.64.0.0/10", "maskSize": 24},
            "topology": {"zones": ["zone-a", "zone-b", "zone-c"]},
            "nodeTemplate": {"status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}
        }
    })
}

fn storage_class() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": CLASS},
        "provisioner": "disk.csi.pools.kwok.x-k8s.io", "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true, "reclaimPolicy": "Delete"
    })
}

fn stateful_set(ns: &str, pods: u32, claims: bool) -> serde_json::Value {
    let mut s = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": ns},
        "spec": {
            "serviceName": "db", "replicas": pods, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                "nodeSelector": {"type": "kwok"},
                "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "db", "image": "postgres:17", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
            }}
        }
    });
    if claims {
        s["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
            serde_json::json!([{"name": "data", "mountPath": "/data"}]);
        s["spec"]["volumeClaimTemplates"] = serde_json::json!([{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "resources": {"requests": {"storage": "1Gi"}}
        }}]);
    }
    s
}

/// Every claim of `ns` Bound to a volume in the zone of its pod's node, and attached there:
/// the number that are not.
async fn unplaced(client: &kube::Client, ns: &str) -> usize {
    let zones: HashMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, n.metadata.labels?.get(ZONE)?.clone())))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap().items;
    let claims: HashMap<String, PersistentVolumeClaim> = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
    let volumes: HashMap<String, PersistentVolume> = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
        .collect();
    let attached: Vec<(String, String)> = Api::<VolumeAttachment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.attached))
        .filter_map(|a| Some((a.spec.source.persistent_volume_name?, a.spec.node_name)))
        .collect();
    let ok = |p: &Pod| -> Option<()> {
        let node = p.spec.as_ref()?.node_name.clone()?;
        let claim = claims.get(&format!("data-{}", p.metadata.name.as_deref()?))?;
        let pv = volumes.get(claim.spec.as_ref()?.volume_name.as_ref()?)?;
        let term = pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms.first()?;
        let zone = term.match_expressions.as_ref()?.iter().find(|e| e.key == ZONE)?.values.as_ref()?.first()?;
        (Some(zone) == zones.get(&node) && attached.contains(&(pv.metadata.name.clone()?, node))).then_some(())
    };
    pods.iter().filter(|p| ok(p).is_none()).count()
}

struct Round {
    wall: f64,
    op_cpu: f64,
    cp_cpu: f64,
    writes: f64,
}

async fn round(bench: &Bench, op: &Operator, pods: u32, claims: bool, n: u32) -> Option<Round> {
    let client = &bench.client;
    let ns = format!("bench-storage-{n}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(&Default::default(), &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap())
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await; // its ServiceAccount
    let what = if claims { "one claim each" } else { "no claims" };
    let (writes_before, op_before) = (bench.writes().await, op.metric("kwok_pools_api_writes_total").await);
    let meter = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    api.patch("db", &PatchParams::apply("bench").force(), &Patch::Apply(stateful_set(&ns, pods, claims)))
        .await
        .unwrap();
    let done = wait_until(&format!("{pods} replicas Ready ({what})"), Duration::from_secs(900), || async {
        let r = api.get("db").await.ok().and_then(|s| s.status).and_then(|s| s.ready_replicas).unwrap_or(0);
        if r as u32 >= pods { Ok(()) } else { Err(format!("{r} Ready")) }
    })
    .await;
    let (op_cpu, cp, wall) = meter.read();
    let writes = delta(&bench.writes().await, &writes_before);
    let op_writes = op.metric("kwok_pools_api_writes_total").await - op_before;
    let cp_cpu: f64 = cp.iter().map(|(_, v)| v).sum();
    let result = done.map(|()| Round { wall, op_cpu, cp_cpu, writes: writes.values().sum() });
    match &result {
        Some(r) => {
            println!(
                "| {what} | {wall:.1} | {:.0} | {:.2} | {op_cpu:.1} | {cp_cpu:.1} |",
                f64::from(pods) / wall,
                r.writes / f64::from(pods)
            );
            report_writes("pod", &writes, op_writes, pods);
        }
        None => println!("| {what} | not all Ready within 900 s | | | | |"),
    }
    if claims && result.is_some() {
        let bad = unplaced(client, &ns).await;
        if bad > 0 {
            println!("  ! {bad} replicas without a Bound claim in their zone, attached: the figures above are void");
        }
    }
    // Clean up: the StatefulSet, its claims, then wait for pods and volumes to go.
    let _ = api.delete("db", &DeleteParams::default()).await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let _ = pvcs.delete_collection(&DeleteParams::default(), &ListParams::default()).await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    wait_until("the round's pods and volumes gone", Duration::from_secs(900), || async {
        let p = pods_api.list_metadata(&ListParams::default()).await.map_or(usize::MAX, |l| l.items.len());
        let v = volumes.list_metadata(&ListParams::default()).await.map_or(usize::MAX, |l| l.items.len());
        if p + v == 0 { Ok(()) } else { Err(format!("{p} pods, {v} volumes left")) }
    })
    .await;
    result
}

pub async fn run(nodes: u32, pods: u32) {
    println!("\n## StatefulSet of {pods} replicas on {nodes} nodes: one claim each vs none ({})", machine());
    let bench = Bench::cluster("bench-storage").await;
    let client = bench.client.clone();
    let op = Operator::start(&bench, &[]).await;
    let started = Instant::now();
    if !nodes_ready(&client, NODES, node_pool(nodes), nodes).await {
        println!("  ! {nodes} nodes not Ready; giving up");
        return;
    }
    eprintln!("    {nodes} nodes Ready in {:.0} s", started.elapsed().as_secs_f64());
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(client.clone());
    classes.patch(CLASS, &PatchParams::apply("bench").force(), &Patch::Apply(storage_class())).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await; // the nodes' CSINodes
    println!(
        "| claims | s until all Ready | pods Ready/s | API writes per pod | operator CPU-s | control plane CPU-s |"
    );
    println!("|---|---|---|---|---|---|");
    let mut by = [Vec::new(), Vec::new()];
    for (n, claims) in [false, true, false, true].into_iter().enumerate() {
        if let Some(r) = round(&bench, &op, pods, claims, n as u32).await {
            by[usize::from(claims)].push(r);
        }
    }
    let mean = |rs: &[Round], f: fn(&Round) -> f64| rs.iter().map(f).sum::<f64>() / rs.len().max(1) as f64;
    let [none, with] = &by;
    if none.len() == 2 && with.len() == 2 {
        println!(
            "  with ÷ without claims (means of two rounds each): time {:.2}, API writes {:.2}, operator CPU {:.2}, control plane CPU {:.2}",
            mean(with, |r| r.wall) / mean(none, |r| r.wall),
            mean(with, |r| r.writes) / mean(none, |r| r.writes),
            mean(with, |r| r.op_cpu) / mean(none, |r| r.op_cpu),
            mean(with, |r| r.cp_cpu) / mean(none, |r| r.cp_cpu),
        );
    } else {
        println!("  ! a round did not finish: no ratio");
    }
    println!("  operator RSS {:.0} MiB, peak {:.0} MiB", rss_mib(op.pid()), peak_rss_mib(op.pid()));
    drop(op);
    bench.delete();
}
