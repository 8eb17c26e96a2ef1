//! Certificate authority and leaf certificates made with rcgen, shared by the local control
//! plane (cluster/) and the admission webhook (admission/). Pure: no files, no I/O.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use std::time::Duration;

/// A PEM certificate and its PEM (PKCS#8) private key.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed certificate authority that can issue leaf certificates.
pub struct Authority {
    pub pair: CertPair,
    issuer: Issuer<'static, KeyPair>,
}

/// What a leaf certificate is for.
pub struct LeafSpec<'a> {
    pub common_name: &'a str,
    pub organization: Option<&'a str>,
    /// DNS names and IP addresses (strings that parse as IPs become IP SANs).
    pub sans: Vec<String>,
    pub server: bool,
    pub client: bool,
}

const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

impl Authority {
    /// Makes a new self-signed CA with the given common name, valid a year.
    pub fn new(common_name: &str) -> Result<Self, rcgen::Error> {
        Self::new_valid_for(common_name, VALIDITY)
    }

    /// Makes a new self-signed CA valid for `lifetime`.
    pub fn new_valid_for(common_name: &str, lifetime: Duration) -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = time_now() - Duration::from_secs(3600);
        params.not_after = time_now() + lifetime;
        let cert = params.self_signed(&key)?;
        let pair = CertPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() };
        Ok(Self { pair, issuer: Issuer::new(params, key) })
    }

    /// An existing CA, from its PEM certificate and PEM private key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        let pair = CertPair { cert_pem: cert_pem.to_string(), key_pem: key_pem.to_string() };
        Ok(Self { pair, issuer })
    }

    /// Issues a leaf certificate signed by this CA.
    pub fn issue(&self, spec: &LeafSpec<'_>) -> Result<CertPair, rcgen::Error> {
        self.issue_valid_for(spec, VALIDITY)
    }

    /// Issues a leaf certificate valid for `lifetime` from now (an hour earlier, for clock skew).
    pub fn issue_valid_for(&self, spec: &LeafSpec<'_>, lifetime: Duration) -> Result<CertPair, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(spec.sans.clone())?;
        params.distinguished_name.push(DnType::CommonName, spec.common_name);
        if let Some(org) = spec.organization {
            params.distinguished_name.push(DnType::OrganizationName, org);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        if spec.server {
            params.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.client {
            params.extended_key_usages.push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        params.not_before = time_now() - Duration::from_secs(3600);
        params.not_after = time_now() + lifetime;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// A fresh signing key pair (ECDSA P-256), returned as (private PKCS#8 PEM, public PEM).
pub fn signing_key() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_leaf_with_ip_and_dns_sans() {
        let ca = Authority::new("test-ca").unwrap();
        let leaf = ca
            .issue(&LeafSpec {
                common_name: "admin",
                organization: Some("system:masters"),
                sans: vec!["localhost".into(), "127.0.0.1".into()],
                server: true,
                client: true,
            })
            .unwrap();
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        assert_ne!(leaf.cert_pem, ca.pair.cert_pem);
    }
}
