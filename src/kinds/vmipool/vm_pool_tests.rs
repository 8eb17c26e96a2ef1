use super::*;
use crate::api::conventions::HASH_LABEL;
use crate::kinds::vmipool::simulator::plan::pool_refs;

fn pool(yaml: &str) -> VmPool {
    VmPool(serde_yaml::from_str(yaml).unwrap())
}

const POOL: &str = "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: VMIPool
metadata: {name: web, namespace: prod, uid: pool-uid-1}
spec:
  vmiCount: 3
  virtualMachine: {runStrategy: RerunOnFailure}
  vmiTemplate:
    metadata: {labels: {app: web}, annotations: {team: a}}
    spec:
      domain: {resources: {requests: {memory: 1Gi}}}
      evictionStrategy: LiveMigrate
";

#[test]
fn a_vm_runs_the_rendered_vmi_with_the_pools_strategy_labels_and_owner() {
    let p = pool(POOL);
    let vm = crate::pool::child(&p, 2, &p.template_hash(), &VmiEnv).unwrap();
    assert_eq!(vm.metadata.name.as_deref(), Some("web-2"));
    assert_eq!((vm.api_version.as_str(), vm.kind.as_str()), ("kubevirt.io/v1", "VirtualMachine"), "applied whole");
    assert_eq!(vm.metadata.namespace.as_deref(), Some("prod"));
    let labels = vm.metadata.labels.clone().unwrap();
    assert_eq!((labels["app"].as_str(), labels[POOL_LABEL].as_str()), ("web", "web"));
    assert_eq!(labels[HASH_LABEL], p.template_hash());
    let owner = &vm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("VMIPool", "pool-uid-1", Some(true)));
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("RerunOnFailure"));
    assert_eq!(vm.spec.running, None, "never the deprecated field beside runStrategy");
    let t = vm.spec.template.as_ref().unwrap();
    // The VMI KubeVirt makes from it carries the pool's labels and UID (the knobs find it so).
    assert_eq!(t["metadata"]["labels"]["app"], "web");
    assert_eq!(t["metadata"]["labels"][POOL_LABEL], "web");
    assert_eq!(t["metadata"]["labels"][INDEX_LABEL], "2");
    assert_eq!(t["metadata"]["annotations"]["team"], "a");
    assert_eq!(t["metadata"]["annotations"][POOL_UID_ANNOTATION], "pool-uid-1");
    assert_eq!(t["spec"]["evictionStrategy"], "LiveMigrate");
    assert_eq!(t["spec"]["domain"]["resources"]["requests"]["memory"], "1Gi");
    // Confined to simulated nodes, as a bare VMI of the pool would be.
    assert_eq!(t["spec"]["nodeSelector"]["type"], "kwok");
    let tolerations = t["spec"]["tolerations"].as_array().unwrap();
    assert!(tolerations.iter().any(|t| t["key"] == "kwok.x-k8s.io/node"), "{tolerations:?}");
    assert!(vm.status.is_none());
}

#[test]
fn the_run_strategy_defaults_to_always_and_a_change_rolls_in_place() {
    let always = pool(&POOL.replace("{runStrategy: RerunOnFailure}", "{}"));
    let vm = crate::pool::child(&always, 0, "h", &VmiEnv).unwrap();
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
    let halted = pool(&POOL.replace("RerunOnFailure", "Halted"));
    assert_ne!(always.template_hash(), halted.template_hash(), "a new strategy reaches the VMs");
    assert_eq!(halted.update_mode(), UpdateMode::InPlace, "every VM at once, none replaced");
    for s in ["Always", "RerunOnFailure", "Manual", "Halted", "Once"] {
        let p = pool(&POOL.replace("RerunOnFailure", s));
        assert_eq!(crate::pool::child(&p, 0, "h", &VmiEnv).unwrap().spec.run_strategy.as_deref(), Some(s));
    }
    let bad: Result<VMIPool, _> = serde_yaml::from_str(&POOL.replace("RerunOnFailure", "Sometimes"));
    assert!(bad.is_err(), "an unknown strategy does not decode");
}

