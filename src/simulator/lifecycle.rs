//! The lifecycle engine: which knobs govern a simulated object, found without naming any
//! kind. A pool that owns an object governs it; a pod no pool owns is governed by the pool
//! that owns its node; what neither says falls to the process's flags (the deciding is the
//! kubelet's: [`crate::kubelet::status::fate`]). The pools of every registered kind are looked
//! up by owner reference in whatever stores the operator gives ([`PoolLifecycles`]); a kind's
//! `spec.lifecycle` is its own type, seen here through [`Knobs`]. Also the seeded sampling and
//! the windows on the wall clock ([`Flap`]) every decision is built on.

use crate::api::duration::unit;
use crate::api::lifecycle::{Delay, Distribution, NodeLifecycle, PodLifecycle};
use crate::informer::pod::SlimPod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// A duration drawn from `delay` for the object `key`, the same for the same seed, key and
/// salt.
pub fn sample(delay: Option<&Delay>, seed: i64, key: &[&str], salt: &str) -> Option<Duration> {
    let d = delay?.distribution().ok()?;
    let (u1, u2) = units(seed, key, salt);
    Some(d.sample(u1, u2))
}

/// Two seeded unit numbers for the object `key` and `salt`.
pub fn units(seed: i64, key: &[&str], salt: &str) -> (f64, f64) {
    let mut a: Vec<&str> = key.to_vec();
    a.push(salt);
    let u1 = unit(seed, &a);
    a.push("2");
    (u1, unit(seed, &a))
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

    /// One window, once: away from `start` (seconds since the epoch) for a length drawn
    /// from `lasts` (a cycle so long that no second window comes).
    pub fn once(start: Duration, lasts: Distribution, seed: i64, id: &str) -> Self {
        const NEVER_AGAIN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        Flap { every: NEVER_AGAIN, offset: start, seed, node: id.to_string(), not_ready_for: lasts }
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

/// A pool seen only for its lifecycle knobs, whatever its kind: the sections the shared
/// simulator reads, and the pool itself for the sections only its kind knows.
pub trait Knobs: Send + Sync {
    /// Makes every random choice about the pool's objects reproducible.
    fn seed(&self) -> Option<i64>;
    /// What pods do (its children, or the pods on its nodes).
    fn pods(&self) -> Option<&PodLifecycle>;
    /// What nodes do (a pool of nodes).
    fn nodes(&self) -> Option<&NodeLifecycle>;
    /// When the pool was created (seconds since the epoch): usage shapes count from it.
    fn created(&self) -> f64;
    /// The pool itself: its kind's simulator reads its own sections from it.
    fn pool(&self) -> &dyn Any;
    /// Devices these knobs give a node that no pool made (a node policy's), for the kind that
    /// publishes them.
    fn devices(&self) -> Option<KnobDevices<'_>> {
        None
    }
}

/// Devices some knobs give a node: who gives them (the value of the slices' device-pool
/// label), its generation and seed, and the sets (the NodePool's device type, seen here as
/// `Any`: the kind that publishes them reads its own type).
pub struct KnobDevices<'a> {
    pub by: String,
    pub generation: i64,
    pub seed: i64,
    pub sets: &'a dyn Any,
}

