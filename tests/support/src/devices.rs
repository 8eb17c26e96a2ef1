//! Dynamic Resource Allocation in tests: NodePools with devices, claim templates, Deployments
//! whose pods claim devices, and what the real scheduler made of them.

use crate::pools::list_pods;
use crate::{SCOPE_LABEL, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams};
use std::collections::HashSet;
use std::time::Duration;

/// A NodePool of `nodes` nodes with `devices` (the `spec.devices` lines).
/// (`net`: the second octet of its 10.x.0.0/16 podCIDR, one per test).
pub fn pool_with(scope: &str, nodes: u32, devices: &str, net: u8) -> String {
    crate::pools::NodePoolYaml::new(scope, scope)
        .count(nodes)
        .pod_cidr(&format!("10.{net}.0.0/16"), 24)
        .capacity(None)
        .spec(devices)
        .yaml()
}

/// A ResourceClaimTemplate `name` asking one device of `class` (and `capacity`, if any).
pub fn claim_template(ns: &str, name: &str, class: &str, capacity: &str) -> String {
    let capacity =
        if capacity.is_empty() { String::new() } else { format!(", capacity: {{requests: {{{capacity}}}}}") };
    format!(
        "apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {{deviceClassName: {class}{capacity}}}
"
    )
}

/// A Deployment of `replicas` pods on the scope's nodes, each with a claim from `template`.
pub fn claiming(name: &str, ns: &str, scope: &str, replicas: u32, template: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]
      containers:
      - name: app
        image: cuda
        resources: {{claims: [{{name: gpu}}]}}
"
    )
}

pub fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// Waits until `app` has `running` pods Running and `pending` Pending.
pub async fn wait_pods(
    client: &kube::Client,
    ns: &str,
    app: &str,
    running: usize,
    pending: usize,
    within: Duration,
) -> Vec<Pod> {
    wait_for(&format!("{app}: {running} Running, {pending} Pending"), within, || async {
        let pods = list_pods(client, ns, &format!("app={app}")).await;
        let live: Vec<Pod> = pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let (r, p) = (
            live.iter().filter(|p| phase(p) == "Running").count(),
            live.iter().filter(|p| phase(p) == "Pending").count(),
        );
        if (r, p) == (running, pending) { Ok(live) } else { Err(format!("{r} Running, {p} Pending")) }
    })
    .await
}

/// Waits until `n` live pods of `app` are refused by the scheduler (PodScheduled=False).
pub async fn wait_unschedulable(client: &kube::Client, ns: &str, app: &str, n: usize, within: Duration) {
    wait_for(&format!("{app}: {n} pods the scheduler cannot place"), within, || async {
        let pods = list_pods(client, ns, &format!("app={app}")).await;
        let refused = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
            })
            .count();
        if refused == n { Ok(()) } else { Err(format!("{refused} refused")) }
    })
    .await;
}

/// The devices the claims of `app`'s running pods hold, as (node, device).
pub async fn held(client: &kube::Client, ns: &str, app: &str) -> Vec<(String, String)> {
    let pods = list_pods(client, ns, &format!("app={app}")).await;
    let running: HashSet<String> =
        pods.iter().filter(|p| phase(p) == "Running").filter_map(|p| p.metadata.name.clone()).collect();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for c in claims.list(&ListParams::default()).await.unwrap().items {
        if !c.metadata.owner_references.iter().flatten().any(|o| running.contains(&o.name)) {
            continue;
        }
        let results = c.status.and_then(|s| s.allocation).and_then(|a| a.devices).and_then(|d| d.results);
        out.extend(results.into_iter().flatten().map(|r| (r.pool, r.device)));
    }
    out.sort();
    out
}
