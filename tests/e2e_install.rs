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
    let _cleanup = DistCleanup;
    let out = kubectl_stdin(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&objects));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), "kwok-pools");
    // The Secret ships empty: start from it as shipped (an earlier run may have filled it).
    let _ = secrets.delete("kwok-pools-webhook-tls", &Default::default()).await;
    let shipped: String = docs(&dist)
        .into_iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| format!("---\n{}", serde_yaml::to_string(&d).unwrap()))
        .collect();
    kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&shipped));
    let empty = secrets.get("kwok-pools-webhook-tls").await.expect("the install ships the certificate's Secret");
    assert!(empty.data.is_none_or(|d| d.is_empty()), "shipped empty");
    let (_dir, sa) = service_account_kubeconfig("kwok-pools", "kwok-pools");
    // As the ServiceAccount: that one Secret by name, nothing else of Secrets.
    let as_sa =
        |args: &[&str]| Command::new(kubectl_bin()).args(args).env("KUBECONFIG", &sa).output().expect("kubectl");
    for (args, what) in [
        (vec!["get", "secret", "kwok-pools-webhook-tls", "-n", "kwok-pools"], "its own Secret"),
        (vec!["auth", "can-i", "update", "secret/kwok-pools-webhook-tls", "-n", "kwok-pools"], "updating it"),
    ] {
        assert!(as_sa(&args).status.success(), "the operator may read {what}");
    }
    for (args, what) in [
        (vec!["auth", "can-i", "get", "secret/other", "-n", "kwok-pools"], "another Secret"),
        (vec!["auth", "can-i", "list", "secrets", "-n", "kwok-pools"], "listing Secrets"),
        (vec!["auth", "can-i", "create", "secrets", "-n", "kwok-pools"], "creating a Secret"),
        (vec!["auth", "can-i", "create", "validatingwebhookconfigurations"], "creating a webhook configuration"),
    ] {
        let out = as_sa(&args);
        assert!(!out.status.success(), "the operator may not: {what} ({})", String::from_utf8_lossy(&out.stdout));
    }
    // A stolen token cannot widen its webhook configurations: only their CA may change.
    // (A server-side dry run: admission runs, nothing is written; retried while the API server
    // loads the new policy.)
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let widen = r#"[{"op": "add", "path": "/webhooks/0/rules/0/resources/-", "value": "secrets"}]"#;
        wait_for(&format!("a wider rule on the {kind} to be refused"), Duration::from_secs(30), || async {
            let out = as_sa(&["patch", kind, "kwok-pools", "--type", "json", "-p", widen, "--dry-run=server"]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() && err.contains("may change only the CA bundle") { Ok(()) } else { Err(err) }
        })
        .await;
    }
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
        "--webhook-service",
        "kwok-pools/kwok-pools",
    ];
    let mut first = Operator::start_as(&scope, &flags, sa.clone());
    first.wait_ready().await;
    // It filled the Secret (CA and serving certificate) and gave the configurations its CA.
    let secret = secrets.get("kwok-pools-webhook-tls").await.unwrap();
    let data = secret.data.clone().expect("the operator filled its certificate's Secret");
    let ca = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
    assert!(ca.contains("BEGIN CERTIFICATE") && data.contains_key("tls.key"), "{:?}", data.keys());
    let vwc: kube::Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        kube::Api::all(client.clone());
    let injected = vwc.get("kwok-pools").await.unwrap();
    let bundle = injected.webhooks.unwrap()[0].client_config.ca_bundle.clone().unwrap();
    assert_eq!(String::from_utf8(bundle.0).unwrap().trim(), ca.trim());
    // Re-applying the install keeps the certificate (the shipped Secret has no data).
    kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&shipped));
    let kept = secrets.get("kwok-pools-webhook-tls").await.unwrap();
    assert_eq!(kept.data.map(|d| d["ca.crt"].clone()), Some(data["ca.crt"].clone()), "re-applying reset the CA");
    // Only the CA changed: the configurations still call the Service, with the same rules.
    let shipped_hook = docs(&dist)
        .into_iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .map(|d| d["webhooks"][0].clone())
        .unwrap();
    let now = serde_yaml::to_value(&vwc.get("kwok-pools").await.unwrap().webhooks.unwrap()[0]).unwrap();
    for field in ["rules", "objectSelector", "failurePolicy", "sideEffects"] {
        assert_eq!(now[field], shipped_hook[field], "{field} changed");
    }
    assert_eq!(now["clientConfig"]["service"], shipped_hook["clientConfig"]["service"]);
    // As the API server calls it (this cluster has no DNS for the Service: its name resolved
    // here), with the configuration's CA and the API server's webhook client certificate: a
    // pool the webhook alone refuses is refused.
    assert!(!review_as_the_api_server(first.webhook_port, &ca).await, "the webhook refuses what only it refuses");
    // A second replica serves the same certificate: it reads the Secret, makes none.
    let mut second = Operator::start_as(&format!("{scope}-b"), &flags, sa);
    second.wait_ready().await;
    let after = secrets.get("kwok-pools-webhook-tls").await.unwrap();
    assert_eq!(after.metadata.resource_version, secret.metadata.resource_version, "the Secret was rewritten");
    let log = std::fs::read_to_string(&second.log).unwrap_or_default();
    assert!(!log.contains("made the webhook certificate"), "{}", second.log_tail());
    first.stop();
    second.stop();
}

