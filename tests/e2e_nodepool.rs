//! NodePool end to end: the sample, scaling, template edits, hand-deleted and foreign nodes,
//! heartbeats across an operator outage. kubectl is the client where a user would use it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use std::collections::HashSet;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

fn pod_cidr(n: &Node) -> String {
    n.spec.as_ref().and_then(|s| s.pod_cidr.clone()).unwrap_or_default()
}

fn internal_ip(n: &Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default()
}

fn hostname(n: &Node) -> String {
    n.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "Hostname"))
        .map(|a| a.address.clone())
        .unwrap_or_default()
}

/// The Ready condition's lastHeartbeatTime.
fn heartbeat(n: &Node) -> Option<k8s_openapi::jiff::Timestamp> {
    let conditions = n.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conditions.iter().find(|c| c.type_ == "Ready").and_then(|c| c.last_heartbeat_time.clone()).map(|t| t.0)
}

async fn wait_podcidrs(client: &kube::Client, pool: &str, count: usize) -> Vec<Node> {
    wait_for("podCIDRs on every node", T, || async {
        let nodes = pool_nodes(client, pool).await;
        if nodes.len() == count && nodes.iter().all(|n| !pod_cidr(n).is_empty()) {
            Ok(nodes)
        } else {
            Err(format!("{:?}", nodes.iter().map(pod_cidr).collect::<Vec<_>>()))
        }
    })
    .await
}

#[tokio::test]
async fn the_sample_gives_ready_nodes_that_scale_and_go_away() {
    let client = client().await;
    let scope = unique("sample");
    let _op = Operator::start(&scope, &[]);
    let pool = "nodepool-sample";
    delete_quietly("nodepool", pool);
    wait_for("an old nodepool-sample to be gone", T, || async {
        if pool_nodes(&client, pool).await.is_empty() { Ok(()) } else { Err("nodes left".into()) }
    })
    .await;
    apply(&scoped_sample(&read_repo_file("samples/nodepool.yaml"), &scope));

    wait_ready_nodes(&client, pool, 3, T).await;
    let nodes = wait_podcidrs(&client, pool, 3).await;
    let distinct = |f: fn(&Node) -> String| nodes.iter().map(f).collect::<HashSet<_>>().len();
    assert_eq!(distinct(hostname), 3, "distinct hostnames");
    assert_eq!(distinct(pod_cidr), 3, "distinct podCIDRs");
    assert_eq!(distinct(internal_ip), 3, "distinct InternalIPs");
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap();
        assert!(!internal_ip(n).is_empty(), "{name} has an InternalIP");
        // The Hostname address is where its kubelet API answers (the API server and
        // metrics-server try it first): locally, a loopback address of its own.
        let at: std::net::Ipv4Addr = hostname(n).parse().expect("the Hostname address is an IP");
        assert!(at.octets()[0] == 127 && at.octets()[1] >= 128, "{name}: {at}");
        let labels = n.metadata.labels.clone().unwrap();
        assert_eq!(labels["type"], "kwok");
        assert_eq!(labels["kubernetes.io/hostname"], name);
        assert_eq!(labels["kubernetes.io/role"], "agent", "template labels are copied");
        assert_eq!(n.metadata.annotations.as_ref().unwrap()["kwok.x-k8s.io/node"], "fake");
        let taints = n.spec.as_ref().unwrap().taints.clone().unwrap_or_default();
        assert!(
            taints.iter().any(|t| t.key == "kwok.x-k8s.io/node"
                && t.value.as_deref() == Some("fake")
                && t.effect == "NoSchedule")
        );
        let cap = n.status.as_ref().unwrap().capacity.clone().unwrap();
        assert_eq!(cap["memory"].0, "256Gi");
        wait_lease(&client, &name).await;
    }

    // kubectl shows them the way a user expects.
    let wide = kubectl_ok(&["get", "nodes", "-o", "wide", "-l", &format!("pools.kwok.x-k8s.io/pool={pool}")]);
    for n in &nodes {
        let name = n.metadata.name.as_deref().unwrap();
        let line = wide.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} missing:\n{wide}"));
        assert!(line.contains(" Ready "), "{line}");
        assert!(line.contains("agent"), "role: {line}");
        assert!(line.contains("fake"), "version: {line}");
        assert!(line.contains(&internal_ip(n)), "INTERNAL-IP: {line}");
    }
    wait_pool_status(&client, pool, 3, T).await;
    let printed = kubectl_ok(&["get", "knp", pool]);
    assert!(printed.contains("DESIRED") && printed.contains("READY") && printed.contains("UP-TO-DATE"), "{printed}");
    assert!(kubectl_ok(&["get", "pools"]).contains(pool), "category pools lists it");

    kubectl_ok(&["scale", "nodepool", pool, "--replicas", "5"]);
    wait_ready_nodes(&client, pool, 5, T).await;
    wait_pool_status(&client, pool, 5, T).await;

    kubectl_ok(&["scale", "nodepool", pool, "--replicas", "1"]);
    wait_ready_nodes(&client, pool, 1, T).await;
    wait_pool_status(&client, pool, 1, T).await;
    let what = "leases of removed nodes to go";
    wait_for(what, T, || async {
        for i in 1..5 {
            if lease(&client, &format!("{pool}-{i}")).await.is_some() {
                return Err(format!("{pool}-{i} still has a lease"));
            }
        }
        Ok(())
    })
    .await;

    kubectl_ok(&["delete", "nodepool", pool]);
    wait_for("nodes and leases of the deleted pool to go", T, || async {
        let left = pool_nodes(&client, pool).await.len();
        let lease_left = lease(&client, &format!("{pool}-0")).await.is_some();
        if left == 0 && !lease_left { Ok(()) } else { Err(format!("{left} nodes, lease left: {lease_left}")) }
    })
    .await;
}

