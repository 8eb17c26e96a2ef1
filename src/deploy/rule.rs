//! One right the operator needs, and where it applies: the vocabulary kinds and simulators
//! state their rights in ([`super::rbac`] renders them).

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
    /// Granted only when the install asks for it: the chart value `rbac.<key>.enabled`, the
    /// kustomize component `config/components/<key in kebab case>` (`None`: always).
    pub optional: Option<&'static str>,
}

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

impl Rule {
    pub(super) fn new(scope: Scope, group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Self {
        Self {
            scope,
            group: group.into(),
            resources: strings(resources),
            verbs: strings(verbs),
            names: vec![],
            why: why.into(),
            optional: None,
        }
    }

    /// Only these objects.
    pub fn named_only(mut self, names: &[&str]) -> Self {
        self.names = strings(names);
        self
    }

    /// Granted only when the install asks for `key` (see [`Rule::optional`]).
    pub fn when(mut self, key: &'static str) -> Self {
        self.optional = Some(key);
        self
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
