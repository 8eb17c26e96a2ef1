//! The ClusterRole in config/rbac.yaml covers every registered pool kind: a kind added to the
//! registry without its RBAC fails here, before any cluster refuses the operator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use serde_yaml::Value;

fn cluster_role_rules() -> Vec<Value> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/rbac.yaml")).expect("config/rbac.yaml");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| Value::deserialize(doc).ok())
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "kwok-pools")
        .and_then(|d| d["rules"].as_sequence().cloned())
        .expect("a ClusterRole kwok-pools with rules")
}

use serde::Deserialize;

/// Whether some rule grants `verb` on `resource` in `group` (to every name).
fn granted(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
    let has = |v: &Value, what: &str| v.as_sequence().is_some_and(|s| s.iter().any(|x| x.as_str() == Some(what)));
    rules.iter().any(|r| {
        has(&r["apiGroups"], group)
            && has(&r["resources"], resource)
            && has(&r["verbs"], verb)
            && r["resourceNames"].is_null()
    })
}

#[test]
fn every_registered_kind_and_its_children_are_granted() {
    let rules = cluster_role_rules();
    let group = kwok_pools::api::common::GROUP;
    for kind in kwok_pools::kinds::names() {
        for verb in ["get", "list", "watch"] {
            assert!(granted(&rules, group, &kind.plural, verb), "{verb} on {} missing", kind.plural);
        }
        assert!(granted(&rules, group, &format!("{}/status", kind.plural), "patch"), "{}/status", kind.plural);
        for verb in ["get", "list", "watch", "create", "delete"] {
            assert!(
                granted(&rules, &kind.child_group, &kind.child_plural, verb),
                "{verb} on {} (children of {}) missing",
                kind.child_plural,
                kind.kind
            );
        }
        assert!(granted(&rules, &kind.child_group, &format!("{}/status", kind.child_plural), "patch"));
    }
    assert!(!granted(&rules, "", "secrets", "get"), "nothing on secrets");
}
