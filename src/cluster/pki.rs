//! The cluster's PKI on disk, one identity per part: a cluster CA; the API server's serving
//! certificate; client certificates for the admin (O=system:masters, the user's kubeconfig),
//! the controller manager (system:kube-controller-manager) and the scheduler
//! (system:kube-scheduler), each with a kubeconfig of its own; a separate etcd CA with etcd's
//! serving certificate and the API server's etcd client certificate (etcd takes only those);
//! and the service-account signing key; for the kubelet API and API aggregation, the API
//! server's kubelet client certificate (its identity towards every kubelet), a front-proxy
//! CA with the aggregator's client certificate, and metrics-server's serving certificate.
//! Private keys are created with mode 0600.

use super::component::SERVICE_IP;
use super::error::{ClusterError, IoContext};
use super::layout::Layout;
use crate::certs::{Authority, LeafSpec, signing_key};
use base64::Engine;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Names the API server answers to (in-cluster and on loopback).
fn apiserver_sans() -> Vec<String> {
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

/// Writes `content` to `path`; a private file is created with mode 0600 (never readable by
/// others, not even for a moment).
fn write(path: &Path, content: &str, private: bool) -> Result<(), ClusterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mode = if private { 0o600 } else { 0o644 };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .ctx(|| format!("creating {}", path.display()))?;
    // A file that existed keeps its old mode through open: set it.
    file.set_permissions(std::fs::Permissions::from_mode(mode)).ctx(|| format!("restricting {}", path.display()))?;
    file.write_all(content.as_bytes()).ctx(|| format!("writing {}", path.display()))
}

/// The identities of the cluster: (file name, common name, organization, server, client).
const IDENTITIES: [(&str, &str, Option<&str>, bool, bool); 4] = [
    ("apiserver", "kube-apiserver", None, true, false),
    ("admin", "kubernetes-admin", Some("system:masters"), false, true),
    ("kube-controller-manager", "system:kube-controller-manager", None, false, true),
    ("kube-scheduler", "system:kube-scheduler", None, false, true),
];

/// Writes the CAs, every identity's certificate and key, and the service-account key pair.
pub fn write_pki(layout: &Layout) -> Result<(), ClusterError> {
    std::fs::create_dir_all(layout.pki()).ctx(|| format!("creating {}", layout.pki().display()))?;
    let ca = Authority::new("kwok-pools-ca")?;
    write(&layout.ca_cert(), &ca.pair.cert_pem, false)?;
    write(&layout.ca_key(), &ca.pair.key_pem, true)?;
    for (file, cn, org, server, client) in IDENTITIES {
        let sans = if server { apiserver_sans() } else { vec![] };
        let pair = ca.issue(&LeafSpec { common_name: cn, organization: org, sans, server, client })?;
        write(&layout.cert(file), &pair.cert_pem, false)?;
        write(&layout.key(file), &pair.key_pem, true)?;
    }
    let etcd_ca = Authority::new("kwok-pools-etcd-ca")?;
    write(&layout.cert("etcd-ca"), &etcd_ca.pair.cert_pem, false)?;
    write(&layout.key("etcd-ca"), &etcd_ca.pair.key_pem, true)?;
    let loopback = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    for (file, cn, server, client) in
        [("etcd-server", "etcd", true, false), ("apiserver-etcd-client", "kube-apiserver-etcd-client", false, true)]
    {
        let sans = if server { loopback.clone() } else { vec![] };
        let pair = etcd_ca.issue(&LeafSpec { common_name: cn, organization: None, sans, server, client })?;
        write(&layout.cert(file), &pair.cert_pem, false)?;
        write(&layout.key(file), &pair.key_pem, true)?;
    }
    let (sa_private, sa_public) = signing_key()?;
    write(&layout.sa_private(), &sa_private, true)?;
    write(&layout.sa_public(), &sa_public, false)?;
    write_aggregation(layout, &ca)?;
    write_webhook_client(layout)
}

/// The name the aggregator checks metrics-server's certificate against (its Service's).
pub const METRICS_SERVER_HOST: &str = "metrics-server.kube-system.svc";

/// The API server's client identities towards kubelets and aggregated API servers, and
/// metrics-server's serving certificate: `ca` signs the first and the last (kubelets and
/// metrics-server trust the cluster CA), a front-proxy CA of its own the aggregator's.
fn write_aggregation(layout: &Layout, ca: &Authority) -> Result<(), ClusterError> {
    let leaf = |cn: &'static str, org: Option<&'static str>, sans: Vec<String>, server: bool| LeafSpec {
        common_name: cn,
        organization: org,
        sans,
        server,
        client: !server,
    };
    let kubelet_client = ca.issue(&leaf("kube-apiserver-kubelet-client", Some("system:masters"), vec![], false))?;
    write(&layout.cert("apiserver-kubelet-client"), &kubelet_client.cert_pem, false)?;
    write(&layout.key("apiserver-kubelet-client"), &kubelet_client.key_pem, true)?;
    let sans = [METRICS_SERVER_HOST, "localhost", "127.0.0.1"].map(String::from).to_vec();
    let metrics = ca.issue(&leaf("metrics-server", None, sans, true))?;
    write(&layout.cert("metrics-server"), &metrics.cert_pem, false)?;
    write(&layout.key("metrics-server"), &metrics.key_pem, true)?;
    let front = Authority::new("kwok-pools-front-proxy-ca")?;
    write(&layout.cert("front-proxy-ca"), &front.pair.cert_pem, false)?;
    let client = front.issue(&leaf("front-proxy-client", None, vec![], false))?;
    write(&layout.cert("front-proxy-client"), &client.cert_pem, false)?;
    write(&layout.key("front-proxy-client"), &client.key_pem, true)
}

