//! Errors of the local control plane. Each says what went wrong and what to do.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0}")]
    InvalidName(String),

    #[error(
        "{binary} not found in {}: run `make controlplane` to build the control plane \
         (or set KWOK_POOLS_BIN_DIR / --bin-dir to a directory that holds etcd, kube-apiserver, \
         kube-controller-manager, kube-scheduler and kubectl)",
        bin_dir.display()
    )]
    MissingBinary { binary: String, bin_dir: PathBuf },

    #[error(
        "cluster {name:?} already exists ({}; state in {}): delete it with \
         `kwok-pools cluster delete --name {name}` or choose another --name",
        if *running { "running" } else { "not running" },
        dir.display()
    )]
    NameInUse { name: String, dir: PathBuf, running: bool },

    #[error("no cluster named {name:?} (looked in {}); `kwok-pools cluster list` shows the clusters", dir.display())]
    NotFound { name: String, dir: PathBuf },

    #[error(
        "{component} exited at start ({status}); its log is {}:\n{tail}\n\
         fix the cause above, then `kwok-pools cluster delete --name {name}` and create it again",
        log.display()
    )]
    ComponentExited { name: String, component: String, status: String, log: PathBuf, tail: String },

    #[error(
        "{component} was not ready after {waited:?} ({detail}); its log is {}:\n{tail}\n\
         raise --timeout if the machine is busy, or `kwok-pools cluster delete --name {name}` and retry",
        log.display()
    )]
    Timeout { name: String, component: String, waited: Duration, detail: String, log: PathBuf, tail: String },

    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },

    #[error("certificate generation failed: {0}")]
    Certs(#[from] rcgen::Error),

    #[error("talking to the new cluster's API server failed: {0}")]
    Kube(#[from] kube::Error),

    #[error("{0}")]
    Other(String),
}

/// Adds a "what were we doing" context to io errors.
pub trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ClusterError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ClusterError> {
        self.map_err(|source| ClusterError::Io { context: context(), source })
    }
}

/// The last `lines` lines of a log file, or a note that it cannot be read.
pub fn log_tail(path: &std::path::Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            all[start..].iter().map(|l| format!("  | {l}")).collect::<Vec<_>>().join("\n")
        }
        Err(e) => format!("  (log not readable: {e})"),
    }
}
