//! NodePool on the pool core: how a Node child is rendered, judged ready and updated in place,
//! and the flags of the kubelet the simulator plays for its nodes.

use super::api::{KubevirtNodes, NodePool};
use super::rules::node_template_warnings;
use super::simulator::kubelet_api::{KubeletApiFlags, KubeletEnv};
use crate::api::PoolStatus;
use crate::api::conventions::{
    FAKE_NODE_ANNOTATION, FAKE_TAINT_KEY, FAKE_VALUE, HOSTNAME_LABEL, TYPE_LABEL, TYPE_VALUE,
};
use crate::api::lifecycle::Lifecycle;
use crate::api::ranges::{nth_host, nth_subnet};
use crate::cli::duration::parse_duration;
use crate::informer::{Informer, Informers};
use crate::ipam::HostAllocator;
use crate::ipam::fallback::FallbackRange;
use crate::kubelet::endpoint::{RESOURCE_METRICS_PATH_ANNOTATION, resource_metrics_path};
use crate::kubelet::node::{self as node_status, NodeDefaults};
use crate::pool::plan::UpdateMode;
use crate::pool::stamp::from_template;
use crate::pool::status::{Problem, Reason};
use crate::pool::{ChildId, PoolKind, Shared, Write, hash};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The flags of the nodes' kubelet (on `run` and `simulate`).
#[derive(clap::Args, Clone, Debug)]
pub struct NodeFlags {
    /// How often node conditions get a fresh heartbeat time (e.g. 60s, 5m).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub node_status_frequency: Duration,
    /// The range InternalIPs come from for nodes whose pool sets no spec.internalIPs.
    #[arg(long, default_value = "100.64.0.0/10")]
    pub node_ip_range: IpNet,
    /// nodeInfo.kubeletVersion for nodes whose template sets none.
    #[arg(long, default_value = "fake")]
    pub node_kubelet_version: String,
    /// How long a deleted pod takes to exit, for pods whose pools say nothing
    /// (`spec.lifecycle.pods.exitDelay`); never longer than its grace period. Default 1s, as a
    /// process that honours SIGTERM; set it to the grace period's length (or use
    /// `ignoreSIGTERM` on a pool) for pods that hold on until they are killed.
    #[arg(long, value_parser = parse_duration)]
    pub pod_termination_delay: Option<Duration>,
    /// How long pods owned by a Job run before they complete successfully, for pods whose
    /// pools say nothing (`spec.lifecycle.pods.jobRunTime`).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub job_run_time: Duration,
    /// Pods on a node without a podCIDR (a cluster whose controller manager does not allocate
    /// node CIDRs) get addresses from a block of this range, one block per node, claimed
    /// cluster-wide by a Lease in kube-node-lease that the node owns. `none`: such pods wait
    /// without an address. The default holds kwok's default `--cidr` (10.0.0.1/24).
    // (Spelled out so clap takes the parser's `Option` as the value, not as "may be absent".)
    #[arg(long, default_value = "10.0.0.0/12", value_parser = parse_fallback)]
    pub pod_cidr_fallback: std::option::Option<IpNet>,
    /// The size of each node's block of `--pod-cidr-fallback` (as the controller manager's
    /// `--node-cidr-mask-size`).
    #[arg(long, default_value_t = 24)]
    pub pod_cidr_fallback_mask: u8,
    /// How long a node goes without a podCIDR before its pods fall back (a controller manager
    /// that allocates node CIDRs gives one within moments).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub pod_cidr_fallback_after: Duration,
    /// The longest wait between a node's lease renewals while the simulator's writes queue
    /// behind a saturated API server, as a share of the lease duration (0.25 to 0.875). With
    /// room, renewals come every quarter of it, as the kubelet's; under load they stretch
    /// toward this share so the API server goes to the workload, keeping the rest of the lease
    /// for the controller manager's monitor period and the measured queueing. 0.25: never
    /// stretch.
    #[arg(long, default_value_t = super::simulator::renewal::DEFAULT_FRACTION, value_parser = parse_stretch)]
    pub lease_stretch: f64,
    #[command(flatten)]
    pub kubelet: KubeletApiFlags,
}

fn parse_stretch(s: &str) -> Result<f64, String> {
    let v: f64 =
        s.parse().map_err(|_| format!("{s:?} is not a number: give a share of the lease duration such as 0.6"))?;
    if (0.25..=0.875).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} is outside 0.25 (the kubelet's cadence, never stretch) to 0.875 (all but the monitor period's share)"
        ))
    }
}

