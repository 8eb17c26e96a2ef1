//! Metrics, health, tracing setup and the HTTP server that serves them.

pub mod metrics;
pub mod server;

/// Installs the process-wide rustls crypto provider (ring). Call once at start.
pub fn init_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Logs to stderr, as text or JSON, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
