//! Each simulated pod's fate and each simulated node's bad times, decided from the knobs that
//! govern it (its own annotations first, then the pool's or policy's section the lifecycle
//! engine finds, then the kubelet's flags): a pod's start delay, exit delay, fate (runs,
//! fails, crash-loops, OOM, image pull, init failure), run time and readiness flaps; a node's
//! NotReady windows and bad conditions. Pure functions of the settings, the seed and the
//! object's identity, so every replica and every run with a seed agree.

use super::pod::Exit;
use crate::api::duration::{parse_duration, unit};
use crate::api::lifecycle::{
    BadCondition, DEFAULT_EVERY, DEFAULT_NOT_READY_FOR, DEFAULT_UNREADY_EVERY, DEFAULT_UNREADY_FOR, Delay,
    Distribution, NodeLifecycle, PodLifecycle,
};
use crate::informer::pod::SlimPod;
use crate::simulator::lifecycle::{Flap, Knobs, sample, units};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use std::time::Duration;

/// How long a pod that honours SIGTERM takes to exit when nothing else is said.
pub const DEFAULT_EXIT_DELAY: Duration = Duration::from_secs(1);
/// How long a crash-looping container runs before it crashes when nothing else is said.
pub const DEFAULT_CRASH_AFTER: Duration = Duration::from_secs(5);

/// The operator's flags: what pools that say nothing get.
#[derive(Clone, Debug)]
pub struct Defaults {
    /// `--pod-termination-delay` (else [`DEFAULT_EXIT_DELAY`]).
    pub exit_delay: Option<Duration>,
    /// `--job-run-time`.
    pub job_run_time: Duration,
    /// `--pod-normal-events`.
    pub normal_events: bool,
}

impl Default for Defaults {
    /// The flags' own defaults.
    fn default() -> Self {
        Self { exit_delay: None, job_run_time: Duration::from_secs(5), normal_events: false }
    }
}

/// What happens to a pod's containers.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    Runs,
    /// Exit at start: Failed with `restartPolicy: Never`, else crash-looping from the start.
    FailsAtStart(Exit),
    /// Run `after`, exit, back off, again (Failed with `restartPolicy: Never`).
    CrashLoops {
        after: Duration,
        exit: Exit,
    },
    /// The image never pulls: ErrImagePull, then ImagePullBackOff, Pending for good.
    ImagePullFails,
    /// An init container exits: Init:CrashLoopBackOff, or Failed with `restartPolicy: Never`.
    InitFails(Exit),
}

impl Fate {
    /// Whether the pod's containers ever run as they should.
    pub fn runs(&self) -> bool {
        *self == Fate::Runs
    }
}

/// Everything decided for one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodPlan {
    pub start_delay: Duration,
    /// How long each regular init container runs, one after the other (zero: at once).
    pub init_run_time: Duration,
    /// `None`: the pod ignores SIGTERM and waits its whole grace period.
    pub exit_delay: Option<Duration>,
    pub fate: Fate,
    /// How long it runs before its containers exit 0 and it is Succeeded (`None`: until it is
    /// deleted). Only for `restartPolicy: Never` or `OnFailure`.
    pub run_time: Option<Duration>,
    /// When its readiness probe fails, if it flaps.
    pub readiness: Option<Flap>,
    /// Its readiness probe never passes (Running, Ready=False for good).
    pub never_ready: bool,
    /// Its failure ends it Failed whatever its restart policy (kwok's chaos stages).
    pub fails_for_good: bool,
    /// The kubelet's Normal events are sent for it (Warnings always are).
    pub normal_events: bool,
}

impl PodPlan {
    /// Whether a failure of `pod` under this plan ends it Failed (no restart).
    pub fn ends_failed(&self, pod: &SlimPod) -> bool {
        self.fails_for_good || pod.restart_policy.as_deref() == Some("Never")
    }
}

/// The label the Job controller puts on an indexed Job's pods.
pub const COMPLETION_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";

/// The words a pod's seeded choices are drawn from: with a seed its namespace and name (an
/// indexed Job's pod: its Job and index, so a retried index repeats its run time and fate),
/// so a replacement repeats its fate; without, its UID, so each pod differs.
fn pod_key(seed: Option<i64>, pod: &SlimPod) -> (i64, Vec<String>) {
    let Some(seed) = seed else { return (0, vec![pod.uid().to_string()]) };
    let ns = pod.namespace().unwrap_or_default();
    let job = pod.metadata.owner_references.iter().flatten().find(|o| o.kind == "Job" && o.controller == Some(true));
    match (job, pod.label(COMPLETION_INDEX_LABEL)) {
        (Some(job), Some(index)) => (seed, vec![ns, job.name.clone(), index.to_string()]),
        _ => (seed, vec![ns, pod.name().to_string()]),
    }
}

/// The first container whose memory use — the pool's `usage.memory`, or the pod's
/// `kwok.x-k8s.io/usage-memory` annotation, as the kubelet API reports it — is over its memory
/// limit.
fn over_memory_limit(usage: Option<&crate::api::kubelet::Usage>, seed: Option<i64>, pod: &SlimPod) -> Option<String> {
    use crate::kubelet::status::usage::{self, Identity, Model, Overrides};
    let limit = |c: &crate::informer::pod::SlimContainer| {
        let resources: serde_json::Value = serde_json::from_str(c.resources.as_deref()?).ok()?;
        crate::api::kubelet::quantity(resources.get("limits")?.get("memory")?.as_str()?)
    };
    let overrides = pod.usage.as_deref().copied().unwrap_or(Overrides::default());
    if usage.and_then(|u| u.memory.as_ref()).is_none() && overrides.memory.is_none() {
        return None; // 1Mi, the default use, is over no limit a pod can have
    }
    let sidecars = pod.init_containers.iter().filter(|c| c.sidecar);
    let limited: Vec<_> = pod.containers.iter().chain(sidecars).filter_map(|c| Some((c, limit(c)?))).collect();
    let model = Model::new(usage, seed, 0.0);
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    limited
        .into_iter()
        .find(|(c, limit)| {
            let id = Identity { namespace: ns, pod: pod.name(), uid: pod.uid(), container: &c.name };
            usage::container(&model, &id, overrides, 0.0, 0.0).memory > *limit
        })
        .map(|(c, _)| c.name.clone())
}

