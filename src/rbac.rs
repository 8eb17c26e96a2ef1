//! The operator's RBAC, generated from the registry: every kind brings the rights on its pools
//! and children (from its [`PoolKind`]) and its simulator's ([`Simulate::simulator_rules`]);
//! the rest of the process adds its own (events, leases, its webhook configurations). One
//! model, rendered twice — `config/rbac.yaml` (kustomize) and the Helm chart's
//! `templates/rbac.yaml` — so the two never drift (`make rbac`; a test compares).

use crate::api::common::GROUP;
use crate::informer::shared::LEASE_NAMESPACE;
use crate::kinds::{self, Kind, Visitor};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Where a rule applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Everywhere (a ClusterRole bound cluster-wide).
    Cluster,
    /// Only in the namespaces where pools live (a ClusterRole bound per namespace).
    PoolNamespaces,
    /// In one namespace the cluster defines (`kube-node-lease`).
    Namespace(&'static str),
    /// In the operator's own namespace (leader and shard Leases).
    OperatorNamespace,
}

/// One right, and why the operator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub scope: Scope,
    pub group: String,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    /// Only these objects (empty: every object).
    pub names: Vec<String>,
    pub why: String,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

impl Rule {
    fn new(scope: Scope, group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self {
            scope,
            group: group.into(),
            resources: strings(resources),
            verbs: strings(verbs),
            names: vec![],
            why: why.into(),
        }
    }

    pub fn cluster(group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self::new(Scope::Cluster, group, resources, verbs, why)
    }

    pub fn pool_namespaces(group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self::new(Scope::PoolNamespaces, group, resources, verbs, why)
    }

    pub fn namespace(namespace: &'static str, group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self::new(Scope::Namespace(namespace), group, resources, verbs, why)
    }

    pub fn operator_namespace(group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self::new(Scope::OperatorNamespace, group, resources, verbs, why)
    }

    /// A cluster-wide right on the named objects only.
    pub fn named(group: &str, resources: &[&str], verbs: &[&str], names: &[&str], why: &str) -> Self {
        Self { names: strings(names), ..Self::new(Scope::Cluster, group, resources, verbs, why) }
    }
}

/// The rights on kind `K`'s pools and children.
pub fn kind_rules<K: Kind>() -> Vec<Rule> {
    let (plural, noun) = (K::plural(&()).into_owned(), K::NOUN);
    let child_group = <K::Child as kube::Resource>::group(&()).into_owned();
    let child = <K::Child as kube::Resource>::plural(&()).into_owned();
    let namespaced = K::crd().spec.scope == "Namespaced";
    let mut writes = vec!["create"];
    if K::PATCHES_CHILDREN {
        writes.push("patch");
    }
    let write_scope = if namespaced { Scope::PoolNamespaces } else { Scope::Cluster };
    let mut rules = vec![
        Rule::cluster(GROUP, &[&plural], &["get", "list", "watch"], &format!("{plural}: watched")),
        Rule::cluster(GROUP, &[&format!("{plural}/status")], &["patch"], &format!("{plural}: status written")),
        Rule::cluster(
            &child_group,
            &[&child],
            &["get", "list", "watch", "delete"],
            &format!("{noun}s of {plural}: watched, deleted on scale-down"),
        ),
        Rule::new(write_scope, &child_group, &[&child], &writes, &format!("{noun}s of {plural}: created")),
    ];
    rules.extend(K::simulator_rules());
    rules
}

/// The rights of the operator process itself, whatever kinds it runs.
fn process_rules() -> Vec<Rule> {
    vec![
        Rule::cluster("events.k8s.io", &["events"], &["create", "patch"], "events on pools (scaled, rolled, problems)"),
        Rule::named(
            "admissionregistration.k8s.io",
            &["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            &["get", "patch"],
            &[WEBHOOK_NAME],
            "its own webhook configurations only (endpoint and caBundle), by name: no create, nothing on any other webhook",
        ),
        Rule::operator_namespace(
            "coordination.k8s.io",
            &["leases"],
            &["get", "list", "watch", "create", "update", "patch", "delete"],
            "leader election and simulator shard membership",
        ),
    ]
}

/// Placeholder for the webhook configurations' name, replaced when rendered.
const WEBHOOK_NAME: &str = "<webhook>";

/// Every rule of the operator: the process's and every registered kind's.
pub fn rules() -> Vec<Rule> {
    struct Collect(Vec<Rule>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            self.0.extend(kind_rules::<K>());
        }
    }
    let mut c = Collect(process_rules());
    kinds::visit_all(&mut c);
    c.0
}

/// A rule as rendered: verbs merged per resource, resources with equal verbs together.
#[derive(Debug, PartialEq, Eq)]
struct Merged {
    group: String,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
    why: Vec<String>,
}

