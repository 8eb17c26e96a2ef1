//! What the operator's identity can touch, proven against the real API server: the RBAC both
//! installs ship (config/ and the chart) grants exactly the matrix below and they agree; the
//! admission policies refuse the identity any write to a real node, its Lease or pods that
//! would leave simulated nodes; a person may create a pool only if they may create its
//! children; people get the pools through the built-in view/edit roles; and a webhook
//! registration that fails leaves the replica running, simulating and not Ready until it works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(90);

/// The tests that change the rights of the `kwok-pools/kwok-pools` ServiceAccount run one at a
/// time (the matrix must not see the registration component another test grants for a while).
static SHARED_IDENTITY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `kubectl auth can-i` as `user` (and its groups).
fn can_i(user: &str, groups: &[&str], args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let who = format!("--as={user}");
    all.push(&who);
    let group_flags: Vec<String> = groups.iter().map(|g| format!("--as-group={g}")).collect();
    all.extend(group_flags.iter().map(String::as_str));
    let out = kubectl(&all);
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// The operator's ServiceAccount `ns/name` as a user with its groups.
fn sa_groups(ns: &str) -> Vec<String> {
    vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}"), "system:authenticated".into()]
}

/// The matrix: (kubectl auth can-i arguments, allowed). `{ns}` is the operator's namespace,
/// `{pools}` a namespace where pools live, `{other}` one where none do, `{hook}` the webhook
/// configurations' name.
const MATRIX: &[(&str, bool)] = &[
    ("list nodepools.pools.kwok.x-k8s.io", true),
    ("watch podpools.pools.kwok.x-k8s.io -A", true),
    ("patch vmipools.pools.kwok.x-k8s.io --subresource=status -n {pools}", true),
    ("create nodepools.pools.kwok.x-k8s.io", false),
    ("create nodes", true),
    ("patch nodes", true),
    ("delete nodes", true),
    ("patch nodes --subresource=status", true),
    ("list pods -A", true),
    ("delete pods -n {other}", true),
    ("create pods -n {pools}", true),
    ("create pods -n {other}", false),
    ("patch pods -n {other}", false),
    ("patch pods --subresource=status -n {other}", true),
    ("create virtualmachineinstances.kubevirt.io -n {pools}", true),
    ("create virtualmachineinstances.kubevirt.io -n {other}", false),
    ("create leases.coordination.k8s.io -n kube-node-lease", true),
    ("patch leases.coordination.k8s.io -n kube-node-lease", true),
    ("delete leases.coordination.k8s.io -n kube-node-lease", false),
    ("create leases.coordination.k8s.io -n {ns}", true),
    ("create leases.coordination.k8s.io -n {other}", false),
    ("get secrets -A", false),
    ("list configmaps -A", false),
    ("get validatingwebhookconfigurations.admissionregistration.k8s.io/{hook}", true),
    ("patch validatingwebhookconfigurations.admissionregistration.k8s.io/{hook}", false),
    ("patch mutatingwebhookconfigurations.admissionregistration.k8s.io/{hook}", false),
    ("create validatingwebhookconfigurations.admissionregistration.k8s.io", false),
    ("impersonate serviceaccounts/kubevirt-handler -n kubevirt", false),
    ("impersonate serviceaccounts/kubevirt-handler -n {other}", false),
    ("create subjectaccessreviews.authorization.k8s.io", true),
    ("create events.events.k8s.io -n {other}", true),
    ("create clusterroles.rbac.authorization.k8s.io", false),
];

/// The matrix for the ServiceAccount `ns/name`; returns the rows that came out wrong.
fn wrong_rows(ns: &str, name: &str, pools: &str, other: &str, hook: &str) -> Vec<String> {
    let user = format!("system:serviceaccount:{ns}:{name}");
    let groups = sa_groups(ns);
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    MATRIX
        .iter()
        .filter_map(|(row, allowed)| {
            let filled =
                row.replace("{ns}", ns).replace("{pools}", pools).replace("{other}", other).replace("{hook}", hook);
            let args: Vec<&str> = filled.split_whitespace().collect();
            (can_i(&user, &groups, &args) != *allowed).then(|| format!("{filled}: expected {allowed}"))
        })
        .collect()
}

