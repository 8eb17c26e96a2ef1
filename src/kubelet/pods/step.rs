//! What the kubelet does next for one pod, decided apart from doing it (as the kubelet's
//! `pod_workers` decide and its status manager sends): given the pod, what is tracked of it,
//! its plan and the time, [`step`] (the pod was seen or looked at again) and [`fire`] (one of
//! its timers went off) return the [`Effect`]s — status patches, timers, events — that the
//! worker then applies. Pure: no I/O, no clock but the [`Now`] given, so every behaviour is
//! unit-tested here and under tokio's paused clock in the worker's tests.

use super::super::status::admission::Rejection;
use super::super::status::eviction;
use super::super::status::fate::{self, Fate, PodPlan};
use super::super::status::patches as pod_status;
use super::super::status::pod::Exit;
use super::super::{Mount, Prepare};
use crate::informer::pod::SlimPod;
use crate::simulator::clock::Now;
use crate::simulator::machinery::Attempts;
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;
use tokio::time::Instant;

/// How often a deferred resize is tried again.
pub const RESIZE_RETRY: Duration = Duration::from_secs(5);
/// How long a timer that cannot act now (a write of the pod in flight) waits to try again.
const BUSY: Duration = Duration::from_secs(1);
/// How long an image pull fails before it backs off (ErrImagePull → ImagePullBackOff).
const PULL_BACK_OFF: Duration = Duration::from_secs(10);

/// One of a pod's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerKind {
    /// Its start delay is over (or its node is back, or its claims may be known): look again.
    Start,
    /// A crash-looping container crashes.
    Crash,
    /// Its back-off is over: it runs again (or fails again, if it fails at start).
    Restart,
    /// Its run time is over: it completes.
    Complete,
    /// Its exit delay is over: its terminal status, then the final delete.
    Remove,
    /// Its `activeDeadlineSeconds` have passed since it started.
    Deadline,
    /// A failing image pull turns into ImagePullBackOff.
    PullBackOff,
    /// A failed init container's back-off is over: it fails again.
    InitRetry,
    /// Its readiness probe starts or stops failing.
    Probe,
    /// A deferred resize is tried again.
    Resize,
}

impl TimerKind {
    pub const ALL: [TimerKind; 10] = [
        TimerKind::Start,
        TimerKind::Crash,
        TimerKind::Restart,
        TimerKind::Complete,
        TimerKind::Remove,
        TimerKind::Deadline,
        TimerKind::PullBackOff,
        TimerKind::InitRetry,
        TimerKind::Probe,
        TimerKind::Resize,
    ];

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// What the worker keeps of one pod between events.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub node: String,
    /// The pod's status or delete write (one at a time; failures in a row for the back-off).
    pub write: Attempts,
    /// Its timers that are armed (the worker's timer wheel holds them).
    armed: u16,
    /// We wrote Running; the store may not show it yet.
    pub started: bool,
    /// When the simulator first saw the pod on its node (start delays count from here).
    pub seen: Instant,
    /// `down` and `restarts` were read from the pod (first sight).
    pub known: bool,
    /// The kubelet's admission let it in (its requests count against its node's).
    pub admitted: bool,
    /// We wrote the pod acknowledged (Pending, ContainerCreating) during its start delay.
    pub acknowledged: bool,
    /// How many of its regular init containers we started, one after the other.
    pub inits_started: u8,
    /// Its containers are down (crashed, in back-off), as last written or seen.
    pub down: bool,
    pub restarts: i32,
    /// The final delete went through (the object may linger for others' finalizers).
    pub removed: bool,
    /// Deleted: how its containers end (from its exit delay and grace period), and whether
    /// that terminal status was written (the final delete follows it).
    pub ending: Option<pod_status::Ending>,
    pub terminal_written: bool,
    pub exhausted_reported: bool,
    /// Its annotations' problems were reported (an event on the pod).
    pub annotations_reported: bool,
    /// A failed prepare of its claims was reported (an event on the pod).
    pub prepare_reported: bool,
    /// A mount that failed was reported (FailedMount, said once).
    pub mount_reported: bool,
}

impl Tracked {
    /// A pod first seen at `seen`.
    pub fn new(seen: Instant) -> Self {
        Self {
            node: String::new(),
            write: Attempts::default(),
            armed: 0,
            started: false,
            seen,
            known: false,
            admitted: false,
            acknowledged: false,
            inits_started: 0,
            down: false,
            restarts: 0,
            removed: false,
            ending: None,
            terminal_written: false,
            exhausted_reported: false,
            annotations_reported: false,
            prepare_reported: false,
            mount_reported: false,
        }
    }

    pub fn is_armed(&self, kind: TimerKind) -> bool {
        self.armed & kind.bit() != 0
    }

    /// The timer went off (the wheel no longer holds it).
    pub fn fired(&mut self, kind: TimerKind) {
        self.armed &= !kind.bit();
    }

    /// The timers armed now.
    pub fn armed(&self) -> impl Iterator<Item = TimerKind> + '_ {
        TimerKind::ALL.into_iter().filter(|k| self.is_armed(*k))
    }
}

/// What the worker does for a pod.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Write this status patch (`transition` names it in metrics and traces).
    Status { patch: Value, transition: &'static str },
    /// Answer the pod's in-place resize (the writer reads its node's pods first).
    Resize,
    /// The final delete.
    Remove,
    /// Arm (or move) one of its timers.
    Arm(TimerKind, Duration),
    /// Disarm one of its timers.
    Cancel(TimerKind),
    /// A Warning event on the pod.
    Warn { reason: std::borrow::Cow<'static, str>, action: &'static str, note: String },
    /// A Normal event on the pod (only when its plan sends them).
    Normal { reason: &'static str, action: &'static str, note: String },
    /// Count a fault a knob injected.
    Injected(&'static str),
    /// Count a transition that was not written.
    Skipped(&'static str),
    /// It needs addresses from its node's range: the worker allocates and steps again with
    /// them, or puts it on the node's waiting list.
    NeedAddresses,
    /// Its node has no address yet: its next update looks at the pod again.
    WaitForNode,
    /// It finished: its address goes back.
    Release,
    /// It runs with these addresses: the allocator keeps them its.
    Observe(Vec<IpAddr>),
}

/// What a decision about one pod reads besides the pod and what is tracked of it.
pub struct Input<'a> {
    pub pod: &'a SlimPod,
    pub now: Now,
    /// Its node and plan, when its node is one this replica simulates.
    pub node: Option<NodeFacts<'a>>,
    /// The addresses the worker allocated for it, once it has them.
    pub pod_ips: Option<&'a [IpAddr]>,
    /// The prepare step of its ResourceClaims (read only for a pod with claims not started).
    pub prepare: Prepare,
    /// Where its volumes stand (read only for a pod with volumes not started).
    pub mount: Mount,
    /// How saturated the simulator's writes are (0 to 1).
    pub pressure: f64,
    /// The kubelet's admission refused it (read only for a pod not started yet).
    pub rejection: Option<&'a Rejection>,
    /// Why the kubelet ends it now on its own: the eviction manager picked it, or its node
    /// shuts down.
    pub evict: Option<&'a eviction::Eviction>,
}

/// What a decision reads of the pod's node and its knobs.
pub struct NodeFacts<'a> {
    pub plan: &'a PodPlan,
    /// When the node's NotReady window ends, if it is in one.
    pub away: Option<Instant>,
    /// The node's InternalIPs.
    pub host_ips: &'a [IpAddr],
}

