#![allow(clippy::duplicated_attributes)] // kube(printcolumn(...)) repeats keys by design
//! NodePool: a cluster-scoped pool of fake Nodes.

use crate::api::common::{PoolStatus, SubnetRange, TemplateMetadata};
use crate::api::lifecycle::{LifecycleSpec, NodeLifecycle, PodLifecycle, Sections};
use crate::api::schema;
use crate::api::validation;
use garde::Validate;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A pool of `nodeCount` fake Nodes named `<pool>-<index>`, each rendered from `nodeTemplate`
/// and kept Ready by the simulator.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[garde(context(NodePoolRules))]
#[kube(
    group = "pools.kwok.x-k8s.io",
    version = "v1alpha1",
    kind = "NodePool",
    status = "NodePoolStatus",
    shortname = "knp",
    category = "pools",
    derive = "PartialEq",
    doc = "A pool of fake Nodes kept Ready by the kwok-pools simulator",
    scale(
        spec_replicas_path = ".spec.nodeCount",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.nodeCount", description = "nodes wanted"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas", description = "nodes Ready"),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "nodes rendered from the current template"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Not-Ready",
        type_ = "integer",
        json_path = ".status.notReadyReplicas",
        description = "nodes that exist but are not ready",
        priority = 1
    ),
    cel
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.podCIDR) || !isCIDR(self.podCIDR.cidr) || self.podCIDR.maskSize <= cidr(self.podCIDR.cidr).prefixLength() || self.podCIDR.maskSize - cidr(self.podCIDR.cidr).prefixLength() >= 17 || self.nodeCount <= [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536][self.podCIDR.maskSize - cidr(self.podCIDR.cidr).prefixLength()]")
    .message("podCIDR.cidr has fewer subnets of podCIDR.maskSize than nodeCount: use a larger cidr, a longer maskSize or fewer nodes")
    .field_path(".podCIDR"))]
#[x_kube(validation = Rule::new("!has(self.internalIPs) || !isCIDR(self.internalIPs) || (cidr(self.internalIPs).ip().family() == 4 ? 32 : 128) - cidr(self.internalIPs).prefixLength() >= 18 || self.nodeCount + 2 <= [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072][(cidr(self.internalIPs).ip().family() == 4 ? 32 : 128) - cidr(self.internalIPs).prefixLength()]")
    .message("internalIPs has fewer host addresses than nodeCount: use a larger range or fewer nodes")
    .field_path(".internalIPs"))]
pub struct NodePoolSpec {
    /// How many nodes the pool keeps (0 to 100000).
    #[schemars(range(min = 0, max = 100000))]
    #[garde(custom(validation::count))]
    pub node_count: i32,

    /// The Node every child is rendered from: labels, annotations, spec and status. Without
    /// it, nodes look like kwokctl's default node (32 CPU, 256Gi memory, 100Gi ephemeral
    /// storage, 110 pods, amd64/linux).
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    #[garde(custom(NodeTemplate::rules))]
    pub node_template: NodeTemplate,

    /// Optional pod ranges: node `i` gets the `i`-th subnet as `spec.podCIDR(s)`. Without it the
    /// controller manager's node IPAM assigns podCIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podCIDR")]
    #[garde(custom(NodePoolSpec::pod_cidr_rules(self.node_count)))]
    pub pod_cidr: Option<SubnetRange>,

    /// Optional address range: node `i` gets the `i`-th host address as its InternalIP.
    /// Without it addresses come from the operator's default node range.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "internalIPs")]
    #[schemars(schema_with = "schema::cidr_string")]
    #[x_kube(validation = Rule::new("isCIDR(self)").message("must be a CIDR such as 10.1.0.0/16"))]
    #[garde(custom(NodePoolSpec::internal_ips_rules(self.node_count)))]
    pub internal_ips: Option<String>,

    /// Where the nodes are: `topology.kubernetes.io/zone` spread over `zones` by node index
    /// (round-robin, or by `weights`) and one `topology.kubernetes.io/region`, so topology
    /// spread constraints and zonal autoscalers see a multi-zone cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(NodePoolSpec::topology_rules(&self.node_template)))]
    pub topology: Option<Topology>,