/// The RBAC documents of a rendered install (roles, bindings, the ServiceAccount).
fn rbac_docs(yaml: &str) -> String {
    let kinds = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
    yaml.split("\n---")
        .filter(|doc| doc.lines().any(|l| kinds.iter().any(|k| l.trim() == format!("kind: {k}"))))
        .map(|d| format!("---\n{}\n", d.trim_start_matches('\n')))
        .collect()
}

#[tokio::test]
async fn config_and_chart_grant_the_same_least_privilege_matrix() {
    let _one_at_a_time = SHARED_IDENTITY.lock().await;
    let client = client().await;
    let pools = TestNamespace::new(&client, "sec-pools").await;
    let other = TestNamespace::new(&client, "sec-other").await;
    // config/: the operator in kwok-pools, pools allowed in `pools` by the RoleBinding the
    // README tells a user to make.
    kubectl_ok(&["apply", "-f", repo().join("config/namespace.yaml").to_str().unwrap()]);
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        repo().join("config/rbac.yaml").to_str().unwrap(),
    ]);
    // The base config only: the optional registration component is judged on its own.
    let registration = repo().join("config/components/webhook-registration/rbac.yaml");
    let _ = kubectl(&["delete", "-f", registration.to_str().unwrap(), "--ignore-not-found"]);
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kwok-pools-pool-children, namespace: {}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kwok-pools-pool-children}}\nsubjects: [{{kind: ServiceAccount, name: kwok-pools, namespace: kwok-pools}}]\n",
        pools.name
    ));
    let config_wrong = wrong_rows("kwok-pools", "kwok-pools", &pools.name, &other.name, "kwok-pools");

    // The chart: a release of its own, pools allowed in the same namespace.
    let release = unique("sec");
    let chart_ns = TestNamespace::new(&client, &release).await;
    let rendered = Command::new(repo().join("bin/helm"))
        .args(["template", &release, repo().join("charts/kwok-pools").to_str().unwrap(), "--namespace", &chart_ns.name])
        .args(["--set", &format!("rbac.poolNamespaces={{{}}}", pools.name)])
        .output()
        .expect("bin/helm (make helm)");
    assert!(rendered.status.success(), "{}", String::from_utf8_lossy(&rendered.stderr));
    apply(&rbac_docs(&String::from_utf8_lossy(&rendered.stdout)));
    // The chart names its ServiceAccount, roles and webhook configurations after the release.
    let chart_name = release.clone();
    let hook = "kwok-pools".to_string();
    let chart_wrong = wrong_rows(&chart_ns.name, &chart_name, &pools.name, &other.name, &hook);
    // The chart's cluster-wide objects are named after the release: leave none behind.
    for kind in ["clusterrole", "clusterrolebinding"] {
        for suffix in ["", "-pool-children", "-pools-view", "-pools-edit"] {
            delete_quietly(kind, &format!("{chart_name}{suffix}"));
        }
    }
    assert!(config_wrong.is_empty(), "config/rbac.yaml:\n{}", config_wrong.join("\n"));
    assert!(chart_wrong.is_empty(), "the chart:\n{}", chart_wrong.join("\n"));
}

