//! The webhook's certificate in a Secret the operator keeps itself (`--webhook-cert-secret`):
//! what `kubectl apply -f dist/install.yaml` needs, with no certificate tooling in the cluster.
//! The install ships the Secret empty; the first replica to start makes a CA and a serving
//! certificate for the Service's names and writes them into it (another replica racing it reads
//! the winner's). Its identity may get and update that one Secret, by name, and create none.
//! Every replica serves what
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
            "{what} the webhook certificate Secret {}: {e}; the operator needs get and update on it by name (dist/install.yaml ships it empty and grants them; config/components/webhook-cert-secret too)",
            self.name
        ))
    }

    /// The certificate to serve at start: the Secret's, or a new one written into it. The
    /// install ships the Secret empty (the operator may get and update it by name, never create
    /// one); the first replica fills it with its resourceVersion, and a replica that loses that
    /// race reads the winner's. A Secret that does not exist is created only where the identity
    /// may (an administrator's `kwok-pools run`).
    pub async fn load_or_create(&self) -> Result<ServingCert, WebhookError> {
        for _ in 0..3 {
            let found = self.api.get_opt(&self.name).await.map_err(|e| self.fix("cannot read", e))?;
            if let Some(cert) = found.as_ref().and_then(serving) {
                return Ok(cert);
            }
            if found.as_ref().is_some_and(|s| s.data.as_ref().is_some_and(|d| !d.is_empty())) {
                return Err(WebhookError::Certificate(format!(
                    "the Secret {} holds data but not all of tls.crt, tls.key and ca.crt: it is somebody else's, or half written; empty or delete it and the operator fills it",
                    self.name
                )));
            }
            let ca = Authority::new_valid_for("kwok-pools-webhook-ca", CA_LIFETIME)?;
            let data = issue(&ca, &self.hosts)?;
            let written = match found {
                // Shipped empty: filled, guarded by its resourceVersion.
                Some(mut secret) => {
                    secret.data = Some(data);
                    self.api.replace(&self.name, &PostParams::default(), &secret).await
                }
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            labels: Some([("app.kubernetes.io/name".to_string(), "kwok-pools".to_string())].into()),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    self.api.create(&PostParams::default(), &secret).await
                }
            };
            match written {
                Ok(made) => {
                    tracing::info!(secret = %self.name, "made the webhook certificate and its CA");
                    return serving(&made).ok_or_else(|| {
                        WebhookError::Certificate(format!("the Secret {} came back without its certificate", self.name))
                    });
                }
                // Another replica filled (or made) it first: read the winner's.
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    return Err(WebhookError::Certificate(format!(
                        "the webhook certificate Secret {} cannot be written: {}; the install ships it (an empty Secret of that name in the operator's namespace) and grants get and update on it by name",
                        self.name, e.message
                    )));
                }
                Err(e) => return Err(self.fix("cannot write", e)),
            }
        }
        Err(WebhookError::Certificate(format!(
            "the Secret {} kept changing while the webhook certificate was written into it; it is tried again at the next start",
            self.name
        )))
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
