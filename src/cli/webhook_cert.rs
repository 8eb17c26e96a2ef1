//! `kwok-pools webhook-cert`: a Secret with one serving certificate for the webhook Service,
//! shared by every replica (each would otherwise make its own, and the API server trusts only
//! the CA the leader registers). Mount it and pass `--webhook-cert-dir`.

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct WebhookCertArgs {
    /// The webhook Service, as NAMESPACE/NAME.
    #[arg(long, default_value = "kwok-pools/kwok-pools")]
    pub service: String,
    /// The Secret's name (in the Service's namespace).
    #[arg(long, default_value = "kwok-pools-webhook-tls")]
    pub secret: String,
}

/// The Secret manifest (YAML) with tls.crt, tls.key and ca.crt for the Service's DNS names.
pub fn secret_yaml(args: &WebhookCertArgs) -> anyhow::Result<String> {
    let (ns, name) = args
        .service
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--service {:?}: use NAMESPACE/NAME", args.service))?;
    let hosts = vec![format!("{name}.{ns}.svc"), format!("{name}.{ns}.svc.cluster.local")];
    let cert = crate::admission::tls::generate(&hosts)?;
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": args.secret, "namespace": ns, "labels": {"app.kubernetes.io/name": "kwok-pools"}},
        "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem, "ca.crt": cert.ca_pem},
    });
    Ok(serde_yaml::to_string(&secret)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_holds_a_certificate_the_operator_reads_back() {
        let args = WebhookCertArgs { service: "ops/hook".into(), secret: "hook-tls".into() };
        let yaml = secret_yaml(&args).unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(v["metadata"]["namespace"], "ops");
        assert_eq!(v["type"], "kubernetes.io/tls");
        let dir = tempfile::tempdir().unwrap();
        for key in ["tls.crt", "tls.key", "ca.crt"] {
            std::fs::write(dir.path().join(key), v["stringData"][key].as_str().unwrap()).unwrap();
        }
        let cert = crate::admission::tls::from_dir(dir.path()).unwrap();
        assert!(cert.ca_pem.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn a_service_without_namespace_is_refused_with_the_form() {
        let args = WebhookCertArgs { service: "hook".into(), secret: "x".into() };
        assert!(secret_yaml(&args).unwrap_err().to_string().contains("NAMESPACE/NAME"));
    }
}
