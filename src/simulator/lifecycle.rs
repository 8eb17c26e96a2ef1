//! Which lifecycle knobs govern a simulated pod or node, and what they decide for it: a pod's
//! start delay, exit delay, fate (runs, fails, crash-loops) and Job run time; a node's
//! NotReady windows. The pool that owns a pod governs it; a pod no pool owns is governed by
//! the pool that owns its node; the operator's flags are the defaults for what neither says.
//! Which kinds have knobs is the registry's business: this engine looks pools up by owner
//! reference in whatever pool stores it is given ([`PoolLifecycles`]), and names no kind.
//! Decisions are pure functions of the settings, the seed and the object's identity.

use crate::api::duration::{parse_duration, unit};
use crate::api::lifecycle::{
    BadCondition, DEFAULT_UNREADY_EVERY, DEFAULT_UNREADY_FOR, Delay, Distribution, Lifecycle, NodeLifecycle,
    PodLifecycle, VmiLifecycle,
};
use crate::informer::pod::SlimPod;
pub use crate::kubelet::pod::Exit;
use crate::pool::PoolKind;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;
use std::time::Duration;

/// How long a pod that honours SIGTERM takes to exit when nothing else is said.
pub const DEFAULT_EXIT_DELAY: Duration = Duration::from_secs(1);
/// How long a crash-looping container runs before it crashes when nothing else is said.
pub const DEFAULT_CRASH_AFTER: Duration = Duration::from_secs(5);
pub use crate::api::lifecycle::{DEFAULT_EVERY, DEFAULT_NOT_READY_FOR};

/// The operator's flags: what pools that say nothing get.
#[derive(Clone, Debug)]
pub struct Defaults {
    /// `--pod-termination-delay` (else [`DEFAULT_EXIT_DELAY`]).
    pub exit_delay: Option<Duration>,
    /// `--job-run-time`.
    pub job_run_time: Duration,
}

impl Default for Defaults {
    /// The flags' own defaults.
    fn default() -> Self {
        Self { exit_delay: None, job_run_time: Duration::from_secs(5) }
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
    /// `None`: the pod ignores SIGTERM and waits its whole grace period.
    pub exit_delay: Option<Duration>,
    pub fate: Fate,
    /// How long it runs before its containers exit 0 and it is Succeeded (`None`: until it is
    /// deleted). Only for `restartPolicy: Never` or `OnFailure`.
    pub run_time: Option<Duration>,
    /// When its readiness probe fails, if it flaps.
    pub readiness: Option<Flap>,
}

fn sample(delay: Option<&Delay>, seed: i64, key: &[&str], salt: &str) -> Option<Duration> {
    let d = delay?.distribution().ok()?;
    let (u1, u2) = units(seed, key, salt);
    Some(d.sample(u1, u2))
}

fn units(seed: i64, key: &[&str], salt: &str) -> (f64, f64) {
    let mut a: Vec<&str> = key.to_vec();
    a.push(salt);
    let u1 = unit(seed, &a);
    a.push("2");
    (u1, unit(seed, &a))
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
    use crate::kubelet::usage::{self, Identity, Model, Overrides};
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

/// Whether a Job owns the pod.
pub fn owned_by_job(pod: &SlimPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Job" && o.api_version.starts_with("batch/"))
}

/// Decides a pod's plan from the pod lifecycle that governs it and the pod's own
/// annotations, which win.
pub fn plan_pod(settings: Option<&PodLifecycle>, seed: Option<i64>, pod: &SlimPod, defaults: &Defaults) -> PodPlan {
    let none = PodLifecycle::default();
    let s = settings.unwrap_or(&none);
    let own = pod.overrides.as_deref();
    let oom = over_memory_limit(s.usage.as_ref(), seed, pod);
    let (seed, key) = pod_key(seed, pod);
    let key: Vec<&str> = key.iter().map(String::as_str).collect();
    let draw = |salt: &str| units(seed, &key, salt).0;

    let exit = Exit::error(s.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1));
    let crash_after = || sample(s.crash_after.as_ref(), seed, &key, "crash").unwrap_or(DEFAULT_CRASH_AFTER);
    let has_init = pod.init_containers.iter().any(|c| !c.sidecar);
    let fate = if let Some(f) = own.and_then(|o| o.init_failed.as_ref()).filter(|_| has_init) {
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
        let shares =
            [s.fail_percent, s.crash_loop_percent, s.oom_kill_percent, s.image_pull_fail_percent, s.init_fail_percent]
                .map(|p| f64::from(p.unwrap_or(0).min(100)));
        let mut edge = 0.0;
        let slot = shares.iter().position(|share| {
            edge += share;
            roll < edge
        });
        match slot {
            Some(0) => Fate::FailsAtStart(exit),
            Some(1) => Fate::CrashLoops { after: crash_after(), exit },
            Some(2) => Fate::CrashLoops { after: crash_after(), exit: Exit::oom_killed() },
            Some(3) => Fate::ImagePullFails,
            Some(4) if has_init => {
                let first = pod.init_containers.iter().find(|c| !c.sidecar).map(|c| c.name.clone());
                Fate::InitFails(Exit { container: first, ..exit })
            }
            _ => Fate::Runs,
        }
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
    } else {
        pool_run(s.run_time.as_ref(), "run")
    };

    let start_delay = match own.and_then(|o| o.start) {
        Some(w) => w.sample(draw("start")),
        None => sample(s.start_delay.as_ref(), seed, &key, "start").unwrap_or(Duration::ZERO),
    };
    let fallback_exit = defaults.exit_delay.unwrap_or(DEFAULT_EXIT_DELAY);
    let exit_delay = match own.and_then(|o| o.exit_delay) {
        Some(w) => Some(w.sample(draw("exit"))),
        None if s.ignore_sigterm == Some(true) => None,
        None => Some(sample(s.exit_delay.as_ref(), seed, &key, "exit").unwrap_or(fallback_exit)),
    };

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

    PodPlan { start_delay, exit_delay, fate, run_time, readiness }
}

/// What is decided for one VMI: how long its VM boots, and whether the boot fails.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiPlan {
    pub boot_time: Duration,
    pub fails: bool,
    /// A guest agent runs in the VM (`vmis.guestAgent`).
    pub guest_agent: bool,
}

