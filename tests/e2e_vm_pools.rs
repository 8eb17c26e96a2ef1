//! A VMIPool that keeps VirtualMachines (`spec.virtualMachine`), on the real control plane with
//! the stand-in KubeVirt CRDs: the pool's VMs run their VMIs (the simulator plays KubeVirt's VM
//! controller), scale, stop and start together with the pool's run strategy, are governed by
//! the pool's knobs, go with the pool; the choice is validated and cannot be switched, and
//! asking for VMs needs the right to create them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use kube::api::{Api, ListParams};
use kwok_pools::kinds::vmipool::VMIPool;
use kwok_pools::kinds::vmipool::kubevirt::VirtualMachineInstance;
use kwok_pools::kinds::vmipool::vm::VirtualMachine;
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A VMIPool of `count` VMs in the scope; `vm` is the `virtualMachine` value.
fn vm_pool(name: &str, ns: &str, scope: &str, count: u32, vm: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: VMIPool
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  vmiCount: {count}
  virtualMachine: {vm}
  lifecycle: {{seed: 7, vmis: {{guestAgent: true}}}}
  vmiTemplate:
    metadata:
      labels: {{app: {name}, {SCOPE_LABEL}: {scope}}}
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

fn selector(pool: &str) -> ListParams {
    ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={pool}"))
}

/// The pool's VMs by name: (UID, printableStatus, ready).
async fn vms(client: &kube::Client, ns: &str, pool: &str) -> BTreeMap<String, (String, String, bool)> {
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let list = api.list(&selector(pool)).await.unwrap().items;
    list.into_iter()
        .filter(|vm| vm.metadata.deletion_timestamp.is_none())
        .map(|vm| {
            let s = vm.status.clone().unwrap_or_default();
            let ready = s.rest.get("ready").and_then(serde_json::Value::as_bool).unwrap_or(false);
            let name = vm.metadata.name.clone().unwrap();
            (name, (vm.metadata.uid.clone().unwrap(), s.printable_status.unwrap_or_default(), ready))
        })
        .collect()
}

/// Waits until the pool has exactly `names`, each VM with `status`.
async fn wait_vms(
    client: &kube::Client,
    ns: &str,
    pool: &str,
    names: &[String],
    status: &str,
) -> BTreeMap<String, (String, String, bool)> {
    wait_for(&format!("VMs {names:?} {status}"), T, || async {
        let got = vms(client, ns, pool).await;
        let keys: Vec<&String> = got.keys().collect();
        let all = got.values().all(|(_, s, ready)| s == status && *ready == (status == "Running"));
        if keys == names.iter().collect::<Vec<_>>() && all { Ok(got) } else { Err(format!("{got:?}")) }
    })
    .await
}

/// The pool's VMIs that are not being deleted.
async fn live_vmis(client: &kube::Client, ns: &str, pool: &str) -> Vec<VirtualMachineInstance> {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let list = api.list(&selector(pool)).await.unwrap().items;
    list.into_iter().filter(|v| v.metadata.deletion_timestamp.is_none()).collect()
}

async fn wait_pool_ready(client: &kube::Client, ns: &str, name: &str, ready: i32) -> VMIPool {
    let api: Api<VMIPool> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("VMIPool {name} {ready} ready"), T, || async {
        let p = api.get(name).await.map_err(|e| e.to_string())?;
        let s = p.status.clone().unwrap_or_default();
        if s.ready_replicas == ready && s.replicas == p.spec.vmi_count {
            Ok(p)
        } else {
            Err(format!("replicas {:?} ready {:?}", s.replicas, s.ready_replicas))
        }
    })
    .await
}

fn names(pool: &str, n: u32) -> Vec<String> {
    (0..n).map(|i| format!("{pool}-{i}")).collect()
}

