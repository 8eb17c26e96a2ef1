//! KubeVirt's VM controller, decided (pure): from a VirtualMachine and its VMI, whether to
//! create or delete the VMI (by the run strategy, its start and stop requests and the start
//! back-off) and the status KubeVirt writes (`printableStatus`, `ready`, `created`,
//! `runStrategy`, the Ready condition, the requests left, `startFailure`). Read in KubeVirt's
//! `pkg/virt-controller/watch/vm/vm.go` (`syncRunStrategy`, `setPrintableStatus`,
//! `syncStartFailureStatus`).

use super::super::kubevirt::VirtualMachineInstance;
use super::super::vm::{StartFailure, StateChangeRequest, VirtualMachine};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::time::Duration;

/// How a VM runs (`spec.runStrategy`, or the deprecated `spec.running`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Always,
    RerunOnFailure,
    Manual,
    Halted,
    Once,
}

impl Strategy {
    pub fn word(self) -> &'static str {
        match self {
            Strategy::Always => "Always",
            Strategy::RerunOnFailure => "RerunOnFailure",
            Strategy::Manual => "Manual",
            Strategy::Halted => "Halted",
            Strategy::Once => "Once",
        }
    }

    /// The VM's strategy, or what is wrong (naming the field).
    pub fn of(vm: &VirtualMachine) -> Result<Self, String> {
        match (vm.spec.running, vm.spec.run_strategy.as_deref()) {
            (Some(_), Some(_)) => Err("spec.running and spec.runStrategy are mutually exclusive: set one".into()),
            (Some(true), None) => Ok(Strategy::Always),
            (Some(false) | None, None) => Ok(Strategy::Halted),
            (None, Some(s)) => match s {
                "Always" => Ok(Strategy::Always),
                "RerunOnFailure" => Ok(Strategy::RerunOnFailure),
                "Manual" => Ok(Strategy::Manual),
                "Halted" => Ok(Strategy::Halted),
                "Once" => Ok(Strategy::Once),
                other => Err(format!(
                    "spec.runStrategy: {other:?} is not simulated: use Always, RerunOnFailure, Manual, Halted or Once"
                )),
            },
        }
    }
}

/// What the controller does to the VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    Nothing,
    Create,
    /// Delete the VMI with this UID.
    Delete(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub act: Act,
    /// The VM's status as KubeVirt writes it (the fields this controller owns).
    pub status: Value,
    /// Look again after this long (a start back-off running out).
    pub again_in: Option<Duration>,
}

fn is_final(vmi: &VirtualMachineInstance) -> bool {
    matches!(vmi.phase(), "Succeeded" | "Failed")
}

/// Whether the VMI ever ran (its phase went through Running).
fn ran(vmi: &VirtualMachineInstance) -> bool {
    vmi.phase() == "Running" || super::status::phase_since(vmi, "Running").is_some()
}

/// The start back-off after `count` VMIs in a row ended without running: KubeVirt's
/// `max(300/30, 10) × count²` seconds plus up to half of it again (drawn from `key`), at most
/// 300 s.
pub fn backoff(count: u32, key: &str) -> Duration {
    let base = 10u64 * u64::from(count).pow(2);
    let jitter = key.bytes().fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b))) % (base / 2 + 1);
    Duration::from_secs((base + jitter).min(300))
}

/// The VM's start back-off after `vmi` (a VMI that ended without running counts once).
fn start_failure(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>, now: Timestamp) -> Option<StartFailure> {
    let old = vm.status.as_ref().and_then(|s| s.start_failure.clone());
    let Some(vmi) = vmi else { return old };
    if ran(vmi) {
        return None;
    }
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    if !is_final(vmi) || old.as_ref().and_then(|f| f.last_failed_vmi_uid.as_ref()) == Some(&uid) {
        return old;
    }
    let count = old.map_or(0, |f| f.consecutive_fail_count) + 1;
    let wait = SignedDuration::try_from(backoff(count, &uid)).unwrap_or_default();
    let retry = now.checked_add(wait).unwrap_or(now);
    Some(StartFailure {
        consecutive_fail_count: count,
        last_failed_vmi_uid: Some(uid),
        retry_after_timestamp: Some(retry.to_string()),
    })
}