/// The effects being decided, with the tracked state they change.
struct Out<'t> {
    t: &'t mut Tracked,
    effects: Vec<Effect>,
}

impl Out<'_> {
    fn warn(&mut self, reason: &'static str, action: &'static str, note: String) {
        self.effects.push(Effect::Warn { reason: reason.into(), action, note });
    }

    fn normal(&mut self, plan: &PodPlan, reason: &'static str, action: &'static str, note: String) {
        if plan.normal_events {
            self.effects.push(Effect::Normal { reason, action, note });
        }
    }

    /// The kubelet's events for containers that start: Pulled, Created, Started (Normal).
    fn started_events(&mut self, plan: &PodPlan, pod: &SlimPod) {
        // Init containers run one by one had theirs as each started.
        let one_by_one = self.t.inits_started > 0;
        let inits = pod.init_containers.iter().filter(|c| c.sidecar || !one_by_one);
        for c in inits.chain(&pod.containers) {
            self.normal(plan, "Pulled", "Pull", format!("Container image {:?} already present on machine", c.image));
            self.normal(plan, "Created", "Create", "Container created".into());
            self.normal(plan, "Started", "Start", "Container started".into());
        }
    }

    /// The kubelet's BackOff Warning for a container that exited and waits to restart.
    fn back_off(&mut self, pod: &SlimPod, container: Option<&str>) {
        let c = container.or(pod.containers.first().map(|c| c.name.as_str())).unwrap_or_default();
        let desc = format!("{}_{}({})", pod.name(), pod.metadata.namespace.as_deref().unwrap_or_default(), pod.uid());
        self.warn("BackOff", "Restart", format!("Back-off restarting failed container {c} in pod {desc}"));
    }

    fn arm(&mut self, kind: TimerKind, after: Duration) {
        self.t.armed |= kind.bit();
        self.effects.push(Effect::Arm(kind, after));
    }

    fn arm_once(&mut self, kind: TimerKind, after: Duration) {
        if !self.t.is_armed(kind) {
            self.arm(kind, after);
        }
    }

    fn cancel(&mut self, kind: TimerKind) {
        if self.t.is_armed(kind) {
            self.t.armed &= !kind.bit();
            self.effects.push(Effect::Cancel(kind));
        }
    }

    /// A write: the pod's one write in flight.
    fn write(&mut self, effect: Effect) {
        self.t.write.in_flight = true;
        self.effects.push(effect);
    }

    fn status(&mut self, patch: Value, transition: &'static str) {
        self.write(Effect::Status { patch, transition });
    }
}

/// The pod was seen, or is looked at again: what a kubelet does next (nothing for a pod on no
/// node of ours). The knobs are read each time (its node's `plan`), so a pool's change applies
/// at once.
pub fn step(i: &Input, t: &mut Tracked) -> Vec<Effect> {
    let mut out = Out { t, effects: Vec::new() };
    let Some(facts) = &i.node else { return out.effects };
    if out.t.write.in_flight {
        return out.effects;
    }
    let pod = i.pod;
    if !out.t.known {
        // After a restart the pod tells where its crash loop stands.
        out.t.known = true;
        out.t.down = pod.crash_looping;
        out.t.restarts = pod.restart_count;
    }
    if !out.t.annotations_reported
        && let Some(o) = pod.overrides.as_deref().filter(|o| !o.problems.is_empty())
    {
        out.t.annotations_reported = true;
        let note = format!("{} (fix the annotation on the pod or its template)", o.problems.join("; "));
        out.effects.push(Effect::Warn { reason: "BadAnnotation".into(), action: "ReadAnnotations", note });
    }
    if pod.metadata.deletion_timestamp.is_some() {
        schedule_removal(i, facts, &mut out);
    } else if let Some(until) = facts.away {
        // Its node's kubelet is "gone": nothing happens to the pod until the node is back.
        out.arm_once(TimerKind::Start, until.saturating_duration_since(i.now.at));
    } else if pod_status::is_terminal(pod) {
        // A finished pod is not live: its address goes back, and may fit a waiting pod.
        out.effects.push(Effect::Release);
    } else if let Some(e) = i.evict.filter(|e| e.applies(pod)) {
        // The eviction manager picked it, or its node shuts down: Failed, with the kubelet's
        // reason, message and event.
        let (patch, reason, note) = e.patch(pod, &i.now.value());
        out.cancel(TimerKind::Complete);
        out.warn(reason, "Evict", note);
        out.status(patch, "evict");
    } else {
        watch_deadline(i, &mut out);
        if !pod_status::is_running(pod) {
            start(i, facts, &mut out);
        } else {
            keep_running(i, facts, &mut out);
        }
    }
    out.effects
}

/// A pod with `activeDeadlineSeconds` and a start time: ended when they have passed, as the
/// kubelet ends it.
fn watch_deadline(i: &Input, out: &mut Out) {
    let (Some(deadline), Some(started)) = (i.pod.active_deadline_seconds, i.pod.start_time) else { return };
    let left = (f64::from(deadline) - i.now.since(started)).clamp(0.0, 1e9);
    out.arm_once(TimerKind::Deadline, Duration::from_secs_f64(left));
}

