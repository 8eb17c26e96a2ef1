//! End-to-end with a real Prometheus (Debian's `prometheus`, installed by `.ci/run`): it
//! scrapes the operator with the local job of `config/prometheus.yaml`; a scaled pool's
//! ready-replicas series reaches the new number through Prometheus' query API, the per-pool
//! create/delete counters and the lease-lateness histogram are queryable, and every query of
//! the Grafana dashboard in `config/grafana/` runs and names series Prometheus has.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools_test_support::pools::{scoped_nodepool, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Prometheus on loopback, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
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
    // bin/prometheus (`make prometheus`: the machine's, else built from its Go module).
    let linked = repo().join("bin/prometheus");
    let bin = Some(linked)
        .filter(|p| p.exists())
        .or_else(|| which("prometheus"))
        .expect("no Prometheus: run `make prometheus` (`make test` does)");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, scrape_config(target)).unwrap();
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
    Prometheus { child, port, _dir: dir }
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
