//! The simulated kubelets' `/metrics/resource` under metrics-server's load: N nodes × 20 pods,
//! every node scraped once per 15 s (metrics-server's default resolution), over TLS with a
//! client certificate, as metrics-server does it; and `/metrics/cadvisor` besides, every 30 s
//! (kube-prometheus' kubelet job), in a third window. Reported before and after the scraping
//! starts: the operator's CPU and RSS, and node lease punctuality (the oldest lease, renewals
//! more than an interval late), plus scrape latency and size.

use super::harness::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

const RESOLUTION: Duration = Duration::from_secs(15);

fn node_pool(nodes: u32, pods_per_node: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "bench-kubelet"},
        "spec": {
            "nodeCount": nodes,
            "podCIDR": {"cidr": "10.0.0.0/10", "maskSize": 25},
            "nodeTemplate": {"status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": (pods_per_node + 10).to_string()}}},
            "lifecycle": {"seed": 1, "pods": {"usage": {
                "cpu": {"min": "50m", "max": "400m"},
                "memory": {"mean": "128Mi", "stddev": "32Mi"},
                "shape": {"wave": {"low": 0.5, "high": 1.5, "period": "5m"}}
            }}}
        }
    })
}

/// A pod bound to `node` by name: no scheduler in the way (it is not what is measured), so
/// 100,000 pods cost the API server two writes each (create, the simulator's Running status),
/// not four.
fn pod(i: u32, node: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("bench-kubelet-{i}"), "namespace": "default", "labels": {"app": "bench-kubelet"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "fake", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .unwrap()
}

/// Creates `count` pods spread over `nodes`, 16 requests in flight (the admin's requests are
/// exempt from API Priority and Fairness: more would starve everything else), each retried (a fresh
/// cluster refuses pods until its default ServiceAccount exists); returns how many failed.
async fn create_pods(client: &kube::Client, count: u32, nodes: &[String]) -> usize {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let n = nodes.len().max(1) as u32;
    let started = Instant::now();
    let done = std::sync::atomic::AtomicU32::new(0);
    let failed = futures::stream::iter(0..count)
        .map(|i| {
            let (api, node, done) = (&api, nodes[(i % n) as usize].clone(), &done);
            async move {
                for attempt in 0..10u64 {
                    let created = match api.create(&Default::default(), &pod(i, &node)).await {
                        Ok(_) => true,
                        Err(kube::Error::Api(s)) => s.code == 409,
                        Err(_) => false,
                    };
                    if created {
                        let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        if d % 10_000 == 0 {
                            println!("    … {d} pods created ({:.0}s)", started.elapsed().as_secs_f64());
                        }
                        return 0;
                    }
                    tokio::time::sleep(Duration::from_millis(500 * (attempt + 1))).await;
                }
                1
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<usize>>()
        .await;
    failed.into_iter().sum()
}

/// A client of the simulated kubelets as metrics-server is one: the cluster CA trusted, a
/// client certificate, one connection per node kept between scrapes.
fn scraper(bench: &Bench) -> reqwest::Client {
    let pki = bench.layout.pki();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let mut identity = std::fs::read(pki.join("admin.crt")).unwrap();
    identity.extend(std::fs::read(pki.join("admin.key")).unwrap());
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca)
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(1)
        .build()
        .unwrap()
}

/// Lease punctuality and operator cost over `wall`: (oldest lease seen, late renewals, CPU s, RSS MiB).
struct Window {
    oldest: f64,
    late: f64,
    cpu: f64,
    wall: f64,
    rss: f64,
    /// Control-plane CPU seconds by component (the API server, etcd, …).
    control_plane: Vec<(String, f64)>,
    /// The operator's writes to the API server.
    writes: f64,
}

async fn late(op: &Operator) -> f64 {
    op.metric("kwok_pools_simulator_late_lease_renewals_total").await
}

async fn watch(
    op: &Operator,
    bench: &Bench,
    seconds: u64,
    mut during: impl FnMut(u64) -> Option<tokio::task::JoinHandle<Vec<f64>>>,
) -> (Window, Vec<f64>) {
    let cpu = CpuMeter::start(op.pid(), bench.control_plane_pids());
    let late0 = late(op).await;
    let writes0 = op.metric("kwok_pools_api_writes_total").await;
    let mut oldest = 0.0f64;
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut cycle = 0;
    while start.elapsed() < Duration::from_secs(seconds) {
        let next = start + RESOLUTION * (cycle as u32 + 1);
        if let Some(handle) = during(cycle) {
            latencies.extend(handle.await.unwrap_or_default());
        }
        let (_, age) = oldest_lease(&bench.client, "bench-kubelet").await;
        oldest = oldest.max(age);
        cycle += 1;
        tokio::time::sleep_until(next.into()).await;
    }
    let (op_cpu, control_plane, wall) = cpu.read();
    let writes = op.metric("kwok_pools_api_writes_total").await - writes0;
    let window = Window {
        oldest,
        late: late(op).await - late0,
        cpu: op_cpu,
        wall,
        rss: rss_mib(op.pid()),
        control_plane,
        writes,
    };
    (window, latencies)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub async fn run(nodes: u32, pods_per_node: u32, hold: u64) {
    let pods = nodes * pods_per_node;
    println!("\n## Kubelet API: /metrics/resource of {nodes} nodes × {pods_per_node} pods every 15s ({})", machine());
    let bench = Bench::cluster("bench-kubelet").await;
    // One operator without leader election: while 100,000 pods are created on 2 cores the API
    // server answers its leader Lease in more than the renew deadline, and a leader steps down.
    let op = Operator::start(&bench, &["--pod-termination-delay", "0s", "--no-leader-elect"]).await;
    let client = bench.client.clone();
    if !nodes_ready(&client, "bench-kubelet", node_pool(nodes, pods_per_node), nodes).await {
        return;
    }
    let listed = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("pools.kwok.x-k8s.io/pool=bench-kubelet"))
        .await
        .unwrap()
        .items;
    let names: Vec<String> = listed.iter().filter_map(|n| n.metadata.name.clone()).collect();
    let started = Instant::now();
    let failed = create_pods(&client, pods, &names).await;
    if failed > 0 {
        println!("- {failed} pods could not be created; stopping");
        return;
    }
    let running = wait_until(&format!("{pods} pods Running"), Duration::from_secs(3600), || async {
        let ran = op.metric_with("kwok_pools_simulator_pod_transitions_total", "result=\"run\"").await as u32;
        if ran >= pods { Ok(()) } else { Err(format!("{ran} Running")) }
    })
    .await;
    if running.is_none() {
        println!("- NOT all {pods} pods Running after {:.0}s; stopping", started.elapsed().as_secs_f64());
        return;
    }
    println!("- {pods} pods Running after {:.0}s", started.elapsed().as_secs_f64());
    let urls: Vec<String> = listed
        .iter()
        .filter_map(|n| {
            let s = n.status.as_ref()?;
            let host = s.addresses.as_ref()?.iter().find(|a| a.type_ == "Hostname")?.address.clone();
            let port = s.daemon_endpoints.as_ref()?.kubelet_endpoint.as_ref()?.port;
            Some(format!("https://{host}:{port}/metrics/resource"))
        })
        .collect();
    // Settle (the last status writes, the controller manager catching up), then the quiet
    // window: heartbeats only.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (quiet, _) = watch(&op, &bench, hold, |_| None).await;
    // The scraped window: every node once per resolution, all at once as metrics-server starts
    // them; then the same with every node's cadvisor endpoint every other round (30 s).
    let http = scraper(&bench);
    let cadvisor: Vec<String> = urls.iter().map(|u| u.replace("/metrics/resource", "/metrics/cadvisor")).collect();
    let (scraped, resource) = scrape_window(&op, &bench, &http, &urls, None, hold).await;
    resource.report("/metrics/resource", scraped.wall);
    let (with_cadvisor, both) = scrape_window(&op, &bench, &http, &urls, Some(&cadvisor), hold).await;
    both.report("/metrics/resource and /metrics/cadvisor", with_cadvisor.wall);
    for (label, w) in
        [("before (heartbeats only)", &quiet), ("while scraped", &scraped), ("with cadvisor every 30s", &with_cadvisor)]
    {
        println!(
            "- {label}: operator {:.1}% of a core, RSS {:.0} MiB; oldest node lease {:.1}s (renewed every 10s, valid 40s), renewals more than 10s late {}",
            100.0 * w.cpu / w.wall,
            w.rss,
            w.oldest,
            w.late
        );
        let cp: Vec<String> = w.control_plane.iter().map(|(n, c)| format!("{n} {:.0}%", 100.0 * c / w.wall)).collect();
        println!("    control plane (of a core): {}; operator writes {:.0}/s", cp.join(", "), w.writes / w.wall);
    }
    for (label, w) in [("while scraped", &scraped), ("with cadvisor every 30s", &with_cadvisor)] {
        let on_time = w.late == 0.0 && w.oldest < 20.0;
        println!("- every lease on time {label}: {}", if on_time { "yes" } else { "NO" });
    }
    println!("  operator peak RSS over the run: {:.0} MiB", peak_rss_mib(op.pid()));
}

/// What the scrapes of a window got: latencies (ms), failures and bytes by endpoint.
#[derive(Default)]
struct Scrapes {
    latencies: Vec<f64>,
    failed: u64,
    bytes: u64,
    cadvisor: u64,
    cadvisor_bytes: u64,
}

impl Scrapes {
    fn report(mut self, what: &str, wall: f64) {
        self.latencies.sort_by(f64::total_cmp);
        let n = self.latencies.len();
        let resource = (n as u64).saturating_sub(self.cadvisor).max(1);
        println!(
            "- scrapes of {what}: {n} in {wall:.0}s ({:.0}/s), {} failed, /metrics/resource {:.0} KiB each{}, latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            n as f64 / wall,
            self.failed,
            (self.bytes - self.cadvisor_bytes) as f64 / resource as f64 / 1024.0,
            if self.cadvisor > 0 {
                format!(
                    ", /metrics/cadvisor {:.0} KiB each ({} scrapes)",
                    self.cadvisor_bytes as f64 / self.cadvisor as f64 / 1024.0,
                    self.cadvisor
                )
            } else {
                String::new()
            },
            percentile(&self.latencies, 0.5),
            percentile(&self.latencies, 0.99),
            self.latencies.last().copied().unwrap_or(f64::NAN),
        );
    }
}

/// One window of `hold` seconds: every node's `/metrics/resource` each resolution and, with
/// `cadvisor`, each node's `/metrics/cadvisor` every other one; each answer must carry
/// `container_cpu_usage_seconds_total`.
async fn scrape_window(
    op: &Operator,
    bench: &Bench,
    http: &reqwest::Client,
    urls: &[String],
    cadvisor: Option<&[String]>,
    hold: u64,
) -> (Window, Scrapes) {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let counts = std::sync::Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let (window, latencies) = watch(op, bench, hold, |cycle| {
        let mut round: Vec<(String, bool)> = urls.iter().map(|u| (u.clone(), false)).collect();
        if cycle % 2 == 0 {
            round.extend(cadvisor.unwrap_or_default().iter().map(|u| (u.clone(), true)));
        }
        let (http, counts) = (http.clone(), counts.clone());
        Some(tokio::spawn(async move {
            futures::stream::iter(round)
                .map(|(url, is_cadvisor)| {
                    let (http, counts) = (http.clone(), counts.clone());
                    async move {
                        let t = Instant::now();
                        let ok = match http.get(&url).send().await {
                            Ok(r) if r.status() == 200 => {
                                let body = r.bytes().await.unwrap_or_default();
                                const FAMILY: &[u8] = b"container_cpu_usage_seconds_total{";
                                counts[1].fetch_add(body.len() as u64, Relaxed);
                                if is_cadvisor {
                                    counts[2].fetch_add(1, Relaxed);
                                    counts[3].fetch_add(body.len() as u64, Relaxed);
                                }
                                body.windows(FAMILY.len()).any(|w| w == FAMILY)
                            }
                            _ => false,
                        };
                        if !ok {
                            counts[0].fetch_add(1, Relaxed);
                        }
                        t.elapsed().as_secs_f64() * 1000.0
                    }
                })
                .buffer_unordered(256)
                .collect::<Vec<f64>>()
                .await
        }))
    })
    .await;
    let scrapes = Scrapes {
        latencies,
        failed: counts[0].load(Relaxed),
        bytes: counts[1].load(Relaxed),
        cadvisor: counts[2].load(Relaxed),
        cadvisor_bytes: counts[3].load(Relaxed),
    };
    (window, scrapes)
}