/// A deleted pod goes once its exit delay has passed: about a second for a process that
/// honours SIGTERM, the whole grace period for one that ignores it, never past the grace. On
/// a node in a NotReady window nobody confirms the exit until the node is back.
fn schedule_removal(i: &Input, facts: &NodeFacts, out: &mut Out) {
    let pod = i.pod;
    let Some(deleted_at) = pod.metadata.deletion_timestamp.as_ref() else { return };
    if out.t.is_armed(TimerKind::Remove) || out.t.removed {
        return;
    }
    let grace = Duration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64);
    let terminal = pod_status::is_terminal(pod) || out.t.terminal_written;
    let exit_delay = facts.plan.exit_delay;
    let wait = if terminal { Duration::ZERO } else { exit_delay.map_or(grace, |d| d.min(grace)) };
    if !terminal && pod_status::is_running(pod) {
        for c in &pod.containers {
            out.normal(facts.plan, "Killing", "Kill", format!("Stopping container {}", c.name));
        }
    }
    if !terminal {
        out.t.ending = Some(if !pod_status::is_running(pod) {
            pod_status::Ending::NeverStarted
        } else if exit_delay.is_some_and(|d| d < grace) {
            pod_status::Ending::Signalled
        } else {
            pod_status::Ending::Killed
        });
    }
    // Like a kubelet, wait from now; but never past the deletion timestamp (seconds
    // resolution, hence the extra second), which matters after a restart.
    let until_deadline = -i.now.since(deleted_at.0) + 1.0;
    let mut remaining = wait.min(Duration::from_secs_f64(until_deadline.clamp(0.0, 1e9)));
    if let Some(back) = facts.away {
        remaining = remaining.max(back.saturating_duration_since(i.now.at));
    }
    out.arm(TimerKind::Remove, remaining);
}

/// A pod not running yet: acknowledged at once (Pending, its containers creating) when it has
/// a start delay; after the delay, addresses and one status write: Running, or crashed, or
/// Failed, as its fate says.
fn start(i: &Input, facts: &NodeFacts, out: &mut Out) {
    let pod = i.pod;
    if let Some(r) = i.rejection.filter(|_| !out.t.started && pod.start_time.is_none()) {
        // The kubelet's admission refused it: Failed at once, with its reason and an event.
        out.t.started = true;
        out.effects.push(Effect::Warn { reason: r.reason.clone().into(), action: "Admit", note: r.message.clone() });
        out.status(pod_status::rejected_patch(r), "reject");
        return;
    }
    if pod.claims && !out.t.started && !prepared(i, facts, out) {
        return;
    }
    if pod.volumes().is_some() && !out.t.started && !mounted(i, facts, out) {
        return;
    }
    if out.t.started || out.t.is_armed(TimerKind::Start) {
        return; // our write is on its way through the watch, or the start delay runs
    }
    let host_ips = facts.host_ips;
    if host_ips.is_empty() {
        // The node has no address yet; its next update retries.
        out.effects.push(Effect::WaitForNode);
        return;
    }
    let due = out.t.seen + facts.plan.start_delay;
    if due > i.now.at {
        out.arm(TimerKind::Start, due - i.now.at);
        acknowledge(i, host_ips, out);
        return;
    }
    let never_restarts = facts.plan.ends_failed(pod);
    let now = i.now.value();
    let (patch, transition) = match &facts.plan.fate {
        Fate::FailsAtStart(exit) if never_restarts => (pod_status::failed_patch(pod, host_ips, exit, &now), "fail"),
        Fate::InitFails(exit) if never_restarts => {
            (pod_status::init_failed_patch(pod, (host_ips, &[]), exit, 0, &now), "init-fail")
        }
        fate => {
            // The sandbox is made: the pod has its addresses whatever its containers do.
            let Some(pod_ips) = i.pod_ips else {
                out.effects.push(Effect::NeedAddresses);
                return;
            };
            if next_init(i, facts, (host_ips, pod_ips), out) {
                return;
            }
            match fate {
                Fate::FailsAtStart(exit) => {
                    let running = pod_status::running_patch(pod, host_ips, pod_ips, &now);
                    (pod_status::with(running, pod_status::crashed_patch(pod, 1, exit, &now)), "crash")
                }
                Fate::ImagePullFails => {
                    out.arm(TimerKind::PullBackOff, PULL_BACK_OFF);
                    (pod_status::image_pull_patch(pod, host_ips, pod_ips, false, &now), "image-pull-fail")
                }
                Fate::InitFails(exit) => {
                    out.arm(TimerKind::InitRetry, fate::crash_back_off(1));
                    (pod_status::init_failed_patch(pod, (host_ips, pod_ips), exit, 0, &now), "init-fail")
                }
                _ if facts.plan.never_ready || !warm_up(pod).is_zero() => {
                    // Running, its probe failing from the first moment (never Ready, or not until
                    // its probes' first success).
                    let running = pod_status::running_patch(pod, host_ips, pod_ips, &now);
                    (pod_status::with(running, pod_status::probe_patch(pod, false, &now)), "run")
                }
                _ => (pod_status::running_patch(pod, host_ips, pod_ips, &now), "run"),
            }
        }
    };
    if transition == "crash" {
        out.t.down = true;
        out.t.restarts = 1;
    }
    if transition != "run" {
        out.effects.push(Effect::Injected(transition));
    }
    start_events(pod, facts.plan, transition, never_restarts, out);
    out.t.started = true;
    let patch = match init_starts(i, facts.plan, out.t.inits_started) {
        Some(starts) if transition != "fail" => pod_status::with_init_times(patch, pod, &starts, &now),
        _ => patch,
    };
    out.status(patch, transition);
}

/// When each init container the pod ran one by one started (the next of them is due now):
/// `None` when they were not run one by one.
fn init_starts(i: &Input, plan: &PodPlan, started: u8) -> Option<Vec<Value>> {
    if started == 0 || plan.init_run_time.is_zero() {
        return None;
    }
    let starts = (0..u32::from(started)).map(|j| {
        let back = plan.init_run_time * (u32::from(started) - j);
        let at = i.now.wall - k8s_openapi::jiff::SignedDuration::try_from(back).unwrap_or_default();
        serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)).unwrap_or(Value::Null)
    });
    Some(starts.collect())
}