/// A delay a pod's annotation gives (the knob's `fromAnnotation`), as kwok's `durationFrom`
/// reads one: a duration, or a time (the delay runs from `since`, seconds since the epoch,
/// until then). A `max` is kwok's jitter: above the annotation's value, the delay is drawn
/// between them (`u` in `[0, 1)`); not above it, the delay is `max`. `None` when the pod has no
/// such annotation that reads.
pub fn from_annotation(delay: Option<&Delay>, pod: &SlimPod, since: Duration, u: f64) -> Option<Duration> {
    let delay = delay?;
    let text = pod.annotation(delay.from_annotation.as_deref()?)?.trim();
    let base = match parse_duration(text) {
        Some(d) => d,
        None => {
            let at: k8s_openapi::jiff::Timestamp = text.parse().ok()?;
            Duration::from_millis(u64::try_from(at.as_millisecond()).ok()?).saturating_sub(since)
        }
    };
    Some(match delay.max.as_deref().and_then(parse_duration) {
        Some(hi) if hi <= base => hi,
        Some(hi) => base + (hi - base).mul_f64(u.clamp(0.0, 1.0)),
        None => base,
    })
}

/// Seconds since the epoch of a time.
fn epoch_of(t: k8s_openapi::jiff::Timestamp) -> Duration {
    Duration::from_millis(u64::try_from(t.as_millisecond()).unwrap_or(0))
}

/// A knob's delay for `pod`: from its annotation when the knob says so, else drawn. A time in
/// the annotation is reached from now, or for a run time (`run`, `job`) from the pod's start.
fn drawn(d: Option<&Delay>, pod: &SlimPod, seed: i64, key: &[&str], salt: &str) -> Option<Duration> {
    if d.is_some_and(|d| d.from_annotation.is_some()) {
        let now = crate::simulator::lifecycle::epoch_now();
        let since = if matches!(salt, "run" | "job") { pod.start_time.map_or(now, epoch_of) } else { now };
        if let Some(read) = from_annotation(d, pod, since, units(seed, key, salt).0) {
            return Some(read);
        }
    }
    sample(d, seed, key, salt)
}

/// Whether a `Job` of any API group owns the pod (batch's, Volcano's: kwok's `pod-complete`
/// rule).
fn owned_by_job(pod: &SlimPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Job")
}

/// Whether the pool's `runTime` finishes the pod: it has no controller owner, the pool that
/// governs it is its controller (`pools_own`: a PodPool's pods), or its controller owner is of
/// a kind `runTimeOwners` lists. Another controller's children (a VMI's launcher pod, a
/// ReplicaSet's pods) never take it.
fn takes_run_time(s: &PodLifecycle, pod: &SlimPod, pools_own: bool) -> bool {
    let controller = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    let owner = controller.map(|o| (crate::api::owners::OwnerKind::group_of(&o.api_version), o.kind.as_str()));
    pools_own || owner.is_none() || s.run_time_owners.iter().flatten().any(|k| k.holds(owner))
}

/// Decides a pod's plan from the pod lifecycle that governs it and the pod's own
/// annotations, which win (a pod its pool does not own).
pub fn plan_pod(settings: Option<&PodLifecycle>, seed: Option<i64>, pod: &SlimPod, defaults: &Defaults) -> PodPlan {
    plan_owned_pod(settings, seed, pod, defaults, false)
}

