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
}

/// The pools of one kind, looked up by a child's owner reference.
pub trait PoolLifecycles: Send + Sync {
    /// The pool `owner` points at (in `namespace` for a namespaced child), if it is a pool of
    /// this kind with that UID: it governs the object, with its knobs or without any.
    fn owner(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<Arc<dyn Knobs>>;
}

/// The sources the knobs are read from, one per registered kind (none when `simulate` runs
/// without the CRDs: then every pod and node gets the flags).
#[derive(Clone, Default)]
pub struct Lifecycles {
    pub sources: Vec<Arc<dyn PoolLifecycles>>,
}

impl Lifecycles {
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

#[cfg(test)]
mod tests {
    use super::*;

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