/// The pod's regular init containers run one by one for the plan's `initRunTime` each (its
/// fate lets them run): the next starts now (the ones before it completed), and the pod is
/// looked at again when it is done. `true` when it wrote.
fn next_init(i: &Input, facts: &NodeFacts, ips: (&[IpAddr], &[IpAddr]), out: &mut Out) -> bool {
    let (pod, plan) = (i.pod, facts.plan);
    let inits = pod.init_containers.iter().filter(|c| !c.sidecar).count();
    let plays = matches!(plan.fate, Fate::Runs | Fate::CrashLoops { .. } | Fate::FailsAtStart(_));
    if plan.init_run_time.is_zero() || !plays || usize::from(out.t.inits_started) >= inits {
        return false;
    }
    let Some(c) = pod.init_containers.iter().filter(|c| !c.sidecar).nth(usize::from(out.t.inits_started)) else {
        return false;
    };
    out.normal(plan, "Pulled", "Pull", format!("Container image {:?} already present on machine", c.image));
    out.normal(plan, "Created", "Create", "Container created".into());
    out.normal(plan, "Started", "Start", "Container started".into());
    out.t.inits_started = out.t.inits_started.saturating_add(1);
    let mut starts = init_starts(i, plan, out.t.inits_started - 1).unwrap_or_default();
    starts.push(i.now.value());
    out.arm(TimerKind::Start, plan.init_run_time);
    out.status(pod_status::init_progress_patch(pod, ips, &starts, &i.now.value()), "init");
    true
}

/// The kubelet's events as a pod's containers first start (or fail to): Normal Pulled, Created,
/// Started when they run (if its plan sends them); Warnings when its image does not pull or a
/// container exits and waits to restart.
fn start_events(pod: &SlimPod, plan: &PodPlan, transition: &str, never_restarts: bool, out: &mut Out) {
    match transition {
        "run" => out.started_events(plan, pod),
        "crash" => {
            out.started_events(plan, pod);
            let exit = exit_of(plan);
            out.back_off(pod, exit.container.as_deref());
        }
        "image-pull-fail" => {
            for c in &pod.containers {
                let note = format!(
                    "Failed to pull image {:?}: simulated by kwok-pools (the pod's image-pull knob or annotation)",
                    c.image
                );
                out.warn("Failed", "Pull", note);
            }
            out.warn("Failed", "Pull", "Error: ErrImagePull".into());
        }
        "init-fail" if !never_restarts => {
            let exit = exit_of(plan);
            let init = exit
                .container
                .clone()
                .or_else(|| pod.init_containers.iter().find(|c| !c.sidecar).map(|c| c.name.clone()));
            out.back_off(pod, init.as_deref());
        }
        _ => {}
    }
}

/// As a kubelet does before it pulls images: startTime, host IPs, containers creating (once).
fn acknowledge(i: &Input, host_ips: &[IpAddr], out: &mut Out) {
    if !out.t.acknowledged && i.pod.start_time.is_none() {
        out.t.acknowledged = true;
        out.status(pod_status::pending_patch(i.pod, host_ips, &i.now.value()), "acknowledge");
    }
}

/// The kubelet's prepare step for the pod's ResourceClaims: false while the pod cannot start
/// — its claims are not known yet (looked at again in a second), or a driver fails to
/// prepare one (acknowledged once, ContainerCreating, with the kubelet's event; for good, as a
/// broken driver does).
fn prepared(i: &Input, facts: &NodeFacts, out: &mut Out) -> bool {
    let note = match &i.prepare {
        Prepare::Ready => return true,
        Prepare::Later => {
            out.arm_once(TimerKind::Start, Duration::from_secs(1));
            return false;
        }
        Prepare::Fails(note) => note.clone(),
    };
    if std::mem::replace(&mut out.t.prepare_reported, true) {
        return false;
    }
    acknowledge(i, facts.host_ips, out);
    out.effects.push(Effect::Injected("prepare_fail"));
    out.effects.push(Effect::Warn {
        reason: "FailedPrepareDynamicResources".into(),
        action: "PrepareDynamicResources",
        note,
    });
    false
}

/// The kubelet's volume manager: false while a volume is not attached or mounted yet (looked at
/// again in a second, the pod acknowledged: ContainerCreating), or a volume cannot be mounted
/// (a ConfigMap or Secret that does not exist: the kubelet's `FailedMount`, said once, looked
/// at again every few seconds until it mounts).
fn mounted(i: &Input, facts: &NodeFacts, out: &mut Out) -> bool {
    match &i.mount {
        Mount::Ready => true,
        Mount::Later => {
            acknowledge(i, facts.host_ips, out);
            out.arm_once(TimerKind::Start, Duration::from_secs(1));
            false
        }
        Mount::Fails(note) => {
            acknowledge(i, facts.host_ips, out);
            if !std::mem::replace(&mut out.t.mount_reported, true) {
                out.effects.push(Effect::Warn {
                    reason: "FailedMount".into(),
                    action: "MountVolume",
                    note: note.clone(),
                });
            }
            out.arm_once(TimerKind::Start, MOUNT_RETRY);
            false
        }
    }
}

/// How soon a mount that failed is tried again.
pub const MOUNT_RETRY: Duration = Duration::from_secs(2);

/// A running pod: its addresses stay known, Ready follows its readiness gates, a crash loop
/// goes round (a pod that is down always comes back after its back-off, whatever the knobs say
/// now), a pod with a run time finishes.
fn keep_running(i: &Input, facts: &NodeFacts, out: &mut Out) {
    let pod = i.pod;
    let ips = pod_status::pod_ips(pod);
    if !pod_status::host_network(pod) && !ips.is_empty() {
        out.effects.push(Effect::Observe(ips));
    }
    out.t.started = true;
    let now = i.now.value();
    if let Some(patch) = pod_status::ready_fix(pod, &now) {
        out.status(patch, "ready");
        return;
    }
    // A spec change the kubelet has not answered (an in-place resize).
    if pod.generation > pod.observed_generation.max(1) {
        out.write(Effect::Resize);
        return;
    }
    if pod.condition("PodResizePending") == Some("True") {
        // Deferred: tried again now and then, as the kubelet does, until room comes free.
        out.arm_once(TimerKind::Resize, RESIZE_RETRY);
    }
    if let Some(patch) = pod_status::ephemeral_patch(pod, &now) {
        out.status(patch, "ephemeral");
        return;
    }
    if !out.t.down && probe(i, facts.plan, out) {
        return;
    }
    if !out.t.is_armed(TimerKind::Crash) && !out.t.is_armed(TimerKind::Restart) {
        if out.t.down {
            out.arm(TimerKind::Restart, fate::crash_back_off(out.t.restarts));
        } else if let Fate::CrashLoops { after, .. } = facts.plan.fate {
            out.arm(TimerKind::Crash, after);
        }
    }
    let looping = out.t.down || !facts.plan.fate.runs();
    if let Some(run_time) = facts.plan.run_time
        && !looping
        && !out.t.is_armed(TimerKind::Complete)
    {
        // Its containers have run since its startTime (written when it was acknowledged) and
        // its start delay: the run time counts from when they started, as kwok's pod-complete
        // stage counts from Running.
        let since = pod.start_time.map_or(0.0, |s| i.now.since(s).clamp(0.0, 1e9));
        let ran = Duration::from_secs_f64(since).saturating_sub(facts.plan.start_delay);
        out.arm(TimerKind::Complete, run_time.saturating_sub(ran));
    }
}

