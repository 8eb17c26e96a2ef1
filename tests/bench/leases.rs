//! What one lease renewal costs the API server, by how it is written: JSON merge patch with a
//! JSON answer (what kube-rs does by default), the same patch asking for a protobuf answer,
//! and a PUT of the cached lease (what kwok and the kubelet do). Prints renewals per second
//! and API server CPU milliseconds per renewal for each.

use super::harness::*;
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

const NS: &str = "kube-node-lease";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

async fn raw(client: &kube::Client, method: &str, path: &str, content_type: &str, accept: &str, body: Vec<u8>) -> u16 {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", content_type)
        .header("Accept", accept)
        .body(kube::client::Body::from(body))
        .unwrap();
    match client.send(req).await {
        Ok(res) => {
            let status = res.status().as_u16();
            let _ = res.into_body().collect().await; // read it all: the connection is reused
            status
        }
        Err(_) => 0,
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

pub async fn run(leases: u32, rounds: u32) {
    println!("\n## Lease renewal cost by wire format: {leases} leases × {rounds} rounds each ({})", machine());
    let bench = Bench::cluster("bench-leases").await;
    let client = bench.client.clone();
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let names: Vec<String> = (0..leases).map(|i| format!("bench-lease-{i}")).collect();
    futures::stream::iter(names.clone())
        .for_each_concurrent(64, |name| {
            let api = api.clone();
            async move {
                let lease = kwok_pools::kubelet::node::lease::lease(&name, "", 40, now());
                let mut lease = lease;
                lease.metadata.owner_references = None;
                let _ = api.create(&PostParams::default(), &lease).await;
            }
        })
        .await;
    let apiserver =
        bench.control_plane_pids().into_iter().find(|(n, _)| n == "kube-apiserver").map(|(_, p)| p).unwrap();
    let cache: Mutex<HashMap<String, Lease>> = Mutex::new(HashMap::new());
    for method in ["merge patch, JSON answer", "merge patch, protobuf answer", "PUT of the cached lease (JSON)"] {
        if method.starts_with("PUT") {
            for l in api.list(&Default::default()).await.unwrap().items {
                cache.lock().unwrap().insert(l.metadata.name.clone().unwrap(), l);
            }
        }
        let cpu0 = cpu_seconds(apiserver);
        let start = Instant::now();
        let failed = std::sync::atomic::AtomicU32::new(0);
        for _ in 0..rounds {
            futures::stream::iter(names.clone())
                .for_each_concurrent(64, |name| {
                    let (api, client, cache, failed) = (api.clone(), client.clone(), &cache, &failed);
                    async move {
                        let ok = match method {
                            "merge patch, JSON answer" => {
                                let patch = serde_json::json!({"spec": {"renewTime": now()}});
                                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok()
                            }
                            "merge patch, protobuf answer" => {
                                let patch =
                                    serde_json::to_vec(&serde_json::json!({"spec": {"renewTime": now()}})).unwrap();
                                let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}");
                                raw(&client, "PATCH", &path, "application/merge-patch+json", PROTOBUF, patch).await
                                    == 200
                            }
                            _ => {
                                let mut lease = cache.lock().unwrap().get(&name).cloned().unwrap();
                                lease.spec.as_mut().unwrap().renew_time = Some(now());
                                match api.replace(&name, &PostParams::default(), &lease).await {
                                    Ok(l) => {
                                        cache.lock().unwrap().insert(name, l);
                                        true
                                    }
                                    Err(_) => false,
                                }
                            }
                        };
                        if !ok {
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
                .await;
        }
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(apiserver) - cpu0;
        let n = f64::from(leases * rounds);
        println!(
            "- {method}: {:.0} renewals/s, API server {:.2} CPU-ms per renewal ({} failed)",
            n / wall,
            1000.0 * cpu / n,
            failed.into_inner()
        );
    }
}
