//! NodePool on the pool core: how a Node child is rendered (born in the care of the process's
//! simulated kubelet, with the status, address and endpoint it then keeps), judged ready and
//! updated in place.

use super::api::{KubevirtNodes, NodePool};
use super::rules::node_template_warnings;
use crate::api::PoolStatus;
use crate::api::conventions::{
    FAKE_NODE_ANNOTATION, FAKE_TAINT_KEY, FAKE_VALUE, HOSTNAME_LABEL, TYPE_LABEL, TYPE_VALUE,
};
use crate::api::lifecycle::LifecycleSpec;
use crate::api::ranges::{nth_host, nth_subnet};
use crate::api::storage;
use crate::informer::{Informer, Informers};
use crate::kubelet::Kubelet;
use crate::kubelet::status::cloud::{self, Phase};
use crate::kubelet::status::endpoint::{RESOURCE_METRICS_PATH_ANNOTATION, resource_metrics_path};
use crate::kubelet::status::node as node_status;
use crate::pool::plan::UpdateMode;
use crate::pool::stamp::from_template;
use crate::pool::status::{Problem, Reason};
use crate::pool::{ChildId, NoFlags, PoolKind, Shared, Write, hash};
use crate::setup::SetupError;
use crate::sync::lock;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client};
use std::sync::Arc;

fn pool_net(text: &str, field: &str) -> Result<IpNet, Problem> {
    text.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|e| Problem { reason: Reason::InvalidSpec, message: format!("{field}: {text:?} is not a CIDR ({e})") })
}

/// The startup taints a node was born with (`key:effect`, comma-separated).
pub const STARTUP_TAINTS_ANNOTATION: &str = "pools.kwok.x-k8s.io/startup-taints";

fn fake_taint() -> Taint {
    Taint { key: FAKE_TAINT_KEY.into(), value: Some(FAKE_VALUE.into()), effect: "NoSchedule".into(), time_added: None }
}

impl NodePool {
    fn boots(&self) -> Option<&crate::api::cloud::Boot> {
        self.spec.lifecycle.as_ref()?.nodes.as_ref()?.boot.as_ref()
    }

    /// Whether its nodes are born NotReady: they boot, or their launch may fail.
    fn born_booting(&self) -> bool {
        let nodes = self.spec.lifecycle.as_ref().and_then(|l| l.nodes.as_ref());
        nodes.is_some_and(|n| n.boot.is_some() || n.launch_failures.as_ref().is_some_and(|l| l.percent > 0))
    }

    /// The taints every node of the pool is born with: the template's, the fake-node taint,
    /// and its boot's startup taints (listed in an annotation, so updates leave them off once
    /// shed).
    fn add_taints(&self, spec: &mut NodeSpec, metadata: &mut kube::api::ObjectMeta) {
        let mut taints = spec.taints.take().unwrap_or_default();
        if !taints.iter().any(|t| t.key == FAKE_TAINT_KEY && t.effect == "NoSchedule") {
            taints.push(fake_taint());
        }
        let boots = self.boots();
        let startup = boots.map(|b| b.startup_taints.as_slice()).unwrap_or_default();
        for t in startup {
            if !taints.iter().any(|o| o.key == t.key && o.effect == t.effect) {
                taints.push(t.clone());
            }
        }
        if !startup.is_empty() {
            // What the node sheds once Ready: an update in place does not put it back.
            let listed: Vec<String> = startup.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect();
            metadata.annotations.get_or_insert_default().insert(STARTUP_TAINTS_ANNOTATION.into(), listed.join(","));
        }
        spec.taints = Some(taints);
    }