/// How long after its containers start the pod's probes keep it from being Ready.
fn warm_up(pod: &SlimPod) -> Duration {
    pod.shape.as_deref().map_or(Duration::ZERO, |s| s.probes.ready_after)
}

/// A running pod's readiness probe: failing until its probes' first success after the
/// containers (re)started, then flapping if its knobs say so. Writes the verdict when it
/// differs from what the pod shows, and looks again when it changes. `true` when it wrote.
fn probe(i: &Input, plan: &PodPlan, out: &mut Out) -> bool {
    // A moment past a change, so it has surely happened when the pod is looked at.
    let nudge = Duration::from_millis(100);
    let warm = warm_up(i.pod);
    let ran = i.pod.running_since.map_or(0.0, |t| i.now.since(t).clamp(0.0, 1e9));
    let warming = warm.saturating_sub(Duration::from_secs_f64(ran));
    let passing = if plan.never_ready {
        false
    } else if !warming.is_zero() {
        out.arm(TimerKind::Probe, warming + nudge);
        false
    } else if let Some(flap) = &plan.readiness {
        let now = i.now.epoch();
        out.arm(TimerKind::Probe, flap.next_change(now).saturating_sub(now) + nudge);
        flap.away_until(now).is_none()
    } else if warm.is_zero() {
        return false; // no probe timing, no flapping: Ready as written at the start
    } else {
        true
    };
    let shown = i.pod.condition("ContainersReady") != Some("False");
    if passing == shown {
        return false;
    }
    if !passing && warming.is_zero() {
        out.effects.push(Effect::Injected("unready"));
        let note = "Readiness probe failed: simulated by kwok-pools (the pod's readiness knob or annotation)".into();
        out.warn("Unhealthy", "Probe", note);
    }
    let transition = if passing { "probe-pass" } else { "probe-fail" };
    out.status(pod_status::probe_patch(i.pod, passing, &i.now.value()), transition);
    true
}

/// How the plan's fate exits (a plain `Error` exit 1 when it does not say).
fn exit_of(plan: &PodPlan) -> Exit {
    match &plan.fate {
        Fate::CrashLoops { exit, .. } | Fate::FailsAtStart(exit) | Fate::InitFails(exit) => exit.clone(),
        _ => Exit::error(1),
    }
}

/// One of the pod's timers went off (the worker found the pod and its UID the timer's).
/// `Start` and `Probe` look at the pod again ([`step`]); the others act.
pub fn fire(kind: TimerKind, i: &Input, t: &mut Tracked) -> Vec<Effect> {
    let mut out = Out { t, effects: Vec::new() };
    out.t.fired(kind);
    let pod = i.pod;
    let deleted = pod.metadata.deletion_timestamp.is_some();
    match kind {
        TimerKind::Start | TimerKind::Probe => return step(i, out.t),
        TimerKind::Crash | TimerKind::Restart => {
            if let Some(facts) = live(i) {
                loop_round(kind, i, facts, &mut out);
            }
        }
        TimerKind::Complete => {
            if !deleted && pod.phase() == "Running" && !busy(kind, &mut out) {
                out.status(pod_status::completed_patch(pod, &i.now.value()), "complete");
            }
        }
        TimerKind::Deadline => {
            if !deleted && !pod_status::is_terminal(pod) && !busy(kind, &mut out) {
                out.cancel(TimerKind::Complete);
                out.status(pod_status::deadline_patch(pod, &i.now.value()), "deadline");
            }
        }
        TimerKind::Remove => remove_or_end(i, &mut out),
        TimerKind::PullBackOff | TimerKind::InitRetry => {
            if let Some(facts) = i.node.as_ref().filter(|_| !deleted && pod.phase() == "Pending")
                && !busy(kind, &mut out)
            {
                pending_round(kind, i, facts, &mut out);
            }
        }
        TimerKind::Resize => {
            if live(i).is_some() && pod.condition("PodResizePending") == Some("True") && !busy(kind, &mut out) {
                out.write(Effect::Resize);
            }
        }
    }
    out.effects
}

/// Whether the pod's write is in flight: then the timer goes off again a moment later.
fn busy(kind: TimerKind, out: &mut Out) -> bool {
    if out.t.write.in_flight {
        out.arm(kind, BUSY);
    }
    out.t.write.in_flight
}

/// The node facts of a live pod (running, not deleted, on a node of ours).
fn live<'a>(i: &'a Input) -> Option<&'a NodeFacts<'a>> {
    let live = i.pod.metadata.deletion_timestamp.is_none() && pod_status::phase(i.pod) == "Running";
    i.node.as_ref().filter(|_| live)
}

/// A crash loop goes round: the container crashes (CrashLoopBackOff, or Failed if never
/// restarted), or its back-off is over (it runs again, or fails again if it fails at start).
/// Waits while a write is in flight or its node is away.
fn loop_round(kind: TimerKind, i: &Input, facts: &NodeFacts, out: &mut Out) {
    if busy(kind, out) {
        return;
    }
    if let Some(back) = facts.away {
        out.arm(kind, back.saturating_duration_since(i.now.at));
        return;
    }
    let (pod, now, exit) = (i.pod, i.now.value(), exit_of(facts.plan));
    if kind == TimerKind::Crash {
        let patch = if facts.plan.ends_failed(pod) {
            pod_status::failed_patch(pod, &[], &exit, &now)
        } else {
            pod_status::crashed_patch(pod, out.t.restarts.saturating_add(1), &exit, &now)
        };
        out.t.down = true;
        out.t.restarts = out.t.restarts.saturating_add(1);
        if exit.liveness {
            liveness_kill(&exit, out);
        }
        let injected = match () {
            () if exit.liveness => "liveness-kill",
            () if exit.reason == "OOMKilled" => "oom-kill",
            () => "crash",
        };
        out.effects.push(Effect::Injected(injected));
        if !facts.plan.ends_failed(pod) {
            out.back_off(pod, exit.container.as_deref());
        }
        out.status(patch, "crash");
    } else if matches!(facts.plan.fate, Fate::FailsAtStart(_)) {
        out.t.restarts = out.t.restarts.saturating_add(1);
        out.effects.push(Effect::Injected("crash"));
        out.back_off(pod, exit.container.as_deref());
        out.status(pod_status::crashed_patch(pod, out.t.restarts, &exit, &now), "crash");
    } else {
        out.t.down = false;
        out.started_events(facts.plan, pod);
        out.status(pod_status::restarted_patch(pod, out.t.restarts, &exit, &now), "restart");
    }
}

