//! `/metrics/cadvisor` as a kubelet's embedded cAdvisor writes it: per container (labels
//! `container`, `id`, `image`, `name`, `namespace`, `pod`), per pod cgroup (`container=""`,
//! with the pod's network), and for the machine (`id="/"`), in cAdvisor's names — what
//! kube-prometheus' dashboards and recording rules and VPA's Prometheus recommender read
//! (`container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`,
//! `container_network_*_bytes_total`, `container_fs_*`). From the node's usage reading and the
//! [`traffic`](super::traffic) model. Pure: rendering only.

use super::resource_metrics::{ContainerReading, NodeReading, escape, num};
use super::traffic;
use std::fmt::Write;

/// One series' labels, in cAdvisor's order.
struct Labels<'a> {
    container: &'a str,
    id: String,
    image: &'a str,
    name: String,
    namespace: &'a str,
    pod: &'a str,
}

impl Labels<'_> {
    fn render(&self, extra: &str) -> String {
        format!(
            "container=\"{}\",{extra}id=\"{}\",image=\"{}\",name=\"{}\",namespace=\"{}\",pod=\"{}\"",
            escape(self.container),
            escape(&self.id),
            escape(self.image),
            escape(&self.name),
            escape(self.namespace),
            escape(self.pod)
        )
    }
}

fn pod_cgroup(uid: &str) -> String {
    format!("/kubepods/pod{uid}")
}

fn container_labels<'a>(c: &'a ContainerReading<'a>) -> Labels<'a> {
    let id = crate::kubelet::status::patches::container_id(c.uid, c.container);
    let hash = id.trim_start_matches("containerd://").to_string();
    Labels {
        container: c.container,
        id: format!("{}/{hash}", pod_cgroup(c.uid)),
        image: c.image,
        name: hash,
        namespace: c.namespace,
        pod: c.pod,
    }
}

