//! The workloads, each tool in a fresh cluster per workload group: N nodes to Ready (the
//! largest then held for `--hold` seconds), and pods to Running on held nodes, then deleted.

use super::harness::{Bench, cpu_seconds, metric_in, peak_rss_mib, requests_in};
use super::observe::{LeaseStats, Observer, Sample, Sampler};
use super::profile::Profile;
use super::tools::{Running, Tool};
use super::writer;
use super::{Args, PodCidr};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use kwok_pools::kinds::nodepool::NodePool;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Outcome {
    pub tool: Tool,
    pub workload: String,
    pub run: usize,
    pub objects: u32,
    /// None: not done within the timeout.
    pub seconds: Option<f64>,
    pub tool_cpu: Option<f64>,
    pub tool_rss: Option<f64>,
    pub apiserver_cpu: f64,
    /// API requests answered by the API server meanwhile, by `VERB resource`.
    pub requests: BTreeMap<String, f64>,
    /// Watch events the API server sent meanwhile (to every watcher), by resource.
    pub watch_events: BTreeMap<String, f64>,
    /// Request bodies meanwhile, by `verb resource`: (bytes, requests).
    pub bodies: BTreeMap<String, (f64, f64)>,
    pub leases: Option<LeaseStats>,
    pub not_ready: usize,
    pub series: Vec<Sample>,
}

/// The API server's counters a window reads at both ends.
struct Counters {
    requests: BTreeMap<String, f64>,
    watch_events: BTreeMap<String, f64>,
    body_bytes: BTreeMap<String, f64>,
    body_count: BTreeMap<String, f64>,
}

impl Counters {
    /// One read of the API server's metrics.
    async fn read(bench: &Bench) -> Self {
        let text = bench.metrics_text().await;
        let watch = metric_in(&text, "apiserver_watch_events_total", &["resource", "kind"]);
        let requests = requests_in(&text).into_iter().map(|((verb, resource), n)| (format!("{verb} {resource}"), n));
        Self {
            requests: requests.collect(),
            watch_events: watch.into_iter().map(|(k, v)| (k.trim().to_string(), v)).collect(),
            body_bytes: metric_in(&text, "apiserver_request_body_size_bytes_sum", &["verb", "resource"]),
            body_count: metric_in(&text, "apiserver_request_body_size_bytes_count", &["verb", "resource"]),
        }
    }
}