impl NodeFlags {
    /// The fallback range as the pod simulator takes it (`None`: off).
    pub fn fallback(&self) -> Result<Option<(FallbackRange, Duration)>, crate::pool::setup::SetupError> {
        let Some(net) = self.pod_cidr_fallback else { return Ok(None) };
        let range = FallbackRange::new(net, self.pod_cidr_fallback_mask)
            .map_err(|problem| crate::pool::setup::SetupError::Flag { flag: "--pod-cidr-fallback-mask", problem })?;
        Ok(Some((range, self.pod_cidr_fallback_after)))
    }
}

/// `--pod-cidr-fallback`: a CIDR, or `none`.
fn parse_fallback(text: &str) -> Result<Option<IpNet>, String> {
    if text.eq_ignore_ascii_case("none") || text.is_empty() {
        return Ok(None);
    }
    text.parse::<IpNet>()
        .map(|n| Some(n.trunc()))
        .map_err(|e| format!("{text:?} is not a CIDR such as 10.0.0.0/12 ({e}); or none to turn the fallback off"))
}

/// What rendering a node needs beyond its pool (shared with the node simulator).
#[derive(Clone)]
pub struct NodeEnv {
    /// Render nodes born Ready (this process simulates them). Off when another simulator
    /// (a real kwok) owns node status.
    pub simulate: bool,
    pub defaults: NodeDefaults,
    /// InternalIPs for nodes whose pool sets no `internalIPs`; shared with the simulator.
    pub addresses: Arc<Mutex<HostAllocator>>,
    /// The simulated kubelets' API, when this process simulates nodes and serves it: where
    /// each node's answers (nodes are born with their endpoint).
    pub kubelet: Option<KubeletEnv>,
}

fn pool_net(text: &str, field: &str) -> Result<IpNet, Problem> {
    text.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|e| Problem { reason: Reason::InvalidSpec, message: format!("{field}: {text:?} is not a CIDR ({e})") })
}

fn fake_taint() -> Taint {
    Taint { key: FAKE_TAINT_KEY.into(), value: Some(FAKE_VALUE.into()), effect: "NoSchedule".into(), time_added: None }
}

impl NodePool {
    /// The InternalIPs node `index` gets, if any is decided here.
    fn internal_ips(&self, index: u32, name: &str, env: &NodeEnv) -> Result<Vec<std::net::IpAddr>, Problem> {
        if let Some(range) = &self.spec.internal_ips {
            let net = pool_net(range, "spec.internalIPs")?;
            return nth_host(&net, index).map(|ip| vec![ip]).ok_or_else(|| Problem {
                reason: Reason::RangeExhausted,
                message: format!(
                    "spec.internalIPs {range} has no host address for node index {index}: use a larger range"
                ),
            });
        }
        if !env.simulate {
            return Ok(vec![]);
        }
        let mut addresses = env.addresses.lock().unwrap_or_else(|e| e.into_inner());
        let net = *addresses.net();
        addresses.allocate(name).map(|ip| vec![ip]).ok_or_else(|| Problem {
            reason: Reason::RangeExhausted,
            message: format!("the default node address range {net} is full: set spec.internalIPs or start the operator with a larger --node-ip-range"),
        })
    }
}

impl PoolKind for NodePool {
    /// Address ranges must not overlap another NodePool's.
    const PEER_RULES: bool = true;

    type Child = Node;
    type Stored = Node;
    type Env = NodeEnv;
    type Flags = NodeFlags;
    const NOUN: &'static str = "node";
    const TEMPLATE_PATH: &'static str = "spec.nodeTemplate";
    // A POST never takes over a real Node that appeared under a child's name after the store
    // was read (a forced apply would); later writes are applies guarded by the node's UID.
    const CREATE_WITH_POST: bool = true;
    const PATCHES_CHILDREN: bool = true;

    fn validation_env() -> NodeEnv {
        // Nodes rendered for validation carry the template's status, not a simulated one, and
        // take no address from the shared allocator.
        let scratch = IpNet::V4(ipnet::Ipv4Net::new_assert(std::net::Ipv4Addr::new(100, 64, 0, 0), 10));
        NodeEnv {
            simulate: false,
            defaults: NodeDefaults::default(),
            addresses: Arc::new(Mutex::new(HostAllocator::new(scratch))),
            kubelet: None,
        }
    }

    fn warnings(&self) -> Vec<String> {
        node_template_warnings(&self.spec.node_template)
    }

