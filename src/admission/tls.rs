//! The webhook's serving certificate: made here with rcgen (a CA made at start, for local use)
//! or read from files (in a cluster, from a Secret mounted as a directory) — and kept fresh:
//! a generated certificate is re-issued by the same CA before it expires (the CA, which the
//! webhook configuration trusts, outlives it), and files are read again when they change.

use super::cert::issue;
pub use super::cert::{GENERATED_LIFETIME, ServingCert, covers, generate, not_after, subject_names, url_host};
use super::error::WebhookError;
use crate::certs::Authority;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Where the serving certificate comes from, and how it is renewed.
pub enum Source {
    /// Made by a CA of our own (kept in memory): re-issued for `hosts` after 2/3 of `lifetime`.
    Generated { ca: Box<Authority>, hosts: Vec<String>, lifetime: Duration },
    /// tls.crt / tls.key / ca.crt in a directory (a mounted Secret): read again on change.
    Dir(PathBuf),
    /// A Secret the operator makes and renews itself (`--webhook-cert-secret`).
    Secret(Box<super::secret::SecretSource>),
}

impl Source {
    /// A CA of our own and a first certificate for `hosts`.
    pub fn generated(hosts: &[String], lifetime: Duration) -> Result<(Self, ServingCert), rcgen::Error> {
        let ca = Authority::new("kwok-pools-webhook-ca")?;
        let cert = issue(&ca, hosts, lifetime)?;
        Ok((Self::Generated { ca: Box::new(ca), hosts: hosts.to_vec(), lifetime }, cert))
    }

    /// The certificate to serve now: `current` when it is still good, else a fresh one
    /// (`None`: keep `current`, nothing changed).
    pub async fn refresh(&self, current: &ServingCert, now: SystemTime) -> Result<Option<ServingCert>, WebhookError> {
        match self {
            Self::Generated { ca, hosts, lifetime } => {
                let renew_at = not_after(&current.cert_pem)
                    .map(|end| end.checked_sub(*lifetime / 3).unwrap_or(SystemTime::UNIX_EPOCH));
                if renew_at.is_some_and(|at| now < at) {
                    return Ok(None);
                }
                Ok(Some(issue(ca, hosts, *lifetime)?))
            }
            Self::Dir(dir) => {
                let read = from_dir(dir)?;
                Ok((read != *current).then_some(read))
            }
            Self::Secret(secret) => secret.refresh(current, now).await,
        }
    }
}

/// Reads `tls.crt`, `tls.key` and (if present) `ca.crt` from `dir`.
pub fn from_dir(dir: &Path) -> Result<ServingCert, WebhookError> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| {
            WebhookError::Certificate(format!(
                "reading {}: {e} (the webhook certificate directory needs tls.crt and tls.key)",
                dir.join(name).display()
            ))
        })
    };
    let cert_pem = read("tls.crt")?;
    let key_pem = read("tls.key")?;
    let ca_pem = read("ca.crt").unwrap_or_else(|_| cert_pem.clone());
    Ok(ServingCert { cert_pem, key_pem, ca_pem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_generated_certificate_is_renewed_after_two_thirds_of_its_life_by_the_same_ca() {
        let hosts = vec!["localhost".to_string()];
        let lifetime = Duration::from_secs(3 * 3600);
        let (source, first) = Source::generated(&hosts, lifetime).unwrap();
        let end = not_after(&first.cert_pem).unwrap();
        let now = SystemTime::now();
        assert!(end > now + Duration::from_secs(2 * 3600) && end <= now + lifetime + Duration::from_secs(60));
        assert!(source.refresh(&first, now).await.unwrap().is_none(), "fresh: kept");
        let later = end - Duration::from_secs(3600) + Duration::from_secs(1);
        let second = source.refresh(&first, later).await.unwrap().expect("renewed in its last third");
        assert_ne!(second.cert_pem, first.cert_pem);
        assert_eq!(second.ca_pem, first.ca_pem, "the CA the API server trusts stays");
        assert!(covers(&second.cert_pem, "localhost"));
    }

    #[tokio::test]
    async fn files_are_read_again_only_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let a = generate(&["localhost".to_string()]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), &a.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &a.key_pem).unwrap();
        let source = Source::Dir(dir.path().to_path_buf());
        let current = from_dir(dir.path()).unwrap();
        assert!(source.refresh(&current, SystemTime::now()).await.unwrap().is_none());
        let b = generate(&["localhost".to_string()]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), &b.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), &b.key_pem).unwrap();
        let read = source.refresh(&current, SystemTime::now()).await.unwrap().expect("changed files are read");
        assert_eq!(read.cert_pem, b.cert_pem);
        std::fs::remove_file(dir.path().join("tls.key")).unwrap();
        assert!(source.refresh(&read, SystemTime::now()).await.is_err(), "a missing key is an error, not a change");
    }
}
