//! What a kubelet reports about its node, built without a kubelet: conditions, addresses,
//! daemon endpoints, node info, capacity and allocatable. Pure.

use crate::api::lifecycle::BadCondition;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::IpAddr;

pub use super::endpoint::Endpoint;

pub const KUBELET_PORT: i32 = 10250;

/// The Kubernetes release this build speaks (its k8s-openapi feature): what nodes report as
/// their kubelet's version when the API server's cannot be read.
pub const BUILT_FOR: &str = "v1.37.0";

/// Settings for what the template leaves unset.
#[derive(Clone, Debug)]
pub struct NodeDefaults {
    /// `nodeInfo.kubeletVersion` (empty: the API server's, filled at start).
    pub kubelet_version: String,
}

impl Default for NodeDefaults {
    fn default() -> Self {
        Self { kubelet_version: BUILT_FOR.into() }
    }
}

/// (type, status, reason, message) of the conditions a healthy kubelet reports.
const HEALTHY: [(&str, &str, &str, &str); 5] = [
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
];

/// (type, status, reason, message) a kubelet reports for a bad condition.
fn bad(condition: BadCondition) -> (&'static str, &'static str, &'static str, &'static str) {
    match condition {
        BadCondition::MemoryPressure => {
            ("MemoryPressure", "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
        }
        BadCondition::DiskPressure => ("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
        BadCondition::PIDPressure => {
            ("PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
        }
        BadCondition::NetworkUnavailable => {
            ("NetworkUnavailable", "True", "NoRouteCreated", "simulated by kwok-pools: the node's network is down")
        }
        BadCondition::NotReady => (
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady (simulated by kwok-pools)",
        ),
    }
}

/// kwok v0.8.0's node chaos stage: a node labelled `node-not-ready.stage.kwok.x-k8s.io: "true"`
/// reports Ready=False with the reason and message its annotations give (kwok's defaults
/// `nodeFailed`, `node failed`), and the condition its `/type` annotation names True with them;
/// it goes on heartbeating. The label's removal brings it back.
pub const NODE_CHAOS: &str = "node-not-ready.stage.kwok.x-k8s.io";

/// What a node's kubelet reports now: the bad conditions its knobs give it, and kwok's node
/// chaos once it applies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub bad: Vec<BadCondition>,
    pub chaos: Option<NodeChaos>,
    /// Where the node stands in its cloud lifecycle (booting, failed, shutting down).
    pub cloud: Option<super::cloud::Phase>,
}

impl Report {
    /// Healthy but for `bad`.
    pub fn bad(bad: &[BadCondition]) -> Self {
        Report { bad: bad.to_vec(), ..Default::default() }
    }
}

/// What kwok's node chaos stage makes a node report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeChaos {
    pub reason: String,
    pub message: String,
    /// A condition set True beside Ready=False (kwok's `/type`).
    pub also: Option<String>,
}

/// The node chaos a node's labels and annotations ask for, and after how long (kwok's delay and
/// jitter arithmetic: 1s by default), if its chaos label is set.
pub fn node_chaos(node: &Node) -> Option<(NodeChaos, crate::api::annotations::Window)> {
    use std::time::Duration;
    let labelled = node.metadata.labels.as_ref().and_then(|l| l.get(NODE_CHAOS)).is_some_and(|v| v == "true");
    if !labelled {
        return None;
    }
    let none = BTreeMap::new();
    let a = node.metadata.annotations.as_ref().unwrap_or(&none);
    let get = |field: &str| a.get(&format!("{NODE_CHAOS}/{field}")).filter(|v| !v.is_empty()).cloned();
    let duration = |field: &str| get(field).and_then(|t| crate::api::duration::parse_duration(t.trim()));
    let (delay, jitter) = (
        duration("delay").unwrap_or(Duration::from_secs(1)),
        duration("jitter-delay").unwrap_or(Duration::from_secs(1)),
    );
    let after = if jitter <= delay {
        crate::api::annotations::Window { delay: jitter, latest: None }
    } else {
        crate::api::annotations::Window { delay, latest: Some(jitter) }
    };
    let chaos = NodeChaos {
        reason: get("reason").unwrap_or_else(|| "nodeFailed".into()),
        message: get("message").unwrap_or_else(|| "node failed".into()),
        also: get("type").filter(|t| t != "Ready"),
    };
    Some((chaos, after))
}

/// What the kubelet reports with `bad` conditions and, if it applies, kwok's node chaos: each
/// condition's (type, status, reason, message).
fn expected(report: &Report) -> Vec<(String, String, String, String)> {
    let (bad_now, chaos) = (report.bad.as_slice(), report.chaos.as_ref());
    let own = |t: (&str, &str, &str, &str)| (t.0.to_string(), t.1.to_string(), t.2.to_string(), t.3.to_string());
    let mut out: Vec<(String, String, String, String)> =
        HEALTHY.iter().map(|h| own(bad_now.iter().map(|b| bad(*b)).find(|b| b.0 == h.0).unwrap_or(*h))).collect();
    if let Some(c) = chaos {
        let hit = |t: &str| (t.to_string(), String::new(), c.reason.clone(), c.message.clone());
        for row in &mut out {
            if row.0 == "Ready" {
                *row = (hit("Ready").0, "False".into(), c.reason.clone(), c.message.clone());
            } else if c.also.as_deref() == Some(row.0.as_str()) {
                *row = (hit(&row.0).0, "True".into(), c.reason.clone(), c.message.clone());
            }
        }
        if let Some(t) = c.also.as_deref().filter(|t| !out.iter().any(|r| r.0 == *t)) {
            out.push((t.to_string(), "True".into(), c.reason.clone(), c.message.clone()));
        }
    }
    for row in report.cloud.map(super::cloud::Phase::rows).unwrap_or_default() {
        match out.iter_mut().find(|r| r.0 == row.0) {
            Some(r) => *r = own(row),
            None => out.push(own(row)),
        }
    }
    out
}

/// The healthy conditions at `now`, keeping a previous transition time where the status is
/// unchanged.
fn healthy_conditions(previous: Option<&[NodeCondition]>, now: &Time) -> Vec<NodeCondition> {
    reported_conditions(previous, now, &Report::default())
}

/// The conditions at `now` with `bad_now` bad and the rest healthy, keeping a previous
/// transition time where the status is unchanged.
pub fn reported_conditions(previous: Option<&[NodeCondition]>, now: &Time, report: &Report) -> Vec<NodeCondition> {
    expected(report)
        .iter()
        .map(|(type_, status, reason, message)| {
            let old = previous.and_then(|cs| cs.iter().find(|c| c.type_ == *type_));
            let last_transition_time = match old {
                Some(c) if c.status == *status => c.last_transition_time.clone().or_else(|| Some(now.clone())),
                _ => Some(now.clone()),
            };
            NodeCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time,
            }
        })
        .collect()
}

