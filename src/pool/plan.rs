//! The pure planner: from the desired count, the current template hash and what the store
//! shows, which children to create, update in place, delete, or leave alone. No client here.

use crate::api::common::MaxUnavailable;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeSet, HashMap};

/// How a kind rolls out a template change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateMode {
    /// Patch children where they stand (nodes).
    InPlace,
    /// Delete and recreate, at most `max_unavailable` not ready at a time (pods).
    Replace { max_unavailable: u32 },
}

impl UpdateMode {
    /// Replacement within `maxUnavailable` of the spec. Validated before any plan: an invalid
    /// value (a pool the reconciler does not act on) counts as unset.
    pub fn replace(max_unavailable: Option<&IntOrString>, count: u32) -> Self {
        let mu = max_unavailable.and_then(|v| MaxUnavailable::parse(v).ok());
        UpdateMode::Replace { max_unavailable: MaxUnavailable::resolve(mu.as_ref(), count) }
    }
}

/// What the planner needs to know about one child owned by the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub name: String,
    /// The index parsed from the name; `None` when the name is not `<pool>-<index>`.
    pub index: Option<u32>,
    pub hash: Option<String>,
    pub ready: bool,
    pub terminating: bool,
    /// It ran to an end (a pod that Succeeded or Failed) and must be replaced.
    pub finished: bool,
    /// It fails: a pod that Failed or crash-loops (for the status count).
    pub failing: bool,
    /// Another simulator renews it too (the simulator's note on the child: who).
    pub conflict: Option<String>,
    /// Marked to go first when the pool scales down (`pools.kwok.x-k8s.io/delete`, as Cluster
    /// API's `delete-machine`), or cheaper to lose (`controller.kubernetes.io/pod-deletion-cost`,
    /// lower goes first): what an autoscaler uses to pick the victims.
    pub delete_first: bool,
    pub deletion_cost: i32,
}

impl Observed {
    /// A child that exists, neither terminating nor finished nor failing.
    pub fn new(name: String, index: Option<u32>, hash: Option<String>, ready: bool) -> Self {
        Self {
            name,
            index,
            hash,
            ready,
            terminating: false,
            finished: false,
            failing: false,
            conflict: None,
            delete_first: false,
            deletion_cost: 0,
        }
    }

    /// Child `i` of pool `p` with template `hash` (tests).
    #[cfg(test)]
    pub fn fixture(i: u32, hash: &str, ready: bool) -> Self {
        Self::new(crate::api::conventions::child_name("p", i), Some(i), Some(hash.into()), ready)
    }
}

/// The planner's input.
#[derive(Clone, Debug)]
pub struct PlanInput<'a> {
    pub count: u32,
    pub hash: &'a str,
    pub mode: UpdateMode,
    /// Children owned by the pool (matched by owner UID).
    pub owned: &'a [Observed],
    /// Indexes below `count` whose name is taken by an object the pool does not own.
    pub taken: &'a BTreeSet<u32>,
    /// At most this many creations per round, so status shows progress on big pools.
    pub max_creates: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Indexes to create.
    pub create: Vec<u32>,
    /// Indexes to patch in place to the current template.
    pub update: Vec<u32>,
    /// Children to delete (name), highest index first.
    pub delete: Vec<String>,
    /// Indexes that cannot be created because another object has the name.
    pub conflicts: Vec<u32>,
    /// Whether more work remains after this round (creations beyond `max_creates`, children
    /// still terminating, a rollout waiting for readiness).
    pub pending: bool,
}

/// Which of the live children a pool of `count` keeps: all of them when there are no more than
/// `count`; else the ones an autoscaler did not mark, the costlier to lose first, then the
/// lowest indexes (so a plain scale-down removes the highest indexes).
fn kept(live: &[&Observed], count: u32) -> BTreeSet<u32> {
    let mut ranked: Vec<&Observed> = live.to_vec();
    ranked.sort_by_key(|c| (c.delete_first, std::cmp::Reverse(c.deletion_cost), c.index));
    ranked.iter().take(count as usize).filter_map(|c| c.index).collect()
}

/// The indexes a pool of `count` wants now: those of the live children it keeps, and the
/// lowest free ones for the rest (an index a marked child left is filled again only when the
/// pool grows). The planner and the status read the same set.
pub fn desired(owned: &[Observed], count: u32) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let live: Vec<&Observed> = owned.iter().filter(|c| c.index.is_some() && !c.terminating).collect();
    let keep = kept(&live, count);
    let fill = count as usize - keep.len();
    let free = (0..).filter(|i| !keep.contains(i)).take(fill);
    let desired: BTreeSet<u32> = keep.iter().copied().chain(free).collect();
    (keep, desired)
}