/// The prober's and the kubelet's events as a liveness probe kills a container: the Warning
/// `Unhealthy` of the failed probe and the Normal `Killing` that says why the container
/// restarts (sent whatever the plan says of Normal events: it is the one that explains).
fn liveness_kill(exit: &Exit, out: &mut Out) {
    let c = exit.container.as_deref().unwrap_or_default();
    let note = "Liveness probe failed: simulated by kwok-pools (the pod's livenessFailPercent knob)".into();
    out.warn("Unhealthy", "Probe", note);
    let note = format!("Container {c} failed liveness probe, will be restarted");
    out.effects.push(Effect::Normal { reason: "Killing", action: "Kill", note });
}

/// A pending pod's failure goes round: ErrImagePull becomes ImagePullBackOff (and stays so:
/// the image never pulls), or a failed init container runs again after its back-off and fails
/// again.
fn pending_round(kind: TimerKind, i: &Input, facts: &NodeFacts, out: &mut Out) {
    let now = i.now.value();
    if kind == TimerKind::PullBackOff {
        for c in &i.pod.containers {
            let note = format!("Back-off pulling image {:?}", c.image);
            out.normal(facts.plan, "BackOff", "Pull", note);
        }
        out.warn("Failed", "Pull", "Error: ImagePullBackOff".into());
        out.status(pod_status::image_pull_patch(i.pod, &[], &[], true, &now), "image-pull-back-off");
        return;
    }
    out.t.restarts = out.t.restarts.saturating_add(1);
    let restarts = out.t.restarts;
    out.arm(TimerKind::InitRetry, fate::crash_back_off(restarts + 1));
    out.effects.push(Effect::Injected("init-fail"));
    let exit = exit_of(facts.plan);
    let init =
        exit.container.clone().or_else(|| i.pod.init_containers.iter().find(|c| !c.sidecar).map(|c| c.name.clone()));
    out.back_off(i.pod, init.as_deref());
    out.status(pod_status::init_failed_patch(i.pod, (&[], &[]), &exit, restarts, &now), "init-fail");
}

