//! What KubeVirt does next for a live migration, decided from what the stores show (pure):
//! virt-controller's part (admit, create the target launcher pod, hand off to the handlers)
//! and virt-handler's (prepare the target, copy, switch the VMI's node), read in KubeVirt's
//! `pkg/virt-controller/watch/migration` and `pkg/virt-handler`. One write per step; every
//! step is decided again from the stores, so a lost write or a restart only repeats a step.
//! Also the patches those steps write and the target pod.

use super::super::kubevirt::VirtualMachineInstance;
use super::super::migration::{MIGRATION_JOB_LABEL, VirtualMachineInstanceMigration};
use super::plan::MigrationPlan;
use super::status::{CREATED_BY_LABEL, NODE_NAME_LABEL, UNPAUSED_GATE};
use crate::informer::pod::SlimPod;
use k8s_openapi::api::core::v1::{Affinity, Pod, PodAffinityTerm, PodAntiAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The VMI label KubeVirt sets while a migration moves it: the target node.
pub const TARGET_NODE_LABEL: &str = "kubevirt.io/migrationTargetNodeName";

/// How long after its creation a target pod the pod store does not show is waited for.
pub const STORE_LAG: Duration = Duration::from_secs(15);

/// How long a target pod may stay pending for any other reason (KubeVirt's
/// `catchAllPendingTimeoutSeconds`).
pub const CATCH_ALL_TIMEOUT: Duration = Duration::from_secs(900);

fn pending_too_long(waited: Duration) -> String {
    format!("the target pod did not start within {}s", waited.as_secs())
}

fn vmi_node(seen: &Seen) -> Option<String> {
    seen.vmi.and_then(|v| v.status.as_ref()).and_then(|s| s.node_name.clone())
}

/// Why a copy failed, as the simulator says it.
pub const FAILED_COPY: &str =
    "the live migration failed (simulated by kwok-pools: spec.lifecycle.vmis.migrationFailPercent)";

/// How long a target pod may stay unschedulable before its migration fails (KubeVirt's
/// `unschedulablePendingTimeoutSeconds`).
pub const UNSCHEDULABLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The next step of a migration.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing now; look again after this long (`None`: on the next change).
    Wait(Option<Duration>),
    /// A new migration of a VMI that can move: Pending.
    Pending,
    /// The migration cannot go on: Failed, with KubeVirt's reason.
    Fail(String),
    /// Create the target launcher pod (then Scheduling).
    CreateTarget,
    /// The target pod is bound to a node: its readiness gate set, before its kubelet runs it.
    UnpauseTarget,
    /// The target pod runs: Scheduled, the VMI told where it goes.
    Scheduled,
    /// The target handler prepares the domain.
    PreparingTarget,
    /// The target is ready to receive.
    TargetReady,
    /// The memory copy starts.
    Running,
    /// The copy is over: the VMI now runs on the target node.
    Complete,
    /// The copy failed: the VMI's migration state says so; it stays on its node.
    Abort,
    /// The VMI shows the result: the migration's phase follows (`true`: Succeeded).
    Finish(bool),
    /// Succeeded: the source launcher pod ends.
    DeleteSource,
    /// Failed: the target launcher pod ends.
    DeleteTarget,
}

/// What the decision reads besides the migration.
pub struct Seen<'a> {
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// The target launcher pod (labelled with this migration's UID).
    pub target: Option<&'a SlimPod>,
    /// The VMI's launcher pod on its current node.
    pub source: Option<&'a SlimPod>,
    /// Another migration of the same VMI that has not ended and came first.
    pub other_active: Option<&'a str>,
    /// The target pod's node is one this simulator manages.
    pub target_managed: bool,
    /// A migration may start now: fewer than the parallel limits run, in the cluster and out
    /// of the VMI's node.
    pub slot: bool,
    pub plan: &'a MigrationPlan,
    pub now: Timestamp,
}

/// The VMI's `status.migrationState` when it is this migration's.
pub fn state_of<'a>(vmi: &'a VirtualMachineInstance, migration_uid: &str) -> Option<&'a Value> {
    let state = vmi.status.as_ref()?.rest.get("migrationState")?;
    (state.get("migrationUid").and_then(Value::as_str) == Some(migration_uid)).then_some(state)
}