#[test]
fn each_pool_is_handled_by_one_view_and_cannot_switch() {
    let vms = pool(POOL);
    let vmis: VMIPool =
        serde_yaml::from_str(&POOL.replace("  virtualMachine: {runStrategy: RerunOnFailure}\n", "")).unwrap();
    assert!(vms.handled_here() && !vms.0.handled_here());
    assert!(vmis.handled_here() && !VmPool(vmis.clone()).handled_here());
    assert_eq!(vms.problems(None, &[]), Vec::<String>::new());
    let switched = <VMIPool as PoolKind>::problems(&vmis, Some(&vms.0), &[]);
    assert_eq!(switched, vec![super::super::kind::MODE_CHANGE.to_string()]);
    let back = <VMIPool as PoolKind>::problems(&vms.0, Some(&vmis), &[]);
    assert_eq!(back, vec![super::super::kind::MODE_CHANGE.to_string()]);
    assert!(VmPool::example().problems(None, &[]).is_empty());
    // A roll budget beside VMs is accepted with a warning: it does nothing.
    let mut budget = vms.0.clone();
    budget.spec.max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    assert_eq!(budget.warnings(), vec![super::super::kind::MAX_UNAVAILABLE_UNUSED.to_string()]);
    assert!(vms.0.warnings().is_empty() && vmis.warnings().is_empty());
}

#[test]
fn ready_and_failing_are_read_from_the_vms_status() {
    let vm = |status: serde_json::Value| -> VirtualMachine {
        serde_json::from_value(json!({"metadata": {"name": "web-0"}, "status": status})).unwrap()
    };
    assert!(VmPool::is_ready(&vm(json!({"printableStatus": "Running", "ready": true}))));
    assert!(!VmPool::is_ready(&vm(json!({"printableStatus": "Stopped"}))));
    assert!(!VmPool::is_ready(&vm(json!({"printableStatus": "Starting", "ready": false}))));
    assert!(VmPool::is_failing(&vm(json!({"printableStatus": "CrashLoopBackOff"}))));
    assert!(VmPool::is_failing(&vm(json!({"printableStatus": "ErrorUnschedulable"}))));
    assert!(!VmPool::is_failing(&vm(json!({"printableStatus": "Stopped"}))));
    assert!(!VmPool::is_finished(&vm(json!({"printableStatus": "Succeeded"}))), "a VM is never replaced for its VMI");
}

#[test]
fn a_vms_vmi_is_governed_by_the_pool_its_template_names() {
    let p = pool(POOL);
    let vm = crate::pool::child(&p, 0, "h", &VmiEnv).unwrap();
    let mut meta: kube::api::ObjectMeta =
        serde_json::from_value(vm.spec.template.as_ref().unwrap()["metadata"].clone()).unwrap();
    meta.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachine".into(),
        name: "web-0".into(),
        uid: "vm-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let refs = pool_refs(&meta);
    assert_eq!(refs.len(), 1);
    assert_eq!((refs[0].kind.as_str(), refs[0].name.as_str(), refs[0].uid.as_str()), ("VMIPool", "web", "pool-uid-1"));
    assert_eq!(refs[0].api_version, "pools.kwok.x-k8s.io/v1alpha1");
    // A VM nobody's pool keeps, or a bare VMI: its own references.
    meta.annotations = None;
    assert_eq!(pool_refs(&meta)[0].kind, "VirtualMachine");
}

#[test]
fn finalizers_go_to_the_vmi_and_a_stray_instance_label_goes() {
    let p = pool(&POOL.replace(
        "metadata: {labels: {app: web}, annotations: {team: a}}",
        "metadata: {labels: {app: web}, finalizers: [example.com/keep]}",
    ));
    let vm = crate::pool::child(&p, 0, "h", &VmiEnv).unwrap();
    assert_eq!(vm.metadata.finalizers, None, "the VM itself holds nothing");
    assert_eq!(vm.spec.template.as_ref().unwrap()["metadata"]["finalizers"], json!(["example.com/keep"]));
    let mut stray = p.clone();
    let labels = stray.0.spec.vmi_template.metadata.as_mut().unwrap().labels.as_mut().unwrap();
    labels.insert(INSTANCE_LABEL.into(), "other".into());
    let t = crate::pool::child(&stray, 0, "h", &VmiEnv).unwrap().spec.template.unwrap();
    assert!(t["metadata"]["labels"].get(INSTANCE_LABEL).is_none(), "another instance must not take its VMIs");
    stray.0.metadata.labels = Some([(INSTANCE_LABEL.to_string(), "team-a".to_string())].into());
    let t = crate::pool::child(&stray, 0, "h", &VmiEnv).unwrap().spec.template.unwrap();
    assert_eq!(t["metadata"]["labels"][INSTANCE_LABEL], "team-a");
}