#[tokio::test]
async fn a_vmipool_keeps_vms_that_scale_stop_and_start_with_its_run_strategy() {
    let client = client().await;
    let scope = unique("vmpool");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "vmpool").await;
    let nodes = format!("{scope}-kvm");
    let _nodes = NodePoolCleanup(nodes.clone());
    apply(&kvm_nodepool(&nodes, &scope, 2));
    wait_ready_nodes(&client, &nodes, 2, T).await;
    let pool = "web";
    apply(&vm_pool(pool, &ns.name, &scope, 4, "{runStrategy: Always}"));

    // Four VMs, owned by the pool, each running a VMI it controls; the pool counts them ready.
    let running = wait_vms(&client, &ns.name, pool, &names(pool, 4), "Running").await;
    wait_pool_ready(&client, &ns.name, pool, 4).await;
    let api: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns.name);
    let pool_uid = Api::<VMIPool>::namespaced(client.clone(), &ns.name).get(pool).await.unwrap().metadata.uid.unwrap();
    for (name, (uid, _, _)) in &running {
        let vm = api.get(name).await.unwrap();
        let owner = vm.metadata.owner_references.as_ref().unwrap().iter().find(|o| o.controller == Some(true)).unwrap();
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("VMIPool", pool_uid.as_str()), "{name}");
        assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
        let vmi = Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns.name).get(name).await.unwrap();
        let controller = vmi.metadata.owner_references.as_ref().unwrap().iter().find(|o| o.controller == Some(true));
        assert_eq!(controller.map(|o| (o.kind.as_str(), o.uid.as_str())), Some(("VirtualMachine", uid.as_str())));
        assert_eq!(vmi.metadata.labels.as_ref().unwrap()["app"], pool, "the template's labels");
        assert_eq!(vmi.phase(), "Running");
        // The pool's knobs govern its VMs' VMIs: a guest agent reports.
        assert!(vmi.condition("AgentConnected").is_some_and(|c| c.status == "True"), "{name}: {:?}", vmi.status);
    }
    let out = kubectl_ok(&["get", "vm", "-n", &ns.name, "-l", &format!("pools.kwok.x-k8s.io/pool={pool}")]);
    assert!(out.contains("Running") && out.contains(&format!("{pool}-3")), "{out}");

    // Scale up and down as any pool: VMs are added and removed, their VMIs with them.
    kubectl_ok(&["scale", "vmipool", pool, "-n", &ns.name, "--replicas=5"]);
    wait_vms(&client, &ns.name, pool, &names(pool, 5), "Running").await;
    kubectl_ok(&["scale", "vmipool", pool, "-n", &ns.name, "--replicas=3"]);
    let three = wait_vms(&client, &ns.name, pool, &names(pool, 3), "Running").await;
    wait_pool_ready(&client, &ns.name, pool, 3).await;
    wait_for("the removed VMs' VMIs gone", T, || async {
        let left: Vec<String> =
            live_vmis(&client, &ns.name, pool).await.iter().map(|v| v.metadata.name.clone().unwrap()).collect();
        if left == names(pool, 3) { Ok(()) } else { Err(format!("{left:?}")) }
    })
    .await;

    // Halted: every VM stops where it stands (same VMs), no VMI is left, none is ready.
    let patch = |s: &str| format!("{{\"spec\":{{\"virtualMachine\":{{\"runStrategy\":\"{s}\"}}}}}}");
    kubectl_ok(&["patch", "vmipool", pool, "-n", &ns.name, "--type=merge", "-p", &patch("Halted")]);
    let stopped = wait_vms(&client, &ns.name, pool, &names(pool, 3), "Stopped").await;
    for (name, (uid, _, _)) in &stopped {
        assert_eq!(&three[name].0, uid, "{name} stopped in place, not replaced");
        assert_eq!(api.get(name).await.unwrap().spec.run_strategy.as_deref(), Some("Halted"));
    }
    wait_for("no VMI left", T, || async {
        let left = live_vmis(&client, &ns.name, pool).await.len();
        if left == 0 { Ok(()) } else { Err(format!("{left} VMIs")) }
    })
    .await;
    wait_pool_ready(&client, &ns.name, pool, 0).await;

    // Always again: the same VMs start new VMIs.
    kubectl_ok(&["patch", "vmipool", pool, "-n", &ns.name, "--type=merge", "-p", &patch("Always")]);
    let again = wait_vms(&client, &ns.name, pool, &names(pool, 3), "Running").await;
    assert_eq!(again.values().map(|v| &v.0).collect::<Vec<_>>(), three.values().map(|v| &v.0).collect::<Vec<_>>());
    wait_pool_ready(&client, &ns.name, pool, 3).await;

    // The choice of VMs cannot be dropped on an existing pool.
    let out = kubectl(&[
        "patch",
        "vmipool",
        pool,
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        "{\"spec\":{\"virtualMachine\":null}}",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "switching to bare VMIs is refused");
    assert!(err.contains("spec.virtualMachine") && err.contains("cannot be added or removed"), "{err}");

    // The pool goes, and its VMs and VMIs with it.
    kubectl_ok(&["delete", "vmipool", pool, "-n", &ns.name, "--wait=true"]);
    wait_for("the VMs and VMIs gone", T, || async {
        let (v, i) = (vms(&client, &ns.name, pool).await.len(), live_vmis(&client, &ns.name, pool).await.len());
        if v + i == 0 { Ok(()) } else { Err(format!("{v} VMs, {i} VMIs")) }
    })
    .await;
}

