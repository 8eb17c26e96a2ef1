//! What a hostile namespace user (or anyone on the network) tries against the operator, on
//! the real control plane (issue 41's attack suite): each test fails against an operator
//! without the defence it names.
//! (a) a flood of stalled webhook bodies does not let a pool through whose creator may not
//!     create its children; (b) a log script that would render a gigabyte answers `--tail` and
//!     `--limit-bytes` with the operator's memory flat; (c) `kubectl exec -i` fed from
//!     /dev/zero to a reader that never reads keeps it flat; (d) random bearer tokens sprayed
//!     at the kubelet port do not slow `kubectl logs`; (f) two named instances and an unlabelled
//!     pool: each simulates only its own pools' nodes, and the pool nobody handles is reported;
//! (e) pools of all three kinds with children, the operator gone, `kwok-pools uninstall`: the
//!     namespace deletes and nothing remains.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kwok_pools_test_support as common;
use std::process::{Command, Stdio};

use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);

/// Merges `patch` into pod `name`'s status.
fn patch_status(name: &str, ns: &str, patch: &str) {
    kubectl_ok(&["patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge", "-p", patch]);
}

/// A running pod `name` in `ns` on the scope's nodes.
async fn running_pod(client: &kube::Client, name: &str, ns: &str, scope: &str) {
    apply(&scoped_pod(name, ns, scope, ""));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("pod {name} Running"), T, || async {
        let p = pods.get(name).await.map_err(|e| e.to_string())?;
        if pod_ready(&p) { Ok(()) } else { Err(format!("{:?}", p.status.and_then(|s| s.phase))) }
    })
    .await;
}

#[tokio::test]
async fn a_flood_of_stalled_webhook_bodies_lets_no_pool_past_its_creators_rights() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "atk-flood").await;
    let scope = unique("atk-flood");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    let who = unique("pool-only");
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {who}, namespace: {ns}}}\nrules: [{{apiGroups: [pools.kwok.x-k8s.io], resources: [podpools], verbs: [get, list, create, update, patch]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {who}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {who}}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n",
        ns = ns.name
    ));
    // Connections that declare a 7 MiB body each and never send it: without a body timeout
    // they would hold the webhook's byte budget (every review then 429, and the API server's
    // failurePolicy Ignore admits the pool unchecked).
    let flood = stalled_bodies(op.webhook_port, 40).await;
    assert!(flood.len() >= 10, "the flood is on: {} connections", flood.len());
    let pool = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: sneaky, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  podCount: 1\n  podTemplate:\n    spec:\n      containers: [{{name: a, image: nginx}}]\n",
        ns.name
    );
    let out = kubectl_stdin(&["apply", "-f", "-", &format!("--as={who}")], Some(&pool));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("{who} may not create pods")), "{err}");
    drop(flood);
}

/// `n` TLS connections to the webhook on `port`, each having sent headers that announce a
/// 7 MiB body, then nothing (its CA is read from the webhook configuration that names the port).
async fn stalled_bodies(port: u16, n: usize) -> Vec<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::AsyncWriteExt;
    let configs = Api::<ValidatingWebhookConfiguration>::all(client().await).list(&Default::default()).await.unwrap();
    let needle = format!(":{port}/");
    let ca = configs
        .items
        .iter()
        .flat_map(|c| c.webhooks.iter().flatten())
        .find(|w| w.client_config.url.as_deref().is_some_and(|u| u.contains(&needle)))
        .and_then(|w| w.client_config.ca_bundle.clone())
        .expect("the operator's webhook configuration names its port");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(&ca.0).unwrap()).unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut held = Vec::new();
    for _ in 0..n {
        let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { continue };
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let Ok(mut tls) = connector.connect(name, tcp).await else { continue };
        let head =
            "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7340032\r\n\r\n{";
        if tls.write_all(head.as_bytes()).await.is_ok() {
            held.push(tls);
        }
    }
    held
}

