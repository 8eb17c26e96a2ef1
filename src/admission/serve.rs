//! Serving the webhook over TLS with limits a hostile or broken client cannot push past:
//! handshakes are timed and take no connection slot (idle connects cannot lock the API server
//! out), a bounded number of established connections, a header-read timeout that is also the
//! idle timeout between requests on a kept-alive connection, a body limit, a bound on the bytes
//! of all requests in flight, a time limit per review; optionally, only clients with a
//! certificate from a given CA (the API server's admission client identity); and a serving
//! certificate that is renewed (or read again) while serving.

use super::error::WebhookError;
use super::tls::{ServingCert, Source};
use crate::netlimit::ConnectionLimit;
use axum::Router;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What one client may take of the webhook.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Established connections open at once; more are closed after their handshake (the API
    /// server retries). Handshakes in progress take no slot.
    pub max_connections: usize,
    /// Time for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Time to send a request's headers, and the most a kept-alive connection may sit idle.
    pub header_timeout: Duration,
    /// Time to judge one review (the API server gives up after the configuration's 5 s).
    pub review_timeout: Duration,
    /// Time to send a request's whole body once its headers are in: a client that declares a
    /// body and never sends it holds its room in the byte budget no longer.
    pub body_timeout: Duration,
    /// Largest request body: an AdmissionReview holds the object and the old object, each up
    /// to the API server's 3 MiB request limit, plus the review around them.
    pub body_limit: usize,
    /// Bytes of all request bodies held at once; a request beyond it is answered 429 before
    /// its body is read (the API server retries).
    pub max_bytes_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            review_timeout: Duration::from_secs(4),
            body_timeout: Duration::from_secs(5),
            body_limit: 7 * 1024 * 1024,
            max_bytes_in_flight: 64 * 1024 * 1024,
        }
    }
}

/// Who may call the webhook: everyone who can reach it, or only clients with a certificate
/// signed by this CA (the API server's admission client identity).
#[derive(Clone, Debug, Default)]
pub struct ClientAuth {
    /// A PEM file with the CA(s) of the allowed clients.
    pub ca_file: Option<PathBuf>,
}

/// How often the certificate is looked at (files changed, renewal due).
const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The TLS configuration: `cert`, HTTP/2 and HTTP/1.1, and client certificates from the CA
/// in `clients` when one is given.
pub fn server_config(cert: &ServingCert, clients: &ClientAuth) -> Result<Arc<rustls::ServerConfig>, WebhookError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| WebhookError::Certificate(format!("the webhook certificate (tls.crt) is not PEM: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())
        .map_err(|e| WebhookError::Certificate(format!("the webhook key (tls.key) is not a PEM private key: {e}")))?;
    let builder = rustls::ServerConfig::builder();
    let builder = match &clients.ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                WebhookError::Certificate(format!("cannot read the webhook's client CA {}: {e}; pass the file the API server's admission client certificate is signed by", path.display()))
            })?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| {
                    WebhookError::Certificate(format!("{} is not a PEM certificate: {e}", path.display()))
                })?;
                roots.add(c).map_err(|e| {
                    WebhookError::Certificate(format!("{}: not a usable CA certificate: {e}", path.display()))
                })?;
            }
            if roots.is_empty() {
                return Err(WebhookError::Certificate(format!(
                    "{} holds no certificate: pass the CA of the API server's admission client",
                    path.display()
                )));
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build().map_err(|e| {
                WebhookError::Certificate(format!("the webhook's client CA {} is not usable: {e}", path.display()))
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| WebhookError::Certificate(format!("the webhook certificate and key do not go together: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` on `listener` with `limits`, renewing the certificate from `source`.
pub async fn serve(
    listener: std::net::TcpListener,
    source: Source,
    cert: ServingCert,
    app: Router,
    limits: &Limits,
) -> Result<(), WebhookError> {
    serve_with(listener, source, cert, app, limits, ClientAuth::default()).await
}

/// [`serve`], accepting only the clients `clients` allows.
pub async fn serve_with(
    listener: std::net::TcpListener,
    source: Source,
    cert: ServingCert,
    app: Router,
    limits: &Limits,
    clients: ClientAuth,
) -> Result<(), WebhookError> {
    let rustls = RustlsConfig::from_config(server_config(&cert, &clients)?);
    let handshake = RustlsAcceptor::new(rustls.clone()).handshake_timeout(limits.handshake_timeout);
    let acceptor = ConnectionLimit::new("webhook (the API server retries)", limits.max_connections, handshake);
    let mut server = axum_server::from_tcp(listener)?.acceptor(acceptor);
    server.http_builder().http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_timeout);
    server.http_builder().http2().timer(hyper_util::rt::TokioTimer::new()).keep_alive_interval(limits.header_timeout);
    let server = server.first_request_timeout(limits.header_timeout).accept_error_handler(|remote, e| {
        tracing::debug!(?remote, error = %e, "webhook connection refused");
    });
    tokio::spawn(keep_fresh(rustls, source, cert, clients));
    server.serve(app.into_make_service()).await?;
    Ok(())
}

/// Renews the served certificate when due (generated) or changed (files), until the process
/// ends. A failed read keeps the certificate being served and says what to fix.
async fn keep_fresh(rustls: RustlsConfig, source: Source, mut current: ServingCert, clients: ClientAuth) {
    let mut warned_expiry = false;
    loop {
        tokio::time::sleep(REFRESH_EVERY).await;
        match source.refresh(&current, SystemTime::now()).await {
            Ok(None) => {}
            Ok(Some(fresh)) => match server_config(&fresh, &clients) {
                Ok(config) => {
                    rustls.reload_from_config(config);
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
            },
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

/// The bytes of request bodies held at once, across every connection.
#[derive(Clone)]
pub struct ByteBudget {
    bytes: Arc<Semaphore>,
    /// What a request without a Content-Length reserves: the body limit.
    unknown: usize,
}

impl ByteBudget {
    pub fn new(total: usize, body_limit: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self { bytes: Arc::new(Semaphore::new(total)), unknown: body_limit.min(total) }
    }

    /// Room for a body of `length` bytes (the declared length, else the body limit), held
    /// while the request is judged; `None` when the budget is spent now.
    pub fn reserve(&self, length: Option<usize>) -> Option<OwnedSemaphorePermit> {
        let want = length.unwrap_or(self.unknown).clamp(1, self.unknown.max(1));
        self.bytes.clone().try_acquire_many_owned(u32::try_from(want).unwrap_or(u32::MAX)).ok()
    }
}
