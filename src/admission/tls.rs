//! The webhook's serving certificate: made here with rcgen (a fresh CA each start, for local
//! use), or read from files (in a cluster, from a Secret mounted as a directory).

use crate::certs::{Authority, LeafSpec};
use std::path::Path;

/// A serving certificate and the CA bundle the API server must trust.
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// Makes a CA and a serving certificate for `hosts` (DNS names and IPs).
pub fn generate(hosts: &[String]) -> Result<ServingCert, rcgen::Error> {
    let ca = Authority::new("kwok-pools-webhook-ca")?;
    let leaf = ca.issue(&LeafSpec {
        common_name: "kwok-pools-webhook",
        organization: None,
        sans: hosts.to_vec(),
        server: true,
        client: false,
    })?;
    Ok(ServingCert { cert_pem: leaf.cert_pem, key_pem: leaf.key_pem, ca_pem: ca.pair.cert_pem })
}

/// Reads `tls.crt`, `tls.key` and (if present) `ca.crt` from `dir`.
pub fn from_dir(dir: &Path) -> anyhow::Result<ServingCert> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| {
            anyhow::anyhow!(
                "reading {}: {e} (the webhook certificate directory needs tls.crt and tls.key)",
                dir.join(name).display()
            )
        })
    };
    let cert_pem = read("tls.crt")?;
    let key_pem = read("tls.key")?;
    let ca_pem = read("ca.crt").unwrap_or_else(|_| cert_pem.clone());
    Ok(ServingCert { cert_pem, key_pem, ca_pem })
}
