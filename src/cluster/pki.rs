//! The cluster's PKI on disk: a CA, one admin certificate (O=system:masters) used both as the
//! client certificate of every component and as the API server's serving certificate, and a
//! service-account signing key. Then the kubeconfig that uses them.

use super::component::SERVICE_IP;
use super::error::{ClusterError, IoContext};
use super::layout::Layout;
use crate::certs::{Authority, LeafSpec, signing_key};
use base64::Engine;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Names the API server answers to (in-cluster and on loopback).
pub fn apiserver_sans() -> Vec<String> {
    [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster",
        "kubernetes.default.svc.cluster.local",
        SERVICE_IP,
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

fn write(path: &Path, content: &str, private: bool) -> Result<(), ClusterError> {
    std::fs::write(path, content).ctx(|| format!("writing {}", path.display()))?;
    if private {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .ctx(|| format!("restricting {}", path.display()))?;
    }
    Ok(())
}

/// Writes the CA, the admin certificate and the service-account key pair.
pub fn write_pki(layout: &Layout) -> Result<(), ClusterError> {
    std::fs::create_dir_all(layout.pki()).ctx(|| format!("creating {}", layout.pki().display()))?;
    let ca = Authority::new("kwok-pools-ca")?;
    let admin = ca.issue(&LeafSpec {
        common_name: "kubernetes-admin",
        organization: Some("system:masters"),
        sans: apiserver_sans(),
        server: true,
        client: true,
    })?;
    let (sa_private, sa_public) = signing_key()?;
    write(&layout.ca_cert(), &ca.pair.cert_pem, false)?;
    write(&layout.ca_key(), &ca.pair.key_pem, true)?;
    write(&layout.admin_cert(), &admin.cert_pem, false)?;
    write(&layout.admin_key(), &admin.key_pem, true)?;
    write(&layout.sa_private(), &sa_private, true)?;
    write(&layout.sa_public(), &sa_public, false)?;
    Ok(())
}

/// The kubeconfig text for cluster `name` served on `port`, with the PKI embedded so the file
/// can be copied elsewhere.
pub fn kubeconfig_text(name: &str, port: u16, ca: &str, cert: &str, key: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ctx = format!("kwok-pools-{name}");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {ctx}\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {}\n\
         users:\n- name: {ctx}-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
         contexts:\n- name: {ctx}\n  context:\n    cluster: {ctx}\n    user: {ctx}-admin\n\
         current-context: {ctx}\npreferences: {{}}\n",
        b64(ca),
        b64(cert),
        b64(key)
    )
}

/// Writes the kubeconfig from the PKI already on disk.
pub fn write_kubeconfig(layout: &Layout, name: &str, port: u16) -> Result<(), ClusterError> {
    let read = |p: &Path| std::fs::read_to_string(p).ctx(|| format!("reading {}", p.display()));
    let text = kubeconfig_text(
        name,
        port,
        &read(&layout.ca_cert())?,
        &read(&layout.admin_cert())?,
        &read(&layout.admin_key())?,
    );
    write(&layout.kubeconfig(), &text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_and_points_at_loopback() {
        let text = kubeconfig_text("demo", 6443, "CA", "CERT", "KEY");
        let kc: kube::config::Kubeconfig = serde_yaml::from_str(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("kwok-pools-demo"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
    }

    #[test]
    fn writes_pki_files() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().to_path_buf());
        write_pki(&layout).unwrap();
        write_kubeconfig(&layout, "t", 1234).unwrap();
        for p in [
            layout.ca_cert(),
            layout.admin_cert(),
            layout.admin_key(),
            layout.sa_private(),
            layout.sa_public(),
            layout.kubeconfig(),
        ] {
            assert!(p.exists(), "{}", p.display());
        }
        let mode = std::fs::metadata(layout.admin_key()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
