//! Which policy governs an object, decided without I/O: a policy's selector against what the
//! object shows (labels, annotations, namespace, controller owner, its node's labels), the
//! specificity that ranks the policies that match (more terms win, then the higher weight,
//! then the name first in order), and an index that finds a new or changed object's candidate
//! policies by its labels rather than by trying every policy.

use super::api::{LifecyclePolicy, NodeSelector, OwnerKind, PodSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a selector sees of an object.
#[derive(Clone, Copy)]
pub struct Seen<'a> {
    pub labels: &'a dyn Lookup,
    pub annotations: &'a dyn Lookup,
    pub namespace: Option<&'a str>,
    /// (apiGroup, kind) of its controller owner, if it has one.
    pub owner: Option<(&'a str, &'a str)>,
    /// The labels of the node a pod is bound to (none for a node, or an unbound pod).
    pub node_labels: Option<&'a dyn Lookup>,
}

/// Key/value pairs looked up by key, and walked.
pub trait Lookup {
    fn get(&self, key: &str) -> Option<&str>;
    fn pairs(&self) -> Vec<(&str, &str)>;
}

impl Lookup for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
    fn pairs(&self) -> Vec<(&str, &str)> {
        self.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
}

impl Lookup for Box<[(&'static str, Box<str>)]> {
    fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }
    fn pairs(&self) -> Vec<(&str, &str)> {
        self.iter().map(|(k, v)| (*k, &**v)).collect()
    }
}

/// No pairs at all.
pub struct Empty;

impl Lookup for Empty {
    fn get(&self, _: &str) -> Option<&str> {
        None
    }
    fn pairs(&self) -> Vec<(&str, &str)> {
        Vec::new()
    }
}

/// Whether one label requirement holds (an unknown operator never does: refused at admission).
pub fn requirement_holds(r: &LabelSelectorRequirement, labels: &dyn Lookup) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

fn pairs_hold(want: &BTreeMap<String, String>, have: &dyn Lookup) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v.as_str()))
}

fn label_selector_holds(s: &LabelSelector, labels: &dyn Lookup) -> bool {
    s.match_labels.as_ref().is_none_or(|m| pairs_hold(m, labels))
        && s.match_expressions.iter().flatten().all(|r| requirement_holds(r, labels))
}

fn owner_holds(owners: &[OwnerKind], owner: Option<(&str, &str)>) -> bool {
    owners.is_empty() || owners.iter().any(|o| o.holds(owner))
}

/// Whether a pod selector picks what `seen` shows.
pub fn pod_selects(s: &PodSelector, seen: &Seen<'_>) -> bool {
    pairs_hold(&s.match_labels, seen.labels)
        && s.match_expressions.iter().all(|r| requirement_holds(r, seen.labels))
        && pairs_hold(&s.match_annotations, seen.annotations)
        && (s.namespaces.is_empty() || seen.namespace.is_some_and(|ns| s.namespaces.iter().any(|n| n == ns)))
        && owner_holds(&s.owners, seen.owner)
        && s.node.as_ref().is_none_or(|n| label_selector_holds(n, seen.node_labels.unwrap_or(&Empty)))
}

/// Whether a node selector picks what `seen` shows.
pub fn node_selects(s: &NodeSelector, seen: &Seen<'_>) -> bool {
    pairs_hold(&s.match_labels, seen.labels)
        && s.match_expressions.iter().all(|r| requirement_holds(r, seen.labels))
        && pairs_hold(&s.match_annotations, seen.annotations)
        && owner_holds(&s.owners, seen.owner)
}

/// How specific a pod selector is: one per term.
pub fn pod_specificity(s: &PodSelector) -> usize {
    let node = s.node.as_ref().map_or(0, |n| {
        n.match_labels.as_ref().map_or(0, BTreeMap::len) + n.match_expressions.as_ref().map_or(0, Vec::len)
    });
    s.match_labels.len()
        + s.match_expressions.len()
        + s.match_annotations.len()
        + usize::from(!s.namespaces.is_empty())
        + usize::from(!s.owners.is_empty())
        + node
}

