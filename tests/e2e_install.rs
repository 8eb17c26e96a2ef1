//! The Helm chart in `charts/kwok-pools`: rendered with its defaults and with the other choices
//! of its values, every object passes the API server's server-side dry run; `helm install
//! --dry-run=server` works against the cluster; the rendered operator runs as the values say.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools_test_support::*;
use std::process::Command;
use std::time::Duration;

fn helm(args: &[&str]) -> String {
    let out = Command::new(repo().join("bin/helm"))
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("bin/helm: run `make helm`");
    assert!(out.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The tests here that write or dry-run the default instance's webhook configurations
/// (`kwok-pools`) take turns: a server-side dry run merges with what another test wrote.
static DEFAULT_INSTANCE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _turn = DEFAULT_INSTANCE.lock().await;
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
    // Scheduling, extra flags (with a value and without), and a ServiceMonitor that keeps the
    // pools' own `namespace` label (honorLabels: else Prometheus renames it exported_namespace).
    let tuned = helm(&[
        "template",
        "tuned",
        chart,
        "--namespace",
        &ns.name,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "extraArgs={--no-shard,--kubelet-port=0}",
        "--set",
        "nodeSelector.pool=ops",
        "--set",
        "priorityClassName=system-cluster-critical",
    ]);
    let (_, args) = deployment_args(&tuned);
    assert!(args.ends_with(&["--no-shard".to_string(), "--kubelet-port=0".to_string()]), "{args:?}");
    let pod = docs(&tuned).into_iter().find(|d| d["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"].clone();
    assert_eq!(pod["nodeSelector"]["pool"], "ops");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let monitor = docs(&tuned).into_iter().find(|d| d["kind"] == "ServiceMonitor").expect("a ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!((endpoint["port"].as_str(), endpoint["honorLabels"].as_bool()), (Some("metrics"), Some(true)));
    let service = docs(&tuned).into_iter().find(|d| d["kind"] == "Service").unwrap();
    let wanted = monitor["spec"]["selector"]["matchLabels"].as_mapping().unwrap();
    assert!(
        !wanted.is_empty() && wanted.iter().all(|(k, v)| service["metadata"]["labels"][k] == *v),
        "it selects the Service: {wanted:?}"
    );
    // (The cluster has no Prometheus operator: everything else is dry-run.)
    let without_monitor: String = docs(&tuned)
        .into_iter()
        .filter(|d| d["kind"] != "ServiceMonitor")
        .map(|d| format!("---\n{}", serde_yaml::to_string(&d).unwrap()))
        .collect();
    dry_run(&without_monitor);
    // The FlowSchema and PodDisruptionBudget are on by default.
    for kind in ["FlowSchema", "PriorityLevelConfiguration", "PodDisruptionBudget"] {
        assert!(docs(&rendered).iter().any(|d| d["kind"] == kind), "{kind} missing from the defaults");
    }
    let no_webhook = helm(&["template", "bare", chart, "--namespace", &ns.name, "--set", "webhook.enabled=false"]);
    dry_run(&no_webhook);
    assert!(deployment_args(&no_webhook).1.iter().any(|a| a == "--no-webhook"));

    // A bad choice is refused with what to use.
    let out = Command::new(repo().join("bin/helm"))
        .args(["template", "x", chart, "--set", "webhook.certSource=vault"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // (values.schema.json refuses it before the templates do, naming the value.)
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("/webhook/certSource") && said.contains("'helm', 'secret'"), "{said}");
    // So is a replica count that is not a positive number.
    let out =
        Command::new(repo().join("bin/helm")).args(["template", "x", chart, "--set", "replicas=0"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("/replicas"));

    // Helm itself against the cluster (lookups included), without installing anything.
    // (An instance of its own: the install test beside it owns the default's configurations.)
    helm(&[
        "install",
        "dry",
        chart,
        "--namespace",
        &ns.name,
        "--dry-run=server",
        "--skip-crds",
        "--set",
        "instance=dry",
    ]);
}

#[tokio::test]
async fn the_kustomize_base_is_accepted_as_a_whole() {
    let _turn = DEFAULT_INSTANCE.lock().await;
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

/// A kubeconfig that acts as the operator's ServiceAccount in namespace kwok-pools.
fn service_account_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig()).unwrap()).unwrap();
    for user in kc["users"].as_sequence_mut().unwrap() {
        user["user"]["as"] = "system:serviceaccount:kwok-pools:kwok-pools".into();
        user["user"]["as-groups"] =
            serde_yaml::from_str("[system:serviceaccounts, system:serviceaccounts:kwok-pools, system:authenticated]")
                .unwrap();
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn the_one_file_install_is_accepted_and_its_operator_keeps_its_own_certificate() {
    let _turn = DEFAULT_INSTANCE.lock().await;
    let client = client().await;
    let dist = read_repo_file("dist/install.yaml");
    // A dry run creates no namespace: the install's own must exist for its other objects.
    kubectl_ok(&["apply", "-f", repo().join("config/namespace.yaml").to_str().unwrap()]);
    dry_run(&dist);
    let (replicas, args) = deployment_args(&dist);
    assert_eq!(replicas, 2);
    assert!(args.iter().any(|a| a == "--webhook-cert-secret=kwok-pools-webhook-tls"), "{args:?}");

    // Its rights and webhook configurations for real (not its Deployment: no real node runs
    // an image here); the operator runs outside as its ServiceAccount with the same flags.
    let objects: String = docs(&dist)
        .into_iter()
        .filter(|d| d["kind"] != "Deployment" && d["kind"] != "CustomResourceDefinition")
        .map(|d| format!("---\n{}", serde_yaml::to_string(&d).unwrap()))
        .collect();
    let out = kubectl_stdin(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&objects));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), "kwok-pools");
    let _ = secrets.delete("kwok-pools-webhook-tls", &Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let sa = service_account_kubeconfig(dir.path());
    let scope = unique("dist");
    let flags = [
        "--instance",
        "kwok-pools",
        "--lease-namespace",
        "kwok-pools",
        "--webhook-cert-secret",
        "kwok-pools-webhook-tls",
        "--webhook-registration",
        "inject",
    ];
    let mut first = Operator::start_as(&scope, &flags, sa.clone());
    first.wait_ready().await;
    // It made the Secret (CA and serving certificate) and gave the configurations its CA.
    let secret = secrets.get("kwok-pools-webhook-tls").await.expect("the operator made its certificate's Secret");
    let data = secret.data.clone().unwrap();
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    assert!(ca.contains("BEGIN CERTIFICATE") && data.contains_key("tls.key"), "{:?}", data.keys());
    let vwc: kube::Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        kube::Api::all(client.clone());
    let injected = vwc.get("kwok-pools").await.unwrap();
    let bundle = injected.webhooks.unwrap()[0].client_config.ca_bundle.clone().unwrap();
    assert_eq!(String::from_utf8(bundle.0).unwrap().trim(), ca.trim());
    // The API server trusts it: a pool the webhook alone refuses is refused.
    wait_webhook_refuses(&format!("{scope}-bad"), &scope, Duration::from_secs(60)).await;
    // A second replica serves the same certificate: it reads the Secret, makes none.
    let mut second = Operator::start_as(&format!("{scope}-b"), &flags, sa);
    second.wait_ready().await;
    let after = secrets.get("kwok-pools-webhook-tls").await.unwrap();
    assert_eq!(after.metadata.resource_version, secret.metadata.resource_version, "the Secret was rewritten");
    let log = std::fs::read_to_string(&second.log).unwrap_or_default();
    assert!(!log.contains("made the webhook certificate"), "{}", second.log_tail());
    first.stop();
    second.stop();
    // Leave nothing of this install to the other tests.
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        delete_quietly(kind, "kwok-pools");
    }
    let component = repo().join("config/components/webhook-cert-secret/rbac.yaml");
    let _ = kubectl(&["delete", "-f", component.to_str().unwrap(), "--ignore-not-found"]);
    let _ = secrets.delete("kwok-pools-webhook-tls", &Default::default()).await;
}
