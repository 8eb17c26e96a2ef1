//! The end-to-end harness. Tests run against the real control plane whose kubeconfig is in
//! `KUBECONFIG` (`make test` creates one cluster for the whole run). Each test works in its
//! own namespace and scope: pools and nodes carry the label `kwok-pools.test/scope=<scope>`,
//! and the test starts its own operator that handles only that scope, so tests run in
//! parallel without touching each other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod devices;
pub mod pools;
pub mod proxy;

pub const SCOPE_LABEL: &str = "kwok-pools.test/scope";

/// The repository root: where cargo runs the test or bench from (`CARGO_MANIFEST_DIR` at run
/// time, the root package's), else where this crate was compiled. Cargo may reuse this crate
/// from a shared `CARGO_TARGET_DIR` compiled in another clone, whose path it would carry.
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.join("tests/support/Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// The `kwok-pools` binary cargo built beside the running test (`target/<profile>/`).
pub fn kwok_pools_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/kwok-pools
    let profile_dir = exe.parent().and_then(Path::parent).expect("a test binary under target/<profile>/deps");
    profile_dir.join("kwok-pools")
}

pub fn kubectl_bin() -> PathBuf {
    repo().join("bin/kubectl")
}

/// The kubeconfig of the test cluster. Fails with what to do when there is none.
pub fn kubeconfig() -> PathBuf {
    match std::env::var_os("KUBECONFIG") {
        Some(k) if !k.is_empty() => PathBuf::from(k),
        _ => panic!(
            "KUBECONFIG is not set: run the tests with `make test`, or point them at a running cluster with \
             `export KUBECONFIG=$(kwok-pools cluster kubeconfig --name NAME)`"
        ),
    }
}

/// The controller manager's node-monitor grace period of the test cluster (the Makefile
/// starts it with a short one so the NotReady test does not take minutes).
pub fn node_grace_period() -> Duration {
    let s = std::env::var("E2E_NODE_GRACE_SECONDS").unwrap_or_else(|_| "50".into());
    Duration::from_secs(s.parse().unwrap_or(50))
}

pub async fn client() -> kube::Client {
    kwok_pools::telemetry::init_crypto();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig()).expect("reading KUBECONFIG");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("loading KUBECONFIG");
    kube::Client::try_from(config).expect("building a client")
}

/// Runs bin/kubectl with the test kubeconfig.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_stdin(args, None)
}

