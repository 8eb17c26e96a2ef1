//! The operator's RBAC, generated from the registry: every kind brings the rights on its pools
//! and children (from its [`PoolKind`]) and its simulator's ([`Simulate::simulator_rules`]);
//! the simulated kubelet ([`crate::kubelet::rules`]) and the rest of the process add their own (events, leases, reading its webhook configurations,
//! asking who may create what). Rights only some installs need are *optional*: rendered apart
//! (a kustomize component, a chart value) and bound only when asked for. One model, rendered
//! twice — `config/` (kustomize) and the Helm chart — so the two never drift
//! (`make manifests`; a test compares). Beside them, aggregated `view`/`edit` roles give
//! people the pools as the built-in roles give them workloads.
//!
//! [`PoolKind`]: crate::pool::PoolKind
//! [`Simulate::simulator_rules`]: crate::pool::Simulate::simulator_rules

use super::rule::strings;
pub use super::rule::{Rule, Scope};
use super::{CHART, CONFIG, Spelling};
use crate::api::common::GROUP;
use crate::informer::shared::LEASE_NAMESPACE;
use crate::kinds::{self, Kind, Visitor};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The rights on kind `K`'s pools and children.
fn kind_rules<K: Kind>() -> Vec<Rule> {
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

/// The optional bundle that lets the operator write its own webhook configurations: only for
/// `kwok-pools run` outside a cluster (an install ships them, with the CA, and the operator
/// only reads them).
pub const WEBHOOK_REGISTRATION: &str = "webhookRegistration";

/// The optional bundle for an install that has no certificate tooling (dist/install.yaml, the
/// chart's `webhook.certSource=operator`): the operator keeps the webhook's certificate in a
/// Secret of its namespace and gives its own webhook configurations that certificate's CA.
pub const WEBHOOK_CERT_SECRET: &str = "webhookCertSecret";

/// The rights of the operator process itself, whatever kinds it runs.
fn process_rules() -> Vec<Rule> {
    vec![
        Rule::cluster("events.k8s.io", &["events"], &["create", "patch"], "events on pools (scaled, rolled, problems)"),
        Rule::named(
            "admissionregistration.k8s.io",
            &["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            &["get"],
            &[WEBHOOK_NAME],
            "its own webhook configurations, by name, read only: it checks that they point at it and trust its CA",
        ),
        Rule::cluster(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
            "at admission, whether the person creating a pool may create its children (a pool creates them on their behalf); in the simulated kubelets' API, whether a caller may use a node's subresource",
        ),
        Rule::named(
            "admissionregistration.k8s.io",
            &["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            &["get", "patch"],
            &[WEBHOOK_NAME],
            "writing its own webhook configurations (endpoint and caBundle) when it runs outside the cluster",
        )
        .when(WEBHOOK_REGISTRATION),
        Rule::named(
            "admissionregistration.k8s.io",
            &["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            &["get", "patch"],
            &[POOL_CREATORS],
            "writing the policy that checks a pool's creator may create its children (shipped in policy.yaml; no create: install it first)",
        )
        .when(WEBHOOK_REGISTRATION),
        Rule::operator_namespace(
            "",
            &["secrets"],
            &["get", "update"],
            "the webhook's certificate and its CA, kept in one Secret of its own namespace, by name (--webhook-cert-secret; the install ships it empty, the operator fills it: no create)",
        )
        .named_only(&[CERT_SECRET])
        .when(WEBHOOK_CERT_SECRET),
        Rule::named(
            "admissionregistration.k8s.io",
            &["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            &["patch"],
            &[WEBHOOK_NAME],
            "giving its own webhook configurations the CA of the certificate it keeps (--webhook-cert-secret); the policy <name>-webhook-ca-only lets it change nothing else there",
        )
        .when(WEBHOOK_CERT_SECRET),
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
/// Placeholder for the install's name (the roles' prefix), replaced when rendered.
const NAME: &str = "<name>";
/// The Secret the operator keeps the webhook's certificate in ([`super::dist::CERT_SECRET`]
/// in dist/install.yaml).
const CERT_SECRET: &str = "<name>-webhook-tls";
/// The pool creators' policy and binding ([`crate::admission::creators::policy_name`]).
const POOL_CREATORS: &str = "<webhook>-pool-creators";

/// Every rule of the operator: the process's, its simulated kubelet's and every registered
/// kind's.
pub fn rules() -> Vec<Rule> {
    struct Collect(Vec<Rule>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            self.0.extend(kind_rules::<K>());
        }
    }
    let mut c = Collect(process_rules());
    c.0.extend(crate::kubelet::rules());
    c.0.extend(crate::storage::rules());
    c.0.extend(crate::policy::rules());
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

/// The rules of one scope and bundle, merged (stable order: by group, then names, then
/// resources).
fn merged(rules: &[Rule], scope: &Scope, optional: Option<&str>) -> Vec<Merged> {
    // (group, names, resource) → (verbs, reasons)
    type Key = (String, Vec<String>, String);
    let mut per: BTreeMap<Key, (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    for r in rules.iter().filter(|r| &r.scope == scope && r.optional == optional) {
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

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| if i.is_empty() { "\"\"".to_string() } else { i.clone() }).collect();
    format!("[{}]", quoted.join(", "))
}

fn render_rules(out: &mut String, rules: &[Merged], s: &Spelling) {
    out.push_str("rules:\n");
    for m in rules {
        for why in &m.why {
            let _ = writeln!(out, "# {}", why.replace(NAME, s.name));
        }
        let _ = writeln!(out, "- apiGroups: {}", list(std::slice::from_ref(&m.group)));
        let _ = writeln!(out, "  resources: {}", list(&m.resources));
        if !m.names.is_empty() {
            let names: Vec<String> =
                m.names.iter().map(|n| n.replace(WEBHOOK_NAME, s.webhook).replace(NAME, s.name)).collect();
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

/// The namespaced scopes of one bundle, in a stable order.
fn fixed_namespaces(rules: &[Rule], optional: Option<&str>) -> Vec<&'static str> {
    let set: BTreeSet<&'static str> = rules
        .iter()
        .filter(|r| r.optional == optional)
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

/// The optional bundles, in a stable order.
pub fn optional_bundles() -> Vec<&'static str> {
    let set: BTreeSet<&'static str> = rules().iter().filter_map(|r| r.optional).collect();
    set.into_iter().collect()
}

/// `fooBar` → `foo-bar` (a bundle's kustomize component directory).
pub fn kebab(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every role and binding of one bundle (`None`: the core), spelled for a target. A namespace
/// of an optional bundle is the chart value `rbac.<key>.namespace` in the chart.
fn roles(out: &mut String, all: &[Rule], optional: Option<&str>, s: &Spelling) {
    let suffix = optional.map(|k| format!("-{}", kebab(k))).unwrap_or_default();
    let cluster = merged(all, &Scope::Cluster, optional);
    if !cluster.is_empty() {
        let name = format!("{}{suffix}", s.name);
        role(out, "ClusterRole", &name, None, &cluster, s);
        binding(out, "ClusterRoleBinding", &name, None, "ClusterRole", s);
    }
    let children = merged(all, &Scope::PoolNamespaces, optional);
    if !children.is_empty() {
        let name = format!("{}-pool-children{suffix}", s.name);
        out.push_str("# Creating children: only in the namespaces where pools live.\n");
        role(out, "ClusterRole", &name, None, &children, s);
        match s.pool_namespaces {
            Some((open, each, close)) => {
                out.push_str(open);
                binding(out, "RoleBinding", &name, Some(each), "ClusterRole", s);
                out.push_str("{{- else }}\n");
                binding(out, "ClusterRoleBinding", &name, None, "ClusterRole", s);
                out.push_str(close);
            }
            None => {
                out.push_str("# Bind it with a RoleBinding in each such namespace; `default` is bound here.\n");
                binding(out, "RoleBinding", &name, Some("default"), "ClusterRole", s);
            }
        }
    }
    for ns in fixed_namespaces(all, optional) {
        let name = format!("{}-{}", s.name, namespace_role_suffix(ns));
        let spelled = match (optional, s.values) {
            (Some(key), true) => format!("{{{{ .Values.rbac.{key}.namespace | default \"{ns}\" }}}}"),
            _ => ns.to_string(),
        };
        role(out, "Role", &name, Some(&spelled), &merged(all, &Scope::Namespace(ns), optional), s);
        binding(out, "RoleBinding", &name, Some(&spelled), "Role", s);
    }
    let own = merged(all, &Scope::OperatorNamespace, optional);
    if !own.is_empty() {
        let name = format!("{}-coordination{suffix}", s.name);
        role(out, "Role", &name, Some(s.namespace), &own, s);
        binding(out, "RoleBinding", &name, Some(s.namespace), "Role", s);
    }
}

/// The roles that give people the pools: `view` (read, every kind) and `edit`/`admin` (write,
/// scale) for the namespaced kinds, as Kubernetes' built-in roles give them Deployments. The
/// cluster-scoped kinds (NodePool) are not aggregated into `edit`: a cluster-wide `edit`
/// binding would let its holder delete every NodePool (and with it every simulated node). They
/// get a role of their own, `<name>-cluster-pools-edit`, bound by an administrator to whoever
/// should run them.
fn people_roles(out: &mut String, s: &Spelling) {
    let all = kinds::names();
    let plurals = |namespaced: Option<bool>| -> Vec<String> {
        all.iter().filter(|n| namespaced.is_none_or(|ns| n.namespaced == ns)).map(|n| n.plural.clone()).collect()
    };
    let with = |plurals: &[String], suffix: &str| plurals.iter().map(|p| format!("{p}{suffix}")).collect::<Vec<_>>();
    let every = plurals(None);
    let policies = vec![POLICIES.to_string()];
    let view = vec![Merged {
        group: GROUP.into(),
        resources: [
            every.clone(),
            with(&every, "/status"),
            with(&every, "/scale"),
            policies.clone(),
            with(&policies, "/status"),
        ]
        .concat(),
        verbs: strings(&["get", "list", "watch"]),
        names: vec![],
        why: vec!["the pools, for everyone who may view workloads (aggregated into view)".into()],
    }];
    let write = |plurals: &[String], why: &str| {
        vec![Merged {
            group: GROUP.into(),
            resources: [plurals.to_vec(), with(plurals, "/scale")].concat(),
            verbs: strings(&["create", "update", "patch", "delete", "deletecollection"]),
            names: vec![],
            why: vec![why.into()],
        }]
    };
    let labelled = |aggregate: &[&str]| -> Spelling {
        let mut labels = String::from(s.labels);
        if labels.is_empty() && !aggregate.is_empty() {
            labels.push_str("\n  labels:");
        }
        for to in aggregate {
            let _ = write!(labels, "\n    rbac.authorization.k8s.io/aggregate-to-{to}: \"true\"");
        }
        Spelling { labels: Box::leak(labels.into_boxed_str()), ..*s }
    };
    out.push_str("# People: the pools in the built-in view role, the namespaced ones in edit and admin.\n");
    role(out, "ClusterRole", &format!("{}-pools-view", s.name), None, &view, &labelled(&["view"]));
    let namespaced = plurals(Some(true));
    if !namespaced.is_empty() {
        let why = "the namespaced pools, for everyone who may edit workloads (aggregated into edit and admin)";
        role(
            out,
            "ClusterRole",
            &format!("{}-pools-edit", s.name),
            None,
            &write(&namespaced, why),
            &labelled(&["edit", "admin"]),
        );
    }
    let cluster = plurals(Some(false));
    if !cluster.is_empty() {
        out.push_str(
            "# The cluster-scoped pools are not in edit (a cluster-wide edit binding would delete every\n\
             # simulated node with them): bind this role to whoever runs them.\n",
        );
        let why = "the cluster-scoped pools: bound by an administrator, never aggregated";
        role(
            out,
            "ClusterRole",
            &format!("{}-cluster-pools-edit", s.name),
            None,
            &write(&cluster, why),
            &labelled(&[]),
        );
    }
    // Lifecycle policies act on pods in every namespace: an administrator's, never in edit.
    let why =
        "lifecycle policies (they act on pods and nodes cluster-wide): bound by an administrator, never aggregated";
    let mut edit_policies = write(&policies, why);
    edit_policies[0].resources = policies;
    role(out, "ClusterRole", &format!("{}-policies-edit", s.name), None, &edit_policies, &labelled(&[]));
}

/// The lifecycle policies' resource.
const POLICIES: &str = "lifecyclepolicies";

/// `config/rbac.yaml`: the ServiceAccount, roles and bindings of `kwok-pools run` in the
/// `kwok-pools` namespace (pool children allowed in `default`; bind more namespaces alike),
/// and the people's aggregated roles.
pub fn config_yaml() -> String {
    let (all, s) = (rules(), &CONFIG);
    let mut out = String::from(
        "# Generated by `kwok-pools generate` (make manifests) from the registered kinds: do not edit.\n\
         # Least privilege for `kwok-pools run`: exactly the verbs the controllers, the simulator\n\
         # and the webhook use, each with why. Optional rights are components (config/components/).\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kwok-pools\n  namespace: kwok-pools\n",
    );
    roles(&mut out, &all, None, s);
    people_roles(&mut out, s);
    out
}

/// The RBAC of an optional bundle, for its kustomize component.
pub fn config_optional_yaml(key: &str) -> String {
    let all = rules();
    let mut out = format!(
        "# Generated by `kwok-pools generate` (make manifests) from the registered kinds: do not edit.\n\
         # Optional rights ({key}): only for installs that ask for them (see kustomization.yaml here).\n"
    );
    roles(&mut out, &all, Some(key), &CONFIG);
    out.trim_start_matches("---\n").to_string()
}

/// The Helm chart's `templates/rbac.yaml`: the same roles, named after the release, pool
/// children allowed in `rbac.poolNamespaces` (empty: everywhere), optional bundles behind
/// `rbac.<key>.enabled`.
pub fn chart_yaml() -> String {
    let (all, s) = (rules(), &CHART);
    let mut out = String::from(
        "{{- /* Generated by `kwok-pools generate` (make manifests) from the registered kinds: do not edit. */ -}}\n\
         {{- $name := include \"kwok-pools.name\" . -}}\n\
         {{- $instance := include \"kwok-pools.instance\" . -}}\n\
         {{- $webhookName := ternary \"kwok-pools\" (printf \"kwok-pools-%s\" $instance) (eq $instance \"kwok-pools\") -}}\n\
         {{- $root := . }}\n\
         # Least privilege: the verbs the controllers, the simulator and the webhook use (the\n\
         # same rules as config/rbac.yaml).\n",
    );
    roles(&mut out, &all, None, s);
    for key in optional_bundles() {
        let _ = writeln!(out, "{{{{- if (.Values.rbac.{key}).enabled }}}}");
        roles(&mut out, &all, Some(key), s);
        out.push_str("{{- end }}\n");
    }
    people_roles(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_bundle_names_the_pool_creators_policy_and_creates_nothing() {
        assert_eq!(POOL_CREATORS.replace(WEBHOOK_NAME, "team-a"), crate::admission::creators::policy_name("team-a"));
        let registration: Vec<Rule> =
            process_rules().into_iter().filter(|r| r.optional == Some(WEBHOOK_REGISTRATION)).collect();
        assert!(!registration.is_empty());
        for r in &registration {
            assert!(!r.verbs.iter().any(|v| v == "create"), "create cannot be limited by name: {r:?}");
            assert!(!r.names.is_empty(), "every registration right is by name: {r:?}");
        }
    }

    #[test]
    fn cluster_scoped_pools_are_kept_out_of_edit_and_get_a_role_of_their_own() {
        let mut out = String::new();
        people_roles(&mut out, &CONFIG);
        let docs: Vec<&str> = out.split("---\n").collect();
        let find = |name: &str| {
            *docs.iter().find(|d| d.contains(&format!("name: {name}\n"))).unwrap_or_else(|| panic!("{name}:\n{out}"))
        };
        let edit = find("kwok-pools-pools-edit");
        let own = find("kwok-pools-cluster-pools-edit");
        for n in kinds::names() {
            let listed = |doc: &str| {
                doc.lines()
                    .filter_map(|l| l.trim().strip_prefix("resources: ["))
                    .any(|items| items.trim_end_matches(']').split(", ").any(|r| r == n.plural))
            };
            if n.namespaced {
                assert!(listed(edit), "{} belongs in edit:\n{edit}", n.plural);
            } else {
                assert!(!edit.contains(&n.plural), "{} must not be aggregated into edit:\n{edit}", n.plural);
                assert!(listed(own), "{} in its own role:\n{own}", n.plural);
            }
        }
        assert!(edit.contains("aggregate-to-edit: \"true\""));
        assert!(!own.contains("aggregate-to"), "{own}");
        assert!(find("kwok-pools-pools-view").contains("nodepools"), "everyone who may view may see NodePools");
    }

    #[test]
    fn the_webhook_bundles_name_every_object_and_create_nothing() {
        assert_eq!(CERT_SECRET.replace(NAME, CONFIG.name), super::super::dist::CERT_SECRET);
        for bundle in [WEBHOOK_REGISTRATION, WEBHOOK_CERT_SECRET] {
            let rules: Vec<Rule> = process_rules().into_iter().filter(|r| r.optional == Some(bundle)).collect();
            assert!(!rules.is_empty(), "{bundle}");
            for r in &rules {
                assert!(!r.verbs.iter().any(|v| v == "create"), "create cannot be limited by name: {r:?}");
                assert!(!r.names.is_empty(), "every right of {bundle} is by name: {r:?}");
            }
        }
        let text = config_optional_yaml(WEBHOOK_CERT_SECRET);
        assert!(text.contains("resourceNames: [kwok-pools-webhook-tls]"), "{text}");
        assert!(text.contains("verbs: [get, update]"), "{text}");
    }

    #[test]
    fn rights_on_one_resource_are_merged_and_equal_verbs_share_a_rule() {
        let rules = vec![
            Rule::cluster("", &["pods"], &["get", "list"], "a"),
            Rule::cluster("", &["pods"], &["watch", "get"], "b"),
            Rule::cluster("", &["nodes"], &["watch", "list", "get"], "c"),
            Rule::pool_namespaces("", &["pods"], &["create"], "d"),
        ];
        let m = merged(&rules, &Scope::Cluster, None);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].resources, ["nodes", "pods"]);
        assert_eq!(m[0].verbs, ["get", "list", "watch"]);
        assert_eq!(m[0].why, ["c", "a", "b"]);
        assert_eq!(merged(&rules, &Scope::PoolNamespaces, None)[0].verbs, ["create"]);
        let optional = vec![Rule::cluster("", &["secrets"], &["get"], "x").when("extra")];
        assert!(merged(&optional, &Scope::Cluster, None).is_empty(), "an optional right stays out of the core");
        assert_eq!(merged(&optional, &Scope::Cluster, Some("extra")).len(), 1);
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