/// Sends a review of a NodePool that only the webhook refuses (a template that sets a reserved
/// label) to the webhook at `port`, as the API server would (the Service's name, the
/// configuration's CA, its webhook client certificate); whether it was allowed.
async fn review_as_the_api_server(port: u16, ca: &str) -> bool {
    let pki = kubeconfig().parent().unwrap().join("pki");
    let mut identity = std::fs::read(pki.join("apiserver-webhook-client.crt")).unwrap();
    identity.extend(std::fs::read(pki.join("apiserver-webhook-client.key")).unwrap());
    let https = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .resolve("kwok-pools.kwok-pools.svc", std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .build()
        .unwrap();
    let pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "bad"},
        "spec": {"nodeCount": 1, "nodeTemplate": {"metadata": {"labels": {"pools.kwok.x-k8s.io/index": "1"}}}},
    });
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "1", "operation": "CREATE", "name": "bad",
            "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": "NodePool"},
            "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": "nodepools"},
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": pool,
        },
    });
    let url = format!("https://kwok-pools.kwok-pools.svc:{port}/validate");
    let answer: serde_json::Value =
        https.post(url).json(&review).send().await.expect("the webhook answers").json().await.unwrap();
    answer["response"]["allowed"].as_bool().expect("an AdmissionReview answer")
}

/// Leaves nothing of the one-file install to the other tests, pass or fail: its webhook
/// configurations, the certificate's Secret and the rights and policy of its optional bundle
/// (the CA-only policy would refuse another test's operator writing whole configurations).
struct DistCleanup;

