//! Storage on simulated nodes, on the real control plane: the simulated CSI driver provisions
//! the claims of a StatefulSet's `volumeClaimTemplates` in the zone of each pod's node
//! (WaitForFirstConsumer), the attach/detach controller's VolumeAttachments are attached, the
//! pods start; a node's attach limit holds the next pod Pending with the scheduler's
//! NodeVolumeLimits reason; a claim grows; the volumes go with their claims (Delete); a pod
//! mounting a ConfigMap that does not exist waits in ContainerCreating with FailedMount; the
//! failure knobs fail as the provisioner and the attach/detach controller report it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
use kube::api::{Api, ListParams};
use std::collections::HashMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(240);
const DRIVER: &str = "disk.csi.pools.kwok.x-k8s.io";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Deletes a cluster-scoped object when dropped, pass or fail.
struct Cleanup(&'static str, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        delete_quietly(self.0, &self.1);
    }
}

/// A StorageClass of the driver named `name`, with `parameters` (YAML flow map).
fn storage_class(name: &str, parameters: &str) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {name}}}\nprovisioner: {DRIVER}\nvolumeBindingMode: WaitForFirstConsumer\nallowVolumeExpansion: true\nreclaimPolicy: Delete\nparameters: {parameters}\n"
    )
}

/// A StatefulSet of `replicas` pods (started in parallel) on the scope's nodes, each with a
/// 1Gi claim of `class` (the cluster's default when `None`).
fn stateful_set(name: &str, ns: &str, scope: &str, replicas: u32, class: Option<&str>) -> String {
    let class = class.map(|c| format!("\n      storageClassName: {c}")).unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  serviceName: {name}\n  replicas: {replicas}\n  podManagementPolicy: Parallel\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: db\n        image: postgres:17\n        volumeMounts: [{{name: data, mountPath: /data}}]\n  volumeClaimTemplates:\n  - metadata: {{name: data}}\n    spec:\n      accessModes: [ReadWriteOnce]{class}\n      resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

async fn wait_ready_replicas(client: &kube::Client, ns: &str, name: &str, replicas: i32) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("{replicas} replicas of {name} Ready"), T, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        let ready = s.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready == replicas { Ok(()) } else { Err(format!("{ready} Ready")) }
    })
    .await;
}

