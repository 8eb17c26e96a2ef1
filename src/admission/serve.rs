//! Serving the webhook over TLS with limits a hostile or broken client cannot push past: a
//! bounded number of connections, a TLS handshake timeout, a header-read timeout that is also
//! the idle timeout between requests on a kept-alive connection, a body limit and a time limit
//! per review; and a certificate that is renewed (or read again) while serving.

use super::tls::{ServingCert, Source};
use axum::Router;
use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What one client may take of the webhook.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once; more are closed at accept (the API server retries).
    pub max_connections: usize,
    /// Time for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Time to send a request's headers, and the most a kept-alive connection may sit idle.
    pub header_timeout: Duration,
    /// Time to judge one review (the API server gives up after the configuration's 5 s).
    pub review_timeout: Duration,
    /// Largest request body: an AdmissionReview holds the object and the old object, each up
    /// to the API server's 3 MiB request limit, plus the review around them.
    pub body_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            review_timeout: Duration::from_secs(10),
            body_limit: 7 * 1024 * 1024,
        }
    }
}

/// How often the certificate is looked at (files changed, renewal due).
const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` with `limits`, renewing the certificate from `source`.
pub async fn serve(
    listener: std::net::TcpListener,
    source: Source,
    cert: ServingCert,
    app: Router,
    limits: &Limits,
) -> anyhow::Result<()> {
    let rustls = RustlsConfig::from_pem(cert.cert_pem.clone().into_bytes(), cert.key_pem.clone().into_bytes())
        .await
        .map_err(|e| anyhow::anyhow!("the webhook certificate is not usable: {e}"))?;
    let acceptor = RustlsAcceptor::new(rustls.clone())
        .handshake_timeout(limits.handshake_timeout)
        .acceptor(ConnectionLimit::new(limits.max_connections));
    let mut server = axum_server::from_tcp(listener)?.acceptor(acceptor);
    server.http_builder().http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_timeout);
    server.http_builder().http2().timer(hyper_util::rt::TokioTimer::new()).keep_alive_interval(limits.header_timeout);
    let server = server.first_request_timeout(limits.header_timeout).accept_error_handler(|remote, e| {
        tracing::debug!(?remote, error = %e, "webhook connection refused");
    });
    tokio::spawn(keep_fresh(rustls, source, cert));
    server.serve(app.into_make_service()).await?;
    Ok(())
}

/// Renews the served certificate when due (generated) or changed (files), until the process
/// ends. A failed read keeps the certificate being served and says what to fix.
async fn keep_fresh(rustls: RustlsConfig, source: Source, mut current: ServingCert) {
    let mut warned_expiry = false;
    loop {
        tokio::time::sleep(REFRESH_EVERY).await;
        match source.refresh(&current, SystemTime::now()) {
            Ok(None) => {}
            Ok(Some(fresh)) => {
                match rustls
                    .reload_from_pem(fresh.cert_pem.clone().into_bytes(), fresh.key_pem.clone().into_bytes())
                    .await
                {
                    Ok(()) => {
                        tracing::info!(expires = ?super::tls::not_after(&fresh.cert_pem), "webhook certificate renewed");
                        if fresh.ca_pem != current.ca_pem {
                            tracing::warn!(
                                "the webhook certificate's CA changed: the webhook configuration's caBundle must follow (restart the operator, or let your certificate tooling inject it)"
                            );
                        }
                        current = fresh;
                        warned_expiry = false;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the new webhook certificate is not usable; serving the old one: fix tls.crt/tls.key");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the webhook certificate again; serving the old one"),
        }
        let soon = SystemTime::now() + Duration::from_secs(7 * 24 * 3600);
        if !warned_expiry && super::tls::not_after(&current.cert_pem).is_some_and(|end| end < soon) {
            tracing::warn!(
                "the webhook certificate expires within 7 days and nothing renewed it: renew the Secret it is mounted from"
            );
            warned_expiry = true;
        }
    }
}

/// An acceptor that lets at most `max` connections be open at once; a connection beyond that
/// is closed at accept.
#[derive(Clone)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
}

impl ConnectionLimit {
    pub fn new(max: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(max.max(1))) }
    }
}

impl<I, S> Accept<I, S> for ConnectionLimit {
    type Stream = I;
    type Service = Held<S>;
    type Future = Ready<std::io::Result<(I, Held<S>)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let result = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok((stream, Held { inner: service, _permit: Arc::new(permit) })),
            Err(_) => {
                tracing::warn!("webhook connection limit reached; a connection was closed (the API server retries)");
                Err(std::io::Error::other("too many webhook connections"))
            }
        };
        std::future::ready(result)
    }
}

/// A connection's service, holding its connection permit for as long as the connection lives.
#[derive(Clone)]
pub struct Held<S> {
    inner: S,
    _permit: Arc<OwnedSemaphorePermit>,
}

impl<S: tower_service::Service<R>, R> tower_service::Service<R> for Held<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.inner.call(req)
    }
}
