//! VMIPool end to end: pools of KubeVirt VirtualMachineInstances on fake nodes, with the
//! simulator playing KubeVirt (launcher pods, phases, addresses), the scheduler placing the
//! launcher pods, and the VMI CRD installed late or by a real KubeVirt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A NodePool for VMIs: `count` nodes with `cpu` CPUs, the KVM device, and podCIDRs.
fn vmi_nodes(name: &str, scope: &str, count: u32, cpu: u32, cidr: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: NodePool
metadata:
  name: {name}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  nodeCount: {count}
  podCIDR: {{cidr: {cidr}, maskSize: 24}}
  nodeTemplate:
    metadata:
      labels: {{{SCOPE_LABEL}: {scope}}}
    status:
      capacity: {{cpu: {cpu}, memory: 64Gi, pods: 110, devices.kubevirt.io/kvm: 1k}}
      allocatable: {{cpu: {cpu}, memory: 64Gi, pods: 110, devices.kubevirt.io/kvm: 1k}}
"
    )
}

/// A VMIPool in `ns` of cirros VMIs (KubeVirt's vmi-ephemeral example) on the scope's nodes;
/// `extra_domain` adds lines under `domain` (indented 8).
fn vmipool(name: &str, ns: &str, scope: &str, count: u32, extra_spec: &str, extra_domain: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: VMIPool
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  vmiCount: {count}
{extra_spec}  vmiTemplate:
    metadata:
      labels: {{special: {name}, {SCOPE_LABEL}: {scope}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      domain:
        devices:
          disks:
          - disk: {{bus: virtio}}
            name: containerdisk
        memory:
          guest: 128Mi
{extra_domain}      terminationGracePeriodSeconds: 0
      volumes:
      - containerDisk:
          image: registry:5000/kubevirt/cirros-container-disk-demo:devel
        name: containerdisk
"
    )
}

async fn vmis(client: &kube::Client, ns: &str, pool: &str) -> Vec<VirtualMachineInstance> {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={pool}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

fn running(v: &VirtualMachineInstance) -> bool {
    v.phase() == "Running" && v.condition("Ready").is_some_and(|c| c.status == "True")
}

async fn wait_running(client: &kube::Client, ns: &str, pool: &str, n: usize) -> Vec<VirtualMachineInstance> {
    wait_for(&format!("{n} VMIs of {pool} Running"), T, || async {
        let all = vmis(client, ns, pool).await;
        let up = all.iter().filter(|v| running(v) && v.metadata.deletion_timestamp.is_none()).count();
        if up == n && all.len() == n { Ok(all) } else { Err(format!("{up} of {} Running", all.len())) }
    })
    .await
}

async fn launchers(client: &kube::Client, ns: &str) -> Vec<Pod> {
    list_pods(client, ns, "kubevirt.io=virt-launcher").await
}

fn node_cidr(node: &Node) -> IpNet {
    node.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_vmipool_runs_vmis_that_kubevirt_tooling_reads_scales_and_goes_away() {
    let client = client().await;
    let scope = unique("vmi");
    let ns = TestNamespace::new(&client, "vmi").await;
    let _op = Operator::start(&scope, &[]);
    apply(&vmi_nodes(&scope, &scope, 5, 32, "10.231.0.0/16"));
    wait_ready_nodes(&client, &scope, 5, T).await;
    apply(&vmipool("vms", &ns.name, &scope, 20, "", ""));
    let all = wait_running(&client, &ns.name, "vms", 20).await;

    // Each VMI: on a node, with its launcher pod's address, inside that node's podCIDR.
    let nodes: HashMap<String, Node> =
        pool_nodes(&client, &scope).await.into_iter().map(|n| (n.metadata.name.clone().unwrap(), n)).collect();
    let pods = launchers(&client, &ns.name).await;
    for vmi in &all {
        let status = vmi.status.as_ref().unwrap();
        let node = status.node_name.clone().expect("a node");
        let ip: IpAddr = status.rest["interfaces"][0]["ipAddress"].as_str().expect("an IP").parse().unwrap();
        assert!(node_cidr(&nodes[&node]).contains(&ip), "{ip} outside {node}'s podCIDR");
        let uid = vmi.metadata.uid.clone().unwrap();
        let pod = pods
            .iter()
            .find(|p| p.metadata.labels.as_ref().unwrap().get("kubevirt.io/created-by") == Some(&uid))
            .expect("a launcher pod");
        assert!(
            pod.metadata
                .name
                .as_ref()
                .unwrap()
                .starts_with(&format!("virt-launcher-{}-", vmi.metadata.name.as_ref().unwrap()))
        );
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_ref(), Some(&node));
        assert_eq!(pod.status.as_ref().unwrap().pod_ip.as_deref(), Some(ip.to_string().as_str()));
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].uid, uid);
        assert_eq!(vmi.metadata.labels.as_ref().unwrap().get("kubevirt.io/nodeName"), Some(&node));
        assert!(vmi.metadata.finalizers.iter().flatten().any(|f| f == "kubevirt.io/foregroundDeleteVirtualMachine"));
        let phases: Vec<&str> = status.rest["phaseTransitionTimestamps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["Pending", "Scheduling", "Scheduled", "Running"]);
        // No networks in the template: KubeVirt's default, a bridge on the pod network.
        assert_eq!(vmi.spec.networks[0].name, "default");
        assert!(vmi.condition("LiveMigratable").is_some_and(|c| c.status == "False"));
    }
    // kubectl shows what KubeVirt's columns show.
    let table = kubectl_ok(&["get", "vmi", "-n", &ns.name, "vms-0"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"]);
    let row = table.lines().nth(1).unwrap();
    assert!(row.contains("Running") && row.contains("True"), "{table}");

    // Scale up and down.
    kubectl_ok(&["scale", "vmipool", "vms", "-n", &ns.name, "--replicas", "24"]);
    wait_running(&client, &ns.name, "vms", 24).await;
    kubectl_ok(&["scale", "kvmip", "vms", "-n", &ns.name, "--replicas", "6"]);
    wait_for("6 VMIs and 6 launcher pods", T, || async {
        let (v, p) = (vmis(&client, &ns.name, "vms").await.len(), launchers(&client, &ns.name).await.len());
        if (v, p) == (6, 6) { Ok(()) } else { Err(format!("{v} VMIs, {p} pods")) }
    })
    .await;

    // A template change rolls, within maxUnavailable.
    kubectl_ok(&[
        "patch",
        "vmipool",
        "vms",
        "-n",
        &ns.name,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"maxUnavailable":2,"vmiTemplate":{"metadata":{"labels":{"special":"v2"}}}}}"#,
    ]);
    wait_for("every VMI rendered from the new template and Running", T, || async {
        let all = vmis(&client, &ns.name, "vms").await;
        let fresh = all
            .iter()
            .filter(|v| {
                v.metadata.labels.as_ref().unwrap().get("special").map(String::as_str) == Some("v2") && running(v)
            })
            .count();
        let up = all.iter().filter(|v| running(v)).count();
        assert!(up >= 4 || fresh > 0 || all.len() > 6, "more than maxUnavailable down at once: {up} Running");
        if fresh == 6 && all.len() == 6 { Ok(()) } else { Err(format!("{fresh} new of {}", all.len())) }
    })
    .await;

    // Deleting the pool removes the VMIs and their launcher pods.
    kubectl_ok(&["delete", "vmipool", "vms", "-n", &ns.name, "--wait=false"]);
    wait_for("no VMI and no launcher pod left", T, || async {
        let (v, p) = (vmis(&client, &ns.name, "vms").await.len(), launchers(&client, &ns.name).await.len());
        if (v, p) == (0, 0) { Ok(()) } else { Err(format!("{v} VMIs, {p} pods")) }
    })
    .await;
}

#[tokio::test]
async fn vmis_beyond_capacity_wait_in_scheduling_with_the_schedulers_reason() {
    let client = client().await;
    let scope = unique("vmicap");
    let ns = TestNamespace::new(&client, "vmicap").await;
    let _op = Operator::start(&scope, &[]);
    apply(&vmi_nodes(&scope, &scope, 2, 4, "10.232.0.0/16"));
    wait_ready_nodes(&client, &scope, 2, T).await;
    apply(&vmipool("big", &ns.name, &scope, 6, "", "        resources: {requests: {cpu: 2}}\n"));
    let message = wait_for("4 Running, 2 Scheduling with the scheduler's reason", T, || async {
        let all = vmis(&client, &ns.name, "big").await;
        let up = all.iter().filter(|v| running(v)).count();
        let waiting: Vec<&VirtualMachineInstance> = all
            .iter()
            .filter(|v| v.phase() == "Scheduling")
            .filter(|v| {
                v.condition("PodScheduled")
                    .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
            })
            .collect();
        if up == 4 && waiting.len() == 2 {
            Ok(waiting[0].condition("PodScheduled").unwrap().message.clone())
        } else {
            Err(format!("{up} Running, {} Scheduling with a reason", waiting.len()))
        }
    })
    .await
    .unwrap_or_default();
    assert!(message.contains("Insufficient cpu"), "{message}");
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for v in vmis(&client, &ns.name, "big").await.iter().filter(|v| running(v)) {
        *per_node.entry(v.status.as_ref().unwrap().node_name.clone().unwrap()).or_default() += 1;
    }
    assert!(per_node.values().all(|n| *n <= 2), "{per_node:?}");
}

#[tokio::test]
async fn without_the_vmi_crd_pools_wait_degraded_and_start_once_it_is_installed() {
    let cluster = OwnCluster::create(&unique("nokubevirt"), &[]);
    let client = cluster.client().await;
    let scope = unique("nocrd");
    let _op = Operator::start_as(&scope, &[], cluster.kubeconfig.clone());
    cluster.apply(&vmipool("later", "default", &scope, 2, "", ""));
    let pools: Api<kwok_pools::kinds::vmipool::VMIPool> = Api::namespaced(client.clone(), "default");
    let message = wait_for("the VMIPool Degraded with how to install the CRD", T, || async {
        let p = pools.get("later").await.map_err(|e| e.to_string())?;
        let c = p.status.as_ref().and_then(|s| s.condition("Degraded")).cloned();
        match c {
            Some(c) if c.status == "True" && c.reason == "ChildCRDMissing" => Ok(c.message),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(message.contains("kwok-pools crd --child-crds"), "{message}");
    // The other kinds are served meanwhile.
    cluster.apply(&vmi_nodes(&scope, &scope, 1, 8, "10.233.0.0/16"));
    wait_ready_nodes(&client, &scope, 1, T).await;
    // Installed late: the pool starts without a restart of the operator.
    let crd = std::process::Command::new(kwok_pools_bin()).args(["crd", "--child-crds"]).output().unwrap();
    cluster.apply(&String::from_utf8(crd.stdout).unwrap());
    wait_for("2 VMIs Running after the CRD appeared", T, || async {
        let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
        let all = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let up = all.iter().filter(|v| running(v)).count();
        if up == 2 { Ok(()) } else { Err(format!("{} VMIs, {up} Running", all.len())) }
    })
    .await;
}

#[tokio::test]
async fn beside_kubevirt_only_virt_handlers_part_is_played_as_its_account() {
    let client = client().await;
    let scope = unique("handler");
    let ns = TestNamespace::new(&client, "handler").await;
    // KubeVirt's handler account, in a namespace of this test's own (RBAC is cluster-wide).
    let handler = format!("system:serviceaccount:{scope}:kubevirt-handler");
    let handler = handler.as_str();
    // What KubeVirt's install grants its handler, for VMIs.
    let rbac = format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {scope}-handler}}
rules:
- apiGroups: [kubevirt.io]
  resources: [virtualmachineinstances]
  verbs: [get, list, watch, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {scope}-handler}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {scope}-handler}}
subjects:
- {{kind: User, name: '{handler}'}}
"
    );
    let _op = Operator::start(&scope, &["--kubevirt-role", "handler", "--kubevirt-handler-user", handler]);
    apply(&vmi_nodes(&scope, &scope, 1, 8, "10.234.0.0/16"));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0).metadata.name.unwrap();
    // A VMI as KubeVirt's controller leaves it: Scheduled on a node, launcher pod running.
    let vmi = format!(
        "apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {{name: vm1, namespace: {ns}, labels: {{kubevirt.io/nodeName: {node}, {SCOPE_LABEL}: {scope}}}}}
spec:
  domain:
    devices:
      interfaces: [{{name: default, masquerade: {{}}}}]
    memory: {{guest: 64Mi}}
  networks: [{{name: default, pod: {{}}}}]
  # Its launcher pod could land on the simulated node only by tolerating its taint (and the
  # operator's admission policy lets the handler's writes reach only such VMIs).
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
status:
  phase: Scheduled
  nodeName: {node}
",
        ns = ns.name
    );
    apply(&vmi);
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let before = api.get("vm1").await.unwrap();
    // The writes go as KubeVirt's handler: until that account may patch VMIs, nothing changes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(api.get("vm1").await.unwrap().phase(), "Scheduled", "written as someone other than the handler");
    apply(&rbac);
    let after = wait_for("the VMI Running", T, || async {
        let v = api.get("vm1").await.map_err(|e| e.to_string())?;
        if v.phase() == "Running" { Ok(v) } else { Err(v.phase().to_string()) }
    })
    .await;
    assert_eq!(after.spec, before.spec, "the spec is the controller's");
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.metadata.finalizers, before.metadata.finalizers, "no finalizer: that is virt-controller's part");
    assert!(launchers(&client, &ns.name).await.is_empty(), "no launcher pod: that is virt-controller's part");
    let status = after.status.unwrap();
    assert_eq!(status.node_name.as_deref(), Some(node.as_str()));
    assert_eq!(status.rest["interfaces"][0]["name"], "default");
    delete_quietly("clusterrolebinding", &format!("{scope}-handler"));
    delete_quietly("clusterrole", &format!("{scope}-handler"));
}