/// A sample of one family per container: `value` of each, with `extra` labels.
fn per_container(
    out: &mut String,
    name: &str,
    extra: &str,
    r: &NodeReading<'_>,
    now_ms: i64,
    value: impl Fn(&ContainerReading<'_>) -> f64,
) {
    for c in &r.containers {
        let _ = writeln!(out, "{name}{{{}}} {} {now_ms}", container_labels(c).render(extra), num(value(c)));
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The pods of a reading: (namespace, pod, uid) with their containers.
fn pods<'r, 'a>(r: &'r NodeReading<'a>) -> Vec<(&'a str, &'a str, &'a str, Vec<&'r ContainerReading<'a>>)> {
    let mut out: Vec<(&str, &str, &str, Vec<&ContainerReading<'_>>)> = Vec::new();
    for c in &r.containers {
        match out.iter_mut().find(|p| p.2 == c.uid) {
            Some(p) => p.3.push(c),
            None => out.push((c.namespace, c.pod, c.uid, vec![c])),
        }
    }
    out
}

/// How a series' value is read of a container.
type Value = fn(&ContainerReading<'_>) -> f64;

type Pods<'r, 'a> = [(&'a str, &'a str, &'a str, Vec<&'r ContainerReading<'a>>)];

fn root() -> Labels<'static> {
    Labels { container: "", id: "/".into(), image: "", name: String::new(), namespace: "", pod: "" }
}

fn pod_labels<'a>(ns: &'a str, pod: &'a str, uid: &str) -> Labels<'a> {
    Labels { container: "", id: pod_cgroup(uid), image: "", name: String::new(), namespace: ns, pod }
}

/// The text for `r` at `now_ms` (milliseconds since the epoch).
pub fn render(r: &NodeReading<'_>, now_ms: i64) -> String {
    let mut out = String::with_capacity(2048 + r.containers.len() * 12 * 260);
    let pods = pods(r);
    cpu_and_memory(&mut out, r, &pods, now_ms);
    network(&mut out, &pods, now_ms);
    filesystem(&mut out, r, now_ms);
    family(
        &mut out,
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds.",
    );
    per_container(&mut out, "container_start_time_seconds", "", r, now_ms, |c| c.started.floor());
    family(&mut out, "container_last_seen", "gauge", "Last time a container was seen by the exporter");
    per_container(&mut out, "container_last_seen", "", r, now_ms, |_| (now_ms / 1000) as f64);
    family(&mut out, "machine_memory_bytes", "gauge", "Amount of memory installed on the machine.");
    let _ = writeln!(
        out,
        "machine_memory_bytes{{boot_id=\"\",machine_id=\"\",system_uuid=\"\"}} {}",
        num(r.memory_capacity.round())
    );
    out
}

/// CPU and memory of the machine, each pod cgroup and each container.
fn cpu_and_memory(out: &mut String, r: &NodeReading<'_>, pods: &Pods<'_, '_>, now_ms: i64) {
    let cpu = "cpu=\"total\",";
    family(out, "container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed in seconds.");
    let _ =
        writeln!(out, "container_cpu_usage_seconds_total{{{}}} {} {now_ms}", root().render(cpu), num(r.cpu_seconds));
    for (ns, pod, uid, cs) in pods {
        let total: f64 = cs.iter().map(|c| c.cpu_seconds).sum();
        let _ = writeln!(
            out,
            "container_cpu_usage_seconds_total{{{}}} {} {now_ms}",
            pod_labels(ns, pod, uid).render(cpu),
            num(total)
        );
    }
    per_container(out, "container_cpu_usage_seconds_total", cpu, r, now_ms, |c| c.cpu_seconds);
    let memory = [
        ("container_memory_working_set_bytes", "Current working set in bytes."),
        (
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
        ),
        ("container_memory_rss", "Size of RSS in bytes."),
    ];
    for (name, help) in memory {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name}{{{}}} {} {now_ms}", root().render(""), num(r.memory_bytes.round()));
        for (ns, pod, uid, cs) in pods {
            let total: f64 = cs.iter().map(|c| c.memory_bytes.round()).sum();
            let _ = writeln!(out, "{name}{{{}}} {} {now_ms}", pod_labels(ns, pod, uid).render(""), num(total));
        }
        per_container(out, name, "", r, now_ms, |c| c.memory_bytes.round());
    }
    family(out, "container_memory_cache", "gauge", "Number of bytes of page cache memory.");
    per_container(out, "container_memory_cache", "", r, now_ms, |_| 0.0);
}

/// The network is the pod's (its sandbox's interface), as cAdvisor reports it.
fn network(out: &mut String, pods: &Pods<'_, '_>, now_ms: i64) {
    let packets = |c: &ContainerReading<'_>| (traffic::rx_bytes(c) / 1500.0).floor();
    let series: [(&str, &str, Value); 4] = [
        ("container_network_receive_bytes_total", "Cumulative count of bytes received", traffic::rx_bytes),
        ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", traffic::tx_bytes),
        ("container_network_receive_packets_total", "Cumulative count of packets received", packets),
        ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", packets),
    ];
    for (name, help, value) in series {
        family(out, name, "counter", help);
        for (ns, pod, uid, cs) in pods {
            let total: f64 = cs.iter().map(|c| value(c)).sum();
            let _ = writeln!(
                out,
                "{name}{{{}}} {} {now_ms}",
                pod_labels(ns, pod, uid).render("interface=\"eth0\","),
                num(total)
            );
        }
    }
}

/// The node's filesystem and each container's writable layer.
fn filesystem(out: &mut String, r: &NodeReading<'_>, now_ms: i64) {
    let device = "device=\"/dev/vda1\",";
    family(
        out,
        "container_fs_usage_bytes",
        "gauge",
        "Number of bytes that are consumed by the container on this filesystem.",
    );
    let _ = writeln!(
        out,
        "container_fs_usage_bytes{{{}}} {} {now_ms}",
        root().render(device),
        num(traffic::node_fs_bytes(r))
    );
    per_container(out, "container_fs_usage_bytes", device, r, now_ms, traffic::rootfs_bytes);
    family(
        out,
        "container_fs_limit_bytes",
        "gauge",
        "Number of bytes that can be consumed by the container on this filesystem.",
    );
    let _ = writeln!(
        out,
        "container_fs_limit_bytes{{{}}} {} {now_ms}",
        root().render(device),
        num(r.storage_capacity.round())
    );
    family(out, "container_fs_writes_bytes_total", "counter", "Cumulative count of bytes written");
    per_container(out, "container_fs_writes_bytes_total", device, r, now_ms, traffic::rootfs_bytes);
    family(out, "container_fs_reads_bytes_total", "counter", "Cumulative count of bytes read");
    per_container(out, "container_fs_reads_bytes_total", device, r, now_ms, traffic::tx_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_pods_and_the_machine_in_cadvisors_names_and_labels() {
        let c = |container, pod, uid, cpu| ContainerReading {
            container,
            pod,
            uid,
            cpu_seconds: cpu,
            memory_bytes: 8.0 * traffic::MIB,
            ..ContainerReading::test()
        };
        let r = NodeReading {
            node: "n",
            cpu_seconds: 100.0,
            memory_bytes: 1.0 * traffic::GIB,
            memory_capacity: 8.0 * traffic::GIB,
            storage_capacity: 100.0 * traffic::GIB,
            containers: vec![c("app", "web-0", "u0", 2.0), c("side", "web-0", "u0", 1.0), c("app", "web-1", "u1", 4.0)],
            ..Default::default()
        };
        let text = render(&r, 1_700_000_000_000);
        let id = crate::kubelet::status::patches::container_id("u0", "app");
        let hash = id.trim_start_matches("containerd://");
        let app = format!(
            "container_cpu_usage_seconds_total{{container=\"app\",cpu=\"total\",id=\"/kubepods/podu0/{hash}\",image=\"nginx:1\",name=\"{hash}\",namespace=\"d\",pod=\"web-0\"}} 2 1700000000000\n"
        );
        assert!(text.contains(&app), "{text}");
        // The pod cgroup sums its containers; its network is the pod's.
        assert!(text.contains("container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/kubepods/podu0\",image=\"\",name=\"\",namespace=\"d\",pod=\"web-0\"} 3 "));
        assert!(text.contains(&format!(
            "container_network_receive_bytes_total{{container=\"\",interface=\"eth0\",id=\"/kubepods/podu1\",image=\"\",name=\"\",namespace=\"d\",pod=\"web-1\"}} {} ",
            4 * 1024 * 1024
        )));
        assert!(text.contains("container_cpu_usage_seconds_total{container=\"\",cpu=\"total\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"} 100 "));
        assert!(text.contains("# TYPE container_memory_working_set_bytes gauge\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').nth(1).unwrap_or_default();
            let value = if line.starts_with("machine_memory_bytes") { line.rsplit(' ').next().unwrap() } else { value };
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
