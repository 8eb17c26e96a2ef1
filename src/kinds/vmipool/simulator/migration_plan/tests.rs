use super::*;
use crate::informer::fixtures::TestPod;
use crate::kinds::vmipool::kubevirt::VmiStatus;
use k8s_openapi::api::core::v1::Pod as K8sPod;

fn migration(phase: &str, since: &[(&str, &str)]) -> VirtualMachineInstanceMigration {
    let times: Vec<Value> = since.iter().map(|(p, t)| json!({"phase": p, "phaseTransitionTimestamp": t})).collect();
    let mut status = json!({"phaseTransitionTimestamps": times});
    if !phase.is_empty() {
        status["phase"] = json!(phase);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "m", "namespace": "d", "uid": "u-m"},
        "spec": {"vmiName": "vm"},
        "status": status,
    }))
    .unwrap()
}

fn vmi(phase: &str, extra: Value) -> VirtualMachineInstance {
    let mut v: VirtualMachineInstance = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "d", "uid": "u-vm"},
        "spec": {},
    }))
    .unwrap();
    let mut status: VmiStatus = serde_json::from_value(extra).unwrap();
    status.phase = Some(phase.into());
    status.node_name = Some("n1".into());
    v.status = Some(status);
    v
}

fn pod(name: &str, node: Option<&str>, phase: &str, gate: bool) -> SlimPod {
    let p = K8sPod::test(name).uid(&format!("u-{name}")).phase(phase);
    let p = if let Some(n) = node { p.on(n) } else { p };
    let p = if gate { p.condition(UNPAUSED_GATE, "True") } else { p };
    p.slim()
}

const T0: &str = "2026-01-01T00:00:00Z";

fn at(secs: i64) -> Timestamp {
    T0.parse::<Timestamp>().unwrap() + k8s_openapi::jiff::SignedDuration::from_secs(secs)
}

fn step(
    m: &VirtualMachineInstanceMigration,
    vmi: Option<&VirtualMachineInstance>,
    target: Option<&SlimPod>,
    plan: &MigrationPlan,
    now: i64,
) -> Step {
    let source = pod("src", Some("n1"), "Running", true);
    let seen = Seen {
        vmi,
        target,
        source: Some(&source),
        other_active: None,
        target_managed: true,
        slot: true,
        plan,
        now: at(now),
    };
    next_step(m, &seen)
}

#[test]
fn a_migration_goes_through_kubevirts_phases_in_order() {
    let plan = MigrationPlan { time: Duration::from_secs(3), fails: false };
    let running = vmi("Running", json!({}));
    assert_eq!(step(&migration("", &[]), Some(&running), None, &plan, 0), Step::Pending);
    assert_eq!(step(&migration("Pending", &[]), Some(&running), None, &plan, 0), Step::CreateTarget);
    let unbound = pod("t", None, "Pending", false);
    let bound = pod("t", Some("n2"), "Pending", false);
    let gated = pod("t", Some("n2"), "Pending", true);
    let up = pod("t", Some("n2"), "Running", true);
    let scheduling = migration("Scheduling", &[("Scheduling", T0)]);
    assert_eq!(
        step(&scheduling, Some(&running), None, &plan, 1),
        Step::Wait(Some(Duration::from_secs(14))),
        "the store lags"
    );
    assert!(matches!(step(&scheduling, Some(&running), None, &plan, 16), Step::Fail(_)), "the target pod is gone");
    assert_eq!(step(&scheduling, Some(&running), Some(&unbound), &plan, 1), Step::Wait(Some(Duration::from_secs(899))));
    assert_eq!(step(&scheduling, Some(&running), Some(&bound), &plan, 1), Step::UnpauseTarget);
    assert_eq!(step(&scheduling, Some(&running), Some(&gated), &plan, 1), Step::Wait(None));
    assert_eq!(step(&scheduling, Some(&running), Some(&up), &plan, 1), Step::Scheduled);
    assert_eq!(step(&migration("Scheduled", &[]), Some(&running), Some(&up), &plan, 1), Step::PreparingTarget);
    assert_eq!(step(&migration("PreparingTarget", &[]), Some(&running), Some(&up), &plan, 1), Step::TargetReady);
    assert_eq!(step(&migration("TargetReady", &[]), Some(&running), Some(&up), &plan, 1), Step::Running);
    let copying = migration("Running", &[("Running", T0)]);
    assert_eq!(step(&copying, Some(&running), Some(&up), &plan, 1), Step::Wait(Some(Duration::from_secs(2))));
    assert_eq!(step(&copying, Some(&running), Some(&up), &plan, 3), Step::Complete);
    let moved = vmi("Running", json!({"migrationState": {"migrationUid": "u-m", "completed": true, "failed": false}}));
    assert_eq!(step(&copying, Some(&moved), Some(&up), &plan, 4), Step::Finish(true));
    let mut arrived = moved.clone();
    arrived.status.as_mut().unwrap().node_name = Some("n2".into());
    assert_eq!(step(&migration("Succeeded", &[]), Some(&arrived), Some(&up), &plan, 4), Step::DeleteSource);
}

