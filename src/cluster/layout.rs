//! Where a cluster keeps its state: PKI, kubeconfig, etcd data, logs and pid files, all under
//! one directory per cluster (`<home>/clusters/<name>`). Pure path arithmetic plus the small
//! `cluster.json` record of ports.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The environment variable that overrides the home of all cluster state.
pub const HOME_ENV: &str = "KWOK_POOLS_HOME";

/// The file name (under pki/) of the CA that signs the API server's webhook client certificate.
pub const WEBHOOK_CLIENT_CA: &str = "webhook-client-ca";

/// The default home: `$KWOK_POOLS_HOME`, else `~/.kwok-pools`. Never a shared temporary
/// directory (private keys live there): without a home directory, say what to set.
pub fn default_home() -> Result<PathBuf, String> {
    if let Some(home) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    dirs::home_dir().map(|h| h.join(".kwok-pools")).ok_or_else(|| {
        format!(
            "there is no home directory to keep cluster state in: set {HOME_ENV} (or --home) to a directory of your own"
        )
    })
}

/// The state directory of the cluster `name` under `home`.
pub fn cluster_dir(home: &Path, name: &str) -> PathBuf {
    home.join("clusters").join(name)
}

/// A cluster name must be usable as a directory and in messages: a DNS label.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid cluster name {name:?}: use 1 to 40 lower-case letters, digits and '-', \
             starting and ending with a letter or digit"
        ))
    }
}

/// The ports a cluster listens on (all on 127.0.0.1).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
    /// metrics-server's port (0: the cluster has none).
    #[serde(default)]
    pub metrics_server: u16,
}

/// The record written to `cluster.json` when a cluster is created.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    pub name: String,
    pub ports: Ports,
    pub bin_dir: PathBuf,
    pub created: String,
    /// `--extra-arg` flags, as component name and flag, so `cluster start` repeats them.
    #[serde(default)]
    pub extra_args: Vec<(String, String)>,
    /// The cluster runs metrics-server (`cluster create --metrics-server`).
    #[serde(default)]
    pub metrics_server: bool,
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }
    pub fn record(&self) -> PathBuf {
        self.dir.join("cluster.json")
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.pki().join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.pki().join("ca.key")
    }
    pub fn admin_cert(&self) -> PathBuf {
        self.pki().join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.pki().join("admin.key")
    }
    /// `pki/<name>.crt` and `pki/<name>.key`: the certificate and key of one identity.
    pub fn cert(&self, name: &str) -> PathBuf {
        self.pki().join(format!("{name}.crt"))
    }
    pub fn key(&self, name: &str) -> PathBuf {
        self.pki().join(format!("{name}.key"))
    }
    /// The kubeconfig a component uses (its own client certificate).
    pub fn component_kubeconfig(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.kubeconfig"))
    }
    pub fn sa_private(&self) -> PathBuf {
        self.pki().join("sa.key")
    }
    pub fn sa_public(&self) -> PathBuf {
        self.pki().join("sa.pub")
    }
    pub fn etcd_data(&self) -> PathBuf {
        self.dir.join("etcd-data")
    }
    pub fn scheduler_config(&self) -> PathBuf {
        self.dir.join("kube-scheduler.yaml")
    }
    /// The API server's AdmissionConfiguration (its client identity towards webhooks).
    pub fn admission_config(&self) -> PathBuf {
        self.dir.join("admission.yaml")
    }
    /// The kubeconfig the API server presents to webhooks (`*`: every webhook).
    pub fn webhook_client_kubeconfig(&self) -> PathBuf {
        self.dir.join("webhook-client.kubeconfig")
    }
    /// The CA of the API server's webhook client certificate: what a webhook (the operator's
    /// `--webhook-client-ca`) accepts callers by.
    pub fn webhook_client_ca(&self) -> PathBuf {
        self.cert(WEBHOOK_CLIENT_CA)
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    /// The log of a component (anything that displays as its name).
    pub fn log(&self, component: impl std::fmt::Display) -> PathBuf {
        self.logs().join(format!("{component}.log"))
    }
    /// The pid file of a component.
    pub fn pid(&self, component: impl std::fmt::Display) -> PathBuf {
        self.dir.join("run").join(format!("{component}.pid"))
    }

    pub fn read_record(&self) -> std::io::Result<ClusterRecord> {
        let text = std::fs::read_to_string(self.record())?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }
}

/// The PKI of a local cluster, found from the kubeconfig a process uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPki {
    /// The cluster's name (its directory's).
    pub cluster: String,
    /// The cluster CA (certificate and key): it signs the kubelet client certificate the API
    /// server presents, and metrics-server trusts it for kubelets.
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    /// The CA of the API server's webhook client certificate, when the cluster has one.
    pub webhook_client_ca: Option<PathBuf>,
}

/// The local cluster whose kubeconfig is `kubeconfig` (`<home>/clusters/<name>/kubeconfig`,
/// beside its `cluster.json` and `pki/`), if it is one.
pub fn local_pki(kubeconfig: &Path) -> Option<LocalPki> {
    let dir = kubeconfig.parent()?;
    if kubeconfig.file_name()? != "kubeconfig" || !dir.join("cluster.json").is_file() {
        return None;
    }
    let pki = dir.join("pki");
    let (ca_cert, ca_key) = (pki.join("ca.crt"), pki.join("ca.key"));
    if !ca_cert.is_file() || !ca_key.is_file() {
        return None;
    }
    let webhook = pki.join(format!("{WEBHOOK_CLIENT_CA}.crt"));
    Some(LocalPki {
        cluster: dir.file_name()?.to_string_lossy().into_owned(),
        ca_cert,
        ca_key,
        webhook_client_ca: webhook.is_file().then_some(webhook),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        assert!(validate_name("dev").is_ok());
        assert!(validate_name("e2e-2").is_ok());
        for bad in ["", "Dev", "a/b", "-x", "x-", "a_b", &"x".repeat(41)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_live_under_the_cluster_dir() {
        let l = Layout::new(cluster_dir(Path::new("/h"), "c1"));
        assert_eq!(l.kubeconfig(), Path::new("/h/clusters/c1/kubeconfig"));
        assert_eq!(l.pid("etcd"), Path::new("/h/clusters/c1/run/etcd.pid"));
    }

    #[test]
    fn a_local_clusters_pki_is_found_from_its_kubeconfig() {
        let home = std::env::temp_dir().join(format!("kwok-pools-pki-{}", std::process::id()));
        let dir = cluster_dir(&home, "demo");
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        assert_eq!(local_pki(&kubeconfig), None, "no cluster.json: not a local cluster");
        std::fs::write(dir.join("cluster.json"), "{}").unwrap();
        assert_eq!(local_pki(&kubeconfig), None, "no CA: nothing to use");
        for f in ["ca.crt", "ca.key"] {
            std::fs::write(dir.join("pki").join(f), "x").unwrap();
        }
        let found = local_pki(&kubeconfig).unwrap();
        assert_eq!((found.cluster.as_str(), found.webhook_client_ca.is_none()), ("demo", true));
        assert_eq!(found.ca_key, dir.join("pki/ca.key"));
        std::fs::write(dir.join("pki/webhook-client-ca.crt"), "x").unwrap();
        assert!(local_pki(&kubeconfig).unwrap().webhook_client_ca.is_some());
        assert_eq!(local_pki(&home.join("elsewhere/kubeconfig")), None);
        let _ = std::fs::remove_dir_all(&home);
    }
}
