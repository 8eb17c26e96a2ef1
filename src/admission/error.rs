//! Why the webhook cannot serve or be registered: every message says what to do. The process
//! stops with it at start; the leader retries a registration with it as its Ready problem.

/// The webhook's failures, by what failed.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A flag's value cannot be used (the message names the flag).
    #[error("{0}")]
    Flag(String),
    /// The serving certificate, its key or a CA cannot be made, read or used.
    #[error("{0}")]
    Certificate(String),
    /// A certificate could not be made.
    #[error("cannot make the webhook's certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The webhook configurations are missing or not as this operator serves them.
    #[error("{0}")]
    Registration(String),
    /// The API server refused or failed a call.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The port cannot be served.
    #[error("cannot serve the webhook: {0}; choose another --webhook-addr")]
    Io(#[from] std::io::Error),
}

impl WebhookError {
    /// What failed, as a short fixed word (a log field, a metric label).
    pub fn category(&self) -> &'static str {
        match self {
            Self::Flag(_) => "flag",
            Self::Certificate(_) | Self::Generate(_) => "certificate",
            Self::Registration(_) => "registration",
            Self::Api(_) => "api",
            Self::Io(_) => "port",
        }
    }
}
