//! `/metrics/resource` as a kubelet writes it: the Prometheus text exposition of node and
//! container CPU (cumulative core-seconds) and memory (working set), with the kubelet's exact
//! metric names, help texts and label names, so metrics-server reads it as from any kubelet.
//! Pure: rendering only.

use std::fmt::Write;

/// One container's reading.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerReading<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: &'a str,
    pub container: &'a str,
    /// Cores in use now.
    pub cpu_cores: f64,
    pub cpu_seconds: f64,
    pub memory_bytes: f64,
    /// When the container started (seconds since the epoch).
    pub started: f64,
    pub image: &'a str,
    /// Its pod is Ready (its readiness probe passes).
    pub ready: bool,
    /// Its pod's restarts (the highest of its containers').
    pub restarts: i32,
    /// How its pod's probes time it.
    pub probes: crate::informer::shape::Probes,
}

/// One node's reading and the containers on it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeReading<'a> {
    pub node: &'a str,
    /// When the node started (seconds since the epoch).
    pub started: f64,
    pub cpu_cores: f64,
    pub cpu_seconds: f64,
    /// The node's memory capacity (bytes).
    pub memory_capacity: f64,
    pub memory_bytes: f64,
    /// The node's ephemeral storage capacity (bytes).
    pub storage_capacity: f64,
    pub containers: Vec<ContainerReading<'a>>,
    /// How long each running pod took from the kubelet taking it to its containers running
    /// (seconds).
    pub pod_starts: Vec<f64>,
}

#[cfg(test)]
impl ContainerReading<'static> {
    /// A reading for tests: container `app` of pod `d/web-0`, idle.
    pub fn test() -> Self {
        ContainerReading {
            namespace: "d",
            pod: "web-0",
            uid: "u",
            container: "app",
            cpu_cores: 0.0,
            cpu_seconds: 0.0,
            memory_bytes: 0.0,
            started: 0.0,
            image: "nginx:1",
            ready: true,
            restarts: 0,
            probes: crate::informer::shape::Probes::default(),
        }
    }
}

/// A label value escaped as the exposition format wants it.
pub fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(['\\', '"', '\n']) {
        v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
    } else {
        v.into()
    }
}

/// A float as Go's `strconv.FormatFloat(v, 'e', -1, 64)` would not insist on: any form
/// Prometheus parses; integers stay short.
pub fn num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

/// The text for `reading` at `now_ms` (milliseconds since the epoch; every sample carries it).
pub fn render(reading: &NodeReading<'_>, now_ms: i64) -> String {
    let mut out = String::with_capacity(512 + reading.containers.len() * 3 * 160);
    let labels = |c: &ContainerReading<'_>| {
        format!("container=\"{}\",namespace=\"{}\",pod=\"{}\"", escape(c.container), escape(c.namespace), escape(c.pod))
    };
    family(
        &mut out,
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    );
    for c in &reading.containers {
        let _ = writeln!(out, "container_cpu_usage_seconds_total{{{}}} {} {now_ms}", labels(c), num(c.cpu_seconds));
    }
    family(&mut out, "container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes");
    for c in &reading.containers {
        let _ = writeln!(
            out,
            "container_memory_working_set_bytes{{{}}} {} {now_ms}",
            labels(c),
            num(c.memory_bytes.round())
        );
    }
    family(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
    );
    for c in &reading.containers {
        let _ = writeln!(out, "container_start_time_seconds{{{}}} {} {now_ms}", labels(c), num(c.started));
    }
    family(
        &mut out,
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    );
    let _ = writeln!(out, "node_cpu_usage_seconds_total {} {now_ms}", num(reading.cpu_seconds));
    family(&mut out, "node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes");
    let _ = writeln!(out, "node_memory_working_set_bytes {} {now_ms}", num(reading.memory_bytes.round()));
    pod_totals(&mut out, reading, now_ms);
    let _ = writeln!(
        out,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise"
    );
    let _ = writeln!(out, "# TYPE resource_scrape_error gauge");
    let _ = writeln!(out, "resource_scrape_error 0");
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Pod totals, as the kubelet also reports them.
fn pod_totals(out: &mut String, reading: &NodeReading<'_>, now_ms: i64) {
    let mut pods: Vec<(&str, &str, f64, f64)> = Vec::new();
    for c in &reading.containers {
        match pods.iter_mut().find(|p| p.0 == c.namespace && p.1 == c.pod) {
            Some(p) => {
                p.2 += c.cpu_seconds;
                p.3 += c.memory_bytes;
            }
            None => pods.push((c.namespace, c.pod, c.cpu_seconds, c.memory_bytes)),
        }
    }
    family(out, "pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds");
    for (ns, pod, cpu, _) in &pods {
        let _ = writeln!(
            out,
            "pod_cpu_usage_seconds_total{{namespace=\"{}\",pod=\"{}\"}} {} {now_ms}",
            escape(ns),
            escape(pod),
            num(*cpu)
        );
    }
    family(out, "pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes");
    for (ns, pod, _, mem) in &pods {
        let _ = writeln!(
            out,
            "pod_memory_working_set_bytes{{namespace=\"{}\",pod=\"{}\"}} {} {now_ms}",
            escape(ns),
            escape(pod),
            num(mem.round())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_a_sample_per_line_with_the_kubelets_names() {
        let reading = NodeReading {
            node: "n",
            cpu_seconds: 12.5,
            memory_bytes: 536_870_912.0,
            containers: vec![
                ContainerReading {
                    namespace: "d",
                    pod: "web-0",
                    uid: "u",
                    container: "app",
                    cpu_cores: 0.1,
                    cpu_seconds: 2.25,
                    memory_bytes: 1048576.0,
                    started: 1.7e9,
                    ..ContainerReading::test()
                },
                ContainerReading {
                    namespace: "d",
                    pod: "web-0",
                    uid: "u",
                    container: "side\"car",
                    cpu_cores: 0.1,
                    cpu_seconds: 0.75,
                    memory_bytes: 10.0,
                    started: 1.7e9,
                    ..ContainerReading::test()
                },
            ],
            ..Default::default()
        };
        let text = render(&reading, 1_700_000_000_123);
        assert!(text.ends_with('\n'));
        assert!(text.contains(
            "container_cpu_usage_seconds_total{container=\"app\",namespace=\"d\",pod=\"web-0\"} 2.25 1700000000123\n"
        ));
        assert!(text.contains("container=\"side\\\"car\""), "label values escaped");
        assert!(text.contains("node_cpu_usage_seconds_total 12.5 1700000000123\n"));
        assert!(text.contains("node_memory_working_set_bytes 536870912 1700000000123\n"));
        assert!(
            text.contains("container_start_time_seconds{container=\"app\",namespace=\"d\",pod=\"web-0\"} 1700000000 ")
        );
        assert!(text.contains("pod_cpu_usage_seconds_total{namespace=\"d\",pod=\"web-0\"} 3 "));
        assert!(text.contains("# TYPE container_memory_working_set_bytes gauge\n"));
        // Every non-comment line is a name, an optional label set, a value and a timestamp.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let parts: Vec<&str> = line.rsplitn(3, ' ').collect();
            assert!(parts.len() == 3 || line == "resource_scrape_error 0", "{line}");
            assert!(parts[1].parse::<f64>().is_ok() || line == "resource_scrape_error 0", "{line}");
        }
    }
}
