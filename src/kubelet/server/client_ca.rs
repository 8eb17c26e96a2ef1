//! The client CA the kubelet API verifies certificates with (the API server's, which it
//! presents when it proxies `kubectl logs`, exec and metrics-server's scrapes), kept fresh: read
//! at start and again every minute, from `--kubelet-client-ca` or the ConfigMap the API server
//! publishes (`kube-system/extension-apiserver-authentication`). A rotated CA is trusted
//! without a restart; a file or ConfigMap that becomes unreadable or broken keeps the CA in use
//! (and says so once).

use super::tls::Serving;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How often the CA is read again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// Where the client CA comes from.
pub enum Source {
    File(PathBuf),
    ConfigMap(kube::Client),
}

impl Source {
    async fn read(&self) -> Result<String, String> {
        match self {
            // A few KiB once a minute: read in place (no blocking pool, so the paused clock
            // of the tests sees it done at once).
            Source::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --kubelet-client-ca {}: {e}", path.display())),
            Source::ConfigMap(client) => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
                let found = api.get_opt("extension-apiserver-authentication").await.map_err(|e| {
                    format!("cannot read kube-system/extension-apiserver-authentication: {e} (grant the operator the extension-apiserver-authentication-reader Role, or pass --kubelet-client-ca)")
                })?;
                found
                    .and_then(|c| c.data?.get("client-ca-file").cloned())
                    .ok_or_else(|| "kube-system/extension-apiserver-authentication has no client-ca-file".to_string())
            }
        }
    }
}

/// What one reading does with the CA in use.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The same CA as before: nothing to do.
    Unchanged,
    /// A new CA, now trusted.
    Trusted,
    /// Unreadable or unusable: the CA in use (if any) is kept.
    Kept(String),
}

/// Reads `source` once and trusts what it holds when it changed (`current`: the PEM in use).
pub async fn refresh_once(source: &Source, serving: &Serving, current: &mut Option<String>) -> Outcome {
    let pem = match source.read().await {
        Ok(p) => p,
        Err(e) => return Outcome::Kept(e),
    };
    if current.as_deref() == Some(pem.as_str()) {
        return Outcome::Unchanged;
    }
    match serving.set_client_ca(&pem) {
        Ok(()) => {
            *current = Some(pem);
            Outcome::Trusted
        }
        Err(e) => Outcome::Kept(e),
    }
}

/// Keeps the client CA fresh for as long as the kubelet API serves (`current`: what start
/// read already, if anything).
pub async fn keep(source: Source, serving: Arc<Serving>, mut current: Option<String>) {
    let mut told: Option<String> = None;
    loop {
        match refresh_once(&source, &serving, &mut current).await {
            Outcome::Unchanged => told = None,
            Outcome::Trusted => {
                tracing::info!(
                    "kubelet API: accepting client certificates of the API server's client CA (read again every minute)"
                );
                told = None;
            }
            Outcome::Kept(why) => {
                if told.as_deref() != Some(why.as_str()) {
                    let keeping = if current.is_some() {
                        "the CA in use is kept"
                    } else {
                        "only bearer tokens are accepted until it can"
                    };
                    tracing::warn!(error = %why, "kubelet API: cannot read its client CA; {keeping}");
                    told = Some(why);
                }
            }
        }
        tokio::time::sleep(REFRESH).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Authority;

    fn serving() -> Arc<Serving> {
        Arc::new(Serving::new(Authority::new("serving").unwrap(), Duration::from_secs(3600)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_ca_is_trusted_within_a_minute_and_a_broken_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let (a, b) = (Authority::new("a").unwrap(), Authority::new("b").unwrap());
        std::fs::write(&path, &a.pair.cert_pem).unwrap();
        let serving = serving();
        let source = Source::File(path.clone());
        let mut current = None;
        assert_eq!(refresh_once(&source, &serving, &mut current).await, Outcome::Trusted);
        assert_eq!(current.as_deref(), Some(a.pair.cert_pem.as_str()));
        assert_eq!(refresh_once(&source, &serving, &mut current).await, Outcome::Unchanged);

        // The loop itself, on the paused clock: a rotation is trusted on its next round, a
        // broken file keeps the CA in use.
        let task = tokio::spawn(keep(Source::File(path.clone()), serving.clone(), current.clone()));
        let settle = || async {
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
        };
        settle().await;
        std::fs::write(&path, &b.pair.cert_pem).unwrap();
        settle().await;
        assert_eq!(serving.client_ca().as_deref(), Some(a.pair.cert_pem.as_str()), "not before the next round");
        tokio::time::advance(REFRESH + Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(serving.client_ca().as_deref(), Some(b.pair.cert_pem.as_str()), "rotated within a minute");
        std::fs::write(&path, "not a certificate").unwrap();
        tokio::time::advance(REFRESH + Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(serving.client_ca().as_deref(), Some(b.pair.cert_pem.as_str()), "a broken file keeps the CA in use");
        std::fs::remove_file(&path).unwrap();
        tokio::time::advance(REFRESH + Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(serving.client_ca().as_deref(), Some(b.pair.cert_pem.as_str()), "so does a missing one");
        task.abort();
        let mut seen = Some(b.pair.cert_pem.clone());
        assert!(matches!(refresh_once(&source, &serving, &mut seen).await, Outcome::Kept(_)));
    }
}