/// When the migration entered `phase`, from its `phaseTransitionTimestamps`.
pub fn phase_since(m: &VirtualMachineInstanceMigration, phase: &str) -> Option<Timestamp> {
    let list = m.status.as_ref()?.rest.get("phaseTransitionTimestamps")?.as_array()?;
    list.iter()
        .rev()
        .find(|t| t.get("phase").and_then(Value::as_str) == Some(phase))
        .and_then(|t| t.get("phaseTransitionTimestamp")?.as_str()?.parse().ok())
}

fn elapsed(since: Option<Timestamp>, now: Timestamp) -> Duration {
    since.map_or(Duration::ZERO, |at| {
        Duration::from_secs_f64((now - at).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0).max(0.0))
    })
}

fn ended(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_some() || matches!(pod.phase(), "Failed" | "Succeeded")
}

/// Why KubeVirt refuses to migrate this VMI now (its messages), if it does.
fn refusal(m: &VirtualMachineInstanceMigration, seen: &Seen) -> Option<String> {
    let ns = m.metadata.namespace.as_deref().unwrap_or_default();
    let Some(vmi) = seen.vmi else {
        return Some(format!("VMI {ns}/{} does not exist", m.spec.vmi_name));
    };
    if vmi.metadata.deletion_timestamp.is_some() || vmi.phase() != "Running" {
        return Some(format!("Cannot migrate VMI in phase {:?}: only a Running VMI migrates", vmi.phase()));
    }
    if let Some(c) = vmi.condition("LiveMigratable").filter(|c| c.status == "False") {
        return Some(format!(
            "Cannot migrate VMI, Reason: {}, Message: {}",
            c.reason.as_deref().unwrap_or_default(),
            c.message.as_deref().unwrap_or_default()
        ));
    }
    if let Some(other) = seen.other_active {
        return Some(format!(
            "in-flight migration detected. Active migration job ({other}) is currently already in progress for VMI {}.",
            m.spec.vmi_name
        ));
    }
    None
}

