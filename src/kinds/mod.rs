//! The registry of pool kinds: one directory per kind, and **the** one list every layer
//! iterates — admission dispatch and webhook rules, the operator's watches, controllers and
//! simulators, the kinds' flags, CRD and editor-schema generation, RBAC generation, fuzzing
//! and the test harness's cleanup. Adding a kind is its own directory plus one line in
//! [`kinds!`] (see docs/adding-a-kind.md).

use crate::pool::{PoolKind, Simulate};
use crate::telemetry::metrics::KindSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Declares each kind's directory and registers it, in a stable order.
macro_rules! kinds {
    ($($(#[$attr:meta])* $module:ident :: $kind:ident),* $(,)?) => {
        $($(#[$attr])* pub mod $module;)*

        /// Calls `visitor` with every pool kind, in a stable order. **The** registration list.
        pub fn visit_all(visitor: &mut impl Visitor) {
            $($(#[$attr])* visitor.visit::<$module::$kind>();)*
        }
    };
}

kinds! {
    nodepool::NodePool,
    podpool::PodPool,
    vmipool::VMIPool,
    // The proof of docs/adding-a-kind.md: a kind that exists only in the tests' build.
    #[cfg(feature = "test-kinds")] configmappool::ConfigMapPool,
}

/// Second views of registered kinds' pools whose children are of another kind (a VMIPool
/// that keeps VirtualMachines): their controllers are wired beside the kinds'; the rest (CRD,
/// admission, flags, RBAC, simulators) is the registered kind's.
pub fn visit_views(visitor: &mut impl Visitor) {
    visitor.visit::<vmipool::VmPool>();
}

/// Evictions of VMIs' launcher pods, judged as KubeVirt's webhook does (the admission room
/// reaches a kind only through the registry).
pub use vmipool::eviction;

/// What a registered kind is: a pool kind on the core, with its simulator (empty when its
/// children need none).
pub trait Kind: PoolKind + Simulate {}
impl<K: PoolKind + Simulate> Kind for K {}

/// Something done once per kind, with the kind as a type.
pub trait Visitor {
    fn visit<K: Kind>(&mut self);
}

/// Registers every kind's own metrics (what `Metrics::new` is given).
pub fn register_metrics(set: &mut KindSet<'_>) {
    struct Register<'a, 'b>(&'a mut KindSet<'b>);
    impl Visitor for Register<'_, '_> {
        fn visit<K: Kind>(&mut self) {
            self.0.add::<K::Metrics>();
        }
    }
    visit_all(&mut Register(set));
}

/// The kind's name as a `'static` string (a fixed set: safe as a metric label).
pub fn kind_name<P: PoolKind>() -> &'static str {
    match P::kind(&()) {
        Cow::Borrowed(k) => k,
        Cow::Owned(_) => "other",
    }
}

/// What one kind is called: kind, plural resource, child resource (`nodes`, `pods`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub kind: &'static str,
    pub plural: String,
    pub child_group: String,
    pub child_plural: String,
    pub namespaced: bool,
    /// Objects of other kinds its pools create when their spec asks.
    pub also: &'static [crate::pool::AlsoCreates],
}

/// The names of every kind.
pub fn names() -> Vec<Names> {
    struct Collect(Vec<Names>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            self.0.push(Names {
                kind: kind_name::<K>(),
                plural: K::plural(&()).into_owned(),
                child_group: <K::Child as kube::Resource>::group(&()).into_owned(),
                child_plural: <K::Child as kube::Resource>::plural(&()).into_owned(),
                namespaced: K::crd().spec.scope == "Namespaced",
                also: K::ALSO_CREATES,
            });
        }
    }
    let mut c = Collect(Vec::new());
    visit_all(&mut c);
    c.0
}

/// Every CRD of the project, in a stable order: the pool kinds', then the lifecycle policy's.
pub fn crds() -> Vec<CustomResourceDefinition> {
    struct Collect(Vec<CustomResourceDefinition>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            self.0.push(K::crd());
        }
    }
    let mut c = Collect(Vec::new());
    visit_all(&mut c);
    c.0.push(crate::policy::crd());
    c.0
}

/// Stand-ins for the CRDs of children another project defines (KubeVirt's VMI), for clusters
/// without that project.
pub fn stand_in_crds() -> Vec<CustomResourceDefinition> {
    struct Collect(Vec<CustomResourceDefinition>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            if let Some(c) = K::CHILD_CRD {
                self.0.push((c.stand_in)());
                self.0.extend((c.companions)());
            }
        }
    }
    let mut c = Collect(Vec::new());
    visit_all(&mut c);
    c.0
}

/// Every CRD as one multi-document YAML stream (what `kwok-pools crd` prints).
pub fn crds_yaml() -> String {
    crds().iter().filter_map(|crd| serde_yaml::to_string(crd).ok()).collect::<Vec<_>>().join("---\n")
}

/// The editor schema of every kind: (file name, JSON text).
pub fn editor_schemas() -> Vec<(String, String)> {
    crate::api::editor_schema::all(&crds())
}

/// The example pool of every kind, as JSON (the fuzzers' seeds).
pub fn examples() -> Vec<serde_json::Value> {
    struct Collect(Vec<serde_json::Value>);
    impl Visitor for Collect {
        fn visit<K: Kind>(&mut self) {
            if let Ok(v) = serde_json::to_value(K::example()) {
                self.0.push(v);
            }
        }
    }
    let mut c = Collect(Vec::new());
    visit_all(&mut c);
    c.0
}

/// Every kind's own flags, parsed: what `run` and `simulate` hand each kind.
#[derive(Clone, Default)]
pub struct KindFlags(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl std::fmt::Debug for KindFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KindFlags({} kinds)", self.0.len())
    }
}