pub fn kubectl_stdin(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(kubectl_bin());
    cmd.args(args).env("KUBECONFIG", kubeconfig()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child =
        cmd.spawn().unwrap_or_else(|e| panic!("running {}: {e} (run `make controlplane`)", kubectl_bin().display()));
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// kubectl that must succeed; returns stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -f -` of `yaml`; must succeed.
pub fn apply(yaml: &str) -> String {
    let out = kubectl_stdin(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(yaml));
    assert!(out.status.success(), "kubectl apply failed: {}\n---\n{yaml}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A unique, DNS-safe scope name for one test.
pub fn unique(prefix: &str) -> String {
    let n: u32 = rand::random::<u32>() % 1_000_000;
    format!("{prefix}-{n:06}")
}

/// Polls `check` until it returns `Some`, printing progress every 5 s. Panics with
/// `what` and the last observation after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("  … waiting for {what} ({}s): {last}", start.elapsed().as_secs());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A namespace deleted when the test ends.
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn new(client: &kube::Client, prefix: &str) -> Self {
        let name = unique(prefix);
        let api: Api<Namespace> = Api::all(client.clone());
        let ns =
            Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        api.create(&PostParams::default(), &ns).await.expect("creating the test namespace");
        // Pods need the default ServiceAccount the controller manager creates.
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &name);
        let what = format!("default ServiceAccount in {name}");
        wait_for(&what, Duration::from_secs(30), || {
            let sa = sa.clone();
            async move { sa.get_opt("default").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string()) }
        })
        .await;
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"]);
    }
}

/// An operator process for one scope, stopped when dropped (or when the test thread ends).
pub struct Operator {
    child: Option<Child>,
    pub scope: String,
    pub metrics_port: u16,
    pub webhook_port: u16,
    /// The simulated kubelets' API port (each operator its own).
    pub kubelet_port: u16,
    pub log: PathBuf,
    extra: Vec<String>,
    /// The kubeconfig the operator uses (the test cluster's unless set).
    pub kubeconfig: PathBuf,
    /// Run under Debian's `faketime` with this wall-clock offset (`+15s`, `-15s`).
    pub clock_offset: Option<String>,
}

pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free ports (each listener held until all are chosen).
/// `N` ports free now, none handed out before by this test process (two operators started at
/// once never get the same one; another process may still take one: `Operator::spawn` then
/// starts again on others).
pub fn free_ports<const N: usize>() -> [u16; N] {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = kwok_pools::sync::lock(&GIVEN);
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    while held.len() < N {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // Every listener stays bound until the end, so the kernel hands out another port next.
        if given.insert(port) {
            held.push((port, l));
        } else {
            refused.push(l);
        }
    }
    drop(refused);
    std::array::from_fn(|i| held[i].0)
}

fn log_dir() -> PathBuf {
    let dir = std::env::var_os("E2E_LOG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("kwok-pools-e2e"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Operator {
    /// Starts `kwok-pools run` for `scope` with the test lease settings and `extra` flags.
    /// Pass `manage_override` to replace the scoped node selection flags.
    pub fn start(scope: &str, extra: &[&str]) -> Self {
        Self::start_as(scope, extra, kubeconfig())
    }

    /// `kwok-pools simulate` (the simulator alone) for `scope`.
    pub fn simulator_only(scope: &str, extra: &[&str]) -> Self {
        let mut all = vec!["--simulate-only"];
        all.extend_from_slice(extra);
        Self::start_as(scope, &all, kubeconfig())
    }

    /// Like [`Operator::start`], with the operator using `kubeconfig` instead.
    pub fn start_as(scope: &str, extra: &[&str], kubeconfig: PathBuf) -> Self {
        let [metrics_port, webhook_port, kubelet_port] = free_ports();
        let mut op = Self {
            child: None,
            scope: scope.to_string(),
            metrics_port,
            webhook_port,
            kubelet_port,
            log: log_dir().join(format!("{scope}.log")),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            kubeconfig,
            clock_offset: None,
        };
        op.spawn();
        op
    }

    /// Like [`Operator::start`], the process's wall clock off by `offset` (`+15s`, `-15s`;
    /// Debian's `faketime`, its monotonic clock left alone).
    pub fn start_with_clock(scope: &str, extra: &[&str], offset: &str) -> Self {
        let [metrics_port, webhook_port, kubelet_port] = free_ports();
        let mut op = Self {
            child: None,
            scope: scope.to_string(),
            metrics_port,
            webhook_port,
            kubelet_port,
            log: log_dir().join(format!("{scope}-{}.log", offset.replace(['+', '-'], "x"))),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            kubeconfig: kubeconfig(),
            clock_offset: Some(offset.to_string()),
        };
        op.spawn();
        op
    }

    /// Starts the process; if it dies at once because a port the harness picked was taken
    /// meanwhile by another process, starts it again on other ports (up to 3 times).
    fn spawn(&mut self) {
        for attempt in 0..4 {
            self.spawn_once();
            if !self.port_was_taken() || attempt == 3 {
                return;
            }
            eprintln!("  a port picked for the operator was taken meanwhile; starting it again on other ports");
            [self.metrics_port, self.webhook_port, self.kubelet_port] = free_ports();
        }
    }

    /// Waits (at most 5 s) until the process listens on its metrics port and, with a webhook,
    /// its webhook port; true if it exited instead, saying a port was in use.
    fn port_was_taken(&mut self) -> bool {
        let webhook = !self.extra.iter().any(|a| a == "--no-webhook" || a == "--simulate-only");
        let listens = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.is_running() {
                return self.log_tail().contains("Address already in use");
            }
            if listens(self.metrics_port) && (!webhook || listens(self.webhook_port)) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn spawn_once(&mut self) {
        let selector = format!("{SCOPE_LABEL}={}", self.scope);
        let instance_given = self.extra.iter().any(|a| a == "--instance");
        let simulate_only = self.extra.iter().any(|a| a == "--simulate-only");
        // `--no-pool-selector` (the harness's own): the operator's instance rule decides.
        let pools_by_instance = self.extra.iter().any(|a| a == "--no-pool-selector");
        let mut args: Vec<String> = vec![if simulate_only { "simulate".into() } else { "run".into() }];
        if !pools_by_instance {
            args.push("--pool-selector".into());
            args.push(selector.clone());
        }
        args.extend([
            "--vmi-selector".into(),
            selector.clone(),
            "--metrics-addr".into(),
            format!("127.0.0.1:{}", self.metrics_port),
            "--webhook-addr".into(),
            format!("127.0.0.1:{}", self.webhook_port),
        ]);
        if !self.extra.iter().any(|a| a == "--node-lease-duration-seconds") {
            args.push("--node-lease-duration-seconds".into());
            args.push("20".into());
        }
        if !instance_given {
            args.push("--instance".into());
            args.push(self.scope.clone());
        }
        // `--default-manage` (the harness's own): no --manage-* flag, the operator's default.
        let overrides_manage = self.extra.iter().any(|a| a.starts_with("--manage-") || a == "--default-manage");
        if !overrides_manage {
            args.push("--manage-nodes-with-label-selector".into());
            args.push(selector);
        }
        // `--harness-no-pki`: no CA flag, as a user runs `kwok-pools run` by hand.
        let no_pki = self.extra.iter().any(|a| a == "--harness-no-pki");
        // Reviews only from the API server's webhook client identity, as users run it.
        let client_ca = self.kubeconfig.parent().map(|d| d.join("pki/webhook-client-ca.crt"));
        if let Some(ca) = client_ca.filter(|ca| ca.exists() && !no_pki)
            && !self.extra.iter().any(|a| a == "--webhook-client-ca" || a == "--no-webhook")
        {
            args.push("--webhook-client-ca".into());
            args.push(ca.display().to_string());
        }
        // The simulated kubelets' API on a port of its own; with a local cluster's CAs (the
        // cluster CA issues kubelet serving certificates and signs the API server's kubelet
        // client certificate), as `make run` passes them.
        if !self.extra.iter().any(|a| a == "--kubelet-port") {
            args.push("--kubelet-port".into());
            args.push(self.kubelet_port.to_string());
        }
        let pki = self.kubeconfig.parent().map(|d| d.join("pki")).filter(|p| p.join("ca.key").exists() && !no_pki);
        if let Some(pki) = pki
            && !self.extra.iter().any(|a| a.starts_with("--kubelet-serving-ca") || a == "--kubelet-client-ca")
        {
            for (flag, file) in [
                ("--kubelet-serving-ca-cert", "ca.crt"),
                ("--kubelet-serving-ca-key", "ca.key"),
                ("--kubelet-client-ca", "ca.crt"),
            ] {
                args.push(flag.into());
                args.push(pki.join(file).display().to_string());
            }
        }
        let harness_only = ["--simulate-only", "--no-pool-selector", "--default-manage", "--harness-no-pki"];
        args.extend(self.extra.iter().filter(|a| !harness_only.contains(&a.as_str())).cloned());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut cmd = match &self.clock_offset {
            Some(offset) => {
                let mut c = Command::new("faketime");
                c.args(["-f", offset]).arg(kwok_pools_bin()).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                c
            }
            None => Command::new(kwok_pools_bin()),
        };
        cmd.args(&args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info,kwok_pools=debug,kube_runtime=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // The operator dies with the test thread that started it, even on a panic or a kill.
        cmd.env("KWOK_POOLS_EXIT_WITH_PARENT", "1");
        eprintln!("  started operator for scope {} (log {})", self.scope, self.log.display());
        self.child = Some(cmd.spawn().expect("starting kwok-pools run"));
    }

    /// Stops the operator (SIGTERM, then SIGKILL).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the operator with SIGKILL: no clean-up of its own (leases stay until they expire).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the operator again after [`Operator::kill`] or [`Operator::stop`].
    pub fn start_again(&mut self) {
        // One that exited by itself (it lost its lead) is started again as well.
        if self.child.as_mut().is_some_and(|c| !matches!(c.try_wait(), Ok(None))) {
            self.child = None;
        }
        assert!(self.child.is_none(), "the operator still runs");
        self.spawn();
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The operator's resident memory now, in MiB (0 when it does not run).
    pub fn rss_mib(&self) -> f64 {
        let Some(pid) = self.child.as_ref().map(std::process::Child::id) else { return 0.0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1));
        kib.and_then(|k| k.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
    }

    /// Waits until the operator reports ready (stores synced, webhook registered).
    pub async fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return;
            }
            assert!(self.is_running(), "the operator exited:\n{}", self.log_tail());
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the operator was not ready in 60s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The operator's /metrics text.
    /// The sum of a metric's samples (every label set) on the operator's /metrics; 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        match reqwest::get(&url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// The log's last warnings and errors (what went wrong is often long before the tail).
    pub fn log_warnings(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        // Repeats (the same message at another time) once each.
        let mut seen = std::collections::HashSet::new();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .filter(|l| seen.insert(l.split_once(' ').map_or(*l, |(_, rest)| rest)))
            .collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("operator log warnings for scope {}:\n{}", self.scope, self.log_warnings());
            eprintln!("operator log tail for scope {}:\n{}", self.scope, self.log_tail());
        }
        // Whatever the test did, its pools (and through them their children) go.
        let selector = format!("{SCOPE_LABEL}={}", self.scope);
        let every_kind: Vec<String> = kwok_pools::kinds::names().into_iter().map(|n| n.plural).collect();
        let _ = Command::new(kubectl_bin())
            .args(["delete", &every_kind.join(","), "--all-namespaces", "-l", &selector, "--wait=false"])
            .env("KUBECONFIG", &self.kubeconfig)
            .output();
        self.stop();
    }
}

/// A kubeconfig that acts as the ServiceAccount `namespace/name` of the test cluster (through
/// impersonation), in a directory kept while the returned guard lives.
pub fn service_account_kubeconfig(namespace: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig()).unwrap()).unwrap();
    for user in kc["users"].as_sequence_mut().unwrap() {
        user["user"]["as"] = format!("system:serviceaccount:{namespace}:{name}").into();
        user["user"]["as-groups"] = serde_yaml::from_str(&format!(
            "[system:serviceaccounts, 'system:serviceaccounts:{namespace}', system:authenticated]"
        ))
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    (dir, path)
}

/// Deletes a cluster-scoped object by kind and name, not waiting.
pub fn delete_quietly(kind: &str, name: &str) {
    let _ = kubectl(&["delete", kind, name, "--wait=false", "--ignore-not-found"]);
}

/// kwok v0.8.0's stage sets (`kustomize/stage/`), from the Go module cache (`go mod download`,
/// which `make kwok` has filled).
pub fn kwok_stages() -> PathBuf {
    let out = Command::new("go")
        .args(["mod", "download", "-json", "sigs.k8s.io/kwok@v0.8.0"])
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("go");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("go mod download -json");
    PathBuf::from(info["Dir"].as_str().expect("the module's directory")).join("kustomize/stage")
}

/// Reads a file of the repository.
pub fn read_repo_file(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

pub async fn delete_api<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// Every version of the object `name` that `api` shows, from a watch, until it is deleted (the
/// deleted version last).
pub fn record_versions<K>(api: Api<K>, name: &str) -> tokio::task::JoinHandle<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                Event::Apply(o) | Event::InitApply(o) => seen.push(o),
                Event::Delete(o) => {
                    seen.push(o);
                    break;
                }
                _ => {}
            }
        }
        seen
    })
}

