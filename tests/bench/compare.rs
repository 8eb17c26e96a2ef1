//! `make bench-compare`: kwok-pools side by side with kwok and with a bare writer (the limit:
//! objects created already in their final state), each tool in a fresh local cluster, the
//! same workloads and the same neutral parallel client. Writes a markdown table (medians of
//! the runs with min and max), CSV time series and PNG plots under `bench/results/`.
//!
//! Usage: cargo bench --bench compare -- [--regime kubelet|kwokctl] [--runs 3] [--nodes 5000,10000]
//! [--pods 10000] [--pod-nodes 100] [--hold 600] [--tools kwok,kwok-pools,bare] [--out bench/results]
//!
//! Every tool runs at the regime's heartbeat: `kubelet` is the kubelet's (40 s leases, the
//! controller manager's default monitor period and a 40 s grace), `kwokctl` is what kwokctl
//! v0.8.0 sets up (200 s leases, monitor period 25 s, grace 3m20s: its heartbeat factor 5).
//! Results go to `<out>/<regime>/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // bench code: a failed unwrap is a failed run

mod harness;
#[path = "compare/observe.rs"]
mod observe;
#[path = "compare/profile.rs"]
mod profile;
#[path = "compare/report.rs"]
mod report;
#[path = "compare/summary.rs"]
mod summary;
#[path = "compare/tools.rs"]
mod tools;
#[path = "compare/workloads.rs"]
mod workloads;
#[path = "compare/writer.rs"]
mod writer;

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// The heartbeat every tool runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Regime {
    Kubelet,
    Kwokctl,
}

impl Regime {
    pub fn slug(self) -> &'static str {
        match self {
            Regime::Kubelet => "kubelet",
            Regime::Kwokctl => "kwokctl",
        }
    }

    /// kwokctl's heartbeat factor (1: the kubelet's).
    pub fn factor(self) -> u32 {
        match self {
            Regime::Kubelet => 1,
            Regime::Kwokctl => 5,
        }
    }

    /// Every tool's node lease duration: 40 s times the factor (kwokctl's 200 s).
    pub fn lease_seconds(self) -> i32 {
        40 * self.factor() as i32
    }

    /// What the controller manager is started with: kwokctl's periods for the factor, given
    /// explicitly at factor 1 too (as kwokctl does: 5 s and 40 s; the 1.37 default grace is 50 s).
    /// `grace`: the node grace period instead of the regime's (a diagnostic).
    pub fn cluster_args(self, grace: Option<u32>) -> Vec<(kwok_pools::cluster::component::Component, String)> {
        use kwok_pools::cluster::component::Component::KubeControllerManager as Kcm;
        let f = self.factor();
        vec![
            (Kcm, format!("--node-monitor-period={}s", 5 * f)),
            (Kcm, format!("--node-monitor-grace-period={}s", grace.unwrap_or(40 * f))),
        ]
    }

    pub fn describe(self, grace: Option<u32>) -> String {
        let f = self.factor();
        let grace = match grace {
            Some(g) => format!("grace {g} s (set by --grace; the regime's is {} s)", 40 * f),
            None => format!("grace {} s", 40 * f),
        };
        format!(
            "{} heartbeat: node leases of {} s renewed every quarter (by every tool), controller manager node-monitor-period {} s, {grace}",
            self.slug(),
            40 * f,
            5 * f,
        )
    }
}

/// Who gives each node its podCIDR (every tool alike): the workload names say which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PodCidr {
    /// The controller manager's node IPAM, as in most clusters: NodePools without
    /// `spec.podCIDR` (the samples' shape), kwok's and the bare writer's nodes without one.
    Assigned,
    /// Set when the node is made: a NodePool's `spec.podCIDR`, the same /24 per node in the
    /// cluster CIDR on kwok's and the bare writer's nodes.
    Preset,
}

impl PodCidr {
    pub fn slug(self) -> &'static str {
        match self {
            PodCidr::Assigned => "assigned",
            PodCidr::Preset => "preset",
        }
    }
}

