//! Pods on nodes without a podCIDR, end to end, in a cluster whose controller manager does not
//! allocate node CIDRs (as on EKS, with Calico IPAM, in many kubeadm installs): each node
//! claims a block of the fallback range with a Lease it owns, once, with an event; two
//! simulator replicas never hand out one block twice; a full range is said on the node; the
//! claims go with their nodes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::{self, NodePoolYaml};
use common::*;
use ipnet::IpNet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const CLAIM_LABEL: &str = "pools.kwok.x-k8s.io/pod-cidr-node-uid";
use kwok_pools::kubelet::node::lease::SIMULATOR_ANNOTATION;

fn nodepool(name: &str, scope: &str, count: u32) -> String {
    NodePoolYaml::new(name, scope).count(count).capacity(None).yaml()
}

/// A DaemonSet: one pod on every node of the scope.
fn daemonset(name: &str, ns: &str, scope: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: c, image: nginx}}]
"
    )
}

async fn claims(client: &kube::Client) -> Vec<Lease> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    api.list(&ListParams::default().labels(CLAIM_LABEL)).await.map(|l| l.items).unwrap_or_default()
}

async fn node_events(client: &kube::Client, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("reason={reason}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

#[tokio::test]
async fn nodes_without_a_podcidr_claim_blocks_of_their_own_across_replicas() {
    let cluster = OwnCluster::create(&unique("nocidr"), &["kube-controller-manager=--allocate-node-cidrs=false"]);
    let client = cluster.client().await;
    let kc = cluster.kubeconfig.clone();
    let scope = unique("nocidr");
    let ns = "default";
    // Pool controllers in one process, two simulator replicas of one instance sharing the
    // nodes; a fallback range of 16 blocks, so that claims meet.
    let mut controllers = Operator::start_as(&scope, &["--no-simulator"], kc.clone());
    controllers.wait_ready().await;
    let fallback =
        ["--pod-cidr-fallback", "10.20.0.1/20", "--pod-cidr-fallback-mask", "24", "--pod-cidr-fallback-after", "3s"];
    let sim = |id: &'static str| {
        let mut flags = vec!["--simulate-only", "--identity", id];
        flags.extend(fallback);
        Operator::start_as(&scope, &flags, kc.clone())
    };
    let mut sims = [sim("sim-a"), sim("sim-b")];
    for s in &mut sims {
        s.wait_ready().await;
    }
    cluster.apply(&nodepool(&scope, &scope, 12));
    pools::wait_ready_nodes(&client, &scope, 12, T).await;
    cluster.apply(&daemonset("one", ns, &scope));
    cluster.apply(&daemonset("two", ns, &scope));

    let range: IpNet = "10.20.0.0/20".parse().unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let all = wait_for("24 DaemonSet pods Running with addresses", T, || async {
        let all = pods.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let up = all.iter().filter(|p| running(p) && p.status.as_ref().unwrap().pod_ip.is_some()).count();
        if up == 24 { Ok(all) } else { Err(format!("{up} of {} Running with an IP", all.len())) }
    })
    .await;

    // Each node's pods are in one /24 of the range; no two nodes share one.
    let mut blocks: BTreeMap<String, HashSet<IpNet>> = BTreeMap::new();
    let mut ips = HashSet::new();
    for p in &all {
        let ip: IpAddr = p.status.as_ref().unwrap().pod_ip.as_ref().unwrap().parse().unwrap();
        assert!(range.contains(&ip), "{ip} outside the fallback range");
        assert!(ips.insert(ip), "{ip} given twice");
        let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
        blocks.entry(node).or_default().insert(IpNet::new(ip, 24).unwrap().trunc());
    }
    assert_eq!(blocks.len(), 12);
    let mut seen = HashSet::new();
    for (node, b) in &blocks {
        assert_eq!(b.len(), 1, "{node}'s pods are in one block: {b:?}");
        assert!(seen.insert(*b.iter().next().unwrap()), "{node}'s block is another node's too");
    }
    // Both replicas simulate some of the nodes (so both gave blocks): their node leases say who.
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let simulators: HashSet<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|l| blocks.contains_key(l.metadata.name.as_deref().unwrap_or_default()))
        .filter_map(|l| l.metadata.annotations.as_ref()?.get(SIMULATOR_ANNOTATION).cloned())
        .collect();
    assert_eq!(simulators.len(), 2, "both replicas hold nodes: {simulators:?}");

    // One claim Lease per node, owned by it, naming its block; one event per node.
    let nodes: HashMap<String, Node> =
        pools::pool_nodes(&client, &scope).await.into_iter().map(|n| (n.metadata.name.clone().unwrap(), n)).collect();
    let leases = claims(&client).await;
    assert_eq!(leases.len(), 12);
    for lease in &leases {
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        let node = &nodes[&owner.name];
        assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
        let block: IpNet =
            lease.metadata.annotations.as_ref().unwrap()["pools.kwok.x-k8s.io/pod-cidr"].parse().unwrap();
        assert!(blocks[&owner.name].contains(&block), "the lease names {}'s block", owner.name);
        assert!(node.spec.as_ref().unwrap().pod_cidr.is_none(), "the node's spec is left alone");
    }
    let events = wait_for("an event on each node", T, || async {
        let e = node_events(&client, "NodeHasNoPodCIDR").await;
        let on: HashSet<String> = e.iter().filter_map(|e| e.involved_object.name.clone()).collect();
        if on.len() == 12 { Ok(e) } else { Err(format!("{} of 12 nodes", on.len())) }
    })
    .await;
    assert!(events.iter().all(|e| e.count.unwrap_or(1) == 1), "once per node");
    let note = events[0].message.clone().unwrap_or_default();
    assert!(note.contains("--pod-cidr-fallback 10.20.0.0/20"), "{note}");

    // A replica restarted keeps its nodes' blocks (its pods' addresses stay valid).
    sims[0].stop();
    sims[0].start_again();
    sims[0].wait_ready().await;
    cluster.apply(&daemonset("three", ns, &scope));
    wait_for("the new DaemonSet's pods in their nodes' blocks", T, || async {
        let all = pods.list(&ListParams::default().labels("app=three")).await.map_err(|e| e.to_string())?.items;
        let mut placed = 0;
        for p in all.iter().filter(|p| running(p)) {
            let Some(ip) = p.status.as_ref().unwrap().pod_ip.as_ref() else { continue };
            let ip: IpAddr = ip.parse().unwrap();
            let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
            assert!(blocks[&node].contains(&IpNet::new(ip, 24).unwrap().trunc()), "{node}: {ip} outside its block");
            placed += 1;
        }
        if placed == 12 { Ok(()) } else { Err(format!("{placed} of 12")) }
    })
    .await;
    assert_eq!(claims(&client).await.len(), 12, "no second claim after the restart");

    // More nodes than blocks: four get none, and each of them says so.
    kubectl_with(&kc, &["scale", "nodepool", &scope, "--replicas", "20"]);
    pools::wait_ready_nodes(&client, &scope, 20, T).await;
    wait_for("16 blocks claimed, 4 nodes told the range is full", T, || async {
        let (held, full) = (claims(&client).await.len(), node_events(&client, "PodCIDRFallbackFull").await.len());
        if held == 16 && full == 4 { Ok(()) } else { Err(format!("{held} claims, {full} full")) }
    })
    .await;
    let full = node_events(&client, "PodCIDRFallbackFull").await;
    let note = full[0].message.clone().unwrap_or_default();
    assert!(note.contains("larger --pod-cidr-fallback"), "what to do: {note}");

    // Claims go with their nodes.
    kubectl_with(&kc, &["scale", "nodepool", &scope, "--replicas", "3"]);
    wait_for("the claims of deleted nodes gone", T, || async {
        let names: HashSet<String> =
            pools::pool_nodes(&client, &scope).await.into_iter().filter_map(|n| n.metadata.name).collect();
        let held: Vec<String> = claims(&client)
            .await
            .iter()
            .map(|l| l.metadata.owner_references.as_ref().unwrap()[0].name.clone())
            .collect();
        if names.len() == 3 && held.iter().all(|n| names.contains(n)) { Ok(()) } else { Err(format!("{held:?}")) }
    })
    .await;
}

fn kubectl_with(kubeconfig: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new(kubectl_bin()).args(args).env("KUBECONFIG", kubeconfig).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}