/// `after - before` of each key, the keys that grew.
fn grown(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// One measured stretch: CPU, memory, requests and a sampled series from begin to end.
struct Measure {
    tool_pid: Option<i32>,
    apiserver_pid: i32,
    tool_cpu0: f64,
    api_cpu0: f64,
    counters0: Counters,
    sampler: Sampler,
}

impl Measure {
    async fn begin(bench: &Bench, running: &Running, done: impl Fn() -> usize + Send + Sync + 'static) -> Self {
        let apiserver_pid =
            bench.control_plane_pids().into_iter().find(|(n, _)| n == "kube-apiserver").map_or(0, |(_, p)| p);
        let tool_pid = running.pid();
        Self {
            tool_pid,
            apiserver_pid,
            tool_cpu0: tool_pid.map_or(0.0, cpu_seconds),
            api_cpu0: cpu_seconds(apiserver_pid),
            counters0: Counters::read(bench).await,
            sampler: Sampler::start(tool_pid, apiserver_pid, done),
        }
    }

    async fn end(
        self,
        bench: &Bench,
        tool: Tool,
        workload: String,
        run: usize,
        objects: u32,
        seconds: Option<f64>,
    ) -> Outcome {
        let (before, after) = (&self.counters0, Counters::read(bench).await);
        let bytes = grown(&before.body_bytes, &after.body_bytes);
        let counts = grown(&before.body_count, &after.body_count);
        let bodies = counts.iter().map(|(k, n)| (k.clone(), (bytes.get(k).copied().unwrap_or(0.0), *n))).collect();
        Outcome {
            tool,
            workload,
            run,
            objects,
            seconds,
            tool_cpu: self.tool_pid.map(|p| cpu_seconds(p) - self.tool_cpu0),
            tool_rss: self.tool_pid.map(peak_rss_mib),
            apiserver_cpu: cpu_seconds(self.apiserver_pid) - self.api_cpu0,
            requests: grown(&before.requests, &after.requests),
            watch_events: grown(&before.watch_events, &after.watch_events),
            bodies,
            leases: None,
            not_ready: 0,
            series: self.sampler.stop(),
        }
    }
}

/// Waits until `count` reaches `target` (printing progress every 5 s); the seconds it took.
async fn wait_for(what: &str, target: usize, timeout: Duration, count: impl Fn() -> usize) -> Option<f64> {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let n = count();
        if n >= target {
            return Some(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > timeout {
            println!("  ! {what}: only {n} of {target} after {timeout:?}");
            return None;
        }
        if said.elapsed() >= Duration::from_secs(5) {
            eprintln!("    … {what}: {n}/{target} ({:.0}s)", start.elapsed().as_secs_f64());
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Makes `n` nodes for the tool: a NodePool for kwok-pools, else the shared client's nodes.
async fn make_nodes(
    bench: &Bench,
    tool: Tool,
    n: u32,
    concurrency: usize,
    leased: writer::Leased,
    lease_seconds: i32,
    pod_cidr: PodCidr,
) -> tokio::task::JoinHandle<usize> {
    let client = bench.client.clone();
    let preset = pod_cidr == PodCidr::Preset;
    match tool {
        Tool::KwokPools => {
            let api: Api<NodePool> = Api::all(client);
            let pool = writer::node_pool(n, preset);
            api.patch("cmp-node", &PatchParams::apply("bench").force(), &Patch::Apply(pool)).await.unwrap();
            tokio::spawn(async { 0 })
        }
        Tool::Kwok | Tool::Bare => tokio::spawn(async move {
            writer::create_nodes(&client, n, tool == Tool::Bare, concurrency, leased, lease_seconds, preset).await
        }),
    }
}

fn say(o: &Outcome) {
    let secs = o.seconds.map_or("not done".into(), |s| format!("{s:.1} s ({:.0}/s)", f64::from(o.objects) / s));
    let leases = o.leases.map_or(String::new(), |l| {
        format!("; leases on time {} late {} missed {}; NotReady {}", l.on_time, l.late, l.missed, o.not_ready)
    });
    println!(
        "  {} {} run {}: {secs}; tool CPU {:.1} s, peak RSS {:.0} MiB; API server CPU {:.1} s{leases}",
        o.tool.label(),
        o.workload,
        o.run,
        o.tool_cpu.unwrap_or(0.0),
        o.tool_rss.unwrap_or(0.0),
        o.apiserver_cpu
    );
}

pub async fn run_all(args: &Args, tool: Tool, run: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    let largest = args.nodes.iter().copied().max().unwrap_or(0);
    let smallest = args.nodes.iter().copied().min().unwrap_or(0);
    for (&pod_cidr, &n) in args.pod_cidr.iter().flat_map(|p| args.nodes.iter().map(move |n| (p, n))) {
        println!("\n## {} — {n} nodes, podCIDRs {} (run {run})", tool.label(), pod_cidr.slug());
        let mut extra = args.regime.cluster_args(args.grace);
        if args.profile.is_some() {
            // Local clusters run without the profiling endpoints.
            extra.push((kwok_pools::cluster::component::Component::KubeApiserver, "--profiling=true".into()));
        }
        let bench = Bench::cluster_with(&format!("cmp-{}", tool.slug()), extra).await;
        let running = tool.start(&bench, args.regime.slug(), args.regime.lease_seconds()).await;
        if let Running::Kwok(k) = &running {
            let _ = std::fs::write(args.out_dir().join("kwok-command.txt"), &k.command);
        }
        let obs = Observer::start(&bench.client);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cluster = Cluster { args, tool, run, pod_cidr, bench: &bench, running: &running, obs: &obs };
        let (made, renewer) = cluster.nodes(n).await;
        out.push(made);
        // A tool that did not make every node Ready is still held and given pods (on nodes
        // that are Ready): what it does to leases and pods is part of the comparison.
        if n == largest && args.hold > 0 {
            out.push(cluster.hold(n).await);
        }
        if n == smallest && args.pods > 0 {
            if obs.nodes_ready() >= args.pod_nodes as usize {
                out.extend(cluster.pods().await);
            } else {
                println!("  ! fewer than {} nodes Ready: no pod workloads for {}", args.pod_nodes, tool.label());
            }
        }
        if let Some(r) = renewer {
            r.abort();
        }
    }
    out
}

/// One tool's cluster and what watches it.
struct Cluster<'a> {
    args: &'a Args,
    tool: Tool,
    run: usize,
    pod_cidr: PodCidr,
    bench: &'a Bench,
    running: &'a Running,
    obs: &'a Observer,
}

impl Cluster<'_> {
    fn lease(&self) -> i32 {
        self.args.regime.lease_seconds()
    }

    async fn measure(&self, done: impl Fn() -> usize + Send + Sync + 'static) -> Measure {
        Measure::begin(self.bench, self.running, done).await
    }

    /// With `--profile`: the API server's CPU profile over this window, recorded until
    /// [`Profile::finish`].
    fn profile(&self, workload: &str) -> Option<Profile> {
        let dir = self.args.profile.as_ref()?;
        let _ = std::fs::create_dir_all(dir);
        let file = dir.join(format!("{workload}-{}-run{}.pprof", self.tool.slug(), self.run));
        Some(Profile::start(super::harness::repo().join("bin/kubectl"), self.bench.kubeconfig(), file))
    }

    /// The workload's name in the results: what and how many, and who gave the podCIDRs.
    fn workload(&self, what: &str, n: u32) -> String {
        format!("{what}-{n}-{}", self.pod_cidr.slug())
    }

    async fn end(&self, m: Measure, workload: String, objects: u32, seconds: Option<f64>) -> Outcome {
        m.end(self.bench, self.tool, workload, self.run, objects, seconds).await
    }

    /// `n` nodes to Ready; the bare writer's lease renewals from then on.
    async fn nodes(&self, n: u32) -> (Outcome, Option<tokio::task::JoinHandle<()>>) {
        self.obs.open_window();
        let o = self.obs.clone();
        let m = self.measure(move || o.nodes_ready()).await;
        let profile = self.profile(&self.workload("nodes", n));
        // The bare writer renews each lease from its creation on, as any tool must.
        let leased = writer::Leased::default();
        let renewer = (self.tool == Tool::Bare).then(|| {
            writer::renew_leases(self.bench.client.clone(), leased.clone(), self.args.concurrency, self.lease())
        });
        let creating =
            make_nodes(self.bench, self.tool, n, self.args.concurrency, leased, self.lease(), self.pod_cidr).await;
        let secs = wait_for("nodes Ready", n as usize, self.args.timeout(), || self.obs.nodes_ready()).await;
        let (leases, not_ready) = self.obs.close_window();
        let mut made = self.end(m, self.workload("nodes", n), n, secs).await;
        // After the window's measures: the piece in progress runs a few seconds past its end.
        if let Some(p) = profile {
            p.finish().await;
        }
        made.leases = Some(leases);
        made.not_ready = not_ready;
        say(&made);
        let _ = creating.await;
        (made, renewer)
    }

    async fn hold(&self, n: u32) -> Outcome {
        let hold = self.args.hold;
        self.obs.open_window();
        let o = self.obs.clone();
        let m = self.measure(move || o.nodes_ready()).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(hold) {
            tokio::time::sleep(Duration::from_secs(30).min(Duration::from_secs(hold).saturating_sub(start.elapsed())))
                .await;
            eprintln!(
                "    … holding {n} nodes: {:.0}/{hold} s, {} Ready",
                start.elapsed().as_secs_f64(),
                self.obs.nodes_ready()
            );
        }
        let (leases, not_ready) = self.obs.close_window();
        let mut held = self.end(m, self.workload("hold", n), n, Some(start.elapsed().as_secs_f64())).await;
        held.leases = Some(leases);
        held.not_ready = not_ready;
        say(&held);
        held
    }

    /// Pods on `--pod-nodes` of the Ready nodes (every node still held) to Running, then
    /// deleted.
    async fn pods(&self) -> Vec<Outcome> {
        let (count, args, bench, obs) = (self.args.pods, self.args, self.bench, self.obs);
        // The controller manager removes each new node's not-ready taint after the node is
        // Ready, at its own pace; its backlog is not the pods' to pay for (nor would a
        // scheduler place pods on a tainted node).
        let settle = Duration::from_secs(120).min(args.timeout());
        let all = obs.nodes_ready();
        let _ = wait_for("nodes untainted by the controller manager", all, settle, || {
            all.saturating_sub(obs.nodes_tainted())
        })
        .await;
        let held = obs.nodes_ready();
        println!("  {count} pods on {} nodes, {held} nodes held", args.pod_nodes);
        // Each node's podCIDR as the cluster has it (the bare writer's pod addresses come
        // from it), read before the measured window; a node the controller manager has not
        // given one yet gets no pods.
        let cidrs = node_cidrs(bench).await;
        let nodes: Vec<(String, String)> = obs
            .ready_names()
            .into_iter()
            .filter_map(|n| cidrs.get(&n).map(|c| (n, c.clone())))
            .take(args.pod_nodes as usize)
            .collect();
        // Each node's pods must fit its capacity (250) and its /24.
        let room = nodes.len() as u32 * 250;
        if count > room {
            println!(
                "  ! {count} pods need {} Ready nodes with a podCIDR, {} have one: no pod workloads for {}",
                count.div_ceil(250),
                nodes.len(),
                self.tool.label()
            );
            return Vec::new();
        }
        // Pods are refused until the namespace's default ServiceAccount exists.
        let sa: Api<ServiceAccount> = Api::namespaced(bench.client.clone(), writer::NS);
        for _ in 0..300 {
            if sa.get_opt("default").await.ok().flatten().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        obs.open_window();
        let o = obs.clone();
        let m = self.measure(move || o.pods_running()).await;
        let profile = self.profile(&self.workload("pods", count));
        let (client, conc, bare) = (bench.client.clone(), args.concurrency, self.tool == Tool::Bare);
        let creating = tokio::spawn(async move { writer::create_pods(&client, count, &nodes, bare, conc).await });
        let secs = wait_for("pods Running", count as usize, args.timeout(), || obs.pods_running()).await;
        let (leases, not_ready) = obs.close_window();
        let mut made = self.end(m, self.workload("pods", count), count, secs).await;
        // After the window's measures: the piece in progress runs a few seconds past its end.
        if let Some(p) = profile {
            p.finish().await;
        }
        made.leases = Some(leases);
        made.not_ready = not_ready;
        say(&made);
        let _ = creating.await;

        obs.open_window();
        let o = obs.clone();
        let total = obs.pods();
        let m = self.measure(move || total.saturating_sub(o.pods())).await;
        let profile = self.profile(&self.workload("delete", count));
        let client = bench.client.clone();
        let deleting = tokio::spawn(async move { writer::delete_pods(&client, count, bare, conc).await });
        let secs = wait_for("pods deleted", total, args.timeout(), || total.saturating_sub(obs.pods())).await;
        let (leases, not_ready) = obs.close_window();
        let mut gone = self.end(m, self.workload("delete", count), count, secs).await;
        // After the window's measures: the piece in progress runs a few seconds past its end.
        if let Some(p) = profile {
            p.finish().await;
        }
        gone.leases = Some(leases);
        gone.not_ready = not_ready;
        say(&gone);
        let _ = deleting.await;
        vec![made, gone]
    }
}

/// Every node's podCIDR (by name), as listed a few times until a list answers.
async fn node_cidrs(bench: &Bench) -> BTreeMap<String, String> {
    let api = Api::<Node>::all(bench.client.clone());
    for attempt in 1..=5u64 {
        match api.list(&Default::default()).await {
            Ok(list) => {
                return list.items.into_iter().filter_map(|n| Some((n.metadata.name?, n.spec?.pod_cidr?))).collect();
            }
            Err(e) => {
                eprintln!("  ! listing the nodes' podCIDRs (attempt {attempt} of 5): {e}");
                tokio::time::sleep(Duration::from_secs(attempt)).await;
            }
        }
    }
    BTreeMap::new()
}
