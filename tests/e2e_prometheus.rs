//! End-to-end with a real Prometheus (Debian's `prometheus`, installed by `.ci/run`): it
//! scrapes the operator with the local job of `config/prometheus.yaml`; a scaled pool's
//! ready-replicas series reaches the new number through Prometheus' query API, the per-pool
//! create/delete counters and the lease-lateness histogram are queryable, and every query of
//! the Grafana dashboard in `config/grafana/` runs and names series Prometheus has.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools_test_support::SCOPE_LABEL;
use kwok_pools_test_support::pools::{scoped_nodepool, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Prometheus on loopback, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
    _config_dir: Option<tempfile::TempDir>,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scrape configuration of `config/prometheus.yaml`, its local job pointed at `target`
/// and scraped every second.
fn scrape_config(target: &str) -> String {
    let mut cfg: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("config/prometheus.yaml")).unwrap();
    let jobs = cfg["scrape_configs"].as_sequence_mut().unwrap();
    jobs.retain(|j| j["job_name"] == "kwok-pools-local");
    assert_eq!(jobs.len(), 1, "config/prometheus.yaml has a kwok-pools-local job");
    jobs[0]["static_configs"][0]["targets"] = serde_yaml::to_value([target]).unwrap();
    cfg["global"] = serde_yaml::from_str("{scrape_interval: 1s, evaluation_interval: 1s}").unwrap();
    serde_yaml::to_string(&cfg).unwrap()
}

fn start_prometheus(target: &str) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, scrape_config(target)).unwrap();
    let mut p = start_prometheus_with(&config);
    p._config_dir = Some(dir);
    p
}

/// A Prometheus with the configuration file `config`.
fn start_prometheus_with(config: &std::path::Path) -> Prometheus {
    // bin/prometheus (`make prometheus`: the machine's, else built from its Go module).
    let linked = repo().join("bin/prometheus");
    let bin = Some(linked)
        .filter(|p| p.exists())
        .or_else(|| which("prometheus"))
        .expect("no Prometheus: run `make prometheus` (`make test` does)");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting prometheus");
    Prometheus { child, port, _dir: dir, _config_dir: None }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| std::path::Path::new(d).join(name)).find(|p| p.is_file())
}