/// How long until the back-off lets the VM start again (`None`: it may now).
fn backing_off(failure: Option<&StartFailure>, now: Timestamp) -> Option<Duration> {
    let at: Timestamp = failure?.retry_after_timestamp.as_deref()?.parse().ok()?;
    let left = at.duration_since(now);
    (left > SignedDuration::ZERO).then(|| Duration::try_from(left).unwrap_or_default())
}

/// The requests left once the first is done (KubeVirt acts on the first only).
fn trim(requests: &[StateChangeRequest], vmi: Option<&VirtualMachineInstance>) -> Vec<StateChangeRequest> {
    let Some(first) = requests.first() else { return Vec::new() };
    let live = vmi.filter(|v| v.metadata.deletion_timestamp.is_none() && !is_final(v));
    let done = match first.action.as_str() {
        "Stop" => vmi.is_none() || first.uid.is_none() || first.uid != vmi.and_then(|v| v.metadata.uid.clone()),
        "Start" => live.is_some(),
        _ => true,
    };
    if done { requests[1..].to_vec() } else { requests.to_vec() }
}

/// What the controller does with `vm`, whose VMI is `vmi`, at `now`.
pub fn decide(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>, now: Timestamp) -> Decision {
    let requests = vm.status.as_ref().map(|s| s.state_change_requests.clone()).unwrap_or_default();
    let failure = start_failure(vm, vmi, now);
    let strategy = match Strategy::of(vm) {
        Ok(s) => s,
        Err(message) => {
            let status = status(vm, vmi, None, &Act::Nothing, &requests, failure.as_ref(), Some(&message));
            return Decision { act: Act::Nothing, status, again_in: None };
        }
    };
    let uid = vmi.and_then(|v| v.metadata.uid.clone()).unwrap_or_default();
    let deleting = vmi.is_some_and(|v| v.metadata.deletion_timestamp.is_some());
    let first = requests.first();
    let stop_for_it = first.is_some_and(|r| r.action == "Stop" && r.uid.as_deref() == Some(uid.as_str()));
    let start_asked = first.is_some_and(|r| r.action == "Start");
    let failed = vmi.is_some_and(|v| v.phase() == "Failed");
    let final_ = vmi.is_some_and(is_final);
    let mut requests = requests.clone();
    let wait = backing_off(failure.as_ref(), now);
    let may_start = |asked: bool| if asked && wait.is_none() { Act::Create } else { Act::Nothing };
    let act = if vm.metadata.deletion_timestamp.is_some() {
        Act::Nothing // the garbage collector takes the VMI with it
    } else {
        match (strategy, vmi) {
            (Strategy::Always, Some(_)) if !deleting && (stop_for_it || final_) => Act::Delete(uid.clone()),
            (Strategy::Always, None) => may_start(true),
            (Strategy::RerunOnFailure, Some(_)) if !deleting && (stop_for_it || final_) => {
                if failed && !start_asked {
                    // A failed VMI is run again: the controller asks itself to start.
                    requests.push(StateChangeRequest { action: "Start".into(), uid: None });
                }
                Act::Delete(uid.clone())
            }
            (Strategy::RerunOnFailure, None) => {
                let switched = vm.status.as_ref().and_then(|s| s.run_strategy.as_deref()) != Some("RerunOnFailure");
                may_start(start_asked || switched)
            }
            (Strategy::Manual, Some(_)) if !deleting && stop_for_it => Act::Delete(uid.clone()),
            (Strategy::Manual, None) => may_start(start_asked),
            (Strategy::Halted, Some(_)) if !deleting => Act::Delete(uid.clone()),
            (Strategy::Once, None) => Act::Create,
            _ => Act::Nothing,
        }
    };
    let after: Vec<StateChangeRequest> = if act == Act::Nothing { trim(&requests, vmi) } else { requests };
    let again_in = if matches!(act, Act::Nothing) && vmi.is_none() { wait } else { None };
    let status = status(vm, vmi, Some(strategy), &act, &after, failure.as_ref(), None);
    Decision { act, status, again_in }
}

