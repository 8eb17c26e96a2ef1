//! What every benchmark needs: a fresh local cluster, the release operator as a child
//! process, CPU and memory readings from /proc, and API write counts from the API server's
//! own metrics.
#![allow(dead_code)]

use kwok_pools::cluster::{self, CreateOptions, Layout};
pub use kwok_pools_test_support::{free_port, free_ports, repo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Bench {
    pub home: PathBuf,
    pub name: String,
    pub layout: Layout,
    pub client: kube::Client,
}

impl Bench {
    /// Creates a fresh cluster for the benchmark (deleting a stale one of the same name).
    pub async fn cluster(name: &str) -> Self {
        Self::cluster_with(name, vec![]).await
    }

    /// [`Bench::cluster`] with extra flags for control plane components.
    pub async fn cluster_with(name: &str, extra_args: Vec<(cluster::component::Component, String)>) -> Self {
        kwok_pools::telemetry::init_crypto();
        let home = repo().join(".state/bench");
        let _ = cluster::delete(&home, name);
        let opts = CreateOptions {
            name: name.into(),
            home: home.clone(),
            bin_dir: repo().join("bin"),
            timeout: Duration::from_secs(180),
            extra_args,
            install_crds: true,
            child_crds: std::env::var_os("BENCH_NO_KUBEVIRT").is_none(),
            metrics_server: false,
            storage_class: false,
        };
        let created = cluster::create(&opts).await.expect("creating the benchmark cluster (run `make controlplane`)");
        let client = cluster::crds::client(&created.kubeconfig).await.unwrap();
        let layout = Layout::new(cluster::cluster_dir(&home, name));
        Self { home, name: name.into(), layout, client }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.layout.kubeconfig()
    }

    pub fn control_plane_pids(&self) -> Vec<(String, i32)> {
        cluster::component::ALL
            .iter()
            .filter_map(|c| cluster::process::read_pid(&self.layout.pid(*c)).map(|p| (c.name().to_string(), p)))
            .collect()
    }

    pub fn delete(&self) {
        let _ = cluster::delete(&self.home, &self.name);
    }

    /// Every request the API server has answered, by (verb, resource[/subresource]).
    pub async fn requests(&self) -> BTreeMap<(String, String), f64> {
        requests_in(&self.metrics_text().await)
    }

    /// The API server's /metrics page (empty when it cannot be read).
    pub async fn metrics_text(&self) -> String {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        self.client.request_text(req).await.unwrap_or_default()
    }

    /// Write requests the API server has answered, by resource (all verbs that write).
    pub async fn writes(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((verb, resource), n) in self.requests().await {
            if matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION") {
                *out.entry(resource).or_insert(0.0) += n;
            }
        }
        out
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.delete();
    }
}

/// Differences between two write snapshots.
pub fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_seconds(pid: i32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3; utime 14 and stime 15 (1-based in proc(5)).
    let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
    (utime + stime) / ticks
}

/// Peak resident memory (VmHWM) of a process, in MiB.
pub fn peak_rss_mib(pid: i32) -> f64 {
    status_kib(pid, "VmHWM:") / 1024.0
}

pub fn rss_mib(pid: i32) -> f64 {
    status_kib(pid, "VmRSS:") / 1024.0
}

