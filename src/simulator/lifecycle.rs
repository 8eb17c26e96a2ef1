//! Which lifecycle knobs govern a simulated pod or node, and what they decide for it: a pod's
//! start delay, exit delay, fate (runs, fails, crash-loops) and Job run time; a node's
//! NotReady windows. The pool that owns a pod governs it; a pod no pool owns is governed by
//! the pool that owns its node; the operator's flags are the defaults for what neither says.
//! Which kinds have knobs is the registry's business: this engine looks pools up by owner
//! reference in whatever pool stores it is given ([`PoolLifecycles`]), and names no kind.
//! Decisions are pure functions of the settings, the seed and the object's identity.

use crate::api::duration::{parse_duration, unit};
use crate::api::lifecycle::{Delay, Distribution, Lifecycle, NodeLifecycle, PodLifecycle, VmiLifecycle};
use crate::informer::pod::SlimPod;
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
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fate {
    Runs,
    /// Exit 1 at start: Failed with `restartPolicy: Never`, else crash-looping from the start.
    FailsAtStart,
    /// Run `after`, exit 1, back off, again.
    CrashLoops {
        after: Duration,
    },
}

/// Everything decided for one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodPlan {
    pub start_delay: Duration,
    /// `None`: the pod ignores SIGTERM and waits its whole grace period.
    pub exit_delay: Option<Duration>,
    pub fate: Fate,
    pub job_run_time: Duration,
}

fn sample(delay: Option<&Delay>, seed: i64, key: &[&str], salt: &str) -> Option<Duration> {
    let d = delay?.distribution().ok()?;
    let mut a: Vec<&str> = key.to_vec();
    a.push(salt);
    let u1 = unit(seed, &a);
    a.push("2");
    let u2 = unit(seed, &a);
    Some(d.sample(u1, u2))
}

/// Decides a pod's plan from the pod lifecycle that governs it. `key` identifies the pod for
/// the seeded choices (namespace and name with a seed, so a replacement repeats its fate; the
/// UID without one, so each pod differs).
pub fn plan_pod(settings: Option<&PodLifecycle>, seed: Option<i64>, pod: &SlimPod, defaults: &Defaults) -> PodPlan {
    let fallback_exit = defaults.exit_delay.unwrap_or(DEFAULT_EXIT_DELAY);
    let Some(s) = settings else {
        return PodPlan {
            start_delay: Duration::ZERO,
            exit_delay: Some(fallback_exit),
            fate: Fate::Runs,
            job_run_time: defaults.job_run_time,
        };
    };
    let ns = pod.namespace().unwrap_or_default();
    let (seed, key): (i64, Vec<&str>) = match seed {
        Some(s) => (s, vec![ns.as_str(), pod.name()]),
        None => (0, vec![pod.uid()]),
    };
    let roll = unit(seed, &[&key[..], &["fate"]].concat()) * 100.0;
    let fail = f64::from(s.fail_percent.unwrap_or(0).min(100));
    let crash = f64::from(s.crash_loop_percent.unwrap_or(0).min(100));
    let fate = if roll < fail {
        Fate::FailsAtStart
    } else if roll < fail + crash {
        let after = sample(s.crash_after.as_ref(), seed, &key, "crash").unwrap_or(DEFAULT_CRASH_AFTER);
        Fate::CrashLoops { after }
    } else {
        Fate::Runs
    };
    PodPlan {
        start_delay: sample(s.start_delay.as_ref(), seed, &key, "start").unwrap_or(Duration::ZERO),
        exit_delay: if s.ignore_sigterm == Some(true) {
            None
        } else {
            Some(sample(s.exit_delay.as_ref(), seed, &key, "exit").unwrap_or(fallback_exit))
        },
        fate,
        job_run_time: sample(s.job_run_time.as_ref(), seed, &key, "job").unwrap_or(defaults.job_run_time),
    }
}

/// What is decided for one VMI: how long its VM boots, and whether the boot fails.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiPlan {
    pub boot_time: Duration,
    pub fails: bool,
}

/// Decides a VMI's plan (`key`: its namespace and name with a seed, its UID without one).
pub fn plan_vmi(settings: Option<&VmiLifecycle>, seed: Option<i64>, namespace: &str, name: &str, uid: &str) -> VmiPlan {
    let Some(s) = settings else { return VmiPlan { boot_time: Duration::ZERO, fails: false } };
    let (seed, key): (i64, Vec<&str>) = match seed {
        Some(s) => (s, vec![namespace, name]),
        None => (0, vec![uid]),
    };
    let roll = unit(seed, &[&key[..], &["vmi-fate"]].concat()) * 100.0;
    VmiPlan {
        boot_time: sample(s.boot_time.as_ref(), seed, &key, "boot").unwrap_or(Duration::ZERO),
        fails: roll < f64::from(s.fail_percent.unwrap_or(0).min(100)),
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
    let every = settings.every.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_EVERY).max(Duration::from_secs(1));
    let not_ready_for = settings
        .not_ready_for
        .as_ref()
        .and_then(|d| d.distribution().ok())
        .unwrap_or(Distribution::Fixed(DEFAULT_NOT_READY_FOR));
    Some(Flap { every, offset: every.mul_f64(unit(seed, &[id, "offset"])), seed, node: id.to_string(), not_ready_for })
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

    /// The flapping schedule of `node`, if its pool makes it flap.
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

    #[test]
    fn pods_that_say_nothing_get_the_flags() {
        let plan = plan_pod(None, None, &pod("d", "a", "u"), &defaults());
        assert_eq!(
            plan,
            PodPlan {
                start_delay: Duration::ZERO,
                exit_delay: Some(DEFAULT_EXIT_DELAY),
                fate: Fate::Runs,
                job_run_time: Duration::from_secs(5),
            }
        );
        let flags = Defaults { exit_delay: Some(Duration::from_secs(7)), job_run_time: Duration::from_secs(9) };
        let plan = plan_pod(Some(&settings("{startDelay: {fixed: 2s}}")), None, &pod("d", "a", "u"), &flags);
        assert_eq!((plan.exit_delay, plan.job_run_time), (Some(Duration::from_secs(7)), Duration::from_secs(9)));
        assert_eq!(plan.start_delay, Duration::from_secs(2));
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
        let fail = a.iter().filter(|f| **f == Fate::FailsAtStart).count();
        assert!((150..250).contains(&crash), "{crash}");
        assert!((60..140).contains(&fail), "{fail}");
        assert!(a.contains(&Fate::CrashLoops { after: Duration::from_secs(3) }));
        // The same seed and names: the same pods, whatever their UIDs.
        assert_eq!(a, fates(Some(42), "run2-"));
        assert_ne!(a, fates(Some(43), "run1-"));
        // No seed: decided by UID, so two runs differ.
        assert_ne!(fates(None, "run1-"), fates(None, "run2-"));
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
        assert_eq!(plan_vmi(None, None, "ns", "v", "u"), VmiPlan { boot_time: Duration::ZERO, fails: false });
    }
}