/// An instant query: (status, result) as Prometheus returns them.
async fn query(p: &Prometheus, expr: &str) -> Result<Vec<serde_json::Value>, String> {
    let url = format!("http://127.0.0.1:{}/api/v1/query", p.port);
    let r = reqwest::Client::new().get(&url).query(&[("query", expr)]).send().await.map_err(|e| e.to_string())?;
    let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
    if body["status"] != "success" {
        return Err(format!("{expr}: {body}"));
    }
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The value of the first series of an instant query.
async fn value(p: &Prometheus, expr: &str) -> Result<f64, String> {
    let result = query(p, expr).await?;
    let first = result.first().ok_or_else(|| format!("no series for {expr}"))?;
    first["value"][1].as_str().and_then(|v| v.parse().ok()).ok_or_else(|| format!("no value in {first}"))
}

#[tokio::test]
async fn prometheus_scrapes_pool_and_simulator_metrics() {
    let client = client().await;
    let scope = unique("prom");
    let pool = unique("scraped");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    let prom = start_prometheus(&format!("127.0.0.1:{}", op.metrics_port));
    wait_for("Prometheus to scrape the operator", Duration::from_secs(60), || async {
        let up = value(&prom, r#"up{job="kwok-pools-local"}"#).await?;
        if up == 1.0 { Ok(()) } else { Err(format!("up = {up}")) }
    })
    .await;

    apply(&scoped_nodepool(&pool, &scope, 6, "10.210.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &pool, 6, Duration::from_secs(60)).await;
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=9"]);
    wait_ready_nodes(&client, &pool, 9, Duration::from_secs(60)).await;
    let ready = format!(r#"kwok_pools_pool_ready_replicas{{kind="NodePool",name="{pool}"}}"#);
    wait_for("the ready-replicas series to reach 9", Duration::from_secs(60), || async {
        let v = value(&prom, &ready).await?;
        if v == 9.0 { Ok(()) } else { Err(format!("{v}")) }
    })
    .await;

    // Scale down: deletes are counted per pool as creates were.
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=4"]);
    let writes = |verb: &str| {
        format!(r#"sum(kwok_pools_pool_child_writes_total{{kind="NodePool",name="{pool}",verb="{verb}",result="ok"}})"#)
    };
    wait_for("per-pool create and delete counters", Duration::from_secs(60), || async {
        let (created, deleted) = (value(&prom, &writes("create")).await?, value(&prom, &writes("delete")).await?);
        if created == 9.0 && deleted == 5.0 { Ok(()) } else { Err(format!("created {created}, deleted {deleted}")) }
    })
    .await;
    // Lease lateness: every renewal is observed; a quantile comes out of the buckets.
    wait_for("lease lateness observations", Duration::from_secs(60), || async {
        let n = value(&prom, "sum(kwok_pools_simulator_lease_lateness_seconds_count)").await?;
        let p99 =
            value(&prom, "histogram_quantile(0.99, sum by (le) (kwok_pools_simulator_lease_lateness_seconds_bucket))")
                .await?;
        if n >= 9.0 && p99.is_finite() { Ok(()) } else { Err(format!("{n} renewals, p99 {p99}")) }
    })
    .await;

    // Every dashboard query runs, and those about what this operator did return series.
    let dashboard: serde_json::Value =
        serde_json::from_str(&read_repo_file("config/grafana/kwok-pools-dashboard.json")).unwrap();
    let mut with_data = 0;
    let mut total = 0;
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap().replace("$job", ".*").replace("$__rate_interval", "1m");
            let result = query(&prom, &expr).await.unwrap_or_else(|e| panic!("dashboard query fails: {e}"));
            total += 1;
            with_data += usize::from(!result.is_empty());
        }
    }
    assert!(with_data * 2 >= total, "only {with_data} of {total} dashboard queries return series");
    eprintln!("{with_data} of {total} dashboard queries return series");
}

/// kube-prometheus' kubelet jobs (its ServiceMonitor's endpoints: `/metrics/resource`,
/// `/metrics/cadvisor`, `/metrics/probes`, `/metrics`), over HTTPS with a client certificate.
/// Its targets are what prometheus-operator's kubelet endpoints controller keeps: each node's
/// address and daemon port — here its Hostname address, as the simulated InternalIPs route
/// nowhere — written to a file (Debian's Prometheus has no Kubernetes discovery).
fn kubelet_scrape_config(targets: &std::path::Path) -> String {
    let pki = kubeconfig().parent().unwrap().join("pki");
    let job = |name: &str, path: &str| {
        serde_json::json!({
            "job_name": name,
            "scheme": "https",
            "metrics_path": path,
            "tls_config": {
                "ca_file": pki.join("ca.crt"),
                "cert_file": pki.join("admin.crt"),
                "key_file": pki.join("admin.key"),
            },
            "file_sd_configs": [{"files": [targets], "refresh_interval": "5s"}],
        })
    };
    let cfg = serde_json::json!({
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "scrape_configs": [
            job("kubelet-resource", "/metrics/resource"),
            job("kubelet-cadvisor", "/metrics/cadvisor"),
            job("kubelet-probes", "/metrics/probes"),
            job("kubelet", "/metrics"),
        ],
    });
    serde_yaml::to_string(&cfg).unwrap()
}

/// The file-discovery targets of `nodes`: each at its Hostname address and daemon port,
/// labelled with its name.
fn kubelet_targets(nodes: &[k8s_openapi::api::core::v1::Node]) -> String {
    let targets: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| {
            let status = n.status.as_ref().unwrap();
            let host = status.addresses.iter().flatten().find(|a| a.type_ == "Hostname").unwrap().address.clone();
            let port = status.daemon_endpoints.as_ref().unwrap().kubelet_endpoint.as_ref().unwrap().port;
            serde_json::json!({"targets": [format!("{host}:{port}")], "labels": {"node": n.metadata.name}})
        })
        .collect();
    serde_json::to_string(&targets).unwrap()
}

#[tokio::test]
async fn kube_prometheus_kubelet_jobs_scrape_every_simulated_node() {
    let client = client().await;
    let scope = unique("promkl");
    let ns = TestNamespace::new(&client, "promkl").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    const NODES: usize = 100;
    let pool = format!("{scope}-n");
    apply(&scoped_nodepool(
        &pool,
        &scope,
        NODES as u32,
        "10.225.0.0/16",
        24,
        110,
        "  lifecycle:\n    pods:\n      usage: {cpu: {fixed: 250m}, memory: {fixed: 64Mi}}\n",
    ));
    let nodes = wait_ready_nodes(&client, &pool, NODES, Duration::from_secs(120)).await;
    // Pods with a readiness probe, for the probe and container series.
    apply(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: probed, namespace: {ns}}}
spec:
  replicas: 10
  selector: {{matchLabels: {{app: probed}}}}
  template:
    metadata: {{labels: {{app: probed}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers:
      - {{name: app, image: nginx, readinessProbe: {{httpGet: {{path: /, port: 80}}, periodSeconds: 2}}}}
",
        ns = ns.name
    ));
    kubectl_ok(&["rollout", "status", "deployment/probed", "-n", &ns.name, "--timeout=120s"]);

    // Prometheus with the kubelet jobs.
    let dir = tempfile::tempdir().unwrap();
    let (config, targets) = (dir.path().join("prometheus.yml"), dir.path().join("kubelets.json"));
    std::fs::write(&targets, kubelet_targets(&nodes)).unwrap();
    std::fs::write(&config, kubelet_scrape_config(&targets)).unwrap();
    let prom = start_prometheus_with(&config);
    let jobs = ["kubelet-resource", "kubelet-cadvisor", "kubelet-probes", "kubelet"];
    wait_for("every kubelet target of every job up", Duration::from_secs(120), || async {
        let mut said = Vec::new();
        for job in jobs {
            let up = value(&prom, &format!(r#"sum(up{{job="{job}"}})"#)).await.unwrap_or(0.0);
            let targets = value(&prom, &format!(r#"count(up{{job="{job}"}})"#)).await.unwrap_or(0.0);
            if up != NODES as f64 || targets != NODES as f64 {
                said.push(format!("{job}: {up} up of {targets}"));
            }
        }
        if said.is_empty() { Ok(()) } else { Err(said.join(", ")) }
    })
    .await;
    // No target fails over a few more scrapes.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let failed = value(&prom, r#"count(up{job=~"kubelet.*"} == 0) or vector(0)"#).await.unwrap();
    assert_eq!(failed, 0.0, "failed kubelet targets");
    // The usage shape (250m a container) through cAdvisor's counter, as dashboards read it.
    let rate = format!(
        r#"avg(rate(container_cpu_usage_seconds_total{{job="kubelet-cadvisor",image!="",container="app",namespace="{}"}}[20s]))"#,
        ns.name
    );
    let cores = wait_for("cAdvisor's CPU rate", Duration::from_secs(60), || async {
        let v = value(&prom, &rate).await?;
        if (0.2..0.3).contains(&v) { Ok(v) } else { Err(format!("{v}")) }
    })
    .await;
    eprintln!("  container CPU rate through /metrics/cadvisor: {cores:.3} cores (knob: 0.25)");
    let probes = value(
        &prom,
        &format!(r#"sum(prober_probe_total{{probe_type="Readiness",result="successful",namespace="{}"}})"#, ns.name),
    )
    .await
    .unwrap();
    assert!(probes >= 10.0, "readiness probes counted: {probes}");
    let running = value(&prom, r#"sum(kubelet_running_pods{job="kubelet"})"#).await.unwrap();
    assert_eq!(running, 10.0, "kubelet_running_pods over the scope's nodes");
    let net = value(&prom, &format!(r#"sum(container_network_receive_bytes_total{{namespace="{}"}})"#, ns.name))
        .await
        .unwrap();
    assert!(net > 0.0, "network series");
    op.stop();
}