fn default_resources() -> BTreeMap<String, Quantity> {
    [("cpu", "32"), ("memory", "256Gi"), ("pods", "110"), ("ephemeral-storage", "100Gi")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// The platform labels a kubelet puts on its node, from the node's `nodeInfo` (amd64/linux
/// when the template says nothing): charts that select `kubernetes.io/os: linux` land.
pub fn platform_labels(status: Option<&NodeStatus>) -> [(&'static str, String); 2] {
    let info = status.and_then(|s| s.node_info.as_ref());
    let or = |v: Option<&String>, d: &str| v.filter(|v| !v.is_empty()).cloned().unwrap_or_else(|| d.to_string());
    [
        ("kubernetes.io/os", or(info.map(|i| &i.operating_system), "linux")),
        ("kubernetes.io/arch", or(info.map(|i| &i.architecture), "amd64")),
    ]
}

fn pseudo_uuid(seed: &str, salt: &str) -> String {
    let d = Sha256::digest(format!("{salt}/{seed}").as_bytes());
    let h: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn fill(field: &mut String, value: impl Into<String>) {
    if field.is_empty() {
        *field = value.into();
    }
}

/// The status a healthy kubelet would report for node `name`, starting from `base` (the
/// template's status or the node's current one) and filling what is unset. With an
/// `endpoint`, its kubelet API answers there (the Hostname address and the daemon port).
pub fn simulated(
    name: &str,
    base: Option<&NodeStatus>,
    internal_ips: &[IpAddr],
    endpoint: Option<&Endpoint>,
    now: &Time,
    defaults: &NodeDefaults,
) -> NodeStatus {
    let mut s = base.cloned().unwrap_or_default();
    s.conditions = Some(healthy_conditions(base.and_then(|b| b.conditions.as_deref()), now));

    let mut addresses: Vec<NodeAddress> = s.addresses.take().unwrap_or_default();
    for ip in internal_ips {
        let ip = ip.to_string();
        if !addresses.iter().any(|a| a.type_ == "InternalIP" && a.address == ip) {
            addresses.push(NodeAddress { type_: "InternalIP".into(), address: ip });
        }
    }
    match endpoint {
        Some(e) => {
            addresses.retain(|a| a.type_ != "Hostname");
            addresses.push(NodeAddress { type_: "Hostname".into(), address: e.address.to_string() });
        }
        None if !addresses.iter().any(|a| a.type_ == "Hostname") => {
            addresses.push(NodeAddress { type_: "Hostname".into(), address: name.into() });
        }
        None => {}
    }
    s.addresses = Some(addresses);

    let port = endpoint.map_or(KUBELET_PORT, |e| e.port);
    s.daemon_endpoints = Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port }) });

    let mut info: NodeSystemInfo = s.node_info.take().unwrap_or_default();
    fill(&mut info.architecture, "amd64");
    fill(&mut info.operating_system, "linux");
    let version = if defaults.kubelet_version.is_empty() { BUILT_FOR } else { defaults.kubelet_version.as_str() };
    fill(&mut info.kubelet_version, version);
    fill(&mut info.kernel_version, "6.12.0-kwok-pools");
    fill(&mut info.os_image, "kwok-pools fake node");
    fill(&mut info.container_runtime_version, "fake://1.0.0");
    fill(&mut info.machine_id, pseudo_uuid(name, "machine").replace('-', ""));
    fill(&mut info.system_uuid, pseudo_uuid(name, "system"));
    fill(&mut info.boot_id, pseudo_uuid(name, "boot"));
    s.node_info = Some(info);

    fill_resources(&mut s, true);
    if s.phase.as_deref().unwrap_or("").is_empty() {
        s.phase = Some("Running".into());
    }
    s
}

