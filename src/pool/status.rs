//! The pure status builder: counts and conditions from what the store shows and what the
//! last round found. Conditions keep their lastTransitionTime while their status holds.

use super::plan::{Observed, Plan};
use crate::api::PoolStatus;
use crate::api::common::conditions::{DEGRADED, PROGRESSING, READY};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// What kind of problem degrades a pool: the Degraded condition's reason and the label of
/// the metric that counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The spec breaks a rule (nothing is done until it changes).
    InvalidSpec,
    /// A per-index range (podCIDR, internalIPs, the default node range) has no item left.
    RangeExhausted,
    /// The API server refuses the children the template renders.
    InvalidTemplate,
    /// Writes to children failed (retried with back-off).
    WriteFailed,
    /// Objects the pool does not own hold some of its children's names.
    NameConflict,
    /// The children's CRD is not installed.
    ChildCrdMissing,
    /// The operator hit a bug on this pool.
    Panicked,
    /// Another simulator (kwok-controller, another instance) renews its children's Leases too.
    SimulatorConflict,
}

impl Reason {
    /// The condition's reason (CamelCase).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::RangeExhausted => "RangeExhausted",
            Reason::InvalidTemplate => "InvalidTemplate",
            Reason::WriteFailed => "WriteFailed",
            Reason::NameConflict => "NameConflict",
            Reason::ChildCrdMissing => "ChildCRDMissing",
            Reason::Panicked => "Panicked",
            Reason::SimulatorConflict => "SimulatorConflict",
        }
    }

    /// A low-cardinality metric label (snake_case).
    pub fn metric_label(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "invalid_spec",
            Reason::RangeExhausted => "range_exhausted",
            Reason::InvalidTemplate => "invalid_template",
            Reason::WriteFailed => "write_failed",
            Reason::NameConflict => "name_conflict",
            Reason::ChildCrdMissing => "child_crd_missing",
            Reason::Panicked => "panicked",
            Reason::SimulatorConflict => "simulator_conflict",
        }
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Why a pool is degraded, if it is: a category and a message a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Problem {
    pub reason: Reason,
    pub message: String,
}

impl Problem {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into() }
    }
}

pub struct StatusInput<'a> {
    pub count: u32,
    pub hash: &'a str,
    pub generation: Option<i64>,
    pub selector: String,
    pub owned: &'a [Observed],
    pub plan: Option<&'a Plan>,
    pub problem: Option<Problem>,
    pub previous: Option<&'a PoolStatus>,
    pub now: Time,
    /// What one child is called in messages ("node", "pod").
    pub noun: &'a str,
}

/// Builds the status the pool should show.
pub fn build(input: &StatusInput<'_>) -> PoolStatus {
    // The children the pool keeps (as its planner chooses them), and the indexes it wants.
    let (keep, wanted) = super::plan::desired(input.owned, input.count);
    let current: Vec<&Observed> =
        input.owned.iter().filter(|c| c.index.is_some_and(|i| keep.contains(&i)) && !c.terminating).collect();
    let replicas = current.len() as i32;
    let ready = current.iter().filter(|c| c.ready).count() as i32;
    let failed = current.iter().filter(|c| c.failing).count() as i32;
    let updated = current.iter().filter(|c| c.hash.as_deref() == Some(input.hash)).count() as i32;
    let desired = input.count as i32;
    let noun = input.noun;
    // Children beyond the count (or with names the pool does not make), still to be removed.
    let extra = input.owned.iter().filter(|c| c.index.is_none_or(|i| !wanted.contains(&i))).count() as i32;

    let (ready_status, ready_reason, ready_message) = if ready == desired && updated == desired && extra == 0 {
        ("True", "AllReady", format!("all {desired} {noun}s are ready and up to date"))
    } else {
        // Failing children (crash-looping pods, nodes whose launch failed) are named: they are
        // why a pool waits.
        let failing = if failed > 0 { format!(", {failed} failing") } else { String::new() };
        ("False", "Waiting", format!("{ready} of {desired} {noun}s ready, {updated} up to date{failing}"))
    };

    let progressing = replicas != desired || updated != desired || extra > 0 || input.plan.is_some_and(|p| p.pending);
    // A rollout is under way while children of an older template exist, or in-range
    // children are being replaced.
    let rolling = input.owned.iter().any(|c| {
        c.index.is_some_and(|i| wanted.contains(&i)) && (c.terminating || c.hash.as_deref() != Some(input.hash))
    });
    let (prog_status, prog_reason, prog_message) = if !progressing {
        ("False", "Stable", format!("{desired} {noun}s, nothing to do"))
    } else if extra > 0 || replicas > desired {
        ("True", "ScalingDown", format!("removing {extra} {noun}s above the count of {desired}"))
    } else if rolling {
        ("True", "RollingUpdate", format!("{updated} of {desired} {noun}s rendered from the current template"))
    } else if replicas < desired {
        ("True", "ScalingUp", format!("{replicas} of {desired} {noun}s exist"))
    } else {
        ("True", "RollingUpdate", format!("{updated} of {desired} {noun}s rendered from the current template"))
    };

    let (deg_status, deg_reason, deg_message) = match &input.problem {
        Some(p) => ("True", p.reason.as_str().to_string(), p.message.clone()),
        None => ("False", "AsExpected".to_string(), "no problem found".to_string()),
    };

    let previous = input.previous;
    let conditions = vec![
        condition(previous, READY, ready_status, ready_reason, ready_message, input),
        condition(previous, PROGRESSING, prog_status, prog_reason, prog_message, input),
        condition(previous, DEGRADED, deg_status, &deg_reason, deg_message, input),
    ];
    PoolStatus {
        replicas,
        ready_replicas: ready,
        not_ready_replicas: replicas - ready,
        failed_replicas: failed,
        updated_replicas: updated,
        observed_generation: input.generation,
        selector: Some(input.selector.clone()),
        conditions,
    }
}

