use super::*;
use crate::api::cloud::INTERRUPTION_TAINT;
use serde_json::json;

const T0: u64 = 1_900_000_000;

fn node(uid: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": "n", "uid": uid, "labels": labels,
        "creationTimestamp": "2030-03-17T17:46:40Z"}}))
    .unwrap()
}

fn knobs(yaml: &str) -> NodeLifecycle {
    serde_yaml::from_str(yaml).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(T0 + s)
}

#[test]
fn the_creation_time_is_read_in_seconds_since_the_epoch() {
    assert_eq!(created(&node("u", json!({}))), Some(secs(0)));
}

#[test]
fn a_booting_node_is_not_ready_until_its_drawn_delay_then_up() {
    let k = knobs(
        "boot: {after: {min: 30s, max: 60s}, startupTaints: [{key: cni.example/agent-not-ready, effect: NoSchedule}]}",
    );
    let mut delays = Vec::new();
    for i in 0..200 {
        let p = plan(&k, Some(3), &node(&format!("uid-{i}"), json!({})), secs(0)).unwrap();
        let until = p.boot_until.unwrap();
        assert!((secs(30)..=secs(60)).contains(&until), "{until:?}");
        assert_eq!(p.at(secs(10)), (Phase::Booting, Some(until)));
        assert_eq!(p.at(until), (Phase::Up, None));
        assert_eq!(p.startup_taints[0].key, "cni.example/agent-not-ready");
        delays.push(until.as_secs());
    }
    delays.sort_unstable();
    assert!(delays[20] < T0 + 40 && delays[180] > T0 + 50, "drawn across the range, not one value: {delays:?}");
    let again = plan(&k, Some(3), &node("uid-7", json!({})), secs(0)).unwrap();
    assert_eq!(again, plan(&k, Some(3), &node("uid-7", json!({})), secs(0)).unwrap(), "the same node draws the same");
    assert_eq!(
        plan(&NodeLifecycle::default(), Some(3), &node("u", json!({})), secs(0)),
        None,
        "no cloud knob, no plan"
    );
}

#[test]
fn a_share_of_launches_fails_and_is_due_for_replacement_after_the_timeout() {
    let k = knobs("launchFailures: {percent: 20, replaceAfter: 2m}\ninterruptions: {every: 1m}");
    let plans: Vec<CloudPlan> =
        (0..1000).map(|i| plan(&k, None, &node(&format!("u{i}"), json!({})), secs(0)).unwrap()).collect();
    let failed: Vec<&CloudPlan> = plans.iter().filter(|p| p.replace_at.is_some()).collect();
    assert!((150..=250).contains(&failed.len()), "about 20% of 1000: {}", failed.len());
    let f = failed[0];
    assert_eq!(f.interruption, None, "a node that never came up is not interrupted");
    assert_eq!(f.at(secs(1)), (Phase::LaunchFailed { replace_due: false }, Some(secs(120))));
    assert_eq!(f.at(secs(120)), (Phase::LaunchFailed { replace_due: true }, None));
    let rows = Phase::LaunchFailed { replace_due: true }.rows();
    assert_eq!((rows[1].0, rows[1].2), (LAUNCH_FAILED, REPLACEMENT_DUE));
    assert_eq!(rows[0].1, "False", "never Ready");
}

#[test]
fn interruptions_come_at_the_knobs_rate_with_a_notice_then_a_shutdown_then_the_end() {
    let k = knobs("boot: {after: {fixed: 10s}}\ninterruptions: {every: 10m, notice: 1m, shutdownGracePeriod: 20s}");
    let n = 2000;
    let mut total = 0.0;
    for i in 0..n {
        let p = plan(&k, Some(1), &node(&format!("u{i}"), json!({})), secs(0)).unwrap();
        let it = p.interruption.unwrap();
        assert!(it.at >= secs(10), "counted from when the node is up");
        total += (it.at - secs(10)).as_secs_f64();
    }
    let mean = total / f64::from(n);
    assert!((540.0..660.0).contains(&mean), "an exponential of mean 600s: {mean}");
    let p = plan(&k, Some(1), &node("u1", json!({})), secs(0)).unwrap();
    let it = p.interruption.clone().unwrap();
    assert_eq!(it.taint.key, INTERRUPTION_TAINT);
    if it.at >= secs(70) {
        assert_eq!(it.notice_at, it.at - Duration::from_secs(60));
    }
    assert_eq!(p.at(it.notice_at).0, Phase::Noticed);
    assert_eq!(p.at(it.at), (Phase::ShuttingDown, Some(it.at + Duration::from_secs(20))));
    assert_eq!(p.at(it.gone_at), (Phase::Gone, None));
    assert!(Phase::ShuttingDown.noticed() && !Phase::Up.noticed());
}