#[tokio::test]
async fn people_get_the_pools_through_the_built_in_view_and_edit_roles() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "sec-people").await;
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        repo().join("config/rbac.yaml").to_str().unwrap(),
    ]);
    for (who, role) in [("alice", "view"), ("bob", "edit")] {
        apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {who}, namespace: {}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n",
            ns.name
        ));
    }
    // Cluster-wide: edit (carol) does not reach the cluster-scoped NodePools; their own role
    // (dave) does.
    let (carol, dave) = (unique("carol"), unique("dave"));
    for (who, role) in [(&carol, "edit"), (&dave, "kwok-pools-cluster-pools-edit")] {
        apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {who}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n"
        ));
    }
    wait_for("NodePools kept out of a cluster-wide edit", T, || async {
        let rows = [
            (&carol, "create", "podpools.pools.kwok.x-k8s.io", true),
            (&carol, "create", "nodepools.pools.kwok.x-k8s.io", false),
            (&carol, "delete", "nodepools.pools.kwok.x-k8s.io", false),
            (&dave, "create", "nodepools.pools.kwok.x-k8s.io", true),
            (&dave, "delete", "nodepools.pools.kwok.x-k8s.io", true),
        ];
        let wrong: Vec<String> = rows
            .iter()
            .filter(|(who, verb, what, want)| can_i(who, &["system:authenticated"], &[*verb, *what, "-A"]) != *want)
            .map(|(who, verb, what, want)| format!("{who} {verb} {what}: expected {want}"))
            .collect();
        if wrong.is_empty() { Ok(()) } else { Err(wrong.join("; ")) }
    })
    .await;
    for who in [&carol, &dave] {
        delete_quietly("clusterrolebinding", who);
    }
    let n = ns.name.clone();
    // The aggregation controller folds the pools into the built-in roles within moments.
    wait_for("the pools in the view and edit roles", T, || {
        let n = n.clone();
        async move {
            let rows = [
                ("alice", "get", "podpools.pools.kwok.x-k8s.io", true),
                ("alice", "create", "podpools.pools.kwok.x-k8s.io", false),
                ("bob", "create", "podpools.pools.kwok.x-k8s.io", true),
                ("bob", "update", "podpools.pools.kwok.x-k8s.io/scale", true),
                ("bob", "delete", "vmipools.pools.kwok.x-k8s.io", true),
            ];
            let wrong: Vec<String> = rows
                .iter()
                .filter(|(who, verb, what, want)| {
                    let (resource, sub) = what.split_once('/').map_or((*what, None), |(r, s)| (r, Some(s)));
                    let mut args = vec![*verb, resource, "-n", n.as_str()];
                    let subresource;
                    if let Some(s) = sub {
                        subresource = format!("--subresource={s}");
                        args.push(&subresource);
                    }
                    can_i(who, &["system:authenticated"], &args) != *want
                })
                .map(|(who, verb, what, want)| format!("{who} {verb} {what}: expected {want}"))
                .collect();
            if wrong.is_empty() { Ok(()) } else { Err(wrong.join("; ")) }
        }
    })
    .await;
}

