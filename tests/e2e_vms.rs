//! KubeVirt VirtualMachines without KubeVirt, on the real control plane: the simulator plays
//! KubeVirt's VM controller (the stand-in VM CRD `--child-crds` installs), so a VM with
//! `runStrategy: Always` runs, `Halted` stops it (its VMI gone, `printableStatus: Stopped`),
//! `Always` again starts a new VMI, and under `RerunOnFailure` a VMI that fails is replaced.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use kwok_pools::kinds::vmipool::migration::VirtualMachineInstanceMigration;
use kwok_pools::kinds::vmipool::vm::VirtualMachine;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A VM in the scope (its labels and its VMI's) with `strategy`, KubeVirt's cirros example
/// as its template.
fn vm(name: &str, ns: &str, scope: &str, strategy: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  runStrategy: {strategy}
  template:
    metadata:
      labels: {{kubevirt.io/vm: {name}, {SCOPE_LABEL}: {scope}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      domain:
        devices:
          disks:
          - disk: {{bus: virtio}}
            name: containerdisk
        memory:
          guest: 128Mi
      terminationGracePeriodSeconds: 0
      volumes:
      - containerDisk:
          image: registry:5000/kubevirt/cirros-container-disk-demo:devel
        name: containerdisk
"
    )
}

/// (printableStatus, ready, created) of the VM.
async fn vm_status(api: &Api<VirtualMachine>, name: &str) -> (String, bool, bool) {
    let vm = api.get(name).await.unwrap();
    let s = vm.status.unwrap_or_default();
    let flag = |k: &str| s.rest.get(k).and_then(serde_json::Value::as_bool).unwrap_or(false);
    (s.printable_status.clone().unwrap_or_default(), flag("ready"), flag("created"))
}

async fn wait_printable(api: &Api<VirtualMachine>, name: &str, want: &str) -> (String, bool, bool) {
    wait_for(&format!("{name} {want}"), T, || async {
        let s = vm_status(api, name).await;
        if s.0 == want { Ok(s) } else { Err(format!("{s:?}")) }
    })
    .await
}

/// The UID of the VM's Running VMI, owned by it.
async fn running_vmi(client: &kube::Client, ns: &str, name: &str, vm_uid: &str) -> String {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{name}'s VMI Running"), T, || async {
        let vmi = api.get_opt(name).await.map_err(|e| e.to_string())?.ok_or("no VMI")?;
        let owned =
            vmi.metadata.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == vm_uid);
        if !owned {
            return Err("not owned by the VM".into());
        }
        if vmi.phase() == "Running" && vmi.metadata.deletion_timestamp.is_none() {
            Ok(vmi.metadata.uid.clone().unwrap())
        } else {
            Err(vmi.phase().to_string())
        }
    })
    .await
}

