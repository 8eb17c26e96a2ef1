//! The three tools compared: kwok (its binary and stages built by `make kwok`), kwok-pools
//! (the release operator: a NodePool for nodes, its simulator for pods) and the bare writer
//! (no process: the shared client writes every object in its final state and renews leases).

use super::harness::{Bench, Operator, answers, free_port, repo};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const KWOK_VERSION: &str = "v0.8.0";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Tool {
    Kwok,
    KwokPools,
    Bare,
}

impl Tool {
    pub fn slug(self) -> &'static str {
        match self {
            Tool::Kwok => "kwok",
            Tool::KwokPools => "kwok-pools",
            Tool::Bare => "bare",
        }
    }

    pub fn label(self) -> String {
        match self {
            Tool::Kwok => format!("kwok {KWOK_VERSION}"),
            Tool::KwokPools => "kwok-pools".into(),
            Tool::Bare => "bare writer".into(),
        }
    }

    /// Starts the tool against the bench cluster (nothing for the bare writer).
    pub async fn start(self, bench: &Bench, regime: &str, lease_seconds: i32) -> Running {
        match self {
            Tool::Kwok => Running::Kwok(start_kwok(bench, regime).await),
            Tool::KwokPools => {
                // kwok's fast pod-delete stage removes a deleted pod at once: the same here.
                let lease = lease_seconds.to_string();
                let flags = ["--pod-termination-delay", "0s", "--node-lease-duration-seconds", &lease];
                Running::KwokPools(Operator::start_command(bench, "run", "kwok-pools", &flags).await)
            }
            Tool::Bare => Running::Bare,
        }
    }
}

pub enum Running {
    Kwok(KwokProcess),
    KwokPools(Operator),
    Bare,
}

impl Running {
    pub fn pid(&self) -> Option<i32> {
        match self {
            Running::Kwok(k) => Some(k.child.id() as i32),
            Running::KwokPools(op) => Some(op.pid()),
            Running::Bare => None,
        }
    }
}

pub struct KwokProcess {
    child: Child,
    /// The command line it was started with (printed into the results).
    pub command: String,
}

impl Drop for KwokProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn kwok_installed() -> bool {
    ["bin/kwok", "bin/kwok-stages.yaml", "bin/kwokctl-dry-run-kubelet.txt", "bin/kwokctl-dry-run-kwokctl.txt"]
        .iter()
        .all(|f| repo().join(f).exists())
}

/// kwok-controller's flags as kwokctl (same version) starts it at the regime's heartbeat
/// (`bin/kwokctl-dry-run-<regime>.txt`, from `kwokctl create cluster --dry-run`, written by
/// `make kwok`), with this cluster's kubeconfig, the same stages kwokctl installs, and a
/// port of its own; kwokctl's serving certificate is dropped (the bench reads /healthz
/// over plain HTTP).
pub fn kwokctl_flags(regime: &str, kubeconfig: &str, port: u16) -> Result<Vec<String>, String> {
    let file = repo().join(format!("bin/kwokctl-dry-run-{regime}.txt"));
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e} (run `make kwok`)", file.display()))?;
    let line = text
        .lines()
        .find(|l| l.contains(" kwok-controller "))
        .ok_or_else(|| format!("{}: no kwok-controller command in kwokctl's dry run", file.display()))?;
    let args = line.split(" kwok-controller ").nth(1).unwrap_or_default();
    let mut out = Vec::new();
    for arg in args.split_whitespace().take_while(|a| !a.starts_with('>')) {
        let name = arg.split('=').next().unwrap_or(arg);
        match name {
            "--kubeconfig" => out.push(format!("--kubeconfig={kubeconfig}")),
            "--config" => out.push(format!("--config={}", repo().join("bin/kwok-stages.yaml").display())),
            "--tls-cert-file" | "--tls-private-key-file" => {}
            "--server-address" => out.push(format!("--server-address=127.0.0.1:{port}")),
            _ => out.push(arg.to_string()),
        }
    }
    Ok(out)
}

/// kwok as kwokctl runs it (see [`kwokctl_flags`]).
async fn start_kwok(bench: &Bench, regime: &str) -> KwokProcess {
    let port = free_port();
    let flags =
        kwokctl_flags(regime, &bench.kubeconfig().display().to_string(), port).unwrap_or_else(|e| panic!("{e}"));
    let log = std::fs::File::create(bench.home.join("kwok.log")).unwrap();
    let mut cmd = Command::new(repo().join("bin/kwok"));
    cmd.args(&flags).stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
    let command = std::iter::once("kwok".to_string())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().replace(&*repo().to_string_lossy(), ".")))
        .collect::<Vec<_>>()
        .join(" ");
    let child = cmd.spawn().expect("starting kwok (run `make kwok`)");
    if !answers(&format!("http://127.0.0.1:{port}/healthz"), Duration::from_secs(60)).await {
        eprintln!(
            "  kwok did not answer /healthz within 60 s; going on (see {})",
            bench.home.join("kwok.log").display()
        );
    }
    KwokProcess { child, command }
}