#[tokio::test]
async fn the_operator_identity_cannot_touch_a_real_node_its_lease_or_unconfined_pods() {
    let _one_at_a_time = SHARED_IDENTITY.lock().await;
    let client = client().await;
    let ns = TestNamespace::new(&client, "sec-policy").await;
    for file in ["namespace.yaml", "rbac.yaml", "policy.yaml"] {
        kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            repo().join("config").join(file).to_str().unwrap(),
        ]);
    }
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kwok-pools-pool-children, namespace: {}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kwok-pools-pool-children}}\nsubjects: [{{kind: ServiceAccount, name: kwok-pools, namespace: kwok-pools}}]\n",
        ns.name
    ));
    let real = unique("real-node");
    let fake = unique("fake-node");
    // A real node (as an administrator registers it) and a simulated one, with their Leases.
    apply(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {real}}}\n---\napiVersion: v1\nkind: Node\nmetadata: {{name: {fake}, annotations: {{kwok.x-k8s.io/node: fake}}}}\n---\napiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {real}, namespace: kube-node-lease}}\nspec: {{holderIdentity: {real}, leaseDurationSeconds: 40}}\n"
    ));
    let as_sa = [
        "--as=system:serviceaccount:kwok-pools:kwok-pools",
        "--as-group=system:serviceaccounts",
        "--as-group=system:authenticated",
    ];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&as_sa);
        let out = kubectl(&all);
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // The policies take a moment to be loaded by the API server.
    wait_for("the policy to refuse a write to a real node", T, || {
        let real = real.clone();
        async move {
            let (ok, err) = run(&["label", "node", &real, "touched=yes", "--overwrite"]);
            if !ok && err.contains("may write only simulated nodes") { Ok(()) } else { Err(format!("{ok} {err}")) }
        }
    })
    .await;
    let denied = |(ok, err): (bool, String), what: &str, says: &str| {
        assert!(!ok && err.contains(says), "{what}: {err}");
    };
    // Status writes as the operator makes them (a patch of the subresource, no read first).
    let (_dir, sa) = service_account_kubeconfig("kwok-pools", "kwok-pools");
    let kc = kube::config::Kubeconfig::read_from(&sa).unwrap();
    let as_operator =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let refused = |r: kube::Result<serde_json::Value>, what: &str, says: &str| match r {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 && s.message.contains(says), "{what}: {}", s.message),
        other => panic!("{what}: {other:?}"),
    };
    let pp = kube::api::PatchParams::default();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(as_operator.clone());
    let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    refused(
        nodes.patch_status(&real, &pp, &kube::api::Patch::Merge(&ready)).await.map(|_| serde_json::Value::Null),
        "the status of a real node",
        "may write only simulated nodes",
    );
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(as_operator.clone(), "kube-node-lease");
    let renew = serde_json::json!({"spec": {"renewTime": "2030-01-01T00:00:00.000000Z"}});
    refused(
        leases.patch(&real, &pp, &kube::api::Patch::Merge(&renew)).await.map(|_| serde_json::Value::Null),
        "a real node's Lease",
        "Leases of simulated nodes",
    );
    denied(run(&["delete", "node", &real]), "deleting a real node", "may write only simulated nodes");
    denied(
        run(&["annotate", "node", &real, "kwok.x-k8s.io/node=fake"]),
        "making a real node look simulated",
        "may write only simulated nodes",
    );
    let (ok, err) = run(&["label", "node", &fake, "touched=yes", "--overwrite"]);
    assert!(ok, "a simulated node may be written: {err}");
    // The claim of a fallback pod range (a Lease in kube-node-lease) is the operator's to make.
    let fake_node = nodes.get(&fake).await.unwrap();
    let claim = kwok_pools::kubelet::pods::fallback::claim_lease(&fake_node, &"10.250.7.0/24".parse().unwrap());
    let claim_name = claim.metadata.name.clone().unwrap();
    leases
        .create(&kube::api::PostParams::default(), &claim)
        .await
        .expect("the policy lets the operator claim a fallback block");
    let _ = kubectl(&["delete", "lease", &claim_name, "-n", "kube-node-lease", "--wait=false"]);
    // Pods: created only if they select simulated nodes (unless the namespace says otherwise).
    denied(
        run(&["run", "loose", "-n", &ns.name, "--image=nginx"]),
        "a pod that may land on a real node",
        "select simulated nodes",
    );
    let confined = r#"{"spec":{"nodeSelector":{"type":"kwok"}}}"#;
    let (ok, err) = run(&["run", "confined", "-n", &ns.name, "--image=nginx", &format!("--overrides={confined}")]);
    assert!(ok, "a pod that selects simulated nodes: {err}");
    kubectl_ok(&["label", "namespace", &ns.name, "pools.kwok.x-k8s.io/unconfined=true"]);
    wait_for("an unconfined namespace to take any pod", T, || {
        let ns = ns.name.clone();
        async move {
            let (ok, err) = run(&["run", "anywhere", "-n", &ns, "--image=nginx"]);
            if ok { Ok(()) } else { Err(err) }
        }
    })
    .await;
    // A pod that neither selects nor tolerates simulated nodes: its status is not the
    // operator's to write.
    kubectl_ok(&["run", "admins", "-n", &ns.name, "--image=nginx"]);
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(as_operator, &ns.name);
    let running = serde_json::json!({"status": {"phase": "Running"}});
    refused(
        pods.patch_status("admins", &pp, &kube::api::Patch::Merge(&running)).await.map(|_| serde_json::Value::Null),
        "a real pod's status",
        "may run on simulated nodes",
    );
    delete_quietly("node", &real);
    delete_quietly("node", &fake);
    let _ = kubectl(&["delete", "lease", &real, "-n", "kube-node-lease", "--wait=false"]);
}

/// A client for the cluster acting as `user`, with the user-info extra `extra` (key, value).
async fn impersonating(user: &str, extra: Option<(&str, &str)>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    if let Some((key, value)) = extra {
        config
            .headers
            .push((format!("impersonate-extra-{key}").parse().unwrap(), http::HeaderValue::from_str(value).unwrap()));
    }
    kube::Client::try_from(config).unwrap()
}