    /// Spot and on-demand nodes with hourly prices, as labels cost-aware tools read
    /// (`karpenter.sh/capacity-type`, `pools.kwok.x-k8s.io/price-per-hour`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(NodePoolSpec::capacity_rules))]
    pub capacity: Option<Capacity>,

    /// Volumes of the simulated CSI driver (`disk.csi.pools.kwok.x-k8s.io`) on these nodes:
    /// how many may be attached to each (its CSINode's attach limit, which the scheduler's
    /// NodeVolumeLimits enforces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(NodePoolSpec::storage_rules))]
    pub storage: Option<NodeStorage>,

    /// Fake accelerators (Dynamic Resource Allocation): each node publishes one ResourceSlice
    /// per driver with these devices, so the real scheduler allocates ResourceClaims on
    /// simulated nodes. Changing them updates the slices in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new("self.all(d, self.exists_one(o, (has(o.driver) ? o.driver : has(o.preset) && o.preset == 'nvidia-gpu' ? 'gpu.nvidia.com' : 'dra.cpu') == (has(d.driver) ? d.driver : has(d.preset) && d.preset == 'nvidia-gpu' ? 'gpu.nvidia.com' : 'dra.cpu')))").message("list each driver once (a preset counts as its driver)"))]
    #[garde(custom(NodePoolSpec::devices_rules))]
    pub devices: Vec<super::devices::DeviceSet>,

    /// Nodes as KubeVirt's virt-handler prepares them, for running beside a real KubeVirt: the
    /// `kubevirt.io/schedulable=true` label and the `devices.kubevirt.io/kvm`, `tun` and
    /// `vhost-net` capacity its device plugins advertise, so KubeVirt's own launcher pods
    /// (which select the label and ask for the devices) can be scheduled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(NodePoolSpec::kubevirt_rules))]
    pub kubevirt: Option<KubevirtNodes>,

    /// How the nodes (and the pods on them that no PodPool governs) behave: flapping nodes,
    /// start delays, exits, failures, crash loops. See the README's "Lifecycle" section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(validation::lifecycle))]
    pub lifecycle: Option<NodePoolLifecycle>,
}

/// `spec.lifecycle` of a NodePool: its nodes, and the pods on them that no PodPool governs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolLifecycle {
    /// Makes every random choice reproducible: which pods fail, which nodes flap, each delay.
    /// Without it, each run differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodLifecycle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeLifecycle>,
}

impl LifecycleSpec for NodePoolLifecycle {
    fn sections(&self) -> Sections<'_> {
        Sections { seed: self.seed, pods: self.pods.as_ref(), nodes: self.nodes.as_ref() }
    }
}

/// A Node template. `apiVersion: v1` and `kind: Node` are accepted for copy-paste.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'v1'").message("must be v1 (or omitted)"))]
    pub api_version: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'Node'").message("must be Node (or omitted)"))]
    pub kind: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,

    /// The Node spec (taints, podCIDR, providerID, unschedulable…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<NodeSpec>")]
    pub spec: Option<NodeSpec>,

    /// The Node status to report: capacity, allocatable, nodeInfo, phase… The simulator fills
    /// in conditions, addresses and what is left unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<NodeStatus>")]
    pub status: Option<NodeStatus>,
}

impl NodeTemplate {
    /// What children are rendered from (for the template hash): the template without the
    /// metadata the API server sets itself on a create.
    pub fn rendered_part(&self) -> NodeTemplate {
        NodeTemplate { metadata: self.metadata.as_ref().map(TemplateMetadata::rendered_part), ..self.clone() }
    }
}

/// The zones and region of a pool's nodes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.weights) || size(self.weights) == size(self.zones)")
    .message("weights needs one weight per zone")
    .field_path(".weights"))]
pub struct Topology {
    /// The region of every node (`topology.kubernetes.io/region`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub region: Option<String>,
    /// The zones (`topology.kubernetes.io/zone`): node `i` is in `zones[i mod n]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    pub zones: Vec<String>,
    /// A weight per zone (1 to 1000) for uneven zones: within every run of `sum(weights)`
    /// consecutive indexes, zone `k` gets `weights[k]` nodes, in the order of `zones`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(range(min = 1, max = 1000)))]
    pub weights: Vec<u32>,
}