fn status_kib(pid: i32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Whether `url` answers with a success within `timeout` (asked every 100 ms).
pub async fn answers(url: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(r) = reqwest::get(url).await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The release operator, stopped when dropped.
pub struct Operator {
    pub child: Child,
    pub metrics_port: u16,
    /// The simulated kubelets' API port.
    pub kubelet_port: u16,
}

impl Operator {
    pub async fn start(bench: &Bench, extra: &[&str]) -> Self {
        Self::start_command(bench, "run", "operator", extra).await
    }

    /// `kwok-pools <command>` (run, simulate) logging to `<log>.log` in the bench home.
    pub async fn start_command(bench: &Bench, command: &str, log: &str, extra: &[&str]) -> Self {
        let [port, kubelet_port] = free_ports();
        let log_path = bench.home.join(format!("{log}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        // The kubelet API on a port of its own, with the cluster's CAs (as `make run` does).
        let pki = bench.layout.pki();
        let p = |f: &str| pki.join(f).display().to_string();
        let kubelet = [
            "--kubelet-port".to_string(),
            kubelet_port.to_string(),
            "--kubelet-serving-ca-cert".into(),
            p("ca.crt"),
            "--kubelet-serving-ca-key".into(),
            p("ca.key"),
            "--kubelet-client-ca".into(),
            p("ca.crt"),
        ];
        let child = Command::new(env!("CARGO_BIN_EXE_kwok-pools"))
            .arg(command)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(if command == "run" || command == "simulate" { &kubelet[..] } else { &[] })
            .args(extra)
            .env("KUBECONFIG", bench.kubeconfig())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the operator");
        let op = Self { child, metrics_port: port, kubelet_port };
        if !answers(&format!("http://127.0.0.1:{port}/readyz"), Duration::from_secs(60)).await {
            panic!("the operator did not become ready; see {}", log_path.display());
        }
        op
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub async fn metric(&self, name: &str) -> f64 {
        self.metric_with(name, "").await
    }

    /// The sum of metric `name` over the series whose labels contain `labels`.
    pub async fn metric_with(&self, name: &str, labels: &str) -> f64 {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .filter(|l| {
                l.starts_with(name)
                    && (l.as_bytes().get(name.len()) == Some(&b' ') || l.as_bytes().get(name.len()) == Some(&b'{'))
                    && l.contains(labels)
            })
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU readings of the operator and of the control plane between two points.
pub struct CpuMeter {
    op_pid: i32,
    cp: Vec<(String, i32)>,
    op_start: f64,
    cp_start: Vec<f64>,
    pub start: Instant,
}

impl CpuMeter {
    pub fn start(op_pid: i32, cp: Vec<(String, i32)>) -> Self {
        let cp_start = cp.iter().map(|(_, p)| cpu_seconds(*p)).collect();
        Self { op_pid, op_start: cpu_seconds(op_pid), cp, cp_start, start: Instant::now() }
    }

    /// (operator CPU s, control plane CPU s by component, wall s)
    pub fn read(&self) -> (f64, Vec<(String, f64)>, f64) {
        let op = cpu_seconds(self.op_pid) - self.op_start;
        let cp = self.cp.iter().zip(&self.cp_start).map(|((n, p), s)| (n.clone(), cpu_seconds(*p) - s)).collect();
        (op, cp, self.start.elapsed().as_secs_f64())
    }
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{cores} cores, {cpu}")
}

/// Prints the CPU split as a line of the report.
/// Applies the NodePool `name` and waits (printing progress) until `nodes` of it are Ready;
/// false when they are not within five minutes.
pub async fn nodes_ready(client: &kube::Client, name: &str, pool: serde_json::Value, nodes: u32) -> bool {
    let api = kube::Api::<kwok_pools::kinds::nodepool::NodePool>::all(client.clone());
    let pp = kube::api::PatchParams::apply("bench").force();
    if let Err(e) = api.patch(name, &pp, &kube::api::Patch::Apply(pool)).await {
        println!("  applying NodePool {name} failed: {e}");
        return false;
    }
    let ready = wait_until("nodes Ready", Duration::from_secs(300), || async {
        let r = api.get(name).await.ok().and_then(|p| p.status).map_or(0, |s| s.ready_replicas);
        if r as u32 >= nodes { Ok(()) } else { Err(format!("{r} Ready")) }
    })
    .await;
    ready.is_some()
}

/// Prints the API writes per object (`noun`) by resource, and the operator's share.
pub fn report_writes(noun: &str, writes: &BTreeMap<String, f64>, op_writes: f64, objects: u32) {
    let n = f64::from(objects.max(1));
    let total: f64 = writes.values().sum();
    let per: Vec<String> =
        writes.iter().filter(|(_, v)| **v / n >= 0.01).map(|(k, v)| format!("{k} {:.2}", v / n)).collect();
    println!(
        "  API writes per {noun}: {:.2} in all ({}); {:.2} of them by the operator",
        total / n,
        per.join(", "),
        op_writes / n
    );
}

pub fn report_cpu(label: &str, op: f64, cp: &[(String, f64)], wall: f64) {
    let cp_total: f64 = cp.iter().map(|(_, v)| v).sum();
    let share = if op + cp_total > 0.0 { 100.0 * op / (op + cp_total) } else { 0.0 };
    let parts: Vec<String> = cp.iter().map(|(n, v)| format!("{n} {v:.1}s")).collect();
    println!(
        "  {label}: operator {op:.1} CPU-s, control plane {cp_total:.1} CPU-s ({}) over {wall:.1}s wall; operator share {share:.0}%",
        parts.join(", ")
    );
}

/// Waits for `check` to return Some, printing progress every 5 s.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = Instant::now();
    loop {
        match check().await {
            Ok(v) => return Some(v),
            Err(progress) => {
                if start.elapsed() > timeout {
                    println!("  ! gave up waiting for {what} after {timeout:?}: {progress}");
                    return None;
                }
                if last.elapsed() > Duration::from_secs(5) {
                    eprintln!("    … {what} ({:.0}s): {progress}", start.elapsed().as_secs_f64());
                    last = Instant::now();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The oldest lease renewal among the pool's nodes, in seconds.
pub async fn oldest_lease(client: &kube::Client, name: &str) -> (usize, f64) {
    let leases = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), "kube-node-lease")
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let prefix = format!("{name}-");
    let ages: Vec<f64> = leases
        .iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
        .filter_map(|l| {
            l.spec
                .as_ref()?
                .renew_time
                .as_ref()
                .map(|t| (now - t.0).total(k8s_openapi::jiff::Unit::Second).unwrap_or(f64::MAX))
        })
        .collect();
    (ages.len(), ages.into_iter().fold(0.0, f64::max))
}

/// The NodePool's ready replicas, as its status says (0 when unknown).
pub async fn ready_count(client: &kube::Client, name: &str) -> i32 {
    kube::Api::<kwok_pools::kinds::nodepool::NodePool>::all(client.clone())
        .get(name)
        .await
        .ok()
        .and_then(|p| p.status)
        .map(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Every request in a /metrics page, by (verb, resource[/subresource]).
pub fn requests_in(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for ([verb, resource, sub], n) in
        parse_family(text, "apiserver_request_total", &["verb", "resource", "subresource"])
    {
        let resource = if sub.is_empty() { resource } else { format!("{resource}/{sub}") };
        *out.entry((verb, resource)).or_insert(0.0) += n;
    }
    out
}

/// Metric `family` of a /metrics page summed by the values of `labels` (joined by a space),
/// e.g. `apiserver_watch_events_total` by resource: the events sent to all watchers.
pub fn metric_in<const N: usize>(text: &str, family: &str, labels: &[&str; N]) -> BTreeMap<String, f64>
where
    [String; N]: Default,
{
    let mut out = BTreeMap::new();
    for (key, n) in parse_family(text, family, labels) {
        *out.entry(key.join(" ")).or_insert(0.0) += n;
    }
    out
}

fn parse_family<const N: usize>(text: &str, family: &str, labels: &[&str; N]) -> Vec<([String; N], f64)>
where
    [String; N]: Default,
{
    let prefix = format!("{family}{{");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let Some((set, value)) = line.rsplit_once(' ') else { continue };
        let get = |k: &str| {
            [format!("{{{k}=\""), format!(",{k}=\"")]
                .iter()
                .find_map(|at| set.split_once(at.as_str()).map(|(_, rest)| rest))
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let mut key: [String; N] = Default::default();
        for (slot, k) in key.iter_mut().zip(labels) {
            *slot = get(k);
        }
        out.push((key, value.parse::<f64>().unwrap_or(0.0)));
    }
    out
}
