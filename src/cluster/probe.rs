//! Waiting for the components to become ready, with progress, and telling why they did not.

use super::component::Component;
use super::error::{ClusterError, log_tail};
use super::layout::{Layout, Ports};
use std::process::Child;
use std::time::{Duration, Instant};

/// An HTTP client that trusts the cluster CA and presents the admin certificate. The
/// controller manager and scheduler serve self-signed certificates on loopback, so their
/// health checks do not verify the server.
fn http_client(layout: &Layout, verify: bool) -> Result<reqwest::Client, ClusterError> {
    client_as(layout, "admin", verify)
}

/// An HTTP client presenting identity `id` (`pki/<id>.crt`): etcd takes only its own CA's.
fn client_as(layout: &Layout, id: &str, verify: bool) -> Result<reqwest::Client, ClusterError> {
    let read = |p: std::path::PathBuf| {
        std::fs::read(&p).map_err(|e| ClusterError::Other(format!("reading {}: {e}", p.display())))
    };
    let mut identity = read(layout.cert(id))?;
    identity.extend(read(layout.key(id))?);
    let mut b = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .use_rustls_tls()
        .identity(reqwest::Identity::from_pem(&identity).map_err(|e| ClusterError::Other(e.to_string()))?);
    if verify {
        let ca =
            reqwest::Certificate::from_pem(&read(layout.ca_cert())?).map_err(|e| ClusterError::Other(e.to_string()))?;
        b = b.add_root_certificate(ca);
    } else {
        b = b.danger_accept_invalid_certs(true);
    }
    b.build().map_err(|e| ClusterError::Other(e.to_string()))
}

/// Polls the component's health URL until it answers 200 "ok", the process exits, or the
/// deadline passes. Prints progress every few seconds.
pub async fn wait_healthy(
    name: &str,
    component: Component,
    child: &mut Child,
    layout: &Layout,
    ports: &Ports,
    deadline: Instant,
) -> Result<Duration, ClusterError> {
    let verify = component == Component::KubeApiserver;
    let client = match component {
        Component::Etcd => client_as(layout, "apiserver-etcd-client", false)?,
        _ => http_client(layout, verify)?,
    };
    let url = component.health_url(ports);
    let start = Instant::now();
    let mut last_report = Instant::now();
    let mut detail;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ClusterError::ComponentExited {
                name: name.into(),
                component: component.name().into(),
                status: status.to_string(),
                log: layout.log(component),
                tail: log_tail(&layout.log(component), 20),
            });
        }
        match client.get(&url).send().await {
            Ok(resp) if resp.status().is_success() => return Ok(start.elapsed()),
            Ok(resp) => {
                let code = resp.status();
                let body = resp.text().await.unwrap_or_default();
                let failing: Vec<&str> = body.lines().filter(|l| l.contains("failed")).take(3).collect();
                detail = format!(
                    "{url} answered {code}{}",
                    if failing.is_empty() { String::new() } else { format!(": {}", failing.join("; ")) }
                );
            }
            Err(e) => detail = format!("{url}: {}", root_cause(&e)),
        }
        if Instant::now() >= deadline {
            return Err(timeout(name, component, layout, start.elapsed(), detail));
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            eprintln!("  … still waiting for {component} ({}s): {detail}", start.elapsed().as_secs());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn timeout(name: &str, component: Component, layout: &Layout, waited: Duration, detail: String) -> ClusterError {
    ClusterError::Timeout {
        name: name.into(),
        component: component.name().into(),
        waited,
        detail,
        log: layout.log(component),
        tail: log_tail(&layout.log(component), 20),
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
