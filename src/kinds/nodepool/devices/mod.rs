//! Fake accelerators on a NodePool's nodes (Dynamic Resource Allocation): `spec.devices` (this
//! file), its rules ([`rules`]), the real drivers' layouts it can start from ([`presets`]) and
//! the ResourceSlices a node publishes for it ([`slices`]; resource.k8s.io/v1, the pool named
//! after the node), so the real scheduler allocates ResourceClaims against simulated devices.
//! Pure: the simulator's publisher writes what [`slices::slices`] builds.

pub mod counter;
pub mod prepare;
pub mod presets;
pub mod publisher;
pub mod rules;
pub mod slices;
pub mod status;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use presets::Preset;
pub use rules::problems;
pub use slices::{slice_name, slices};

/// Label on a published slice: the NodePool whose `spec.devices` it shows.
pub const POOL_LABEL: &str = crate::api::conventions::DEVICE_POOL_LABEL;

/// One driver's devices on every node of the pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.driver) || has(self.preset)").message("set driver, or a preset that names one"))]
pub struct DeviceSet {
    /// A real driver's published layout to start from: `nvidia-gpu` (the NVIDIA DRA driver's
    /// `gpu.nvidia.com` GPUs, 8 per node, and MIG partitions if `partitions` are listed) or
    /// `dra-cpu` (dra-driver-cpu's `dra.cpu` NUMA-node devices, 2 per node). A DeviceClass
    /// written for the real driver selects them unchanged; what the set says besides wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// The DRA driver the slices name (a DNS subdomain such as `gpu.example.com`): a
    /// DeviceClass selects it with `device.driver`. Defaults to the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("must be a DNS subdomain such as gpu.example.com"))]
    pub driver: Option<String>,
    /// Devices on each node (default: the preset's, else 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 128))]
    pub count: Option<u32>,
    /// Devices are named `<name>-<i>` (default `gpu`; a preset names them as its driver does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("must be a DNS label such as gpu"))]
    pub name: Option<String>,
    /// What every device has, by attribute name (without a domain, the driver's): each one a
    /// `string`, `int`, `bool` or `version` (semver).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Quantities every device has (`memory: 80Gi`), for claims that ask for capacity. With
    /// `partitions`, they are also the device's shared counters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub capacity: BTreeMap<String, Quantity>,
    /// Partitionable devices (MIG-style): each device also offers these partitions, which
    /// consume its capacity as shared counters; a claim on the whole device and claims on its
    /// partitions exclude each other as the counters say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub partitions: Vec<Partition>,
    /// A seeded share of the devices that is unhealthy: tainted `NoSchedule` with
    /// `pools.kwok.x-k8s.io/unhealthy` (a DeviceTaint), so the scheduler allocates them to no claim
    /// that does not tolerate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub unhealthy_percent: Option<u8>,
    /// A seeded share of the pods whose claims hold a device of this driver that the
    /// (simulated) kubelet plugin fails to prepare: the pod stays ContainerCreating with the
    /// kubelet's `FailedPrepareDynamicResources` event, as with a broken driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub prepare_fail_percent: Option<u8>,
    /// A share of the nodes whose devices differ (another product, more memory), drawn per
    /// node from the pool's `lifecycle.seed` and the node's name; in order, at most 100 % in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub variants: Vec<DeviceVariant>,
}

/// A typed attribute value: exactly one of the four.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.string), has(self.int), has(self.bool), has(self.version)].filter(x, x).size() == 1")
    .message("set exactly one of: string, int, bool, version"))]
pub struct AttributeValue {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub version: Option<String>,
}

impl AttributeValue {
    pub fn string(s: impl Into<String>) -> Self {
        Self { string: Some(s.into()), ..Self::default() }
    }
    pub fn int(i: i64) -> Self {
        Self { int: Some(i), ..Self::default() }
    }
    pub fn bool(b: bool) -> Self {
        Self { bool: Some(b), ..Self::default() }
    }
    pub fn version(v: impl Into<String>) -> Self {
        Self { version: Some(v.into()), ..Self::default() }
    }
}

/// One kind of partition every device offers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// Its profile (`1g.10gb`): the partition devices are named `<device>-<name without
    /// dots>-<k>` (with the `nvidia-gpu` preset, `<device>-mig-<name without dots>-<k>`, and
    /// the name is their `profile` attribute).
    #[schemars(length(min = 1, max = 20))]
    pub name: String,
    /// How many of it one device holds at most (1 to 16).
    #[schemars(range(min = 1, max = 16))]
    pub count: u32,
    /// What one partition takes of the device's capacity (every name must be one of the
    /// set's `capacity`): its own capacity, and what it consumes of the device's counters.
    #[schemars(extend("maxProperties" = 32))]
    pub consumes: BTreeMap<String, Quantity>,
    /// Attributes the partition has besides the device's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub attributes: BTreeMap<String, AttributeValue>,
}

/// Devices that differ on a share of the nodes: these attributes and capacities replace the
/// set's.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceVariant {
    /// Percent of the pool's nodes.
    #[schemars(range(min = 0, max = 100))]
    pub percent: u8,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub attributes: BTreeMap<String, AttributeValue>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub capacity: BTreeMap<String, Quantity>,
}

impl DeviceSet {
    /// The driver the slices name: the set's, else its preset's.
    pub fn driver(&self) -> &str {
        self.driver.as_deref().or(self.preset.map(Preset::driver)).unwrap_or_default()
    }

    pub fn count(&self) -> u32 {
        self.count.or(self.preset.map(Preset::count)).unwrap_or(1)
    }

    /// Whole devices plus partitions on one node.
    pub fn devices_per_node(&self) -> u32 {
        let partitions = self.partitions.iter().fold(1u32, |n, p| n.saturating_add(p.count));
        self.count().saturating_mul(partitions)
    }
}
