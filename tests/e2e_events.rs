//! End-to-end: Kubernetes Events on pools, as `kubectl describe` shows them — a scale-up, a
//! template roll, a name conflict and an invalid spec (the webhook is off here so the
//! reconciler meets it) — and no flood from a pool that stays in trouble.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kwok_pools_test_support::pools::{nodepool_yaml, wait_ready_nodes};
use kwok_pools_test_support::*;
use std::time::Duration;

/// The events about one NodePool: (type, reason, note).
async fn pool_events(client: &kube::Client, pool: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("regarding.kind=NodePool,regarding.name={pool}"));
    let mut out: Vec<(String, String, String)> = api
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect();
    out.sort();
    out
}

async fn wait_event(client: &kube::Client, pool: &str, type_: &str, reason: &str) -> String {
    let what = format!("a {type_} {reason} event on {pool}");
    wait_for(&what, Duration::from_secs(60), || async {
        let events = pool_events(client, pool).await;
        events
            .iter()
            .find(|(t, r, _)| t == type_ && r == reason)
            .map(|(_, _, note)| note.clone())
            .ok_or(format!("{events:?}"))
    })
    .await
}

/// Sets a label in the pool's node template.
fn label_template(pool: &str, key: &str, value: &str) {
    let patch = serde_json::json!({"spec": {"nodeTemplate": {"metadata": {"labels": {key: value}}}}}).to_string();
    kubectl_ok(&["patch", "nodepool", pool, "--type=merge", "-p", &patch]);
}

#[tokio::test]
async fn pools_get_events_for_what_happens_to_them() {
    let client = client().await;
    let scope = unique("events");
    let pool = unique("told");
    let mut op = Operator::start(&scope, &["--no-webhook"]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&pool, &scope, 2, ""));
    wait_ready_nodes(&client, &pool, 2, Duration::from_secs(60)).await;

    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=5"]);
    let note = wait_event(&client, &pool, "Normal", "ScalingUp").await;
    assert!(!note.is_empty());
    wait_ready_nodes(&client, &pool, 5, Duration::from_secs(60)).await;

    // A template change rolls the nodes.
    label_template(&pool, "rolled", "yes");
    wait_event(&client, &pool, "Normal", "RollingUpdate").await;

    // A node of the next index's name that is not the pool's: a Warning naming it.
    let foreign = format!("{pool}-5");
    apply(&format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {foreign}}}\n"));
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas=6"]);
    let note = wait_event(&client, &pool, "Warning", "NameConflict").await;
    assert!(note.contains(&foreign), "{note}");
    delete_quietly("node", &foreign);

    // An invalid spec the schema lets through (a reserved label in the template).
    label_template(&pool, "pools.kwok.x-k8s.io/index", "9");
    let note = wait_event(&client, &pool, "Warning", "InvalidSpec").await;
    assert!(note.contains("pools.kwok.x-k8s.io/index"), "{note}");

    // A pool that stays invalid does not flood: touching it again within the limit adds no
    // second InvalidSpec event.
    for i in 0..3 {
        kubectl_ok(&["annotate", "nodepool", &pool, "--overwrite", &format!("touch=t{i}")]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let invalid = pool_events(&client, &pool).await.into_iter().filter(|(_, r, _)| r == "InvalidSpec").count();
    assert_eq!(invalid, 1, "one InvalidSpec event, not one per reconcile");
}