#[tokio::test]
async fn vmis_boot_for_their_pools_boot_time_and_a_seeded_share_fails() {
    let client = client().await;
    let scope = unique("vmiboot");
    let ns = TestNamespace::new(&client, "vmiboot").await;
    let _op = Operator::start(&scope, &[]);
    apply(&vmi_nodes(&scope, &scope, 2, 32, "10.233.0.0/16"));
    wait_ready_nodes(&client, &scope, 2, T).await;
    let knobs = "  lifecycle:\n    seed: 11\n    vmis: {bootTime: {fixed: 4s}, failPercent: 40}\n";
    apply(&vmipool("boots", &ns.name, &scope, 8, knobs, ""));
    // Which VMIs fail is decided by the seed and the VMI's name: the same function tells.
    let settings: kwok_pools::kinds::vmipool::VmiLifecycle =
        serde_yaml::from_str("{bootTime: {fixed: 4s}, failPercent: 40}").unwrap();
    let failing: Vec<String> = (0..8)
        .map(|i| format!("boots-{i}"))
        .filter(|n| {
            kwok_pools::kinds::vmipool::simulator::plan::plan_vmi(Some(&settings), Some(11), &ns.name, n, "").fails
        })
        .collect();
    // The first outcome of each VMI, from a watch (a failed VMI is replaced, and fails again).
    let first = {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
        let mut events =
            watcher::watcher(api, watcher::Config::default().labels("pools.kwok.x-k8s.io/pool=boots")).boxed();
        let mut first: HashMap<String, VirtualMachineInstance> = HashMap::new();
        let collect = async {
            while let Some(Ok(event)) = events.next().await {
                if let Event::Apply(v) | Event::InitApply(v) = event
                    && matches!(v.phase(), "Running" | "Failed")
                {
                    first.entry(v.metadata.name.clone().unwrap()).or_insert(v);
                    if first.len() == 8 {
                        break;
                    }
                }
            }
        };
        if tokio::time::timeout(T, collect).await.is_err() {
            panic!("not every VMI booted or failed within {T:?}: {:?}", first.keys().collect::<Vec<_>>());
        }
        first
    };
    let since = |v: &VirtualMachineInstance, phase: &str| {
        kwok_pools::kinds::vmipool::simulator::status::phase_since(v, phase)
            .unwrap_or_else(|| panic!("no {phase} time"))
    };
    for (name, v) in &first {
        let want = if failing.contains(name) { "Failed" } else { "Running" };
        assert_eq!(v.phase(), want, "{name}: the seed says {want}");
        let booted = (since(v, want) - since(v, "Scheduled")).total(k8s_openapi::jiff::Unit::Second).unwrap();
        assert!((3.0..20.0).contains(&booted), "{name}: {want} {booted:.1}s after Scheduled, for a 4s boot");
    }
    assert!(!failing.is_empty() && failing.len() < 8, "seed 11 fails some, not all: {failing:?}");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn handler_ready_nodes_agents_as_a_knob_and_deleted_vmis_end_before_they_go() {
    let client = client().await;
    let scope = unique("vmiend");
    let ns = TestNamespace::new(&client, "vmiend").await;
    let _op = Operator::start(&scope, &[]);
    // No device capacity in the template: `kubevirt` brings what virt-handler would.
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: NodePool
metadata:
  name: {scope}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  nodeCount: 2
  podCIDR: {{cidr: 10.234.0.0/16, maskSize: 24}}
  kubevirt: {{devices: 50}}
  nodeTemplate:
    metadata:
      labels: {{{SCOPE_LABEL}: {scope}}}
"
    ));
    wait_ready_nodes(&client, &scope, 2, T).await;
    for node in pool_nodes(&client, &scope).await {
        let labels = node.metadata.labels.clone().unwrap();
        assert_eq!(labels.get("kubevirt.io/schedulable").map(String::as_str), Some("true"));
        let status = node.status.unwrap();
        for device in ["devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"] {
            assert_eq!(status.capacity.as_ref().unwrap()[device].0, "50", "{device}");
            assert_eq!(status.allocatable.as_ref().unwrap()[device].0, "50", "{device}");
        }
        assert_eq!(status.capacity.unwrap()["cpu"].0, "32", "the default node's resources stay");
    }
    // A pod shaped like a real KubeVirt launcher (its node selector, its devices) lands and runs.
    apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: real-launcher, namespace: {ns}}}