/// The rules of one scope, merged (stable order: by group, then names, then resources).
fn merged(rules: &[Rule], scope: &Scope) -> Vec<Merged> {
    // (group, names, resource) → (verbs, reasons)
    type Key = (String, Vec<String>, String);
    let mut per: BTreeMap<Key, (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    for r in rules.iter().filter(|r| &r.scope == scope) {
        for res in &r.resources {
            let e = per.entry((r.group.clone(), r.names.clone(), res.clone())).or_default();
            e.0.extend(r.verbs.iter().cloned());
            if !e.1.contains(&r.why) {
                e.1.push(r.why.clone());
            }
        }
    }
    let mut out: Vec<Merged> = Vec::new();
    for ((group, names, resource), (verbs, why)) in per {
        let verbs = order_verbs(verbs);
        match out.iter_mut().find(|m| m.group == group && m.names == names && m.verbs == verbs) {
            Some(m) => {
                m.resources.push(resource);
                m.why.extend(why.into_iter().filter(|w| !m.why.contains(w)).collect::<Vec<_>>());
            }
            None => out.push(Merged { group, resources: vec![resource], verbs, names, why }),
        }
    }
    out
}

/// Verbs in the order people write them.
fn order_verbs(verbs: BTreeSet<String>) -> Vec<String> {
    const ORDER: [&str; 9] = ["get", "list", "watch", "create", "update", "patch", "delete", "impersonate", "escalate"];
    let mut v: Vec<String> = verbs.into_iter().collect();
    v.sort_by_key(|x| ORDER.iter().position(|o| o == x).unwrap_or(ORDER.len()));
    v
}

/// Names and namespaces as the two renderings spell them.
struct Spelling {
    /// The prefix of every role and binding, and the ServiceAccount's name.
    name: &'static str,
    /// The operator's namespace.
    namespace: &'static str,
    /// The webhook configurations' name.
    webhook: &'static str,
    /// Text before every object (labels, in the chart).
    labels: &'static str,
}

const CONFIG: Spelling = Spelling { name: "kwok-pools", namespace: "kwok-pools", webhook: "kwok-pools", labels: "" };
const CHART: Spelling = Spelling {
    name: "{{ $name }}",
    namespace: "{{ $root.Release.Namespace }}",
    webhook: "{{ $webhookName }}",
    labels: "\n  labels: {{- include \"kwok-pools.labels\" $root | nindent 4 }}",
};

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| if i.is_empty() { "\"\"".to_string() } else { i.clone() }).collect();
    format!("[{}]", quoted.join(", "))
}

fn render_rules(out: &mut String, rules: &[Merged], s: &Spelling) {
    out.push_str("rules:\n");
    for m in rules {
        for why in &m.why {
            let _ = writeln!(out, "# {why}");
        }
        let _ = writeln!(out, "- apiGroups: {}", list(std::slice::from_ref(&m.group)));
        let _ = writeln!(out, "  resources: {}", list(&m.resources));
        if !m.names.is_empty() {
            let names: Vec<String> = m.names.iter().map(|n| n.replace(WEBHOOK_NAME, s.webhook)).collect();
            let _ = writeln!(out, "  resourceNames: {}", list(&names));
        }
        let _ = writeln!(out, "  verbs: {}", list(&m.verbs));
    }
}

fn role(out: &mut String, kind: &str, name: &str, namespace: Option<&str>, rules: &[Merged], s: &Spelling) {
    let _ = write!(out, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}");
    if let Some(ns) = namespace {
        let _ = write!(out, "\n  namespace: {ns}");
    }
    let _ = writeln!(out, "{}", s.labels);
    render_rules(out, rules, s);
}

fn binding(out: &mut String, kind: &str, name: &str, namespace: Option<&str>, role_kind: &str, s: &Spelling) {
    let _ = write!(out, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}");
    if let Some(ns) = namespace {
        let _ = write!(out, "\n  namespace: {ns}");
    }
    let _ = writeln!(out, "{}", s.labels);
    let _ = writeln!(
        out,
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {role_kind}\n  name: {name}\nsubjects:\n- kind: ServiceAccount\n  name: {}\n  namespace: {}",
        s.name, s.namespace
    );
}