/// How specific a node selector is: one per term.
pub fn node_specificity(s: &NodeSelector) -> usize {
    s.match_labels.len() + s.match_expressions.len() + s.match_annotations.len() + usize::from(!s.owners.is_empty())
}

/// What ranks policies that select one object: more specific first, then heavier, then the
/// name first in order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    specificity: usize,
    weight: i32,
    /// Reversed order of the name: the first name in order ranks highest.
    name: std::cmp::Reverse<String>,
}

impl Rank {
    pub fn new(specificity: usize, weight: i32, name: &str) -> Self {
        Self { specificity, weight, name: std::cmp::Reverse(name.to_string()) }
    }

    /// Whether `other` ties with this rank but for the name (a conflict the name settles).
    pub fn ties(&self, other: &Rank) -> bool {
        self.specificity == other.specificity && self.weight == other.weight
    }
}

/// Pods or nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Pods,
    Nodes,
}

/// One policy's rule for one target, ranked.
#[derive(Clone, Debug)]
pub struct Entry {
    pub policy: Arc<LifecyclePolicy>,
    pub rank: Rank,
}

impl Entry {
    fn selects(&self, target: Target, seen: &Seen<'_>) -> bool {
        match target {
            Target::Pods => self.policy.spec.pods.as_ref().is_some_and(|p| pod_selects(&p.selector, seen)),
            Target::Nodes => self.policy.spec.nodes.as_ref().is_some_and(|n| node_selects(&n.selector, seen)),
        }
    }
}

/// The policies of one target, indexed by one label pair each selects on (its anchor); those
/// with no label pair to anchor on are tried for every object.
#[derive(Default, Debug)]
pub struct Index {
    by_label: HashMap<(String, String), Vec<Entry>>,
    unanchored: Vec<Entry>,
}

impl Index {
    /// The index of `policies` for `target` (the valid ones that have a rule for it).
    pub fn build(policies: &[Arc<LifecyclePolicy>], target: Target) -> Self {
        let mut index = Index::default();
        for p in policies {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let weight = p.spec.weight.unwrap_or(0);
            let (labels, specificity) = match (target, &p.spec.pods, &p.spec.nodes) {
                (Target::Pods, Some(r), _) => (&r.selector.match_labels, pod_specificity(&r.selector)),
                (Target::Nodes, _, Some(r)) => (&r.selector.match_labels, node_specificity(&r.selector)),
                _ => continue,
            };
            let entry = Entry { policy: p.clone(), rank: Rank::new(specificity, weight, name) };
            match labels.iter().next() {
                Some((k, v)) => index.by_label.entry((k.clone(), v.clone())).or_default().push(entry),
                None => index.unanchored.push(entry),
            }
        }
        index
    }

    /// Every policy that selects `seen`, best first.
    pub fn matching(&self, target: Target, seen: &Seen<'_>) -> Vec<&Entry> {
        let mut out: Vec<&Entry> = Vec::new();
        if !self.by_label.is_empty() {
            for (k, v) in seen.labels.pairs() {
                if let Some(entries) = self.by_label.get(&(k.to_string(), v.to_string())) {
                    out.extend(entries.iter().filter(|e| e.selects(target, seen)));
                }
            }
        }
        out.extend(self.unanchored.iter().filter(|e| e.selects(target, seen)));
        out.sort_by(|a, b| b.rank.cmp(&a.rank));
        out
    }

    /// The policy that governs `seen`, if any selects it.
    pub fn best(&self, target: Target, seen: &Seen<'_>) -> Option<&Entry> {
        self.matching(target, seen).into_iter().next()
    }