/// What a node rendered from `base` reports even when another simulator (a real kwok) owns
/// its status: kwokctl's default node where the template says nothing (32 CPU, 256Gi memory,
/// 100Gi ephemeral storage, 110 pods, amd64/linux), allocatable mirrored from capacity and back.
pub fn template_defaults(base: Option<&NodeStatus>) -> NodeStatus {
    let mut s = base.cloned().unwrap_or_default();
    let mut info: NodeSystemInfo = s.node_info.take().unwrap_or_default();
    fill(&mut info.architecture, "amd64");
    fill(&mut info.operating_system, "linux");
    s.node_info = Some(info);
    fill_resources(&mut s, false);
    s
}

/// Fills the resources a template leaves out: kwokctl's default node when it gives none, else
/// the `pods` and `ephemeral-storage` a kubelet always reports; allocatable (when the template
/// gives none) is capacity less the kubelet's default hard eviction thresholds when `reserve`
/// (our kubelet), else mirrored (another simulator's node, as kwok reports it).
fn fill_resources(s: &mut NodeStatus, reserve: bool) {
    let given = |m: &Option<BTreeMap<String, Quantity>>| m.as_ref().filter(|m| !m.is_empty()).cloned();
    match (given(&s.capacity), given(&s.allocatable)) {
        (None, None) => {
            let capacity = default_resources();
            s.allocatable = Some(if reserve { allocatable(&capacity) } else { capacity.clone() });
            s.capacity = Some(capacity);
        }
        (Some(mut capacity), None) => {
            for (key, value) in default_resources() {
                if key == "pods" || key == "ephemeral-storage" {
                    capacity.entry(key).or_insert(value);
                }
            }
            s.allocatable = Some(if reserve { allocatable(&capacity) } else { capacity.clone() });
            s.capacity = Some(capacity);
        }
        (None, Some(a)) => s.capacity = Some(a),
        (Some(_), Some(_)) => {}
    }
}

/// The kubelet's default hard eviction thresholds: what it keeps free of a node's capacity
/// (`memory.available<100Mi`, `nodefs.available<10%`); no kube or system reservation.
pub const EVICTION_HARD_MEMORY: f64 = 100.0 * 1024.0 * 1024.0;
pub const EVICTION_HARD_NODEFS_SHARE: f64 = 0.10;

