//! What one pod held in the operator's store costs: pods as the API server sends them (a
//! PodPool's pod, scheduled and Running), kept the way the operator keeps them (a reflector
//! store of `SlimPod`s), counted by the allocator. 100,000 pods must fit in the operator's
//! memory target with room for everything else (`make bench-compare` measures the whole
//! process with 100,000 pods; see the README).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use kwok_pools::informer::pod::SlimPod;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A PodPool's pod as a watch delivers it once the simulator has it Running.
fn pod(i: usize) -> Pod {
    let uid = format!("6f1c2d3e-4a5b-4c6d-8e7f-{i:012}");
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("web-367737-{i}"), "namespace": "shard-651966", "uid": uid,
            "resourceVersion": format!("{}", 1_000_000 + i), "creationTimestamp": "2026-12-01T09:10:00Z",
            "labels": {"app": "web", "tier": "frontend", "pools.kwok.x-k8s.io/pool": "web-367737",
                       "pools.kwok.x-k8s.io/index": i.to_string(), "pools.kwok.x-k8s.io/template-hash": "5d8f7c9b6a"},
            "annotations": {"example.com/team": "load-test"},
            "ownerReferences": [{"apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "PodPool", "name": "web-367737",
                                 "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kwok-pools", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]
        },
        "spec": {
            "nodeName": format!("sharded-077195-{}", i % 6000),
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
            "restartPolicy": "Always", "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-12-01T09:10:01Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-01T09:10:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T09:10:01Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-12-01T09:10:01Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T09:10:00Z"}
            ],
            "hostIP": "10.96.3.4", "hostIPs": [{"ip": "10.96.3.4"}],
            "podIP": format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 2), "podIPs": [{"ip": format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 2)}],
            "startTime": "2026-12-01T09:10:01Z", "qosClass": "Burstable",
            "containerStatuses": [{"name": "c", "ready": true, "started": true, "restartCount": 0, "image": "nginx",
                                   "imageID": "docker-pullable://nginx@sha256:0", "containerID": "containerd://abc",
                                   "state": {"running": {"startedAt": "2026-12-01T09:10:01Z"}}}]
        }
    }))
    .unwrap()
}

/// Bytes the allocator holds after `make` ran, per item.
fn held_per_item<T>(n: usize, make: impl Fn(usize) -> T) -> (Vec<T>, isize) {
    let region = Region::new(ALLOCATOR);
    let items: Vec<T> = (0..n).map(make).collect();
    let change = region.change();
    let held = change.bytes_allocated as isize - change.bytes_deallocated as isize;
    (items, held / n as isize)
}

/// 100,000 pods held within 300 MiB, with ~80 MiB for the process and its 1,000 nodes, leave
/// about 2.2 KiB a pod for the store and the simulator's own records of it (about 0.4 KiB).
const BUDGET_PER_STORED_POD: isize = 1_700;

#[test]
fn a_stored_pod_fits_the_memory_budget() {
    const N: usize = 20_000;
    let (store, mut writer) = reflector::store::<SlimPod>();
    let region = Region::new(ALLOCATOR);
    for i in 0..N {
        // The Pod as decoded is dropped here: what stays is what the store holds.
        let event = Event::Apply(SlimPod::from(pod(i)));
        writer.apply_watcher_event(&event);
    }
    let change = region.change();
    let held = change.bytes_allocated as isize - change.bytes_deallocated as isize;
    assert_eq!(store.state().len(), N);
    let per_pod = held / N as isize;
    let (_, slim) = held_per_item(1_000, |i| SlimPod::from(pod(i)));
    let (_, labels) = held_per_item(1_000, |i| SlimPod::from(pod(i)).labels);
    let (_, owners) = held_per_item(1_000, |i| SlimPod::from(pod(i)).metadata.owner_references);
    let (_, conditions) = held_per_item(1_000, |i| SlimPod::from(pod(i)).conditions);
    eprintln!(
        "one stored pod: {per_pod} bytes (store entry and key, and the SlimPod: {slim} bytes, of which labels {labels}, owners {owners}, conditions {conditions})"
    );
    assert!(
        per_pod < BUDGET_PER_STORED_POD,
        "one stored pod costs {per_pod} bytes, over the budget of {BUDGET_PER_STORED_POD}"
    );
    // What a pool's controller and the simulator read is all there.
    let one = store.get(&kube::runtime::reflector::ObjectRef::new("web-367737-7").within("shard-651966")).unwrap();
    assert_eq!(one.label("pools.kwok.x-k8s.io/template-hash"), Some("5d8f7c9b6a"));
    assert_eq!(one.condition("Ready"), Some("True"));
    assert_eq!(one.pod_ips.len(), 1);
}

/// Writes waiting for room in the simulator's budget (a client deleting pods faster than a
/// slow API server takes the final deletes) cost what they capture, not the request's state:
/// the backlog can be as long as the pods.
#[tokio::test]
async fn a_write_waiting_for_room_costs_only_its_inputs() {
    use kwok_pools::simulator::machinery::{Class, WriteBudget};
    use std::sync::Arc;
    const N: usize = 10_000;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let budget = WriteBudget::new(1);
    let writes = budget.writes(Class::Other, tx);
    let release = Arc::new(tokio::sync::Notify::new());
    let region = Region::new(ALLOCATOR);
    for i in 0..N {
        let release = release.clone();
        // A write whose state, once it runs, is 16 KiB (a kube request is several).
        writes.spawn(move || async move {
            let state = [i as u8; 16 * 1024];
            release.notified().await;
            std::hint::black_box(&state)[0] as usize
        });
    }
    let change = region.change();
    let per_write = (change.bytes_allocated as isize - change.bytes_deallocated as isize) / N as isize;
    eprintln!("one write waiting for room: {per_write} bytes");
    assert!(per_write < 1024, "a waiting write holds {per_write} bytes");
    // They all run in the end, one at a time, each reporting back.
    let mut done = 0;
    while done < N {
        release.notify_waiters();
        tokio::task::yield_now().await;
        while rx.try_recv().is_ok() {
            done += 1;
        }
    }
}