#[tokio::test]
async fn asking_for_vms_is_validated_and_needs_the_right_to_create_them() {
    let client = client().await;
    let scope = unique("vmpoolbad");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    let ns = TestNamespace::new(&client, "vmpoolbad").await;

    // An unknown run strategy names its field.
    let out =
        kubectl_stdin(&["apply", "-f", "-"], Some(&vm_pool("bad", &ns.name, &scope, 1, "{runStrategy: Sometimes}")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("spec.virtualMachine.runStrategy"), "{err}");

    // A bare-VMI pool cannot become a pool of VMs either.
    let bare = vm_pool("bare", &ns.name, &scope, 0, "{}").replace("  virtualMachine: {}\n", "");
    apply(&bare);
    let out = kubectl(&[
        "patch",
        "vmipool",
        "bare",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        "{\"spec\":{\"virtualMachine\":{\"runStrategy\":\"Always\"}}}",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot be added or removed"), "{err}");

    // Someone who may create VMIPools and VMIs, but not VMs, may not ask a pool for VMs.
    let who = unique("vmi-only");
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {who}, namespace: {ns}}}\nrules: [{{apiGroups: [pools.kwok.x-k8s.io], resources: [vmipools], verbs: [get, list, create, update, patch]}}, {{apiGroups: [kubevirt.io], resources: [virtualmachineinstances], verbs: [create]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {who}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {who}}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n",
        ns = ns.name
    ));
    let as_who = format!("--as={who}");
    let asks_vms = vm_pool("sneaky", &ns.name, &scope, 1, "{runStrategy: Always}");
    let out = kubectl_stdin(&["apply", "-f", "-", &as_who], Some(&asks_vms));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("{who} may not create virtualmachines")), "{err}");
    // The same person may make a pool of bare VMIs.
    let bare_too = vm_pool("plain", &ns.name, &scope, 0, "{}").replace("  virtualMachine: {}\n", "");
    let out = kubectl_stdin(&["apply", "-f", "-", &as_who], Some(&bare_too));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn the_sample_pool_of_vms_runs_as_written() {
    let client = client().await;
    let scope = unique("vmpoolsmp");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "vmpoolsmp").await;
    let nodes = format!("{scope}-kvm");
    let _nodes = NodePoolCleanup(nodes.clone());
    apply(&kvm_nodepool(&nodes, &scope, 2));
    wait_ready_nodes(&client, &nodes, 2, T).await;
    // The sample as written, in this test's namespace and scope (the pool's labels and its
    // VMs', so this test's operator takes them, and their placement on the scope's nodes).
    let mut p: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/vmipool-vms.yaml")).unwrap();
    p["metadata"]["namespace"] = ns.name.clone().into();
    let scoped: serde_yaml::Value = serde_yaml::from_str(&format!("{{{SCOPE_LABEL}: {scope}}}")).unwrap();
    p["metadata"]["labels"] = scoped.clone();
    p["spec"]["vmiTemplate"]["metadata"]["labels"][SCOPE_LABEL] = scope.clone().into();
    p["spec"]["vmiTemplate"]["spec"]["nodeSelector"] = scoped;
    apply(&serde_yaml::to_string(&p).unwrap());
    let name = p["metadata"]["name"].as_str().unwrap().to_string();
    let count = u32::try_from(p["spec"]["vmiCount"].as_u64().unwrap()).unwrap();
    wait_vms(&client, &ns.name, &name, &names(&name, count), "Running").await;
    wait_pool_ready(&client, &ns.name, &name, i32::try_from(count).unwrap()).await;
}
