//! The shared client: creates nodes and pods for every tool alike (as fast as it can, `n`
//! requests in flight, no client-side rate limit), deletes pods, and for the bare writer
//! writes each object in its final state and renews its leases.

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kwok_pools::informer::pod::SlimPod;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub const NS: &str = "default";

/// The node every tool's node looks like before the tool touches it (index `i`); with a
/// podCIDR when `preset` (else the controller manager assigns one).
pub fn node(i: u32, final_state: bool, preset: bool) -> Node {
    let name = format!("cmp-node-{i}");
    let mut node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        },
        "spec": {
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {
            "capacity": capacity(), "allocatable": capacity()
        }
    }))
    .unwrap();
    if preset && let Some(spec) = node.spec.as_mut() {
        let cidr = preset_cidr(i);
        spec.pod_cidr = Some(cidr.clone());
        spec.pod_cidrs = Some(vec![cidr]);
    }
    if final_state {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        node.status = Some(kwok_pools::kubelet::status::node::simulated(
            &name,
            node.status.as_ref(),
            &[host_ip(i)],
            None,
            &now,
            &Default::default(),
        ));
    }
    node
}

/// Node `i`'s preset podCIDR: inside the local cluster's cluster CIDR (10.128.0.0/9), as a
/// real node's is (the controller manager's range allocator retries a node outside it for
/// ever), and the one a NodePool with [`node_pool`]'s `spec.podCIDR` gives its node `i`.
fn preset_cidr(i: u32) -> String {
    format!("10.{}.{}.0/24", 128 + i / 256, i % 256)
}

pub fn capacity() -> serde_json::Value {
    serde_json::json!({"cpu": "256", "memory": "1Ti", "pods": "250"})
}

fn host_ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 168, (i / 250) as u8, (i % 250 + 2) as u8))
}

/// The NodePool kwok-pools makes the same nodes from (with `spec.podCIDR` when `preset`, else
/// as the samples write it).
pub fn node_pool(count: u32, preset: bool) -> serde_json::Value {
    let mut pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "cmp-node"},
        "spec": {
            "nodeCount": count,
            "nodeTemplate": {
                "metadata": {"labels": {"kubernetes.io/os": "linux"}},
                "status": {"capacity": capacity(), "allocatable": capacity()}
            }
        }
    });
    if preset {
        pool["spec"]["podCIDR"] = serde_json::json!({"cidr": "10.128.0.0/9", "maskSize": 24});
    }
    pool
}

pub fn pod(i: u32, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("cmp-pod-{i}"), "namespace": NS, "labels": {"app": "cmp"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "fake-image",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
        }
    }))
    .unwrap()
}

/// Runs `op` on every item with `concurrency` in flight, retrying each failure up to ten
/// times (a fresh cluster refuses pods until its default ServiceAccount exists); returns
/// how many still failed.
pub async fn each<T, F, Fut>(items: Vec<T>, concurrency: usize, op: F) -> usize
where
    T: Clone,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let failed = AtomicUsize::new(0);
    let last_error = std::sync::Mutex::new(None::<String>);
    futures::stream::iter(items)
        .for_each_concurrent(concurrency, |item| {
            let (op, failed, last_error) = (&op, &failed, &last_error);
            async move {
                for attempt in 0..10u32 {
                    match op(item.clone()).await {
                        Ok(()) => return,
                        Err(kube::Error::Api(s)) if s.code == 409 && attempt > 0 => return, // a retried create that went through
                        Err(e) => {
                            *last_error.lock().unwrap() = Some(e.to_string());
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt + 1))).await;
                        }
                    }
                }
                failed.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    let failed = failed.into_inner();
    if failed > 0 {
        eprintln!("  ! {failed} requests failed; last error: {:?}", last_error.into_inner().unwrap());
    }
    failed
}