#[test]
fn a_failing_copy_aborts_and_the_target_pod_goes() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: true };
    let up = pod("t", Some("n2"), "Running", true);
    let running = vmi("Running", json!({}));
    let copying = migration("Running", &[("Running", T0)]);
    assert_eq!(step(&copying, Some(&running), Some(&up), &plan, 0), Step::Abort);
    let aborted = vmi("Running", json!({"migrationState": {"migrationUid": "u-m", "completed": true, "failed": true}}));
    assert_eq!(step(&copying, Some(&aborted), Some(&up), &plan, 1), Step::Finish(false));
    assert_eq!(step(&migration("Failed", &[]), Some(&aborted), Some(&up), &plan, 1), Step::DeleteTarget);
    // Another migration's state is not this one's.
    let other = vmi("Running", json!({"migrationState": {"migrationUid": "u-x", "completed": true, "failed": true}}));
    assert_eq!(step(&copying, Some(&other), Some(&up), &plan, 1), Step::Abort);
}

#[test]
fn kubevirt_refuses_what_cannot_move_with_its_reasons() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: false };
    let new = migration("", &[]);
    let Step::Fail(why) = step(&new, None, None, &plan, 0) else { panic!("no VMI") };
    assert_eq!(why, "VMI d/vm does not exist");
    let Step::Fail(why) = step(&new, Some(&vmi("Scheduling", json!({}))), None, &plan, 0) else { panic!() };
    assert!(why.contains("\"Scheduling\""), "{why}");
    let bridged = vmi(
        "Running",
        json!({"conditions": [{"type": "LiveMigratable", "status": "False", "reason": "InterfaceNotLiveMigratable", "message": "cannot migrate VMI which does not use masquerade"}]}),
    );
    assert_eq!(
        step(&new, Some(&bridged), None, &plan, 0),
        Step::Fail("Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: cannot migrate VMI which does not use masquerade".into())
    );
    let running = vmi("Running", json!({}));
    let seen = Seen {
        vmi: Some(&running),
        target: None,
        source: None,
        other_active: Some("first"),
        target_managed: true,
        slot: true,
        plan: &plan,
        now: at(0),
    };
    let Step::Fail(why) = next_step(&new, &seen) else { panic!() };
    assert!(why.starts_with("in-flight migration detected. Active migration job (first)"), "{why}");
}

#[test]
fn a_lost_target_or_vmi_fails_the_migration_and_an_unschedulable_target_times_out() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: false };
    let running = vmi("Running", json!({}));
    assert!(matches!(step(&migration("Scheduled", &[]), Some(&running), None, &plan, 0), Step::Fail(_)));
    let up = pod("t", Some("n2"), "Running", true);
    assert!(matches!(
        step(&migration("Running", &[]), Some(&vmi("Failed", json!({}))), Some(&up), &plan, 0),
        Step::Fail(_)
    ));
    let mut stuck = K8sPod::test("t").uid("u-t").phase("Pending").slim();
    stuck.unschedulable = Some(Box::new(("Unschedulable".into(), "0/3 nodes are available".into())));
    let scheduling = migration("Scheduling", &[("Scheduling", T0)]);
    assert_eq!(step(&scheduling, Some(&running), Some(&stuck), &plan, 100), Step::Wait(Some(Duration::from_secs(200))));
    let Step::Fail(why) = step(&scheduling, Some(&running), Some(&stuck), &plan, 301) else { panic!() };
    assert!(why.contains("0/3 nodes are available"), "{why}");
}

#[test]
fn the_target_pod_avoids_the_vmis_other_pods_and_carries_the_migration() {
    let running = vmi("Running", json!({}));
    let pod = target_pod(&running, "u-m");
    let name = pod.metadata.name.clone().unwrap();
    assert!(name.starts_with("virt-launcher-vm-") && name.len() == "virt-launcher-vm-".len() + 5, "{name}");
    assert_eq!(target_name("vm", "u-m"), name, "one name per migration");
    assert_ne!(target_name("vm", "u-other"), name);
    assert!(target_name(&"x".repeat(80), "u").len() <= 63);
    assert_eq!(pod.metadata.labels.as_ref().unwrap()[MIGRATION_JOB_LABEL], "u-m");
    let anti = pod.spec.unwrap().affinity.unwrap().pod_anti_affinity.unwrap();
    let term = &anti.required_during_scheduling_ignored_during_execution.unwrap()[0];
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    let req = &term.label_selector.as_ref().unwrap().match_expressions.as_ref().unwrap()[0];
    assert_eq!((req.key.as_str(), req.values.as_deref()), (CREATED_BY_LABEL, Some(&["u-vm".to_string()][..])));
}