#[tokio::test]
async fn a_gigabyte_log_answers_tail_and_limit_bytes_with_memory_flat() {
    let client = client().await;
    let scope = unique("atk-logs");
    let ns = TestNamespace::new(&client, "atk-logs").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    // Every line 4,000 characters of `{pod}`: with a long pod name, 16 KiB once filled.
    let line = "{pod}".repeat(800);
    apply(&nodepool_yaml(
        &scope,
        &scope,
        1,
        &format!("  lifecycle:\n    pods:\n      logs: {{line: \"{line}\", every: 100ms}}\n"),
    ));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let name = format!("p{}", "x".repeat(60));
    running_pod(&client, &name, &ns.name, &scope).await;
    // It has run for a year: 100,000 lines kept (the rest rotated), 1.6 GB if all were made.
    patch_status(&name, &ns.name, r#"{"status":{"startTime":"2025-01-01T00:00:00Z"}}"#);
    let pod: Pod = Api::namespaced(client.clone(), &ns.name).get(&name).await.unwrap();
    let mut statuses = pod.status.unwrap().container_statuses.unwrap();
    statuses[0].state.as_mut().unwrap().running.as_mut().unwrap().started_at =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2025-01-01T00:00:00Z".parse().unwrap()));
    let patch = serde_json::json!({"status": {"containerStatuses": statuses}});
    patch_status(&name, &ns.name, &patch.to_string());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = op.rss_mib();
    let started = Instant::now();
    let tail = kubectl_ok(&["logs", "-n", &ns.name, &name, "--tail=10"]);
    assert_eq!(tail.lines().count(), 10);
    assert!(tail.lines().all(|l| l.len() == 16 * 1024), "lines cut at 16 KiB");
    let limited = kubectl_ok(&["logs", "-n", &ns.name, &name, "--limit-bytes=1000"]);
    assert_eq!(limited.len(), 1000);
    let since = kubectl_ok(&["logs", "-n", &ns.name, &name, "--since=1s"]);
    assert!((9..=12).contains(&since.lines().count()), "{}", since.lines().count());
    let took = started.elapsed();
    let grew = op.rss_mib() - before;
    assert!(grew < 16.0, "the operator grew by {grew:.1} MiB answering a huge log");
    assert!(took < Duration::from_secs(20), "answered in {took:?}");
}

#[tokio::test]
async fn exec_fed_from_dev_zero_to_a_reader_that_never_reads_keeps_memory_flat() {
    let client = client().await;
    let scope = unique("atk-exec");
    let ns = TestNamespace::new(&client, "atk-exec").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&scope, &scope, 1, "  lifecycle:\n    pods:\n      exec: {mode: Echo}\n"));
    wait_ready_nodes(&client, &scope, 1, T).await;
    running_pod(&client, "zero", &ns.name, &scope).await;
    let kubectl = kubectl_bin();
    let cmd = format!("{} exec -i -n {} zero -- cat </dev/zero | sleep 75", kubectl.display(), ns.name);
    let mut attack =
        Command::new("sh").args(["-c", &cmd]).env("KUBECONFIG", kubeconfig()).stderr(Stdio::null()).spawn().unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = op.rss_mib();
    let mut most = before;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        most = most.max(op.rss_mib());
    }
    let _ = attack.kill();
    let _ = attack.wait();
    assert!(most - before < 16.0, "the operator grew from {before:.1} to {most:.1} MiB over 60 s");
}

