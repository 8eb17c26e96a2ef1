//! The HTTP server for metrics and health: `/metrics`, `/healthz`, `/readyz`.

use super::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What keeps the process from being ready once started (failing watches), by name.
pub type Problems = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// Objects in each watch cache, by resource (read at each scrape).
pub type Cached = Arc<dyn Fn() -> Vec<(String, usize)> + Send + Sync>;

#[derive(Clone)]
pub struct Health {
    pub metrics: Arc<Metrics>,
    /// Set once the stores synced and the parts started.
    pub ready: Arc<AtomicBool>,
    pub problems: Problems,
    /// What makes the process broken for good (`/healthz` fails: restart it).
    pub dead: Problems,
    pub cached: Cached,
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    for (resource, n) in (h.cached)() {
        h.metrics.cached_objects.get_or_create(&super::metrics::ResourceLabels { resource }).set(n as i64);
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], h.metrics.encode())
}

async fn ready(State(h): State<Health>) -> impl IntoResponse {
    if !h.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting: stores not synced yet\n".to_string());
    }
    let problems = (h.problems)();
    if problems.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", problems.join("\n")))
    }
}

async fn healthy(State(h): State<Health>) -> impl IntoResponse {
    let dead = (h.dead)();
    if dead.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("{}\n", dead.join("\n")))
    }
}

pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthy))
        .route("/readyz", get(ready))
        .with_state(health)
}

/// The metrics address cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for metrics: {source}; choose another --metrics-addr")]
pub struct ServeError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr` and serves in the background. Fails at once if the address is taken.
pub async fn serve(addr: SocketAddr, health: Health) -> Result<SocketAddr, ServeError> {
    let listen = |source| ServeError { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
    let bound = listener.local_addr().map_err(listen)?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health)).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}
