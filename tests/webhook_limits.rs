//! The webhook server under a hostile client, in process (no cluster): idle connects cannot
//! lock a real client out (handshakes take no slot) while established connections beyond the
//! limit are closed, a client that never finishes its handshake or its headers is cut off, a
//! body over the limit is refused before it is read, bodies in flight are bounded in bytes,
//! only clients with a certificate from the given CA are served when one is given, a
//! certificate that does not cover the host the API server would call is refused at start, and
//! a changed certificate is served without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools::admission::review::Peers;
use kwok_pools::admission::serve::{self, Limits};
use kwok_pools::admission::tls::{self, Source};
use kwok_pools::telemetry::metrics::Metrics;
use rustls::pki_types::pem::PemObject;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits() -> Limits {
    Limits {
        max_connections: 4,
        handshake_timeout: Duration::from_millis(800),
        header_timeout: Duration::from_millis(800),
        review_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(1),
        body_limit: 64 * 1024,
        max_bytes_in_flight: 1024 * 1024,
    }
}

/// Serves the webhook router on a free port with `limits` and a certificate from `source`.
async fn start(source: Source, cert: tls::ServingCert, limits: Limits) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kwok_pools::admission::router_with(Peers::default(), None, Arc::new(Metrics::default()), &limits);
    tokio::spawn(async move { serve::serve(listener, source, cert, app, &limits).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    addr
}

async fn generated() -> (SocketAddr, tls::ServingCert) {
    let (source, cert) = Source::generated(&["127.0.0.1".to_string()], tls::GENERATED_LIFETIME).unwrap();
    (start(source, cert.clone(), limits()).await, cert)
}

/// Whether the server closed `stream` within `within` (EOF or reset on read).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

fn tls_connector(ca_pem: &str, identity: Option<&tls::ServingCert>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(
                vec![rustls::pki_types::CertificateDer::from_pem_slice(id.cert_pem.as_bytes()).unwrap()],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A POST of `{}` over `tls`, and the status line of the answer.
async fn post_empty<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(tls: &mut S) -> String {
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}").await.unwrap();
    let mut buf = [0u8; 512];
    let n = tls.read(&mut buf).await.unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn idle_connects_do_not_lock_a_real_client_out() {
    let (addr, cert) = generated().await;
    // Far more silent connects than connection slots: they take none while they handshake.
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    let started = Instant::now();
    let resp = client(&cert.ca_pem).post(&url).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 400, "a real client is served while 40 idle connects are open");
    assert!(started.elapsed() < Duration::from_millis(500), "at once: {:?}", started.elapsed());
    // The silent ones are cut off by the handshake timeout.
    for s in &mut idle {
        assert!(
            closed_within(s, Duration::from_secs(3)).await,
            "a silent connection is closed after the handshake timeout"
        );
    }
}

#[tokio::test]
async fn established_connections_beyond_the_limit_are_closed_and_the_limit_frees_up() {
    let (addr, cert) = generated().await;
    let connector = tls_connector(&cert.ca_pem, None);
    let name = || rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        let tcp = TcpStream::connect(addr).await.unwrap();
        held.push(connector.connect(name(), tcp).await.expect("the handshake completes"));
    }
    // The fifth completes its handshake, then is closed: no slot is left.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let fifth = connector.connect(name(), tcp).await;
    let refused = match fifth {
        Err(_) => true,
        Ok(mut tls) => post_empty(&mut tls).await.is_empty(),
    };
    assert!(refused, "a fifth established connection is closed");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    let resp = client(&cert.ca_pem).post(&url).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 400, "served again once the slots are free");
}

#[tokio::test]
async fn only_clients_with_a_certificate_of_the_given_ca_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let clients_ca = kwok_pools::certs::Authority::new("test-webhook-client-ca").unwrap();
    std::fs::write(dir.path().join("ca.crt"), &clients_ca.pair.cert_pem).unwrap();
    let spec = kwok_pools::certs::LeafSpec {
        common_name: "kube-apiserver-webhook-client",
        organization: None,
        sans: vec![],
        server: false,
        client: true,
    };
    let pair = clients_ca.issue(&spec).unwrap();
    let api_server = tls::ServingCert { cert_pem: pair.cert_pem, key_pem: pair.key_pem, ca_pem: String::new() };
    let other_ca = kwok_pools::certs::Authority::new("someone-else").unwrap();
    let other = other_ca.issue(&spec).unwrap();
    let stranger = tls::ServingCert { cert_pem: other.cert_pem, key_pem: other.key_pem, ca_pem: String::new() };

    let (source, cert) = Source::generated(&["127.0.0.1".to_string()], tls::GENERATED_LIFETIME).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kwok_pools::admission::router_with(Peers::default(), None, Arc::new(Metrics::default()), &limits());
    let clients = serve::ClientAuth { ca_file: Some(dir.path().join("ca.crt")) };
    let served = cert.clone();
    tokio::spawn(async move { serve::serve_with(listener, source, served, app, &limits(), clients).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let name = || rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    for (who, identity) in [("no certificate", None), ("a certificate of another CA", Some(&stranger))] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let refused = match tls_connector(&cert.ca_pem, identity).connect(name(), tcp).await {
            Err(_) => true,
            Ok(mut tls) => !post_empty(&mut tls).await.starts_with("HTTP/1.1"),
        };
        assert!(refused, "a client with {who} is not served (a forged review never reaches the judge)");
    }
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = tls_connector(&cert.ca_pem, Some(&api_server))
        .connect(name(), tcp)
        .await
        .expect("the API server's identity is accepted");
    assert!(post_empty(&mut tls).await.starts_with("HTTP/1.1 400"), "the API server is served");
}