#[tokio::test]
async fn random_bearer_tokens_at_the_kubelet_port_do_not_slow_kubectl_logs() {
    let client = client().await;
    let scope = unique("atk-tokens");
    let ns = TestNamespace::new(&client, "atk-tokens").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    let nodes = wait_ready_nodes(&client, &scope, 1, T).await;
    running_pod(&client, "web", &ns.name, &scope).await;
    kubectl_ok(&["logs", "-n", &ns.name, "web"]); // its rights are reviewed once, then cached
    let address = nodes[0]
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "Hostname"))
        .map(|a| a.address.clone())
        .unwrap();
    let url = format!("https://{address}:{}/pods", op.kubelet_port);
    let spray = tokio::spawn(async move {
        let http = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        let mut answers = std::collections::BTreeMap::<u16, usize>::new();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..2000 {
            let (http, url) = (http.clone(), url.clone());
            tasks.spawn(async move {
                let r = http.get(&url).bearer_auth(format!("random-{i}-{}", unique("t"))).send().await;
                r.map(|r| r.status().as_u16()).unwrap_or(0)
            });
            if tasks.len() >= 200
                && let Some(Ok(code)) = tasks.join_next().await
            {
                *answers.entry(code).or_default() += 1;
            }
        }
        while let Some(Ok(code)) = tasks.join_next().await {
            *answers.entry(code).or_default() += 1;
        }
        answers
    });
    let mut slowest = Duration::ZERO;
    while !spray.is_finished() {
        let started = Instant::now();
        let (ok, logs) = {
            let o = kubectl(&["logs", "-n", &ns.name, "web"]);
            (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
        };
        assert!(ok && logs.contains("started"), "{logs}");
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answers = spray.await.unwrap();
    assert!(!answers.contains_key(&200), "no random token is let in: {answers:?}");
    assert!(slowest < Duration::from_secs(1), "kubectl logs took {slowest:?} while tokens were sprayed ({answers:?})");
}

#[tokio::test]
async fn f_two_named_instances_simulate_only_their_own_nodes_and_report_a_pool_nobody_handles() {
    let client = client().await;
    let scope = unique("atk-inst");
    let (a, b) = (format!("{scope}-a"), format!("{scope}-b"));
    // As a user runs them: the instance decides the pools and the nodes (no selector flags).
    let mut op_a = Operator::start(&scope, &["--instance", &a, "--no-pool-selector", "--default-manage"]);
    let mut op_b = Operator::start(&scope, &["--instance", &b, "--no-pool-selector", "--default-manage"]);
    op_a.wait_ready().await;
    op_b.wait_ready().await;
    let labelled = |pool: &str, instance: &str| {
        NodePoolYaml::new(pool, &scope).count(2).pool_label("pools.kwok.x-k8s.io/instance", instance).yaml()
    };
    let (pool_a, pool_b, orphan) = (format!("{scope}-pa"), format!("{scope}-pb"), format!("{scope}-none"));
    apply(&labelled(&pool_a, &a));
    apply(&labelled(&pool_b, &b));
    apply(&nodepool_yaml(&orphan, &scope, 2, ""));
    for (pool, instance) in [(&pool_a, &a), (&pool_b, &b)] {
        for node in wait_ready_nodes(&client, pool, 2, T).await {
            let label = node.metadata.labels.as_ref().and_then(|l| l.get("pools.kwok.x-k8s.io/instance"));
            assert_eq!(label, Some(instance), "a pool's nodes carry its instance");
        }
    }
    // Each simulates its own two nodes, never the other's (both would renew all four leases,
    // and the pools would report SimulatorConflict).
    wait_for("each instance simulates its own 2 nodes", T, || async {
        let (na, nb) = (
            op_a.metric("kwok_pools_simulator_managed_nodes").await,
            op_b.metric("kwok_pools_simulator_managed_nodes").await,
        );
        if (na, nb) == (2.0, 2.0) { Ok(()) } else { Err(format!("a simulates {na}, b {nb}")) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    for pool in [&pool_a, &pool_b] {
        let out = kubectl_ok(&["get", "nodepool", pool, "-o", "yaml"]);
        assert!(!out.contains("SimulatorConflict"), "{pool} is simulated twice:\n{out}");
    }
    assert_eq!(op_a.metric("kwok_pools_simulator_managed_nodes").await, 2.0);
    assert!(pool_nodes(&client, &orphan).await.is_empty(), "no named instance takes an unlabelled pool");
    // The pool nobody handles is named: by `kwok-pools status`, and by each instance at start.
    let status = Command::new(kwok_pools_bin())
        .args(["status", "--instance", &a])
        .env("KUBECONFIG", kubeconfig())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let line =
        |pool: &str| text.lines().find(|l| l.split_whitespace().any(|w| w == pool)).unwrap_or_default().to_string();
    assert!(line(&orphan).contains("Unhandled"), "{text}");
    assert!(line(&pool_a).contains(&a) && !line(&pool_a).contains("Unhandled"), "{text}");
    assert!(line(&pool_b).contains(&b), "{text}");
    wait_for("instance a warns of the unlabelled pool", T, || async {
        let warned = op_a.log_warnings();
        if warned.contains(&orphan) && warned.contains("run the default instance") { Ok(()) } else { Err(warned) }
    })
    .await;
    for pool in [&pool_a, &pool_b, &orphan] {
        delete_quietly("nodepool", pool);
    }
    op_a.stop();
    op_b.stop();
}

#[tokio::test]
async fn e_uninstall_leaves_nothing_behind_even_with_the_operator_gone_first() {
    let client = client().await;
    let scope = unique("atk-uninst");
    let instance = scope.clone();
    let ns = TestNamespace::new(&client, "atk-uninst").await;
    let mut op = Operator::start(&scope, &["--instance", &instance, "--no-pool-selector"]);
    op.wait_ready().await;
    let labels = format!("{{{SCOPE_LABEL}: {scope}, pools.kwok.x-k8s.io/instance: {instance}}}");
    let nodes = format!("{scope}-n");
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: {nodes}, labels: {labels}}}\nspec:\n  nodeCount: 2\n  kubevirt: {{devices: 50}}\n  nodeTemplate:\n    metadata: {{labels: {{{SCOPE_LABEL}: {scope}}}}}\n"
    ));
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: web, namespace: {ns}, labels: {labels}}}\nspec:\n  podCount: 3\n  podTemplate:\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      terminationGracePeriodSeconds: 600\n      containers: [{{name: app, image: nginx}}]\n",
        ns = ns.name
    ));
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: VMIPool\nmetadata: {{name: vms, namespace: {ns}, labels: {labels}}}\nspec:\n  vmiCount: 2\n  vmiTemplate:\n    metadata: {{labels: {{{SCOPE_LABEL}: {scope}}}}}\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      domain:\n        devices: {{disks: [{{disk: {{bus: virtio}}, name: d}}]}}\n        memory: {{guest: 128Mi}}\n      volumes: [{{name: d, containerDisk: {{image: example/cirros}}}}]\n",
        ns = ns.name
    ));
    // And a VMIPool of VirtualMachines: their VMIs are owned by the VMs, not the pool.
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: VMIPool\nmetadata: {{name: vm-pool, namespace: {ns}, labels: {labels}}}\nspec:\n  vmiCount: 2\n  virtualMachine: {{runStrategy: Always}}\n  vmiTemplate:\n    metadata: {{labels: {{{SCOPE_LABEL}: {scope}}}}}\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      domain:\n        devices: {{disks: [{{disk: {{bus: virtio}}, name: d}}]}}\n        memory: {{guest: 128Mi}}\n      volumes: [{{name: d, containerDisk: {{image: example/cirros}}}}]\n",
        ns = ns.name
    ));
    wait_ready_nodes(&client, &nodes, 2, T).await;
    let phases = |what: &str| {
        String::from_utf8_lossy(
            &kubectl(&["get", what, "-n", &ns.name, "-o", "jsonpath={.items[*].status.phase}"]).stdout,
        )
        .into_owned()
    };
    wait_for("3 pods and 4 VMIs Running", T, || async {
        let (pods, vmis) = (phases("pods"), phases("virtualmachineinstances"));
        // The PodPool's 3 pods, and the VMIs' launcher pods beside them.
        let up = |s: &str| s.split_whitespace().filter(|p| *p == "Running").count();
        if up(&pods) >= 3 && up(&vmis) == 4 { Ok(()) } else { Err(format!("pods: {pods}; vmis: {vmis}")) }
    })
    .await;
    let finalized = kubectl_ok(&[
        "get",
        "virtualmachineinstances",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ]);
    assert!(finalized.contains("foregroundDeleteVirtualMachine"), "the VMIs hold KubeVirt's finalizer: {finalized}");
    // The operator goes first (its Deployment deleted before the pools): nothing would finish
    // a pod's or a VMI's deletion any more.
    op.stop();
    let out = Command::new(kwok_pools_bin())
        .args(["uninstall", "--instance", &instance, "--timeout", "120s"])
        .env("KUBECONFIG", kubeconfig())
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("every child of the deleted pools is gone"), "{said}");
    // The namespace deletes, and nothing of the install remains.
    kubectl_ok(&["delete", "namespace", &ns.name, "--wait=false"]);
    wait_for("the namespace gone", T, || async {
        let left = kubectl(&["get", "namespace", &ns.name, "-o", "name"]);
        if left.status.success() { Err(String::from_utf8_lossy(&left.stdout).into_owned()) } else { Ok(()) }
    })
    .await;
    assert!(pool_nodes(&client, &nodes).await.is_empty(), "the pool's nodes are gone");
    for (kind, name) in [
        ("nodepool", nodes.clone()),
        ("validatingwebhookconfiguration", format!("kwok-pools-{instance}")),
        ("mutatingwebhookconfiguration", format!("kwok-pools-{instance}")),
        ("validatingadmissionpolicy", format!("kwok-pools-{instance}-pool-creators")),
        ("validatingadmissionpolicybinding", format!("kwok-pools-{instance}-pool-creators")),
    ] {
        let left = kubectl(&["get", kind, &name, "-o", "name"]);
        assert!(!left.status.success(), "{kind} {name} remains");
    }
}