/// What pods may use of `capacity`: capacity less the default hard eviction thresholds, as a
/// kubelet with its defaults reports it (memory in Ki, storage in bytes).
pub fn allocatable(capacity: &BTreeMap<String, Quantity>) -> BTreeMap<String, Quantity> {
    let mut out = capacity.clone();
    let bytes = |q: &Quantity| crate::api::kubelet::quantity(&q.0);
    if let Some(m) = capacity.get("memory").and_then(bytes) {
        let left = (m - EVICTION_HARD_MEMORY).max(0.0);
        out.insert("memory".into(), Quantity(format!("{}Ki", (left / 1024.0).floor() as u64)));
    }
    if let Some(d) = capacity.get("ephemeral-storage").and_then(bytes) {
        let left = d * (1.0 - EVICTION_HARD_NODEFS_SHARE);
        out.insert("ephemeral-storage".into(), Quantity(format!("{}", left.floor() as u64)));
    }
    out
}

/// The InternalIP addresses a node reports.
pub fn internal_ips(node: &Node) -> Vec<IpAddr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| a.iter().filter(|a| a.type_ == "InternalIP").filter_map(|a| a.address.parse().ok()).collect())
        .unwrap_or_default()
}

/// Whether the node's status is not what its kubelet would report (healthy but for `bad_now`),
/// so the simulator must write it: a condition is not as expected (Ready is not True (a controller marked it Unknown, or nobody ever set it),
/// a condition, the Hostname address, the daemon endpoint or the resources are missing, or
/// the kubelet API is not where `endpoint` says. (A missing InternalIP is the caller's call:
/// it depends on whether an address is free.)
pub fn needs_write(node: &Node, endpoint: Option<&Endpoint>, report: &Report) -> bool {
    let Some(s) = node.status.as_ref() else { return true };
    let conditions = s.conditions.as_deref().unwrap_or_default();
    let healthy = expected(report).iter().all(|(type_, status, reason, message)| {
        conditions.iter().any(|c| {
            c.type_ == *type_
                && c.status == *status
                && c.reason.as_deref() == Some(reason.as_str())
                && c.message.as_deref() == Some(message.as_str())
        })
    });
    let addresses = s.addresses.as_deref().unwrap_or_default();
    let has_host = match endpoint {
        Some(e) => {
            let hosts: Vec<&NodeAddress> = addresses.iter().filter(|a| a.type_ == "Hostname").collect();
            hosts.len() == 1 && hosts[0].address == e.address.to_string()
        }
        None => addresses.iter().any(|a| a.type_ == "Hostname"),
    };
    let port = endpoint.map_or(KUBELET_PORT, |e| e.port);
    let endpoint =
        s.daemon_endpoints.as_ref().and_then(|d| d.kubelet_endpoint.as_ref()).is_some_and(|e| e.port == port);
    let resources =
        s.capacity.as_ref().is_some_and(|m| !m.is_empty()) && s.allocatable.as_ref().is_some_and(|m| !m.is_empty());
    !(healthy && has_host && endpoint && resources)
}

/// How long before `now` the node's status was last reported: the age of its Ready
/// condition's heartbeat (none without one; zero for one in the future).
pub fn report_age(node: &Node, now: k8s_openapi::jiff::Timestamp) -> Option<std::time::Duration> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let beat = conditions.iter().find(|c| c.type_ == "Ready")?.last_heartbeat_time.as_ref()?;
    let secs = (now - beat.0).total(k8s_openapi::jiff::Unit::Second).ok()?;
    Some(std::time::Duration::from_secs_f64(secs.clamp(0.0, 1e9)))
}