impl Drop for DistCleanup {
    fn drop(&mut self) {
        for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
            delete_quietly(kind, "kwok-pools");
        }
        for file in ["rbac.yaml", "policy.yaml", "secret.yaml"] {
            let component = repo().join("config/components/webhook-cert-secret").join(file);
            let _ = kubectl(&["delete", "-f", component.to_str().unwrap(), "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// The container `kwok-pools` of the Deployment in `manifests`.
fn operator_container(manifests: &str) -> (serde_yaml::Value, serde_yaml::Value) {
    let d = docs(manifests).into_iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    let pod = d["spec"]["template"]["spec"].clone();
    let container =
        pod["containers"].as_sequence().unwrap().iter().find(|c| c["name"] == "kwok-pools").unwrap().clone();
    (pod, container)
}

/// The webhook's client CA as each install path wires it: a volume from a ConfigMap holding the
/// CA, mounted, and `--webhook-client-ca` (its flag, or its environment variable) naming it.
fn assert_wired(manifests: &str, configmap: &str, what: &str) {
    let (pod, c) = operator_container(manifests);
    let volume = pod["volumes"]
        .as_sequence()
        .and_then(|v| v.iter().find(|v| v["configMap"]["name"] == configmap))
        .unwrap_or_else(|| panic!("{what}: no volume from the ConfigMap {configmap}: {pod:?}"));
    let mount = c["volumeMounts"]
        .as_sequence()
        .and_then(|m| m.iter().find(|m| m["name"] == volume["name"]))
        .unwrap_or_else(|| panic!("{what}: the client CA is not mounted"));
    let file = format!("{}/ca.crt", mount["mountPath"].as_str().unwrap());
    let by_flag = c["args"]
        .as_sequence()
        .is_some_and(|a| a.iter().any(|a| a.as_str() == Some(&format!("--webhook-client-ca={file}"))));
    let by_env = c["env"].as_sequence().is_some_and(|e| {
        e.iter().any(|e| e["name"] == "KWOK_POOLS_WEBHOOK_CLIENT_CA" && e["value"].as_str() == Some(file.as_str()))
    });
    assert!(by_flag || by_env, "{what}: --webhook-client-ca does not name {file}: {c:?}");
}

#[tokio::test]
async fn every_install_path_can_make_the_webhook_answer_only_the_api_server() {
    let _turn = DEFAULT_INSTANCE.lock().await;
    let client = client().await;
    let ns = TestNamespace::new(&client, "client-ca").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = kwok_pools::certs::Authority::new("admission-client-ca").unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca.pair.cert_pem).unwrap();
    // The flag reads its environment variable (what the kustomize and dist patch set).
    let help = Command::new(kwok_pools_bin()).args(["run", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("[env: KWOK_POOLS_WEBHOOK_CLIENT_CA="), "run --help");

    // Helm: --set-file webhook.clientCA.
    let chart = repo().join("charts/kwok-pools");
    let set_file = format!("webhook.clientCA={}", ca_file.display());
    let rendered =
        helm(&["template", "kwok-pools", chart.to_str().unwrap(), "--namespace", &ns.name, "--set-file", &set_file]);
    assert_wired(&rendered, "kwok-pools-webhook-client-ca", "helm");
    let cm = docs(&rendered).into_iter().find(|d| d["kind"] == "ConfigMap").expect("the client CA's ConfigMap");
    assert_eq!(cm["data"]["ca.crt"].as_str().map(str::trim), Some(ca.pair.cert_pem.trim()));
    dry_run(&rendered);

    // kustomize: an overlay of config/ with the component.
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    // (kustomize takes only relative paths: up from the overlay to /, then down to the repo.)
    let up = "../".repeat(overlay.canonicalize().unwrap().components().count() - 1);
    let repo_rel = format!("{up}{}", repo().canonicalize().unwrap().display().to_string().trim_start_matches('/'));
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("resources: [{repo_rel}/config]\ncomponents: [{repo_rel}/config/components/webhook-client-ca]\n"),
    )
    .unwrap();
    let out = kubectl(&["kustomize", overlay.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kustomized = String::from_utf8(out.stdout).unwrap();
    assert_wired(&kustomized, "kwok-pools-webhook-client-ca", "kustomize");
    kubectl_ok(&["apply", "-f", repo().join("config/namespace.yaml").to_str().unwrap()]);
    let configmap = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kwok-pools-webhook-client-ca, namespace: kwok-pools}}\ndata:\n  ca.crt: |\n{}",
        ca.pair.cert_pem.lines().map(|l| format!("    {l}\n")).collect::<String>()
    );
    dry_run(&format!("{kustomized}\n---\n{configmap}"));

    // dist/install.yaml: its Deployment patched as docs/operating.md says.
    let deployment: String = docs(&read_repo_file("dist/install.yaml"))
        .into_iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| serde_yaml::to_string(&d).unwrap())
        .collect();
    let file = dir.path().join("deployment.yaml");
    std::fs::write(&file, deployment).unwrap();
    let patch = repo().join("config/components/webhook-client-ca/deployment-patch.yaml");
    let out = kubectl(&[
        "patch",
        "--local",
        "-f",
        file.to_str().unwrap(),
        "--patch-file",
        patch.to_str().unwrap(),
        "-o",
        "yaml",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let patched = String::from_utf8(out.stdout).unwrap();
    assert_wired(&patched, "kwok-pools-webhook-client-ca", "dist");
    let (_, c) = operator_container(&patched);
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert!(args.contains(&"--webhook-cert-secret=kwok-pools-webhook-tls"), "the patch keeps the args: {args:?}");
    dry_run(&patched);
}

/// The kubelets' serving CA as each install path wires it: a volume from the Secret holding
/// it, mounted, and `--kubelet-serving-ca-cert/-key` (flags, or their environment variables)
/// naming its files.
fn assert_serving_ca_wired(manifests: &str, secret: &str, what: &str) {
    let (pod, c) = operator_container(manifests);
    let volume = pod["volumes"]
        .as_sequence()
        .and_then(|v| v.iter().find(|v| v["secret"]["secretName"] == secret))
        .unwrap_or_else(|| panic!("{what}: no volume from the Secret {secret}: {pod:?}"));
    let mount = c["volumeMounts"]
        .as_sequence()
        .and_then(|m| m.iter().find(|m| m["name"] == volume["name"]))
        .unwrap_or_else(|| panic!("{what}: the serving CA is not mounted"));
    let dir = mount["mountPath"].as_str().unwrap();
    for (flag, env, file) in [
        ("--kubelet-serving-ca-cert", "KWOK_POOLS_KUBELET_SERVING_CA_CERT", "tls.crt"),
        ("--kubelet-serving-ca-key", "KWOK_POOLS_KUBELET_SERVING_CA_KEY", "tls.key"),
    ] {
        let path = format!("{dir}/{file}");
        let by_flag =
            c["args"].as_sequence().is_some_and(|a| a.iter().any(|a| a.as_str() == Some(&format!("{flag}={path}"))));
        let by_env = c["env"]
            .as_sequence()
            .is_some_and(|e| e.iter().any(|e| e["name"] == env && e["value"].as_str() == Some(path.as_str())));
        assert!(by_flag || by_env, "{what}: {flag} does not name {path}: {c:?}");
    }
}

#[tokio::test]
async fn every_install_path_can_give_metrics_server_a_serving_ca_to_trust() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "serving-ca").await;
    let dir = tempfile::tempdir().unwrap();
    // The flags read their environment variables (what the kustomize and dist patch set).
    let help = Command::new(kwok_pools_bin()).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for env in ["KWOK_POOLS_KUBELET_SERVING_CA_CERT", "KWOK_POOLS_KUBELET_SERVING_CA_KEY"] {
        assert!(help.contains(&format!("[env: {env}=")), "run --help names {env}");
    }

    // Helm: kubeletApi.servingCASecret.
    let chart = repo().join("charts/kwok-pools");
    let rendered = helm(&[
        "template",
        "kwok-pools",
        chart.to_str().unwrap(),
        "--namespace",
        &ns.name,
        "--set",
        "kubeletApi.servingCASecret=my-kubelet-ca",
    ]);
    assert_serving_ca_wired(&rendered, "my-kubelet-ca", "helm");
    dry_run(&rendered);

    // kustomize: an overlay of config/ with the component.
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    let up = "../".repeat(overlay.canonicalize().unwrap().components().count() - 1);
    let repo_rel = format!("{up}{}", repo().canonicalize().unwrap().display().to_string().trim_start_matches('/'));
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("resources: [{repo_rel}/config]\ncomponents: [{repo_rel}/config/components/kubelet-serving-ca]\n"),
    )
    .unwrap();
    let out = kubectl(&["kustomize", overlay.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let kustomized = String::from_utf8(out.stdout).unwrap();
    assert_serving_ca_wired(&kustomized, "kwok-pools-kubelet-serving-ca", "kustomize");
    kubectl_ok(&["apply", "-f", repo().join("config/namespace.yaml").to_str().unwrap()]);
    dry_run(&kustomized);

    // dist/install.yaml: its Deployment patched with the component's patch.
    let deployment: String = docs(&read_repo_file("dist/install.yaml"))
        .into_iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| serde_yaml::to_string(&d).unwrap())
        .collect();
    let file = dir.path().join("deployment.yaml");
    std::fs::write(&file, deployment).unwrap();
    let patch = repo().join("config/components/kubelet-serving-ca/deployment-patch.yaml");
    let out = kubectl(&[
        "patch",
        "--local",
        "-f",
        file.to_str().unwrap(),
        "--patch-file",
        patch.to_str().unwrap(),
        "-o",
        "yaml",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let patched = String::from_utf8(out.stdout).unwrap();
    assert_serving_ca_wired(&patched, "kwok-pools-kubelet-serving-ca", "dist");
    dry_run(&patched);
}