/// A refusal by an admission policy that says `says`.
fn refused_saying<T: std::fmt::Debug>(r: kube::Result<T>, what: &str, says: &str) {
    match r {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 && s.message.contains(says), "{what}: {}", s.message),
        other => panic!("{what}: expected a refusal saying {says:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn the_operator_identity_writes_no_untainted_node_real_vmi_other_slice_or_daemonset_pod() {
    let _one_at_a_time = SHARED_IDENTITY.lock().await;
    let client = client().await;
    let ns = TestNamespace::new(&client, "sec-more").await;
    for file in ["namespace.yaml", "rbac.yaml", "policy.yaml"] {
        kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            repo().join("config").join(file).to_str().unwrap(),
        ]);
    }
    let (_dir, sa) = service_account_kubeconfig("kwok-pools", "kwok-pools");
    let kc = kube::config::Kubeconfig::read_from(&sa).unwrap();
    let op =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let (pp, post) = (kube::api::PatchParams::default(), kube::api::PostParams::default());
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(op.clone());

    // Nodes: none created without the fake taint (the policy takes a moment to load).
    let bare = unique("untainted");
    let untainted: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": bare, "annotations": {"kwok.x-k8s.io/node": "fake"}}
    }))
    .unwrap();
    let nodes_c = nodes.clone();
    wait_for("the policy to refuse an untainted node", T, || {
        let (nodes, untainted) = (nodes_c.clone(), untainted.clone());
        async move {
            match nodes.create(&kube::api::PostParams::default(), &untainted).await {
                Err(kube::Error::Api(s)) if s.message.contains("creates only nodes with the taint") => Ok(()),
                Ok(_) => {
                    delete_quietly("node", untainted.metadata.name.as_deref().unwrap());
                    Err("created".into())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // A simulated node of its own: the taint may not go, nor may a link-local address come.
    let fake = unique("tainted");
    let tainted: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": fake, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    nodes.create(&post, &tainted).await.expect("a tainted simulated node is the operator's to create");
    refused_saying(
        nodes.patch(&fake, &pp, &kube::api::Patch::Merge(&serde_json::json!({"spec": {"taints": []}}))).await,
        "dropping the fake taint",
        "may not remove the taint",
    );
    let metadata = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": "169.254.169.254"}]}});
    refused_saying(
        nodes.patch_status(&fake, &pp, &kube::api::Patch::Merge(&metadata)).await,
        "a cloud metadata address",
        "no link-local or unspecified address",
    );
    let fine = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.9"}]}});
    nodes.patch_status(&fake, &pp, &kube::api::Patch::Merge(&fine)).await.expect("a simulated address");

    // ResourceSlices: only its own (labelled as a pool's, owned by the node they name).
    let slice_name = unique("other-driver");
    apply(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {slice_name}}}\nspec:\n  driver: gpu.example.com\n  nodeName: {fake}\n  pool: {{name: {fake}, generation: 1, resourceSliceCount: 1}}\n  devices: [{{name: gpu-0}}]\n"
    ));
    let slices: kube::Api<k8s_openapi::api::resource::v1::ResourceSlice> = kube::Api::all(op.clone());
    refused_saying(
        slices
            .patch(&slice_name, &pp, &kube::api::Patch::Merge(&serde_json::json!({"metadata": {"labels": {"x": "y"}}})))
            .await,
        "another driver's slice",
        "only the ResourceSlices of simulated nodes",
    );
    refused_saying(slices.delete(&slice_name, &Default::default()).await, "deleting it", "only the ResourceSlices");
    // Its own: labelled as a device pool's and owned by the node it names.
    let fake_uid = nodes.get(&fake).await.unwrap().metadata.uid.unwrap();
    let own: k8s_openapi::api::resource::v1::ResourceSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{fake}-own"), "labels": {"pools.kwok.x-k8s.io/device-pool": "p"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": fake, "uid": fake_uid, "controller": true}]},
        "spec": {"driver": "gpu.example.com", "nodeName": fake, "pool": {"name": fake, "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]},
    }))
    .unwrap();
    slices.create(&post, &own).await.expect("a simulated node's own slice is the operator's to write");
    delete_quietly("resourceslice", &format!("{fake}-own"));

    // VMIs: a real one (running, neither selecting nor tolerating simulated nodes, not played
    // by the simulator) is not its to write, as itself or as KubeVirt's handler with its mark.
    let vmi = "real-vm";
    apply(&format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: {vmi}, namespace: {ns}}}\nspec:\n  domain: {{devices: {{}}, resources: {{requests: {{memory: 64Mi}}}}}}\nstatus: {{phase: Running}}\n",
        ns = ns.name
    ));
    kubectl_ok(&["patch", "vmi", vmi, "-n", &ns.name, "--type", "merge", "-p", r#"{"status":{"phase":"Running"}}"#]);
    let gvk = kube::api::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance");
    let resource = kube::api::ApiResource::from_gvk(&gvk);
    let vmis = |c: kube::Client| kube::Api::<kube::api::DynamicObject>::namespaced_with(c, &ns.name, &resource);
    let stop = serde_json::json!({"status": {"phase": "Failed"}});
    refused_saying(
        vmis(op.clone()).patch(vmi, &pp, &kube::api::Patch::Merge(&stop)).await,
        "a real VMI",
        "writes only VMIs on simulated nodes",
    );
    refused_saying(
        vmis(op.clone()).delete(vmi, &Default::default()).await.map(|_| ()),
        "deleting it",
        "writes only VMIs",
    );
    // (An administrator impersonates here; the operator's kubevirt-handler component grants it
    // that impersonation and the mark by name. KubeVirt's handler may patch VMIs, as KubeVirt's
    // install grants it.)
    let grant = unique("handler");
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {grant}}}\nrules: [{{apiGroups: [kubevirt.io], resources: [virtualmachineinstances], verbs: [get, patch]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {grant}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {grant}}}\nsubjects: [{{kind: ServiceAccount, name: kubevirt-handler, namespace: kubevirt}}]\n"
    ));
    let handler = impersonating(
        "system:serviceaccount:kubevirt:kubevirt-handler",
        Some((kwok_pools::api::conventions::IMPERSONATOR_EXTRA, kwok_pools::api::conventions::IMPERSONATOR_VALUE)),
    )
    .await;
    let vmis_c = vmis(handler);
    wait_for("the handler's right to count", T, || async {
        match vmis_c.patch(vmi, &pp, &kube::api::Patch::Merge(&stop)).await {
            Err(kube::Error::Api(s)) if s.message.contains("writes only VMIs on simulated nodes") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    delete_quietly("clusterrolebinding", &grant);
    delete_quietly("clusterrole", &grant);

    // A DaemonSet's pod (it tolerates every taint): deleted only once somebody else deletes it.
    let ds_pod = "node-agent";
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {ds_pod}, namespace: {ns}, finalizers: [example.com/hold]}}\nspec:\n  tolerations: [{{operator: Exists}}]\n  containers: [{{name: a, image: agent}}]\n",
        ns = ns.name
    ));
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(op.clone(), &ns.name);
    refused_saying(
        pods.delete(ds_pod, &Default::default()).await.map(|_| ()),
        "a DaemonSet's pod",
        "tolerates every taint",
    );
    kubectl_ok(&["delete", "pod", ds_pod, "-n", &ns.name, "--wait=false"]);
    pods.delete(ds_pod, &Default::default()).await.expect("once an administrator deletes it, the operator may finish");
    kubectl_ok(&[
        "patch",
        "pod",
        ds_pod,
        "-n",
        &ns.name,
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);

    // VirtualMachines (a VMIPool's): only those whose VMI selects simulated nodes, even where
    // it may create VMs (a pool namespace).
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kwok-pools-pool-children, namespace: {}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kwok-pools-pool-children}}\nsubjects: [{{kind: ServiceAccount, name: kwok-pools, namespace: kwok-pools}}]\n",
        ns.name
    ));
    let vms: kube::Api<kwok_pools::kinds::vmipool::vm::VirtualMachine> = kube::Api::namespaced(op.clone(), &ns.name);
    let vm = |name: &str, selector: serde_json::Value| -> kwok_pools::kinds::vmipool::vm::VirtualMachine {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"nodeSelector": selector, "domain": {"devices": {}}}}},
        }))
        .unwrap()
    };
    let real_vm = vm("real-vm", serde_json::json!({"disk": "ssd"}));
    let vms_c = vms.clone();
    wait_for("the policy to refuse a VM that may run on a real node", T, || {
        let (vms, real_vm) = (vms_c.clone(), real_vm.clone());
        async move {
            match vms.create(&kube::api::PostParams::default(), &real_vm).await {
                Err(kube::Error::Api(s))
                    if s.code == 403
                        && s.message.contains("only VirtualMachines whose template selects simulated nodes") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    vms.create(&post, &vm("fake-vm", serde_json::json!({"type": "kwok"})))
        .await
        .expect("a VM for simulated nodes is the operator's to create");
    // A VM that is no VMIPool's (its own, or somebody's) it may neither change nor delete.
    refused_saying(
        vms.patch("fake-vm", &pp, &kube::api::Patch::Merge(&serde_json::json!({"spec": {"runStrategy": "Always"}})))
            .await,
        "changing a VM that is no pool's",
        "only the VirtualMachines of VMIPools",
    );
    apply(&format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {{name: users-vm, namespace: {}}}\nspec: {{runStrategy: Halted, template: {{spec: {{domain: {{devices: {{}}}}}}}}}}\n",
        ns.name
    ));
    refused_saying(
        vms.delete("users-vm", &Default::default()).await.map(|_| ()),
        "deleting a user's VM",
        "only the VirtualMachines of VMIPools",
    );

    delete_quietly("node", &fake);
    delete_quietly("resourceslice", &slice_name);
}

#[tokio::test]
async fn creating_a_pool_needs_the_right_to_create_its_children() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "sec-sar").await;
    let scope = unique("sar");
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    // A person who may manage PodPools there, but not create pods.
    let who = unique("pool-user");
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {who}, namespace: {ns}}}\nrules: [{{apiGroups: [pools.kwok.x-k8s.io], resources: [podpools], verbs: [get, list, create, update, patch]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {who}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {who}}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n",
        ns = ns.name
    ));
    let pool = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: web, namespace: {}, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  podCount: 1\n  podTemplate:\n    spec:\n      nodeSelector: {{kubernetes.io/hostname: some-real-node}}\n      containers: [{{name: a, image: nginx}}]\n",
        ns.name
    );
    let as_user = format!("--as={who}");
    let out = kubectl_stdin(&["apply", "-f", "-", &as_user], Some(&pool));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&format!("{who} may not create pods in namespace {}", ns.name)),
        "{err}"
    );
    // Given the right to create pods, the same person may.
    apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {who}-pods, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\nsubjects: [{{kind: User, name: {who}, apiGroup: rbac.authorization.k8s.io}}]\n",
        ns = ns.name
    ));
    wait_for("the pool to be accepted", T, || {
        let (pool, as_user) = (pool.clone(), as_user.clone());
        async move {
            let out = kubectl_stdin(&["apply", "-f", "-", &as_user], Some(&pool));
            if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
        }
    })
    .await;
    // Its pod selects a real node, yet it is confined to simulated nodes: a real node's kubelet
    // would refuse it (its node selector does not match), and the scheduler never sends it.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), &ns.name);
    let pod = wait_for("the pool's pod", T, || {
        let pods = pods.clone();
        async move { pods.get_opt("web-0").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string()) }
    })
    .await;
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_selector.unwrap()["type"], "kwok", "confined to simulated nodes");
    op.stop();
}