/// A deleted pod whose exit delay has passed: first its terminal status, as the kubelet (since
/// 1.27) writes it, then — when that is written — the final delete. While the simulator's
/// writes queue, a pod nothing keeps after the final delete goes straight to it
/// ([`crate::kubelet::status::pod::reports_termination`]).
fn remove_or_end(i: &Input, out: &mut Out) {
    if busy(TimerKind::Remove, out) {
        return;
    }
    let pod = i.pod;
    if pod_status::is_terminal(pod) || out.t.terminal_written {
        out.write(Effect::Remove);
        return;
    }
    if !crate::kubelet::status::pod::reports_termination(pod, i.pressure) {
        out.effects.push(Effect::Skipped("terminal-status-skipped"));
        out.write(Effect::Remove);
        return;
    }
    out.t.terminal_written = true;
    let ending = out.t.ending.unwrap_or(pod_status::Ending::Killed);
    out.status(pod_status::terminated_patch(pod, ending, &i.now.value()), "terminate");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::fixtures::TestPod;
    use crate::kubelet::status::fate::Defaults;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;

    fn now(at: Instant) -> Now {
        Now { at, wall: Timestamp::UNIX_EPOCH }
    }

    fn plan(pod: &SlimPod) -> PodPlan {
        fate::plan_pod(None, None, pod, &Defaults::default())
    }

    /// A pod mounting the ConfigMap `app-config`.
    fn mounting(name: &str) -> SlimPod {
        let mut pod = Pod::test(name).on("n");
        let volumes = serde_json::json!([{"name": "config", "configMap": {"name": "app-config"}}]);
        pod.spec.as_mut().unwrap().volumes = Some(serde_json::from_value(volumes).unwrap());
        pod.slim()
    }

    #[test]
    fn a_pod_waits_for_its_volumes_and_says_once_why_a_mount_fails() {
        let pod = mounting("p");
        let (p, ips, t0) = (plan(&pod), ["10.1.0.1".parse().unwrap()], Instant::now());
        let mut t = Tracked::new(t0);
        let input = |mount: Mount| Input {
            pod: &pod,
            now: now(t0),
            node: Some(NodeFacts { plan: &p, away: None, host_ips: &ips }),
            pod_ips: None,
            prepare: Prepare::Ready,
            mount,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        // Not attached yet: ContainerCreating (one write), looked at again in a second, no event.
        let effects = step(&input(Mount::Later), &mut t);
        assert!(effects.iter().any(|e| matches!(e, Effect::Status { transition: "acknowledge", .. })), "{effects:?}");
        assert!(effects.contains(&Effect::Arm(TimerKind::Start, Duration::from_secs(1))), "{effects:?}");
        assert!(!effects.iter().any(|e| matches!(e, Effect::Warn { .. } | Effect::NeedAddresses)), "{effects:?}");
        // A missing ConfigMap: the kubelet's FailedMount, once, and another look shortly.
        t.write.in_flight = false; // the acknowledgement came back
        t.fired(TimerKind::Start);
        let note = "MountVolume.SetUp failed for volume \"config\" : configmap \"app-config\" not found".to_string();
        let effects = step(&input(Mount::Fails(note.clone())), &mut t);
        let warned = |effects: &[Effect]| {
            effects
                .iter()
                .filter(|e| matches!(e, Effect::Warn { reason, note: n, .. } if reason == "FailedMount" && *n == note))
                .count()
        };
        assert_eq!(warned(&effects), 1, "{effects:?}");
        assert!(effects.contains(&Effect::Arm(TimerKind::Start, MOUNT_RETRY)), "{effects:?}");
        t.fired(TimerKind::Start);
        assert_eq!(warned(&step(&input(Mount::Fails(note.clone())), &mut t)), 0, "said once");
        // Mounted: the pod starts (it asks for its addresses).
        t.fired(TimerKind::Start);
        let effects = step(&input(Mount::Ready), &mut t);
        assert!(effects.contains(&Effect::NeedAddresses), "{effects:?}");
    }

    #[test]
    fn a_never_ready_pod_runs_without_ever_being_ready() {
        let pod = Pod::test("p").on("n").annotate("pools.kwok.x-k8s.io/readiness", "never").slim();
        let (p, ips, t0) = (plan(&pod), ["10.1.0.1".parse().unwrap()], Instant::now());
        assert!(p.never_ready);
        let facts = || Some(NodeFacts { plan: &p, away: None, host_ips: &ips });
        let mut t = Tracked::new(t0);
        let pod_ips = ["10.2.0.1".parse().unwrap()];
        let i = Input {
            pod: &pod,
            now: now(t0),
            node: facts(),
            pod_ips: Some(&pod_ips),
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        let effects = step(&i, &mut t);
        let Some(Effect::Status { patch, transition: "run", .. }) =
            effects.iter().find(|e| matches!(e, Effect::Status { .. }))
        else {
            panic!("{effects:?}")
        };
        assert_eq!(patch["status"]["phase"], "Running");
        let ready = patch["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "False", "not even once: {patch}");
        // Running and unready as it is written: nothing more to write, no timer to wake it.
        let running = Pod::test("p")
            .on("n")
            .annotate("pools.kwok.x-k8s.io/readiness", "never")
            .phase("Running")
            .condition("ContainersReady", "False")
            .condition("Ready", "False")
            .slim();
        let mut t = Tracked::new(t0);
        t.started = true;
        let i = Input {
            pod: &running,
            now: now(t0),
            node: facts(),
            pod_ips: Some(&pod_ips),
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        let effects = step(&i, &mut t);
        assert!(!effects.iter().any(|e| matches!(e, Effect::Status { .. })), "{effects:?}");
    }

    /// A pod on `n` whose one container has `probes` (YAML), Running since the epoch when
    /// `running`.
    fn probed(probes: &str, running: bool) -> SlimPod {
        let mut p = Pod::test("p").on("n");
        let mut c: serde_json::Value = serde_yaml::from_str(&format!("{{name: app, {probes}}}")).unwrap();
        c["image"] = "app:1".into();
        p.spec.as_mut().unwrap().containers = vec![serde_json::from_value(c).unwrap()];
        if running {
            p.status = Some(serde_json::from_value(serde_json::json!({
                "phase": "Running",
                "startTime": "1970-01-01T00:00:00Z",
                "podIPs": [{"ip": "10.2.0.1"}],
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "ContainersReady", "status": "False"},
                    {"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"running": {"startedAt": "1970-01-01T00:00:00Z"}}}]
            })).unwrap());
        }
        p.slim()
    }

    #[test]
    fn a_readiness_probe_holds_a_running_pod_unready_until_its_first_success() {
        let t0 = Instant::now();
        let ips = ["10.1.0.1".parse().unwrap()];
        let pod_ips = ["10.2.0.1".parse().unwrap()];
        let starting = probed("readinessProbe: {initialDelaySeconds: 10, periodSeconds: 5}", false);
        let p = plan(&starting);
        let input = |pod, secs: u64| Input {
            pod,
            now: Now { at: t0 + Duration::from_secs(secs), wall: Timestamp::from_second(secs as i64).unwrap() },
            node: Some(NodeFacts { plan: &p, away: None, host_ips: &ips }),
            pod_ips: Some(&pod_ips),
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        let effects = step(&input(&starting, 0), &mut Tracked::new(t0));
        let Some(Effect::Status { patch, transition: "run" }) =
            effects.iter().find(|e| matches!(e, Effect::Status { .. }))
        else {
            panic!("{effects:?}")
        };
        let ready = patch["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!((patch["status"]["phase"].as_str(), ready["status"].as_str()), (Some("Running"), Some("False")));

        // Running since the epoch: 4s in, no write, a look again when the delay is over.
        let running = probed("readinessProbe: {initialDelaySeconds: 10, periodSeconds: 5}", true);
        let mut t = Tracked::new(t0);
        t.started = true;
        let effects = step(&input(&running, 4), &mut t);
        assert!(!effects.iter().any(|e| matches!(e, Effect::Status { .. })), "{effects:?}");
        assert!(effects.contains(&Effect::Arm(TimerKind::Probe, Duration::from_millis(6100))), "{effects:?}");
        // 10s in: Ready.
        let mut t = Tracked::new(t0);
        t.started = true;
        let effects = step(&input(&running, 10), &mut t);
        let Some(Effect::Status { patch, transition: "probe-pass" }) =
            effects.iter().find(|e| matches!(e, Effect::Status { .. }))
        else {
            panic!("{effects:?}")
        };
        let ready = patch["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
        assert!(!effects.contains(&Effect::Injected("unready")));
    }

    #[test]
    fn a_starting_pod_gets_the_kubelets_normal_events_only_when_its_plan_sends_them() {
        let pod = Pod::test("p").on("n").init_container("setup", false).slim();
        let (ips, pod_ips, t0) = (["10.1.0.1".parse().unwrap()], ["10.2.0.1".parse().unwrap()], Instant::now());
        let normal = |p: &PodPlan| {
            let i = Input {
                pod: &pod,
                now: now(t0),
                node: Some(NodeFacts { plan: p, away: None, host_ips: &ips }),
                pod_ips: Some(&pod_ips),
                prepare: Prepare::Ready,
                mount: Mount::Ready,
                pressure: 0.0,
                rejection: None,
                evict: None,
            };
            let effects = step(&i, &mut Tracked::new(t0));
            effects
                .into_iter()
                .filter_map(|e| match e {
                    Effect::Normal { reason, .. } => Some(reason),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let mut p = plan(&pod);
        assert!(normal(&p).is_empty(), "off by default");
        p.normal_events = true;
        // Each container, the init container first: Pulled, Created, Started.
        assert_eq!(normal(&p), ["Pulled", "Created", "Started", "Pulled", "Created", "Started"]);
    }

    #[test]
    fn a_liveness_kill_says_why_with_the_probers_and_the_kubelets_events() {
        let pod = Pod::test("p").on("n").phase("Running").slim();
        let container = pod.containers[0].name.clone();
        let mut p = plan(&pod);
        let exit = Exit::liveness_killed(container.clone(), false);
        p.fate = Fate::CrashLoops { after: Duration::from_secs(30), exit };
        let (ips, t0) = (["10.1.0.1".parse().unwrap()], Instant::now());
        let i = Input {
            pod: &pod,
            now: now(t0),
            node: Some(NodeFacts { plan: &p, away: None, host_ips: &ips }),
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        let effects = fire(TimerKind::Crash, &i, &mut Tracked::new(t0));
        let events: Vec<(String, String)> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Warn { reason, note, .. } => Some((reason.to_string(), note.clone())),
                Effect::Normal { reason, note, .. } => Some(((*reason).to_string(), note.clone())),
                _ => None,
            })
            .collect();
        assert!(events[0].0 == "Unhealthy" && events[0].1.starts_with("Liveness probe failed: "), "{events:?}");
        // The Normal Killing goes out although this plan sends no Normal events: it says why.
        assert_eq!(
            events[1],
            ("Killing".into(), format!("Container {container} failed liveness probe, will be restarted"))
        );
        assert_eq!(events[2].0, "BackOff");
        assert!(effects.contains(&Effect::Injected("liveness-kill")));
        let Some(Effect::Status { patch, .. }) = effects.iter().find(|e| matches!(e, Effect::Status { .. })) else {
            panic!("{effects:?}")
        };
        let last = &patch["status"]["containerStatuses"][0]["lastState"]["terminated"];
        assert_eq!((last["exitCode"].as_i64(), last["reason"].as_str()), (Some(143), Some("Error")), "{patch:#}");
    }

    #[test]
    fn a_rejected_pod_fails_at_once_with_the_kubelets_reason_and_an_event() {
        let pod = Pod::test("p").on("n").annotate("pod-ready.stage.kwok.x-k8s.io/delay", "5s").slim();
        let (p, ips, t0) = (plan(&pod), ["10.1.0.1".parse().unwrap()], Instant::now());
        let facts = Some(NodeFacts { plan: &p, away: None, host_ips: &ips });
        let r = Rejection { reason: "OutOfcpu".into(), message: "Node didn't have enough resource: cpu".into() };
        let i = Input {
            pod: &pod,
            now: now(t0),
            node: facts,
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: Some(&r),
            evict: None,
        };
        let mut t = Tracked::new(t0);
        let effects = step(&i, &mut t);
        let Some(Effect::Status { patch, transition: "reject" }) =
            effects.iter().find(|e| matches!(e, Effect::Status { .. }))
        else {
            panic!("rejected before its start delay: {effects:?}")
        };
        assert_eq!(patch["status"]["phase"], "Failed");
        assert_eq!(patch["status"]["reason"], "OutOfcpu");
        assert_eq!(patch["status"]["message"], "Pod was rejected: Node didn't have enough resource: cpu");
        assert!(effects.iter().any(|e| matches!(e, Effect::Warn { reason, .. } if reason == "OutOfcpu")));
        assert!(t.started && !effects.iter().any(|e| matches!(e, Effect::Arm(..))), "{effects:?}");
    }

    #[test]
    fn a_pod_with_a_start_delay_is_acknowledged_and_started_when_the_delay_is_over() {
        let pod = Pod::test("p").on("n").annotate("pod-ready.stage.kwok.x-k8s.io/delay", "5s").slim();
        let (p, ips, t0) = (plan(&pod), ["10.1.0.1".parse().unwrap()], Instant::now());
        let facts = || Some(NodeFacts { plan: &p, away: None, host_ips: &ips });
        let mut t = Tracked::new(t0);
        let i = Input {
            pod: &pod,
            now: now(t0),
            node: facts(),
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        let effects = step(&i, &mut t);
        assert_eq!(effects[0], Effect::Arm(TimerKind::Start, Duration::from_secs(5)));
        assert!(matches!(&effects[1], Effect::Status { transition: "acknowledge", .. }));
        assert!(t.write.in_flight && t.is_armed(TimerKind::Start));
        // Written; the delay is over: it needs its addresses, then it runs.
        t.write.in_flight = false;
        t.fired(TimerKind::Start);
        let later = Input { now: now(t0 + Duration::from_secs(5)), node: facts(), ..i };
        assert_eq!(step(&later, &mut t), [Effect::NeedAddresses]);
        let pod_ips = ["10.244.0.5".parse().unwrap()];
        let with_ips = Input { pod_ips: Some(&pod_ips), node: facts(), ..later };
        let effects = step(&with_ips, &mut t);
        assert!(
            matches!(&effects[..], [Effect::Status { transition: "run", patch }] if patch["status"]["podIP"] == "10.244.0.5")
        );
        assert!(t.started);
    }

    #[test]
    fn a_timer_that_finds_a_write_in_flight_goes_off_again_a_moment_later() {
        let pod = Pod::test("p").on("n").phase("Running").slim();
        let mut t = Tracked::new(Instant::now());
        t.write.in_flight = true;
        let i = Input {
            pod: &pod,
            now: now(Instant::now()),
            node: None,
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 0.0,
            rejection: None,
            evict: None,
        };
        assert_eq!(fire(TimerKind::Complete, &i, &mut t), [Effect::Arm(TimerKind::Complete, BUSY)]);
    }

    #[test]
    fn a_deleted_pod_whose_terminal_status_is_skipped_under_pressure_is_removed_at_once() {
        let pod = Pod::test("p").on("n").phase("Running").slim();
        let mut t = Tracked::new(Instant::now());
        let i = Input {
            pod: &pod,
            now: now(Instant::now()),
            node: None,
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: 1.0,
            rejection: None,
            evict: None,
        };
        assert_eq!(fire(TimerKind::Remove, &i, &mut t), [Effect::Skipped("terminal-status-skipped"), Effect::Remove]);
        let mut t = Tracked::new(Instant::now());
        let calm = Input { pressure: 0.0, ..i };
        assert!(matches!(
            &fire(TimerKind::Remove, &calm, &mut t)[..],
            [Effect::Status { transition: "terminate", .. }]
        ));
        assert!(t.terminal_written);
    }
}