/// Whether the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kwoks_node_chaos_reports_ready_false_with_its_reason_and_the_named_condition() {
        let mut node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n",
            "labels": {NODE_CHAOS: "true"},
            "annotations": {"node-not-ready.stage.kwok.x-k8s.io/type": "KernelDeadlock", "node-not-ready.stage.kwok.x-k8s.io/delay": "5s"}}}))
        .unwrap();
        let (chaos, after) = node_chaos(&node).unwrap();
        assert_eq!((chaos.reason.as_str(), chaos.message.as_str()), ("nodeFailed", "node failed"), "kwok's defaults");
        assert_eq!(after.sample(0.9), std::time::Duration::from_secs(1), "kwok's jitter (1s) when the delay is longer");
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let reported = reported_conditions(None, &now, &Report { chaos: Some(chaos.clone()), ..Default::default() });
        let get = |t: &str| reported.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!((get("Ready").status.as_str(), get("Ready").reason.as_deref()), ("False", Some("nodeFailed")));
        assert_eq!(get("KernelDeadlock").status, "True");
        assert_eq!(get("MemoryPressure").status, "False", "the others stay healthy");
        node.status = Some(NodeStatus { conditions: Some(reported), ..Default::default() });
        assert!(needs_write(&node, None, &Report::default()), "without the chaos, Ready=False must be written back");
        node.metadata.labels = None;
        assert!(node_chaos(&node).is_none(), "the label's removal ends it");
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_000_000).unwrap())
    }

    #[test]
    fn fills_a_blank_status() {
        let ip: IpAddr = "10.1.0.1".parse().unwrap();
        let s = simulated("n-0", None, &[ip], None, &now(), &NodeDefaults::default());
        let node = Node { status: Some(s.clone()), ..Default::default() };
        assert!(is_ready(&node));
        assert!(!needs_write(&node, None, &Report::default()));
        assert_eq!(internal_ips(&node), vec![ip]);
        assert_eq!(s.allocatable.unwrap()["pods"], Quantity("110".into()));
        assert_eq!(s.node_info.unwrap().kubelet_version, BUILT_FOR);
        let hostnames: Vec<_> = s.addresses.unwrap().into_iter().filter(|a| a.type_ == "Hostname").collect();
        assert_eq!(hostnames[0].address, "n-0");
    }

    #[test]
    fn keeps_template_values_and_mirrors_resources() {
        let base = NodeStatus {
            capacity: Some([("cpu".to_string(), Quantity("8".into()))].into()),
            node_info: Some(NodeSystemInfo { kubelet_version: "v9".into(), ..Default::default() }),
            ..Default::default()
        };
        let s = simulated("n", Some(&base), &[], None, &now(), &NodeDefaults::default());
        assert_eq!(s.allocatable.unwrap()["cpu"], Quantity("8".into()));
        assert_eq!(s.node_info.unwrap().kubelet_version, "v9");
        // What a kubelet always reports is added to a template's capacity.
        let cap = s.capacity.unwrap();
        assert_eq!((cap["pods"].0.as_str(), cap["ephemeral-storage"].0.as_str()), ("110", "100Gi"));
    }

    #[test]
    fn allocatable_is_capacity_less_the_default_eviction_thresholds() {
        let s = simulated("n", None, &[], None, &now(), &NodeDefaults::default());
        let (cap, alloc) = (s.capacity.unwrap(), s.allocatable.unwrap());
        assert_eq!(cap["memory"].0, "256Gi");
        // 256Gi - 100Mi, in Ki.
        assert_eq!(alloc["memory"].0, format!("{}Ki", 256 * 1024 * 1024 - 100 * 1024));
        // 100Gi less 10 %.
        assert_eq!(alloc["ephemeral-storage"].0, format!("{}", 100u64 * 1024 * 1024 * 1024 * 9 / 10));
        assert_eq!((alloc["cpu"].0.as_str(), alloc["pods"].0.as_str()), ("32", "110"));
        // A template that gives allocatable keeps it.
        let base = NodeStatus {
            capacity: Some([("memory".to_string(), Quantity("8Gi".into()))].into()),
            allocatable: Some([("memory".to_string(), Quantity("7Gi".into()))].into()),
            ..Default::default()
        };
        let s = simulated("n", Some(&base), &[], None, &now(), &NodeDefaults::default());
        assert_eq!(s.allocatable.unwrap()["memory"].0, "7Gi");
        // Less memory than the threshold: nothing allocatable, never negative.
        assert_eq!(allocatable(&[("memory".to_string(), Quantity("64Mi".into()))].into())["memory"].0, "0Ki");
    }

    #[test]
    fn the_fallback_version_is_the_release_this_build_speaks() {
        let manifest = include_str!("../../../Cargo.toml");
        let feature = BUILT_FOR.trim_start_matches('v').rsplit_once('.').unwrap().0.replace('.', "_");
        assert!(manifest.contains(&format!("\"v{feature}\"")), "k8s-openapi's feature is v{feature}");
    }

    #[test]
    fn an_empty_template_is_kwoks_default_node() {
        let s = template_defaults(None);
        let cap = s.capacity.unwrap();
        assert_eq!((cap["cpu"].0.as_str(), cap["memory"].0.as_str(), cap["pods"].0.as_str()), ("32", "256Gi", "110"));
        assert_eq!(cap["ephemeral-storage"].0, "100Gi", "pods that ask for ephemeral storage fit");
        assert_eq!(s.allocatable.unwrap(), cap);
        let info = s.node_info.unwrap();
        assert_eq!((info.architecture.as_str(), info.operating_system.as_str()), ("amd64", "linux"));
        // What the template sets stays.
        let base = NodeStatus {
            allocatable: Some([("cpu".to_string(), Quantity("4".into()))].into()),
            node_info: Some(NodeSystemInfo { architecture: "arm64".into(), ..Default::default() }),
            ..Default::default()
        };
        let s = template_defaults(Some(&base));
        assert_eq!(s.capacity.unwrap()["cpu"], Quantity("4".into()));
        assert_eq!(s.node_info.unwrap().architecture, "arm64");
    }

    #[test]
    fn the_kubelet_endpoint_is_the_hostname_address_and_port_beside_the_internal_ips() {
        let ip: IpAddr = "10.1.0.1".parse().unwrap();
        let e = Endpoint { address: "127.128.0.9".parse().unwrap(), port: 31000 };
        let before = simulated("n", None, &[ip], None, &now(), &NodeDefaults::default());
        let s = simulated("n", Some(&before), &[ip], Some(&e), &now(), &NodeDefaults::default());
        let node = Node { status: Some(s.clone()), ..Default::default() };
        assert!(!needs_write(&node, Some(&e), &Report::default()));
        let hosts: Vec<_> = s.addresses.as_ref().unwrap().iter().filter(|a| a.type_ == "Hostname").collect();
        assert_eq!((hosts.len(), hosts[0].address.as_str()), (1, "127.128.0.9"));
        assert_eq!(internal_ips(&node), vec![ip], "the InternalIP stays the pool's");
        assert_eq!(s.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port, 31000);
        let moved = Endpoint { address: "127.128.0.10".parse().unwrap(), port: 31000 };
        assert!(needs_write(&node, Some(&moved), &Report::default()));
        assert!(needs_write(&Node { status: Some(before), ..Default::default() }, Some(&e), &Report::default()));
    }

    #[test]
    fn unknown_ready_needs_a_write_and_keeps_other_transition_times() {
        let ip: IpAddr = "10.1.0.1".parse().unwrap();
        let mut s = simulated("n", None, &[ip], None, &now(), &NodeDefaults::default());
        for c in s.conditions.as_mut().unwrap() {
            if c.type_ == "Ready" {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
            }
        }
        let node = Node { status: Some(s.clone()), ..Default::default() };
        assert!(needs_write(&node, None, &Report::default()));
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(2_000_000).unwrap());
        let fixed = healthy_conditions(s.conditions.as_deref(), &later);
        let ready = fixed.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.last_transition_time, Some(later.clone()));
        let mem = fixed.iter().find(|c| c.type_ == "MemoryPressure").unwrap();
        assert_eq!(mem.last_transition_time, Some(now()));
    }

    #[test]
    fn bad_conditions_are_reported_with_the_kubelets_reasons_and_the_rest_stay_healthy() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let s = simulated("n", None, &[ip], None, &now(), &NodeDefaults::default());
        let node = Node { status: Some(s.clone()), ..Default::default() };
        let bad_now = [BadCondition::MemoryPressure, BadCondition::NotReady];
        assert!(needs_write(&node, None, &Report::bad(&bad_now)), "healthy, but the knobs say otherwise");
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(2_000_000).unwrap());
        let reported = reported_conditions(s.conditions.as_deref(), &later, &Report::bad(&bad_now));
        let get = |t: &str| reported.iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!(
            (get("MemoryPressure").status.as_str(), get("MemoryPressure").reason.as_deref()),
            ("True", Some("KubeletHasInsufficientMemory"))
        );
        assert_eq!((get("Ready").status.as_str(), get("Ready").reason.as_deref()), ("False", Some("KubeletNotReady")));
        assert_eq!(get("Ready").last_transition_time, Some(later.clone()), "a change moves the transition time");
        assert_eq!(get("DiskPressure").last_transition_time, Some(now()), "an unchanged one keeps it");
        let written = Node { status: Some(NodeStatus { conditions: Some(reported), ..s }), ..Default::default() };
        assert!(!needs_write(&written, None, &Report::bad(&bad_now)));
        assert!(needs_write(&written, None, &Report::default()), "and back to healthy when the window ends");
    }

    #[test]
    fn platform_labels_follow_node_info() {
        let labels = |s: Option<&NodeStatus>| platform_labels(s).map(|(k, v)| format!("{k}={v}"));
        assert_eq!(labels(None), ["kubernetes.io/os=linux", "kubernetes.io/arch=amd64"]);
        let arm = NodeStatus {
            node_info: Some(NodeSystemInfo { architecture: "arm64".into(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(labels(Some(&arm)), ["kubernetes.io/os=linux", "kubernetes.io/arch=arm64"]);
    }
}