    fn example() -> Self {
        let mut pool = NodePool::new(
            "nodes",
            serde_json::from_value(serde_json::json!({
                "nodeCount": 3,
                "podCIDR": {"cidr": "10.0.0.0/16", "maskSize": 24},
                "internalIPs": "10.1.0.0/24",
                "nodeTemplate": {"metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}},
                                 "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                                            "allocatable": {"cpu": "7"}}},
                "lifecycle": {"seed": 1, "pods": {"startDelay": {"fixed": "1s"}}},
            }))
            .unwrap_or_else(|e| unreachable!("the example NodePool spec decodes: {e}")),
        );
        pool.metadata.uid = Some("example-uid".into());
        pool
    }

    fn lifecycle(&self) -> Option<&Lifecycle> {
        self.spec.lifecycle.as_ref()
    }

    fn count(&self) -> u32 {
        self.spec.node_count.max(0) as u32
    }

    fn template_hash(&self) -> String {
        let template = (&self.spec.node_template.rendered_part(), &self.spec.pod_cidr, &self.spec.internal_ips);
        // Without a topology or kubevirt the hash is what it was before those fields existed
        // (no roll).
        match (&self.spec.topology, &self.spec.kubevirt) {
            (None, None) => hash::of(&template),
            (Some(t), None) => hash::of(&(template, t)),
            (t, Some(k)) => hash::of(&(template, t, k)),
        }
    }

    fn pool_status(&self) -> Option<&PoolStatus> {
        self.status.as_ref().map(|s| &s.pool)
    }

    fn update_mode(&self) -> UpdateMode {
        UpdateMode::InPlace
    }

    fn problems(&self, old: Option<&Self>, peers: &[Arc<Self>]) -> Vec<String> {
        NodePool::problems(self, old, peers)
    }

    fn env(flags: &NodeFlags, shared: &Shared) -> Result<NodeEnv, crate::pool::setup::SetupError> {
        let range = flags.node_ip_range.trunc();
        // The default instance counts from the start of the range; others from a point of their own.
        let addresses = if shared.instance == "kwok-pools" {
            HostAllocator::new(range)
        } else {
            HostAllocator::seeded(range, &shared.instance)
        };
        let kubelet = if shared.simulate { KubeletEnv::new(&flags.kubelet)? } else { None };
        flags.fallback()?;
        Ok(NodeEnv {
            simulate: shared.simulate,
            defaults: NodeDefaults { kubelet_version: flags.node_kubelet_version.clone() },
            addresses: Arc::new(Mutex::new(addresses)),
            kubelet,
        })
    }

    fn children(informers: &Informers) -> Arc<Informer<Node>> {
        crate::informer::shared::nodes(informers)
    }

    fn render(&self, id: &ChildId, env: &NodeEnv) -> Result<Node, Problem> {
        let (name, index) = (id.name.clone(), id.index);
        let template = &self.spec.node_template;
        let mut metadata = from_template(template.metadata.as_ref());
        let labels = metadata.labels.get_or_insert_default();
        labels.entry(TYPE_LABEL.into()).or_insert_with(|| TYPE_VALUE.into());
        labels.insert(HOSTNAME_LABEL.into(), name.clone());
        for (key, value) in crate::kubelet::node::platform_labels(template.status.as_ref()) {
            labels.entry(key.into()).or_insert(value);
        }
        if let Some(topology) = &self.spec.topology {
            if let Some(zone) = topology.zone_of(index) {
                labels.insert(super::rules::ZONE_LABEL.into(), zone.to_string());
            }
            if let Some(region) = &topology.region {
                labels.insert(super::rules::REGION_LABEL.into(), region.clone());
            }
        }
        if self.spec.kubevirt.is_some() {
            labels.insert(KubevirtNodes::SCHEDULABLE_LABEL.into(), "true".into());
        }
        metadata.annotations.get_or_insert_default().insert(FAKE_NODE_ANNOTATION.into(), FAKE_VALUE.into());
        let endpoint = env
            .kubelet
            .as_ref()
            .and_then(|k| k.endpoints.lock().unwrap_or_else(|e| e.into_inner()).assign(&name, None));
        if endpoint.is_some() {
            // Where metrics-server scrapes the node (a path that names it works at any address).
            metadata
                .annotations
                .get_or_insert_default()
                .insert(RESOURCE_METRICS_PATH_ANNOTATION.into(), resource_metrics_path(&name));
        }

        let mut spec: NodeSpec = template.spec.clone().unwrap_or_default();
        let mut taints = spec.taints.take().unwrap_or_default();
        if !taints.iter().any(|t| t.key == FAKE_TAINT_KEY && t.effect == "NoSchedule") {
            taints.push(fake_taint());
        }
        spec.taints = Some(taints);
        if let Some(range) = &self.spec.pod_cidr {
            let net = pool_net(&range.cidr, "spec.podCIDR.cidr")?;
            let subnet = nth_subnet(&net, range.mask_size, index).ok_or_else(|| Problem {
                reason: Reason::RangeExhausted,
                message: format!(
                    "spec.podCIDR {} has no /{} subnet for node index {index}: use a larger cidr or a longer maskSize",
                    range.cidr, range.mask_size
                ),
            })?;
            spec.pod_cidr = Some(subnet.to_string());
            spec.pod_cidrs = Some(vec![subnet.to_string()]);
        }

        let ips = self.internal_ips(index, &name, env)?;
        let mut status = if env.simulate {
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            Some(node_status::simulated(&name, template.status.as_ref(), &ips, endpoint.as_ref(), &now, &env.defaults))
        } else {
            let mut s: NodeStatus = node_status::template_defaults(template.status.as_ref());
            if !ips.is_empty() {
                let mut addresses = s.addresses.take().unwrap_or_default();
                addresses.extend(ips.iter().map(|ip| k8s_openapi::api::core::v1::NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.to_string(),
                }));
                s.addresses = Some(addresses);
            }
            Some(s)
        };
        if let (Some(k), Some(s)) = (&self.spec.kubevirt, status.as_mut()) {
            add_kubevirt_devices(s, k);
        }

        Ok(Node { metadata, spec: Some(spec), status })
    }