/// Events in `ns` with `reason` about objects named `name` (any name when empty).
async fn events(client: &kube::Client, ns: &str, reason: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let all = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    all.into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| name.is_empty() || e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// A simulated kubelet's answer at `base` (its address and port) for `path`, as the cluster
/// admin.
async fn kubelet_get(base: &str, path: &str) -> String {
    admin_client().get(format!("{base}{path}")).send().await.unwrap().text().await.unwrap()
}

fn storage_of(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.status.as_ref()?.capacity.as_ref()?.get("storage").map(|q| q.0.clone())
}

fn affinity_zone(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
    let e = terms.first()?.match_expressions.as_ref()?.iter().find(|e| e.key == ZONE)?;
    e.values.as_ref()?.first().cloned()
}

#[tokio::test]
async fn a_statefulset_with_claims_starts_each_volume_in_its_pods_zone_grows_and_goes_with_its_claims() {
    let client = client().await;
    let scope = unique("sts");
    let op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "sts").await;
    let pool = format!("{scope}-pool");
    let _pool = Cleanup("nodepool", pool.clone());
    apply(&NodePoolYaml::new(&pool, &scope).count(10).spec("  topology: {zones: [zone-a, zone-b, zone-c]}\n").yaml());
    wait_ready_nodes(&client, &pool, 10, T).await;
    // The default class `cluster create --storage-class` installed.
    let classes = kubectl_ok(&["get", "storageclass", "--no-headers"]);
    assert!(classes.lines().any(|l| l.starts_with("simulated-disk (default)") && l.contains(DRIVER)), "{classes}");
    apply(&stateful_set("db", &ns.name, &scope, 50, None));
    wait_ready_replicas(&client, &ns.name, "db", 50).await;

    // Every claim bound, every volume the driver's, in the zone of its pod's node.
    let nodes: Api<Node> = Api::all(client.clone());
    let zones: HashMap<String, String> = pool_nodes(&client, &pool)
        .await
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap(), n.metadata.labels.unwrap()[ZONE].clone()))
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut handles = Vec::new();
    for i in 0..50 {
        let pod = pods.get(&format!("db-{i}")).await.unwrap();
        let node = pod.spec.unwrap().node_name.unwrap();
        let pvc = claims.get(&format!("data-db-{i}")).await.unwrap();
        assert_eq!(pvc.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Bound"));
        let pv = volumes.get(pvc.spec.as_ref().unwrap().volume_name.as_ref().unwrap()).await.unwrap();
        assert_eq!(pv.spec.as_ref().unwrap().csi.as_ref().unwrap().driver, DRIVER);
        assert_eq!(affinity_zone(&pv).as_ref(), Some(&zones[&node]), "db-{i} on {node}: its volume's zone");
        handles.push((pv.metadata.name.clone().unwrap(), node));
    }
    // Attached by the attach/detach controller's VolumeAttachments; each node has its CSINode.
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let all = attachments.list(&ListParams::default()).await.unwrap().items;
    for (pv, node) in &handles {
        let va =
            all.iter().find(|a| a.spec.source.persistent_volume_name.as_ref() == Some(pv) && &a.spec.node_name == node);
        assert!(va.is_some_and(|a| a.status.as_ref().is_some_and(|s| s.attached)), "{pv} attached to {node}");
    }
    // The driver's CSIDriver: attach required, so the controller makes VolumeAttachments.
    let drivers: Api<k8s_openapi::api::storage::v1::CSIDriver> = Api::all(client.clone());
    let driver = drivers.get(DRIVER).await.expect("the driver's CSIDriver");
    assert_eq!(driver.spec.attach_required, Some(true));
    assert_eq!(driver.spec.volume_lifecycle_modes.as_deref(), Some(&["Persistent".to_string()][..]));
    let csi_nodes: Api<CSINode> = Api::all(client.clone());
    for node in zones.keys() {
        let c = csi_nodes.get(node).await.unwrap();
        let d = c.spec.drivers.iter().find(|d| d.name == DRIVER).expect("the driver registered");
        assert_eq!(d.allocatable.as_ref().and_then(|a| a.count), Some(39), "the default attach limit");
        assert_eq!(d.topology_keys.as_deref(), Some(&[ZONE.to_string()][..]));
        let n = nodes.get(node).await.unwrap();
        assert_eq!(n.metadata.annotations.unwrap()["volumes.kubernetes.io/controller-managed-attach-detach"], "true");
    }

    // The kubelet reports the mounted claim: /stats/summary and kubelet_volume_stats_*.
    // (Called as the API server calls them: its node proxy refuses the loopback addresses.)
    let n = nodes.get(&handles[0].1).await.unwrap();
    let host = n
        .status
        .as_ref()
        .unwrap()
        .addresses
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.type_ == "Hostname")
        .unwrap()
        .address
        .clone();
    let base = format!("https://{host}:{}", op.kubelet_port);
    let summary: serde_json::Value = serde_json::from_str(&kubelet_get(&base, "/stats/summary").await).unwrap();
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "db-0")
        .expect("db-0 in the summary");
    let volume = pod["volume"].as_array().unwrap().iter().find(|v| v["name"] == "data").expect("its data volume");
    assert_eq!(volume["pvcRef"]["name"], "data-db-0");
    assert_eq!(volume["capacityBytes"], 1u64 << 30);
    let used = volume["usedBytes"].as_u64().unwrap();
    assert_eq!(used, (1u64 << 30) / 10, "the class's default usedPercent (10)");
    let metrics = kubelet_get(&base, "/metrics").await;
    let series = format!(
        "kubelet_volume_stats_capacity_bytes{{namespace=\"{}\",persistentvolumeclaim=\"data-db-0\"}} 1073741824",
        ns.name
    );
    assert!(metrics.contains(&series), "{series} in {metrics}");

    // A claim grown from 1Gi to 2Gi shows 2Gi, its volume too.
    kubectl_ok(&[
        "-n",
        &ns.name,
        "patch",
        "pvc",
        "data-db-0",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ]);
    wait_for("data-db-0 at 2Gi", Duration::from_secs(60), || async {
        let pvc = claims.get("data-db-0").await.map_err(|e| e.to_string())?;
        if storage_of(&pvc).as_deref() == Some("2Gi") { Ok(()) } else { Err(format!("{:?}", storage_of(&pvc))) }
    })
    .await;
    let pv = volumes.get(&handles[0].0).await.unwrap();
    assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "2Gi");
    assert!(!events(&client, &ns.name, "VolumeResizeSuccessful", "data-db-0").await.is_empty());

    // Deleting the StatefulSet and its claims removes the volumes (reclaim policy Delete).
    kubectl_ok(&["-n", &ns.name, "delete", "statefulset", "db", "--wait=false"]);
    kubectl_ok(&["-n", &ns.name, "delete", "pvc", "--all", "--wait=false"]);
    // Detached as the pods go: the attach/detach controller deletes their attachments.
    wait_for("the 50 attachments gone", T, || async {
        let left = attachments.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let left = left
            .iter()
            .filter(|a| handles.iter().any(|(h, _)| a.spec.source.persistent_volume_name.as_ref() == Some(h)))
            .count();
        if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
    })
    .await;
    wait_for("the 50 volumes deleted", T, || async {
        let left = volumes.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let left: Vec<_> =
            left.iter().filter(|v| handles.iter().any(|(h, _)| v.metadata.name.as_ref() == Some(h))).collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{} left", left.len())) }
    })
    .await;
}

