//! `/stats/summary` as a kubelet writes it (stats/v1alpha1 `Summary`): the node and each pod
//! with its containers, CPU and memory, from the same readings as `/metrics/resource`. Pure.

use super::resource_metrics::{ContainerReading, NodeReading};
use serde_json::{Value, json};

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
            json!({
                "podRef": {"name": first.pod, "namespace": first.namespace, "uid": first.uid},
                "startTime": rfc3339(started),
                "containers": cs.iter().map(|c| json!({
                    "name": c.container,
                    "startTime": rfc3339(c.started),
                    "cpu": cpu(&at, c.cpu_cores, c.cpu_seconds),
                    "memory": memory(&at, c.memory_bytes, None),
                })).collect::<Vec<_>>(),
                "cpu": cpu(&at, cores, secs),
                "memory": memory(&at, mem, None),
            })
        })
        .collect();
    json!({
        "node": {
            "nodeName": reading.node,
            "startTime": rfc3339(reading.started),
            "cpu": cpu(&at, reading.cpu_cores, reading.cpu_seconds),
            "memory": memory(&at, reading.memory_bytes, Some(reading.memory_capacity)),
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
        };
        let reading = NodeReading {
            node: "n-0",
            started: 1_600_000_000.0,
            cpu_cores: 0.35,
            cpu_seconds: 100.0,
            memory_capacity: 4096.0,
            memory_bytes: 2048.0,
            containers: vec![c("app", 0.2), c("side", 0.05)],
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
    }
}