impl KindFlags {
    /// The flags of kind `K`: as parsed, else their defaults.
    pub fn get<K: Kind>(&self) -> K::Flags {
        if let Some(flags) = self.0.get(&TypeId::of::<K>()).and_then(|f| f.downcast_ref::<K::Flags>()) {
            return flags.clone();
        }
        let cmd = <K::Flags as clap::Args>::augment_args(clap::Command::new("defaults"));
        let matches = cmd.try_get_matches_from(["defaults"]);
        match matches.map(|m| <K::Flags as clap::FromArgMatches>::from_arg_matches(&m)) {
            Ok(Ok(flags)) => flags,
            // Every kind's flags have defaults (a test keeps it so): nothing to parse cannot fail.
            _ => unreachable!("the flags of {} have no defaults", K::kind(&())),
        }
    }

    /// Sets the flags of kind `K` (tests, benchmarks).
    pub fn set<K: Kind>(&mut self, flags: K::Flags) {
        self.0.insert(TypeId::of::<K>(), Arc::new(flags));
    }

    /// Every kind's flags from `matches` of a command built by [`add_flags`].
    pub fn from_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        struct Parse<'a>(&'a clap::ArgMatches, KindFlags, Option<clap::Error>);
        impl Visitor for Parse<'_> {
            fn visit<K: Kind>(&mut self) {
                match <K::Flags as clap::FromArgMatches>::from_arg_matches(self.0) {
                    Ok(f) => self.1.set::<K>(f),
                    Err(e) => self.2 = self.2.take().or(Some(e)),
                }
            }
        }
        let mut p = Parse(matches, KindFlags::default(), None);
        visit_all(&mut p);
        match p.2 {
            Some(e) => Err(e),
            None => Ok(p.1),
        }
    }
}