fn condition(
    previous: Option<&PoolStatus>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    input: &StatusInput<'_>,
) -> Condition {
    let old = previous.and_then(|p| p.condition(type_));
    let last_transition_time = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => input.now.clone(),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: input.generation,
    }
}

/// A one-line summary of conflicting names for a condition message.
pub fn conflict_problem(pool: &str, kind: &str, conflicts: &[u32]) -> Option<Problem> {
    if conflicts.is_empty() {
        return None;
    }
    let names: Vec<String> = conflicts.iter().take(5).map(|i| crate::api::conventions::child_name(pool, *i)).collect();
    let more = if conflicts.len() > 5 { format!(" and {} more", conflicts.len() - 5) } else { String::new() };
    Some(Problem {
        reason: Reason::NameConflict,
        message: format!(
            "{kind} {}{more} already exist and are not owned by this pool; they are left alone. \
             Delete or rename them (or the pool) to let the pool create its own",
            names.join(", ")
        ),
    })
}

/// Children another simulator renews too, as the simulator noted them (pure).
pub fn simulator_conflict_problem(noun: &str, observed: &[Observed]) -> Option<Problem> {
    let marked: Vec<&Observed> = observed.iter().filter(|c| c.conflict.is_some()).collect();
    let first = marked.first()?;
    let names: Vec<&str> = marked.iter().take(5).map(|c| c.name.as_str()).collect();
    let more = if marked.len() > 5 { format!(" and {} more", marked.len() - 5) } else { String::new() };
    Some(Problem {
        reason: Reason::SimulatorConflict,
        message: format!(
            "another simulator ({}) renews the leases of {noun}s {}{more} too: two simulators fight over them. \
             Run one of them without a simulator (kwok-pools run --no-simulator), or give each its own \
             {noun}s (--manage-nodes-with-label-selector, kwok's --manage-nodes-with-*)",
            first.conflict.as_deref().unwrap_or("unknown"),
            names.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(i: u32, hash: &str, ready: bool) -> Observed {
        Observed::fixture(i, hash, ready)
    }

    fn input<'a>(count: u32, owned: &'a [Observed], previous: Option<&'a PoolStatus>) -> StatusInput<'a> {
        StatusInput {
            count,
            hash: "h",
            generation: Some(3),
            selector: "pools.kwok.x-k8s.io/pool=p".into(),
            owned,
            plan: None,
            problem: None,
            previous,
            now: Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap()),
            noun: "node",
        }
    }

    #[test]
    fn all_ready_and_stable() {
        let owned = vec![obs(0, "h", true), obs(1, "h", true)];
        let s = build(&input(2, &owned, None));
        assert_eq!((s.replicas, s.ready_replicas, s.updated_replicas), (2, 2, 2));
        assert_eq!(s.condition("Ready").unwrap().status, "True");
        assert_eq!(s.condition("Progressing").unwrap().status, "False");
        assert_eq!(s.condition("Degraded").unwrap().status, "False");
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn a_pool_that_lost_a_marked_child_counts_the_ones_it_keeps() {
        // Index 1 went (an autoscaler marked it); 0, 2 and 3 are the pool of three.
        let owned = vec![obs(0, "h", true), obs(2, "h", true), obs(3, "h", true)];
        let s = build(&input(3, &owned, None));
        assert_eq!((s.replicas, s.ready_replicas), (3, 3));
        assert_eq!(s.condition("Ready").unwrap().status, "True");
        assert_eq!(s.condition("Progressing").unwrap().reason, "Stable");
        // One more than the count: the highest goes, and the status says so.
        let s = build(&input(2, &owned, None));
        assert_eq!(s.replicas, 2);
        assert_eq!(s.condition("Progressing").unwrap().reason, "ScalingDown");
    }

    #[test]
    fn failing_children_are_counted_and_named_in_the_ready_message() {
        let mut failed = obs(1, "h", false);
        failed.failing = true;
        let owned = vec![obs(0, "h", true), failed];
        let s = build(&input(2, &owned, None));
        assert_eq!(s.failed_replicas, 1);
        assert_eq!(s.condition("Ready").unwrap().message, "1 of 2 nodes ready, 2 up to date, 1 failing");
        let s = build(&input(1, &owned[..1], None));
        assert!(!s.condition("Ready").unwrap().message.contains("failing"));
    }

    #[test]
    fn scaling_up_and_rolling() {
        let owned = vec![obs(0, "h", true)];
        let s = build(&input(2, &owned, None));
        assert_eq!(s.updated_replicas, 1);
        let p = s.condition("Progressing").unwrap();
        assert_eq!((p.status.as_str(), p.reason.as_str()), ("True", "ScalingUp"));
        let owned = vec![obs(0, "old", true), obs(1, "h", true)];
        let s = build(&input(2, &owned, None));
        assert_eq!(s.condition("Progressing").unwrap().reason, "RollingUpdate");
        assert_eq!(s.condition("Ready").unwrap().status, "False");
    }

    #[test]
    fn children_above_the_count_are_not_replicas() {
        let owned = vec![obs(0, "h", true), obs(1, "h", true), obs(2, "h", true)];
        let s = build(&input(1, &owned, None));
        assert_eq!(s.replicas, 1);
        assert_eq!(s.condition("Progressing").unwrap().reason, "ScalingDown");
    }

    #[test]
    fn transition_time_kept_while_status_holds() {
        let owned = vec![obs(0, "h", true)];
        let first = build(&input(1, &owned, None));
        let mut later = input(1, &owned, Some(&first));
        later.now = Time(k8s_openapi::jiff::Timestamp::from_second(2000).unwrap());
        let second = build(&later);
        assert_eq!(
            first.condition("Ready").unwrap().last_transition_time,
            second.condition("Ready").unwrap().last_transition_time
        );
    }

    #[test]
    fn a_replacement_in_progress_is_not_a_scale_down() {
        let mut terminating = obs(1, "old", true);
        terminating.terminating = true;
        let owned = vec![obs(0, "h", true), terminating];
        let s = build(&input(2, &owned, None));
        assert_eq!(s.condition("Progressing").unwrap().reason, "RollingUpdate");
    }

    #[test]
    fn problems_make_the_pool_degraded() {
        let mut i = input(3, &[], None);
        i.problem = conflict_problem("p", "nodes", &[1]);
        let s = build(&i);
        let d = s.condition("Degraded").unwrap();
        assert_eq!((d.status.as_str(), d.reason.as_str()), ("True", "NameConflict"));
        assert!(d.message.contains("p-1"));
    }

    #[test]
    fn children_another_simulator_renews_degrade_the_pool_with_what_to_do() {
        let mut children = vec![obs(0, "h", true), obs(1, "h", true)];
        assert_eq!(simulator_conflict_problem("node", &children), None);
        children[1].conflict = Some("kwok".into());
        let p = simulator_conflict_problem("node", &children).unwrap();
        assert_eq!(p.reason, Reason::SimulatorConflict);
        assert!(
            p.message.contains("(kwok)") && p.message.contains("p-1") && p.message.contains("--no-simulator"),
            "{}",
            p.message
        );
    }
}