/// Decides a VMI's plan (`key`: its namespace and name with a seed, its UID without one).
pub fn plan_vmi(settings: Option<&VmiLifecycle>, seed: Option<i64>, namespace: &str, name: &str, uid: &str) -> VmiPlan {
    let Some(s) = settings else { return VmiPlan { boot_time: Duration::ZERO, fails: false, guest_agent: false } };
    let (seed, key): (i64, Vec<&str>) = match seed {
        Some(s) => (s, vec![namespace, name]),
        None => (0, vec![uid]),
    };
    let roll = unit(seed, &[&key[..], &["vmi-fate"]].concat()) * 100.0;
    VmiPlan {
        boot_time: sample(s.boot_time.as_ref(), seed, &key, "boot").unwrap_or(Duration::ZERO),
        fails: roll < f64::from(s.fail_percent.unwrap_or(0).min(100)),
        guest_agent: s.guest_agent.unwrap_or(false),
    }
}

/// The back-off a kubelet waits before restarting a crashed container for the `restarts`-th
/// time: 10s, doubling, at most 5m.
pub fn crash_back_off(restarts: i32) -> Duration {
    let doublings = (restarts.max(1) - 1).min(5) as u32;
    Duration::from_secs(10u64 << doublings).min(Duration::from_secs(300))
}

/// Now as time since the Unix epoch (flapping windows are on the wall clock, so every
/// process and every run agrees on them).
pub fn epoch_now() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

/// When a flapping node is away: the window of cycle `n` is `[start, start + away)` in
/// seconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct Flap {
    pub every: Duration,
    /// Where in each cycle the node goes (seconds into the cycle).
    pub offset: Duration,
    seed: i64,
    node: String,
    not_ready_for: Distribution,
}

impl Flap {
    /// The schedule of the object `id` (its seeded offset in the cycle, its windows' lengths).
    pub fn new(every: Duration, not_ready_for: Distribution, seed: i64, id: &str) -> Self {
        let every = every.max(Duration::from_secs(1));
        Flap { every, offset: every.mul_f64(unit(seed, &[id, "offset"])), seed, node: id.to_string(), not_ready_for }
    }

    /// When what is away at `now` comes back, or what is here goes next (seconds since the
    /// epoch).
    pub fn next_change(&self, now: Duration) -> Duration {
        if let Some(until) = self.away_until(now) {
            return until;
        }
        let every = self.every.as_secs_f64();
        let shifted = now.as_secs_f64() - self.offset.as_secs_f64();
        let n = if shifted < 0.0 { 0.0 } else { (shifted / every).floor() + 1.0 };
        Duration::from_secs_f64(n * every + self.offset.as_secs_f64())
    }