#[test]
fn spot_only_interruptions_spare_on_demand_nodes() {
    let k = knobs("interruptions: {every: 1h, spotOnly: true}");
    let spot = plan(&k, None, &node("a", json!({CAPACITY_TYPE_LABEL: "spot"})), secs(0)).unwrap();
    let on_demand = plan(&k, None, &node("a", json!({CAPACITY_TYPE_LABEL: "on-demand"})), secs(0)).unwrap();
    assert!(spot.interruption.is_some());
    assert_eq!(on_demand.interruption, None);
    assert_eq!(on_demand.at(secs(1_000_000)), (Phase::Up, None));
}

#[test]
fn the_shutdown_and_the_failed_launch_are_read_back_from_the_node() {
    let mut n = node("u", json!({}));
    let rows = |p: Phase| -> serde_json::Value {
        p.rows().iter().map(|r| json!({"type": r.0, "status": r.1, "reason": r.2, "message": r.3})).collect()
    };
    n.status = Some(serde_json::from_value(json!({"conditions": rows(Phase::ShuttingDown)})).unwrap());
    assert!(shutting_down(&n));
    n.status = Some(serde_json::from_value(json!({"conditions": rows(Phase::Booting)})).unwrap());
    assert!(!shutting_down(&n), "a booting node is NotReady but not shutting down");
    assert_eq!(launch_failed(&n), None);
    n.status =
        Some(serde_json::from_value(json!({"conditions": rows(Phase::LaunchFailed { replace_due: false })})).unwrap());
    assert_eq!(launch_failed(&n), Some(false));
}

#[test]
fn startup_taints_are_removed_by_key_and_effect_and_others_stay() {
    let mut n = node("u", json!({}));
    n.spec = Some(serde_json::from_value(json!({"taints": [
        {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}, {"key": "a", "effect": "NoExecute"}]})).unwrap());
    let a = Taint { key: "a".into(), effect: "NoSchedule".into(), ..Default::default() };
    let left = without_taints(&n, std::slice::from_ref(&a)).unwrap();
    assert_eq!(
        left.iter().map(|t| (t.key.as_str(), t.effect.as_str())).collect::<Vec<_>>(),
        [("b", "NoExecute"), ("a", "NoExecute")]
    );
    assert!(has_taint(&n, &a));
    let c = Taint { key: "c".into(), effect: "NoSchedule".into(), ..Default::default() };
    assert_eq!(without_taints(&n, std::slice::from_ref(&c)), None, "nothing to remove: no write");
    assert!(!has_taint(&n, &c));
}

#[test]
fn knobs_added_later_neither_fail_nodes_that_came_up_nor_interrupt_old_nodes_at_once() {
    let k = knobs("launchFailures: {percent: 100}\ninterruptions: {every: 1m}");
    let mut up = node("u", json!({}));
    up.status = Some(serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "True"}]})).unwrap());
    let month_later = secs(30 * 24 * 3600);
    let p = plan(&k, None, &up, month_later).unwrap();
    assert_eq!(p.replace_at, None, "a node that came up is not a failed launch");
    assert!(p.interruption.unwrap().at >= month_later, "drawn from when the knobs were first seen on it");
    let booting = node("u", json!({}));
    assert!(plan(&k, None, &booting, secs(0)).unwrap().replace_at.is_some(), "100%: a node not up yet fails");
}