#[tokio::test]
async fn a_nodes_attach_limit_holds_the_next_pod_pending_with_the_schedulers_reason() {
    let client = client().await;
    let scope = unique("limit");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "limit").await;
    let (pool, class) = (format!("{scope}-pool"), format!("{scope}-disk"));
    let _pool = Cleanup("nodepool", pool.clone());
    let _class = Cleanup("storageclass", class.clone());
    apply(&storage_class(&class, "{}"));
    apply(&NodePoolYaml::new(&pool, &scope).count(1).spec("  storage: {attachLimit: 16}\n").yaml());
    let node = wait_ready_nodes(&client, &pool, 1, T).await.remove(0).metadata.name.unwrap();
    let csi_nodes: Api<CSINode> = Api::all(client.clone());
    wait_for("the node's CSINode with its limit", Duration::from_secs(60), || async {
        let c = csi_nodes.get(&node).await.map_err(|e| e.to_string())?;
        let count = c.spec.drivers.iter().find(|d| d.name == DRIVER).and_then(|d| d.allocatable.as_ref()?.count);
        if count == Some(16) { Ok(()) } else { Err(format!("{count:?}")) }
    })
    .await;
    apply(&stateful_set("vol", &ns.name, &scope, 17, Some(&class)));
    wait_ready_replicas(&client, &ns.name, "vol", 16).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pending = wait_for("one pod Unschedulable", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let pending: Vec<Pod> = list.into_iter().filter(|p| p.spec.as_ref().unwrap().node_name.is_none()).collect();
        let reason = pending.first().and_then(|p| {
            let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?.clone();
            Some((c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
        });
        match reason {
            Some(r) if pending.len() == 1 && r.0 == "Unschedulable" => Ok(r.1),
            other => Err(format!("{} pending: {other:?}", pending.len())),
        }
    })
    .await;
    assert!(pending.contains("exceed max volume count"), "the scheduler's NodeVolumeLimits reason: {pending}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let placed = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.is_some())
        .count();
    assert_eq!(placed, 16, "never more than the limit on the node");
}

#[tokio::test]
async fn a_pod_mounting_a_missing_configmap_waits_in_container_creating_until_it_exists() {
    let client = client().await;
    let scope = unique("mount");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "mount").await;
    let pool = format!("{scope}-pool");
    let _pool = Cleanup("nodepool", pool.clone());
    apply(&NodePoolYaml::new(&pool, &scope).count(1).yaml());
    wait_ready_nodes(&client, &pool, 1, T).await;
    let pod = scoped_pod(
        "web",
        &ns.name,
        &scope,
        "  volumes:\n  - {name: config, configMap: {name: app-config}}\n  - {name: maybe, secret: {secretName: absent, optional: true}}\n  - {name: bundle, projected: {sources: [{secret: {name: app-tls}}]}}\n",
    );
    apply(&pod);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let note = wait_for("FailedMount", Duration::from_secs(60), || async {
        let e = events(&client, &ns.name, "FailedMount", "web").await;
        e.first().and_then(|e| e.note.clone()).ok_or_else(|| "no event yet".to_string())
    })
    .await;
    assert!(
        note.contains(r#"MountVolume.SetUp failed for volume "config" : configmap "app-config" not found"#),
        "{note}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = pods.get("web").await.unwrap();
    assert_eq!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Pending"));
    let table = kubectl_ok(&["-n", &ns.name, "get", "pod", "web", "--no-headers"]);
    assert!(table.contains("ContainerCreating"), "{table}");
    kubectl_ok(&["-n", &ns.name, "create", "configmap", "app-config", "--from-literal=a=b"]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let phase = pods.get("web").await.unwrap().status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Pending"), "its Secret is still missing");
    kubectl_ok(&["-n", &ns.name, "create", "secret", "generic", "app-tls", "--from-literal=a=b"]);
    wait_for("web Running once its ConfigMap and Secret exist", Duration::from_secs(60), || async {
        let p = pods.get("web").await.map_err(|e| e.to_string())?;
        let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Running" { Ok(()) } else { Err(phase) }
    })
    .await;
}

#[tokio::test]
async fn provisioning_and_attach_failures_are_reported_as_the_provisioner_and_the_controller_do() {
    let client = client().await;
    let scope = unique("fail");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "fail").await;
    let pool = format!("{scope}-pool");
    let (noprov, noattach) = (format!("{scope}-noprov"), format!("{scope}-noattach"));
    let _pool = Cleanup("nodepool", pool.clone());
    let _c1 = Cleanup("storageclass", noprov.clone());
    let _c2 = Cleanup("storageclass", noattach.clone());
    apply(&storage_class(&noprov, "{provisionFailurePercent: '100'}"));
    apply(&storage_class(&noattach, "{attachFailurePercent: '100', attachDelay: 1s}"));
    apply(&NodePoolYaml::new(&pool, &scope).count(1).yaml());
    wait_ready_nodes(&client, &pool, 1, T).await;
    apply(&stateful_set("np", &ns.name, &scope, 1, Some(&noprov)));
    apply(&stateful_set("na", &ns.name, &scope, 1, Some(&noattach)));
    let note = wait_for("ProvisioningFailed on data-np-0", Duration::from_secs(60), || async {
        let e = events(&client, &ns.name, "ProvisioningFailed", "data-np-0").await;
        e.first().and_then(|e| e.note.clone()).ok_or_else(|| "no event yet".to_string())
    })
    .await;
    assert!(note.contains("provisionFailurePercent") && note.contains(&noprov), "{note}");
    // The attach/detach controller reports the attach error on the pod.
    let note = wait_for("FailedAttachVolume on na-0", T, || async {
        let e = events(&client, &ns.name, "FailedAttachVolume", "na-0").await;
        e.first().and_then(|e| e.note.clone()).ok_or_else(|| "no event yet".to_string())
    })
    .await;
    assert!(note.contains("simulated attach failure"), "{note}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for name in ["np-0", "na-0"] {
        let p = pods.get(name).await.unwrap();
        assert_eq!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Pending"), "{name} never starts");
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let pvc = claims.get("data-np-0").await.unwrap();
    assert_eq!(pvc.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
}

#[tokio::test]
async fn immediate_claims_bind_without_a_pod_retained_volumes_stay_and_unsupported_modes_are_refused() {
    let client = client().await;
    let scope = unique("imm");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "imm").await;
    let (pool, class) = (format!("{scope}-pool"), format!("{scope}-keep"));
    let _pool = Cleanup("nodepool", pool.clone());
    let _class = Cleanup("storageclass", class.clone());
    // Its own zone: the class allows only it, so no other operator on the cluster takes the claim.
    let zone = format!("{scope}-zone");
    apply(&NodePoolYaml::new(&pool, &scope).count(2).spec(&format!("  topology: {{zones: [{zone}]}}\n")).yaml());
    wait_ready_nodes(&client, &pool, 2, T).await;
    apply(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\nprovisioner: {DRIVER}\nvolumeBindingMode: Immediate\nreclaimPolicy: Retain\nallowedTopologies: [{{matchLabelExpressions: [{{key: {ZONE}, values: [{zone}]}}]}}]\n"
    ));
    let claim = |name: &str, mode: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: {}}}\nspec:\n  storageClassName: {class}\n  accessModes: [{mode}]\n  resources: {{requests: {{storage: 3Gi}}}}\n",
            ns.name
        )
    };
    apply(&claim("kept", "ReadWriteOnce"));
    apply(&claim("shared", "ReadWriteMany"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    // Bound with no pod (Immediate), 3Gi, in a zone of the simulated nodes.
    let pv_name = wait_for("kept Bound", Duration::from_secs(60), || async {
        let c = claims.get("kept").await.map_err(|e| e.to_string())?;
        match (c.status.as_ref().and_then(|s| s.phase.as_deref()), c.spec.as_ref().and_then(|s| s.volume_name.clone()))
        {
            (Some("Bound"), Some(v)) => Ok(v),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let _pv = Cleanup("persistentvolume", pv_name.clone());
    let pv = volumes.get(&pv_name).await.unwrap();
    assert_eq!(pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0, "3Gi");
    assert_eq!(affinity_zone(&pv).as_ref(), Some(&zone));
    // ReadWriteMany is not a block disk's: refused, naming the mode and the parameter.
    let note = wait_for("ProvisioningFailed on shared", Duration::from_secs(60), || async {
        let e = events(&client, &ns.name, "ProvisioningFailed", "shared").await;
        e.first().and_then(|e| e.note.clone()).ok_or_else(|| "no event yet".to_string())
    })
    .await;
    assert!(
        note.contains("access mode ReadWriteMany is not supported") && note.contains("parameters.accessModes"),
        "{note}"
    );
    // Retain: the claim goes, the volume stays, Released.
    kubectl_ok(&["-n", &ns.name, "delete", "pvc", "kept"]);
    wait_for("the retained volume Released", Duration::from_secs(60), || async {
        let pv = volumes.get(&pv_name).await.map_err(|e| e.to_string())?;
        let phase = pv.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Released" { Ok(()) } else { Err(phase) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await; // past the provisioner's resync
    assert!(volumes.get_opt(&pv_name).await.unwrap().is_some(), "a retained volume is kept");
}

#[tokio::test]
async fn the_samples_start_a_statefulset_as_written() {
    let client = client().await;
    let scope = unique("smp");
    let _op = Operator::start(&scope, &[]);
    let ns = TestNamespace::new(&client, "smp").await;
    let (pool, class) = (format!("{scope}-pool"), format!("{scope}-disk"));
    let _pool = Cleanup("nodepool", pool.clone());
    let _class = Cleanup("storageclass", class.clone());
    apply(&NodePoolYaml::new(&pool, &scope).count(3).spec("  topology: {zones: [zone-a, zone-b]}\n").yaml());
    wait_ready_nodes(&client, &pool, 3, T).await;
    // The samples as written, but for this test's name, scope and namespace: the class under
    // its own name and not the default (the cluster has one), the StatefulSet on the scope.
    let mut sc: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/storageclass.yaml")).unwrap();
    sc["metadata"]["name"] = class.clone().into();
    sc["metadata"].as_mapping_mut().unwrap().remove("annotations");
    apply(&serde_yaml::to_string(&sc).unwrap());
    let mut sts: serde_yaml::Value = serde_yaml::from_str(&read_repo_file("samples/statefulset.yaml")).unwrap();
    sts["metadata"]["namespace"] = ns.name.clone().into();
    sts["spec"]["template"]["spec"]["nodeSelector"] =
        serde_yaml::from_str(&format!("{{{SCOPE_LABEL}: {scope}}}")).unwrap();
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = class.clone().into();
    apply(&serde_yaml::to_string(&sts).unwrap());
    wait_ready_replicas(&client, &ns.name, "db", 3).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..3 {
        let c = claims.get(&format!("data-db-{i}")).await.unwrap();
        assert_eq!(c.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    }
    kubectl_ok(&["-n", &ns.name, "delete", "statefulset", "db", "--wait=false"]);
    kubectl_ok(&["-n", &ns.name, "delete", "pvc", "--all", "--wait=false"]);
}