impl Topology {
    /// The zone of node `index` (`None`: no zones).
    pub fn zone_of(&self, index: u32) -> Option<&str> {
        let n = self.zones.len();
        if n == 0 {
            return None;
        }
        if self.weights.len() != n || self.weights.contains(&0) {
            return Some(&self.zones[index as usize % n]);
        }
        let total: u64 = self.weights.iter().map(|w| u64::from(*w)).sum();
        let mut at = u64::from(index) % total;
        for (zone, weight) in self.zones.iter().zip(&self.weights) {
            if at < u64::from(*weight) {
                return Some(zone);
            }
            at -= u64::from(*weight);
        }
        None
    }
}

/// Which nodes are spot and what each costs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Percent of the nodes that are spot (`karpenter.sh/capacity-type: spot`), spread evenly
    /// over the indexes; the others are `on-demand`. Pair with `lifecycle.nodes.interruptions`
    /// and its `spotOnly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::api::lifecycle::percent_schema")]
    pub spot_percent: Option<u8>,
    /// What an on-demand node costs per hour (a decimal such as `0.096`), as the label
    /// `pools.kwok.x-k8s.io/price-per-hour`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "price_schema")]
    pub on_demand_price: Option<String>,
    /// What a spot node costs per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "price_schema")]
    pub spot_price: Option<String>,
}

/// The label a node's hourly price is written in.
pub const PRICE_LABEL: &str = "pools.kwok.x-k8s.io/price-per-hour";
/// The pattern of a price: a decimal, at most 63 characters (a label value).
pub const PRICE_PATTERN: &str = r"^[0-9]{1,12}(\.[0-9]{1,12})?$";

fn price_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "pattern": PRICE_PATTERN, "maxLength": 25})
}

impl Capacity {
    /// Whether node `index` is spot: within every 100 consecutive indexes, `spotPercent` of
    /// them, evenly spaced.
    pub fn is_spot(&self, index: u32) -> bool {
        let p = u64::from(self.spot_percent.unwrap_or(0).min(100));
        let i = u64::from(index) % 100;
        (i + 1) * p / 100 > i * p / 100
    }

    /// The labels of node `index`: its capacity type and, when known, its price.
    pub fn labels(&self, index: u32) -> Vec<(&'static str, String)> {
        let spot = self.is_spot(index);
        let mut out =
            vec![(crate::api::cloud::CAPACITY_TYPE_LABEL, if spot { "spot" } else { "on-demand" }.to_string())];
        if let Some(price) = if spot { &self.spot_price } else { &self.on_demand_price } {
            out.push((PRICE_LABEL, price.clone()));
        }
        out
    }
}

/// The simulated CSI driver on a pool's nodes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStorage {
    /// How many of the driver's volumes may be attached to one node (0 to 4096; default 39,
    /// the scheduler's former default for a cloud block disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4096))]
    pub attach_limit: Option<u32>,
}

/// What virt-handler gives a node it runs on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubevirtNodes {
    /// How many of each device a node advertises (virt-handler's default: 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub devices: Option<u32>,
}

impl KubevirtNodes {
    /// virt-handler's label on the nodes it can run VMs on.
    pub const SCHEDULABLE_LABEL: &'static str = "kubevirt.io/schedulable";
    /// The device plugins' resources.
    pub const DEVICES: [&'static str; 3] =
        ["devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"];

    /// How many of each device a node advertises.
    pub fn device_count(&self) -> u32 {
        self.devices.unwrap_or(1000)
    }
}

/// What NodePool rules need beyond the spec.
#[derive(Clone, Debug, Default)]
pub struct NodePoolRules {
    /// Ranges of the other NodePools: (name, podCIDR, internalIPs).
    pub others: Vec<(String, Option<IpNet>, Option<IpNet>)>,
    /// On update: the spec before the change and how many children the pool has.
    pub old: Option<(NodePoolSpec, u32)>,
}

/// A NodePool's status: what every pool reports, and its nodes' devices.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(flatten)]
    pub pool: PoolStatus,
    /// Per driver of `spec.devices`: the devices its nodes publish, how many a ResourceClaim
    /// holds, how many are unhealthy (written by the simulator).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<super::devices::status::DeviceCount>,
}

impl std::ops::Deref for NodePoolStatus {
    type Target = PoolStatus;

    fn deref(&self) -> &PoolStatus {
        &self.pool
    }
}