/// [`plan_pod`] for a pod whose governing pool is (`pools_own`) or is not its controller.
pub fn plan_owned_pod(
    settings: Option<&PodLifecycle>,
    seed: Option<i64>,
    pod: &SlimPod,
    defaults: &Defaults,
    pools_own: bool,
) -> PodPlan {
    let none = PodLifecycle::default();
    let s = settings.unwrap_or(&none);
    let own = pod.overrides.as_deref();
    let oom = over_memory_limit(s.usage.as_ref(), seed, pod);
    let (seed, key) = pod_key(seed, pod);
    let key: Vec<&str> = key.iter().map(String::as_str).collect();
    let draw = |salt: &str| units(seed, &key, salt).0;

    let exit = Exit::error(s.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1));
    let sample = |d: Option<&Delay>, seed: i64, key: &[&str], salt: &str| drawn(d, pod, seed, key, salt);
    let crash_after = || sample(s.crash_after.as_ref(), seed, &key, "crash").unwrap_or(DEFAULT_CRASH_AFTER);
    let has_init = pod.init_containers.iter().any(|c| !c.sidecar);
    let chaos = own.and_then(|o| o.chaos.as_ref()).filter(|c| !c.init || has_init);
    let fate = if let Some(c) = chaos {
        // kwok's chaos stages: the named container (every one, when none is named) fails and
        // the pod ends Failed, whatever its restart policy.
        let exit = Exit {
            code: c.exit_code,
            reason: c.reason.clone(),
            message: Some(c.message.clone()),
            container: c.container.clone(),
            liveness: false,
        };
        if c.init { Fate::InitFails(exit) } else { Fate::CrashLoops { after: c.after.sample(draw("chaos")), exit } }
    } else if let Some(f) = own.and_then(|o| o.init_failed.as_ref()).filter(|_| has_init) {
        Fate::InitFails(Exit::from_failure(f))
    } else if let Some(f) = own.and_then(|o| o.container_failed.as_ref()) {
        Fate::CrashLoops { after: f.after.sample(draw("crash")), exit: Exit::from_failure(f) }
    } else if own.is_some_and(|o| o.image_pull_fails) {
        Fate::ImagePullFails
    } else if let Some(container) = oom {
        // Its working set is over its memory limit: the OOM killer ends it, every time it runs.
        Fate::CrashLoops { after: crash_after(), exit: Exit { container: Some(container), ..Exit::oom_killed() } }
    } else {
        let roll = unit(seed, &[&key[..], &["fate"]].concat()) * 100.0;
        knob_fate(s, pod, roll, exit, crash_after())
    };

    let finishes = matches!(pod.restart_policy.as_deref(), Some("Never" | "OnFailure"));
    let pool_run = |d: Option<&Delay>, salt| sample(d, seed, &key, salt);
    let run_time = if !finishes {
        None
    } else if let Some(w) = own.and_then(|o| o.run_time) {
        Some(w.sample(draw("run")))
    } else if owned_by_job(pod) {
        pool_run(s.job_run_time.as_ref(), "job")
            .or_else(|| pool_run(s.run_time.as_ref(), "run"))
            .or(Some(defaults.job_run_time))
    } else if takes_run_time(s, pod, pools_own) {
        pool_run(s.run_time.as_ref(), "run")
    } else {
        None
    };

    let start_delay = match (chaos.filter(|c| c.init), own.and_then(|o| o.start)) {
        // An init container's chaos fails the pod after its delay, before it ever runs.
        (Some(c), _) => c.after.sample(draw("chaos")),
        (None, Some(w)) => w.sample(draw("start")),
        (None, None) => sample(s.start_delay.as_ref(), seed, &key, "start").unwrap_or(Duration::ZERO),
    };
    let fallback_exit = defaults.exit_delay.unwrap_or(DEFAULT_EXIT_DELAY);
    let exit_delay = match own.and_then(|o| o.exit_delay) {
        Some(w) => Some(w.sample(draw("exit"))),
        None if s.ignore_sigterm == Some(true) => None,
        None => Some(sample(s.exit_delay.as_ref(), seed, &key, "exit").unwrap_or(fallback_exit)),
    };

    let (readiness, never_ready) = readiness_of(s, own, seed, &key);
    let fails_for_good = chaos.is_some();
    let normal_events = s.normal_events.unwrap_or(defaults.normal_events);
    let init_run_time = sample(s.init_run_time.as_ref(), seed, &key, "init").unwrap_or(Duration::ZERO);
    PodPlan {
        start_delay,
        init_run_time,
        exit_delay,
        fate,
        run_time,
        readiness,
        never_ready,
        fails_for_good,
        normal_events,
    }
}

/// The fate the knobs' shares give a pod whose `roll` (0 to 100) is drawn: each share is a
/// slice of the roll, in the order the knobs are listed; the rest runs.
fn knob_fate(s: &PodLifecycle, pod: &SlimPod, roll: f64, exit: Exit, crash_after: Duration) -> Fate {
    let shares = [
        s.fail_percent,
        s.crash_loop_percent,
        s.oom_kill_percent,
        s.image_pull_fail_percent,
        s.init_fail_percent,
        s.liveness_fail_percent,
    ]
    .map(|p| f64::from(p.unwrap_or(0).min(100)));
    let mut edge = 0.0;
    let slot = shares.iter().position(|share| {
        edge += share;
        roll < edge
    });
    match slot {
        Some(0) => Fate::FailsAtStart(exit),
        Some(1) => Fate::CrashLoops { after: crash_after, exit },
        Some(2) => Fate::CrashLoops { after: crash_after, exit: Exit::oom_killed() },
        Some(3) => Fate::ImagePullFails,
        Some(4) => match pod.init_containers.iter().find(|c| !c.sidecar) {
            Some(first) => Fate::InitFails(Exit { container: Some(first.name.clone()), ..exit }),
            None => Fate::Runs,
        },
        Some(5) => liveness_failure(pod, s, crash_after),
        _ => Fate::Runs,
    }
}

/// A pod whose liveness probe fails `failing_from` after each start: its prober kills the
/// probed container after the probe's failure threshold (a pod without one runs).
fn liveness_failure(pod: &SlimPod, s: &PodLifecycle, failing_from: Duration) -> Fate {
    let Some(l) = pod.shape.as_deref().and_then(|shape| shape.probes.liveness) else { return Fate::Runs };
    let Some(c) = pod.containers.get(usize::from(l.container)) else { return Fate::Runs };
    let exit = Exit::liveness_killed(c.name.clone(), s.ignore_sigterm == Some(true));
    Fate::CrashLoops { after: l.kill_at(failing_from), exit }
}

/// Whether and when the pod's readiness probe fails now and then, and whether it never passes.
fn readiness_of(
    s: &PodLifecycle,
    own: Option<&crate::api::annotations::PodOverrides>,
    seed: i64,
    key: &[&str],
) -> (Option<Flap>, bool) {
    let draw = |salt: &str| units(seed, key, salt).0;
    let flaps = s.readiness.as_ref();
    let flap_share = f64::from(flaps.and_then(|r| r.flap_percent).unwrap_or(0).min(100));
    let readiness = (own.is_some_and(|o| o.readiness_flaps) || draw("readiness") * 100.0 < flap_share).then(|| {
        let every = flaps.and_then(|r| r.every.as_deref()).and_then(parse_duration).unwrap_or(DEFAULT_UNREADY_EVERY);
        let away = flaps
            .and_then(|r| r.not_ready_for.as_ref())
            .and_then(|d| d.distribution().ok())
            .unwrap_or(Distribution::Fixed(DEFAULT_UNREADY_FOR));
        Flap::new(every, away, seed, &key.join("/"))
    });
    let never_share = f64::from(s.not_ready_percent.unwrap_or(0).min(100));
    let never_ready = own.is_some_and(|o| o.never_ready) || draw("never-ready") * 100.0 < never_share;
    (readiness, never_ready)
}

