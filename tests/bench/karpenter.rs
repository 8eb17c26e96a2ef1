//! Karpenter's kwok provider provisioning nodes for a Deployment, on kwok-pools and on kwok
//! v0.8.0 configured as Karpenter's own `hack/install-kwok.sh` configures it (one partition,
//! kwok's stage-fast set with Karpenter's stages; `make karpenter` writes that config), each
//! on a fresh cluster: time until every pod is Running, the nodes Karpenter made and how many
//! are NotReady at the end, and the CPU and peak memory of the simulator, of Karpenter and of
//! the API server. Pods ask for 380m CPU and Karpenter may only pick `c-4x-amd64-linux` (4
//! CPU), so about ten pods land on each node.

use super::harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    KwokPools,
    Kwok,
}

const NODE_POOL: &str = "apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: Never}
  limits: {cpu: 100000}
  template:
    spec:
      expireAfter: Never
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c-4x-amd64-linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
";

fn deployment(replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: inflate, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: inflate}}}}
  template:
    metadata: {{labels: {{app: inflate}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: inflate
        image: registry.k8s.io/pause:3.10
        resources: {{requests: {{cpu: 380m, memory: 256Mi}}}}
"
    )
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubectl_apply(bench: &Bench, what: &str, stdin: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new(repo().join("bin/kubectl"))
        .args(["apply", "--server-side", "--force-conflicts", "-f", what])
        .env("KUBECONFIG", bench.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kubectl apply {what}: {}", String::from_utf8_lossy(&out.stderr));
}

fn start_karpenter(bench: &Bench) -> (Process, u16) {
    let [metrics, health] = free_ports();
    let log = std::fs::File::create(bench.home.join("karpenter.log")).unwrap();
    let child = Command::new(repo().join("bin/karpenter-kwok"))
        .env("KUBECONFIG", bench.kubeconfig())
        .env("DISABLE_LEADER_ELECTION", "true")
        .env("METRICS_PORT", metrics.to_string())
        .env("HEALTH_PROBE_PORT", health.to_string())
        .env("LOG_LEVEL", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting Karpenter (run `make karpenter`)");
    (Process(child), health)
}

fn start_kwok(bench: &Bench) -> (Process, u16) {
    let port = free_port();
    let log = std::fs::File::create(bench.home.join("kwok.log")).unwrap();
    let config = repo().join("bin/karpenter-kwok-config.yaml");
    let child = Command::new(repo().join("bin/kwok"))
        .arg(format!("--kubeconfig={}", bench.kubeconfig().display()))
        .arg(format!("--config={}", config.display()))
        .arg(format!("--server-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting kwok (run `make kwok karpenter`)");
    (Process(child), port)
}

pub async fn run(pods: u32) {
    println!(
        "\n## Karpenter's kwok provider: a Deployment of {pods} pods (about {} nodes) on kwok-pools and on kwok v0.8.0 as Karpenter's install-kwok.sh configures it ({})",
        pods / 10,
        machine()
    );
    for f in ["bin/karpenter-kwok", "bin/karpenter-crds", "bin/karpenter-kwok-config.yaml", "bin/kwok"] {
        if !repo().join(f).exists() {
            println!("  skipped: {f} is missing (run `make kwok karpenter`)");
            return;
        }
    }
    for tool in [Tool::KwokPools, Tool::Kwok] {
        one(tool, pods).await;
    }
}

async fn one(tool: Tool, pods: u32) {
    let label = if tool == Tool::Kwok { "kwok v0.8.0" } else { "kwok-pools" };
    let bench = Bench::cluster("bench-karpenter").await;
    kubectl_apply(&bench, &format!("{}/", repo().join("bin/karpenter-crds").display()), None);
    kubectl_apply(&bench, "-", Some(NODE_POOL));
    let (sim_pid, _guard_op, _guard_kwok) = match tool {
        Tool::KwokPools => {
            let op = Operator::start_command(&bench, "run", "kwok-pools", &["--pod-termination-delay", "0s"]).await;
            (op.pid(), Some(op), None)
        }
        Tool::Kwok => {
            let (p, port) = start_kwok(&bench);
            if !answers(&format!("http://127.0.0.1:{port}/healthz"), Duration::from_secs(60)).await {
                println!("  kwok did not answer /healthz within 60 s (see {})", bench.home.join("kwok.log").display());
            }
            (p.0.id() as i32, None, Some(p))
        }
    };
    let (karpenter, health) = start_karpenter(&bench);
    if !answers(&format!("http://127.0.0.1:{health}/healthz"), Duration::from_secs(120)).await {
        println!("  Karpenter did not answer /healthz (see {})", bench.home.join("karpenter.log").display());
        return;
    }
    let karpenter_pid = karpenter.0.id() as i32;
    let mut cp = bench.control_plane_pids();
    cp.push(("karpenter".into(), karpenter_pid));
    let meter = CpuMeter::start(sim_pid, cp);
    let writes_before = bench.writes().await;
    let start = Instant::now();
    kubectl_apply(&bench, "-", Some(&deployment(pods)));
    let deployments: Api<Deployment> = Api::namespaced(bench.client.clone(), "default");
    let nodes: Api<Node> = Api::all(bench.client.clone());
    let lp = ListParams::default().labels("karpenter.sh/nodepool=default");
    let done = wait_until("every pod Running", Duration::from_secs(1800), || async {
        let d = deployments.get("inflate").await.map_err(|e| e.to_string())?;
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready as u32 >= pods { Ok(()) } else { Err(format!("{ready} of {pods} pods Running")) }
    })
    .await;
    let took = start.elapsed().as_secs_f64();
    let (sim_cpu, cp_cpu, wall) = meter.read();
    let all: Vec<Node> = nodes.list(&lp).await.map(|l| l.items).unwrap_or_default();
    let not_ready = all.iter().filter(|n| !kwok_pools::kubelet::status::node::is_ready(n)).count();
    let cpu = |name: &str| cp_cpu.iter().find(|(n, _)| n == name).map_or(0.0, |(_, v)| *v);
    let outcome = if done.is_some() {
        format!("all {pods} pods Running in {took:.1} s")
    } else {
        format!("NOT all Running after {took:.0} s")
    };
    println!(
        "- {label}: {outcome} on {} nodes ({not_ready} NotReady); simulator {sim_cpu:.1} CPU-s, peak RSS {:.0} MiB; Karpenter {:.1} CPU-s, RSS {:.0} MiB; API server {:.1} CPU-s ({wall:.0} s measured)",
        all.len(),
        peak_rss_mib(sim_pid),
        cpu("karpenter"),
        peak_rss_mib(karpenter_pid),
        cpu("kube-apiserver"),
    );
    let writes = delta(&bench.writes().await, &writes_before);
    let mut top: Vec<(&String, &f64)> = writes.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1));
    let shown: Vec<String> = top.iter().take(8).map(|(k, v)| format!("{k} {v:.0}")).collect();
    println!("  API writes meanwhile (all clients): {:.0} ({})", writes.values().sum::<f64>(), shown.join(", "));
    drop(karpenter);
}
