//! `kwok-pools webhook-cert`: a Secret with one serving certificate for the webhook Service,
//! shared by every replica, and the two webhook configurations trusting its CA — the install's
//! CA is known at install time, so the operator in the cluster never writes a webhook
//! configuration. `kwok-pools webhook-cert | kubectl apply --server-side -f -`.

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct WebhookCertArgs {
    /// The webhook Service, as NAMESPACE/NAME.
    #[arg(long, default_value = "kwok-pools/kwok-pools")]
    pub service: String,
    /// The Secret's name (in the Service's namespace).
    #[arg(long, default_value = "kwok-pools-webhook-tls")]
    pub secret: String,
    /// The webhook configurations' name (the operator's instance: `kwok-pools`, or
    /// `kwok-pools-<instance>`).
    #[arg(long, default_value = "kwok-pools")]
    pub configuration: String,
    /// Print the Secret only.
    #[arg(long)]
    pub secret_only: bool,
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
    let mut out = serde_yaml::to_string(&secret)?;
    if !args.secret_only {
        let (vwc, mwc) = crate::deploy::webhooks::configurations(&args.configuration, ns, name, Some(&cert.ca_pem));
        out.push_str("---\n");
        out.push_str(&crate::deploy::webhooks::yaml(&vwc, &mwc));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_holds_a_certificate_the_operator_reads_back() {
        let args = WebhookCertArgs {
            service: "ops/hook".into(),
            secret: "hook-tls".into(),
            configuration: "kwok-pools".into(),
            secret_only: false,
        };
        let yaml = secret_yaml(&args).unwrap();
        let docs: Vec<serde_yaml::Value> =
            serde_yaml::Deserializer::from_str(&yaml).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        assert_eq!(docs.len(), 3, "the Secret and both webhook configurations");
        let v = docs[0].clone();
        for hook in &docs[1..] {
            let config = &hook["webhooks"][0]["clientConfig"];
            assert_eq!(config["service"]["namespace"], "ops");
            assert!(config["caBundle"].as_str().is_some_and(|b| !b.is_empty()), "trusting the Secret's CA");
        }
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
        let args = WebhookCertArgs {
            service: "hook".into(),
            secret: "x".into(),
            configuration: "kwok-pools".into(),
            secret_only: true,
        };
        assert!(secret_yaml(&args).unwrap_err().to_string().contains("NAMESPACE/NAME"));
    }
}
