//! Fake accelerators end to end, with the real scheduler and the real ResourceClaim
//! controller: a NodePool's `spec.devices` become one ResourceSlice per node and driver; a
//! DeviceClass with a CEL selector, a ResourceClaimTemplate and a Deployment asking one device
//! per pod fill the devices and no more; scaling down frees them for another Deployment; a
//! change of the pool's devices republishes the slices in place.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams};
use std::collections::HashSet;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A NodePool of 4 nodes, each with `count` devices of `driver` (none: no devices).
fn nodepool(scope: &str, driver: &str, count: Option<u32>) -> String {
    let devices = count.map_or(String::new(), |count| {
        format!(
            "  devices:
  - driver: {driver}
    count: {count}
    attributes: {{model: {{string: A100}}, cores: {{int: 6912}}}}
    capacity: {{memory: 80Gi}}
"
        )
    });
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: NodePool
metadata:
  name: {scope}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  nodeCount: 4
  podCIDR: {{cidr: 10.225.0.0/16, maskSize: 24}}
{devices}  nodeTemplate:
    metadata:
      labels: {{{SCOPE_LABEL}: {scope}}}
"
    )
}

fn deployment(name: &str, ns: &str, scope: &str, replicas: u32) -> String {
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
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]
      containers:
      - name: app
        image: cuda
        resources: {{claims: [{{name: gpu}}]}}
"
    )
}

async fn slices(client: &kube::Client, driver: &str) -> Vec<ResourceSlice> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let all = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    all.into_iter().filter(|s| s.spec.driver == driver).collect()
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// Waits until `app` has `running` pods Running and `pending` Pending.
async fn wait_pods(client: &kube::Client, ns: &str, app: &str, running: usize, pending: usize) -> Vec<Pod> {
    wait_for(&format!("{app}: {running} Running, {pending} Pending"), T, || async {
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

#[tokio::test]
async fn the_scheduler_allocates_simulated_devices_and_no_more() {
    let client = client().await;
    let scope = unique("dra");
    let driver = format!("{scope}.example.com");
    let ns = TestNamespace::new(&client, "dra").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool(&scope, &driver, Some(2)));
    wait_ready_nodes(&client, &scope, 4, T).await;

    // One slice per node, the pool named after the node, two devices with their attributes.
    let published = wait_for("a slice per node", T, || async {
        let s = slices(&client, &driver).await;
        if s.len() == 4 { Ok(s) } else { Err(format!("{} slices", s.len())) }
    })
    .await;
    let nodes: HashSet<String> = published.iter().map(|s| s.spec.node_name.clone().unwrap()).collect();
    assert_eq!(nodes.len(), 4);
    for s in &published {
        assert_eq!(Some(&s.spec.pool.name), s.spec.node_name.as_ref());
        let devices = s.spec.devices.as_ref().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].attributes.as_ref().unwrap()["model"].string.as_deref(), Some("A100"));
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].kind, "Node");
    }

    // A DeviceClass written for the driver, a claim template, 9 pods asking one device each.
    let class = scope.clone();
    apply(&format!(
        "apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {class}}}
spec:
  selectors:
  - cel: {{expression: \"device.driver == '{driver}' && device.attributes['{driver}'].model == 'A100'\"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-gpu, namespace: {ns}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: {class}}}
",
        ns = ns.name
    ));
    apply(&deployment("first", &ns.name, &scope, 9));
    let pods = wait_pods(&client, &ns.name, "first", 8, 1).await;
    let waiting = pods.iter().find(|p| phase(p) == "Pending").unwrap();
    let why = wait_for("the scheduler's reason on the ninth pod", T, || async {
        let p: Pod = Api::namespaced(client.clone(), &ns.name)
            .get(waiting.metadata.name.as_deref().unwrap())
            .await
            .map_err(|e| e.to_string())?;
        let c = p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
        match c.and_then(|c| c.message) {
            Some(m) if m.contains("claim") => Ok(m),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(why.starts_with("0/"), "the scheduler's message: {why}");

    // Each running pod holds a device of its own node; no device twice.
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let all = claims.list(&ListParams::default()).await.unwrap().items;
    let mut held = HashSet::new();
    for pod in pods.iter().filter(|p| phase(p) == "Running") {
        let name = pod.metadata.name.as_deref().unwrap();
        let claim = all
            .iter()
            .find(|c| c.metadata.owner_references.iter().flatten().any(|o| o.name == name))
            .unwrap_or_else(|| panic!("{name} has a claim"));
        let results = claim
            .status
            .as_ref()
            .unwrap()
            .allocation
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .results
            .clone()
            .unwrap();
        assert_eq!(results[0].driver, driver);
        assert_eq!(
            Some(&results[0].pool),
            pod.spec.as_ref().unwrap().node_name.as_ref(),
            "{name}: a device of its node"
        );
        assert!(held.insert((results[0].pool.clone(), results[0].device.clone())), "a device held twice");
    }
    assert_eq!(held.len(), 8);

    // Scaling down frees devices: another Deployment takes them.
    kubectl_ok(&["scale", "deployment", "first", "-n", &ns.name, "--replicas", "4"]);
    wait_pods(&client, &ns.name, "first", 4, 0).await;
    apply(&deployment("second", &ns.name, &scope, 4));
    wait_pods(&client, &ns.name, "second", 4, 0).await;

    // More devices per node: the slices are republished in place with the pool's generation.
    apply(&nodepool(&scope, &driver, Some(3)));
    wait_for("three devices per node at a newer generation", T, || async {
        let s = slices(&client, &driver).await;
        let grown = s
            .iter()
            .filter(|s| s.spec.devices.as_ref().is_some_and(|d| d.len() == 3) && s.spec.pool.generation > 1)
            .count();
        if grown == 4 && s.len() == 4 { Ok(()) } else { Err(format!("{grown} of {}", s.len())) }
    })
    .await;
    kubectl_ok(&["scale", "deployment", "second", "-n", &ns.name, "--replicas", "8"]);
    wait_pods(&client, &ns.name, "second", 8, 0).await;

    // No devices any more: the slices go.
    apply(&nodepool(&scope, &driver, None));
    wait_for("no slice left", T, || async {
        let n = slices(&client, &driver).await.len();
        if n == 0 { Ok(()) } else { Err(format!("{n} slices")) }
    })
    .await;
    kubectl_ok(&["delete", "deviceclass", &class, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