#[tokio::test]
async fn bodies_in_flight_are_bounded_in_bytes() {
    let (source, cert) = Source::generated(&["127.0.0.1".to_string()], tls::GENERATED_LIFETIME).unwrap();
    let small = Limits { max_bytes_in_flight: 100 * 1024, body_limit: 64 * 1024, ..limits() };
    let addr = start(source, cert.clone(), small).await;
    let name = || rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connector = tls_connector(&cert.ca_pem, None);
    // Two clients announce 60 KiB each and send nothing more: the second has no room.
    let mut first = connector.connect(name(), TcpStream::connect(addr).await.unwrap()).await.unwrap();
    first.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 61440\r\n\r\n{").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = connector.connect(name(), TcpStream::connect(addr).await.unwrap()).await.unwrap();
    second.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 61440\r\n\r\n{").await.unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(2), second.read(&mut buf)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(answer.starts_with("http/1.1 429") && answer.contains("retry-after: 1"), "{answer}");
    // The first never sends its body: it is answered 408 within the body timeout, and its
    // room is free again.
    let n = tokio::time::timeout(Duration::from_secs(3), first.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"), "{}", String::from_utf8_lossy(&buf[..n]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    let resp = client(&cert.ca_pem).post(&url).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn a_client_that_never_sends_its_headers_is_cut_off() {
    let (addr, cert) = generated().await;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::CertificateDer::from_pem_slice(cert.ca_pem.as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("the handshake completes");
    // Half a request line, then nothing.
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "closed within 5 s, not held open: {read:?}");
    assert!(started.elapsed() >= Duration::from_millis(500), "not before the timeout: {:?}", started.elapsed());

    // A kept-alive connection that goes quiet after a whole request is closed too.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}").await.unwrap();
    let n = tls.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 400"), "answered");
    let idle = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(idle.is_ok(), "an idle kept-alive connection is closed after the header timeout");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413() {
    let (addr, cert) = generated().await;
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    let resp = client(&cert.ca_pem).post(&url).body(vec![b' '; 65 * 1024]).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let resp = client(&cert.ca_pem).post(&url).body("not json").send().await.unwrap();
    assert_eq!(resp.status(), 400, "a small bad body is a 400 that says why");
    assert!(resp.text().await.unwrap().contains("not an AdmissionReview"));
}

#[tokio::test]
async fn a_changed_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let write = |c: &tls::ServingCert| {
        std::fs::write(dir.path().join("tls.crt"), &c.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &c.key_pem).unwrap();
    };
    let first = tls::generate(&["127.0.0.1".to_string()]).unwrap();
    write(&first);
    let addr = start(Source::Dir(dir.path().to_path_buf()), tls::from_dir(dir.path()).unwrap(), limits()).await;
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    assert_eq!(client(&first.ca_pem).post(&url).body("{}").send().await.unwrap().status(), 400);
    let second = tls::generate(&["127.0.0.1".to_string()]).unwrap();
    write(&second);
    // Looked at every 10 s.
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let fresh = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(second.ca_pem.as_bytes()).unwrap())
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        if fresh.post(&url).body("{}").send().await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate was not served within 25 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let old = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(first.ca_pem.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    assert!(old.post(&url).body("{}").send().await.is_err(), "the old certificate is no longer served");
}

#[tokio::test]
async fn a_webhook_url_the_certificate_does_not_cover_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cert = tls::generate(&["hook.example.test".to_string()]).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).unwrap();
    let config = |url: &str| kwok_pools::admission::WebhookConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        configuration_name: "limits-test".into(),
        endpoint: Some(kwok_pools::admission::register::Endpoint::Url(url.into())),
        hosts: vec![],
        cert_dir: Some(dir.path().to_path_buf()),
        cert_secret: None,
        object_selector: None,
        limits: Limits::default(),
        clients: serve::ClientAuth::default(),
        registration: kwok_pools::admission::RegistrationMode::Apply,
    };
    let refused = kwok_pools::admission::certificate_for(
        &config("https://10.9.8.7:9443/validate"),
        "127.0.0.1:1".parse().unwrap(),
    );
    let message = refused.err().expect("refused").to_string();
    assert!(message.contains("10.9.8.7") && message.contains("hook.example.test"), "{message}");
    assert!(
        kwok_pools::admission::certificate_for(
            &config("https://hook.example.test:9443/validate"),
            "127.0.0.1:1".parse().unwrap()
        )
        .is_ok()
    );
    let bad = kwok_pools::admission::certificate_for(
        &config("http://hook.example.test/validate"),
        "127.0.0.1:1".parse().unwrap(),
    );
    assert!(bad.err().unwrap().to_string().contains("https://"));
    // A generated certificate simply includes the URL's host.
    let mut generated = config("https://10.9.8.7:9443/validate");
    generated.cert_dir = None;
    let (_, cert) = kwok_pools::admission::certificate_for(&generated, "127.0.0.1:1".parse().unwrap()).unwrap();
    assert!(tls::covers(&cert.cert_pem, "10.9.8.7"));
}