/// The next step for migration `m`.
pub fn next_step(m: &VirtualMachineInstanceMigration, seen: &Seen) -> Step {
    let uid = m.metadata.uid.as_deref().unwrap_or_default();
    let state = seen.vmi.and_then(|v| state_of(v, uid));
    let flag = |key: &str| state.and_then(|s| s.get(key)).and_then(Value::as_bool) == Some(true);
    match m.phase() {
        "" => match refusal(m, seen) {
            Some(why) => Step::Fail(why),
            None => Step::Pending,
        },
        // Only the pod it moved the VMI out of: never one on the VMI's node now (a later
        // migration's target the VMI runs in).
        "Succeeded" => match seen.source {
            Some(p) if p.metadata.deletion_timestamp.is_none() && p.node_name != vmi_node(seen) => Step::DeleteSource,
            _ => Step::Wait(None),
        },
        "Failed" => match seen.target {
            Some(p) if p.metadata.deletion_timestamp.is_none() => Step::DeleteTarget,
            _ => Step::Wait(None),
        },
        _ if m.metadata.deletion_timestamp.is_some() => Step::Fail("the migration was deleted".into()),
        _ if seen.vmi.is_none_or(|v| v.metadata.deletion_timestamp.is_some() || v.phase() != "Running") => {
            Step::Fail("the VMI stopped running during the migration".into())
        }
        _ if flag("completed") => Step::Finish(!flag("failed")),
        // Two made at once: the first one goes on, as KubeVirt's admission would have it.
        "Pending" if seen.target.is_none() && seen.other_active.is_some() => match refusal(m, seen) {
            Some(why) => Step::Fail(why),
            None => Step::Wait(None),
        },
        // Queued until a slot frees (a target pod created before a restart goes on).
        "Pending" if seen.target.is_none() && !seen.slot => Step::Wait(None),
        "Pending" => Step::CreateTarget,
        "Scheduling" => {
            let Some(target) = seen.target else {
                // Just created, the pod store may not show it yet.
                let waited = elapsed(phase_since(m, "Scheduling"), seen.now);
                return if waited < STORE_LAG {
                    Step::Wait(Some(STORE_LAG.saturating_sub(waited)))
                } else {
                    Step::Fail("the target pod is gone".into())
                };
            };
            if ended(target) {
                return Step::Fail(format!("the target pod {} ended", target.name()));
            }
            let waited = elapsed(phase_since(m, "Scheduling"), seen.now);
            if target.node_name.is_none() {
                return match target.unschedulable.as_deref() {
                    Some((_, why)) if waited >= UNSCHEDULABLE_TIMEOUT => {
                        Step::Fail(format!("the target pod was unschedulable for {}s: {why}", waited.as_secs()))
                    }
                    Some(_) => Step::Wait(Some(UNSCHEDULABLE_TIMEOUT.saturating_sub(waited))),
                    None if waited >= CATCH_ALL_TIMEOUT => Step::Fail(pending_too_long(waited)),
                    None => Step::Wait(Some(CATCH_ALL_TIMEOUT.saturating_sub(waited))),
                };
            }
            if !seen.target_managed {
                // On a node no simulator here runs: nothing will start it.
                if waited >= CATCH_ALL_TIMEOUT {
                    Step::Fail(pending_too_long(waited))
                } else {
                    Step::Wait(Some(CATCH_ALL_TIMEOUT.saturating_sub(waited)))
                }
            } else if target.condition(UNPAUSED_GATE) != Some("True") {
                Step::UnpauseTarget
            } else if target.phase() == "Running" {
                Step::Scheduled
            } else {
                Step::Wait(None)
            }
        }
        _ if seen.target.is_none_or(ended) => Step::Fail("the target pod is gone".into()),
        "Scheduled" => Step::PreparingTarget,
        "PreparingTarget" => Step::TargetReady,
        "TargetReady" => Step::Running,
        "Running" => {
            let left = seen.plan.time.saturating_sub(elapsed(phase_since(m, "Running"), seen.now));
            if !left.is_zero() {
                Step::Wait(Some(left))
            } else if seen.plan.fails {
                Step::Abort
            } else {
                Step::Complete
            }
        }
        _ => Step::Wait(None),
    }
}

/// The migration's status patch entering `phase` (with the VMI's migration state copied, as
/// KubeVirt keeps it on the migration too).
pub fn phase_patch(m: &VirtualMachineInstanceMigration, phase: &str, state: Option<&Value>, now: &Value) -> Value {
    let mut list =
        m.status.as_ref().and_then(|s| s.rest.get("phaseTransitionTimestamps")).cloned().unwrap_or(json!([]));
    if let Some(items) = list.as_array_mut() {
        items.push(json!({"phase": phase, "phaseTransitionTimestamp": now}));
    }
    let mut status = json!({"phase": phase, "phaseTransitionTimestamps": list});
    if let Some(s) = state {
        status["migrationState"] = s.clone();
    }
    json!({"metadata": {"uid": m.metadata.uid}, "status": status})
}

/// A failed migration's status: Failed with a condition saying why.
pub fn failed_patch(m: &VirtualMachineInstanceMigration, why: &str, state: Option<&Value>, now: &Value) -> Value {
    let mut patch = phase_patch(m, "Failed", state, now);
    patch["status"]["conditions"] = json!([{
        "type": "Failed", "status": "True", "reason": "MigrationFailed", "message": why,
        "lastProbeTime": null, "lastTransitionTime": now,
    }]);
    patch
}

/// The name of migration `uid`'s target pod: the launcher's, with a suffix from the UID (one
/// name per migration, so a repeated create is a conflict, never a second pod).
pub fn target_name(vmi_name: &str, migration_uid: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let digest = Sha256::digest(migration_uid.as_bytes());
    let suffix: String = digest[..5].iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect();
    let base: String = format!("virt-launcher-{vmi_name}").chars().take(63 - 6).collect();
    format!("{base}-{suffix}")
}