/// The condition `type_` of the VMI, as (status, reason, message).
fn vmi_condition(vmi: &VirtualMachineInstance, type_: &str) -> Option<(String, Option<String>, Option<String>)> {
    vmi.condition(type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// KubeVirt's `printableStatus`, first match wins.
fn printable(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    strategy: Option<Strategy>,
    act: &Act,
    failure: Option<&StartFailure>,
) -> &'static str {
    let live = vmi.filter(|v| !is_final(v));
    if vm.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    if live.is_some_and(|v| v.metadata.deletion_timestamp.is_some())
        || (live.is_some() && matches!(act, Act::Delete(_)))
    {
        return "Stopping";
    }
    if let Some(v) = live {
        let migrating = v
            .status
            .as_ref()
            .and_then(|s| s.rest.get("migrationState"))
            .is_some_and(|m| m.get("completed") != Some(&json!(true)) && m.get("failed") != Some(&json!(true)));
        let paused = vmi_condition(v, "Paused").is_some_and(|c| c.0 == "True");
        match v.phase() {
            "Running" if migrating => return "Migrating",
            "Running" if paused => return "Paused",
            "Running" => return "Running",
            _ => {}
        }
        let scheduled = vmi_condition(v, "PodScheduled");
        if scheduled.is_some_and(|c| c.0 == "False" && c.1.as_deref() == Some("Unschedulable")) {
            return "ErrorUnschedulable";
        }
        return "Starting";
    }
    if *act == Act::Create {
        return "Starting";
    }
    let restarts = matches!(strategy, Some(Strategy::Always | Strategy::RerunOnFailure | Strategy::Once));
    if restarts && failure.is_some_and(|f| f.consecutive_fail_count > 0) {
        return "CrashLoopBackOff";
    }
    if strategy.is_some() { "Stopped" } else { "Unknown" }
}

fn status(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    strategy: Option<Strategy>,
    act: &Act,
    requests: &[StateChangeRequest],
    failure: Option<&StartFailure>,
    problem: Option<&str>,
) -> Value {
    let ready = vmi.and_then(|v| vmi_condition(v, "Ready"));
    let ready_condition = match (vmi, ready) {
        (None, _) => {
            json!({"type": "Ready", "status": "False", "reason": "VMINotExists", "message": "VMI does not exist"})
        }
        (Some(_), None) => {
            json!({"type": "Ready", "status": "False", "reason": "VMIConditionMissing", "message": "VMI does not have a Ready condition"})
        }
        (Some(_), Some((s, reason, message))) => {
            json!({"type": "Ready", "status": s, "reason": reason, "message": message})
        }
    };
    let mut conditions = vec![ready_condition];
    if let Some(p) = problem {
        conditions.push(json!({"type": "Failure", "status": "True", "reason": "InvalidRunStrategy", "message": p}));
    }
    let created = vmi.is_some() || *act == Act::Create;
    let strategy_written = vm.status.as_ref().and_then(|s| s.run_strategy.clone());
    json!({
        "printableStatus": printable(vm, vmi, strategy, act, failure),
        "ready": vmi.is_some_and(|v| vmi_condition(v, "Ready").is_some_and(|c| c.0 == "True")),
        "created": created,
        // Written once a VMI was created, then kept current.
        "runStrategy": if created || strategy_written.is_some() { strategy.map(|s| json!(s.word())).unwrap_or(json!(strategy_written)) } else { Value::Null },
        "conditions": conditions,
        "stateChangeRequests": if requests.is_empty() { Value::Null } else { json!(requests) },
        "startFailure": failure.map_or(Value::Null, |f| json!(f)),
    })
}

#[cfg(test)]
mod tests;
