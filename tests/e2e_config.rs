//! The deployment manifests under config/: the API server accepts them, and the RBAC they
//! grant is enough for the operator to do all its work (it runs here as that service
//! account, through impersonation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::time::Duration;

const T: Duration = Duration::from_secs(90);

#[test]
fn the_manifests_pass_server_side_validation() {
    for file in ["namespace.yaml", "rbac.yaml", "service.yaml", "deployment.yaml", "policy.yaml"] {
        let path = repo().join("config").join(file);
        let out =
            kubectl(&["apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The operator may have registered the real one already: check a copy under another name.
    let webhook = read_repo_file("config/webhook.yaml")
        .replace("  name: kwok-pools\nwebhooks:", "  name: kwok-pools-dry-run\nwebhooks:");
    let out = kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&webhook));
    assert!(out.status.success(), "webhook.yaml: {}", String::from_utf8_lossy(&out.stderr));
    let kustomized = kubectl(&["kustomize", repo().join("config").to_str().unwrap()]);
    assert!(kustomized.status.success(), "{}", String::from_utf8_lossy(&kustomized.stderr));
    let prom: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("config/prometheus.yaml")).unwrap();
    assert!(prom["scrape_configs"].as_sequence().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn the_operator_works_with_exactly_the_rbac_in_config() {
    let client = client().await;
    let _leave = LeaveNothing;
    // The webhook configurations ship with the operator. This one runs outside the cluster
    // as the ServiceAccount, so it writes them itself: the component that grants that, and the
    // admission policy that confines the identity to simulated objects.
    for file in
        ["namespace.yaml", "rbac.yaml", "webhook.yaml", "policy.yaml", "components/webhook-registration/rbac.yaml"]
    {
        let path = repo().join("config").join(file);
        kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", path.to_str().unwrap()]);
    }
    // A kubeconfig that acts as the operator's service account.
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig()).unwrap()).unwrap();
    for user in kc["users"].as_sequence_mut().unwrap() {
        user["user"]["as"] = "system:serviceaccount:kwok-pools:kwok-pools".into();
        user["user"]["as-groups"] =
            serde_yaml::from_str("[system:serviceaccounts, system:serviceaccounts:kwok-pools, system:authenticated]")
                .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&sa_kubeconfig, serde_yaml::to_string(&kc).unwrap()).unwrap();
    let denied = std::process::Command::new(kubectl_bin())
        .args(["get", "secrets", "-A"])
        .env("KUBECONFIG", &sa_kubeconfig)
        .output()
        .unwrap();
    assert!(!denied.status.success(), "the service account must not read secrets");

    let scope = unique("rbac");
    let ns = TestNamespace::new(&client, "rbac").await;
    // Children are created only where pools live: the namespace gets the binding, as the
    // README tells a user to do.
    let cannot_create = std::process::Command::new(kubectl_bin())
        .args(["auth", "can-i", "create", "pods", "-n", &ns.name])
        .env("KUBECONFIG", &sa_kubeconfig)
        .output()
        .unwrap();
    assert!(!cannot_create.status.success(), "pods may not be created in a namespace without pools");
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kwok-pools-pool-children, namespace: {}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kwok-pools-pool-children}}\nsubjects: [{{kind: ServiceAccount, name: kwok-pools, namespace: kwok-pools}}]\n",
        ns.name
    ));
    // The default instance: the webhook configuration is the one the ClusterRole names.
    // Leader and shard Leases where the operator's own namespace is (in a pod: POD_NAMESPACE).
    let mut op = Operator::start_as(
        &scope,
        &["--instance", "kwok-pools", "--lease-namespace", "kwok-pools"],
        sa_kubeconfig.clone(),
    );
    op.wait_ready().await;
    let pool = scope.clone();
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: NodePool
metadata: {{name: {pool}, labels: {{{SCOPE_LABEL}: {scope}}}}}
spec:
  nodeCount: 2
  nodeTemplate:
    metadata: {{labels: {{{SCOPE_LABEL}: {scope}}}}}
---
apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: PodPool
metadata: {{name: web, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}
spec:
  podCount: 3
  podTemplate:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      containers: [{{name: app, image: nginx}}]
",
        ns.name
    ));
    wait_ready_nodes(&client, &pool, 2, T).await;
    wait_pool_status(&client, &pool, 2, T).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    wait_for("3 Running pods", T, || async {
        let ps = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?.items;
        let running = ps.iter().filter(|p| pod_ready(p)).count();
        if running == 3 { Ok(()) } else { Err(format!("{running} running")) }
    })
    .await;
    // Scale down deletes; leases are kept fresh.
    kubectl_ok(&["scale", "nodepool", &pool, "--replicas", "1"]);
    wait_ready_nodes(&client, &pool, 1, T).await;
    wait_lease(&client, &format!("{pool}-0")).await;
    assert!(lease_age(&client, &format!("{pool}-0")).await.unwrap() < 10.0);
    // The webhook registered itself and refuses a garde-only fault.
    wait_webhook_refuses(&format!("{pool}-bad"), &scope, T).await;
    // With these permissions the webhook has the API server judge rendered children (a
    // dry-run create of a node and of a pod): its verdicts come back at the template's paths.
    for (bad, field) in [
        (
            format!(
                "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: {pool}-bad, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  nodeCount: 1\n  nodeTemplate:\n    spec: {{taints: [{{key: a, effect: Sometimes}}]}}\n"
            ),
            "spec.nodeTemplate.spec.taints[0].effect",
        ),
        (
            format!(
                "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: bad, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  podCount: 1\n  podTemplate:\n    spec: {{containers: [{{name: a}}]}}\n",
                ns.name
            ),
            "spec.podTemplate.spec.containers[0].image",
        ),
    ] {
        let out = kubectl_stdin(&["apply", "-f", "-"], Some(&bad));
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && text.contains(field), "{field}: {text}");
    }
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    // The API server's refusal ("... is forbidden: User ... cannot ..."), not a name that
    // happens to hold the word.
    assert!(!log.contains("is forbidden"), "the operator hit a permission error:\n{}", op.log_tail());
    // The pool goes while its operator runs (else its node outlives both, NotReady).
    kubectl_ok(&["delete", "nodepool", &pool, "--timeout=60s"]);
    op.stop();
}

/// Undoes what the RBAC test installs, pass or fail: the configurations it points at its own
/// operator (the install tests dry-run the shipped ones) and the registration rights (other
/// tests judge the base config's privileges).
struct LeaveNothing;

impl Drop for LeaveNothing {
    fn drop(&mut self) {
        for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
            delete_quietly(kind, "kwok-pools");
        }
        let registration = repo().join("config/components/webhook-registration/rbac.yaml");
        let _ = kubectl(&["delete", "-f", registration.to_str().unwrap(), "--ignore-not-found"]);
    }
}