    /// The InternalIPs node `index` gets, if any is decided here.
    fn internal_ips(&self, index: u32, name: &str, env: &Kubelet) -> Result<Vec<std::net::IpAddr>, Problem> {
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
        let mut addresses = lock(&env.addresses);
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
    /// The kubelet of this process: nodes are born with the status, address and endpoint it
    /// then keeps.
    type Env = Kubelet;
    type Flags = NoFlags;
    const NOUN: &'static str = "node";
    const TEMPLATE_PATH: &'static str = "spec.nodeTemplate";
    // A POST never takes over a real Node that appeared under a child's name after the store
    // was read (a forced apply would); later writes are applies guarded by the node's UID.
    const CREATE_WITH_POST: bool = true;
    const PATCHES_CHILDREN: bool = true;

    fn validation_env() -> Kubelet {
        // Nodes rendered for validation carry the template's status, not a simulated one, and
        // take no address from the shared allocator.
        Kubelet::scratch()
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

    fn lifecycle(&self) -> Option<&dyn LifecycleSpec> {
        self.spec.lifecycle.as_ref().map(|l| l as &dyn LifecycleSpec)
    }

    fn count(&self) -> u32 {
        self.spec.node_count.max(0) as u32
    }

    fn template_hash(&self) -> String {
        let template = (&self.spec.node_template.rendered_part(), &self.spec.pod_cidr, &self.spec.internal_ips);
        // Without a topology or kubevirt the hash is what it was before those fields existed
        // (no roll).
        match (&self.spec.topology, &self.spec.kubevirt, &self.spec.capacity) {
            (None, None, None) => hash::of(&template),
            (Some(t), None, None) => hash::of(&(template, t)),
            (t, Some(k), None) => hash::of(&(template, t, k)),
            (t, k, Some(c)) => hash::of(&(template, t, k, c)),
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

    fn env(_flags: &NoFlags, shared: &Shared) -> Result<Kubelet, SetupError> {
        Ok(shared.kubelet.clone())
    }

    fn children(informers: &Informers) -> Arc<Informer<Node>> {
        crate::informer::shared::nodes(informers)
    }

    fn render(&self, id: &ChildId, env: &Kubelet) -> Result<Node, Problem> {
        let (name, index) = (id.name.clone(), id.index);
        let template = &self.spec.node_template;
        let mut metadata = from_template(template.metadata.as_ref());
        let labels = metadata.labels.get_or_insert_default();
        labels.entry(TYPE_LABEL.into()).or_insert_with(|| TYPE_VALUE.into());
        labels.insert(HOSTNAME_LABEL.into(), name.clone());
        for (key, value) in node_status::platform_labels(template.status.as_ref()) {
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
        for (key, value) in self.spec.capacity.as_ref().map(|c| c.labels(index)).unwrap_or_default() {
            labels.insert(key.into(), value);
        }
        let annotations = metadata.annotations.get_or_insert_default();
        annotations.insert(FAKE_NODE_ANNOTATION.into(), FAKE_VALUE.into());
        // As a kubelet registers: the attach/detach controller attaches its volumes.
        annotations.insert(storage::CONTROLLER_ATTACH_ANNOTATION.into(), "true".into());
        if let Some(limit) = self.spec.storage.as_ref().and_then(|s| s.attach_limit) {
            annotations.insert(storage::ATTACH_LIMIT_ANNOTATION.into(), limit.to_string());
        }
        let endpoint = env.endpoint(&name);
        if endpoint.is_some() {
            // Where metrics-server scrapes the node (a path that names it works at any address).
            metadata
                .annotations
                .get_or_insert_default()
                .insert(RESOURCE_METRICS_PATH_ANNOTATION.into(), resource_metrics_path(&name));
        }

        let mut spec: NodeSpec = template.spec.clone().unwrap_or_default();
        self.add_taints(&mut spec, &mut metadata);
        if spec.provider_id.as_deref().is_none_or(str::is_empty) {
            // Cloud-aware tools (autoscalers, node-lifecycle tooling) key nodes by it: kwok's form.
            spec.provider_id = Some(format!("kwok://{name}"));
        }
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
        if let (true, Some(s)) = (env.simulate && self.born_booting(), status.as_mut()) {
            // Born as a booting kubelet registers: NotReady, so nothing lands before it is up
            // (the simulator decides then whether its launch failed).
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let report = node_status::Report { cloud: Some(Phase::Booting), ..Default::default() };
            s.conditions = Some(node_status::reported_conditions(None, &now, &report));
        }

        Ok(Node { metadata, spec: Some(spec), status })
    }

    fn is_ready(child: &Node) -> bool {
        node_status::is_ready(child)
    }

    /// A node whose launch failed counts as failing, and is replaced once its knob's
    /// `replaceAfter` has passed (the simulator then marks it due).
    fn is_failing(child: &Node) -> bool {
        cloud::launch_failed(child).is_some()
    }

    fn is_finished(child: &Node) -> bool {
        cloud::launch_failed(child) == Some(true)
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
        // Startup taints the node shed once Ready stay off.
        if let (Some(spec), Some(listed)) = (
            desired.spec.as_mut(),
            desired.metadata.annotations.as_ref().and_then(|a| a.get(STARTUP_TAINTS_ANNOTATION)),
        ) {
            let startup: Vec<&str> = listed.split(',').collect();
            let has = |t: &Taint| cloud::has_taint(child, t);
            if let Some(taints) = spec.taints.as_mut() {
                taints.retain(|t| has(t) || !startup.contains(&format!("{}:{}", t.key, t.effect).as_str()));
            }
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