    /// How long the node is away in cycle `n`.
    fn away_in(&self, n: u64) -> Duration {
        let c = n.to_string();
        let away = self
            .not_ready_for
            .sample(unit(self.seed, &[&self.node, "away", &c]), unit(self.seed, &[&self.node, "away2", &c]));
        // Never the whole cycle: a node always comes back before it goes again.
        away.min(self.every.saturating_sub(Duration::from_secs(1)))
    }

    /// Whether the node is away at `now` (seconds since the epoch), and until when.
    pub fn away_until(&self, now: Duration) -> Option<Duration> {
        let every = self.every.as_secs_f64().max(1.0);
        let shifted = now.as_secs_f64() - self.offset.as_secs_f64();
        if shifted < 0.0 {
            return None;
        }
        let n = (shifted / every).floor();
        let start = n * every + self.offset.as_secs_f64();
        let end = start + self.away_in(n as u64).as_secs_f64();
        (now.as_secs_f64() < end).then(|| Duration::from_secs_f64(end))
    }
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

/// A pool seen only for its lifecycle knobs.
pub trait Knobs: Send + Sync {
    fn knobs(&self) -> Option<&Lifecycle>;
    /// When the pool was created (seconds since the epoch): usage shapes count from it.
    fn created(&self) -> f64;
}

impl<P: PoolKind> Knobs for P {
    fn knobs(&self) -> Option<&Lifecycle> {
        self.lifecycle()
    }

    fn created(&self) -> f64 {
        self.meta().creation_timestamp.as_ref().map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0)
    }
}

/// The pools of one kind, looked up by a child's owner reference.
pub trait PoolLifecycles: Send + Sync {
    /// The pool `owner` points at (in `namespace` for a namespaced child), if it is a pool of
    /// this kind with that UID: it governs the object, with its knobs or without any.
    fn owner(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<Arc<dyn Knobs>>;
}

/// The pools of kind `P`, as a source of knobs.
pub struct PoolStore<P: PoolKind>(pub Store<P>);

impl<P: PoolKind> PoolLifecycles for PoolStore<P> {
    fn owner(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<Arc<dyn Knobs>> {
        if owner.kind != P::kind(&()) || owner.api_version != P::api_version(&()) {
            return None;
        }
        let mut key = ObjectRef::<P>::new(&owner.name);
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        let pool = self.0.get(&key)?;
        // Only the pool that owns the object: a name alone is not enough.
        (pool.meta().uid.as_deref() == Some(owner.uid.as_str())).then_some(pool as Arc<dyn Knobs>)
    }
}

/// The sources the knobs are read from (none when `simulate` runs without the CRDs: then
/// every pod and node gets the defaults).
#[derive(Clone)]
pub struct Lifecycles {
    pub sources: Vec<Arc<dyn PoolLifecycles>>,
    pub defaults: Defaults,
}

impl Lifecycles {
    pub fn new(defaults: Defaults) -> Self {
        Self { sources: Vec::new(), defaults }
    }

    /// The pool that is the controller of an object with these owner references.
    fn governing(&self, refs: &[OwnerReference], namespace: Option<&str>) -> Option<Arc<dyn Knobs>> {
        let owner = refs.iter().find(|o| o.controller == Some(true))?;
        self.sources.iter().find_map(|s| s.owner(owner, namespace))
    }

    /// The pool that governs `pod` on `node`: its own if a pool owns it, else its node's.
    pub fn pod_pool(&self, pod: &SlimPod, node: &Node) -> Option<Arc<dyn Knobs>> {
        self.governing(pod.owner_references(), pod.metadata.namespace.as_deref())
            .or_else(|| self.governing(node.owner_references(), None))
    }

    /// The pool that owns `node`, if one does.
    pub fn node_pool(&self, node: &Node) -> Option<Arc<dyn Knobs>> {
        self.governing(node.owner_references(), None)
    }

    /// The plan of `pod` on `node`: its own pool's knobs if a pool owns it, else its node's
    /// pool's. Borrowed from the stores: this runs on every look at a pod.
    pub fn pod(&self, pod: &SlimPod, node: &Node) -> PodPlan {
        let pool = self.pod_pool(pod, node);
        let lifecycle = pool.as_deref().and_then(Knobs::knobs);
        plan_pod(lifecycle.and_then(|l| l.pods.as_ref()), lifecycle.and_then(|l| l.seed), pod, &self.defaults)
    }