/// [`write_aggregation`] for a cluster made before it existed (its CA read back).
pub fn ensure_aggregation(layout: &Layout) -> Result<(), ClusterError> {
    if layout.cert("front-proxy-client").exists() {
        return Ok(());
    }
    let read = |p: std::path::PathBuf| std::fs::read_to_string(&p).ctx(|| format!("reading {}", p.display()));
    let ca = Authority::from_pem(&read(layout.ca_cert())?, &read(layout.ca_key())?)?;
    write_aggregation(layout, &ca)
}

/// The API server's identity towards admission webhooks: a CA of its own (so a webhook that
/// trusts it trusts nothing else of the cluster), a client certificate it signs, the
/// kubeconfig that presents it to every webhook, and the AdmissionConfiguration naming it.
pub fn write_webhook_client(layout: &Layout) -> Result<(), ClusterError> {
    let ca = Authority::new("kwok-pools-webhook-client-ca")?;
    write(&layout.webhook_client_ca(), &ca.pair.cert_pem, false)?;
    let spec = LeafSpec {
        common_name: "kube-apiserver-webhook-client",
        organization: None,
        sans: vec![],
        server: false,
        client: true,
    };
    let pair = ca.issue(&spec)?;
    write(&layout.cert("apiserver-webhook-client"), &pair.cert_pem, false)?;
    write(&layout.key("apiserver-webhook-client"), &pair.key_pem, true)?;
    let p = |path: std::path::PathBuf| path.display().to_string();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: {}\n    client-key: {}\n",
        p(layout.cert("apiserver-webhook-client")),
        p(layout.key("apiserver-webhook-client"))
    );
    write(&layout.webhook_client_kubeconfig(), &kubeconfig, false)?;
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
            p(layout.webhook_client_kubeconfig())
        )
    };
    let admission = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
        plugin("ValidatingAdmissionWebhook"),
        plugin("MutatingAdmissionWebhook")
    );
    write(&layout.admission_config(), &admission, false)
}

/// The kubeconfig text for cluster `name` served on `port`, with the PKI embedded so the file
/// can be copied elsewhere.
fn kubeconfig_text(name: &str, port: u16, ca: &str, cert: &str, key: &str) -> String {
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

/// Writes the kubeconfigs from the PKI already on disk: the user's (admin) and one per
/// component with its own identity.
pub fn write_kubeconfig(layout: &Layout, name: &str, port: u16) -> Result<(), ClusterError> {
    let read = |p: &Path| std::fs::read_to_string(p).ctx(|| format!("reading {}", p.display()));
    let ca = read(&layout.ca_cert())?;
    let text = |id: &str| -> Result<String, ClusterError> {
        Ok(kubeconfig_text(name, port, &ca, &read(&layout.cert(id))?, &read(&layout.key(id))?))
    };
    write(&layout.kubeconfig(), &text("admin")?, true)?;
    for component in ["kube-controller-manager", "kube-scheduler"] {
        write(&layout.component_kubeconfig(component), &text(component)?, true)?;
    }
    Ok(())
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
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // Every private key and kubeconfig is 0600; certificates are not secret.
        for entry in std::fs::read_dir(layout.pki()).unwrap() {
            let path = entry.unwrap().path();
            let want = if path.extension().is_some_and(|e| e == "key") { 0o600 } else { 0o644 };
            assert_eq!(mode(&path), want, "{}", path.display());
        }
        for kc in [
            layout.kubeconfig(),
            layout.component_kubeconfig("kube-scheduler"),
            layout.component_kubeconfig("kube-controller-manager"),
        ] {
            assert_eq!(mode(&kc), 0o600, "{}", kc.display());
        }
        // One identity per part: the API server does not serve with the admin's certificate,
        // the components are not system:masters, and etcd trusts a CA of its own.
        let read = |id: &str| std::fs::read_to_string(layout.cert(id)).unwrap();
        assert_ne!(read("apiserver"), read("admin"));
        let subject = |id: &str| {
            let pem = read(id);
            let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
            pem.parse_x509().unwrap().subject().to_string()
        };
        assert!(subject("admin").contains("O=system:masters"));
        assert_eq!(subject("kube-scheduler"), "CN=system:kube-scheduler");
        assert_eq!(subject("kube-controller-manager"), "CN=system:kube-controller-manager");
        assert_ne!(read("etcd-ca"), std::fs::read_to_string(layout.ca_cert()).unwrap());
    }

    #[test]
    fn a_private_file_is_never_world_readable_even_when_it_existed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&path, "secret", true).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret");
    }
}