#[tokio::test]
async fn a_vm_runs_stops_and_starts_again_as_its_run_strategy_says() {
    let client = client().await;
    let scope = unique("vm");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "vm").await;
    let pool = format!("{scope}-kvm");
    let _pool = NodePoolCleanup(pool.clone());
    apply(&kvm_nodepool(&pool, &scope, 2));
    wait_ready_nodes(&client, &pool, 2, T).await;
    apply(&vm("db", &ns.name, &scope, "Always"));
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vm_uid = vms.get("db").await.unwrap().metadata.uid.unwrap();
    let first = running_vmi(&client, &ns.name, "db", &vm_uid).await;
    let s = wait_printable(&vms, "db", "Running").await;
    assert!(s.1 && s.2, "ready and created: {s:?}");
    let table = kubectl_ok(&["-n", &ns.name, "get", "vm", "db", "--no-headers"]);
    assert!(table.contains("Running") && table.contains("True"), "kubectl get vm: {table}");

    // Halted: the VMI goes, the VM says Stopped.
    let pp = PatchParams::default();
    vms.patch("db", &pp, &Patch::Merge(serde_json::json!({"spec": {"runStrategy": "Halted"}}))).await.unwrap();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the VMI gone", T, || async {
        match vmis.get_opt("db").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(v) => Err(v.phase().to_string()),
        }
    })
    .await;
    let s = wait_printable(&vms, "db", "Stopped").await;
    assert!(!s.1 && !s.2, "not ready, not created: {s:?}");

    // Always again: a new VMI runs.
    vms.patch("db", &pp, &Patch::Merge(serde_json::json!({"spec": {"runStrategy": "Always"}}))).await.unwrap();
    let second = running_vmi(&client, &ns.name, "db", &vm_uid).await;
    assert_ne!(first, second, "a new VMI");
    wait_printable(&vms, "db", "Running").await;

    // Deleting the VM takes its VMI with it.
    vms.delete("db", &DeleteParams::default()).await.unwrap();
    wait_for("the VMI gone with its VM", T, || async {
        if vmis.get_opt("db").await.map_err(|e| e.to_string())?.is_none() {
            Ok(())
        } else {
            Err("still there".to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn under_rerun_on_failure_a_failed_vmi_is_replaced() {
    let client = client().await;
    let scope = unique("vmre");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "vmre").await;
    let pool = format!("{scope}-kvm");
    let _pool = NodePoolCleanup(pool.clone());
    apply(&kvm_nodepool(&pool, &scope, 2));
    wait_ready_nodes(&client, &pool, 2, T).await;
    apply(&vm("web", &ns.name, &scope, "RerunOnFailure"));
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let vm_uid = vms.get("web").await.unwrap().metadata.uid.unwrap();
    let first = running_vmi(&client, &ns.name, "web", &vm_uid).await;
    // Its launcher pod dies: the VMI fails, and the VM runs a new one.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let launcher = pods
        .list(&ListParams::default().labels(&format!("kubevirt.io/created-by={first}")))
        .await
        .unwrap()
        .items
        .remove(0);
    pods.delete(
        &launcher.metadata.name.unwrap(),
        &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
    )
    .await
    .unwrap();
    let second = wait_for("a new VMI Running", T, || async {
        let uid = running_vmi(&client, &ns.name, "web", &vm_uid).await;
        if uid != first { Ok(uid) } else { Err("the first one still".to_string()) }
    })
    .await;
    assert_ne!(first, second);
    wait_printable(&vms, "web", "Running").await;
}

#[tokio::test]
async fn the_sample_vm_runs_as_written() {
    let client = client().await;
    let scope = unique("vmsmp");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "vmsmp").await;
    let pool = format!("{scope}-kvm");
    let _pool = NodePoolCleanup(pool.clone());
    apply(&kvm_nodepool(&pool, &scope, 2));
    wait_ready_nodes(&client, &pool, 2, T).await;
    // The sample as written, in this test's namespace and scope (its labels and its VMI's, so
    // this test's simulator takes them, and its VMI's placement on the scope's nodes).
    let mut vm: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/vm.yaml")).unwrap();
    vm["metadata"]["namespace"] = ns.name.clone().into();
    let scoped: serde_yaml::Value = serde_yaml::from_str(&format!("{{{SCOPE_LABEL}: {scope}}}")).unwrap();
    vm["metadata"]["labels"] = scoped.clone();
    vm["spec"]["template"]["metadata"]["labels"][SCOPE_LABEL] = scope.clone().into();
    vm["spec"]["template"]["spec"]["nodeSelector"] = scoped;
    apply(&serde_yaml::to_string(&vm).unwrap());
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let uid = vms.get("cirros").await.unwrap().metadata.uid.unwrap();
    let vmi_uid = running_vmi(&client, &ns.name, "cirros", &uid).await;
    wait_printable(&vms, "cirros", "Running").await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns.name);
    let node = |v: &VirtualMachineInstance| v.status.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let from = node(&vmis.get("cirros").await.unwrap());

    // The migration sample as written, in this test's namespace: the VM moves to the other node.
    let mut m: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/migration.yaml")).unwrap();
    m["metadata"]["namespace"] = ns.name.clone().into();
    apply(&serde_yaml::to_string(&m).unwrap());
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the sample migration Succeeded", T, || async {
        let m = migrations.get("cirros-migration").await.map_err(|e| e.to_string())?;
        if m.phase() == "Succeeded" { Ok(()) } else { Err(format!("phase {:?}", m.phase())) }
    })
    .await;
    let moved = vmis.get("cirros").await.unwrap();
    assert_eq!(moved.metadata.uid.as_deref(), Some(vmi_uid.as_str()), "the same VMI");
    assert_ne!(node(&moved), from, "on the other node");
    wait_printable(&vms, "cirros", "Running").await;
}