/// The pools of one kind, looked up by a child's owner reference.
pub trait PoolLifecycles: Send + Sync {
    /// The pool `owner` points at (in `namespace` for a namespaced child), if it is a pool of
    /// this kind with that UID: it governs the object, with its knobs or without any.
    fn owner(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<Arc<dyn Knobs>>;
    /// The pod annotations the pools' delays are read from (`fromAnnotation`).
    fn delay_annotations(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The lifecycle policies, as the engine asks them: the one that governs a pod or a node, if
/// any selects it (its knobs only; the engine layers them over the pool's).
pub trait PolicySource: Send + Sync {
    fn pod(&self, pod: &SlimPod, node: &Node) -> Option<Arc<dyn Knobs>>;
    fn node(&self, node: &Node) -> Option<Arc<dyn Knobs>>;
}

/// The sources the knobs are read from, one per registered kind (none when `simulate` runs
/// without the CRDs: then every pod and node gets the flags), and the policies.
#[derive(Clone)]
pub struct Lifecycles {
    pub sources: Vec<Arc<dyn PoolLifecycles>>,
    pub policies: Option<Arc<dyn PolicySource>>,
    layers: Layers,
    /// Bumped when the policies change: the workers look at every object again.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Lifecycles {
    fn default() -> Self {
        Self::new(Vec::new(), None)
    }
}

impl Lifecycles {
    /// The engine over these pool sources and policies.
    pub fn new(sources: Vec<Arc<dyn PoolLifecycles>>, policies: Option<Arc<dyn PolicySource>>) -> Self {
        let (tx, _) = tokio::sync::watch::channel(0);
        Self { sources, policies, layers: Layers::default(), changes: Arc::new(tx) }
    }

    /// Says that what governs objects changed (the policies): whoever follows
    /// [`Lifecycles::changes`] looks at every object again.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The pod annotations every pool's delays are read from.
    pub fn pool_delay_annotations(&self) -> Vec<String> {
        let mut all: Vec<String> = self.sources.iter().flat_map(|s| s.delay_annotations()).collect();
        all.sort();
        all.dedup();
        all
    }

    /// Follows [`Lifecycles::changed`].
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// What governs `pod` on `node`: the policy that selects it, over the pool that governs it
    /// (its own, else its node's); either alone; or nothing (the flags).
    pub fn pod_knobs(&self, pod: &SlimPod, node: &Node) -> Option<Arc<dyn Knobs>> {
        let pool = self.pod_pool(pod, node);
        match self.policies.as_ref().and_then(|p| p.pod(pod, node)) {
            Some(policy) => Some(self.layers.layer(policy, pool)),
            None => pool,
        }
    }

    /// What governs `node`: the policy that selects it over its pool, either alone, or nothing.
    pub fn node_knobs(&self, node: &Node) -> Option<Arc<dyn Knobs>> {
        let pool = self.node_pool(node);
        match self.policies.as_ref().and_then(|p| p.node(node)) {
            Some(policy) => Some(self.layers.layer(policy, pool)),
            None => pool,
        }
    }

    /// The pool that is the controller of an object with these owner references.
    pub fn governing(&self, refs: &[OwnerReference], namespace: Option<&str>) -> Option<Arc<dyn Knobs>> {
        let owner = refs.iter().find(|o| o.controller == Some(true))?;
        self.sources.iter().find_map(|s| s.owner(owner, namespace))
    }

    /// The pool that governs `pod` on `node`: its own if a pool owns it, else its node's.
    pub fn pod_pool(&self, pod: &SlimPod, node: &Node) -> Option<Arc<dyn Knobs>> {
        self.governing(pod.owner_references(), pod.metadata.namespace.as_deref()).or_else(|| self.node_pool(node))
    }

    /// The pool that owns `node`, if one does.
    pub fn node_pool(&self, node: &Node) -> Option<Arc<dyn Knobs>> {
        self.governing(node.owner_references(), None)
    }
}

/// A policy's knobs over a pool's: each knob the policy sets wins, the others are the pool's
/// (then the flags'). Its seed governs when it has one; usage shapes count from the pool's
/// creation; the kind's own sections are the pool's.
struct Layered {
    top: Arc<dyn Knobs>,
    under: Option<Arc<dyn Knobs>>,
    pods: Option<PodLifecycle>,
    nodes: Option<NodeLifecycle>,
}

impl Knobs for Layered {
    fn seed(&self) -> Option<i64> {
        self.top.seed().or_else(|| self.under.as_ref().and_then(|u| u.seed()))
    }
    fn pods(&self) -> Option<&PodLifecycle> {
        self.pods.as_ref()
    }
    fn nodes(&self) -> Option<&NodeLifecycle> {
        self.nodes.as_ref()
    }
    fn created(&self) -> f64 {
        self.under.as_ref().map_or_else(|| self.top.created(), |u| u.created())
    }
    fn pool(&self) -> &dyn Any {
        match &self.under {
            Some(u) => u.pool(),
            None => &(),
        }
    }
    fn devices(&self) -> Option<KnobDevices<'_>> {
        self.top.devices().or_else(|| self.under.as_ref()?.devices())
    }
}

/// `top`'s knobs over `under`'s, knob by knob (a knob is a field of the section: what `top`
/// sets replaces `under`'s whole).
pub fn overlay<T: serde::Serialize + serde::de::DeserializeOwned + Clone>(
    top: Option<&T>,
    under: Option<&T>,
) -> Option<T> {
    match (top, under) {
        (None, None) => None,
        (Some(t), None) => Some(t.clone()),
        (None, Some(u)) => Some(u.clone()),
        (Some(t), Some(u)) => {
            let (serde_json::Value::Object(t), Ok(serde_json::Value::Object(mut u))) =
                (serde_json::to_value(t).unwrap_or_default(), serde_json::to_value(u))
            else {
                return Some(t.clone());
            };
            u.extend(t);
            serde_json::from_value(serde_json::Value::Object(u)).ok()
        }
    }
}

/// Layered knobs made once per (policy, pool) pair and kept while both are unchanged: the
/// stores hand out the same `Arc` for an unchanged object, and a new one when it changes (the
/// cache holds both, so an address is never reused while it is a key).
#[derive(Clone)]
struct Layers(Arc<std::sync::Mutex<LayerCache>>);

/// Layered knobs by the addresses of (policy, pool).
type LayerCache = lru::LruCache<(usize, usize), Arc<dyn Knobs>>;

/// (Policy, pool) pairs whose layered knobs are kept.
const LAYERS_KEPT: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(4096) {
    Some(n) => n,
    None => std::num::NonZeroUsize::MIN,
};

impl Layers {
    fn layer(&self, top: Arc<dyn Knobs>, under: Option<Arc<dyn Knobs>>) -> Arc<dyn Knobs> {
        let address = |k: &Arc<dyn Knobs>| Arc::as_ptr(k).cast::<()>() as usize;
        let key = (address(&top), under.as_ref().map_or(0, address));
        let mut cache = crate::sync::lock(&self.0);
        if let Some(hit) = cache.get(&key) {
            return hit.clone();
        }
        let pods = overlay(top.pods(), under.as_ref().and_then(|u| u.pods()));
        let nodes = overlay(top.nodes(), under.as_ref().and_then(|u| u.nodes()));
        let layered: Arc<dyn Knobs> = Arc::new(Layered { top, under, pods, nodes });
        cache.put(key, layered.clone());
        layered
    }
}

impl Default for Layers {
    fn default() -> Self {
        Self(Arc::new(std::sync::Mutex::new(lru::LruCache::new(LAYERS_KEPT))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_window_comes_once_at_its_start() {
        let start = Duration::from_secs(1_000_000);
        let once = Flap::once(start, Distribution::Fixed(Duration::from_secs(60)), 0, "n");
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(once.away_until(at(0) - Duration::from_secs(1)), None);
        assert_eq!(once.next_change(at(0) - Duration::from_secs(5)), start);
        assert_eq!(once.away_until(at(30)), Some(at(60)));
        assert_eq!(once.away_until(at(60)), None, "back after its length");
        assert!(once.next_change(at(61)) > at(3600 * 24 * 365), "and never again");
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
}