/// The back-off a kubelet waits before restarting a crashed container for the `restarts`-th
/// time: 10s, doubling, at most 5m.
pub fn crash_back_off(restarts: i32) -> Duration {
    let doublings = (restarts.max(1) - 1).min(5) as u32;
    Duration::from_secs(10u64 << doublings).min(Duration::from_secs(300))
}

/// The flapping schedule of `node` under `settings`, if it is one of the flapping nodes.
pub fn plan_node(settings: &NodeLifecycle, seed: Option<i64>, node: &str, uid: &str) -> Option<Flap> {
    let percent = f64::from(settings.not_ready_percent.unwrap_or(0).min(100));
    // With a seed the same node names flap in every run; without, each node differs.
    let (seed, id) = match seed {
        Some(s) => (s, node),
        None => (0, uid),
    };
    if unit(seed, &[id, "flaps"]) * 100.0 >= percent {
        return None;
    }
    let every = settings.every.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_EVERY);
    let not_ready_for = settings
        .not_ready_for
        .as_ref()
        .and_then(|d| d.distribution().ok())
        .unwrap_or(Distribution::Fixed(DEFAULT_NOT_READY_FOR));
    Some(Flap::new(every, not_ready_for, seed, id))
}

/// A bad condition a node reports, and when (`windows: None`: for good).
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionPlan {
    pub condition: BadCondition,
    pub windows: Option<Flap>,
}

/// The bad conditions `node` reports under `settings` (with a seed, chosen by name).
pub fn plan_conditions(settings: &NodeLifecycle, seed: Option<i64>, node: &str, uid: &str) -> Vec<ConditionPlan> {
    let (seed, id) = match seed {
        Some(s) => (s, node),
        None => (0, uid),
    };
    settings
        .conditions
        .iter()
        .flatten()
        .filter_map(|c| {
            let salt = format!("{:?}", c.type_);
            if unit(seed, &[id, &salt, "condition"]) * 100.0 >= f64::from(c.percent.min(100)) {
                return None;
            }
            let windows = c.lasts.as_ref().and_then(|d| d.distribution().ok()).map(|lasts| {
                let every = c.every.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_EVERY);
                Flap::new(every, lasts, seed, &format!("{id}/{salt}"))
            });
            Some(ConditionPlan { condition: c.type_, windows })
        })
        .collect()
}

/// Which of the planned conditions are bad at `now` (seconds since the epoch), and when that
/// next changes (`None`: never).
pub fn bad_at(plans: &[ConditionPlan], now: Duration) -> (Vec<BadCondition>, Option<Duration>) {
    let mut bad = Vec::new();
    let mut next: Option<Duration> = None;
    for p in plans {
        match &p.windows {
            None => bad.push(p.condition),
            Some(w) => {
                if w.away_until(now).is_some() {
                    bad.push(p.condition);
                }
                let change = w.next_change(now);
                next = Some(next.map_or(change, |n| n.min(change)));
            }
        }
    }
    (bad, next)
}

/// The plan of `pod` under the pool that governs it (`None`: the flags alone); `pools_own`: that
/// pool is the pod's controller.
pub fn pod_plan(pool: Option<&dyn Knobs>, pod: &SlimPod, defaults: &Defaults, pools_own: bool) -> PodPlan {
    plan_owned_pod(pool.and_then(Knobs::pods), pool.and_then(Knobs::seed), pod, defaults, pools_own)
}

/// The flapping schedule of `node` under its pool, if its pool makes it flap.
pub fn node_flap(pool: Option<&dyn Knobs>, node: &Node) -> Option<Flap> {
    let pool = pool?;
    plan_node(pool.nodes()?, pool.seed(), &node.name_any(), node.metadata.uid.as_deref().unwrap_or_default())
}

/// The outage of `node` under its knobs, counted from `since` (seconds since the epoch, when
/// the simulator first saw the node under them), if they have one: its window, and whether the
/// node reports Ready=False through it (else it goes silent). The nodes of a correlated
/// outage's `group` share its draws, so they go and come back together.
pub fn node_outage(
    pool: Option<&dyn Knobs>,
    node: &Node,
    since: Duration,
    group: Option<&str>,
) -> Option<(Flap, bool)> {
    let pool = pool?;
    let outage = pool.nodes()?.outage.as_ref()?;
    let lasts = outage.lasts.distribution().ok()?;
    let (seed, id) = match (pool.seed(), group) {
        (s, Some(g)) => (s.unwrap_or(0), g.to_string()),
        (Some(s), None) => (s, node.name_any()),
        (None, None) => (0, node.metadata.uid.clone().unwrap_or_default()),
    };
    let key = [id.as_str()];
    let after = sample(outage.after.as_ref(), seed, &key, "outage-after").unwrap_or(Duration::ZERO);
    let reports_false = outage.ready == Some(crate::api::lifecycle::OutageReady::False);
    Some((Flap::once(since + after, lasts, seed, &id), reports_false))
}

/// The bad conditions `node` reports under its pool.
pub fn node_conditions(pool: Option<&dyn Knobs>, node: &Node) -> Vec<ConditionPlan> {
    let Some((settings, seed)) = pool.and_then(|p| Some((p.nodes()?, p.seed()))) else { return Vec::new() };
    plan_conditions(settings, seed, &node.name_any(), node.metadata.uid.as_deref().unwrap_or_default())
}

