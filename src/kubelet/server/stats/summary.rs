//! `/stats/summary` as a kubelet writes it (stats/v1alpha1 `Summary`): the node and each pod
//! with its containers — CPU and memory from the same readings as `/metrics/resource`,
//! filesystem (node and image filesystems, each container's rootfs and logs, each pod's
//! ephemeral storage) and network from the [`traffic`](super::traffic) model. Pure.

use super::resource_metrics::{ContainerReading, NodeReading};
use super::traffic;
use serde_json::{Value, json};

/// Bytes a filesystem entry reports: used of `capacity` (available what is left).
fn fs(at: &str, used: f64, capacity: f64) -> Value {
    let (used, capacity) = (used.round() as u64, capacity.round() as u64);
    json!({"time": at, "availableBytes": capacity.saturating_sub(used), "capacityBytes": capacity, "usedBytes": used,
           "inodesFree": 6_000_000u64, "inodes": 6_553_600u64, "inodesUsed": 553_600u64})
}

fn network(at: &str, rx: f64, tx: f64) -> Value {
    let (rx, tx) = (rx as u64, tx as u64);
    json!({"time": at, "name": "eth0", "rxBytes": rx, "rxErrors": 0, "txBytes": tx, "txErrors": 0,
           "interfaces": [{"name": "eth0", "rxBytes": rx, "rxErrors": 0, "txBytes": tx, "txErrors": 0}]})
}

fn rfc3339(secs: f64) -> String {
    k8s_openapi::jiff::Timestamp::from_nanosecond((secs * 1e9) as i128)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

fn cpu(at: &str, cores: f64, seconds: f64) -> Value {
    json!({"time": at, "usageNanoCores": (cores * 1e9).round() as u64, "usageCoreNanoSeconds": (seconds * 1e9).round() as u64})
}

fn memory(at: &str, bytes: f64, available: Option<f64>) -> Value {
    let b = bytes.round() as u64;
    let mut m = json!({"time": at, "usageBytes": b, "workingSetBytes": b, "rssBytes": b, "pageFaults": 0, "majorPageFaults": 0});
    if let Some(a) = available {
        m["availableBytes"] = json!((a - bytes).max(0.0).round() as u64);
    }
    m
}

/// The summary of `reading` at `now` (seconds since the epoch).
pub fn summary(reading: &NodeReading<'_>, now: f64) -> Value {
    let at = rfc3339(now);
    let mut pods: Vec<(&ContainerReading<'_>, Vec<&ContainerReading<'_>>)> = Vec::new();
    for c in &reading.containers {
        match pods.iter_mut().find(|(first, _)| first.namespace == c.namespace && first.pod == c.pod) {
            Some((_, cs)) => cs.push(c),
            None => pods.push((c, vec![c])),
        }
    }
    let pods: Vec<Value> = pods
        .iter()
        .map(|(first, cs)| {
            let (cores, secs, mem) =
                cs.iter().fold((0.0, 0.0, 0.0), |a, c| (a.0 + c.cpu_cores, a.1 + c.cpu_seconds, a.2 + c.memory_bytes));
            let started = cs.iter().map(|c| c.started).fold(f64::INFINITY, f64::min);
            let (rx, tx) = cs.iter().fold((0.0, 0.0), |a, c| (a.0 + traffic::rx_bytes(c), a.1 + traffic::tx_bytes(c)));
            let ephemeral: f64 = cs.iter().map(|c| traffic::rootfs_bytes(c) + traffic::LOG_BYTES).sum();
            let capacity = reading.storage_capacity;
            json!({
                "podRef": {"name": first.pod, "namespace": first.namespace, "uid": first.uid},
                "startTime": rfc3339(started),
                "containers": cs.iter().map(|c| json!({
                    "name": c.container,
                    "startTime": rfc3339(c.started),
                    "cpu": cpu(&at, c.cpu_cores, c.cpu_seconds),
                    "memory": memory(&at, c.memory_bytes, None),
                    "rootfs": fs(&at, traffic::rootfs_bytes(c), capacity),
                    "logs": fs(&at, traffic::LOG_BYTES, capacity),
                })).collect::<Vec<_>>(),
                "cpu": cpu(&at, cores, secs),
                "memory": memory(&at, mem, None),
                "network": network(&at, rx, tx),
                "volume": [],
                "ephemeral-storage": fs(&at, ephemeral, capacity),
            })
        })
        .collect();
    let (node_rx, node_tx) = traffic::node_network(reading);
    json!({
        "node": {
            "nodeName": reading.node,
            "startTime": rfc3339(reading.started),
            "cpu": cpu(&at, reading.cpu_cores, reading.cpu_seconds),
            "memory": memory(&at, reading.memory_bytes, Some(reading.memory_capacity)),
            "network": network(&at, node_rx, node_tx),
            "fs": fs(&at, traffic::node_fs_bytes(reading), reading.storage_capacity),
            "runtime": {"imageFs": fs(&at, traffic::NODE_BASE_BYTES, reading.storage_capacity)},
            "systemContainers": [],
        },
        "pods": pods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_pods_with_their_containers() {
        let c = |container, cores| ContainerReading {
            namespace: "d",
            pod: "web-0",
            uid: "u-1",
            container,
            cpu_cores: cores,
            cpu_seconds: 10.0,
            memory_bytes: 1024.0,
            started: 1_700_000_000.0,
            ..ContainerReading::test()
        };
        let reading = NodeReading {
            node: "n-0",
            started: 1_600_000_000.0,
            cpu_cores: 0.35,
            cpu_seconds: 100.0,
            memory_capacity: 4096.0,
            memory_bytes: 2048.0,
            storage_capacity: 100.0 * super::super::traffic::GIB,
            containers: vec![c("app", 0.2), c("side", 0.05)],
            pod_starts: vec![0.5],
        };
        let s = summary(&reading, 1_700_000_100.0);
        assert_eq!(s["node"]["nodeName"], "n-0");
        assert_eq!(s["node"]["cpu"]["usageNanoCores"], 350_000_000u64);
        assert_eq!(s["node"]["memory"]["availableBytes"], 2048u64);
        let pods = s["pods"].as_array().unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0]["podRef"]["uid"], "u-1");
        assert_eq!(pods[0]["containers"].as_array().unwrap().len(), 2);
        assert_eq!(pods[0]["cpu"]["usageNanoCores"], 250_000_000u64);
        assert_eq!(pods[0]["memory"]["workingSetBytes"], 2048u64);
        assert_eq!(pods[0]["startTime"], "2023-11-14T22:13:20Z");
        // Filesystem and network: the node's, each pod's and each container's.
        assert_eq!(s["node"]["fs"]["capacityBytes"], 100u64 << 30);
        let used = s["node"]["fs"]["usedBytes"].as_u64().unwrap();
        assert_eq!(s["node"]["fs"]["availableBytes"].as_u64().unwrap(), (100u64 << 30) - used);
        assert_eq!(s["node"]["network"]["interfaces"][0]["name"], "eth0");
        assert_eq!(pods[0]["network"]["rxBytes"], 20u64 << 20, "1 MiB a core-second, two containers of 10");
        assert!(pods[0]["containers"][0]["rootfs"]["usedBytes"].as_u64().unwrap() >= 4 << 20);
        assert!(pods[0]["ephemeral-storage"]["usedBytes"].as_u64().unwrap() > 8 << 20);
    }
}
