use super::*;

fn vm(spec: Value, status: Value) -> VirtualMachine {
    serde_json::from_value(
        json!({"metadata": {"name": "vm", "namespace": "d", "uid": "vm-1"}, "spec": spec, "status": status}),
    )
    .unwrap()
}

fn vmi(uid: &str, phase: &str, ready: bool, ran: bool) -> VirtualMachineInstance {
    let mut transitions = vec![json!({"phase": "Pending", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"})];
    if ran {
        transitions.push(json!({"phase": "Running", "phaseTransitionTimestamp": "2026-01-01T00:00:05Z"}));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "d", "uid": uid},
        "status": {"phase": phase, "phaseTransitionTimestamps": transitions,
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}

fn now() -> Timestamp {
    "2026-01-01T00:01:00Z".parse().unwrap()
}

#[test]
fn strategies_read_from_run_strategy_or_the_deprecated_running() {
    assert_eq!(Strategy::of(&vm(json!({"running": true}), json!({}))), Ok(Strategy::Always));
    assert_eq!(Strategy::of(&vm(json!({"running": false}), json!({}))), Ok(Strategy::Halted));
    assert_eq!(Strategy::of(&vm(json!({}), json!({}))), Ok(Strategy::Halted));
    assert_eq!(Strategy::of(&vm(json!({"runStrategy": "Once"}), json!({}))), Ok(Strategy::Once));
    assert!(
        Strategy::of(&vm(json!({"running": true, "runStrategy": "Always"}), json!({})))
            .unwrap_err()
            .contains("mutually exclusive")
    );
    let e = Strategy::of(&vm(json!({"runStrategy": "Sometimes"}), json!({}))).unwrap_err();
    assert!(e.contains("spec.runStrategy"), "{e}");
}

#[test]
fn always_starts_a_vmi_and_reports_it_running() {
    let v = vm(json!({"runStrategy": "Always"}), json!({}));
    let d = decide(&v, None, now());
    assert_eq!(d.act, Act::Create);
    assert_eq!(d.status["printableStatus"], "Starting");
    let running = vmi("i-1", "Running", true, true);
    let d = decide(&v, Some(&running), now());
    assert_eq!(d.act, Act::Nothing);
    assert_eq!(
        (d.status["printableStatus"].as_str(), d.status["ready"].as_bool(), d.status["created"].as_bool()),
        (Some("Running"), Some(true), Some(true))
    );
    assert_eq!(d.status["runStrategy"], "Always");
    assert_eq!(d.status["conditions"][0]["status"], "True");
}

#[test]
fn halted_stops_the_vmi_and_reports_stopped() {
    let v = vm(json!({"runStrategy": "Halted"}), json!({"runStrategy": "Always"}));
    let d = decide(&v, Some(&vmi("i-1", "Running", true, true)), now());
    assert_eq!(d.act, Act::Delete("i-1".into()));
    assert_eq!(d.status["printableStatus"], "Stopping");
    let d = decide(&v, None, now());
    assert_eq!(d.act, Act::Nothing);
    assert_eq!(d.status["printableStatus"], "Stopped");
    assert_eq!(d.status["conditions"][0]["reason"], "VMINotExists");
}

#[test]
fn rerun_on_failure_reruns_a_failed_vmi_but_not_one_that_succeeded() {
    let v = vm(json!({"runStrategy": "RerunOnFailure"}), json!({"runStrategy": "RerunOnFailure"}));
    let d = decide(&v, Some(&vmi("i-1", "Failed", false, true)), now());
    assert_eq!(d.act, Act::Delete("i-1".into()));
    assert_eq!(d.status["stateChangeRequests"][0]["action"], "Start", "it asks itself to start again");
    let asked = vm(
        json!({"runStrategy": "RerunOnFailure"}),
        json!({"runStrategy": "RerunOnFailure", "stateChangeRequests": [{"action": "Start"}]}),
    );
    assert_eq!(decide(&asked, None, now()).act, Act::Create);
    let d = decide(&v, Some(&vmi("i-1", "Succeeded", false, true)), now());
    assert_eq!(d.act, Act::Delete("i-1".into()));
    assert!(d.status["stateChangeRequests"].is_null());
    assert_eq!(decide(&v, None, now()).act, Act::Nothing, "a guest that shut down stays stopped");
}

#[test]
fn manual_starts_and_stops_only_on_request_and_once_never_restarts() {
    let v = vm(json!({"runStrategy": "Manual"}), json!({}));
    assert_eq!(decide(&v, None, now()).act, Act::Nothing);
    let start = vm(json!({"runStrategy": "Manual"}), json!({"stateChangeRequests": [{"action": "Start"}]}));
    assert_eq!(decide(&start, None, now()).act, Act::Create);
    let d = decide(&start, Some(&vmi("i-1", "Running", true, true)), now());
    assert!(d.status["stateChangeRequests"].is_null(), "the Start is done once the VMI runs");
    let stop = vm(json!({"runStrategy": "Manual"}), json!({"stateChangeRequests": [{"action": "Stop", "uid": "i-1"}]}));
    assert_eq!(decide(&stop, Some(&vmi("i-1", "Running", true, true)), now()).act, Act::Delete("i-1".into()));
    let once = vm(json!({"runStrategy": "Once"}), json!({}));
    assert_eq!(decide(&once, None, now()).act, Act::Create);
    assert_eq!(decide(&once, Some(&vmi("i-1", "Succeeded", false, true)), now()).act, Act::Nothing);
}

#[test]
fn vmis_that_never_run_back_the_vm_off_as_a_crash_loop() {
    let v = vm(json!({"runStrategy": "Always"}), json!({"runStrategy": "Always"}));
    let d = decide(&v, Some(&vmi("i-1", "Failed", false, false)), now());
    assert_eq!(d.act, Act::Delete("i-1".into()));
    assert_eq!(d.status["startFailure"]["consecutiveFailCount"], 1);
    let status = d.status.clone();
    let backed = vm(json!({"runStrategy": "Always"}), status);
    let d = decide(&backed, None, now());
    assert_eq!(d.act, Act::Nothing, "within the back-off");
    assert_eq!(d.status["printableStatus"], "CrashLoopBackOff");
    let wait = d.again_in.unwrap();
    assert!((Duration::from_secs(9)..=Duration::from_secs(15)).contains(&wait), "{wait:?}");
    let later = now().checked_add(SignedDuration::from_secs(16)).unwrap();
    assert_eq!(decide(&backed, None, later).act, Act::Create);
    assert!((90..=135).contains(&backoff(3, "x").as_secs()), "90 s and up to half again: {:?}", backoff(3, "x"));
    assert_eq!(backoff(10, "x").as_secs(), 300);
}

#[test]
fn an_unschedulable_vmi_and_a_bad_strategy_are_reported() {
    let v = vm(json!({"runStrategy": "Always"}), json!({}));
    let mut pending = vmi("i-1", "Scheduling", false, false);
    pending.status.as_mut().unwrap().conditions.push(
        serde_json::from_value(json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})).unwrap(),
    );
    assert_eq!(decide(&v, Some(&pending), now()).status["printableStatus"], "ErrorUnschedulable");
    let bad = vm(json!({"runStrategy": "Sometimes"}), json!({}));
    let d = decide(&bad, None, now());
    assert_eq!(d.act, Act::Nothing);
    assert_eq!(d.status["printableStatus"], "Unknown");
    assert_eq!(d.status["conditions"][1]["reason"], "InvalidRunStrategy");
}