/// The lease duration and status interval the node's pool sets for its heartbeat, if any.
pub fn heartbeat(pool: Option<&dyn Knobs>) -> (Option<Duration>, Option<Duration>) {
    let h = pool.and_then(Knobs::nodes).and_then(|n| n.heartbeat.as_ref());
    h.map_or((None, None), crate::api::lifecycle::Heartbeat::settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn defaults() -> Defaults {
        Defaults { exit_delay: None, job_run_time: Duration::from_secs(5), normal_events: false }
    }

    fn pod(ns: &str, name: &str, uid: &str) -> SlimPod {
        use crate::informer::fixtures::TestPod;
        k8s_openapi::api::core::v1::Pod::test(name).namespace(ns).uid(uid).slim()
    }

    fn settings(yaml: &str) -> PodLifecycle {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn job_pod(ns: &str, name: &str, uid: &str) -> SlimPod {
        let mut p = pod(ns, name, uid);
        p.restart_policy = Some("Never".into());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "j".into(),
            uid: "j1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        p
    }

    fn annotated(mut p: SlimPod, pairs: &[(&str, &str)]) -> SlimPod {
        let a = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        p.overrides = crate::api::annotations::PodOverrides::from_annotations(Some(&a)).map(Box::new);
        p
    }

    #[test]
    fn a_container_using_more_memory_than_its_limit_is_oom_killed_each_time_it_runs() {
        let limited = |limit: &str| {
            let mut p = pod("d", "a", "u");
            let resources = format!(r#"{{"limits":{{"memory":"{limit}"}}}}"#);
            p.containers = vec![
                crate::informer::pod::SlimContainer { name: "free".into(), ..Default::default() },
                crate::informer::pod::SlimContainer {
                    name: "app".into(),
                    resources: Some(resources.into()),
                    ..Default::default()
                },
            ];
            p
        };
        let uses = settings("{usage: {memory: {fixed: 128Mi}}, crashAfter: {fixed: 3s}}");
        let plan = plan_pod(Some(&uses), None, &limited("64Mi"), &defaults());
        let Fate::CrashLoops { after, exit } = plan.fate else { panic!("{:?}", plan.fate) };
        assert_eq!((after, exit.code, exit.reason.as_str()), (Duration::from_secs(3), 137, "OOMKilled"));
        assert_eq!(exit.container.as_deref(), Some("app"), "the container over its limit");
        assert_eq!(plan_pod(Some(&uses), None, &limited("256Mi"), &defaults()).fate, Fate::Runs, "under the limit");
        assert_eq!(plan_pod(None, None, &limited("64Mi"), &defaults()).fate, Fate::Runs, "no usage said: 1Mi");
        // The pod's own usage annotation counts as the kubelet API reports it.
        let mut own = limited("64Mi");
        own.usage = Some(Box::new(crate::api::kubelet::Overrides::parse(None, Some("100Mi"))));
        assert!(matches!(plan_pod(None, None, &own, &defaults()).fate, Fate::CrashLoops { .. }));
    }

    #[test]
    fn a_failing_liveness_probe_kills_the_probed_container_after_its_threshold() {
        use crate::informer::shape::{Liveness, Probes, Shape, interned};
        let mut probed = pod("d", "a", "u");
        probed.containers = ["main", "agent"]
            .map(|n| crate::informer::pod::SlimContainer { name: n.into(), ..Default::default() })
            .to_vec();
        let l = Liveness {
            container: 1,
            initial_delay: Duration::from_secs(20),
            kill_after: Duration::from_secs(15),
            failure_threshold: 3,
        };
        probed.shape =
            Some(interned(Shape { probes: Probes { liveness: Some(l), ..Probes::default() }, ..Shape::default() }));
        let all = settings("{livenessFailPercent: 100, crashAfter: {fixed: 5s}}");
        let Fate::CrashLoops { after, exit } = plan_pod(Some(&all), None, &probed, &defaults()).fate else {
            panic!("a probed pod's liveness fails")
        };
        // Failing from 5s, but not before the 20s initial delay; killed 3 × 5s later.
        assert_eq!(after, Duration::from_secs(35));
        assert_eq!((exit.code, exit.container.as_deref(), exit.liveness), (143, Some("agent"), true));
        let stubborn = settings("{livenessFailPercent: 100, ignoreSIGTERM: true}");
        let Fate::CrashLoops { exit, .. } = plan_pod(Some(&stubborn), None, &probed, &defaults()).fate else {
            panic!()
        };
        assert_eq!(exit.code, 137, "SIGKILL at the end of the grace period");
        assert_eq!(plan_pod(Some(&all), None, &pod("d", "b", "v"), &defaults()).fate, Fate::Runs, "no liveness probe");
    }

    #[test]
    fn kwoks_chaos_labels_fail_the_named_container_for_good_after_kwoks_delay() {
        use crate::informer::fixtures::TestPod;
        use k8s_openapi::api::core::v1::Pod;
        let running = Pod::test("p")
            .label("pod-container-running-failed.stage.kwok.x-k8s.io", "true")
            .annotate("pod-container-running-failed.stage.kwok.x-k8s.io/container-name", "app")
            .annotate("pod-container-running-failed.stage.kwok.x-k8s.io/exit-code", "3")
            .slim();
        let plan = plan_pod(None, None, &running, &defaults());
        let Fate::CrashLoops { after, exit } = &plan.fate else { panic!("{plan:?}") };
        assert_eq!(*after, Duration::from_secs(1), "kwok's default delay and jitter: 1s");
        assert_eq!((exit.code, exit.reason.as_str(), exit.container.as_deref()), (3, "containerFailed", Some("app")));
        assert!(plan.fails_for_good && plan.ends_failed(&running), "Failed whatever the restart policy");
        // A delay longer than kwok's default jitter (1s) gives the jitter, as kwok computes it.
        let later = Pod::test("p")
            .label("pod-container-running-failed.stage.kwok.x-k8s.io", "true")
            .annotate("pod-container-running-failed.stage.kwok.x-k8s.io/delay", "10s")
            .slim();
        let Fate::CrashLoops { after, .. } = plan_pod(None, None, &later, &defaults()).fate else { panic!() };
        assert_eq!(after, Duration::from_secs(1));
        let init = Pod::test("p")
            .init_container("setup", false)
            .label("pod-init-container-running-failed.stage.kwok.x-k8s.io", "true")
            .slim();
        let plan = plan_pod(None, None, &init, &defaults());
        assert!(matches!(&plan.fate, Fate::InitFails(e) if e.reason == "initContainerError"), "{plan:?}");
        assert_eq!(plan.start_delay, Duration::from_secs(1), "it fails while Pending, after the delay");
        let unlabelled =
            Pod::test("p").annotate("pod-container-running-failed.stage.kwok.x-k8s.io/exit-code", "3").slim();
        assert_eq!(
            plan_pod(None, None, &unlabelled, &defaults()).fate,
            Fate::Runs,
            "annotations alone do nothing, as in kwok"
        );
    }

    #[test]
    fn pods_that_say_nothing_get_the_flags() {
        let plan = plan_pod(None, None, &pod("d", "a", "u"), &defaults());
        assert_eq!(
            plan,
            PodPlan {
                start_delay: Duration::ZERO,
                init_run_time: Duration::ZERO,
                exit_delay: Some(DEFAULT_EXIT_DELAY),
                fate: Fate::Runs,
                run_time: None,
                readiness: None,
                never_ready: false,
                fails_for_good: false,
                normal_events: false,
            }
        );
        assert_eq!(plan_pod(None, None, &job_pod("d", "a", "u"), &defaults()).run_time, Some(Duration::from_secs(5)));
        let flags = Defaults {
            exit_delay: Some(Duration::from_secs(7)),
            job_run_time: Duration::from_secs(9),
            normal_events: true,
        };
        let plan = plan_pod(Some(&settings("{startDelay: {fixed: 2s}}")), None, &job_pod("d", "a", "u"), &flags);
        assert_eq!((plan.exit_delay, plan.run_time), (Some(Duration::from_secs(7)), Some(Duration::from_secs(9))));
        assert_eq!(plan.start_delay, Duration::from_secs(2));
    }

    #[test]
    fn any_pod_that_may_finish_finishes_by_knob_or_annotation() {
        let s = settings("{runTime: {fixed: 30s}, jobRunTime: {fixed: 10s}}");
        let mut bare = pod("d", "a", "u");
        assert_eq!(plan_pod(Some(&s), None, &bare, &defaults()).run_time, None, "restartPolicy Always never finishes");
        bare.restart_policy = Some("OnFailure".into());
        assert_eq!(plan_pod(Some(&s), None, &bare, &defaults()).run_time, Some(Duration::from_secs(30)));
        assert_eq!(
            plan_pod(Some(&s), None, &job_pod("d", "a", "u"), &defaults()).run_time,
            Some(Duration::from_secs(10))
        );
        // The pod's own annotation wins over every knob, even with no pool at all.
        let own = annotated(bare.clone(), &[("pod-complete.stage.kwok.x-k8s.io/delay", "3s")]);
        assert_eq!(plan_pod(Some(&s), None, &own, &defaults()).run_time, Some(Duration::from_secs(3)));
        assert_eq!(plan_pod(None, None, &own, &defaults()).run_time, Some(Duration::from_secs(3)));
        let own = annotated(
            bare,
            &[
                ("pod-ready.stage.kwok.x-k8s.io/delay", "4s"),
                ("pod-delete.stage.kwok.x-k8s.io/delay", "2s"),
                ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
                ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "42"),
            ],
        );
        let plan = plan_pod(Some(&settings("{ignoreSIGTERM: true}")), None, &own, &defaults());
        assert_eq!((plan.start_delay, plan.exit_delay), (Duration::from_secs(4), Some(Duration::from_secs(2))));
        let Fate::CrashLoops { after, exit } = plan.fate else { panic!("{:?}", plan.fate) };
        assert_eq!((after, exit.code, exit.container.as_deref()), (Duration::from_secs(2), 42, Some("app")));
    }

    fn owned(mut p: SlimPod, api_version: &str, kind: &str) -> SlimPod {
        p.restart_policy = Some("Never".into());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "o".into(),
            uid: "o1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        p
    }

    #[test]
    fn a_job_of_any_group_finishes_by_default_and_run_time_only_reaches_the_owners_it_names() {
        let run = |s: Option<&PodLifecycle>, p: &SlimPod| plan_pod(s, None, p, &defaults()).run_time;
        // kwok's rule: any `Job` kind finishes by default (Volcano's batch.volcano.sh/v1alpha1).
        let volcano = owned(pod("d", "v", "u"), "batch.volcano.sh/v1alpha1", "Job");
        assert_eq!(run(None, &volcano), Some(Duration::from_secs(5)));
        // A pool's runTime: bare pods, never another controller's children.
        let s = settings("{runTime: {fixed: 30s}}");
        let workflow = owned(pod("d", "w", "u"), "argoproj.io/v1alpha1", "Workflow");
        let launcher = owned(pod("d", "virt-launcher-x", "u"), "kubevirt.io/v1", "VirtualMachineInstance");
        assert_eq!(run(Some(&s), &workflow), None, "an Argo pod is not a plain pod");
        assert_eq!(run(Some(&s), &launcher), None, "a launcher pod never takes runTime");
        let mut bare = pod("d", "b", "u");
        bare.restart_policy = Some("Never".into());
        assert_eq!(run(Some(&s), &bare), Some(Duration::from_secs(30)));
        // runTimeOwners reaches the kinds it names (a group left out: any group).
        let s = settings("{runTime: {fixed: 30s}, runTimeOwners: [{apiGroup: argoproj.io, kind: Workflow}]}");
        assert_eq!(run(Some(&s), &workflow), Some(Duration::from_secs(30)));
        assert_eq!(run(Some(&s), &launcher), None);
        assert_eq!(run(Some(&s), &bare), Some(Duration::from_secs(30)), "plain pods still finish");
        let other_group = owned(pod("d", "w2", "u"), "example.com/v1", "Workflow");
        assert_eq!(run(Some(&s), &other_group), None, "the group must match");
        let s = settings("{runTime: {fixed: 30s}, runTimeOwners: [{apiGroup: '*', kind: Workflow}]}");
        assert_eq!(run(Some(&s), &other_group), Some(Duration::from_secs(30)), "'*': any group");
        // A pool's own pods (a PodPool's) take its runTime.
        let pools = owned(pod("d", "pp-0", "u"), "pools.kwok.x-k8s.io/v1alpha1", "PodPool");
        assert_eq!(plan_owned_pod(Some(&s), None, &pools, &defaults(), true).run_time, Some(Duration::from_secs(30)));
        let core = settings("{runTime: {fixed: 30s}, runTimeOwners: [{kind: ReplicationController}]}");
        let rc = owned(pod("d", "r", "u"), "v1", "ReplicationController");
        assert_eq!(run(Some(&core), &rc), Some(Duration::from_secs(30)), "no group: the core group");
    }

    #[test]
    fn an_indexed_jobs_retried_index_repeats_its_run_time() {
        let s = settings("{jobRunTime: {min: 1s, max: 100s}}");
        let index = |name: &str, uid: &str, i: &str| {
            let mut p = job_pod("d", name, uid);
            p.set_label(COMPLETION_INDEX_LABEL, i);
            plan_pod(Some(&s), Some(7), &p, &defaults()).run_time
        };
        assert_eq!(index("j-0-abcde", "u1", "0"), index("j-0-fghij", "u2", "0"), "a retry repeats its index's time");
        let times: std::collections::BTreeSet<_> = (0..10).map(|i| index("x", "u", &i.to_string())).collect();
        assert!(times.len() >= 9, "each index has its own: {times:?}");
    }

    #[test]
    fn ignoring_sigterm_waits_the_grace_period() {
        let plan = plan_pod(Some(&settings("{ignoreSIGTERM: true}")), None, &pod("d", "a", "u"), &defaults());
        assert_eq!(plan.exit_delay, None);
    }

    #[test]
    fn about_the_given_share_of_pods_fail_and_a_seed_repeats_which() {
        let s = settings("{failPercent: 10, crashLoopPercent: 20, crashAfter: {fixed: 3s}}");
        let fates = |seed: Option<i64>, uid_prefix: &str| -> Vec<Fate> {
            (0..1000)
                .map(|i| {
                    plan_pod(Some(&s), seed, &pod("d", &format!("p-{i}"), &format!("{uid_prefix}{i}")), &defaults())
                        .fate
                })
                .collect()
        };
        let a = fates(Some(42), "run1-");
        let crash = a.iter().filter(|f| matches!(f, Fate::CrashLoops { .. })).count();
        let fail = a.iter().filter(|f| matches!(f, Fate::FailsAtStart(_))).count();
        assert!((150..250).contains(&crash), "{crash}");
        assert!((60..140).contains(&fail), "{fail}");
        assert!(a.contains(&Fate::CrashLoops { after: Duration::from_secs(3), exit: Exit::error(1) }));
        // The same seed and names: the same pods, whatever their UIDs.
        assert_eq!(a, fates(Some(42), "run2-"));
        assert_ne!(a, fates(Some(43), "run1-"));
        // No seed: decided by UID, so two runs differ.
        assert_ne!(fates(None, "run1-"), fates(None, "run2-"));
    }

    #[test]
    fn each_fate_gets_its_share() {
        let s = settings(
            "{oomKillPercent: 20, imagePullFailPercent: 20, initFailPercent: 20, exitCode: 3, readiness: {flapPercent: 50}}",
        );
        let mut with_init = pod("d", "x", "u");
        with_init.init_containers =
            vec![crate::informer::pod::SlimContainer { name: "setup".into(), ..Default::default() }];
        let plans: Vec<PodPlan> = (0..1000)
            .map(|i| {
                let mut p = with_init.clone();
                p.metadata.name = Some(format!("p-{i}"));
                plan_pod(Some(&s), Some(1), &p, &defaults())
            })
            .collect();
        let count = |f: &dyn Fn(&Fate) -> bool| plans.iter().filter(|p| f(&p.fate)).count();
        let oom =
            count(&|f| matches!(f, Fate::CrashLoops { exit, .. } if exit.reason == "OOMKilled" && exit.code == 137));
        let pull = count(&|f| *f == Fate::ImagePullFails);
        let init =
            count(&|f| matches!(f, Fate::InitFails(e) if e.code == 3 && e.container.as_deref() == Some("setup")));
        for (what, n) in [("oom", oom), ("pull", pull), ("init", init)] {
            assert!((140..260).contains(&n), "{what}: {n}");
        }
        let flapping = plans.iter().filter(|p| p.readiness.is_some()).count();
        assert!((400..600).contains(&flapping), "{flapping}");
        // Without init containers the init share runs normally.
        let plain: usize = (0..1000)
            .filter(|i| plan_pod(Some(&s), Some(1), &pod("d", &format!("p-{i}"), "u"), &defaults()).fate == Fate::Runs)
            .count();
        assert!((520..680).contains(&plain), "sixty percent run: {plain}");
    }

    #[test]
    fn a_share_of_nodes_reports_bad_conditions_for_good_or_in_windows() {
        let s: NodeLifecycle = serde_yaml::from_str(
            "{conditions: [{type: MemoryPressure, percent: 30}, {type: NotReady, percent: 50, lasts: {fixed: 10s}, every: 100s}]}",
        )
        .unwrap();
        let plans: Vec<Vec<ConditionPlan>> =
            (0..1000).map(|i| plan_conditions(&s, Some(3), &format!("n-{i}"), "u")).collect();
        let memory = plans.iter().filter(|p| p.iter().any(|c| c.condition == BadCondition::MemoryPressure)).count();
        let not_ready = plans.iter().filter(|p| p.iter().any(|c| c.condition == BadCondition::NotReady)).count();
        assert!((240..360).contains(&memory), "{memory}");
        assert!((440..560).contains(&not_ready), "{not_ready}");
        let both = plans.iter().find(|p| p.len() == 2).unwrap();
        let t0 = Duration::from_secs(2_000_000);
        let seen: Vec<(Vec<BadCondition>, Option<Duration>)> =
            (0..100).map(|t| bad_at(both, t0 + Duration::from_secs(t))).collect();
        assert!(seen.iter().all(|(bad, next)| bad.contains(&BadCondition::MemoryPressure) && next.is_some()));
        let not_ready_secs = seen.iter().filter(|(bad, _)| bad.contains(&BadCondition::NotReady)).count();
        assert!((9..=11).contains(&not_ready_secs), "10s of every 100s: {not_ready_secs}");
        let only_memory = plans.iter().find(|p| p.len() == 1 && p[0].windows.is_none()).unwrap();
        assert_eq!(bad_at(only_memory, t0), (vec![BadCondition::MemoryPressure], None), "for good: no change ever");
    }

    #[test]
    fn back_off_doubles_to_five_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| crash_back_off(n).as_secs()).collect();
        assert_eq!(secs, vec![10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(crash_back_off(0), Duration::from_secs(10));
    }

    #[test]
    fn about_the_given_share_of_nodes_flap_in_windows() {
        let s: NodeLifecycle =
            serde_yaml::from_str("{notReadyPercent: 10, notReadyFor: {fixed: 40s}, every: 2m}").unwrap();
        let flapping: Vec<String> =
            (0..1000).map(|i| format!("n-{i}")).filter(|n| plan_node(&s, Some(7), n, "uid").is_some()).collect();
        assert!((70..130).contains(&flapping.len()), "{}", flapping.len());
        let again: Vec<String> =
            (0..1000).map(|i| format!("n-{i}")).filter(|n| plan_node(&s, Some(7), n, "other").is_some()).collect();
        assert_eq!(flapping, again, "a seed picks nodes by name");
        let flap = plan_node(&s, Some(7), &flapping[0], "uid").unwrap();
        // Over ten cycles the node is away 40 s of every 120 s.
        let away = (0..1200).filter(|t| flap.away_until(Duration::from_secs(1_000_000 + t)).is_some()).count();
        assert!((390..=410).contains(&away), "{away}");
        let t = (0..240).map(|t| Duration::from_secs(1_000_000 + t)).find(|t| flap.away_until(*t).is_some()).unwrap();
        let until = flap.away_until(t).unwrap();
        assert!(until > t && until <= t + Duration::from_secs(40), "{t:?} {until:?}");
        assert_eq!(flap.away_until(until), None, "back at the end of the window");
    }

    #[test]
    fn a_delay_read_from_the_pods_annotation_wins_over_the_drawn_one_as_kwoks_duration_from() {
        use crate::informer::fixtures::TestPod;
        let s = settings("{startDelay: {fromAnnotation: x.io/start, fixed: 3s}, runTime: {fromAnnotation: x.io/run}}");
        let read = |pod: Pod| pod.restart("Never").slim_reading(&[], &["x.io/start", "x.io/run"]);
        let plan = plan_pod(Some(&s), None, &read(Pod::test("a").annotate("x.io/start", "1m30s")), &defaults());
        assert_eq!(plan.start_delay, Duration::from_secs(90), "the annotation's duration");
        let plan = plan_pod(Some(&s), None, &read(Pod::test("b")), &defaults());
        // Without it: the fallback, or none at all (kwok plays such a stage at once).
        assert_eq!((plan.start_delay, plan.run_time), (Duration::from_secs(3), Some(Duration::ZERO)));
        let plan = plan_pod(Some(&s), None, &read(Pod::test("c").annotate("x.io/start", "soon")), &defaults());
        assert_eq!(plan.start_delay, Duration::from_secs(3), "a value that does not read is as none");

        // A time: the delay runs until then (from now for a start, from the start for a run).
        let in_a_minute = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(60);
        let plan = plan_pod(
            Some(&s),
            None,
            &read(Pod::test("d").annotate("x.io/start", &in_a_minute.to_string())),
            &defaults(),
        );
        assert!((58..=60).contains(&plan.start_delay.as_secs()), "{:?}", plan.start_delay);
        let mut started = Pod::test("e").annotate("x.io/run", &in_a_minute.to_string());
        started.status.get_or_insert_default().start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            in_a_minute - k8s_openapi::jiff::SignedDuration::from_secs(100),
        ));
        let plan = plan_pod(Some(&s), None, &read(started), &defaults());
        assert_eq!(plan.run_time, Some(Duration::from_secs(100)), "runs from its start until the time");
        let plan =
            plan_pod(Some(&s), None, &read(Pod::test("f").annotate("x.io/start", "2001-01-01T00:00:00Z")), &defaults());
        assert_eq!(plan.start_delay, Duration::ZERO, "a time passed: at once");
    }

    #[test]
    fn a_max_beside_an_annotation_is_kwoks_jitter() {
        use crate::informer::fixtures::TestPod;
        let d: Delay = serde_yaml::from_str("{fromAnnotation: x.io/d, min: 1s, max: 10s}").unwrap();
        let pod = |v: &str| Pod::test("a").annotate("x.io/d", v).slim_reading(&[], &["x.io/d"]);
        let drawn: Vec<Duration> = (0..50)
            .map(|i| from_annotation(Some(&d), &pod("4s"), Duration::ZERO, f64::from(i) / 50.0).unwrap())
            .collect();
        assert!(drawn.iter().all(|d| (4.0..10.0).contains(&d.as_secs_f64())), "{drawn:?}");
        assert!(drawn.iter().any(|d| d.as_secs_f64() > 7.0) && drawn.iter().any(|d| d.as_secs_f64() < 5.0));
        assert_eq!(
            from_annotation(Some(&d), &pod("20s"), Duration::ZERO, 0.5),
            Some(Duration::from_secs(10)),
            "max when not longer"
        );
        let plain: Delay = serde_yaml::from_str("{fixed: 1s}").unwrap();
        assert_eq!(from_annotation(Some(&plain), &pod("4s"), Duration::ZERO, 0.5), None, "no fromAnnotation: not read");
    }
}
