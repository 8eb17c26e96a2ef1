//! The proof that a pool kind is one directory plus one registration line (docs/adding-a-kind.md):
//! ConfigMapPool (`src/kinds/configmappool/`, feature `test-kinds`) edits nothing outside its
//! directory and the registry's line, yet it is
//! - generated: its CRD, its editor schema and its RBAC come out of the registry;
//! - judged at admission: the webhook refuses a bad pool at its field's path;
//! - fuzzed: the fuzz targets of tests/fuzz.rs run here with it among their seeds;
//! - reconciled on the real cluster: children with the core's conventions, scaled with
//!   `kubectl scale`, listed by `kubectl get pools`, refused by the live webhook, removed
//!   with the pool, and cleaned up by the harness like any kind.
//!
//! Run by `make test` (`cargo test --features test-kinds --test kind_proof`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

#[path = "fuzz.rs"]
mod fuzz;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kwok_pools::admission::review::{Judge, Peers, answer};
use kwok_pools::kinds::configmappool::ConfigMapPool;
use kwok_pools_test_support::{Operator, SCOPE_LABEL, TestNamespace, apply, client, kubectl, kubectl_ok, wait_for};
use serde_json::json;
use std::time::Duration;

const KIND: &str = "ConfigMapPool";

#[test]
fn the_registry_generates_its_crd_schema_and_rbac() {
    let names = kwok_pools::kinds::names();
    let me = names.iter().find(|n| n.kind == KIND).expect("registered");
    assert_eq!((me.plural.as_str(), me.child_plural.as_str(), me.namespaced), ("configmappools", "configmaps", true));
    let crd = kwok_pools::kinds::crds().into_iter().find(|c| c.spec.names.kind == KIND).expect("its CRD");
    assert_eq!(crd.spec.names.categories.as_deref(), Some(&["pools".to_string()][..]));
    assert!(crd.spec.versions[0].subresources.as_ref().unwrap().scale.is_some(), "kubectl scale works");
    let schemas = kwok_pools::kinds::editor_schemas();
    assert!(
        schemas.iter().any(|(name, _)| name == "pools.kwok.x-k8s.io/configmappool_v1alpha1.json"),
        "its editor schema"
    );
    let rbac = kwok_pools::deploy::rbac::config_yaml();
    assert!(rbac.contains("configmappools/status"), "its pools' status is granted");
    let rules = kwok_pools::deploy::rbac::rules();
    let granted = |resource: &str, verb: &str, scope: kwok_pools::deploy::rbac::Scope| {
        rules
            .iter()
            .any(|r| r.scope == scope && r.resources.iter().any(|x| x == resource) && r.verbs.iter().any(|v| v == verb))
    };
    assert!(granted("configmaps", "watch", kwok_pools::deploy::rbac::Scope::Cluster));
    assert!(
        granted("configmaps", "create", kwok_pools::deploy::rbac::Scope::PoolNamespaces),
        "created only where pools live"
    );
    assert!(granted("configmaps", "patch", kwok_pools::deploy::rbac::Scope::PoolNamespaces), "updated in place");
    assert!(!granted("configmaps", "create", kwok_pools::deploy::rbac::Scope::Cluster));
    // Its own lifecycle section and its own metric, from its directory alone.
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let lifecycle = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["lifecycle"]["properties"];
    assert!(lifecycle["configMaps"]["properties"]["stampAfter"].is_object(), "{lifecycle:#}");
    let metrics = kwok_pools::telemetry::metrics::Metrics::new(kwok_pools::kinds::register_metrics).encode();
    assert!(metrics.contains("# TYPE kwok_pools_configmappool_stamps counter"), "{metrics}");
}

fn review(object: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": KIND},
            "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": "configmappools"},
            "operation": "CREATE", "userInfo": {"username": "someone"}, "object": object,
        }
    }))
    .unwrap()
}

fn pool_json(name: &str, count: i32, data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": KIND,
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"configMapCount": count, "configMapTemplate": {"data": data}}})
}

#[tokio::test]
async fn admission_judges_it_by_its_own_rules() {
    let judge = Judge { peers: Peers::default(), client: None };
    let (kind, allowed, _) = answer(&review(pool_json("a", 2, json!({"k": "v"}))), &judge).await.unwrap();
    assert_eq!((kind, allowed), (KIND, true));
    let (_, allowed, r) = answer(&review(pool_json("a", 2, json!({"bad key!": "v"}))), &judge).await.unwrap();
    assert!(!allowed);
    let message = r.response.unwrap().result.message;
    assert!(message.starts_with("spec.configMapTemplate.data.bad key!:"), "{message}");
    let (_, allowed, r) = answer(&review(pool_json("a", -1, json!({}))), &judge).await.unwrap();
    assert!(!allowed && r.response.unwrap().result.message.starts_with("spec.configMapCount:"));
    // Its own knob, judged by its own rule.
    let mut knob = pool_json("a", 1, json!({}));
    knob["spec"]["lifecycle"] = json!({"configMaps": {"stampAfter": {"min": "3s", "max": "1s"}}});
    let (_, allowed, r) = answer(&review(knob), &judge).await.unwrap();
    let message = r.response.unwrap().result.message;
    assert!(!allowed && message.starts_with("spec.lifecycle.configMaps.stampAfter.min:"), "{message}");
}