    fn is_ready(child: &Node) -> bool {
        node_status::is_ready(child)
    }

    fn in_place(child: &Node, mut desired: Node) -> Vec<Write<Node>> {
        let mut writes = Vec::new();
        // The status goes through the status subresource; conditions are the simulator's.
        if let Some(mut status) = desired.status.take() {
            status.conditions = None;
            // Where the kubelet API answers is the simulator's to keep (another replica may
            // simulate the node): the node's own Hostname address and daemon port stay.
            let current = child.status.as_ref();
            status.daemon_endpoints = current.and_then(|c| c.daemon_endpoints.clone()).or(status.daemon_endpoints);
            if let (Some(list), Some(have)) = (status.addresses.as_mut(), current.and_then(|c| c.addresses.as_ref())) {
                let hosts: Vec<_> = have.iter().filter(|a| a.type_ == "Hostname").cloned().collect();
                if !hosts.is_empty() {
                    list.retain(|a| a.type_ != "Hostname");
                    list.extend(hosts);
                }
            }
            let want = serde_json::to_value(&status).unwrap_or_default();
            let have = serde_json::to_value(child.status.clone().unwrap_or_default()).unwrap_or_default();
            let differs = want.as_object().map(|m| m.iter().any(|(k, v)| have.get(k) != Some(v))).unwrap_or(false);
            if differs {
                writes.push(Write::MergeStatus(serde_json::json!({ "status": want })));
            }
        }
        // A podCIDR cannot change once set: keep what the node has (leaving it out would make
        // server-side apply try to remove it).
        if let (Some(spec), Some(current)) = (desired.spec.as_mut(), child.spec.as_ref())
            && current.pod_cidr.is_some()
        {
            spec.pod_cidr = current.pod_cidr.clone();
            spec.pod_cidrs = current.pod_cidrs.clone();
        }
        // Status first: the apply carries the new template hash, which marks the node done.
        writes.push(Write::Apply(desired));
        writes
    }

    fn child_api(client: Client, _pool: &Self) -> Api<Node> {
        Api::all(client)
    }

    fn pool_api(client: Client, _pool: &Self) -> Api<Self> {
        Api::all(client)
    }
}

/// virt-handler's device plugins on a node: each device in capacity and allocatable, unless the
/// template names it already.
fn add_kubevirt_devices(status: &mut NodeStatus, k: &KubevirtNodes) {
    let count = Quantity(k.device_count().to_string());
    for map in [&mut status.capacity, &mut status.allocatable] {
        let map = map.get_or_insert_default();
        for device in KubevirtNodes::DEVICES {
            map.entry(device.to_string()).or_insert_with(|| count.clone());
        }
    }
}

#[cfg(test)]
mod flag_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: NodeFlags,
    }

    fn flags(args: &[&str]) -> Result<NodeFlags, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|c| c.flags)
    }

    #[test]
    fn the_fallback_range_defaults_on_and_can_be_turned_off() {
        let (range, after) = flags(&[]).unwrap().fallback().unwrap().unwrap();
        assert_eq!((range.net.to_string(), range.mask, after), ("10.0.0.0/12".into(), 24, Duration::from_secs(10)));
        assert_eq!(flags(&["--pod-cidr-fallback", "none"]).unwrap().fallback().unwrap(), None);
        let kwok = flags(&["--pod-cidr-fallback", "10.0.0.1/16", "--pod-cidr-fallback-mask", "26"]).unwrap();
        assert_eq!(kwok.fallback().unwrap().unwrap().0.net.to_string(), "10.0.0.0/16");
        let bad = flags(&["--pod-cidr-fallback", "10.0.0/8"]).err().unwrap().to_string();
        assert!(bad.contains("not a CIDR") && bad.contains("none"), "{bad}");
        let e = flags(&["--pod-cidr-fallback-mask", "8"]).unwrap().fallback().unwrap_err().to_string();
        assert!(e.starts_with("--pod-cidr-fallback-mask:") && e.contains("from 12 to 30"), "{e}");
    }
}