    pub fn is_empty(&self) -> bool {
        self.by_label.is_empty() && self.unanchored.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Arc<LifecyclePolicy> {
        Arc::new(serde_yaml::from_str(yaml).unwrap())
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn seen<'a>(l: &'a BTreeMap<String, String>, a: &'a BTreeMap<String, String>) -> Seen<'a> {
        Seen { labels: l, annotations: a, namespace: Some("team-a"), owner: Some(("batch", "Job")), node_labels: None }
    }

    const BROAD: &str = "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {name: broad}\nspec:\n  pods: {selector: {namespaces: [team-a]}, lifecycle: {}}\n";
    const NARROW: &str = "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {name: narrow}\nspec:\n  pods: {selector: {matchLabels: {app: web}, owners: [{apiGroup: batch, kind: Job}]}, lifecycle: {}}\n";

    #[test]
    fn the_most_specific_policy_governs_then_the_heavier_then_the_first_name() {
        let all = [policy(BROAD), policy(NARROW)];
        let index = Index::build(&all, Target::Pods);
        let (l, a) = (labels(&[("app", "web")]), BTreeMap::new());
        let found = index.matching(Target::Pods, &seen(&l, &a));
        let names: Vec<&str> = found.iter().map(|e| e.policy.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["narrow", "broad"], "two terms beat one");
        let other = labels(&[("app", "db")]);
        assert_eq!(index.best(Target::Pods, &seen(&other, &a)).unwrap().policy.metadata.name.as_deref(), Some("broad"));
        // Equally specific: the weight, then the name.
        let heavy = policy(&BROAD.replace("name: broad", "name: zz").replace("pods:", "weight: 5\n  pods:"));
        let twin = policy(&BROAD.replace("name: broad", "name: aa"));
        let index = Index::build(&[policy(BROAD), heavy, twin], Target::Pods);
        let order: Vec<String> = index
            .matching(Target::Pods, &seen(&other, &a))
            .iter()
            .map(|e| e.policy.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(order, ["zz", "aa", "broad"]);
        assert!(Index::build(&all, Target::Nodes).is_empty(), "no node rule");
    }

    #[test]
    fn every_term_must_hold() {
        let p = policy(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {name: p}\nspec:\n  pods:\n    selector:\n      matchLabels: {app: web}\n      matchExpressions: [{key: tier, operator: NotIn, values: [db]}]\n      matchAnnotations: {chaos: 'on'}\n      node: {matchLabels: {zone: a}}\n    lifecycle: {}\n",
        );
        let s = &p.spec.pods.as_ref().unwrap().selector;
        let (l, a, node) = (labels(&[("app", "web")]), labels(&[("chaos", "on")]), labels(&[("zone", "a")]));
        let mut view = seen(&l, &a);
        assert!(!pod_selects(s, &view), "an unbound pod has no node labels");
        view.node_labels = Some(&node);
        assert!(pod_selects(s, &view));
        let db = labels(&[("app", "web"), ("tier", "db")]);
        assert!(!pod_selects(s, &Seen { labels: &db, ..view }));
        let quiet = BTreeMap::new();
        assert!(!pod_selects(s, &Seen { annotations: &quiet, ..view }));
        assert_eq!(pod_specificity(s), 4);
    }

    #[test]
    fn owners_name_a_group_and_kind_and_none_picks_unowned_objects() {
        let job = [OwnerKind { api_group: "batch".into(), kind: "Job".into() }];
        assert!(owner_holds(&job, Some(("batch", "Job"))));
        assert!(!owner_holds(&job, Some(("batch.volcano.sh", "Job"))));
        let any_job = [OwnerKind { api_group: "*".into(), kind: "Job".into() }];
        assert!(
            owner_holds(&any_job, Some(("batch.volcano.sh", "Job"))) && owner_holds(&any_job, Some(("batch", "Job")))
        );
        let none = [OwnerKind { api_group: String::new(), kind: "None".into() }];
        assert!(owner_holds(&none, None) && !owner_holds(&none, Some(("", "ReplicationController"))));
        assert!(owner_holds(&[], Some(("apps", "ReplicaSet"))));
    }

    #[test]
    fn requirements_follow_kubernetes_semantics() {
        let r = |op: &str, values: &[&str]| LabelSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        };
        let (set, unset) = (labels(&[("k", "a")]), BTreeMap::new());
        assert!(requirement_holds(&r("In", &["a", "b"]), &set) && !requirement_holds(&r("In", &["a"]), &unset));
        assert!(!requirement_holds(&r("NotIn", &["a"]), &set) && requirement_holds(&r("NotIn", &["a"]), &unset));
        assert!(requirement_holds(&r("Exists", &[]), &set) && requirement_holds(&r("DoesNotExist", &[]), &unset));
        assert!(!requirement_holds(&r("Gt", &["1"]), &set), "an unknown operator never holds");
    }
}