/// The namespaced scopes in a stable order.
fn fixed_namespaces(rules: &[Rule]) -> Vec<&'static str> {
    let set: BTreeSet<&'static str> = rules
        .iter()
        .filter_map(|r| match r.scope {
            Scope::Namespace(ns) => Some(ns),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// The role of a fixed namespace, by what it is for.
fn namespace_role_suffix(ns: &str) -> String {
    if ns == LEASE_NAMESPACE { "node-leases".into() } else { ns.to_string() }
}

/// `config/rbac.yaml`: the ServiceAccount, roles and bindings of `kwok-pools run` in the
/// `kwok-pools` namespace (pool children allowed in `default`; bind more namespaces alike).
pub fn config_yaml() -> String {
    let (all, s) = (rules(), &CONFIG);
    let mut out = String::from(
        "# Generated by `kwok-pools rbac` (make rbac) from the registered kinds: do not edit.\n\
         # Least privilege for `kwok-pools run`: exactly the verbs the controllers, the simulator\n\
         # and the webhook registration use, each with why.\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kwok-pools\n  namespace: kwok-pools\n",
    );
    role(&mut out, "ClusterRole", "kwok-pools", None, &merged(&all, &Scope::Cluster), s);
    binding(&mut out, "ClusterRoleBinding", "kwok-pools", None, "ClusterRole", s);
    out.push_str("# Creating children: only in the namespaces where pools live. Bind this ClusterRole with a\n# RoleBinding in each such namespace; `default` is bound here.\n");
    role(&mut out, "ClusterRole", "kwok-pools-pool-children", None, &merged(&all, &Scope::PoolNamespaces), s);
    binding(&mut out, "RoleBinding", "kwok-pools-pool-children", Some("default"), "ClusterRole", s);
    for ns in fixed_namespaces(&all) {
        let name = format!("kwok-pools-{}", namespace_role_suffix(ns));
        role(&mut out, "Role", &name, Some(ns), &merged(&all, &Scope::Namespace(ns)), s);
        binding(&mut out, "RoleBinding", &name, Some(ns), "Role", s);
    }
    let own = merged(&all, &Scope::OperatorNamespace);
    role(&mut out, "Role", "kwok-pools-coordination", Some("kwok-pools"), &own, s);
    binding(&mut out, "RoleBinding", "kwok-pools-coordination", Some("kwok-pools"), "Role", s);
    out
}

/// The Helm chart's `templates/rbac.yaml`: the same roles, named after the release, pool
/// children allowed in `rbac.poolNamespaces` (empty: everywhere).
pub fn chart_yaml() -> String {
    let (all, s) = (rules(), &CHART);
    let mut out = String::from(
        "{{- /* Generated by `kwok-pools rbac --chart` (make rbac) from the registered kinds: do not edit. */ -}}\n\
         {{- $name := include \"kwok-pools.name\" . -}}\n\
         {{- $instance := include \"kwok-pools.instance\" . -}}\n\
         {{- $webhookName := ternary \"kwok-pools\" (printf \"kwok-pools-%s\" $instance) (eq $instance \"kwok-pools\") -}}\n\
         {{- $root := . }}\n\
         # Least privilege: the verbs the controllers, the simulator and the webhook registration\n\
         # use (the same rules as config/rbac.yaml).\n",
    );
    role(&mut out, "ClusterRole", s.name, None, &merged(&all, &Scope::Cluster), s);
    binding(&mut out, "ClusterRoleBinding", s.name, None, "ClusterRole", s);
    let children = "{{ $name }}-pool-children";
    out.push_str("# Creating children only where pools live: rbac.poolNamespaces (empty: everywhere).\n");
    role(&mut out, "ClusterRole", children, None, &merged(&all, &Scope::PoolNamespaces), s);
    out.push_str("{{- range $ns := .Values.rbac.poolNamespaces }}\n");
    binding(&mut out, "RoleBinding", children, Some("{{ $ns }}"), "ClusterRole", s);
    out.push_str("{{- else }}\n");
    binding(&mut out, "ClusterRoleBinding", children, None, "ClusterRole", s);
    out.push_str("{{- end }}\n");
    for ns in fixed_namespaces(&all) {
        let name = format!("{{{{ $name }}}}-{}", namespace_role_suffix(ns));
        role(&mut out, "Role", &name, Some(ns), &merged(&all, &Scope::Namespace(ns)), s);
        binding(&mut out, "RoleBinding", &name, Some(ns), "Role", s);
    }
    let own = merged(&all, &Scope::OperatorNamespace);
    let coordination = "{{ $name }}-coordination";
    role(&mut out, "Role", coordination, Some(s.namespace), &own, s);
    binding(&mut out, "RoleBinding", coordination, Some(s.namespace), "Role", s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_on_one_resource_are_merged_and_equal_verbs_share_a_rule() {
        let rules = vec![
            Rule::cluster("", &["pods"], &["get", "list"], "a"),
            Rule::cluster("", &["pods"], &["watch", "get"], "b"),
            Rule::cluster("", &["nodes"], &["watch", "list", "get"], "c"),
            Rule::pool_namespaces("", &["pods"], &["create"], "d"),
        ];
        let m = merged(&rules, &Scope::Cluster);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].resources, ["nodes", "pods"]);
        assert_eq!(m[0].verbs, ["get", "list", "watch"]);
        assert_eq!(m[0].why, ["c", "a", "b"]);
        assert_eq!(merged(&rules, &Scope::PoolNamespaces)[0].verbs, ["create"]);
    }

    #[test]
    fn every_kind_brings_its_pools_and_children() {
        let all = rules();
        for names in kinds::names() {
            let has = |group: &str, res: &str, verb: &str| {
                all.iter().any(|r| {
                    r.group == group && r.resources.iter().any(|x| x == res) && r.verbs.iter().any(|v| v == verb)
                })
            };
            assert!(has(GROUP, &names.plural, "watch"), "{}", names.plural);
            assert!(has(GROUP, &format!("{}/status", names.plural), "patch"));
            assert!(has(&names.child_group, &names.child_plural, "create"), "{}", names.child_plural);
            assert!(has(&names.child_group, &names.child_plural, "delete"));
        }
    }
}
