//! Live migration without KubeVirt, on the real control plane: the simulator plays KubeVirt's
//! migration controller and handlers for VirtualMachineInstanceMigrations (the stand-in CRD
//! `--child-crds` installs) with target launcher pods the real scheduler places, and its
//! eviction webhook plus evacuation controller make `kubectl drain` move LiveMigrate VMIs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use kwok_pools::kinds::vmipool::migration::VirtualMachineInstanceMigration;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A VMIPool of cirros VMIs on the scope's nodes. `masquerade`: the pod network through
/// masquerade (live-migratable), else KubeVirt's default bridge (not migratable).
fn vmipool(name: &str, ns: &str, scope: &str, count: u32, masquerade: bool, extra_spec: &str) -> String {
    let (interfaces, networks) = if masquerade {
        ("          interfaces: [{name: default, masquerade: {}}]\n", "      networks: [{name: default, pod: {}}]\n")
    } else {
        ("", "")
    };
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
      evictionStrategy: LiveMigrate
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      domain:
        devices:
          disks:
          - disk: {{bus: virtio}}
            name: containerdisk
{interfaces}        memory:
          guest: 128Mi
{networks}      terminationGracePeriodSeconds: 0
      volumes:
      - containerDisk:
          image: registry:5000/kubevirt/cirros-container-disk-demo:devel
        name: containerdisk
"
    )
}

