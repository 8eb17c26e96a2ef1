//! The admission webhook under load: AdmissionReviews answered per second (good and bad
//! pools mixed), latency, and a malformed review answered with HTTP 400, not a crash.

use super::harness::*;
use futures::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

fn review(i: usize) -> Vec<u8> {
    let bad = i.is_multiple_of(3);
    let (kind, object) = if i.is_multiple_of(2) {
        // A bad NodePool sets a label the pool owns (a garde rule); a bad PodPool's container
        // has no image (the API server's rule, judged by the dry run of the rendered pod).
        let labels = if bad { json!({"pools.kwok.x-k8s.io/index": "1"}) } else { json!({"tier": "a"}) };
        (
            "NodePool",
            json!({
                "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool",
                "metadata": {"name": format!("bench-{i}")},
                "spec": {"nodeCount": 10, "podCIDR": {"cidr": format!("10.{}.0.0/16", i % 200), "maskSize": 24},
                         "nodeTemplate": {"metadata": {"labels": labels},
                                          "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
                                          "status": {"capacity": {"cpu": "32", "memory": "64Gi"}, "allocatable": {"cpu": "16", "memory": "60Gi"}}}}
            }),
        )
    } else {
        let image = if bad { serde_json::Value::Null } else { json!("nginx") };
        (
            "PodPool",
            json!({
                "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "PodPool",
                "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
                "spec": {"podCount": 10, "podTemplate": {"spec": {"containers": [{"name": "app", "image": image}]}}}
            }),
        )
    };
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{i}"),
            "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": format!("{}s", kind.to_lowercase())},
            "operation": "CREATE", "userInfo": {"username": "bench"},
            "object": object
        }
    }))
    .unwrap()
}

pub async fn run(requests: usize, concurrency: usize) {
    println!("\n## Admission webhook ({})", machine());
    let bench = Bench::cluster("bench-webhook").await;
    let port = free_port();
    let op = Operator::start(&bench, &["--webhook-addr", &format!("127.0.0.1:{port}")]).await;
    let url = format!("https://127.0.0.1:{port}/validate");
    let http = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let bodies: Vec<Vec<u8>> = (0..requests).map(review).collect();
    // Warm up the connections.
    for b in bodies.iter().take(concurrency) {
        let _ = http.post(&url).body(b.clone()).send().await;
    }
    let cpu = CpuMeter::start(op.pid(), vec![]);
    let start = Instant::now();
    let results: Vec<(bool, Option<bool>, Duration)> = futures::stream::iter(bodies.iter().cloned())
        .map(|b| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let t = Instant::now();
                let r = http.post(&url).header("content-type", "application/json").body(b).send().await;
                let (ok, allowed) = match r {
                    Ok(resp) if resp.status().is_success() => {
                        let v: serde_json::Value = resp.json().await.unwrap_or_default();
                        (true, v["response"]["allowed"].as_bool())
                    }
                    _ => (false, None),
                };
                (ok, allowed, t.elapsed())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = start.elapsed().as_secs_f64();
    let (op_cpu, _, _) = cpu.read();
    let answered = results.iter().filter(|r| r.0).count();
    let denied = results.iter().filter(|r| r.1 == Some(false)).count();
    let mut lat: Vec<f64> = results.iter().map(|r| r.2.as_secs_f64() * 1000.0).collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
    println!(
        "- {requests} AdmissionReviews, {concurrency} in flight: {answered} answered ({denied} denied as expected: {}) in {wall:.2}s = {:.0} reviews/s",
        requests.div_ceil(3),
        answered as f64 / wall
    );
    println!(
        "  latency p50 {:.1} ms, p99 {:.1} ms; operator CPU {op_cpu:.1} s ({:.2} ms per review)",
        pct(0.5),
        pct(0.99),
        1000.0 * op_cpu / requests as f64
    );
    println!("  target 200 reviews/s: {}", if answered as f64 / wall >= 200.0 { "met" } else { "NOT met" });
    for (what, body) in [
        ("not JSON", b"{{{ not json".to_vec()),
        ("no request", br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec()),
    ] {
        let r = http.post(&url).body(body).send().await.unwrap();
        println!("  malformed review ({what}): HTTP {}", r.status().as_u16());
    }
    let alive = http.post(&url).body(review(1)).send().await.map(|r| r.status().is_success()).unwrap_or(false);
    println!("  webhook still answering afterwards: {}", if alive { "yes" } else { "NO" });
}
