//! The webhook's certificate in a Secret the operator keeps itself (`--webhook-cert-secret`):
//! what `kubectl apply -f dist/install.yaml` needs, with no certificate tooling in the cluster.
//! The first replica to start makes a CA and a serving certificate for the Service's names and
//! creates the Secret (another replica racing it reads the winner's); every replica serves what
//! the Secret holds and reads it again now and then; one whose certificate is two thirds
//! through its life re-issues it with the same CA (kept in the Secret, so the webhook
//! configurations' caBundle never changes) and writes it with the Secret's resourceVersion (a
//! replica that loses the race reads the winner's).

use super::cert::{GENERATED_LIFETIME, ServingCert, not_after};
use super::error::WebhookError;
use crate::certs::Authority;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::time::SystemTime;

/// How long the CA in a made Secret is valid: it outlives many serving certificates.
const CA_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10 * 365 * 24 * 3600);

pub struct SecretSource {
    pub api: Api<Secret>,
    pub name: String,
    /// The names the serving certificate is for.
    pub hosts: Vec<String>,
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The certificate a Secret holds (tls.crt, tls.key, ca.crt), if whole.
pub fn serving(secret: &Secret) -> Option<ServingCert> {
    Some(ServingCert {
        cert_pem: text(secret, "tls.crt")?,
        key_pem: text(secret, "tls.key")?,
        ca_pem: text(secret, "ca.crt")?,
    })
}

/// Whether a certificate is two thirds through its life (or unreadable) at `now`.
pub fn due(cert_pem: &str, now: SystemTime) -> bool {
    not_after(cert_pem).is_none_or(|end| {
        let renew_at = end.checked_sub(GENERATED_LIFETIME / 3).unwrap_or(SystemTime::UNIX_EPOCH);
        now >= renew_at
    })
}

/// A new serving certificate for `hosts` from `ca`, as the Secret's data (with the CA's key,
/// so any replica can renew it).
fn issue(ca: &Authority, hosts: &[String]) -> Result<std::collections::BTreeMap<String, ByteString>, rcgen::Error> {
    let leaf = super::cert::issue(ca, hosts, GENERATED_LIFETIME)?;
    let b = |s: &str| ByteString(s.as_bytes().to_vec());
    Ok([
        ("tls.crt", b(&leaf.cert_pem)),
        ("tls.key", b(&leaf.key_pem)),
        ("ca.crt", b(&leaf.ca_pem)),
        ("ca.key", b(&ca.pair.key_pem)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect())
}

impl SecretSource {
    fn fix(&self, what: &str, e: impl std::fmt::Display) -> WebhookError {
        WebhookError::Certificate(format!(
            "{what} the webhook certificate Secret {}: {e}; the operator needs get, create and update on it (dist/install.yaml and the chart with webhook.certSource=operator grant them)",
            self.name
        ))
    }

    /// The certificate to serve at start: the Secret's, or a new one in a new Secret.
    pub async fn load_or_create(&self) -> Result<ServingCert, WebhookError> {
        if let Some(secret) = self.api.get_opt(&self.name).await.map_err(|e| self.fix("cannot read", e))?
            && let Some(cert) = serving(&secret)
        {
            return Ok(cert);
        }
        let ca = Authority::new_valid_for("kwok-pools-webhook-ca", CA_LIFETIME)?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([("app.kubernetes.io/name".to_string(), "kwok-pools".to_string())].into()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(issue(&ca, &self.hosts)?),
            ..Default::default()
        };
        match self.api.create(&PostParams::default(), &secret).await {
            Ok(made) => {
                tracing::info!(secret = %self.name, "made the webhook certificate and its CA");
                serving(&made).ok_or_else(|| {
                    WebhookError::Certificate(format!("the Secret {} came back without its certificate", self.name))
                })
            }
            // Another replica made it first (or it exists without a whole certificate).
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let secret = self.api.get(&self.name).await.map_err(|e| self.fix("cannot read", e))?;
                serving(&secret).ok_or_else(|| {
                    WebhookError::Certificate(format!(
                        "the Secret {} exists without tls.crt, tls.key and ca.crt: delete it and the operator makes it again",
                        self.name
                    ))
                })
            }
            Err(e) => Err(self.fix("cannot create", e)),
        }
    }

    /// What the Secret holds now, renewed first when due (`None`: the same as `current`).
    pub async fn refresh(&self, current: &ServingCert, now: SystemTime) -> Result<Option<ServingCert>, WebhookError> {
        let mut secret = self.api.get(&self.name).await.map_err(|e| self.fix("cannot read", e))?;
        let held = serving(&secret)
            .ok_or_else(|| WebhookError::Certificate(format!("the Secret {} lost its certificate", self.name)))?;
        if due(&held.cert_pem, now)
            && let (Some(ca_pem), Some(ca_key)) = (text(&secret, "ca.crt"), text(&secret, "ca.key"))
        {
            let ca = Authority::from_pem(&ca_pem, &ca_key)?;
            secret.data = Some(issue(&ca, &self.hosts)?);
            match self.api.replace(&self.name, &PostParams::default(), &secret).await {
                Ok(renewed) => {
                    tracing::info!(secret = %self.name, "renewed the webhook certificate (same CA)");
                    return Ok(serving(&renewed).filter(|c| c != current));
                }
                // Another replica renewed it first: its certificate is read next time.
                Err(kube::Error::Api(e)) if e.code == 409 => return Ok(None),
                Err(e) => return Err(self.fix("cannot update", e)),
            }
        }
        Ok((held != *current).then_some(held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_secret_serves_its_certificate_and_is_renewed_late_in_its_life() {
        let ca = Authority::new("ca").unwrap();
        let data = issue(&ca, &["svc.ns.svc".into()]).unwrap();
        let secret = Secret { data: Some(data), ..Default::default() };
        let cert = serving(&secret).unwrap();
        assert!(super::super::cert::covers(&cert.cert_pem, "svc.ns.svc"));
        assert_eq!(cert.ca_pem, ca.pair.cert_pem);
        assert!(!due(&cert.cert_pem, SystemTime::now()));
        let late = SystemTime::now() + GENERATED_LIFETIME.mul_f64(0.7);
        assert!(due(&cert.cert_pem, late));
        assert!(due("not a certificate", SystemTime::now()));
        assert!(serving(&Secret::default()).is_none());
    }
}