    /// The plan of a VMI with these owner references in `namespace` (its pool's knobs).
    pub fn vmi(&self, refs: &[OwnerReference], namespace: &str, name: &str, uid: &str) -> VmiPlan {
        let pool = self.governing(refs, Some(namespace));
        let lifecycle = pool.as_deref().and_then(Knobs::knobs);
        plan_vmi(lifecycle.and_then(|l| l.vmis.as_ref()), lifecycle.and_then(|l| l.seed), namespace, name, uid)
    }

    /// The bad conditions `node` reports, from its pool's knobs.
    pub fn node_conditions(&self, node: &Node) -> Vec<ConditionPlan> {
        let Some(pool) = self.governing(node.owner_references(), None) else { return Vec::new() };
        let Some(lifecycle) = pool.knobs() else { return Vec::new() };
        let Some(settings) = lifecycle.nodes.as_ref() else { return Vec::new() };
        plan_conditions(settings, lifecycle.seed, &node.name_any(), node.metadata.uid.as_deref().unwrap_or_default())
    }

    /// The flapping schedule of `node`, if its pool makes it flap.
    /// The lease duration and status interval the node's pool sets for its heartbeat, if any.
    pub fn heartbeat(&self, node: &Node) -> (Option<Duration>, Option<Duration>) {
        let Some(pool) = self.governing(node.owner_references(), None) else { return (None, None) };
        let h = pool.knobs().and_then(|l| l.nodes.as_ref()).and_then(|n| n.heartbeat.as_ref());
        h.map_or((None, None), crate::api::lifecycle::Heartbeat::settings)
    }

    pub fn node(&self, node: &Node) -> Option<Flap> {
        let pool = self.governing(node.owner_references(), None)?;
        let lifecycle = pool.knobs()?;
        let settings = lifecycle.nodes.as_ref()?;
        plan_node(settings, lifecycle.seed, &node.name_any(), node.metadata.uid.as_deref().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults { exit_delay: None, job_run_time: Duration::from_secs(5) }
    }

    fn pod(ns: &str, name: &str, uid: &str) -> SlimPod {
        let mut p = SlimPod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        p
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
    fn pods_that_say_nothing_get_the_flags() {
        let plan = plan_pod(None, None, &pod("d", "a", "u"), &defaults());
        assert_eq!(
            plan,
            PodPlan {
                start_delay: Duration::ZERO,
                exit_delay: Some(DEFAULT_EXIT_DELAY),
                fate: Fate::Runs,
                run_time: None,
                readiness: None,
            }
        );
        assert_eq!(plan_pod(None, None, &job_pod("d", "a", "u"), &defaults()).run_time, Some(Duration::from_secs(5)));
        let flags = Defaults { exit_delay: Some(Duration::from_secs(7)), job_run_time: Duration::from_secs(9) };
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
    fn a_flap_says_when_it_changes_next() {
        let flap = Flap::new(Duration::from_secs(100), Distribution::Fixed(Duration::from_secs(10)), 1, "p");
        let t0 = Duration::from_secs(1_000_000);
        let start = (0..100).map(|t| t0 + Duration::from_secs(t)).find(|t| flap.away_until(*t).is_some()).unwrap();
        let before = start - Duration::from_secs(1);
        assert!(flap.next_change(before) <= start && flap.next_change(before) > before);
        assert_eq!(flap.next_change(start), flap.away_until(start).unwrap());
        let after = flap.away_until(start).unwrap();
        assert!(flap.next_change(after) >= after + Duration::from_secs(80), "the next window is a cycle on");
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
    fn vmis_boot_as_their_pool_says_and_a_seed_repeats_which_fail() {
        let knobs: VmiLifecycle = serde_yaml::from_str("{bootTime: {fixed: 3s}, failPercent: 30}").unwrap();
        let plans: Vec<VmiPlan> =
            (0..1000).map(|i| plan_vmi(Some(&knobs), Some(7), "ns", &format!("v-{i}"), "u")).collect();
        assert!(plans.iter().all(|p| p.boot_time == Duration::from_secs(3)));
        let failing = plans.iter().filter(|p| p.fails).count();
        assert!((240..360).contains(&failing), "about 30%: {failing}");
        let again: Vec<VmiPlan> =
            (0..1000).map(|i| plan_vmi(Some(&knobs), Some(7), "ns", &format!("v-{i}"), "other")).collect();
        assert_eq!(plans, again, "the seed decides by name, whatever the UID");
        assert_eq!(
            plan_vmi(None, None, "ns", "v", "u"),
            VmiPlan { boot_time: Duration::ZERO, fails: false, guest_agent: false }
        );
    }
}