/// Which children to create, update and delete: the pool keeps the [`desired`] indexes.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    let (keep, desired) = desired(input.owned, input.count);

    let mut by_index: HashMap<u32, &Observed> = HashMap::new();
    let mut scale_down: Vec<(bool, u32, &str)> = Vec::new();
    for child in input.owned {
        match child.index {
            Some(i) if desired.contains(&i) && (keep.contains(&i) || child.terminating) => {
                by_index.insert(i, child);
            }
            // Not kept, or not one of our names: remove.
            other => {
                if !child.terminating {
                    scale_down.push((child.delete_first, other.unwrap_or(u32::MAX), &child.name));
                } else {
                    out.pending = true;
                }
            }
        }
    }
    // Marked children first, then the highest indexes.
    scale_down.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)).then_with(|| a.2.cmp(b.2)));
    out.delete.extend(scale_down.into_iter().map(|(_, _, n)| n.to_string()));

    // Unavailable: desired indexes without a ready, live child (conflicts excluded: they
    // cannot be helped by waiting).
    let mut unavailable = 0u32;
    for &i in &desired {
        match by_index.get(&i) {
            Some(c) if c.ready && !c.terminating => {}
            Some(_) => unavailable += 1,
            None if input.taken.contains(&i) => out.conflicts.push(i),
            None => {
                unavailable += 1;
                if out.create.len() < input.max_creates {
                    out.create.push(i);
                } else {
                    out.pending = true;
                }
            }
        }
    }

    // Finished children are replaced whatever the mode (as a ReplicaSet replaces them).
    let mut finished: Vec<&Observed> = by_index.values().filter(|c| c.finished && !c.terminating).copied().collect();
    finished.sort_by_key(|c| c.index);
    out.delete.extend(finished.iter().map(|c| c.name.clone()));
    by_index.retain(|_, c| !c.finished || c.terminating);

    let mut outdated: Vec<&Observed> =
        by_index.values().filter(|c| c.hash.as_deref() != Some(input.hash)).copied().collect();
    // Not-ready children first (replacing them costs no availability), then by index.
    outdated.sort_by_key(|c| (c.ready, c.index));
    match input.mode {
        UpdateMode::InPlace => {
            out.update = outdated.iter().filter(|c| !c.terminating).filter_map(|c| c.index).collect();
            out.update.sort_unstable();
        }
        UpdateMode::Replace { max_unavailable } => {
            let budget = max_unavailable.max(1);
            for c in outdated {
                if c.terminating {
                    out.pending = true;
                    continue;
                }
                if !c.ready {
                    out.delete.push(c.name.clone());
                } else if unavailable < budget {
                    out.delete.push(c.name.clone());
                    unavailable += 1;
                } else {
                    out.pending = true;
                }
            }
        }
    }
    if by_index.values().any(|c| c.terminating) {
        out.pending = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(i: u32, hash: &str, ready: bool) -> Observed {
        Observed::fixture(i, hash, ready)
    }

    fn run(count: u32, mode: UpdateMode, owned: &[Observed], taken: &[u32]) -> Plan {
        let taken: BTreeSet<u32> = taken.iter().copied().collect();
        plan(&PlanInput { count, hash: "h2", mode, owned, taken: &taken, max_creates: 1000 })
    }

    #[test]
    fn creates_every_missing_index() {
        let p = run(3, UpdateMode::InPlace, &[child(1, "h2", true)], &[]);
        assert_eq!(p.create, vec![0, 2]);
        assert!(p.delete.is_empty() && p.update.is_empty());
    }

    #[test]
    fn scale_down_removes_highest_indexes_first() {
        let owned: Vec<_> = (0..5).map(|i| child(i, "h2", true)).collect();
        let p = run(2, UpdateMode::InPlace, &owned, &[]);
        assert_eq!(p.delete, vec!["p-4", "p-3", "p-2"]);
        assert!(p.create.is_empty());
    }

    #[test]
    fn a_marked_child_goes_first_and_its_index_is_filled_only_when_the_pool_grows() {
        let mut owned: Vec<_> = (0..5).map(|i| child(i, "h2", true)).collect();
        owned[1].delete_first = true;
        // Marked but the count stays: nothing happens.
        assert_eq!(run(5, UpdateMode::InPlace, &owned, &[]), Plan::default());
        // One fewer: the marked child goes, not the highest index.
        let p = run(4, UpdateMode::InPlace, &owned, &[]);
        assert_eq!((p.delete, p.create), (vec!["p-1".to_string()], vec![]));
        // Two fewer: the marked child, then the highest index.
        assert_eq!(run(3, UpdateMode::InPlace, &owned, &[]).delete, ["p-1", "p-4"]);
        // Gone: four children 0, 2, 3, 4 are the pool of four; a fifth fills index 1.
        owned.remove(1);
        assert_eq!(run(4, UpdateMode::InPlace, &owned, &[]), Plan::default());
        assert_eq!(run(5, UpdateMode::InPlace, &owned, &[]).create, [1]);
        // Still terminating: its index waits rather than being created twice.
        let mut leaving = child(1, "h2", true);
        leaving.terminating = true;
        owned.push(leaving);
        let p = run(5, UpdateMode::InPlace, &owned, &[]);
        assert!(p.create.is_empty() && p.pending, "{p:?}");
    }

    #[test]
    fn cheaper_children_go_first_as_a_replica_set_weighs_pod_deletion_cost() {
        let mut owned: Vec<_> = (0..4).map(|i| child(i, "h2", true)).collect();
        owned[0].deletion_cost = -10;
        owned[3].deletion_cost = 100;
        let p = run(2, UpdateMode::Replace { max_unavailable: 1 }, &owned, &[]);
        assert_eq!(p.delete, ["p-2", "p-0"], "the cheapest and the highest of the rest; the costly one stays");
    }

    #[test]
    fn strays_with_foreign_names_are_removed() {
        let mut stray = child(0, "h2", true);
        stray.name = "p-x".into();
        stray.index = None;
        let p = run(1, UpdateMode::InPlace, &[stray], &[]);
        assert_eq!(p.delete, vec!["p-x"]);
        assert_eq!(p.create, vec![0]);
    }

    #[test]
    fn names_taken_by_others_are_conflicts_not_creates() {
        let p = run(3, UpdateMode::InPlace, &[], &[1]);
        assert_eq!(p.create, vec![0, 2]);
        assert_eq!(p.conflicts, vec![1]);
    }

    #[test]
    fn in_place_updates_every_outdated_child() {
        let owned = vec![child(0, "h1", true), child(1, "h2", true), child(2, "h1", false)];
        let p = run(3, UpdateMode::InPlace, &owned, &[]);
        assert_eq!(p.update, vec![0, 2]);
        assert!(p.delete.is_empty());
    }

    #[test]
    fn replace_respects_max_unavailable() {
        let owned: Vec<_> = (0..10).map(|i| child(i, "h1", true)).collect();
        let p = run(10, UpdateMode::Replace { max_unavailable: 3 }, &owned, &[]);
        assert_eq!(p.delete.len(), 3);
        assert!(p.pending);
    }

    #[test]
    fn replace_counts_not_ready_and_missing_against_the_budget() {
        // index 0 missing (being recreated), 1 new but not ready: 2 unavailable of budget 3.
        let mut owned = vec![child(1, "h2", false)];
        owned.extend((2..10).map(|i| child(i, "h1", true)));
        let p = run(10, UpdateMode::Replace { max_unavailable: 3 }, &owned, &[]);
        assert_eq!(p.create, vec![0]);
        assert_eq!(p.delete.len(), 1);
    }

    #[test]
    fn replace_takes_outdated_not_ready_children_for_free() {
        let owned = vec![child(0, "h1", false), child(1, "h1", false), child(2, "h1", true)];
        let p = run(3, UpdateMode::Replace { max_unavailable: 1 }, &owned, &[]);
        assert_eq!(p.delete, vec!["p-0", "p-1"]);
    }

    #[test]
    fn terminating_children_are_waited_for() {
        let mut c = child(0, "h2", true);
        c.terminating = true;
        let p = run(1, UpdateMode::Replace { max_unavailable: 1 }, &[c], &[]);
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert!(p.pending);
    }

    #[test]
    fn finished_children_are_replaced() {
        let mut done = child(1, "h2", false);
        done.finished = true;
        let p = run(2, UpdateMode::Replace { max_unavailable: 1 }, &[child(0, "h2", true), done], &[]);
        assert_eq!(p.delete, vec!["p-1"]);
        assert!(p.create.is_empty(), "recreated once the old one is gone");
    }

    #[test]
    fn creations_are_batched() {
        let taken = BTreeSet::new();
        let p = plan(&PlanInput {
            count: 10,
            hash: "h",
            mode: UpdateMode::InPlace,
            owned: &[],
            taken: &taken,
            max_creates: 4,
        });
        assert_eq!(p.create, vec![0, 1, 2, 3]);
        assert!(p.pending);
    }
}
