//! Serving certificates as data: issued by a CA for a set of hosts, and read back (expiry, the
//! names a certificate covers, as the API server's TLS client judges them). Pure; where they
//! come from and how they are renewed is [`super::tls`].

use crate::certs::{Authority, LeafSpec};
use std::net::IpAddr;
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

/// A serving certificate for `hosts` from `ca`, valid `lifetime`.
pub fn issue(ca: &Authority, hosts: &[String], lifetime: Duration) -> Result<ServingCert, rcgen::Error> {
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
}