#[tokio::test]
async fn template_edits_reach_every_node_and_deleted_nodes_come_back() {
    let client = client().await;
    let scope = unique("edit");
    let _op = Operator::start(&scope, &[]);
    let pool = scope.clone();
    let ranges = "  podCIDR:\n    cidr: 10.200.0.0/16\n    maskSize: 24\n  internalIPs: 10.201.0.0/24\n";
    // A label the nodes are created with (by POST), removed later by an edit.
    apply(&NodePoolYaml::new(&pool, &scope).count(3).spec(ranges).node_label("born", "here").yaml());
    let nodes = wait_ready_nodes(&client, &pool, 3, T).await;
    assert!(nodes.iter().all(|n| kube::ResourceExt::labels(n).get("born").map(String::as_str) == Some("here")));
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(pod_cidr(n), format!("10.200.{i}.0/24"), "pool podCIDR, i-th subnet");
        assert_eq!(internal_ip(n), format!("10.201.0.{}", i + 1), "pool internalIPs, i-th host");
    }
    let before = wait_pool_status(&client, &pool, 3, T).await;

    // Edit: add a label and an annotation, a taint, change capacity.
    let patch = format!(
        r#"{{"spec":{{"nodeTemplate":{{"metadata":{{"labels":{{"{SCOPE_LABEL}":"{scope}","tier":"gold"}},"annotations":{{"note":"edited"}}}},"spec":{{"taints":[{{"key":"dedicated","value":"x","effect":"NoSchedule"}}]}},"status":{{"capacity":{{"cpu":"16","memory":"64Gi","pods":"50"}}}}}}}}}}"#
    );
    kubectl_ok(&["patch", "nodepool", &pool, "--type", "merge", "-p", &patch]);
    wait_for("every node to carry the edit", T, || async {
        let nodes = pool_nodes(&client, &pool).await;
        let done = nodes.iter().filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            let ann = n.metadata.annotations.clone().unwrap_or_default();
            let taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            let cpu =
                n.status.as_ref().and_then(|s| s.capacity.as_ref()).map(|c| c["cpu"].0.clone()).unwrap_or_default();
            labels.get("tier").map(String::as_str) == Some("gold")
                && ann.get("note").map(String::as_str) == Some("edited")
                && taints.iter().any(|t| t.key == "dedicated")
                && taints.iter().any(|t| t.key == "kwok.x-k8s.io/node")
                && cpu == "16"
                && is_ready(n)
        });
        if nodes.len() == 3 && done.count() == 3 { Ok(()) } else { Err("not yet".into()) }
    })
    .await;
    let after = wait_pool_status(&client, &pool, 3, T).await;
    assert!(after.metadata.generation > before.metadata.generation);
    let uids_after_edit: HashSet<String> =
        pool_nodes(&client, &pool).await.iter().filter_map(|n| n.metadata.uid.clone()).collect();
    let uids_before: HashSet<String> = nodes.iter().filter_map(|n| n.metadata.uid.clone()).collect();
    assert_eq!(uids_before, uids_after_edit, "nodes are patched in place, not replaced");

    // Remove the labels again (one from the edit, one the nodes were created with): they go
    // from the nodes.
    let patch = r#"{"spec":{"nodeTemplate":{"metadata":{"labels":{"tier":null,"born":null}}}}}"#.to_string();
    kubectl_ok(&["patch", "nodepool", &pool, "--type", "merge", "-p", &patch]);
    wait_for("the removed labels to leave every node", T, || async {
        let nodes = pool_nodes(&client, &pool).await;
        let with = nodes
            .iter()
            .filter(|n| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key("tier") || l.contains_key("born")))
            .count();
        if with == 0 && nodes.len() == 3 { Ok(()) } else { Err(format!("{with} nodes still labelled")) }
    })
    .await;

    // A node deleted by hand comes back.
    let victim = format!("{pool}-1");
    let old_uid = pool_nodes(&client, &pool).await[1].metadata.uid.clone();
    kubectl_ok(&["delete", "node", &victim]);
    let nodes = wait_for("the deleted node to come back Ready", T, || async {
        let nodes = pool_nodes(&client, &pool).await;
        let back = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(victim.as_str()));
        match back {
            Some(n) if n.metadata.uid != old_uid && is_ready(n) => Ok(nodes),
            _ => Err("not back yet".into()),
        }
    })
    .await;
    assert_eq!(nodes.len(), 3);
    assert_eq!(pod_cidr(&nodes[1]), "10.200.1.0/24", "identity follows the index");
    wait_pool_status(&client, &pool, 3, T).await;
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}

