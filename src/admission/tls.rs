//! The webhook's serving certificate: made here with rcgen (a CA made at start, for local use)
//! or read from files (in a cluster, from a Secret mounted as a directory) — and kept fresh:
//! a generated certificate is re-issued by the same CA before it expires (the CA, which the
//! webhook configuration trusts, outlives it), and files are read again when they change.

use crate::certs::{Authority, LeafSpec};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A serving certificate and the CA bundle the API server must trust.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

/// How long a generated serving certificate is valid; it is re-issued after two thirds.
pub const GENERATED_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

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
    pub async fn refresh(&self, current: &ServingCert, now: SystemTime) -> anyhow::Result<Option<ServingCert>> {
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

/// A serving certificate for `hosts` from `ca`, valid `lifetime`.
pub(super) fn issue(ca: &Authority, hosts: &[String], lifetime: Duration) -> Result<ServingCert, rcgen::Error> {
    let spec = LeafSpec {
        common_name: "kwok-pools-webhook",
        organization: None,
        sans: hosts.to_vec(),
        server: true,
        client: false,
    };
    let leaf = ca.issue_valid_for(&spec, lifetime)?;
    Ok(ServingCert { cert_pem: leaf.cert_pem, key_pem: leaf.key_pem, ca_pem: ca.pair.cert_pem.clone() })
}

/// Makes a CA and a serving certificate for `hosts` (DNS names and IPs), valid a year (for a
/// Secret made once, `kwok-pools webhook-cert`).
pub fn generate(hosts: &[String]) -> Result<ServingCert, rcgen::Error> {
    let ca = Authority::new("kwok-pools-webhook-ca")?;
    issue(&ca, hosts, Duration::from_secs(365 * 24 * 3600))
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

/// The first certificate of a PEM bundle, parsed.
fn with_first_cert<T>(pem: &str, f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T) -> Option<T> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    Some(f(&cert))
}

/// When the (first) certificate in `pem` expires.
pub fn not_after(pem: &str) -> Option<SystemTime> {
    with_first_cert(pem, |c| {
        let secs = c.validity().not_after.timestamp();
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))
    })
    .flatten()
}

/// The DNS names and IP addresses the (first) certificate in `pem` is for.
pub fn subject_names(pem: &str) -> Option<(Vec<String>, Vec<IpAddr>)> {
    use x509_parser::extensions::GeneralName;
    with_first_cert(pem, |c| {
        let (mut dns, mut ips) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = c.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns.push(d.to_ascii_lowercase()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => ips.extend(<[u8; 4]>::try_from(*b).ok().map(IpAddr::from)),
                        16 => ips.extend(<[u8; 16]>::try_from(*b).ok().map(IpAddr::from)),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        (dns, ips)
    })
}

/// Whether the certificate in `pem` is valid for `host` (an IP, a DNS name; `*.` wildcards
/// cover one label), as the API server's TLS client checks it.
pub fn covers(pem: &str, host: &str) -> bool {
    let Some((dns, ips)) = subject_names(pem) else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ips.contains(&ip);
    }
    dns.iter().any(|name| match name.strip_prefix("*.") {
        Some(suffix) => host.split_once('.').is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => *name == host,
    })
}

/// The host of an `https://host[:port]/path` URL (`None` when it is no https URL).
pub fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = if authority.starts_with('[') {
        authority.split_once(']').map(|(h, _)| format!("{h}]"))?
    } else {
        authority.split(':').next().unwrap_or_default().to_string()
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_covers_its_names_and_nothing_else() {
        let hosts: Vec<String> = ["localhost", "127.0.0.1", "*.example.test", "::1"].map(String::from).to_vec();
        let cert = generate(&hosts).unwrap();
        for host in ["localhost", "LOCALHOST", "127.0.0.1", "a.example.test", "[::1]"] {
            assert!(covers(&cert.cert_pem, host), "{host}");
        }
        for host in ["example.test", "a.b.example.test", "10.0.0.1", "evil.test", ""] {
            assert!(!covers(&cert.cert_pem, host), "{host}");
        }
        assert!(!covers("not a certificate", "localhost"));
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("https://10.1.2.3:9443/validate").as_deref(), Some("10.1.2.3"));
        assert_eq!(url_host("https://hook.example.test/validate").as_deref(), Some("hook.example.test"));
        assert_eq!(url_host("https://[::1]:8443/x").as_deref(), Some("[::1]"));
        assert_eq!(url_host("http://plain:80/"), None);
        assert_eq!(url_host("https:///nohost"), None);
    }

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
