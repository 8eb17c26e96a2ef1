//! Fake accelerators at scale, end to end on a cluster of the test's own with the real
//! scheduler and ResourceClaim controller: `E2E_DRA_NODES` simulated nodes (100 by default)
//! with 8 devices each; a Deployment asking one device per pod through a DeviceClass with a
//! CEL selector gets exactly one pod Running per device, the next one Pending with the
//! scheduler's reason; scaling it down frees devices that a second Deployment takes, and no
//! device is ever held twice.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kwok_pools_test_support::devices::*;
use kwok_pools_test_support::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const DEVICES: u32 = 8;

fn node_count() -> u32 {
    std::env::var("E2E_DRA_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

#[tokio::test]
async fn every_simulated_device_runs_one_pod_and_no_more() {
    let cluster = OwnCluster::create(&unique("dra"), &[]);
    let client = cluster.client().await;
    let kc = cluster.kubeconfig.clone();
    let kubectl_here = |args: &[&str]| {
        let out = std::process::Command::new(kubectl_bin()).args(args).env("KUBECONFIG", &kc).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let nodes = node_count();
    let devices = nodes * DEVICES;
    let within = Duration::from_secs(120 + u64::from(devices) / 4);
    let scope = unique("gpus");
    let driver = format!("{scope}.example.com");
    let ns = unique("dra");
    cluster.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    let mut op = Operator::start_as(&scope, &[], kc.clone());
    op.wait_ready().await;

    let set = format!(
        "  devices:\n  - {{driver: {driver}, count: {DEVICES}, attributes: {{model: {{string: A100}}}}, capacity: {{memory: 80Gi}}}}\n"
    );
    cluster.apply(&pool_with(&scope, nodes, &set, 230));
    cluster.apply(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {scope}}}\nspec:\n  selectors:\n  - cel: {{expression: \"device.driver == '{driver}' && device.attributes['{driver}'].model == 'A100'\"}}\n"
    ));
    cluster.apply(&claim_template(&ns, "one-gpu", &scope, ""));
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the namespace's default ServiceAccount", Duration::from_secs(60), || async {
        accounts.get_opt("default").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string())
    })
    .await;

    // One pod more than there are devices.
    let start = Instant::now();
    cluster.apply(&claiming("first", &ns, &scope, devices + 1, "one-gpu"));
    let pods = wait_pods(&client, &ns, "first", devices as usize, 1, within).await;
    eprintln!("  {devices} pods with claims Running in {:.1} s", start.elapsed().as_secs_f64());
    wait_unschedulable(&client, &ns, "first", 1, within).await;
    let waiting = pods.iter().find(|p| phase(p) == "Pending").unwrap();
    let p: Pod = Api::namespaced(client.clone(), &ns).get(waiting.metadata.name.as_deref().unwrap()).await.unwrap();
    let why = p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
    let message = why.and_then(|c| c.message).unwrap_or_default();
    assert!(message.starts_with("0/") && message.contains("claim"), "the scheduler's reason: {message}");
    let first = held(&client, &ns, "first").await;
    assert_eq!(first.iter().collect::<HashSet<_>>().len(), devices as usize, "every device once");

    // Half of them freed; a second Deployment takes exactly those.
    let half = devices / 2;
    kubectl_here(&["scale", "deployment", "first", "-n", &ns, "--replicas", &half.to_string()]);
    wait_pods(&client, &ns, "first", half as usize, 0, within).await;
    cluster.apply(&claiming("second", &ns, &scope, half + 1, "one-gpu"));
    wait_pods(&client, &ns, "second", half as usize, 1, within).await;
    wait_unschedulable(&client, &ns, "second", 1, within).await;
    let mut all = held(&client, &ns, "first").await;
    all.extend(held(&client, &ns, "second").await);
    assert_eq!(all.len(), devices as usize);
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), devices as usize, "no device held twice");
}
