//! The RBAC is generated from the registry (`make manifests`): both committed copies (config/ and
//! the chart) are what the generator writes now, and the ClusterRole covers every registered
//! pool kind, so a kind added to the registry brings its rights with it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use serde_yaml::Value;

fn cluster_role_rules() -> Vec<Value> {
    role_rules("kwok-pools")
}

fn role_rules(name: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(kwok_pools_test_support::repo().join("config/rbac.yaml")).expect("config/rbac.yaml");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| Value::deserialize(doc).ok())
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
        .and_then(|d| d["rules"].as_sequence().cloned())
        .unwrap_or_else(|| panic!("a ClusterRole {name} with rules"))
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
        for verb in ["get", "list", "watch", "delete"] {
            assert!(
                granted(&rules, &kind.child_group, &kind.child_plural, verb),
                "{verb} on {} (children of {}) missing",
                kind.child_plural,
                kind.kind
            );
        }
        // Children are created only where pools live: by the role bound per namespace.
        if !kind.child_group.is_empty() || kind.child_plural != "nodes" {
            assert!(
                !granted(&rules, &kind.child_group, &kind.child_plural, "create"),
                "create on every {}",
                kind.child_plural
            );
            assert!(
                granted(&role_rules("kwok-pools-pool-children"), &kind.child_group, &kind.child_plural, "create"),
                "create on {} missing from kwok-pools-pool-children",
                kind.child_plural
            );
        }
        assert!(granted(&rules, &kind.child_group, &format!("{}/status", kind.child_plural), "patch"));
    }
    assert!(!granted(&rules, "", "secrets", "get"), "nothing on secrets");
    // Its webhook configurations are installed with it: read only, by name.
    let writes_hooks = rules.iter().any(|r| {
        r["resources"]
            .as_sequence()
            .is_some_and(|s| s.iter().any(|x| x.as_str().is_some_and(|x| x.ends_with("webhookconfigurations"))))
            && r["verbs"].as_sequence().is_some_and(|s| s.iter().any(|v| v.as_str() != Some("get")))
    });
    assert!(!writes_hooks, "no write on any webhook configuration");
    for verb in ["create", "update", "patch", "delete"] {
        for hooks in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
            assert!(!granted(&rules, "admissionregistration.k8s.io", hooks, verb), "{verb} on every {hooks}");
        }
    }
}

#[test]
fn nothing_grants_secrets_and_the_webhook_configurations_ship_with_the_operator() {
    // (The optional webhook-cert-secret component grants its own namespace's Secrets: only
    // for an install without certificate tooling, dist/install.yaml.)
    let rbac = std::fs::read_to_string(kwok_pools_test_support::repo().join("config/rbac.yaml")).unwrap();
    let docs: Vec<Value> =
        serde_yaml::Deserializer::from_str(&rbac).filter_map(|d| Value::deserialize(d).ok()).collect();
    for doc in docs.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role") {
        for rule in doc["rules"].as_sequence().unwrap() {
            let resources = rule["resources"].as_sequence().unwrap();
            assert!(
                !resources.iter().any(|r| r.as_str() == Some("secrets")),
                "{:?} grants secrets",
                doc["metadata"]["name"]
            );
        }
    }
    let kustomization =
        std::fs::read_to_string(kwok_pools_test_support::repo().join("config/kustomization.yaml")).unwrap();
    assert!(kustomization.contains("webhook.yaml") && kustomization.contains("policy.yaml"));
    // The NetworkPolicy is opt-in: its API-server range differs per cluster, and a wrong one
    // cuts the webhook off silently.
    assert!(!kustomization.contains("networkpolicy"), "not in the base");
    let policy = std::fs::read_to_string(
        kwok_pools_test_support::repo().join("config/components/networkpolicy/networkpolicy.yaml"),
    )
    .unwrap();
    assert!(policy.contains("API_SERVER_CIDR"), "a placeholder that cannot be applied by mistake");
    let policy: Value = serde_yaml::from_str(&policy).unwrap();
    let ports: Vec<i64> = policy["spec"]["ingress"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|r| r["ports"].as_sequence().unwrap().iter().map(|p| p["port"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports, vec![9443, 8080, 10250], "only the webhook, metrics and simulated kubelets' ports are open");
}

#[test]
fn the_committed_manifests_are_what_the_registry_generates() {
    for (path, generated) in kwok_pools::deploy::files() {
        let committed = std::fs::read_to_string(kwok_pools_test_support::repo().join(&path)).unwrap_or_default();
        assert!(committed == generated, "{path} is stale: run `make manifests` and commit it");
    }
}