/// The target launcher pod: the VMI's launcher pod with the migration's label and a required
/// anti-affinity to the VMI's other launcher pods, so the scheduler puts it on another node.
pub fn target_pod(vmi: &VirtualMachineInstance, migration_uid: &str) -> Pod {
    let mut pod = super::status::launcher_pod(vmi);
    let vmi_uid = vmi.metadata.uid.clone().unwrap_or_default();
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(target_name(vmi.metadata.name.as_deref().unwrap_or_default(), migration_uid));
    pod.metadata.labels.get_or_insert_default().insert(MIGRATION_JOB_LABEL.into(), migration_uid.into());
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: CREATED_BY_LABEL.into(),
                operator: "In".into(),
                values: Some(vec![vmi_uid]),
            }]),
            ..Default::default()
        }),
        topology_key: "kubernetes.io/hostname".into(),
        ..Default::default()
    };
    if let Some(spec) = pod.spec.as_mut() {
        let affinity = spec.affinity.get_or_insert_with(Affinity::default);
        let anti = affinity.pod_anti_affinity.get_or_insert_with(PodAntiAffinity::default);
        anti.required_during_scheduling_ignored_during_execution.get_or_insert_default().push(term);
    }
    pod
}

/// The VMI's migration state as the controller hands the migration to the handlers: where
/// from, where to, how.
pub fn handoff_patch(vmi: &VirtualMachineInstance, m_uid: &str, source: Option<&SlimPod>, target: &SlimPod) -> Value {
    let target_node = target.node_name.clone().unwrap_or_default();
    let source_node = vmi.status.as_ref().and_then(|s| s.node_name.clone());
    json!({
        "metadata": {"uid": vmi.metadata.uid, "labels": {TARGET_NODE_LABEL: target_node}},
        "status": {"migrationState": {
            "migrationUid": m_uid,
            "sourceNode": source_node,
            "sourcePod": source.map(SlimPod::name),
            "targetNode": target_node,
            "targetPod": target.name(),
            "mode": "PreCopy",
            "completed": false,
            "failed": false,
        }}
    })
}

/// The copy starts: its start time.
pub fn started_patch(vmi: &VirtualMachineInstance, now: &Value) -> Value {
    json!({"metadata": {"uid": vmi.metadata.uid}, "status": {"migrationState": {"startTimestamp": now}}})
}

/// The copy is over: the VMI runs on the target node, in the target pod (its addresses too);
/// a drain's mark is taken off.
pub fn completed_patch(vmi: &VirtualMachineInstance, source: Option<&SlimPod>, target: &SlimPod, now: &Value) -> Value {
    let node = target.node_name.clone().unwrap_or_default();
    let mut active = serde_json::Map::new();
    if let Some(s) = source {
        active.insert(s.uid().to_string(), Value::Null);
    }
    active.insert(target.uid().to_string(), json!(node));
    let ips: Vec<String> = target.pod_ips.iter().map(ToString::to_string).collect();
    let interfaces: Option<Vec<Value>> =
        vmi.status.as_ref().and_then(|s| s.rest.get("interfaces")).and_then(Value::as_array).map(|list| {
            list.iter()
                .cloned()
                .map(|mut i| {
                    if i.get("podInterfaceName").is_some()
                        && let Some(first) = ips.first()
                    {
                        i["ipAddress"] = json!(first);
                        i["ipAddresses"] = json!(ips);
                    }
                    i
                })
                .collect()
        });
    let mut status = json!({
        "nodeName": node,
        "activePods": active,
        "evacuationNodeName": null,
        "migrationState": {"endTimestamp": now, "completed": true, "failed": false},
    });
    if let Some(list) = interfaces {
        status["interfaces"] = json!(list);
    }
    json!({
        "metadata": {"uid": vmi.metadata.uid, "labels": {NODE_NAME_LABEL: node, TARGET_NODE_LABEL: null}},
        "status": status,
    })
}

/// The migration failed (`why`): the VMI stays where it is.
pub fn aborted_patch(vmi: &VirtualMachineInstance, why: &str, now: &Value) -> Value {
    json!({
        "metadata": {"uid": vmi.metadata.uid, "labels": {TARGET_NODE_LABEL: null}},
        "status": {"migrationState": {"endTimestamp": now, "completed": true, "failed": true,
            "failureReason": why}},
    })
}

#[cfg(test)]
mod tests;