spec:
  nodeSelector: {{{SCOPE_LABEL}: {scope}, kubevirt.io/schedulable: 'true'}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers:
  - name: compute
    image: quay.io/kubevirt/virt-launcher:v1.9.0
    resources:
      limits: {{devices.kubevirt.io/kvm: 1, devices.kubevirt.io/tun: 1, devices.kubevirt.io/vhost-net: 1}}
",
        ns = ns.name
    ));
    wait_for("the launcher-shaped pod Running", T, || async {
        let pods = list_pods(&client, &ns.name, "").await;
        let p = pods.iter().find(|p| p.metadata.name.as_deref() == Some("real-launcher"));
        match p.and_then(|p| p.status.as_ref()?.phase.clone()) {
            Some(phase) if phase == "Running" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A pool with a guest agent, and one without (the default).
    apply(&vmipool("agent", &ns.name, &scope, 2, "  lifecycle: {vmis: {guestAgent: true}}\n", ""));
    apply(&vmipool("plain", &ns.name, &scope, 1, "", ""));
    for v in wait_running(&client, &ns.name, "agent", 2).await {
        assert!(v.condition("AgentConnected").is_some_and(|c| c.status == "True"), "{:?}", v.status);
        let status = v.status.unwrap();
        assert_eq!(status.rest["guestOSInfo"]["id"], "fedora");
        assert_eq!(status.rest["interfaces"][0]["infoSource"], "domain, guest-agent");
    }
    for v in wait_running(&client, &ns.name, "plain", 1).await {
        assert!(v.condition("AgentConnected").is_none(), "no agent, no AgentConnected");
        let status = v.status.unwrap();
        assert_eq!(status.rest["guestOSInfo"], serde_json::json!({}));
        assert_eq!(status.rest["interfaces"][0]["infoSource"], "domain");
        assert!(status.rest["interfaces"][0]["ipAddress"].is_string(), "the pod network's address all the same");
    }

    // A deleted VMI that ran: Succeeded (its guest shut down) while its finalizer still holds it.
    let versions = record_versions(Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns.name), "agent-0");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let uid = vmis(&client, &ns.name, "agent")
        .await
        .into_iter()
        .find(|v| v.metadata.name.as_deref() == Some("agent-0"))
        .unwrap()
        .metadata
        .uid;
    kubectl_ok(&["delete", "vmi", "agent-0", "-n", &ns.name, "--wait=false"]);
    let seen = tokio::time::timeout(T, versions).await.expect("the VMI goes within the timeout").unwrap();
    let mine: Vec<&VirtualMachineInstance> = seen.iter().filter(|v| v.metadata.uid == uid).collect();
    let ended = mine
        .iter()
        .find(|v| v.phase() == "Succeeded")
        .unwrap_or_else(|| panic!("never Succeeded: {:?}", mine.iter().map(|v| v.phase()).collect::<Vec<_>>()));
    assert!(ended.metadata.deletion_timestamp.is_some(), "the terminal phase is written on the deleted VMI");
    assert!(
        ended.metadata.finalizers.iter().flatten().any(|f| f == "kubevirt.io/foregroundDeleteVirtualMachine"),
        "before its finalizer goes"
    );
    assert!(ended.condition("Ready").is_some_and(|c| c.status == "False"));
    // The pool replaces it.
    wait_running(&client, &ns.name, "agent", 2).await;

    // A VMI whose launcher pod is deleted fails (its finalizer still on it), as virt-controller
    // fails it; the pool then replaces it.
    let versions = record_versions(Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns.name), "plain-0");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let plain = vmis(&client, &ns.name, "plain").await.into_iter().next().unwrap();
    let pod = launchers(&client, &ns.name)
        .await
        .into_iter()
        .find(|p| p.metadata.labels.as_ref().unwrap().get("kubevirt.io/created-by") == plain.metadata.uid.as_ref())
        .expect("its launcher pod");
    kubectl_ok(&["delete", "pod", pod.metadata.name.as_deref().unwrap(), "-n", &ns.name, "--wait=false"]);
    let seen = tokio::time::timeout(T, versions).await.expect("the failed VMI is replaced").unwrap();
    let failed = seen
        .iter()
        .filter(|v| v.metadata.uid == plain.metadata.uid)
        .find(|v| v.phase() == "Failed")
        .unwrap_or_else(|| panic!("never Failed: {:?}", seen.iter().map(|v| v.phase()).collect::<Vec<_>>()));
    assert!(failed.metadata.finalizers.iter().flatten().any(|f| f == "kubevirt.io/foregroundDeleteVirtualMachine"));
    let why = failed.condition("Ready").and_then(|c| c.message.clone()).unwrap_or_default();
    assert!(why.contains("virt-launcher pod"), "{why}");
    wait_running(&client, &ns.name, "plain", 1).await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
