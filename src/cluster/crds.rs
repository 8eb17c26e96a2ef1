//! Talking to the new API server: the default ServiceAccount check and CRD installation.

use super::component::Component;
use super::error::ClusterError;
use super::layout::Layout;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;
use std::time::{Duration, Instant};

/// A client for the kubeconfig at `path`.
pub async fn client(path: &Path) -> Result<kube::Client, ClusterError> {
    let kc =
        Kubeconfig::read_from(path).map_err(|e| ClusterError::Other(format!("reading {}: {e}", path.display())))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClusterError::Other(format!("loading {}: {e}", path.display())))?;
    Ok(kube::Client::try_from(config)?)
}

/// The controller manager creates the `default` ServiceAccount in each namespace; pods cannot
/// be created before it exists.
pub async fn wait_default_service_account(
    name: &str,
    client: &kube::Client,
    layout: &Layout,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    loop {
        match api.get_opt("default").await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => tracing::debug!("waiting for default ServiceAccount: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(super::probe::timeout(
                name,
                Component::KubeControllerManager,
                layout,
                start.elapsed(),
                "the default ServiceAccount was not created".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Installs (server-side apply, so size is no issue) every CRD of the project and waits until
/// each is Established.
pub async fn install(client: &kube::Client, deadline: Instant) -> Result<(), ClusterError> {
    install_crds(client, crate::kinds::crds(), deadline).await
}

pub async fn install_crds(
    client: &kube::Client,
    crds: Vec<CustomResourceDefinition>,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = crate::api::conventions::apply_params();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(crd)).await?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let got = api.get(&name).await?;
            let established = got
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::Other(format!(
                    "CRD {name} was not Established in time; `kubectl get crd {name} -o yaml` shows why"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