fn migration(name: &str, ns: &str, scope: &str, vmi: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1
kind: VirtualMachineInstanceMigration
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  vmiName: {vmi}
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

fn node_of(v: &VirtualMachineInstance) -> String {
    v.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

async fn wait_ended(api: &Api<VirtualMachineInstanceMigration>, name: &str) -> VirtualMachineInstanceMigration {
    wait_for(&format!("migration {name} ended"), T, || async {
        let m = api.get(name).await.map_err(|e| e.to_string())?;
        if m.ended() { Ok(m) } else { Err(format!("phase {:?}", m.phase())) }
    })
    .await
}

fn phases(m: &VirtualMachineInstanceMigration) -> Vec<String> {
    let list = m.status.as_ref().and_then(|s| s.rest.get("phaseTransitionTimestamps")).and_then(Value::as_array);
    list.into_iter().flatten().filter_map(|t| t["phase"].as_str().map(str::to_string)).collect()
}

async fn launchers(client: &kube::Client, ns: &str) -> Vec<Pod> {
    list_pods(client, ns, "kubevirt.io=virt-launcher").await
}

async fn vmi_events(client: &kube::Client, ns: &str, vmi: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let events = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    events.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(vmi)).collect()
}

#[tokio::test]
async fn a_migration_moves_the_vmi_to_another_node_through_kubevirts_phases() {
    let client = client().await;
    let scope = unique("mig");
    let ns = TestNamespace::new(&client, "mig").await;
    let _op = Operator::start(&scope, &[]);
    let _pool = NodePoolCleanup(scope.clone());
    apply(&kvm_nodepool(&scope, &scope, 3));
    wait_ready_nodes(&client, &scope, 3, T).await;
    apply(&vmipool("vms", &ns.name, &scope, 1, true, ""));
    let vmi = wait_running(&client, &ns.name, "vms", 1).await.remove(0);
    let (name, from, vmi_uid) = (vmi.metadata.name.clone().unwrap(), node_of(&vmi), vmi.metadata.uid.clone().unwrap());
    assert!(vmi.condition("LiveMigratable").is_some_and(|c| c.status == "True"), "masquerade: migratable");
    let source_pod = launchers(&client, &ns.name).await.remove(0);

    apply(&migration("move", &ns.name, &scope, &name));
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), &ns.name);
    let m = wait_ended(&api, "move").await;
    assert_eq!(m.phase(), "Succeeded", "{:?}", m.status);
    assert_eq!(
        phases(&m),
        ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"]
    );
    let table = kubectl_ok(&["get", "vmim", "-n", &ns.name, "move"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "VMI"]);
    assert!(table.lines().nth(1).unwrap().contains("Succeeded"), "{table}");

    // The VMI runs on the target node now, as KubeVirt writes it.
    let vapi: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let moved = vapi.get(&name).await.unwrap();
    assert_eq!(moved.metadata.uid.as_deref(), Some(vmi_uid.as_str()), "the same VMI");
    assert!(running(&moved));
    let to = node_of(&moved);
    assert_ne!(to, from, "the VMI changed node");
    assert_eq!(moved.metadata.labels.as_ref().unwrap().get("kubevirt.io/nodeName"), Some(&to));
    let state = &moved.status.as_ref().unwrap().rest["migrationState"];
    assert_eq!(state["migrationUid"].as_str(), m.metadata.uid.as_deref());
    assert_eq!((state["sourceNode"].as_str(), state["targetNode"].as_str()), (Some(from.as_str()), Some(to.as_str())));
    assert_eq!(state["sourcePod"].as_str(), source_pod.metadata.name.as_deref());
    assert_eq!((state["completed"].as_bool(), state["failed"].as_bool()), (Some(true), Some(false)));
    assert_eq!(state["mode"].as_str(), Some("PreCopy"));
    assert!(state["startTimestamp"].is_string() && state["endTimestamp"].is_string(), "{state}");

    // The target pod is its launcher now; the source pod ended.
    let target = wait_for("the source pod gone, the target pod Running and Ready", T, || async {
        let pods = launchers(&client, &ns.name).await;
        let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        match live[..] {
            [p] if p.metadata.uid != source_pod.metadata.uid && pod_ready(p) => Ok(p.clone()),
            _ => Err(format!("{} launcher pods", live.len())),
        }
    })
    .await;
    assert_eq!(target.metadata.name.as_deref(), state["targetPod"].as_str());
    assert_eq!(target.spec.as_ref().unwrap().node_name.as_deref(), Some(to.as_str()));
    let labels = target.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("kubevirt.io/migrationJobUID"), m.metadata.uid.as_ref());
    let ip = moved.status.as_ref().unwrap().rest["interfaces"][0]["ipAddress"].as_str().map(str::to_string);
    assert_eq!(ip, target.status.as_ref().unwrap().pod_ip, "the VMI's address is the target pod's");
    let events = wait_for("the Migrated event", Duration::from_secs(30), || async {
        let e: Vec<Event> = vmi_events(&client, &ns.name, &name)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Migrated"))
            .collect();
        if e.is_empty() { Err("none".to_string()) } else { Ok(e) }
    })
    .await;
    assert_eq!(events[0].note.as_deref(), Some(format!("The VirtualMachineInstance migrated to node {to}.").as_str()));

    // A second migration moves it on; the first one's cleanup never touches the pod the VMI
    // runs in now (looked at again over a resync).
    apply(&migration("move-again", &ns.name, &scope, &name));
    let again = wait_ended(&api, "move-again").await;
    assert_eq!(again.phase(), "Succeeded");
    let third = node_of(&vapi.get(&name).await.unwrap());
    assert_ne!(third, to);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let now = vapi.get(&name).await.unwrap();
    assert!(running(&now) && node_of(&now) == third, "still Running on {third}");
    let live: Vec<Pod> =
        launchers(&client, &ns.name).await.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    assert_eq!(live.len(), 1, "one launcher pod");
    assert_eq!(live[0].spec.as_ref().unwrap().node_name.as_deref(), Some(third.as_str()));
    assert!(pod_ready(&live[0]));

    // The VMI still goes away cleanly with its pool.
    kubectl_ok(&["delete", "vmipool", "vms", "-n", &ns.name, "--wait=false"]);
    wait_for("no VMI and no launcher pod left", T, || async {
        let (v, p) = (vmis(&client, &ns.name, "vms").await.len(), launchers(&client, &ns.name).await.len());
        if (v, p) == (0, 0) { Ok(()) } else { Err(format!("{v} VMIs, {p} pods")) }
    })
    .await;
}