pub fn path_exists(p: &Path) -> bool {
    p.exists()
}

/// A local cluster of a test's own (for what is cluster-wide, such as the node lifecycle
/// controller's view of a zone), deleted when dropped.
pub struct OwnCluster {
    home: tempfile::TempDir,
    pub name: String,
    pub kubeconfig: PathBuf,
}

impl OwnCluster {
    /// Creates cluster `name`, passing `extra` as `--extra-arg COMPONENT=--flag` values.
    pub fn create(name: &str, extra: &[&str]) -> Self {
        let home = tempfile::tempdir().expect("a state home");
        let mut args = vec!["cluster", "create", "--name", name];
        for e in extra {
            args.extend(["--extra-arg", e]);
        }
        eprintln!("  creating cluster {name} of the test's own");
        let out = Command::new(kwok_pools_bin())
            .args(&args)
            .env("KWOK_POOLS_HOME", home.path())
            .env("KWOK_POOLS_BIN_DIR", repo().join("bin"))
            .output()
            .expect("running kwok-pools cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stderr));
        let kubeconfig = home.path().join("clusters").join(name).join("kubeconfig");
        Self { home, name: name.to_string(), kubeconfig }
    }

    pub async fn client(&self) -> kube::Client {
        kwok_pools::telemetry::init_crypto();
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("reading the kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("loading it");
        kube::Client::try_from(config).expect("building a client")
    }

    /// `kubectl apply -f -` of `yaml` against this cluster; must succeed.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = Command::new(kubectl_bin())
            .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        child.stdin.take().expect("stdin").write_all(yaml.as_bytes()).expect("writing to kubectl");
        let out = child.wait_with_output().expect("kubectl");
        assert!(out.status.success(), "kubectl apply failed: {}\n---\n{yaml}", String::from_utf8_lossy(&out.stderr));
    }

    /// Kills one component of the control plane (`kube-apiserver`, `etcd`, ...) with SIGKILL.
    pub fn kill_component(&self, component: &str) {
        let pid_file = self.home.path().join("clusters").join(&self.name).join("run").join(format!("{component}.pid"));
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .parse()
            .expect("a pid");
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("killing the component");
        // Gone once signal 0 fails.
        let deadline = Instant::now() + Duration::from_secs(10);
        while nix::sys::signal::kill(pid, None).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("  killed {component} of {}", self.name);
    }

    /// Starts the components that do not run (`kwok-pools cluster start`), waiting until ready.
    pub fn start_stopped(&self) {
        let out = Command::new(kwok_pools_bin())
            .args(["cluster", "start", "--name", &self.name])
            .env("KWOK_POOLS_HOME", self.home.path())
            .env("KWOK_POOLS_BIN_DIR", repo().join("bin"))
            .output()
            .expect("running kwok-pools cluster start");
        assert!(out.status.success(), "cluster start failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The lines of a component's log that match `pattern` (the last 40).
    pub fn log(&self, component: &str, pattern: &str) -> String {
        let path = self.home.path().join("clusters").join(&self.name).join("logs").join(format!("{component}.log"));
        let re = regex::Regex::new(pattern).expect("a pattern");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
        let lines: Vec<&str> = text.lines().filter(|l| re.is_match(l)).collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = Command::new(kwok_pools_bin())
            .args(["cluster", "delete", "--name", &self.name])
            .env("KWOK_POOLS_HOME", self.home.path())
            .output();
    }
}

/// Waits until the webhook refuses NodePool `name` (scoped to `scope`), which only the webhook
/// refuses (a template label the pool sets itself): the webhook is registered and trusted.
pub async fn wait_webhook_refuses(name: &str, scope: &str, timeout: Duration) {
    let bad = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: {name}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  nodeCount: 1\n  nodeTemplate:\n    metadata: {{labels: {{pools.kwok.x-k8s.io/index: '1'}}}}\n"
    );
    wait_for("the webhook to refuse", timeout, || async {
        let out = kubectl_stdin(&["apply", "-f", "-"], Some(&bad));
        if out.status.success() {
            delete_quietly("nodepool", name);
            Err("accepted".into())
        } else {
            Ok(())
        }
    })
    .await;
}

/// An address of this machine that is not loopback (what a pod IP is to the API server).
pub fn host_address() -> String {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    // No packet is sent: connecting a UDP socket only picks the route and its source address.
    socket
        .connect("10.255.255.255:9")
        .expect("this machine has no route off loopback: the shared-address test needs one interface besides lo");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "no non-loopback address to test the in-cluster mode with");
    ip.to_string()
}

/// A client of the simulated kubelets with the cluster admin's certificate, trusting the
/// cluster CA (which issues their serving certificates).
pub fn admin_client() -> reqwest::Client {
    let pki = kubeconfig().parent().unwrap().join("pki");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let mut identity = std::fs::read(pki.join("admin.crt")).unwrap();
    identity.extend(std::fs::read(pki.join("admin.key")).unwrap());
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(ca)
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap()
}
