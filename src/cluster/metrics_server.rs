//! metrics-server in the local cluster: the metrics.k8s.io APIService that sends the API
//! server's metrics requests to it, through an ExternalName Service pointing at loopback (the
//! aggregator dials the Service's name and port; its certificate is the cluster CA's).

use super::error::ClusterError;
use super::layout::Layout;
use base64::Engine;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, Patch};
use std::time::{Duration, Instant};

/// The Service and APIService for metrics-server on `port`, as applied.
pub fn objects(ca_pem: &str, port: u16) -> (serde_json::Value, serde_json::Value) {
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "metrics-server", "namespace": "kube-system", "labels": {"k8s-app": "metrics-server"}},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port, "targetPort": port}]}
    });
    let api_service = serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io", "labels": {"k8s-app": "metrics-server"}},
        "spec": {
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"name": "metrics-server", "namespace": "kube-system", "port": port},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        }
    });
    (service, api_service)
}

/// Applies the Service and APIService and waits until the APIService is Available.
pub async fn register(
    client: &kube::Client,
    layout: &Layout,
    port: u16,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let ca = std::fs::read_to_string(layout.ca_cert())
        .map_err(|e| ClusterError::Other(format!("reading the cluster CA: {e}")))?;
    let (service, api_service) = objects(&ca, port);
    let pp = crate::api::conventions::apply_params();
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch("metrics-server", &pp, &Patch::Apply(&service))
        .await?;
    let api: Api<APIService> = Api::all(client.clone());
    api.patch("v1beta1.metrics.k8s.io", &pp, &Patch::Apply(&api_service)).await?;
    let start = Instant::now();
    let mut reported = Instant::now();
    loop {
        let got = api.get("v1beta1.metrics.k8s.io").await?;
        let available = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Available"));
        if available.is_some_and(|c| c.status == "True") {
            return Ok(());
        }
        let why = available.and_then(|c| c.message.clone()).unwrap_or_else(|| "no Available condition yet".into());
        if Instant::now() >= deadline {
            return Err(ClusterError::Other(format!(
                "the metrics.k8s.io APIService is not Available: {why}; metrics-server's log is {}",
                layout.log(super::Component::MetricsServer).display()
            )));
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            eprintln!("  … waiting for the metrics.k8s.io APIService ({}s): {why}", start.elapsed().as_secs());
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_service_points_at_the_loopback_service_and_trusts_the_cluster_ca() {
        let (svc, apis) = objects("PEM", 4443);
        assert_eq!(svc["spec"]["type"], "ExternalName");
        assert_eq!(svc["spec"]["ports"][0]["port"], 4443);
        assert_eq!(apis["spec"]["service"]["port"], 4443);
        assert_eq!(apis["spec"]["caBundle"], "UEVN");
        let _: APIService = serde_json::from_value(apis).unwrap();
        let _: Service = serde_json::from_value(svc).unwrap();
    }
}