#[derive(Parser, Debug, Clone)]
#[command(about = "kwok-pools vs kwok vs a bare writer, each in a fresh local cluster")]
pub struct Args {
    /// The heartbeat every tool runs at (see the module's doc).
    #[arg(long, value_enum, default_value = "kubelet")]
    regime: Regime,
    /// Runs of every workload per tool (the table shows the median, min and max).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Node counts, each made Ready from zero in a cluster of its own.
    #[arg(long, value_delimiter = ',', default_value = "5000,10000")]
    nodes: Vec<u32>,
    /// Pods made Running on `--pod-nodes` nodes (then deleted), in the cluster of the smallest
    /// node count while all its nodes are held; 0 skips the pod workloads.
    #[arg(long, default_value_t = 10_000)]
    pods: u32,
    #[arg(long, default_value_t = 100)]
    pod_nodes: u32,
    /// Seconds the largest node count is held after it is Ready; 0 skips the hold.
    #[arg(long, default_value_t = 600)]
    hold: u64,
    /// Which tools, in this order.
    #[arg(long, value_delimiter = ',', default_value = "kwok,kwok-pools,bare")]
    tools: Vec<tools::Tool>,
    /// Parallel requests of the shared client (recorded with every run).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Who gives nodes their podCIDR, each variant a cluster of its own per node count
    /// (`assigned`: the controller manager, the default path; `preset`: the pool / the writer).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "assigned,preset")]
    pod_cidr: Vec<PodCidr>,
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Give up on a workload after this many seconds (the row then says so).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The controller manager's node grace period in seconds instead of the regime's (a
    /// diagnostic: kwokctl sets the regime's; results of such runs belong outside
    /// bench/results).
    #[arg(long)]
    grace: Option<u32>,
    /// Write a CPU profile of the API server over every workload window (from its start to a
    /// few seconds past its end) into this directory (`<workload>-<tool>-run<N>.pprof`; read
    /// with `go tool pprof -top`): where the API server's time goes, to explain a row (a
    /// diagnostic).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Run nothing: regenerate README.md's side-by-side table from the committed results
    /// (every regime's runs.csv under bench/results/). A run into bench/results does it too.
    #[arg(long)]
    readme: bool,
}

impl Args {
    /// Where this regime's results go.
    pub fn out_dir(&self) -> PathBuf {
        let base = if self.out.is_absolute() { self.out.clone() } else { harness::repo().join(&self.out) };
        base.join(self.regime.slug())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// Whether results go to the committed directory (the README's table is made from it).
    fn committed(&self) -> bool {
        self.out_dir().parent() == Some(harness::repo().join("bench/results").as_path())
    }
}

/// README.md's side-by-side table, rewritten from bench/results/<regime>/.
fn update_readme() -> Result<(), String> {
    let repo = harness::repo();
    let regimes = summary::read(&repo.join("bench/results"))?;
    let path = repo.join("README.md");
    let readme = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let updated = summary::splice(&readme, &summary::render(&regimes))?;
    std::fs::write(&path, updated).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().filter(|a| a != "--bench").collect();
    let args = Args::parse_from(argv);
    if args.readme {
        match update_readme() {
            Ok(()) => println!("README.md's side-by-side table rewritten from bench/results/"),
            Err(e) => {
                eprintln!("{e}: put the fences back in README.md's performance section");
                std::process::exit(1);
            }
        }
        return;
    }
    let out = args.out_dir();
    if (args.grace.is_some() || args.profile.is_some()) && args.committed() {
        eprintln!(
            "--grace and --profile make diagnostic runs, not the regime's: give them --out outside bench/results (e.g. --out /tmp/grace)"
        );
        std::process::exit(2);
    }
    std::fs::create_dir_all(&out).expect("creating the results directory");
    if args.tools.contains(&tools::Tool::Kwok) && !tools::kwok_installed() {
        eprintln!("kwok is not built: run `make kwok` (or `make bench-compare`, which does it)");
        std::process::exit(2);
    }
    println!("# kwok-pools vs kwok {} vs bare writer ({})", tools::KWOK_VERSION, harness::machine());
    println!("# {}", args.regime.describe(args.grace));
    println!("# {} run(s); results in {}", args.runs, out.display());
    let mut outcomes = Vec::new();
    for run in 1..=args.runs {
        for &tool in &args.tools {
            outcomes.extend(workloads::run_all(&args, tool, run).await);
            report::write(&out, &args, &outcomes);
        }
    }
    report::write(&out, &args, &outcomes);
    report::plot(&out);
    if args.committed() {
        match update_readme() {
            Ok(()) => println!("README.md's side-by-side table rewritten from bench/results/"),
            Err(e) => eprintln!("  ! README.md not updated: {e}"),
        }
    }
    println!("\n{}", std::fs::read_to_string(out.join("compare.md")).unwrap_or_default());
}
