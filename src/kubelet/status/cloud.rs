//! A node's cloud lifecycle under its knobs (`spec.lifecycle.nodes.boot`, `launchFailures`,
//! `interruptions`): when it boots, whether its launch fails and when its pool replaces it,
//! when its interruption notice comes, when it shuts down and when it is gone — and what its
//! kubelet reports meanwhile. Times are seconds since the epoch, counted from the node's
//! creation, drawn per node object (its UID), so a replacement draws again. Pure.

use crate::api::cloud::{Boot, CAPACITY_TYPE_LABEL, Interruptions, LaunchFailures};
use crate::api::lifecycle::NodeLifecycle;
use crate::simulator::lifecycle::{sample, units};
use k8s_openapi::api::core::v1::{Node, Taint};
use std::time::Duration;

/// The kubelet's Ready message while the node shuts down (v1.37 `nodeshutdown` manager).
pub const SHUTTING_DOWN: &str = "node is shutting down";
/// The kubelet's Ready message before the network plugin is up.
pub const BOOTING: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";
/// The condition a node whose launch failed reports.
pub const LAUNCH_FAILED: &str = "LaunchFailed";
/// Its reason until its pool should replace it, and after.
pub const LAUNCH_FAILED_REASON: &str = "InstanceLaunchFailed";
pub const REPLACEMENT_DUE: &str = "ReplacementDue";
/// The event of an interruption notice.
pub const NOTICE_REASON: &str = "InterruptionNotice";

/// What happens to one node, as times since the epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CloudPlan {
    /// Ready from then (before: booting).
    pub boot_until: Option<Duration>,
    /// Its launch failed: replaced by its pool from then.
    pub replace_at: Option<Duration>,
    pub interruption: Option<Interruption>,
    /// The taints it sheds once Ready.
    pub startup_taints: Vec<Taint>,
}

/// One interruption: the notice (its taint), the shutdown, the end.
#[derive(Clone, Debug, PartialEq)]
pub struct Interruption {
    pub notice_at: Duration,
    pub at: Duration,
    pub gone_at: Duration,
    pub taint: Taint,
    pub notice: Duration,
}

/// Where a node stands in its plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Booting,
    LaunchFailed {
        replace_due: bool,
    },
    Up,
    /// The interruption notice has come.
    Noticed,
    ShuttingDown,
    /// Shut down: the node is deleted.
    Gone,
}

/// The node's creation time (seconds since the epoch; `None`: not created yet).
pub fn created(node: &Node) -> Option<Duration> {
    let t = node.metadata.creation_timestamp.as_ref()?.0;
    Some(Duration::from_secs_f64(t.as_millisecond().max(0) as f64 / 1000.0))
}

fn is_spot(node: &Node) -> bool {
    node.metadata.labels.as_ref().and_then(|l| l.get(CAPACITY_TYPE_LABEL)).is_some_and(|v| v == "spot")
}

/// The plan of `node` under `knobs` (`None` when no cloud knob applies or it has no creation
/// time). `since`: when the simulator first saw the node under these knobs — an interruption
/// is drawn from then at the earliest, so knobs added to a pool of old nodes do not interrupt
/// them all at once. A launch fails only for a node that is not Ready: knobs added later do
/// not fail nodes that came up.
pub fn plan(knobs: &NodeLifecycle, seed: Option<i64>, node: &Node, since: Duration) -> Option<CloudPlan> {
    if knobs.boot.is_none() && knobs.launch_failures.is_none() && knobs.interruptions.is_none() {
        return None;
    }
    let created = created(node)?;
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let (seed, key) = (seed.unwrap_or(0), [uid.as_str()]);
    let boot = knobs.boot.as_ref();
    let boot_until = boot.map(|b| created + sample(Some(&b.after), seed, &key, "boot").unwrap_or_default());
    let startup_taints = boot.map(|b: &Boot| b.startup_taints.clone()).unwrap_or_default();
    let ready = condition(node, "Ready").is_some_and(|c| c.status == "True");
    let came_up = ready && condition(node, LAUNCH_FAILED).is_none();
    let failed = knobs
        .launch_failures
        .as_ref()
        .filter(|l| !came_up && units(seed, &key, "launch").0 * 100.0 < f64::from(l.percent.min(100)));
    let replace_at = failed.map(|l: &LaunchFailures| created + l.replace_after());
    let interruption = match knobs.interruptions.as_ref() {
        Some(i) if failed.is_none() && (i.spot_only != Some(true) || is_spot(node)) => {
            interruption(i, seed, &key, boot_until.unwrap_or(created).max(since))
        }
        _ => None,
    };
    Some(CloudPlan { boot_until, replace_at, interruption, startup_taints })
}