fn crd_yaml() -> String {
    let crd = kwok_pools::kinds::crds().into_iter().find(|c| c.spec.names.kind == KIND).unwrap();
    serde_yaml::to_string(&crd).unwrap()
}

async fn config_maps(api: &Api<ConfigMap>, pool: &str) -> Vec<ConfigMap> {
    let lp = ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={pool}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

async fn wait_count(api: &Api<ConfigMap>, pool: &str, want: usize) -> Vec<ConfigMap> {
    wait_for(&format!("{want} ConfigMaps of {pool}"), Duration::from_secs(60), || async {
        let found = config_maps(api, pool).await;
        if found.len() == want { Ok(found) } else { Err(format!("{} of them", found.len())) }
    })
    .await
}

#[tokio::test]
async fn it_is_reconciled_scaled_refused_and_cleaned_up_on_the_real_cluster() {
    let client = client().await;
    apply(&crd_yaml());
    kubectl_ok(&["wait", "--for=condition=Established", "crd/configmappools.pools.kwok.x-k8s.io", "--timeout=30s"]);
    let ns = TestNamespace::new(&client, "kind-proof").await;
    let scope = kwok_pools_test_support::unique("kind-proof");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;

    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: {KIND}\nmetadata: {{name: settings, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  configMapCount: 3\n  configMapTemplate:\n    metadata: {{labels: {{app: settings}}}}\n    data: {{mode: fast}}\n  lifecycle: {{configMaps: {{stampAfter: {{fixed: 2s}}}}}}\n",
        ns.name
    ));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let children = wait_count(&api, "settings", 3).await;
    let pools: Api<ConfigMapPool> = Api::namespaced(client.clone(), &ns.name);
    let pool = pools.get("settings").await.unwrap();
    let mut names: Vec<String> = children.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["settings-0", "settings-1", "settings-2"], "named <pool>-<index>");
    for c in &children {
        let labels = c.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "settings", "the template's labels");
        assert!(
            labels.contains_key("pools.kwok.x-k8s.io/index")
                && labels.contains_key("pools.kwok.x-k8s.io/template-hash")
        );
        let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.controller, owner.uid.as_str()), (Some(true), pool.metadata.uid.as_deref().unwrap()));
        assert_eq!(c.data.as_ref().unwrap()["mode"], "fast");
    }

    // Its knob, found by the shared lifecycle engine, drives its own simulation and metric.
    wait_for("every ConfigMap stamped by the kind's own simulation", Duration::from_secs(60), || async {
        let stamped = config_maps(&api, "settings")
            .await
            .iter()
            .filter(|c| c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("pools.kwok.x-k8s.io/stamped")))
            .count();
        if stamped == 3 { Ok(()) } else { Err(format!("{stamped} of 3")) }
    })
    .await;
    assert!(op.metric("kwok_pools_configmappool_stamps_total").await >= 3.0, "its own metric counts them");

    kubectl_ok(&["scale", "-n", &ns.name, "configmappools.pools.kwok.x-k8s.io/settings", "--replicas", "5"]);
    wait_count(&api, "settings", 5).await;
    let listed = kubectl_ok(&["get", "pools", "-n", &ns.name]);
    assert!(listed.contains("settings"), "kubectl get pools lists it:\n{listed}");
    wait_for("the pool's status", Duration::from_secs(30), || async {
        let s = pools.get("settings").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        if s.ready_replicas == 5 { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;

    // The live webhook refuses a bad pool at its field's path.
    let bad = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: {KIND}\nmetadata: {{name: bad, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  configMapCount: 1\n  configMapTemplate:\n    data: {{'no spaces allowed': x}}\n",
        ns.name
    );
    let out = kwok_pools_test_support::kubectl_stdin(&["apply", "-f", "-"], Some(&bad));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("spec.configMapTemplate.data.no spaces allowed"), "{err}");

    // A template change updates the children in place.
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.name,
        "configmappools.pools.kwok.x-k8s.io/settings",
        "--type=merge",
        "-p",
        r#"{"spec":{"configMapTemplate":{"data":{"mode":"slow"}}}}"#,
    ]);
    wait_for("the new data on every ConfigMap", Duration::from_secs(60), || async {
        let found = config_maps(&api, "settings").await;
        let slow = found.iter().filter(|c| c.data.as_ref().is_some_and(|d| d["mode"] == "slow")).count();
        if slow == 5 { Ok(()) } else { Err(format!("{slow} of {}", found.len())) }
    })
    .await;

    // The harness's cleanup removes every kind's pools of the scope; the children follow.
    drop(op);
    wait_count(&api, "settings", 0).await;
    let left = kubectl(&["get", "configmappools", "-n", &ns.name, "-o", "name"]);
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty(), "the harness deleted the pool");
}
