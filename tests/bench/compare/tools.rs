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
    pub async fn start(self, bench: &Bench, lease_seconds: i32) -> Running {
        match self {
            Tool::Kwok => Running::Kwok(start_kwok(bench, lease_seconds).await),
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
    repo().join("bin/kwok").exists() && repo().join("bin/kwok-stages.yaml").exists()
}

/// kwok as kwokctl runs it: nodes with the `kwok.x-k8s.io/node=fake` annotation, 40 s
/// leases, the fast node and pod stages with the lease heartbeat.
async fn start_kwok(bench: &Bench, lease_seconds: i32) -> KwokProcess {
    let port = free_port();
    let log = std::fs::File::create(bench.home.join("kwok.log")).unwrap();
    let mut cmd = Command::new(repo().join("bin/kwok"));
    cmd
        .arg(format!("--kubeconfig={}", bench.kubeconfig().display()))
        .arg(format!("--config={}", repo().join("bin/kwok-stages.yaml").display()))
        .args([
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=10.0.0.1",
        ])
        .arg(format!("--node-lease-duration-seconds={lease_seconds}"))
        .arg(format!("--server-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
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
