//! Karpenter drives kwok-pools: Karpenter's own kwok cloud provider (built from the
//! `sigs.k8s.io/karpenter` module by `make karpenter`) runs out of cluster against a local
//! cluster of the test's own (its `nodepools.karpenter.sh` would otherwise share the short name
//! `nodepool` with this project's NodePool in the shared e2e cluster), creates Nodes for pending
//! pods as a cloud would, and kwok-pools — with no pool at all, selecting nodes by kwok's
//! annotation as by default — makes them Ready, runs their pods and keeps what Karpenter wrote.
//! Karpenter then repairs a node kwok's chaos label makes unhealthy and consolidates the empty
//! nodes away.
//!
//! Needs `make controlplane karpenter` (bin/karpenter-kwok, bin/karpenter-crds/).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(300);
const REPLICAS: usize = 100;

/// Karpenter's kwok provider, killed when dropped.
struct Karpenter {
    child: Child,
    log: PathBuf,
}

impl Karpenter {
    fn start(kubeconfig: &std::path::Path) -> Self {
        let bin = repo().join("bin/karpenter-kwok");
        assert!(bin.exists(), "{} is missing: run `make karpenter`", bin.display());
        let [metrics, health] = free_ports();
        let log = std::env::var_os("E2E_LOG_DIR").map_or_else(std::env::temp_dir, PathBuf::from).join("karpenter.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            // Out of cluster, as Karpenter's own docs run it for development: no leader election
            // (it needs an in-cluster namespace), its ports free ones, node repair on.
            .env("KUBECONFIG", kubeconfig)
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("FEATURE_GATES", "NodeRepair=true")
            .env("LOG_LEVEL", "info")
            .env("BATCH_MAX_DURATION", "2s")
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("starting Karpenter");
        eprintln!("  Karpenter started (log {})", log.display());
        Self { child, log }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Karpenter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kubectl` against the test's cluster; must succeed.
fn kc(cluster: &OwnCluster, args: &[&str]) -> String {
    let out = Command::new(kubectl_bin()).args(args).env("KUBECONFIG", &cluster.kubeconfig).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn deployment(replicas: usize) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: inflate, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: inflate}}}}
  template:
    metadata: {{labels: {{app: inflate}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: inflate
        image: registry.k8s.io/pause:3.10
        resources: {{requests: {{cpu: '1', memory: 1Gi}}}}
"
    )
}

/// The nodes Karpenter made (they carry its NodePool's label).
async fn karpenter_nodes(client: &kube::Client) -> Vec<Node> {
    let lp = ListParams::default().labels("karpenter.sh/nodepool=default");
    Api::<Node>::all(client.clone()).list(&lp).await.map(|l| l.items).unwrap_or_default()
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn running_pods(client: &kube::Client) -> Vec<Pod> {
    let lp = ListParams::default().labels("app=inflate");
    let pods = Api::<Pod>::namespaced(client.clone(), "default").list(&lp).await.map(|l| l.items).unwrap_or_default();
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

#[tokio::test]
async fn karpenter_provisions_simulated_nodes_repairs_them_and_consolidates_them_away() {
    let cluster = OwnCluster::create("karpenter", &["kube-controller-manager=--node-monitor-grace-period=20s"]);
    let client = cluster.client().await;
    let crds = repo().join("bin/karpenter-crds");
    assert!(crds.exists(), "{} is missing: run `make karpenter`", crds.display());
    kc(&cluster, &["apply", "--server-side", "-f", &format!("{}/", crds.display())]);
    kc(&cluster, &["wait", "--for=condition=Established", "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh"]);
    // The sample (a KWOKNodeClass and a karpenter.sh NodePool), on 4-CPU instances only so the
    // pods need a few dozen nodes.
    cluster.apply(&std::fs::read_to_string(repo().join("samples/karpenter.yaml")).unwrap());
    let small = r#"[{"op": "add", "path": "/spec/template/spec/requirements/-",
        "value": {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["4"]}}]"#;
    kc(&cluster, &["patch", "nodepools.karpenter.sh", "default", "--type", "json", "-p", small]);
    // kwok-pools with no pool, as a user runs it (the default instance and node selection): it
    // simulates the nodes kwok's annotation marks, Karpenter's too.
    let scope = unique("karpenter");
    let _op = Operator::start_as(&scope, &["--default-manage", "--instance", "kwok-pools"], cluster.kubeconfig.clone());
    let karpenter = Karpenter::start(&cluster.kubeconfig);

    // Pending pods → Karpenter creates nodes → kwok-pools makes them Ready → the pods run.
    cluster.apply(&deployment(REPLICAS));
    let t0 = Instant::now();
    wait_for(&format!("{REPLICAS} pods Running on Karpenter's nodes"), T, || async {
        let running = running_pods(&client).await.len();
        let nodes = karpenter_nodes(&client).await;
        let ready_nodes = nodes.iter().filter(|n| ready(n)).count();
        if running == REPLICAS {
            Ok(())
        } else {
            Err(format!(
                "{running} Running; {} nodes, {ready_nodes} Ready; Karpenter: {}",
                nodes.len(),
                karpenter.log_tail().lines().last().unwrap_or_default()
            ))
        }
    })
    .await;
    eprintln!("  {REPLICAS} pods Running after {:?}", t0.elapsed());
    // Karpenter marks each node initialized once it is Ready (its startup taints gone).
    let nodes = wait_for("Karpenter to mark every node initialized", T, || async {
        let nodes = karpenter_nodes(&client).await;
        let labelled = |n: &Node, k: &str| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(k));
        let waiting = nodes.iter().filter(|n| !labelled(n, "karpenter.sh/initialized")).count();
        if waiting == 0 && !nodes.is_empty() { Ok(nodes) } else { Err(format!("{waiting} of {} not yet", nodes.len())) }
    })
    .await;
    assert!(nodes.len() >= REPLICAS / 3, "4-CPU nodes hold 3 pods of 1 CPU: {} nodes", nodes.len());
    let claims = kc(&cluster, &["get", "nodeclaims.karpenter.sh", "-o", "json"]);
    let claims: serde_json::Value = serde_json::from_str(&claims).unwrap();
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        assert!(ready(node), "{name} is Ready");
        let spec = node.spec.clone().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some(format!("kwok://{name}").as_str()), "Karpenter's providerID kept");
        let labels = node.metadata.labels.clone().unwrap();
        for key in ["karpenter.sh/registered", "karpenter.sh/initialized", "node.kubernetes.io/instance-type"] {
            assert!(labels.contains_key(key), "{name} lacks {key}: {labels:?}");
        }
        let taints = spec.taints.unwrap_or_default();
        assert!(taints.iter().all(|t| t.key != "karpenter.sh/unregistered"), "Karpenter removed its taint: {taints:?}");
        // The allocatable Karpenter's instance type gave is what the node shows (never our default).
        let claim = claims["items"].as_array().unwrap().iter().find(|c| c["status"]["nodeName"] == name.as_str());
        let claim = claim.unwrap_or_else(|| panic!("a NodeClaim for {name}"));
        let allocatable = node.status.as_ref().unwrap().allocatable.clone().unwrap();
        assert_eq!(allocatable["cpu"].0, claim["status"]["allocatable"]["cpu"].as_str().unwrap(), "{name}");
        assert_eq!(allocatable["pods"].0, claim["status"]["allocatable"]["pods"].as_str().unwrap(), "{name}");
    }

    // A node kwok's chaos label makes unhealthy (Ready=False, KWOKUnhealthy=True, as Karpenter's
    // own kwok stages do) is replaced by Karpenter's node repair (30 s toleration), and the
    // pods it held run again elsewhere.
    let sick = nodes[0].metadata.name.clone().unwrap();
    kc(&cluster, &["annotate", "node", &sick, "node-not-ready.stage.kwok.x-k8s.io/type=KWOKUnhealthy"]);
    kc(&cluster, &["label", "node", &sick, "node-not-ready.stage.kwok.x-k8s.io=true"]);
    let before: BTreeSet<String> = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
    wait_for(&format!("Karpenter to replace the unhealthy node {sick}"), T, || async {
        let now = karpenter_nodes(&client).await;
        let names: BTreeSet<String> = now.iter().filter_map(|n| n.metadata.name.clone()).collect();
        let running = running_pods(&client).await.len();
        if !names.contains(&sick) && running == REPLICAS {
            Ok(())
        } else {
            let new = names.difference(&before).count();
            Err(format!("{sick} still there: {}; {new} new nodes; {running} Running", names.contains(&sick)))
        }
    })
    .await;
    let now = karpenter_nodes(&client).await;
    assert!(now.iter().all(ready), "every node Ready after the repair");

    // Scaled to zero: Karpenter consolidates, and every node it made goes.
    cluster.apply(&deployment(0));
    wait_for("Karpenter to remove every node it made", T, || async {
        let left = karpenter_nodes(&client).await.len();
        if left == 0 { Ok(()) } else { Err(format!("{left} nodes left")) }
    })
    .await;
    let leases = kc(&cluster, &["get", "leases", "-n", "kube-node-lease", "-o", "name"]);
    assert!(leases.trim().is_empty(), "the removed nodes' leases go with them: {leases}");
}