/// An interruption drawn from an exponential distribution of the knob's mean, counted from
/// when the node is up.
fn interruption(i: &Interruptions, seed: i64, key: &[&str], up: Duration) -> Option<Interruption> {
    const CAP: f64 = 100.0 * 365.0 * 24.0 * 3600.0;
    let mean = i.mean()?.as_secs_f64();
    let u = units(seed, key, "interruption").0.clamp(0.0, 0.999_999_999);
    let after = (-mean * (1.0 - u).ln()).min(CAP);
    let at = up + Duration::from_secs_f64(after);
    let notice = i.notice();
    Some(Interruption {
        notice_at: at.saturating_sub(notice).max(up),
        at,
        gone_at: at + i.shutdown(),
        taint: i.taint(),
        notice,
    })
}

impl CloudPlan {
    /// Where the node stands at `now`, and when that changes next (`None`: never).
    pub fn at(&self, now: Duration) -> (Phase, Option<Duration>) {
        if let Some(replace_at) = self.replace_at {
            let due = now >= replace_at;
            return (Phase::LaunchFailed { replace_due: due }, (!due).then_some(replace_at));
        }
        if let Some(until) = self.boot_until.filter(|u| now < *u) {
            return (Phase::Booting, Some(until));
        }
        let Some(i) = &self.interruption else { return (Phase::Up, None) };
        if now < i.notice_at {
            (Phase::Up, Some(i.notice_at))
        } else if now < i.at {
            (Phase::Noticed, Some(i.at))
        } else if now < i.gone_at {
            (Phase::ShuttingDown, Some(i.gone_at))
        } else {
            (Phase::Gone, None)
        }
    }
}

impl Phase {
    /// The conditions the node's kubelet reports in this phase beyond the healthy ones:
    /// (type, status, reason, message) rows that replace the healthy row of their type.
    pub fn rows(self) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
        match self {
            Phase::Booting => vec![("Ready", "False", "KubeletNotReady", BOOTING)],
            Phase::LaunchFailed { replace_due } => vec![
                ("Ready", "False", "KubeletNotReady", BOOTING),
                (
                    LAUNCH_FAILED,
                    "True",
                    if replace_due { REPLACEMENT_DUE } else { LAUNCH_FAILED_REASON },
                    "the instance never finished booting (simulated by kwok-pools: spec.lifecycle.nodes.launchFailures)",
                ),
            ],
            Phase::ShuttingDown | Phase::Gone => vec![("Ready", "False", "KubeletNotReady", SHUTTING_DOWN)],
            Phase::Up | Phase::Noticed => Vec::new(),
        }
    }

    /// Whether the node carries its interruption notice's taint in this phase.
    pub fn noticed(self) -> bool {
        matches!(self, Phase::Noticed | Phase::ShuttingDown | Phase::Gone)
    }
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a k8s_openapi::api::core::v1::NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Whether the node's kubelet says it is shutting down (its pods are to end).
pub fn shutting_down(node: &Node) -> bool {
    condition(node, "Ready").is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(SHUTTING_DOWN))
}

/// Whether the node reports a failed launch, and whether its replacement is due.
pub fn launch_failed(node: &Node) -> Option<bool> {
    let c = condition(node, LAUNCH_FAILED).filter(|c| c.status == "True")?;
    Some(c.reason.as_deref() == Some(REPLACEMENT_DUE))
}

/// The node's taints without `remove` (matched by key and effect), if it carries any of them.
pub fn without_taints(node: &Node, remove: &[Taint]) -> Option<Vec<Taint>> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    let hit = |t: &Taint| remove.iter().any(|r| r.key == t.key && r.effect == t.effect);
    taints.iter().any(hit).then(|| taints.iter().filter(|t| !hit(t)).cloned().collect())
}

/// Whether the node carries `taint` (by key and effect).
pub fn has_taint(node: &Node, taint: &Taint) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == taint.key && t.effect == taint.effect))
}

#[cfg(test)]
mod tests;