/// Creates nodes `0..count` (in their final state, with a lease each, for the bare writer).
/// `leased`: where the bare writer notes each lease it created (its renewer's list).
pub async fn create_nodes(
    client: &kube::Client,
    count: u32,
    bare: bool,
    concurrency: usize,
    leased: Leased,
    lease_seconds: i32,
    preset: bool,
) -> usize {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pp = PostParams::default();
    each((0..count).collect(), concurrency, |i| {
        let (nodes, leases, pp, leased) = (&nodes, &leases, &pp, &leased);
        async move {
            // A retried create that went through: the node as stored (its UID owns the lease).
            let created = match nodes.create(pp, &node(i, bare, preset)).await {
                Err(kube::Error::Api(s)) if s.code == 409 => nodes.get(&format!("cmp-node-{i}")).await?,
                other => other?,
            };
            if bare {
                let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
                let name = created.metadata.name.clone().unwrap_or_default();
                let uid = created.metadata.uid.clone().unwrap_or_default();
                let lease = kwok_pools::kubelet::node::lease::lease(&name, &uid, lease_seconds, now);
                match leases.create(pp, &lease).await {
                    Ok(_) => leased.lock().unwrap().push((name, tokio::time::Instant::now())),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
    })
    .await
}

/// Creates `count` pods spread over `nodes` (name, podCIDR) by nodeName; the bare writer then
/// writes each one Running (with an address from its node's podCIDR).
pub async fn create_pods(
    client: &kube::Client,
    count: u32,
    nodes: &[(String, String)],
    bare: bool,
    concurrency: usize,
) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    let status_pp = PatchParams::default();
    let n = nodes.len().max(1) as u32;
    each((0..count).collect(), concurrency, |i| {
        let (api, pp, status_pp) = (&api, &pp, &status_pp);
        let (node, cidr) = nodes[(i % n) as usize].clone();
        async move {
            let created = match api.create(pp, &pod(i, &node)).await {
                Ok(p) => p,
                Err(kube::Error::Api(s)) if s.code == 409 && bare => api.get(&format!("cmp-pod-{i}")).await?,
                Err(e) => return Err(e),
            };
            if bare {
                let slim = SlimPod::from(created);
                let now = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap();
                let base: Ipv4Addr =
                    cidr.split('/').next().unwrap_or("10.0.0.0").parse().unwrap_or(Ipv4Addr::UNSPECIFIED);
                let ip = IpAddr::V4(Ipv4Addr::from(u32::from(base) + 2 + i / n));
                let patch = kwok_pools::kubelet::status::patches::running_patch(&slim, &[], &[ip], &now);
                api.patch_status(&format!("cmp-pod-{i}"), status_pp, &Patch::Merge(&patch)).await?;
            }
            Ok(())
        }
    })
    .await
}

/// The writes per pod of the bare writer's deletes (recorded with the results; results from
/// before it made the kubelet's final delete too have none recorded: one).
pub const BARE_DELETE_WRITES: u32 = 2;

/// Deletes the pods as a user does (a graceful delete: the pod gets a deletion timestamp and
/// the tool finishes it). The bare writer then makes the kubelet's final write itself, at
/// once: a delete with grace 0 on the pod's UID. Two writes per pod, as any kubelet-like tool
/// needs.
pub async fn delete_pods(client: &kube::Client, count: u32, bare: bool, concurrency: usize) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let dp = DeleteParams::default();
    each((0..count).collect(), concurrency, |i| {
        let (api, dp) = (&api, &dp);
        async move {
            let name = format!("cmp-pod-{i}");
            let uid = match api.delete(&name, dp).await {
                Ok(either) => either.left().and_then(|p| p.metadata.uid),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e),
            };
            if !bare {
                return Ok(());
            }
            let last = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: uid.map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match api.delete(&name, &last).await {
                Ok(_) => Ok(()),
                // Gone already (a retry), or a new pod of the same name (not this one).
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    })
    .await
}

/// The leases the bare writer has created (and when), for its renewer to take over.
pub type Leased = Arc<std::sync::Mutex<Vec<(String, tokio::time::Instant)>>>;

/// The bare writer's heartbeat, as the kubelet's: each lease in `leased` (a list that grows
/// while nodes are created) renewed a quarter of its duration after its creation and after
/// every renewal since, until the task is aborted.
pub fn renew_leases(
    client: kube::Client,
    leased: Leased,
    concurrency: usize,
    lease_seconds: i32,
) -> tokio::task::JoinHandle<()> {
    use std::cmp::Reverse;
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, "kube-node-lease");
        let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let interval = Duration::from_secs((lease_seconds / 4) as u64);
        let mut due: std::collections::BinaryHeap<Reverse<(tokio::time::Instant, String)>> = Default::default();
        loop {
            due.extend(leased.lock().unwrap().drain(..).map(|(name, created)| Reverse((created + interval, name))));
            let now = tokio::time::Instant::now();
            let Some(Reverse((when, _))) = due.peek() else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if *when > now {
                tokio::time::sleep_until((*when).min(now + Duration::from_millis(100))).await;
                continue;
            }
            let Some(Reverse((when, name))) = due.pop() else { continue };
            let permit = permits.clone().acquire_owned().await.unwrap();
            let api = api.clone();
            due.push(Reverse((when.max(now) + interval, name.clone())));
            tokio::spawn(async move {
                let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
                let patch = serde_json::json!({"spec": {"renewTime": now}});
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
                drop(permit);
            });
        }
    })
}