/// The readiness text of `op` once it says `want`.
async fn readyz_saying(op: &Operator, want: &str) -> String {
    let url = format!("http://127.0.0.1:{}/readyz", op.metrics_port);
    wait_for(&format!("/readyz to say {want:?}"), T, || {
        let url = url.clone();
        async move {
            let r = reqwest::get(&url).await.map_err(|e| e.to_string())?;
            let text = r.text().await.unwrap_or_default();
            if text.contains(want) { Ok(text) } else { Err(text) }
        }
    })
    .await
}

#[tokio::test]
async fn a_failed_webhook_registration_leaves_the_replica_simulating_and_not_ready() {
    let _one_at_a_time = SHARED_IDENTITY.lock().await;
    let client = client().await;
    // Check mode with no configurations installed: nothing to find; the replica goes on.
    let scope = unique("unregistered");
    let mut op = Operator::start(&scope, &["--webhook-registration", "check"]);
    let why = readyz_saying(&op, "webhook not registered").await;
    assert!(why.contains("must both exist"), "{why}");
    apply(&nodepool_yaml(&scope, &scope, 2, ""));
    wait_ready_nodes(&client, &scope, 2, T).await;
    assert!(op.is_running(), "a failed registration ends nothing");
    op.stop();

    // Apply mode as the ServiceAccount without the registration rights: refused (403) and
    // retried; once the rights are granted, registered and Ready without a restart.
    for file in ["namespace.yaml", "rbac.yaml", "webhook.yaml", "policy.yaml"] {
        kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            repo().join("config").join(file).to_str().unwrap(),
        ]);
    }
    let registration = repo().join("config/components/webhook-registration/rbac.yaml");
    let _ = kubectl(&["delete", "-f", registration.to_str().unwrap(), "--ignore-not-found"]);
    let (_dir, sa) = service_account_kubeconfig("kwok-pools", "kwok-pools");
    let scope = unique("forbidden");
    let mut op = Operator::start_as(&scope, &["--instance", "kwok-pools", "--lease-namespace", "kwok-pools"], sa);
    let why = readyz_saying(&op, "webhook not registered").await;
    assert!(why.contains("forbidden"), "{why}");
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    kubectl_ok(&["apply", "--server-side", "-f", registration.to_str().unwrap()]);
    op.wait_ready().await;
    assert!(op.is_running());
    // The pool goes with the test, while its operator runs (else its node outlives both).
    kubectl_ok(&["delete", "nodepool", &scope, "--timeout=60s"]);
    op.stop();
    let _ = kubectl(&["delete", "-f", registration.to_str().unwrap(), "--ignore-not-found"]);
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        delete_quietly(kind, "kwok-pools");
    }
}

