//! Fake accelerators end to end, with the real scheduler and the real ResourceClaim
//! controller: a NodePool's `spec.devices` become one ResourceSlice per node and driver; a
//! DeviceClass with a CEL selector, a ResourceClaimTemplate and a Deployment asking one device
//! per pod fill the devices and no more; scaling down frees them for another Deployment; a
//! change of the pool's devices republishes the slices in place.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::devices::*;
use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams};
use std::collections::HashSet;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A NodePool of 4 nodes, each with `count` devices of `driver` (none: no devices).
fn nodepool(scope: &str, driver: &str, count: Option<u32>) -> String {
    let devices = count.map_or(String::new(), |count| {
        format!(
            "  devices:
  - driver: {driver}
    count: {count}
    attributes: {{model: {{string: A100}}, cores: {{int: 6912}}}}
    capacity: {{memory: 80Gi}}
"
        )
    });
    pool_with(scope, 4, &devices, 225)
}

fn deployment(name: &str, ns: &str, scope: &str, replicas: u32) -> String {
    claiming(name, ns, scope, replicas, "one-gpu")
}

async fn slices(client: &kube::Client, driver: &str) -> Vec<ResourceSlice> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let all = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    all.into_iter().filter(|s| s.spec.driver == driver).collect()
}

#[tokio::test]
async fn the_scheduler_allocates_simulated_devices_and_no_more() {
    let client = client().await;
    let scope = unique("dra");
    let driver = format!("{scope}.example.com");
    let ns = TestNamespace::new(&client, "dra").await;
    let _op = Operator::start(&scope, &[]);
    apply(&nodepool(&scope, &driver, Some(2)));
    wait_ready_nodes(&client, &scope, 4, T).await;

    // One slice per node, the pool named after the node, two devices with their attributes.
    let published = wait_for("a slice per node", T, || async {
        let s = slices(&client, &driver).await;
        if s.len() == 4 { Ok(s) } else { Err(format!("{} slices", s.len())) }
    })
    .await;
    let nodes: HashSet<String> = published.iter().map(|s| s.spec.node_name.clone().unwrap()).collect();
    assert_eq!(nodes.len(), 4);
    for s in &published {
        assert_eq!(Some(&s.spec.pool.name), s.spec.node_name.as_ref());
        let devices = s.spec.devices.as_ref().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].attributes.as_ref().unwrap()["model"].string.as_deref(), Some("A100"));
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].kind, "Node");
    }

    // A DeviceClass written for the driver, a claim template, 9 pods asking one device each.
    let class = scope.clone();
    apply(&format!(
        "apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {class}}}
spec:
  selectors:
  - cel: {{expression: \"device.driver == '{driver}' && device.attributes['{driver}'].model == 'A100'\"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-gpu, namespace: {ns}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: {class}}}
",
        ns = ns.name
    ));
    apply(&deployment("first", &ns.name, &scope, 9));
    let pods = wait_pods(&client, &ns.name, "first", 8, 1, T).await;
    let waiting = pods.iter().find(|p| phase(p) == "Pending").unwrap();
    let why = wait_for("the scheduler's reason on the ninth pod", T, || async {
        let p: Pod = Api::namespaced(client.clone(), &ns.name)
            .get(waiting.metadata.name.as_deref().unwrap())
            .await
            .map_err(|e| e.to_string())?;
        let c = p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
        match c.and_then(|c| c.message) {
            Some(m) if m.contains("claim") => Ok(m),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(why.starts_with("0/"), "the scheduler's message: {why}");

    // Each running pod holds a device of its own node; no device twice.
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let all = claims.list(&ListParams::default()).await.unwrap().items;
    let mut held = HashSet::new();
    for pod in pods.iter().filter(|p| phase(p) == "Running") {
        let name = pod.metadata.name.as_deref().unwrap();
        let claim = all
            .iter()
            .find(|c| c.metadata.owner_references.iter().flatten().any(|o| o.name == name))
            .unwrap_or_else(|| panic!("{name} has a claim"));
        let results = claim
            .status
            .as_ref()
            .unwrap()
            .allocation
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .results
            .clone()
            .unwrap();
        assert_eq!(results[0].driver, driver);
        assert_eq!(
            Some(&results[0].pool),
            pod.spec.as_ref().unwrap().node_name.as_ref(),
            "{name}: a device of its node"
        );
        assert!(held.insert((results[0].pool.clone(), results[0].device.clone())), "a device held twice");
    }
    assert_eq!(held.len(), 8);

    // Scaling down frees devices: another Deployment takes them.
    kubectl_ok(&["scale", "deployment", "first", "-n", &ns.name, "--replicas", "4"]);
    wait_pods(&client, &ns.name, "first", 4, 0, T).await;
    apply(&deployment("second", &ns.name, &scope, 4));
    wait_pods(&client, &ns.name, "second", 4, 0, T).await;

    // More devices per node: the slices are republished in place with the pool's generation.
    apply(&nodepool(&scope, &driver, Some(3)));
    wait_for("three devices per node at a newer generation", T, || async {
        let s = slices(&client, &driver).await;
        let grown = s
            .iter()
            .filter(|s| s.spec.devices.as_ref().is_some_and(|d| d.len() == 3) && s.spec.pool.generation > 1)
            .count();
        if grown == 4 && s.len() == 4 { Ok(()) } else { Err(format!("{grown} of {}", s.len())) }
    })
    .await;
    kubectl_ok(&["scale", "deployment", "second", "-n", &ns.name, "--replicas", "8"]);
    wait_pods(&client, &ns.name, "second", 8, 0, T).await;

    // No devices any more: the slices go.
    apply(&nodepool(&scope, &driver, None));
    wait_for("no slice left", T, || async {
        let n = slices(&client, &driver).await.len();
        if n == 0 { Ok(()) } else { Err(format!("{n} slices")) }
    })
    .await;
    kubectl_ok(&["delete", "deviceclass", &class, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_whole_gpu_and_its_mig_partitions_exclude_each_other_under_nvidias_own_classes() {
    let client = client().await;
    let scope = unique("mig");
    let ns = TestNamespace::new(&client, "mig").await;
    let _op = Operator::start(&scope, &[]);
    let devices = "  devices:\n  - preset: nvidia-gpu\n    count: 1\n    partitions: [{name: 2g.20gb, count: 4, consumes: {memory: 20Gi}}]\n";
    apply(&pool_with(&scope, 1, devices, 226));
    wait_ready_nodes(&client, &scope, 1, T).await;
    // The classes exactly as NVIDIA's driver installs them.
    apply(&read_repo_file("samples/deviceclasses.yaml"));
    apply(&claim_template(&ns.name, "whole", "gpu.nvidia.com", ""));
    apply(&claim_template(&ns.name, "mig", "mig.nvidia.com", ""));

    apply(&claiming("whole", &ns.name, &scope, 1, "whole"));
    wait_pods(&client, &ns.name, "whole", 1, 0, T).await;
    let whole = held(&client, &ns.name, "whole").await;
    assert_eq!(
        whole.iter().map(|h| h.1.as_str()).collect::<Vec<_>>(),
        ["gpu-0"],
        "the class selects the whole GPU only"
    );

    // The whole GPU holds every counter: no partition fits beside it.
    apply(&claiming("part", &ns.name, &scope, 5, "mig"));
    wait_unschedulable(&client, &ns.name, "part", 5, T).await;

    // Once it goes, four partitions fit and the fifth does not; the whole GPU no longer fits.
    kubectl_ok(&["scale", "deployment", "whole", "-n", &ns.name, "--replicas", "0"]);
    wait_pods(&client, &ns.name, "part", 4, 1, T).await;
    let parts = held(&client, &ns.name, "part").await;
    let names: HashSet<&str> = parts.iter().map(|h| h.1.as_str()).collect();
    assert_eq!(names.len(), 4, "{parts:?}");
    assert!(names.iter().all(|n| n.starts_with("gpu-0-mig-2g20gb-")), "{parts:?}");
    wait_unschedulable(&client, &ns.name, "part", 1, T).await;
    kubectl_ok(&["scale", "deployment", "whole", "-n", &ns.name, "--replicas", "1"]);
    wait_unschedulable(&client, &ns.name, "whole", 1, T).await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn unhealthy_devices_are_tainted_until_the_pool_heals_them() {
    let client = client().await;
    let scope = unique("sick");
    let driver = format!("{scope}.example.com");
    let ns = TestNamespace::new(&client, "sick").await;
    let _op = Operator::start(&scope, &[]);
    let devices =
        |percent: u8| format!("  devices:\n  - {{driver: {driver}, count: 2, unhealthyPercent: {percent}}}\n");
    apply(&pool_with(&scope, 2, &devices(100), 227));
    wait_ready_nodes(&client, &scope, 2, T).await;
    apply(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {scope}}}\nspec:\n  selectors:\n  - cel: {{expression: \"device.driver == '{driver}'\"}}\n"
    ));
    apply(&claim_template(&ns.name, "one", &scope, ""));
    wait_for("every device tainted unhealthy", T, || async {
        let s = slices(&client, &driver).await;
        let tainted = s.iter().flat_map(|s| s.spec.devices.iter().flatten()).filter(|d| d.taints.is_some()).count();
        if tainted == 4 { Ok(()) } else { Err(format!("{tainted} of 4 tainted")) }
    })
    .await;
    apply(&claiming("app", &ns.name, &scope, 3, "one"));
    wait_unschedulable(&client, &ns.name, "app", 3, T).await;

    // Healed: the taints go and the scheduler places the three pods.
    apply(&pool_with(&scope, 2, &devices(0), 227));
    wait_pods(&client, &ns.name, "app", 3, 0, T).await;
    let s = slices(&client, &driver).await;
    assert!(s.iter().flat_map(|s| s.spec.devices.iter().flatten()).all(|d| d.taints.is_none()), "{s:?}");
    kubectl_ok(&["delete", "deviceclass", &scope, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn the_cpu_preset_shares_numa_nodes_by_capacity_under_the_drivers_class() {
    let client = client().await;
    let scope = unique("cpu");
    let ns = TestNamespace::new(&client, "cpu").await;
    let _op = Operator::start(&scope, &[]);
    apply(&pool_with(&scope, 1, "  devices:\n  - preset: dra-cpu\n", 228));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&read_repo_file("samples/deviceclasses.yaml"));
    apply(&claim_template(&ns.name, "sixteen", "dra.cpu", "dra.cpu/cpu: \"16\""));
    // Two NUMA nodes of 32 CPUs: four claims of 16 share them, the fifth waits.
    apply(&claiming("app", &ns.name, &scope, 5, "sixteen"));
    wait_pods(&client, &ns.name, "app", 4, 1, T).await;
    wait_unschedulable(&client, &ns.name, "app", 1, T).await;
    let devices: HashSet<String> = held(&client, &ns.name, "app").await.into_iter().map(|h| h.1).collect();
    assert_eq!(devices, HashSet::from(["cpudevnuma000".to_string(), "cpudevnuma001".to_string()]));
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

/// The pool's `status.devices` as (driver, total, allocated, unhealthy).
async fn device_status(client: &kube::Client, pool: &str) -> Vec<(String, u64, u64, u64)> {
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "pools.kwok.x-k8s.io",
            "v1alpha1",
            "NodePool",
        )),
    );
    let Ok(p) = api.get(pool).await else { return vec![] };
    let list = p.data["status"]["devices"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|d| {
            let n = |k: &str| d[k].as_u64().unwrap_or(0);
            (d["driver"].as_str().unwrap_or_default().to_string(), n("total"), n("allocated"), n("unhealthy"))
        })
        .collect()
}

#[tokio::test]
async fn a_failing_prepare_holds_pods_creating_and_the_status_counts_devices() {
    let client = client().await;
    let scope = unique("prep");
    let (good, bad) = (format!("good.{scope}.example.com"), format!("bad.{scope}.example.com"));
    let ns = TestNamespace::new(&client, "prep").await;
    let op = Operator::start(&scope, &[]);
    let devices = format!(
        "  devices:\n  - {{driver: {good}, count: 2}}\n  - {{driver: {bad}, count: 2, prepareFailPercent: 100, unhealthyPercent: 0}}\n"
    );
    apply(&pool_with(&scope, 2, &devices, 229));
    wait_ready_nodes(&client, &scope, 2, T).await;
    for (class, driver) in [("good", &good), ("bad", &bad)] {
        apply(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {class}-{scope}}}\nspec:\n  selectors:\n  - cel: {{expression: \"device.driver == '{driver}'\"}}\n"
        ));
        apply(&claim_template(&ns.name, class, &format!("{class}-{scope}"), ""));
    }
    wait_for("status.devices: 4 of each driver, none held", T, || async {
        let s = device_status(&client, &scope).await;
        let want = vec![(bad.clone(), 4, 0, 0), (good.clone(), 4, 0, 0)];
        if s == want { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;

    apply(&claiming("fine", &ns.name, &scope, 3, "good"));
    apply(&claiming("broken", &ns.name, &scope, 2, "bad"));
    wait_pods(&client, &ns.name, "fine", 3, 0, T).await;
    // Placed, their devices allocated, but never started: ContainerCreating with the kubelet's event.
    let stuck = wait_for("the broken pods ContainerCreating with FailedPrepareDynamicResources", T, || async {
        let pods = list_pods(&client, &ns.name, "app=broken").await;
        let creating = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .filter(|p| {
                p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| {
                    c.iter().all(|c| {
                        c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                            == Some("ContainerCreating")
                    })
                })
            })
            .count();
        let events = kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "reason=FailedPrepareDynamicResources",
            "-o",
            "name",
        ]);
        if creating == 2 && events.lines().count() >= 2 {
            Ok(pods)
        } else {
            Err(format!("{creating} creating, events: {events:?}"))
        }
    })
    .await;
    assert!(stuck.iter().all(|p| phase(p) == "Pending"));
    let note = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "reason=FailedPrepareDynamicResources",
        "-o",
        "jsonpath={.items[0].message}",
    ]);
    assert!(note.contains(&bad) && note.contains("prepareFailPercent"), "{note}");

    // Counted in status and metrics: held devices, whether their pods started or not.
    wait_for("status.devices: 2 bad and 3 good held", T, || async {
        let s = device_status(&client, &scope).await;
        let want = vec![(bad.clone(), 4, 2, 0), (good.clone(), 4, 3, 0)];
        if s == want { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
    let metrics = op.metrics().await;
    let line = format!("kwok_pools_pool_devices{{pool=\"{scope}\",driver=\"{good}\",state=\"allocated\"}} 3");
    assert!(
        metrics.contains(&line),
        "no {line} in\n{}",
        metrics.lines().filter(|l| l.contains("pool_devices")).collect::<Vec<_>>().join("\n")
    );

    // Pods gone: their claims go and the counts follow.
    kubectl_ok(&["scale", "deployment", "fine", "-n", &ns.name, "--replicas", "0"]);
    wait_for("status.devices: no good device held", T, || async {
        let s = device_status(&client, &scope).await;
        if s.iter().any(|d| d.0 == good && d.2 == 0) { Ok(()) } else { Err(format!("{s:?}")) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn the_dcgm_endpoint_shows_each_gpu_and_what_its_pod_uses() {
    let client = client().await;
    let scope = unique("dcgm");
    let ns = TestNamespace::new(&client, "dcgm").await;
    // At an address the API server's node proxy accepts (it refuses loopback), as in a cluster.
    let address = host_address();
    let _op = Operator::start(&scope, &["--kubelet-address", &address]);
    let spec = "  lifecycle:\n    seed: 1\n    pods:\n      usage: {gpuUtilization: {fixed: \"75\"}, gpuMemory: {fixed: 20Gi}}\n  devices:\n  - {preset: nvidia-gpu, count: 2}\n";
    apply(&pool_with(&scope, 1, spec, 231));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&read_repo_file("samples/deviceclasses.yaml"));
    apply(&claim_template(&ns.name, "whole", "gpu.nvidia.com", ""));
    apply(&claiming("train", &ns.name, &scope, 1, "whole"));
    let pods = wait_pods(&client, &ns.name, "train", 1, 0, T).await;
    let pod = pods[0].metadata.name.clone().unwrap();
    let node = pods[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let device = held(&client, &ns.name, "train").await[0].1.clone();
    let index = device.trim_start_matches("gpu-").to_string();
    // Through the API server's node proxy, as Prometheus scrapes a kubelet.
    let text = wait_for("the held GPU at 75 % on /metrics/dcgm", T, || async {
        let out = kubectl(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/nodes/{node}/metrics/dcgm")]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let held = format!("pod=\"{pod}\"}} 75");
        if text.lines().any(|l| l.starts_with(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{index}\"")) && l.ends_with(&held))
        {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
        }
    })
    .await;
    let line = |name: &str, gpu: &str| {
        text.lines().find(|l| l.starts_with(&format!("{name}{{gpu=\"{gpu}\""))).unwrap_or_default().to_string()
    };
    let used = line("DCGM_FI_DEV_FB_USED", &index);
    assert!(used.contains(&format!("namespace=\"{}\"", ns.name)) && used.ends_with(" 20480"), "{text}");
    assert!(
        used.contains("modelName=\"NVIDIA A100-SXM4-80GB\"") && used.contains(&format!("Hostname=\"{node}\"")),
        "{used}"
    );
    assert!(line("DCGM_FI_DEV_FB_FREE", &index).ends_with(" 61440"), "{text}");
    let idle = if index == "0" { "1" } else { "0" };
    let idle_util = line("DCGM_FI_DEV_GPU_UTIL", idle);
    assert!(idle_util.ends_with("} 0") && !idle_util.contains("pod="), "the other GPU is idle and nobody's: {text}");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