#[tokio::test]
async fn a_failing_migration_ends_failed_and_a_non_migratable_vmi_is_refused_with_kubevirts_reason() {
    let client = client().await;
    let scope = unique("migfail");
    let ns = TestNamespace::new(&client, "migfail").await;
    let _op = Operator::start(&scope, &[]);
    let _pool = NodePoolCleanup(scope.clone());
    apply(&kvm_nodepool(&scope, &scope, 2));
    wait_ready_nodes(&client, &scope, 2, T).await;
    let knobs = "  lifecycle: {vmis: {migrationTime: {fixed: 1s}, migrationFailPercent: 100}}\n";
    apply(&vmipool("flaky", &ns.name, &scope, 1, true, knobs));
    apply(&vmipool("bridged", &ns.name, &scope, 1, false, ""));
    let flaky = wait_running(&client, &ns.name, "flaky", 1).await.remove(0);
    let bridged = wait_running(&client, &ns.name, "bridged", 1).await.remove(0);
    let (flaky_name, from) = (flaky.metadata.name.clone().unwrap(), node_of(&flaky));

    apply(&migration("try", &ns.name, &scope, &flaky_name));
    apply(&migration("refused", &ns.name, &scope, bridged.metadata.name.as_deref().unwrap()));
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), &ns.name);
    let m = wait_ended(&api, "try").await;
    assert_eq!(m.phase(), "Failed");
    assert_eq!(phases(&m).last().map(String::as_str), Some("Failed"));
    assert!(phases(&m).contains(&"Running".to_string()), "it failed during the copy: {:?}", phases(&m));
    let vapi: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let after = vapi.get(&flaky_name).await.unwrap();
    assert!(running(&after), "the VMI keeps running");
    assert_eq!(node_of(&after), from, "where it was");
    let state = &after.status.as_ref().unwrap().rest["migrationState"];
    assert_eq!((state["completed"].as_bool(), state["failed"].as_bool()), (Some(true), Some(true)), "{state}");
    assert!(state["failureReason"].as_str().unwrap().contains("migrationFailPercent"), "{state}");
    wait_for("the target pod gone, the source pod still Running", T, || async {
        let pods = launchers(&client, &ns.name).await;
        let flaky_pods: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                p.metadata.labels.as_ref().unwrap().get("kubevirt.io/created-by") == flaky.metadata.uid.as_ref()
            })
            .collect();
        match flaky_pods[..] {
            [p] if p.spec.as_ref().unwrap().node_name.as_deref() == Some(from.as_str()) && pod_ready(p) => Ok(()),
            _ => Err(format!("{} pods of the VMI", flaky_pods.len())),
        }
    })
    .await;

    let m = wait_ended(&api, "refused").await;
    assert_eq!(m.phase(), "Failed");
    let conditions = m.status.as_ref().unwrap().rest["conditions"].as_array().unwrap().clone();
    let message = conditions[0]["message"].as_str().unwrap();
    assert!(message.starts_with("Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: "), "{message}");
    assert_eq!(phases(&m), ["Failed"], "refused before anything moved");

    // A migration deleted while it copies: its target pod goes, the VMI stays where it was.
    apply(&vmipool("slow", &ns.name, &scope, 1, true, "  lifecycle: {vmis: {migrationTime: {fixed: 5m}}}\n"));
    let slow = wait_running(&client, &ns.name, "slow", 1).await.remove(0);
    let (slow_name, slow_from) = (slow.metadata.name.clone().unwrap(), node_of(&slow));
    apply(&migration("cancelled", &ns.name, &scope, &slow_name));
    wait_for("the slow migration Running", T, || async {
        let m = api.get("cancelled").await.map_err(|e| e.to_string())?;
        if m.phase() == "Running" { Ok(()) } else { Err(format!("phase {:?}", m.phase())) }
    })
    .await;
    kubectl_ok(&["delete", "vmim", "cancelled", "-n", &ns.name]);
    wait_for("the cancelled migration's target pod gone, the VMI where it was", T, || async {
        let v = vapi.get(&slow_name).await.map_err(|e| e.to_string())?;
        let state = &v.status.as_ref().unwrap().rest["migrationState"];
        let pods: Vec<Pod> = launchers(&client, &ns.name)
            .await
            .into_iter()
            .filter(|p| p.metadata.labels.as_ref().unwrap().get("kubevirt.io/created-by") == slow.metadata.uid.as_ref())
            .collect();
        let (failed, reason) = (state["failed"].as_bool(), state["failureReason"].as_str());
        if pods.len() == 1 && failed == Some(true) && running(&v) && node_of(&v) == slow_from {
            assert_eq!(reason, Some("the migration was deleted"));
            Ok(())
        } else {
            Err(format!("{} pods, failed {failed:?}", pods.len()))
        }
    })
    .await;
}