#[tokio::test]
async fn two_instances_without_selectors_never_reconcile_one_pool() {
    let client = client().await;
    let scope = unique("instances");
    let (a, b) = (unique("inst-a"), unique("inst-b"));
    // Neither is given a pool selector: their instances decide. b only reconciles (one
    // simulator for the scope's nodes).
    let mut op_a = Operator::start(&scope, &["--instance", &a, "--no-pool-selector"]);
    let mut op_b = Operator::start(&scope, &["--instance", &b, "--no-pool-selector", "--no-simulator"]);
    op_a.wait_ready().await;
    op_b.wait_ready().await;
    let labelled = |pool: &str, instance: &str| {
        NodePoolYaml::new(pool, &scope).count(2).pool_label("pools.kwok.x-k8s.io/instance", instance).yaml()
    };
    let (pool_a, pool_b) = (format!("{scope}-a"), format!("{scope}-b"));
    apply(&labelled(&pool_a, &a));
    apply(&labelled(&pool_b, &b));
    wait_ready_nodes(&client, &pool_a, 2, T).await;
    wait_ready_nodes(&client, &pool_b, 2, T).await;
    // Each pool is in the per-pool gauges of exactly its own instance.
    let has = |text: &str, pool: &str| text.contains(&format!("name=\"{pool}\""));
    let (ma, mb) = (op_a.metrics().await, op_b.metrics().await);
    assert!(has(&ma, &pool_a) && !has(&ma, &pool_b), "instance a reconciles only its pool");
    assert!(has(&mb, &pool_b) && !has(&mb, &pool_a), "instance b reconciles only its pool");
    // An unlabelled pool belongs to the default instance, which does not run here: untouched.
    let orphan = format!("{scope}-none");
    apply(&nodepool_yaml(&orphan, &scope, 1, ""));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pool_nodes(&client, &orphan).await.is_empty(), "no named instance takes an unlabelled pool");
    delete_quietly("nodepool", &orphan);
    op_a.stop();
    op_b.stop();
}
