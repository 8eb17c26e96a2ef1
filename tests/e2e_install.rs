//! The Helm chart in `charts/kwok-pools`: rendered with its defaults and with the other choices
//! of its values, every object passes the API server's server-side dry run; `helm install
//! --dry-run=server` works against the cluster; the rendered operator runs as the values say.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools_test_support::*;
use std::process::Command;

fn helm(args: &[&str]) -> String {
    let out = Command::new(repo().join("bin/helm"))
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("bin/helm: run `make helm`");
    assert!(out.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn dry_run(manifests: &str) {
    let out =
        kubectl_stdin(&["apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-"], Some(manifests));
    assert!(out.status.success(), "server-side dry run refused the chart: {}", String::from_utf8_lossy(&out.stderr));
}

fn docs(manifests: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

fn deployment_args(manifests: &str) -> (i64, Vec<String>) {
    let d = docs(manifests).into_iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    (d["spec"]["replicas"].as_i64().unwrap(), args)
}

#[tokio::test]
async fn the_chart_renders_and_the_api_server_accepts_it() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "helm").await;
    let chart = repo().join("charts/kwok-pools");
    let chart = chart.to_str().unwrap();
    helm(&["lint", "--strict", chart]);

    // Defaults: two replicas, leader election, a sharded simulator, a certificate made by Helm.
    let rendered = helm(&["template", "kwok-pools", chart, "--namespace", &ns.name, "--include-crds"]);
    dry_run(&rendered);
    let (replicas, args) = deployment_args(&rendered);
    assert_eq!(replicas, 2);
    for want in [
        "--instance=kwok-pools",
        "--webhook-cert-dir=/certs",
        "--leader-lease-duration=15s",
        "--shard-lease-duration=12s",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(args.contains(&format!("--webhook-service={}/kwok-pools", ns.name)), "{args:?}");
    let secret = docs(&rendered).into_iter().find(|d| d["kind"] == "Secret").expect("the webhook certificate");
    assert!(secret["data"]["ca.crt"].as_str().is_some_and(|c| !c.is_empty()));

    // The other choices: an existing Secret, no leader election, no sharding, no webhook.
    let other = helm(&[
        "template",
        "other",
        chart,
        "--namespace",
        &ns.name,
        "--set",
        "replicas=1,instance=other,webhook.certSource=secret,webhook.secretName=mine,leaderElection.enabled=false,simulator.shard.enabled=false,poolSelector=team=a",
    ]);
    dry_run(&other);
    let (replicas, args) = deployment_args(&other);
    assert_eq!(replicas, 1);
    for want in ["--instance=other", "--no-leader-elect", "--no-shard", "--pool-selector=team=a"] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(!docs(&other).iter().any(|d| d["kind"] == "Secret"), "certSource=secret makes no Secret");
    // The ClusterRole names the instance's own webhook configuration.
    let role = docs(&other).into_iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    assert!(serde_yaml::to_string(&role).unwrap().contains("kwok-pools-other"));
    let no_webhook = helm(&["template", "bare", chart, "--namespace", &ns.name, "--set", "webhook.enabled=false"]);
    dry_run(&no_webhook);
    assert!(deployment_args(&no_webhook).1.iter().any(|a| a == "--no-webhook"));

    // A bad choice is refused with what to use.
    let out = Command::new(repo().join("bin/helm"))
        .args(["template", "x", chart, "--set", "webhook.certSource=vault"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("helm or secret"));

    // Helm itself against the cluster (lookups included), without installing anything.
    helm(&["install", "dry", chart, "--namespace", &ns.name, "--dry-run=server", "--skip-crds"]);
}

#[test]
fn the_kustomize_base_is_accepted_as_a_whole() {
    let out = kubectl(&["kustomize", repo().join("config").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered = String::from_utf8(out.stdout).unwrap();
    // A dry run creates no namespace: the base's own must exist for its other objects.
    kubectl_ok(&["apply", "-f", repo().join("config/namespace.yaml").to_str().unwrap()]);
    let (replicas, args) = deployment_args(&rendered);
    assert_eq!(replicas, 2, "the Deployment in config/ runs two replicas");
    assert!(args.iter().any(|a| a == "--webhook-cert-dir=/certs"), "{args:?}");
    dry_run(&rendered);
}
