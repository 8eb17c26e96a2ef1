//! Fake accelerators on a NodePool's nodes (Dynamic Resource Allocation): `spec.devices`, its
//! rules, and the ResourceSlices a node publishes for it (resource.k8s.io/v1; one per node and
//! driver, the pool named after the node), so the real scheduler allocates ResourceClaims
//! against simulated devices. Pure: the simulator's publisher writes what [`slices`] builds.

use crate::api::duration::unit;
use crate::ipam::fnv;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Label on a published slice: the NodePool whose `spec.devices` it shows.
pub const POOL_LABEL: &str = "pools.kwok.x-k8s.io/device-pool";

/// One driver's devices on every node of the pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSet {
    /// The DRA driver the slices name (a DNS subdomain such as `gpu.example.com`): a
    /// DeviceClass selects it with `device.driver`.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("must be a DNS subdomain such as gpu.example.com"))]
    pub driver: String,
    /// Devices on each node (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 128))]
    pub count: Option<u32>,
    /// Devices are named `<name>-<i>` (default `gpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 50))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("must be a DNS label such as gpu"))]
    pub name: Option<String>,
    /// What every device has, by attribute name (without a domain, the driver's): each one a
    /// `string`, `int`, `bool` or `version` (semver).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Quantities every device has (`memory: 80Gi`), for claims that ask for capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub capacity: BTreeMap<String, Quantity>,
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
    pub fn count(&self) -> u32 {
        self.count.unwrap_or(1)
    }

    fn device_name(&self) -> &str {
        self.name.as_deref().unwrap_or("gpu")
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// An attribute or capacity name: a C identifier, optionally behind a domain (`model`,
/// `gpu.example.com/model`).
fn is_qualified(name: &str) -> bool {
    let (domain, id) = match name.rsplit_once('/') {
        Some((d, id)) => (Some(d), id),
        None => (None, name),
    };
    let id_ok = !id.is_empty()
        && id.len() <= 32
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    id_ok && domain.is_none_or(is_dns_subdomain)
}

fn value_problems(path: &str, attributes: &BTreeMap<String, AttributeValue>, capacity: &BTreeMap<String, Quantity>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, v) in attributes {
        if !is_qualified(name) {
            out.push(format!("{path}.attributes[{name}]: not an attribute name such as model or gpu.example.com/model"));
        }
        let set = [v.string.is_some(), v.int.is_some(), v.bool.is_some(), v.version.is_some()];
        if set.iter().filter(|s| **s).count() != 1 {
            out.push(format!("{path}.attributes[{name}]: set exactly one of: string, int, bool, version"));
        }
        if let Some(version) = &v.version
            && !is_semver(version)
        {
            out.push(format!("{path}.attributes[{name}].version: {version:?} is not a semantic version such as 1.2.3"));
        }
    }
    for (name, q) in capacity {
        if !is_qualified(name) {
            out.push(format!("{path}.capacity[{name}]: not a capacity name such as memory"));
        }
        if crate::api::validation::quantity::approximate(&q.0).is_none_or(|v| v < 0.0) {
            out.push(format!("{path}.capacity[{name}]: {:?} is not a quantity such as 80Gi", q.0));
        }
    }
    out
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Problems with `spec.devices`, each starting with its path below `spec.devices`.
pub fn problems(sets: &[DeviceSet]) -> Vec<String> {
    let mut out = Vec::new();
    if sets.len() > 8 {
        out.push(format!(": {} drivers; at most 8", sets.len()));
    }
    for (i, set) in sets.iter().enumerate() {
        let path = format!("[{i}]");
        if !is_dns_subdomain(&set.driver) {
            out.push(format!("{path}.driver: {:?} is not a DNS subdomain such as gpu.example.com", set.driver));
        }
        if sets[..i].iter().any(|o| o.driver == set.driver) {
            out.push(format!("{path}.driver: {} is listed twice; list each driver once", set.driver));
        }
        if !(1..=128).contains(&set.count()) {
            out.push(format!("{path}.count: {} is not a device count from 1 to 128", set.count()));
        }
        let name = set.device_name();
        if name.len() > 50 || !is_dns_subdomain(name) || name.contains('.') {
            out.push(format!("{path}.name: {name:?} is not a DNS label such as gpu"));
        }
        out.extend(value_problems(&path, &set.attributes, &set.capacity));
        let mut total = 0u32;
        for (k, v) in set.variants.iter().enumerate() {
            let vpath = format!("{path}.variants[{k}]");
            if v.percent > 100 {
                out.push(format!("{vpath}.percent: {} is not a percentage from 0 to 100", v.percent));
            }
            total += u32::from(v.percent);
            out.extend(value_problems(&vpath, &v.attributes, &v.capacity));
        }
        if total > 100 {
            out.push(format!("{path}.variants: the percentages add up to {total}, more than 100"));
        }
    }
    out
}

fn attribute(v: &AttributeValue) -> DeviceAttribute {
    DeviceAttribute { string: v.string.clone(), int: v.int, bool: v.bool, version: v.version.clone(), ..Default::default() }
}

/// The attributes and capacities of `set`'s devices on `node` (its variant, if the draw
/// lands in one).
fn values_on<'a>(set: &'a DeviceSet, seed: i64, node: &str) -> (BTreeMap<&'a String, &'a AttributeValue>, BTreeMap<&'a String, &'a Quantity>) {
    let mut attributes: BTreeMap<&String, &AttributeValue> = set.attributes.iter().collect();
    let mut capacity: BTreeMap<&String, &Quantity> = set.capacity.iter().collect();
    let roll = unit(seed, &[node, &set.driver, "variant"]) * 100.0;
    let mut edge = 0.0;
    if let Some(v) = set.variants.iter().find(|v| {
        edge += f64::from(v.percent.min(100));
        roll < edge
    }) {
        attributes.extend(v.attributes.iter());
        capacity.extend(v.capacity.iter());
    }
    (attributes, capacity)
}

