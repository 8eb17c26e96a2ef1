//! The kubelet's own `/metrics` for a simulated node, in the kubelet's names: running pods and
//! containers, the pod start SLI histogram (from the kubelet taking a pod to its containers
//! running) and the node's name. Pure: rendering only.

use super::resource_metrics::{NodeReading, escape, num};
use std::fmt::Write;

/// The kubelet's buckets for pod start durations (seconds).
const START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0,
    600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A histogram of `values` under the kubelet's start buckets.
fn histogram(out: &mut String, name: &str, values: &[f64]) {
    for le in START_BUCKETS {
        let n = values.iter().filter(|v| **v <= le).count();
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {n}", num(le));
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", values.len());
    let _ = writeln!(out, "{name}_sum {}", values.iter().sum::<f64>());
    let _ = writeln!(out, "{name}_count {}", values.len());
}

pub fn render(r: &NodeReading<'_>) -> String {
    let mut out = String::with_capacity(4096);
    let mut pods: Vec<&str> = r.containers.iter().map(|c| c.uid).collect();
    pods.sort_unstable();
    pods.dedup();
    family(&mut out, "kubelet_node_name", "gauge", "[ALPHA] The node's name. The count is always 1.");
    let _ = writeln!(out, "kubelet_node_name{{node=\"{}\"}} 1", escape(r.node));
    family(&mut out, "kubelet_running_pods", "gauge", "[ALPHA] Number of pods that have a running pod sandbox");
    let _ = writeln!(out, "kubelet_running_pods {}", pods.len());
    family(&mut out, "kubelet_running_containers", "gauge", "[ALPHA] Number of containers currently running");
    let _ = writeln!(out, "kubelet_running_containers{{container_state=\"running\"}} {}", r.containers.len());
    for (name, help) in [
        (
            "kubelet_pod_start_sli_duration_seconds",
            "[BETA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
        ),
        (
            "kubelet_pod_start_duration_seconds",
            "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        ),
    ] {
        family(&mut out, name, "histogram", help);
        histogram(&mut out, name, &r.pod_starts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::server::stats::resource_metrics::ContainerReading;

    #[test]
    fn running_pods_containers_and_start_durations() {
        let c = |pod, uid| ContainerReading { pod, uid, ..ContainerReading::test() };
        let r = NodeReading {
            node: "n-1",
            containers: vec![c("a", "u1"), c("a", "u1"), c("b", "u2")],
            pod_starts: vec![0.2, 7.0],
            ..Default::default()
        };
        let text = render(&r);
        assert!(text.contains("kubelet_node_name{node=\"n-1\"} 1\n"));
        assert!(text.contains("kubelet_running_pods 2\n"));
        assert!(text.contains("kubelet_running_containers{container_state=\"running\"} 3\n"));
        assert!(text.contains("kubelet_pod_start_sli_duration_seconds_bucket{le=\"0.5\"} 1\n"));
        assert!(text.contains("kubelet_pod_start_sli_duration_seconds_bucket{le=\"8\"} 2\n"));
        assert!(text.contains("kubelet_pod_start_sli_duration_seconds_count 2\n"));
    }
}