#[tokio::test]
async fn draining_a_node_of_live_migrate_vmis_moves_them_all_and_loses_none() {
    let client = client().await;
    let scope = unique("drain");
    let ns = TestNamespace::new(&client, "drain").await;
    let _op = Operator::start(&scope, &[]);
    let _pool = NodePoolCleanup(scope.clone());
    // Every VMI starts on the one node there is; then two more come.
    apply(&kvm_nodepool(&scope, &scope, 1));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0).metadata.name.unwrap();
    apply(&vmipool("vms", &ns.name, &scope, 20, true, "  lifecycle: {vmis: {migrationTime: {fixed: 1s}}}\n"));
    let before = wait_running(&client, &ns.name, "vms", 20).await;
    assert!(before.iter().all(|v| node_of(v) == node));
    let uids: HashSet<String> = before.iter().map(|v| v.metadata.uid.clone().unwrap()).collect();
    apply(&kvm_nodepool(&scope, &scope, 3));
    wait_ready_nodes(&client, &scope, 3, T).await;

    // At most 2 migrations run out of one node at once (KubeVirt's default): sampled while
    // the drain goes on.
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), &ns.name);
    let sampler = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut most = 0;
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    let running =
                        list.items.iter().filter(|m| !m.ended() && !matches!(m.phase(), "" | "Pending")).count();
                    most = most.max(running);
                    if list.items.len() == 20 && list.items.iter().all(VirtualMachineInstanceMigration::ended) {
                        return most;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // kubectl drain as a user runs it: refused evictions are retried until the pods are gone.
    eprintln!("draining {node}");
    let drained = node.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(kubectl_bin())
            .args(["drain", &drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s"])
            .env("KUBECONFIG", kubeconfig())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubectl drain failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("node/{node} drained")), "{stdout}");
    assert!(stderr.contains("Eviction triggered evacuation of VMI"), "the evictions were refused first:\n{stderr}");

    // Every VMI moved, none lost or replaced.
    let after = wait_running(&client, &ns.name, "vms", 20).await;
    let after_uids: HashSet<String> = after.iter().map(|v| v.metadata.uid.clone().unwrap()).collect();
    assert_eq!(after_uids, uids, "the same 20 VMIs");
    assert!(after.iter().all(|v| node_of(v) != node), "none left on {node}");
    let most = tokio::time::timeout(T, sampler).await.expect("every migration ended").unwrap();
    assert!((1..=2).contains(&most), "at most 2 migrations out of the node at once, saw {most}");
    let migrations = api.list(&ListParams::default()).await.unwrap().items;
    let mut by_vmi: HashMap<String, usize> = HashMap::new();
    for m in &migrations {
        assert_eq!(m.phase(), "Succeeded", "{:?}", m.metadata.name);
        assert!(m.metadata.name.as_deref().unwrap().starts_with("kubevirt-evacuation-"));
        let evacuated = m.metadata.annotations.as_ref().and_then(|a| a.get("kubevirt.io/evacuationMigration"));
        assert_eq!(evacuated, Some(&node));
        *by_vmi.entry(m.spec.vmi_name.clone()).or_default() += 1;
    }
    assert_eq!(by_vmi.len(), 20, "one migration per VMI: {by_vmi:?}");
    assert!(by_vmi.values().all(|n| *n == 1), "{by_vmi:?}");
    assert!(after.iter().all(|v| v.status.as_ref().unwrap().rest.get("evacuationNodeName").is_none_or(Value::is_null)));
    let left = launchers(&client, &ns.name).await;
    assert!(
        left.iter().all(|p| p.spec.as_ref().unwrap().node_name.as_deref() != Some(node.as_str())),
        "no launcher pod left on the drained node"
    );
    kubectl_ok(&["uncordon", &node]);
}