/// The name of `node`'s slice for `driver` (at most 253 characters).
pub fn slice_name(node: &str, driver: &str) -> String {
    let name = format!("{node}-{}", driver.replace('.', "-"));
    if name.len() <= 253 {
        return name;
    }
    format!("{}-{:016x}", &name[..200], fnv(&name))
}

/// The ResourceSlices node `node` (with `node_uid`) of pool `pool` publishes for `sets`:
/// one per driver, the pool named after the node at `generation`, owned by the node.
pub fn slices(sets: &[DeviceSet], pool: &str, generation: i64, seed: i64, node: &str, node_uid: &str) -> Vec<ResourceSlice> {
    sets.iter()
        .map(|set| {
            let (attributes, capacity) = values_on(set, seed, node);
            let devices = (0..set.count())
                .map(|i| Device {
                    name: format!("{}-{i}", set.device_name()),
                    attributes: (!attributes.is_empty())
                        .then(|| attributes.iter().map(|(k, v)| ((*k).clone(), attribute(v))).collect()),
                    capacity: (!capacity.is_empty()).then(|| {
                        capacity
                            .iter()
                            .map(|(k, q)| ((*k).clone(), DeviceCapacity { value: (*q).clone(), ..Default::default() }))
                            .collect()
                    }),
                    ..Default::default()
                })
                .collect();
            ResourceSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name(node, &set.driver)),
                    labels: Some([(POOL_LABEL.to_string(), pool.to_string())].into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node.into(),
                        uid: node_uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: ResourceSliceSpec {
                    driver: set.driver.clone(),
                    node_name: Some(node.into()),
                    pool: ResourcePool { name: node.into(), generation, resource_slice_count: 1 },
                    devices: Some(devices),
                    ..Default::default()
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(yaml: &str) -> Vec<DeviceSet> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn each_node_publishes_one_slice_per_driver_with_its_devices() {
        let s = sets(
            "- {driver: gpu.example.com, count: 2, attributes: {model: {string: A100}, cores: {int: 6912}, driverVersion: {version: 1.2.3}}, capacity: {memory: 80Gi}}\n- {driver: nic.example.com, name: nic}\n",
        );
        assert_eq!(problems(&s), Vec::<String>::new());
        let out = slices(&s, "gpus", 4, 0, "gpus-0", "uid-0");
        assert_eq!(out.len(), 2);
        let gpu = &out[0];
        assert_eq!(gpu.metadata.name.as_deref(), Some("gpus-0-gpu-example-com"));
        assert_eq!(gpu.spec.node_name.as_deref(), Some("gpus-0"));
        assert_eq!((gpu.spec.pool.name.as_str(), gpu.spec.pool.generation, gpu.spec.pool.resource_slice_count), ("gpus-0", 4, 1));
        let devices = gpu.spec.devices.as_ref().unwrap();
        assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["gpu-0", "gpu-1"]);
        let a = devices[0].attributes.as_ref().unwrap();
        assert_eq!((a["model"].string.as_deref(), a["cores"].int, a["driverVersion"].version.as_deref()), (Some("A100"), Some(6912), Some("1.2.3")));
        assert_eq!(devices[0].capacity.as_ref().unwrap()["memory"].value, Quantity("80Gi".into()));
        let owner = &gpu.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "uid-0"));
        assert_eq!(out[1].spec.devices.as_ref().unwrap()[0].name, "nic-0");
    }

    #[test]
    fn a_seeded_share_of_nodes_has_the_variant() {
        let s = sets("- {driver: gpu.example.com, attributes: {model: {string: A100}}, variants: [{percent: 25, attributes: {model: {string: H100}}, capacity: {memory: 96Gi}}]}\n");
        let model = |node: &str| {
            let out = slices(&s, "p", 1, 7, node, "u");
            out[0].spec.devices.as_ref().unwrap()[0].attributes.as_ref().unwrap()["model"].string.clone().unwrap()
        };
        let h100 = (0..400).filter(|i| model(&format!("p-{i}")) == "H100").count();
        assert!((60..140).contains(&h100), "about a quarter: {h100} of 400");
        assert_eq!(model("p-3"), model("p-3"), "the same node draws the same");
    }

    #[test]
    fn bad_devices_are_named_by_path() {
        let s = sets(
            "- {driver: Bad_Driver, count: 0, name: 'no.dots', attributes: {'9lives': {string: a, int: 1}, v: {version: one}}, capacity: {memory: lots}, variants: [{percent: 70}, {percent: 40}]}\n- {driver: Bad_Driver}\n",
        );
        let errs = problems(&s);
        for want in [
            "[0].driver: \"Bad_Driver\"",
            "[1].driver: Bad_Driver is listed twice",
            "[0].count: 0",
            "[0].name: \"no.dots\"",
            "[0].attributes[9lives]: not an attribute name",
            "[0].attributes[9lives]: set exactly one",
            "[0].attributes[v].version: \"one\"",
            "[0].capacity[memory]: \"lots\"",
            "[0].variants: the percentages add up to 110",
        ] {
            assert!(errs.iter().any(|e| e.starts_with(want)), "no {want} in {errs:?}");
        }
    }

    #[test]
    fn long_names_stay_within_the_limit() {
        let long = "n".repeat(250);
        let name = slice_name(&long, "gpu.example.com");
        assert!(name.len() <= 253);
        assert_ne!(name, slice_name(&"m".repeat(250), "gpu.example.com"));
    }
}
