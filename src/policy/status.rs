//! What each policy's status says, computed without I/O from the policies and the simulated
//! objects: how many pods and nodes it governs, how many it selects that another governs, and
//! its conditions (`Ready` with what is wrong when it is invalid; `Conflicting` when another
//! policy selects some of the same objects as specifically and with the same weight).

use super::api::{LifecyclePolicy, PolicyStatus};
use super::matching::{Entry, Seen, Target};
use super::source::Indexes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What the objects showed each policy, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub pods: u32,
    pub nodes: u32,
    pub shadowed: u32,
    /// Policies that tie with it on some object (but for the name).
    pub ties: BTreeSet<String>,
}

/// Counts, for each policy, what it governs and what it loses, over objects one target saw.
pub fn count<'a>(
    indexes: &Indexes,
    target: Target,
    objects: impl Iterator<Item = Seen<'a>>,
    tallies: &mut BTreeMap<String, Tally>,
) {
    let index = match target {
        Target::Pods => &indexes.pods,
        Target::Nodes => &indexes.nodes,
    };
    if index.is_empty() {
        return;
    }
    for seen in objects {
        let found = index.matching(target, &seen);
        let Some((best, rest)) = found.split_first() else { continue };
        let name = |e: &Entry| e.policy.metadata.name.clone().unwrap_or_default();
        let t = tallies.entry(name(best)).or_default();
        match target {
            Target::Pods => t.pods += 1,
            Target::Nodes => t.nodes += 1,
        }
        for other in rest {
            let loser = tallies.entry(name(other)).or_default();
            loser.shadowed += 1;
            if other.rank.ties(&best.rank) {
                loser.ties.insert(name(best));
                tallies.entry(name(best)).or_default().ties.insert(name(other));
            }
        }
    }
}

fn condition(type_: &str, ok: bool, reason: &str, message: String, generation: Option<i64>, now: &Time) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// The status of `policy` given its tally; transition times are kept where a condition's
/// status did not change.
pub fn status(policy: &LifecyclePolicy, tally: &Tally, now: &Time) -> PolicyStatus {
    let generation = policy.metadata.generation;
    let problems = super::rules::validate(policy);
    let ready = if problems.is_empty() {
        let what = match (tally.pods, tally.nodes) {
            (0, 0) => "it selects no simulated pod or node now".to_string(),
            (p, n) => format!("it governs {p} pods and {n} nodes"),
        };
        condition("Ready", true, "Valid", what, generation, now)
    } else {
        let message = format!("{}; it governs nothing until fixed", problems.join("; "));
        condition("Ready", false, "Invalid", message, generation, now)
    };
    let conflicting = if tally.ties.is_empty() {
        condition("Conflicting", false, "NoTie", "no other policy ties with it on any object".into(), generation, now)
    } else {
        let names: Vec<&str> = tally.ties.iter().map(String::as_str).collect();
        let message = format!(
            "{} select some of the same objects as specifically and with the same weight: the name that sorts first governs them; give one a higher weight (spec.weight) or a more specific selector",
            names.join(", ")
        );
        condition("Conflicting", true, "Tie", message, generation, now)
    };
    let kept = |mut c: Condition| {
        if let Some(old) = policy.status.as_ref().and_then(|s| s.conditions.iter().find(|o| o.type_ == c.type_))
            && old.status == c.status
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
        c
    };
    PolicyStatus {
        observed_generation: generation,
        pods: tally.pods,
        nodes: tally.nodes,
        shadowed: tally.shadowed,
        conditions: vec![kept(ready), kept(conflicting)],
    }
}

/// Whether two statuses say the same (transition times aside: only a change is written).
pub fn same(a: &PolicyStatus, b: &PolicyStatus) -> bool {
    let strip = |s: &PolicyStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

/// The policies as `Arc`s (what the indexes hold).
pub fn shared(policies: Vec<LifecyclePolicy>) -> Vec<Arc<LifecyclePolicy>> {
    policies.into_iter().map(Arc::new).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::matching::Lookup;

    fn policy(name: &str, spec: &str) -> Arc<LifecyclePolicy> {
        Arc::new(
            serde_yaml::from_str(&format!(
                "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: {name}, generation: 3}}\nspec:\n{spec}"
            ))
            .unwrap(),
        )
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn each_policy_counts_what_it_governs_what_it_loses_and_whom_it_ties_with() {
        let all = [
            policy("web", "  pods: {selector: {matchLabels: {app: web}}, lifecycle: {}}\n"),
            policy("web-twin", "  pods: {selector: {matchLabels: {app: web}}, lifecycle: {}}\n"),
            policy("everyone", "  pods: {lifecycle: {}}\n"),
        ];
        let indexes = Indexes::of(&all);
        let (web, db, none) = (labels(&[("app", "web")]), labels(&[("app", "db")]), BTreeMap::new());
        let objects = [&web, &web, &db].map(|l| Seen {
            labels: l as &dyn Lookup,
            annotations: &none as &dyn Lookup,
            namespace: Some("d"),
            owner: None,
            node_labels: None,
        });
        let mut tallies = BTreeMap::new();
        count(&indexes, Target::Pods, objects.into_iter(), &mut tallies);
        assert_eq!(tallies["web"].pods, 2, "the first name of the tied pair governs");
        assert_eq!((tallies["web-twin"].pods, tallies["web-twin"].shadowed), (0, 2));
        assert_eq!((tallies["everyone"].pods, tallies["everyone"].shadowed), (1, 2), "it loses both web pods");
        assert!(tallies["web"].ties.contains("web-twin") && tallies["web-twin"].ties.contains("web"));
        assert!(tallies["everyone"].ties.is_empty(), "less specific is no tie");

        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let s = status(&all[1], &tallies["web-twin"], &now);
        let conflicting = s.conditions.iter().find(|c| c.type_ == "Conflicting").unwrap();
        assert_eq!(conflicting.status, "True");
        assert!(conflicting.message.contains("web") && conflicting.message.contains("spec.weight"));
        assert_eq!((s.pods, s.shadowed, s.observed_generation), (0, 2, Some(3)));
        let bad = policy("bad", "  pods: {selector: {namespaces: ['Bad!']}, lifecycle: {}}\n");
        let s = status(&bad, &Tally::default(), &now);
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Invalid"));
        assert!(ready.message.contains("spec.pods.selector.namespaces[0]"), "{}", ready.message);
    }
}