#[test]
fn completion_moves_the_vmi_and_its_addresses_to_the_target() {
    let running = vmi(
        "Running",
        json!({"interfaces": [{"name": "default", "podInterfaceName": "eth0", "ipAddress": "10.0.0.1"}]}),
    );
    let src = pod("src", Some("n1"), "Running", true);
    let mut target = pod("t", Some("n2"), "Running", true);
    target.pod_ips = vec!["10.0.1.7".parse().unwrap()];
    let p = completed_patch(&running, Some(&src), &target, &json!(T0));
    assert_eq!(p["status"]["nodeName"], "n2");
    assert_eq!(p["metadata"]["labels"][NODE_NAME_LABEL], "n2");
    assert_eq!(p["status"]["activePods"], json!({"u-src": null, "u-t": "n2"}));
    assert_eq!(p["status"]["interfaces"][0]["ipAddress"], "10.0.1.7");
    assert_eq!(p["status"]["evacuationNodeName"], Value::Null);
    assert_eq!(p["status"]["migrationState"]["completed"], true);
    let h = handoff_patch(&running, "u-m", Some(&src), &target);
    let s = &h["status"]["migrationState"];
    assert_eq!(
        (s["sourceNode"].as_str(), s["targetNode"].as_str(), s["mode"].as_str()),
        (Some("n1"), Some("n2"), Some("PreCopy"))
    );
    assert_eq!((s["sourcePod"].as_str(), s["targetPod"].as_str()), (Some("src"), Some("t")));
}

#[test]
fn a_pending_migration_waits_for_a_slot_within_the_parallel_limits() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: false };
    let running = vmi("Running", json!({}));
    let pending = migration("Pending", &[]);
    let seen = |slot, target| Seen {
        vmi: Some(&running),
        target,
        source: None,
        other_active: None,
        target_managed: true,
        slot,
        plan: &plan,
        now: at(0),
    };
    assert_eq!(next_step(&pending, &seen(false, None)), Step::Wait(None));
    assert_eq!(next_step(&pending, &seen(true, None)), Step::CreateTarget);
    let made = pod("t", None, "Pending", false);
    assert_eq!(next_step(&pending, &seen(false, Some(&made))), Step::CreateTarget, "its pod exists: it goes on");
}

#[test]
fn a_later_migration_never_ends_the_pod_the_vmi_now_runs_in() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: false };
    // The VMI moved on to n3 (a later migration); this one's recorded source is a pod there.
    let mut moved = vmi("Running", json!({}));
    moved.status.as_mut().unwrap().node_name = Some("n3".into());
    let current = pod("t2", Some("n3"), "Running", true);
    let old_source = pod("src", Some("n1"), "Running", true);
    let done = migration("Succeeded", &[]);
    let seen = |source| Seen {
        vmi: Some(&moved),
        target: None,
        source,
        other_active: None,
        target_managed: true,
        slot: true,
        plan: &plan,
        now: at(0),
    };
    assert_eq!(next_step(&done, &seen(Some(&current))), Step::Wait(None));
    assert_eq!(next_step(&done, &seen(Some(&old_source))), Step::DeleteSource);
}

#[test]
fn of_two_migrations_made_at_once_the_later_fails_and_a_stuck_target_times_out() {
    let plan = MigrationPlan { time: Duration::ZERO, fails: false };
    let running = vmi("Running", json!({}));
    let pending = migration("Pending", &[]);
    let seen = Seen {
        vmi: Some(&running),
        target: None,
        source: None,
        other_active: Some("first"),
        target_managed: true,
        slot: true,
        plan: &plan,
        now: at(0),
    };
    let Step::Fail(why) = next_step(&pending, &seen) else { panic!("the later one fails") };
    assert!(why.starts_with("in-flight migration detected"), "{why}");
    // A target pod with no node and no reason, or on a node nobody here runs: 15 minutes.
    let scheduling = migration("Scheduling", &[("Scheduling", T0)]);
    let unbound = pod("t", None, "Pending", false);
    assert_eq!(
        step(&scheduling, Some(&running), Some(&unbound), &plan, 100),
        Step::Wait(Some(Duration::from_secs(800)))
    );
    assert!(matches!(step(&scheduling, Some(&running), Some(&unbound), &plan, 901), Step::Fail(_)));
    let elsewhere = pod("t", Some("real"), "Pending", false);
    let unmanaged = |now| {
        let seen = Seen {
            vmi: Some(&running),
            target: Some(&elsewhere),
            source: None,
            other_active: None,
            target_managed: false,
            slot: true,
            plan: &plan,
            now: at(now),
        };
        next_step(&scheduling, &seen)
    };
    assert!(matches!(unmanaged(10), Step::Wait(Some(_))));
    assert!(matches!(unmanaged(901), Step::Fail(_)));
}