/// `cmd` with every kind's flags added (the `run` and `simulate` commands); kinds that share
/// a flags type share its flags.
pub fn add_flags(cmd: clap::Command) -> clap::Command {
    struct Add(Option<clap::Command>, std::collections::HashSet<TypeId>);
    impl Visitor for Add {
        fn visit<K: Kind>(&mut self) {
            if self.1.insert(TypeId::of::<K::Flags>()) {
                self.0 = self.0.take().map(<K::Flags as clap::Args>::augment_args);
            }
        }
    }
    let mut a = Add(Some(cmd), std::collections::HashSet::new());
    visit_all(&mut a);
    a.0.unwrap_or_else(|| unreachable!("the command is put back after each kind"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_with_its_names() {
        let names = names();
        let kinds: Vec<&str> = names.iter().map(|n| n.kind).collect();
        assert_eq!(kinds[..3], ["NodePool", "PodPool", "VMIPool"]);
        assert_eq!(
            (names[0].plural.as_str(), names[0].child_plural.as_str(), names[0].namespaced),
            ("nodepools", "nodes", false)
        );
        assert_eq!(
            (names[1].plural.as_str(), names[1].child_plural.as_str(), names[1].namespaced),
            ("podpools", "pods", true)
        );
        let vmi = (names[2].plural.as_str(), names[2].child_group.as_str(), names[2].child_plural.as_str());
        assert_eq!(vmi, ("vmipools", "kubevirt.io", "virtualmachineinstances"));
        assert_eq!(crds().len(), names.len() + 1, "the pool kinds' and the lifecycle policy's");
        assert!(crds_yaml().contains("name: podpools.pools.kwok.x-k8s.io"));
    }

    #[test]
    fn every_kind_has_a_valid_example_and_flags_with_defaults() {
        struct Check(Vec<String>);
        impl Visitor for Check {
            fn visit<K: Kind>(&mut self) {
                let example = K::example();
                let problems = example.problems(None, &[]);
                if !problems.is_empty() {
                    self.0.push(format!("{}: {problems:?}", K::kind(&())));
                }
                let _ = KindFlags::default().get::<K>();
                let _ = crate::pool::child(&example, 0, &example.template_hash(), &K::validation_env())
                    .map_err(|p| self.0.push(format!("{}: {}", K::kind(&()), p.message)));
            }
        }
        let mut c = Check(Vec::new());
        visit_all(&mut c);
        assert_eq!(c.0, Vec::<String>::new());
    }

    #[test]
    fn the_kinds_flags_are_parsed_from_one_command() {
        let cmd = add_flags(clap::Command::new("run"));
        let m = cmd.try_get_matches_from(["run", "--kubevirt-role", "handler"]).unwrap();
        let flags = KindFlags::from_matches(&m).unwrap();
        assert_eq!(flags.get::<vmipool::VMIPool>().kubevirt_role, "handler");
        let bad = add_flags(clap::Command::new("run")).try_get_matches_from(["run", "--kubevirt-role", "everything"]);
        assert!(bad.is_err(), "a bad flag is refused with a message");
    }
}

#[cfg(test)]
mod editor_schema_tests {
    use crate::api::editor_schema::{all, schemas};
    use serde_json::json;

    #[test]
    fn short_names_collide_with_no_other_project() {
        // Karpenter and run:ai's operator also define NodePool; `np`, `pp` and `vmi*` are taken
        // (KubeVirt's `vmi`, `vmis`). Ours carry a `k` for kwok.
        let taken = ["np", "nodepool", "pp", "vmi", "vmis", "vmip", "no", "po", "pod"];
        for crd in super::crds() {
            for short in crd.spec.names.short_names.clone().unwrap_or_default() {
                assert!(short.starts_with('k') && !taken.contains(&short.as_str()), "{short}");
            }
        }
    }

    #[test]
    fn one_schema_per_kind_with_the_expected_names() {
        use kube::CustomResourceExt;
        let crds = [super::nodepool::NodePool::crd(), super::podpool::PodPool::crd()];
        let names: Vec<String> = all(&crds).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            vec!["pools.kwok.x-k8s.io/nodepool_v1alpha1.json", "pools.kwok.x-k8s.io/podpool_v1alpha1.json"]
        );
    }

    #[test]
    fn openapi_only_keywords_are_translated() {
        let (_, s) = schemas(&<super::nodepool::NodePool as kube::CustomResourceExt>::crd()).remove(0);
        let text = s.to_string();
        assert!(!text.contains("nullable") && !text.contains("x-kubernetes-"), "OpenAPI-only keywords left");
        let spec = &s["properties"]["spec"];
        assert_eq!(spec["additionalProperties"], json!(false));
        assert_eq!(spec["properties"]["nodeTemplate"]["properties"]["apiVersion"]["type"], json!(["string", "null"]));
        let cpu = &spec["properties"]["nodeTemplate"]["properties"]["status"]["properties"]["capacity"]["additionalProperties"];
        assert!(cpu["anyOf"].is_array() && cpu.get("type").is_none());
        assert_eq!(s["properties"]["kind"]["enum"], json!(["NodePool"]));
    }
}
