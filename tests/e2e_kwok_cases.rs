//! kwok's own end-to-end cases (kubernetes-sigs/kwok `test/e2e/cases.go`, v0.8.0), run
//! against kwok-pools: a node made by hand as kwok's helper builds it comes up Ready and can be
//! deleted; pods bound to it by name (an init container, a sidecar and a container; and one on
//! the host network) become Ready with the addresses kwok's helper checks, and can be deleted.
//! kwok's Stage, JSON-patch and volume-provisioner cases test its Stage API, which kwok-pools
//! replaces with typed knobs (see the README's lifecycle tables).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::*;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams};
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// kwok's NodeBuilder: the fake-node annotation, the resource-metrics path, `type: kwok`, and
/// podCIDR 10.10.0.0/24 (plus the test's scope label, so only this test's operator takes it).
fn kwok_node(name: &str, scope: &str) -> String {
    format!(
        "apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations: {{kwok.x-k8s.io/node: fake, metrics.k8s.io/resource-metrics-path: /metrics/nodes/{name}/metrics/resource}}
  labels: {{type: kwok, {SCOPE_LABEL}: {scope}}}
spec:
  podCIDR: 10.10.0.0/24
"
    )
}

/// kwok's PodBuilder: an init container, a sidecar (a restartable init container) and a
/// container, bound to `node` by name.
fn kwok_pod(name: &str, ns: &str, node: &str, host_network: bool) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  nodeName: {node}
  hostNetwork: {host_network}
  initContainers:
  - {{name: init, image: image}}
  - {{name: sidecar, image: image, restartPolicy: Always}}
  containers:
  - {{name: container, image: image}}
"
    )
}

fn condition(p: &Pod, type_: &str) -> Option<String> {
    let conditions = p.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

/// kwok's CreatePod check: Ready, on a node, and a pod IP that is the host IP on the host
/// network and otherwise another address, inside the node's podCIDR.
async fn assert_created(client: &kube::Client, ns: &str, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(&format!("pod {name} Ready"), T, || async {
        let p = pods.get(name).await.map_err(|e| e.to_string())?;
        if condition(&p, "Ready").as_deref() == Some("True") {
            Ok(p)
        } else {
            Err(format!("{:?}", condition(&p, "Ready")))
        }
    })
    .await;
    let spec = pod.spec.as_ref().unwrap();
    let node_name = spec.node_name.clone().expect("a node name");
    let status = pod.status.as_ref().unwrap();
    let (pod_ip, host_ip) = (status.pod_ip.clone().expect("a pod IP"), status.host_ip.clone().expect("a host IP"));
    if spec.host_network == Some(true) {
        assert_eq!(pod_ip, host_ip, "{name}: a host-network pod has its node's address");
    } else {
        assert_ne!(pod_ip, host_ip, "{name}: a pod has an address of its own");
        let node: Node = Api::<Node>::all(client.clone()).get(&node_name).await.unwrap();
        let cidr: IpNet = node.spec.unwrap().pod_cidr.unwrap().parse().unwrap();
        assert!(cidr.contains(&pod_ip.parse::<IpAddr>().unwrap()), "{name}: {pod_ip} outside {cidr}");
    }
    // Every container ran: the init container completed, the sidecar and the container run.
    let init = status.init_container_statuses.clone().unwrap_or_default();
    let state = |n: &str| init.iter().find(|c| c.name == n).and_then(|c| c.state.clone()).unwrap();
    assert_eq!(state("init").terminated.map(|t| t.exit_code), Some(0));
    assert!(state("sidecar").running.is_some());
    assert!(status.container_statuses.as_ref().unwrap()[0].ready);
}

async fn assert_deleted<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for(&format!("{name} deleted"), T, || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|o| o.is_some()))),
        }
    })
    .await;
}

#[tokio::test]
async fn kwoks_node_and_pod_cases() {
    let client = client().await;
    let scope = unique("kwokcase");
    let ns = TestNamespace::new(&client, "kwokcase").await;
    let _op = Operator::start(&scope, &[]);
    let node = unique("kwok-node");
    let nodes: Api<Node> = Api::all(client.clone());

    // CaseNode / CasePod's setup: the node is created and becomes Ready.
    apply(&kwok_node(&node, &scope));
    wait_for("the node Ready", T, || async {
        let n = nodes.get(&node).await.map_err(|e| e.to_string())?;
        let ready = n.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Ready");
        if ready.is_some_and(|c| c.status == "True") { Ok(()) } else { Err("not Ready".into()) }
    })
    .await;

    // CasePod: create pod, create pod for host network, delete both.
    apply(&kwok_pod("pod0", &ns.name, &node, false));
    apply(&kwok_pod("pod1", &ns.name, &node, true));
    assert_created(&client, &ns.name, "pod0").await;
    assert_created(&client, &ns.name, "pod1").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    assert_deleted(&pods, "pod0").await;
    assert_deleted(&pods, "pod1").await;

    // CaseNode: delete node.
    assert_deleted(&nodes, &node).await;
}
