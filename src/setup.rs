//! Why a kind could not set up what its pools and simulator need (its `Env`) from its flags:
//! each error names the flag and says what to change. The process stops with it at start.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A flag's value cannot be used.
    #[error("{flag}: {problem}")]
    Flag { flag: &'static str, problem: String },
    /// A file a flag names cannot be read.
    #[error("{flag}: cannot read {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A port cannot be served.
    #[error("cannot serve {what} on port {port}: {source}; {advice}")]
    Listen {
        what: &'static str,
        port: u16,
        #[source]
        source: std::io::Error,
        advice: &'static str,
    },
    /// A certificate authority cannot be made or read.
    #[error("{what}: {problem}")]
    Certificate { what: &'static str, problem: String },
}

impl SetupError {
    /// What went wrong, as a short fixed word (a log field, a metric label).
    pub fn category(&self) -> &'static str {
        match self {
            Self::Flag { .. } => "flag",
            Self::Read { .. } => "file",
            Self::Listen { .. } => "port",
            Self::Certificate { .. } => "certificate",
        }
    }
}
