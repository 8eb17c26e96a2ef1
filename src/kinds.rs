//! The registry of pool kinds: the one list every layer iterates — admission dispatch and
//! webhook rules, the operator's watches and controllers, CRD and editor-schema generation,
//! RBAC checks and the test harness's cleanup. Adding a kind is its own files plus one line
//! in [`visit_all`] (see docs/adding-a-kind.md).

use crate::api::{NodePool, PodPool, VMIPool};
use crate::pool::PoolKind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::borrow::Cow;

/// Something done once per kind, with the kind as a type.
pub trait Visitor {
    fn visit<P: PoolKind>(&mut self);
}

/// Calls `visitor` with every pool kind, in a stable order. **The** registration list.
pub fn visit_all(visitor: &mut impl Visitor) {
    visitor.visit::<NodePool>();
    visitor.visit::<PodPool>();
    visitor.visit::<VMIPool>();
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
}

/// The names of every kind.
pub fn names() -> Vec<Names> {
    struct Collect(Vec<Names>);
    impl Visitor for Collect {
        fn visit<P: PoolKind>(&mut self) {
            self.0.push(Names {
                kind: kind_name::<P>(),
                plural: P::plural(&()).into_owned(),
                child_group: <P::Child as kube::Resource>::group(&()).into_owned(),
                child_plural: <P::Child as kube::Resource>::plural(&()).into_owned(),
                namespaced: P::crd().spec.scope == "Namespaced",
            });
        }
    }
    let mut c = Collect(Vec::new());
    visit_all(&mut c);
    c.0
}

/// Every CRD of the project, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    struct Collect(Vec<CustomResourceDefinition>);
    impl Visitor for Collect {
        fn visit<P: PoolKind>(&mut self) {
            self.0.push(P::crd());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_with_its_names() {
        let names = names();
        let kinds: Vec<&str> = names.iter().map(|n| n.kind).collect();
        assert_eq!(kinds, ["NodePool", "PodPool", "VMIPool"]);
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
        assert_eq!(crds().len(), names.len());
        assert!(crds_yaml().contains("name: podpools.pools.kwok.x-k8s.io"));
    }
}
