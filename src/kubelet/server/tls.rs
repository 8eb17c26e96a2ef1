//! TLS of the simulated kubelets: a serving certificate per address, for the node names and
//! addresses it serves, issued by the kubelet serving CA and re-issued after two thirds of its
//! life; client certificates verified against the API server's client CA (optional: a caller
//! may present a bearer token instead). A connection is told which address it came in on and
//! who its verified certificate names, for the handlers.

use super::auth::{Caller, from_certificate};
use crate::certs::{Authority, LeafSpec};
use axum_server::accept::Accept;
use futures::future::BoxFuture;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// What a handler knows about its connection.
#[derive(Clone, Debug)]
pub struct Conn {
    pub local: IpAddr,
    /// Who connected (for per-source limits).
    pub peer: Option<IpAddr>,
    /// The caller a verified client certificate names.
    pub certificate: Option<Caller>,
}

/// Issues and keeps the serving certificates.
pub struct Serving {
    ca: Authority,
    lifetime: Duration,
    clients: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// The client CA's PEM, as trusted now.
    client_pem: RwLock<Option<String>>,
    /// Per address: the configuration and when to re-issue it.
    configs: Mutex<HashMap<IpAddr, (Arc<ServerConfig>, Instant)>>,
}

impl Serving {
    pub fn new(ca: Authority, lifetime: Duration) -> Self {
        Self { ca, lifetime, clients: RwLock::new(None), client_pem: RwLock::new(None), configs: Mutex::default() }
    }

    /// The serving CA's certificate (what a client that verifies kubelets trusts).
    pub fn ca_pem(&self) -> &str {
        &self.ca.pair.cert_pem
    }

    /// Accepts client certificates signed by the CAs in `pem` from now on.
    pub fn set_client_ca(&self, pem: &str) -> Result<(), String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let c = c.map_err(|e| format!("the client CA is not PEM: {e}"))?;
            roots.add(c).map_err(|e| format!("the client CA is not a usable CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the client CA holds no certificate".into());
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("the client CA is not usable: {e}"))?;
        *crate::sync::write(&self.clients) = Some(verifier);
        *crate::sync::write(&self.client_pem) = Some(pem.to_string());
        crate::sync::lock(&self.configs).clear();
        Ok(())
    }

    /// The client CA trusted now (PEM), if any.
    pub fn client_ca(&self) -> Option<String> {
        crate::sync::read(&self.client_pem).clone()
    }

    /// The configuration for connections to `local`, whose certificate names `names`.
    pub fn config(&self, local: IpAddr, names: &[String]) -> Result<Arc<ServerConfig>, String> {
        if let Some((config, renew)) = crate::sync::lock(&self.configs).get(&local)
            && Instant::now() < *renew
        {
            return Ok(config.clone());
        }
        let mut sans: Vec<String> = vec![local.to_string()];
        sans.extend(names.iter().filter(|n| !n.is_empty() && n.len() <= 253).cloned());
        let spec =
            LeafSpec { common_name: "kwok-pools-kubelet", organization: None, sans, server: true, client: false };
        let leaf = self
            .ca
            .issue_valid_for(&spec, self.lifetime)
            .map_err(|e| format!("issuing a kubelet serving certificate: {e}"))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).map_err(|e| e.to_string())?;
        let builder = ServerConfig::builder();
        let builder = match crate::sync::read(&self.clients).clone() {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut configs = crate::sync::lock(&self.configs);
        if configs.len() > 50_000 {
            configs.clear();
        }
        configs.insert(local, (config.clone(), Instant::now() + self.lifetime.mul_f64(2.0 / 3.0)));
        Ok(config)
    }

    pub fn forget(&self, local: IpAddr) {
        crate::sync::lock(&self.configs).remove(&local);
    }
}

/// Which names a connection's certificate carries, by the address it came in on.
pub type Names = Arc<dyn Fn(IpAddr) -> Vec<String> + Send + Sync>;

/// Accepts a TCP connection: TLS with the certificate of its local address, then the service
/// told about the connection.
#[derive(Clone)]
pub struct Acceptor {
    pub serving: Arc<Serving>,
    pub names: Names,
    pub handshake_timeout: Duration,
}

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl<S: Send + 'static> Accept<TcpStream, S> for Acceptor {
    type Stream = TlsStream<TcpStream>;
    type Service = WithConn<S>;
    type Future = BoxFuture<'static, std::io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let local = stream.local_addr().map(|a: SocketAddr| a.ip())?;
            let peer = stream.peer_addr().ok().map(|a| a.ip());
            let config = this.serving.config(local, &(this.names)(local)).map_err(io_error)?;
            let tls =
                tokio::time::timeout(this.handshake_timeout, tokio_rustls::TlsAcceptor::from(config).accept(stream))
                    .await
                    .map_err(|_| io_error("TLS handshake timed out"))??;
            let certificate =
                tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| from_certificate(c));
            Ok((tls, WithConn { inner: service, conn: Arc::new(Conn { local, peer, certificate }) }))
        })
    }
}

/// A service that puts its connection's [`Conn`] on every request.
#[derive(Clone)]
pub struct WithConn<S> {
    inner: S,
    conn: Arc<Conn>,
}

impl<S, B> tower_service::Service<axum::http::Request<B>> for WithConn<S>
where
    S: tower_service::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: axum::http::Request<B>) -> Self::Future {
        req.extensions_mut().insert(self.conn.clone());
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_its_certificate_re_issued_after_two_thirds_of_its_life() {
        crate::telemetry::init_crypto();
        let serving = Serving::new(Authority::new("ca").unwrap(), Duration::from_millis(1500));
        let ip: IpAddr = "127.128.0.7".parse().unwrap();
        let a = serving.config(ip, &["n-7".into()]).unwrap();
        assert!(Arc::ptr_eq(&a, &serving.config(ip, &["n-7".into()]).unwrap()), "kept while fresh");
        let other = serving.config("127.128.0.8".parse().unwrap(), &["n-8".into()]).unwrap();
        assert!(!Arc::ptr_eq(&a, &other), "one per address");
        std::thread::sleep(Duration::from_millis(1100));
        assert!(!Arc::ptr_eq(&a, &serving.config(ip, &["n-7".into()]).unwrap()), "re-issued before it expires");
        assert!(serving.set_client_ca("not pem").is_err());
        serving.set_client_ca(serving.ca_pem()).unwrap();
    }
}