#[tokio::test]
async fn a_foreign_node_with_a_child_name_is_never_adopted() {
    let client = client().await;
    let scope = unique("foreign");
    let _op = Operator::start(&scope, &[]);
    let pool = scope.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let foreign = Node {
        metadata: ObjectMeta {
            name: Some(format!("{pool}-1")),
            labels: Some(
                [("owner".to_string(), "someone-else".to_string()), (SCOPE_LABEL.to_string(), scope.clone())].into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    let foreign_uid = nodes.create(&PostParams::default(), &foreign).await.unwrap().metadata.uid;
    assert!(foreign_uid.is_some());
    apply(&nodepool_yaml(&pool, &scope, 3, ""));

    let p = wait_for("a NameConflict condition", T, || async {
        let p = get_pool(&client, &pool).await;
        let d = p.status.as_ref().and_then(|s| s.condition("Degraded")).cloned();
        match d {
            Some(c) if c.status == "True" && c.reason == "NameConflict" => Ok((p, c)),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(p.1.message.contains(&format!("{pool}-1")), "{}", p.1.message);
    // The other two are made; the foreign one is untouched.
    wait_for("nodes 0 and 2 Ready", T, || async {
        let all = nodes.list(&Default::default()).await.map_err(|e| e.to_string())?.items;
        let ours: Vec<&Node> = all
            .iter()
            .filter(|n| n.metadata.name == Some(format!("{pool}-0")) || n.metadata.name == Some(format!("{pool}-2")))
            .filter(|n| is_ready(n))
            .collect();
        if ours.len() == 2 { Ok(()) } else { Err(format!("{} ready", ours.len())) }
    })
    .await;
    let still = nodes.get(&format!("{pool}-1")).await.unwrap();
    assert_eq!(still.metadata.uid, foreign_uid, "the very node created by someone else, not a replacement");
    assert!(still.metadata.owner_references.unwrap_or_default().is_empty(), "not adopted");
    let labels = still.metadata.labels.unwrap();
    assert_eq!(labels.get("owner").map(String::as_str), Some("someone-else"));
    assert!(!labels.contains_key("pools.kwok.x-k8s.io/pool"), "not overwritten");
    assert!(still.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none_or(|c| c.is_empty()), "not simulated");

    // Once the foreign node goes, the pool makes its own.
    nodes.delete(&format!("{pool}-1"), &DeleteParams::default()).await.unwrap();
    wait_ready_nodes(&client, &pool, 3, T).await;
    let p = wait_pool_status(&client, &pool, 3, T).await;
    assert_eq!(p.status.unwrap().condition("Degraded").unwrap().status, "False");
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}

/// The Degraded condition of `pool` once its reason is `reason`.
async fn wait_degraded(client: &kube::Client, pool: &str, reason: &str, timeout: Duration) -> String {
    wait_for(&format!("Degraded {reason}"), timeout, || async {
        let p = get_pool(client, pool).await;
        match p.status.as_ref().and_then(|s| s.condition("Degraded")).cloned() {
            Some(c) if c.reason == reason => Ok(c.message),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_second_simulator_renewing_the_same_leases_is_reported_on_the_pool() {
    let client = client().await;
    let scope = unique("twosim");
    let op = Operator::start(&scope, &[]);
    let pool = scope.clone();
    apply(&nodepool_yaml(&pool, &scope, 2, ""));
    wait_ready_nodes(&client, &pool, 2, T).await;
    let node = format!("{pool}-1");
    wait_lease(&client, &node).await;
    // Another simulator (as kwok-controller writes them: its own field manager) renews node
    // 1's Lease beside the operator.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (leases, node, stop) = (leases.clone(), node.clone(), stop.clone());
        tokio::spawn(async move {
            let pp = kube::api::PatchParams { field_manager: Some("kwok-controller".into()), ..Default::default() };
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now =
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now());
                let patch = serde_json::json!({"spec": {"renewTime": now}});
                let _ = leases.patch(&node, &pp, &kube::api::Patch::Merge(&patch)).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    let message = wait_degraded(&client, &pool, "SimulatorConflict", T).await;
    assert!(message.contains("kwok-controller") && message.contains(&node), "{message}");
    assert!(message.contains("--no-simulator") && message.contains("--manage-nodes-with-label-selector"), "{message}");
    assert!(!message.contains(&format!("{pool}-0")), "node 0 has one simulator: {message}");
    let metrics = op.metrics().await;
    assert!(metrics.contains("kwok_pools_simulator_foreign_lease_holders 1"), "{metrics}");
    let events = kubectl_ok(&["get", "events", "-A", "--field-selector", &format!("involvedObject.name={pool}")]);
    assert!(events.contains("SimulatorConflict"), "{events}");
    // The other one goes: after three quiet lease durations the pool is well again.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = other.await;
    wait_for("Degraded False again", Duration::from_secs(150), || async {
        let p = get_pool(&client, &pool).await;
        match p.status.as_ref().and_then(|s| s.condition("Degraded")) {
            Some(c) if c.status == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(op.metrics().await.contains("kwok_pools_simulator_foreign_lease_holders 0"));
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}

#[tokio::test]
async fn nodes_outlive_the_grace_period_go_not_ready_without_the_operator_and_recover() {
    let client = client().await;
    let scope = unique("beat");
    let mut op = Operator::start(&scope, &[]);
    let pool = scope.clone();
    apply(&nodepool_yaml(&pool, &scope, 3, ""));
    let nodes = wait_ready_nodes(&client, &pool, 3, T).await;
    let uids: HashSet<String> = nodes.iter().filter_map(|n| n.metadata.uid.clone()).collect();

    // Longer than the node-monitor grace period: still Ready, leases fresh.
    let grace = node_grace_period();
    eprintln!("  holding for {:?} (grace period {:?})", grace + Duration::from_secs(10), grace);
    tokio::time::sleep(grace + Duration::from_secs(10)).await;
    for n in pool_nodes(&client, &pool).await {
        let name = n.metadata.name.clone().unwrap();
        assert!(is_ready(&n), "{name} is {}", ready_condition(&n));
        let age = lease_age(&client, &name).await.unwrap();
        assert!(age < 10.0, "{name}'s lease is {age:.1}s old (renewed every 5s)");
    }

    op.stop();
    let what = "the controller manager to mark the nodes NotReady";
    wait_for(what, grace + Duration::from_secs(40), || async {
        let nodes = pool_nodes(&client, &pool).await;
        let states: Vec<String> = nodes.iter().map(ready_condition).collect();
        if states.iter().all(|s| s == "Unknown" || s == "False") { Ok(()) } else { Err(format!("{states:?}")) }
    })
    .await;

    op.restart();
    let nodes = wait_ready_nodes(&client, &pool, 3, T).await;
    let after: HashSet<String> = nodes.iter().filter_map(|n| n.metadata.uid.clone()).collect();
    assert_eq!(uids, after, "the same nodes, no duplicates");
    // No orphans: every lease belongs to a live node of the pool.
    for n in &nodes {
        let l = lease(&client, n.metadata.name.as_deref().unwrap()).await.expect("lease");
        let owner = &l.metadata.owner_references.unwrap()[0];
        assert_eq!(Some(&owner.uid), n.metadata.uid.as_ref());
    }
    wait_pool_status(&client, &pool, 3, T).await;
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}

#[tokio::test]
async fn a_hand_made_annotated_node_is_kept_ready() {
    let client = client().await;
    let scope = unique("hand");
    let _op = Operator::start(&scope, &[]);
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("{scope}-manual");
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(SCOPE_LABEL.to_string(), scope.clone())].into()),
            annotations: Some([("kwok.x-k8s.io/node".to_string(), "fake".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let n = wait_for("the hand-made node to become Ready", T, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        if is_ready(&n) { Ok(n) } else { Err(ready_condition(&n)) }
    })
    .await;
    let s = n.status.unwrap();
    assert!(s.addresses.unwrap().iter().any(|a| a.type_ == "InternalIP"));
    assert!(s.allocatable.is_some() && s.capacity.is_some());
    let first = wait_for("the node's lease", T, || async {
        lease(&client, &name).await.and_then(|l| l.spec?.renew_time).ok_or("no lease yet".to_string())
    })
    .await;
    wait_for("the lease to be renewed", T, || async {
        let now = lease(&client, &name).await.and_then(|l| l.spec?.renew_time);
        match now {
            Some(t) if t.0 > first.0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn a_pool_without_a_template_gets_kwoks_default_node() {
    let client = client().await;
    let scope = unique("bare");
    let _op = Operator::start(&scope, &[]);
    let pool = format!("{scope}-bare");
    // Nothing but a count (and the scope label the test operator selects pools by).
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: {pool}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n  nodeCount: 2\n"
    ));
    let nodes = wait_ready_nodes(&client, &pool, 2, T).await;
    let server = client.apiserver_version().await.unwrap().git_version;
    for node in &nodes {
        let status = node.status.as_ref().unwrap();
        let capacity = status.capacity.as_ref().unwrap();
        let allocatable = status.allocatable.as_ref().unwrap();
        for (resource, value) in [("cpu", "32"), ("memory", "256Gi"), ("pods", "110"), ("ephemeral-storage", "100Gi")] {
            assert_eq!(capacity[resource].0, value, "{resource}");
        }
        // Allocatable is capacity less the kubelet's default hard eviction thresholds
        // (memory.available<100Mi, nodefs.available<10%).
        assert_eq!((allocatable["cpu"].0.as_str(), allocatable["pods"].0.as_str()), ("32", "110"));
        // (The API server writes each quantity in its canonical form.)
        let bytes = |q: &str| {
            let (n, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
            let shift = ["", "Ki", "Mi", "Gi"].iter().position(|u| *u == unit).unwrap() * 10;
            n.parse::<u64>().unwrap() << shift
        };
        assert_eq!(bytes(&allocatable["memory"].0), (256u64 << 30) - (100 << 20));
        assert_eq!(bytes(&allocatable["ephemeral-storage"].0), (100u64 << 30) / 10 * 9);
        // A kubelet of the API server's release; kwok's providerID form.
        let name = node.metadata.name.clone().unwrap();
        assert_eq!(status.node_info.as_ref().unwrap().kubelet_version, server);
        assert_eq!(node.spec.as_ref().unwrap().provider_id.as_deref(), Some(format!("kwok://{name}").as_str()));
        let info = status.node_info.as_ref().unwrap();
        assert_eq!((info.architecture.as_str(), info.operating_system.as_str()), ("amd64", "linux"));
        // The platform labels a kubelet sets, so `nodeSelector: {kubernetes.io/os: linux}` lands.
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!((labels["kubernetes.io/os"].as_str(), labels["kubernetes.io/arch"].as_str()), ("linux", "amd64"));
        // Kubelet-reported fields get the simulator's values, never "".
        assert!(!info.kubelet_version.is_empty() && !info.boot_id.is_empty() && !info.machine_id.is_empty());
    }
    let out = kubectl_ok(&["get", "nodes", "-l", &format!("pools.kwok.x-k8s.io/pool={pool}"), "-o", "wide"]);
    assert!(out.contains(" Ready ") && out.contains(&format!(" {server} ")), "VERSION is {server}: {out}");
    delete_quietly("nodepool", &pool);
}

#[tokio::test]
async fn conditions_other_components_own_survive_the_heartbeat() {
    // node-problem-detector and the like add conditions of their own beside the kubelet's.
    let client = client().await;
    let scope = unique("conds");
    let _op = Operator::start(&scope, &["--node-status-frequency", "2s"]);
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: {scope}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n  nodeCount: 1\n  nodeTemplate:\n    metadata:\n      labels: {{{SCOPE_LABEL}: {scope}}}\n"
    ));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0);
    let name = node.metadata.name.clone().unwrap();
    let patch = r#"{"status":{"conditions":[{"type":"KernelDeadlock","status":"False","reason":"KernelHasNoDeadlock","message":"kernel has no deadlock"}]}}"#;
    kubectl_ok(&["patch", "node", &name, "--subresource=status", "--type=strategic", "-p", patch]);
    let api: Api<Node> = Api::all(client.clone());
    let before = heartbeat(&api.get(&name).await.unwrap());
    let after = wait_for("two heartbeats of the node's conditions", T, || async {
        let n = api.get(&name).await.unwrap();
        let beat = heartbeat(&n);
        match (before, beat) {
            (Some(b), Some(a)) if (a - b).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0) >= 3.0 => Ok(n),
            _ => Err(format!("heartbeat {beat:?}")),
        }
    })
    .await;
    let conditions = after.status.unwrap().conditions.unwrap();
    let kept = conditions.iter().find(|c| c.type_ == "KernelDeadlock");
    assert!(
        kept.is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("KernelHasNoDeadlock")),
        "another component's condition is kept: {conditions:?}"
    );
    assert!(conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_topology_spreads_the_nodes_over_zones_and_a_bad_one_is_refused() {
    let client = client().await;
    let scope = unique("zones");
    let _op = Operator::start(&scope, &[]);
    let pool = |topology: &str| {
        format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: {scope}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n  nodeCount: 4\n  topology: {topology}\n"
        )
    };
    wait_webhook_refuses(&format!("{scope}-probe"), &scope, T).await;
    let refused = kubectl_stdin(&["apply", "-f", "-"], Some(&pool("{zones: [a, a]}")));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("spec.topology.zones[1]"), "{err}");
    apply(&pool("{region: lab, zones: [lab-a, lab-b, lab-c]}"));
    let nodes = wait_ready_nodes(&client, &scope, 4, T).await;
    for n in &nodes {
        let name = n.metadata.name.as_deref().unwrap();
        let index: usize = name.rsplit('-').next().unwrap().parse().unwrap();
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["topology.kubernetes.io/zone"], ["lab-a", "lab-b", "lab-c"][index % 3], "{name}");
        assert_eq!(labels["topology.kubernetes.io/region"], "lab", "{name}");
    }
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

/// A pool whose nodes change all the time — each of 60 nodes reports its status every second,
/// a node change every ~17 ms — is scaled, and says so in its status, at once all the same: a
/// child's changes wake its pool at most every 200 ms and never hold back its reconcile.
/// (kube-runtime's debounce, used before, postponed the pool's next reconcile on every change
/// for as long as they came: the 10 new nodes were made, but the status stayed at 60 Ready
/// for as long as the test waited.)
#[tokio::test]
async fn a_pool_whose_nodes_keep_changing_is_still_scaled_at_once() {
    let client = client().await;
    let scope = unique("busy");
    let _op = Operator::start(&scope, &[]);
    let pool = format!("{scope}-busy");
    let beat = "  lifecycle:\n    nodes:\n      heartbeat: {statusReportInterval: 1s}\n";
    apply(&scoped_nodepool(&pool, &scope, 60, "10.224.0.0/16", 24, 110, beat));
    wait_ready_nodes(&client, &pool, 60, T).await;
    // The heartbeats flow: a node's status is written again within a few seconds.
    let nodes: Api<Node> = Api::all(client.clone());
    let first = heartbeat(&nodes.get(&format!("{pool}-0")).await.unwrap());
    wait_for("a second status heartbeat of the first node", Duration::from_secs(15), || async {
        let now = heartbeat(&nodes.get(&format!("{pool}-0")).await.unwrap());
        if now != first { Ok(()) } else { Err(format!("still {first:?}")) }
    })
    .await;

    let asked = std::time::Instant::now();
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas", "70"]);
    wait_ready_nodes(&client, &pool, 70, Duration::from_secs(30)).await;
    println!(
        "scaled from 60 to 70 Ready nodes in {:.1} s while every node heartbeat each second",
        asked.elapsed().as_secs_f64()
    );
    wait_pool_status(&client, &pool, 70, T).await;
    delete_quietly("nodepool", &pool);
}

/// A pod bound to `node` with these images (the first an init container's).
fn pod_with_images(name: &str, ns: &str, node: &str, init: &str, images: &[&str]) -> String {
    let containers: Vec<String> =
        images.iter().enumerate().map(|(i, im)| format!("{{name: c{i}, image: {im:?}}}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  nodeName: {node}\n  initContainers: [{{name: init, image: {init:?}}}]\n  containers: [{}]\n",
        containers.join(", ")
    )
}

/// The names each image of the node's `status.images` is listed under, largest image first.
async fn images_of(client: &kube::Client, node: &str) -> Vec<(Vec<String>, i64)> {
    let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    let images = n.status.and_then(|s| s.images).unwrap_or_default();
    images.into_iter().map(|i| (i.names.unwrap_or_default(), i.size_bytes.unwrap_or_default())).collect()
}

#[tokio::test]
async fn nodes_list_the_images_their_pods_pulled_as_the_kubelet_does() {
    let client = client().await;
    let (scope, quiet) = (unique("images"), unique("noimages"));
    let ns = TestNamespace::new(&client, "images").await;
    let _op = Operator::start(&scope, &[]);
    let _quiet_op = Operator::start(&quiet, &["--node-status-max-images", "0"]);
    apply(&nodepool_yaml(&scope, &scope, 2, ""));
    apply(&nodepool_yaml(&quiet, &quiet, 1, ""));
    let nodes = wait_ready_nodes(&client, &scope, 2, T).await;
    let quiet_node = wait_ready_nodes(&client, &quiet, 1, T).await.remove(0).metadata.name.unwrap();
    let (busy, idle) = (nodes[0].metadata.name.clone().unwrap(), nodes[1].metadata.name.clone().unwrap());
    let n = &ns.name;
    apply(&pod_with_images("web", n, &busy, "busybox:1.36", &["nginx", "registry.k8s.io/pause:3.10"]));
    apply(&pod_with_images("again", n, &busy, "busybox:1.36", &["docker.io/library/nginx:latest"]));
    apply(&pod_with_images("quiet", n, &quiet_node, "busybox:1.36", &["nginx"]));
    let listed = wait_for(&format!("{busy} to list its pods' images"), T, || async {
        let images = images_of(&client, &busy).await;
        if images.len() >= 3 { Ok(images) } else { Err(format!("{images:?}")) }
    })
    .await;
    // Three images (nginx under two spellings is one), each under its digest and its tag in
    // containerd's full form, the largest first.
    assert_eq!(listed.len(), 3, "{listed:?}");
    let tags: HashSet<&str> = listed.iter().map(|(names, _)| names[1].as_str()).collect();
    let wanted = ["docker.io/library/nginx:latest", "registry.k8s.io/pause:3.10", "docker.io/library/busybox:1.36"];
    assert_eq!(tags, wanted.into_iter().collect(), "{listed:?}");
    assert!(listed.iter().all(|(names, size)| names[0].contains("@sha256:") && *size > 0), "{listed:?}");
    assert!(listed.windows(2).all(|w| w[0].1 >= w[1].1), "largest first: {listed:?}");
    assert!(images_of(&client, &idle).await.is_empty(), "a node without pods lists no image");
    // (Its pod started with the others: a node that listed images would list them by now.)
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), n);
    wait_for("pod quiet Running", T, || async {
        let phase = pods.get("quiet").await.map_err(|e| e.to_string())?.status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Running") { Ok(()) } else { Err(format!("{phase:?}")) }
    })
    .await;
    assert!(images_of(&client, &quiet_node).await.is_empty(), "--node-status-max-images 0 lists none");
    for pool in [&scope, &quiet] {
        kubectl_ok(&["delete", "nodepool", pool, "--wait=false"]);
    }
}

#[tokio::test]
async fn an_autoscaler_removes_the_node_it_marked_and_the_pool_keeps_the_rest() {
    let client = client().await;
    let scope = unique("nodegroup");
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool_yaml(&scope, &scope, 4, ""));
    wait_ready_nodes(&client, &scope, 4, T).await;
    let names = |nodes: &[Node]| -> Vec<String> {
        let mut n: Vec<String> = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
        n.sort();
        n
    };
    let live = || async {
        let nodes = pool_nodes(&client, &scope).await;
        nodes.into_iter().filter(|n| n.metadata.deletion_timestamp.is_none()).collect::<Vec<_>>()
    };
    // As Cluster API's autoscaler provider does: mark the victim, then lower the count.
    let victim = format!("{scope}-1");
    kubectl_ok(&["annotate", "node", &victim, "pools.kwok.x-k8s.io/delete=true"]);
    kubectl_ok(&["scale", "nodepool", &scope, "--replicas", "3"]);
    let left = wait_for("the marked node gone, the others kept", T, || async {
        let nodes = live().await;
        let n = names(&nodes);
        if n.len() == 3 && !n.contains(&victim) { Ok(n) } else { Err(format!("{n:?}")) }
    })
    .await;
    assert_eq!(left, [format!("{scope}-0"), format!("{scope}-2"), format!("{scope}-3")]);
    // The pool reports its three as its count: nothing is created in the hole.
    wait_for("the pool Ready at 3", T, || async {
        let s = get_pool(&client, &scope).await.status.unwrap_or_default();
        if s.ready_replicas == 3 && s.replicas == 3 { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(names(&live().await), left, "no node replaces the removed one while the count is 3");
    // Growing fills the hole first; a plain scale-down then takes the highest index.
    kubectl_ok(&["scale", "nodepool", &scope, "--replicas", "4"]);
    wait_ready_nodes(&client, &scope, 4, T).await;
    kubectl_ok(&["scale", "nodepool", &scope, "--replicas", "3"]);
    wait_ready_nodes(&client, &scope, 3, T).await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
