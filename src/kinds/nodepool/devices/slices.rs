//! The ResourceSlices one node publishes for a pool's `spec.devices`: per driver, its devices
//! (a preset's layout, the set's attributes and capacities over it, the node's variant over
//! those), partitions that consume the device's shared counters, and taints on the unhealthy
//! share. The pool is named after the node; devices go in slices of at most 128 (64 when they
//! use counters or taints, the API server's limits), shared counters in slices of their own
//! (the API server refuses both in one slice), every slice owned by the node.

use super::rules::{capacity_of, counter_name};
use super::{AttributeValue, DeviceSet, POOL_LABEL};
use crate::api::duration::unit;
use crate::ipam::fnv;
use k8s_openapi::api::resource::v1::{
    Counter, CounterSet, Device, DeviceAttribute, DeviceCapacity, DeviceCounterConsumption, DeviceTaint, ResourcePool,
    ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// The taint an unhealthy simulated device carries.
pub const UNHEALTHY_TAINT: &str = "pools.kwok.x-k8s.io/unhealthy";
/// Devices per slice: the API server's limits without and with counters or taints.
const DEVICES_PER_SLICE: usize = 128;
const ADVANCED_DEVICES_PER_SLICE: usize = 64;
const COUNTER_SETS_PER_SLICE: usize = 8;

/// The name of `node`'s (first) slice for `driver` (at most 253 characters).
pub fn slice_name(node: &str, driver: &str) -> String {
    let name = format!("{node}-{}", driver.replace('.', "-"));
    if name.len() <= 240 {
        return name;
    }
    format!("{}-{:016x}", &name[..200], fnv(&name))
}

/// Where the node is: the pool's seed and the node's identity.
pub struct NodeRef<'a> {
    pub pool: &'a str,
    pub generation: i64,
    pub seed: i64,
    pub node: &'a str,
    pub uid: &'a str,
}

fn attribute(v: &AttributeValue) -> DeviceAttribute {
    DeviceAttribute {
        string: v.string.clone(),
        int: v.int,
        bool: v.bool,
        version: v.version.clone(),
        ..Default::default()
    }
}

fn attributes(a: &BTreeMap<String, AttributeValue>) -> Option<BTreeMap<String, DeviceAttribute>> {
    (!a.is_empty()).then(|| a.iter().map(|(k, v)| (k.clone(), attribute(v))).collect())
}

fn capacities(c: &BTreeMap<String, Quantity>) -> Option<BTreeMap<String, DeviceCapacity>> {
    (!c.is_empty()).then(|| {
        c.iter().map(|(k, q)| (k.clone(), DeviceCapacity { value: q.clone(), ..Default::default() })).collect()
    })
}

fn counters(c: &BTreeMap<String, Quantity>) -> BTreeMap<String, Counter> {
    c.iter().map(|(k, q)| (counter_name(k), Counter { value: q.clone() })).collect()
}

/// The devices (and counter sets) of `set` on the node.
fn devices_of(set: &DeviceSet, at: &NodeRef) -> (Vec<Device>, Vec<CounterSet>) {
    let driver = set.driver();
    let roll = unit(at.seed, &[at.node, driver, "variant"]) * 100.0;
    let mut edge = 0.0;
    let variant = set.variants.iter().find(|v| {
        edge += f64::from(v.percent.min(100));
        roll < edge
    });
    let mut devices = Vec::new();
    let mut counter_sets = Vec::new();
    for i in 0..set.count() {
        let preset = set.preset.map(|p| p.device(at.node, i));
        let name = match (&set.name, &preset) {
            (None, Some(p)) => p.name.clone(),
            (name, _) => format!("{}-{i}", name.as_deref().unwrap_or("gpu")),
        };
        let mut attrs = preset.as_ref().map(|p| p.attributes.clone()).unwrap_or_default();
        attrs.extend(set.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut capacity = capacity_of(set);
        if let Some(v) = variant {
            attrs.extend(v.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
            capacity.extend(v.capacity.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let unhealthy = set
            .unhealthy_percent
            .is_some_and(|p| unit(at.seed, &[at.node, driver, &name, "unhealthy"]) * 100.0 < f64::from(p));
        let taints = unhealthy.then(|| {
            vec![DeviceTaint {
                key: UNHEALTHY_TAINT.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]
        });
        let counter_set = format!("{name}-counter-set");
        let partitioned = !set.partitions.is_empty();
        if partitioned {
            counter_sets.push(CounterSet { name: counter_set.clone(), counters: counters(&capacity) });
        }
        let consume = |what: &BTreeMap<String, Quantity>| {
            partitioned.then(|| {
                vec![DeviceCounterConsumption {
                    counter_set: counter_set.clone(),
                    counters: counters(what),
                    ..Default::default()
                }]
            })
        };
        devices.push(Device {
            name: name.clone(),
            attributes: attributes(&attrs),
            capacity: capacities(&capacity),
            consumes_counters: consume(&capacity),
            allow_multiple_allocations: preset.as_ref().is_some_and(|p| p.shared).then_some(true),
            taints: taints.clone(),
            ..Default::default()
        });
        for p in &set.partitions {
            let word = p.name.replace('.', "");
            for k in 0..p.count {
                let (own, prefix) =
                    set.preset.map_or((BTreeMap::new(), ""), |pr| pr.partition(at.node, &name, &attrs, &p.name, k));
                let mut pattrs = attrs.clone();
                pattrs.extend(own);
                pattrs.extend(p.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
                devices.push(Device {
                    name: format!("{name}-{prefix}{word}-{k}"),
                    attributes: attributes(&pattrs),
                    capacity: capacities(&p.consumes),
                    consumes_counters: consume(&p.consumes),
                    taints: taints.clone(),
                    ..Default::default()
                });
            }
        }
    }
    (devices, counter_sets)
}

/// The ResourceSlices node `at.node` publishes for `sets`, owned by the node.
pub fn slices(sets: &[DeviceSet], at: &NodeRef) -> Vec<ResourceSlice> {
    let mut out = Vec::new();
    for set in sets {
        let driver = set.driver();
        let (devices, counter_sets) = devices_of(set, at);
        let advanced = devices.iter().any(|d| d.consumes_counters.is_some() || d.taints.is_some());
        let per_slice = if advanced { ADVANCED_DEVICES_PER_SLICE } else { DEVICES_PER_SLICE };
        let device_chunks: Vec<Vec<Device>> = devices.chunks(per_slice).map(<[Device]>::to_vec).collect();
        let counter_chunks: Vec<Vec<CounterSet>> =
            counter_sets.chunks(COUNTER_SETS_PER_SLICE).map(<[CounterSet]>::to_vec).collect();
        let count = (device_chunks.len() + counter_chunks.len()) as i64;
        let first = slice_name(at.node, driver);
        let mut push = |name: String, devices: Option<Vec<Device>>, shared_counters: Option<Vec<CounterSet>>| {
            out.push(ResourceSlice {
                metadata: ObjectMeta {
                    name: Some(name),
                    labels: Some([(POOL_LABEL.to_string(), at.pool.to_string())].into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: at.node.into(),
                        uid: at.uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: ResourceSliceSpec {
                    driver: driver.to_string(),
                    node_name: Some(at.node.into()),
                    pool: ResourcePool { name: at.node.into(), generation: at.generation, resource_slice_count: count },
                    devices,
                    shared_counters,
                    ..Default::default()
                },
            });
        };
        for (k, chunk) in device_chunks.into_iter().enumerate() {
            let name = if k == 0 { first.clone() } else { format!("{first}-{k}") };
            push(name, Some(chunk), None);
        }
        for (k, chunk) in counter_chunks.into_iter().enumerate() {
            push(format!("{first}-counters-{k}"), None, Some(chunk));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(yaml: &str) -> Vec<DeviceSet> {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn at(node: &str) -> NodeRef<'_> {
        NodeRef { pool: "gpus", generation: 4, seed: 7, node, uid: "uid-0" }
    }

    fn attr<'a>(d: &'a Device, name: &str) -> &'a DeviceAttribute {
        &d.attributes.as_ref().unwrap()[name]
    }

    #[test]
    fn each_node_publishes_one_slice_per_driver_with_its_devices() {
        let s = sets(
            "- {driver: gpu.example.com, count: 2, attributes: {model: {string: A100}, cores: {int: 6912}, driverVersion: {version: 1.2.3}}, capacity: {memory: 80Gi}}\n- {driver: nic.example.com, name: nic}\n",
        );
        assert_eq!(super::super::problems(&s), Vec::<String>::new());
        let out = slices(&s, &at("gpus-0"));
        assert_eq!(out.len(), 2);
        let gpu = &out[0];
        assert_eq!(gpu.metadata.name.as_deref(), Some("gpus-0-gpu-example-com"));
        assert_eq!(gpu.spec.node_name.as_deref(), Some("gpus-0"));
        assert_eq!(
            (gpu.spec.pool.name.as_str(), gpu.spec.pool.generation, gpu.spec.pool.resource_slice_count),
            ("gpus-0", 4, 1)
        );
        let devices = gpu.spec.devices.as_ref().unwrap();
        assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["gpu-0", "gpu-1"]);
        assert_eq!(
            (attr(&devices[0], "model").string.as_deref(), attr(&devices[0], "cores").int),
            (Some("A100"), Some(6912))
        );
        assert_eq!(attr(&devices[0], "driverVersion").version.as_deref(), Some("1.2.3"));
        assert_eq!(devices[0].capacity.as_ref().unwrap()["memory"].value, Quantity("80Gi".into()));
        let owner = &gpu.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "uid-0"));
        assert_eq!(out[1].spec.devices.as_ref().unwrap()[0].name, "nic-0");
    }

    #[test]
    fn a_seeded_share_of_nodes_has_the_variant() {
        let s = sets(
            "- {driver: gpu.example.com, attributes: {model: {string: A100}}, variants: [{percent: 25, attributes: {model: {string: H100}}, capacity: {memory: 96Gi}}]}\n",
        );
        let model = |node: &str| {
            let out = slices(&s, &at(node));
            attr(&out[0].spec.devices.as_ref().unwrap()[0], "model").string.clone().unwrap()
        };
        let h100 = (0..400).filter(|i| model(&format!("p-{i}")) == "H100").count();
        assert!((60..140).contains(&h100), "about a quarter: {h100} of 400");
        assert_eq!(model("p-3"), model("p-3"), "the same node draws the same");
    }

    #[test]
    fn the_nvidia_preset_looks_like_the_real_driver_and_the_set_wins() {
        let s = sets("- {preset: nvidia-gpu, attributes: {productName: {string: NVIDIA H100 80GB HBM3}}}\n");
        let out = slices(&s, &at("n-0"));
        assert_eq!(out[0].spec.driver, "gpu.nvidia.com");
        let d = out[0].spec.devices.as_ref().unwrap();
        assert_eq!(d.len(), 8);
        assert_eq!(d[3].name, "gpu-3");
        assert_eq!(attr(&d[0], "type").string.as_deref(), Some("gpu"));
        assert_eq!(attr(&d[0], "productName").string.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(attr(&d[0], "cudaComputeCapability").version.as_deref(), Some("8.0.0"));
        let uuid = attr(&d[0], "uuid").string.clone().unwrap();
        assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
        assert_ne!(Some(uuid.clone()), attr(&d[1], "uuid").string.clone(), "each GPU has its own UUID");
        let again = slices(&s, &at("n-0"));
        assert_eq!(Some(uuid), attr(&again[0].spec.devices.as_ref().unwrap()[0], "uuid").string.clone(), "stable");
    }

    #[test]
    fn the_cpu_preset_shares_numa_devices() {
        let out = slices(&sets("- {preset: dra-cpu}\n"), &at("n-0"));
        let d = out[0].spec.devices.as_ref().unwrap();
        assert_eq!((out[0].spec.driver.as_str(), d.len(), d[1].name.as_str()), ("dra.cpu", 2, "cpudevnuma001"));
        assert_eq!(d[1].allow_multiple_allocations, Some(true));
        assert_eq!(attr(&d[1], "resource.kubernetes.io/numaNode").int, Some(1));
        assert_eq!(d[1].capacity.as_ref().unwrap()["dra.cpu/cpu"].value, Quantity("32".into()));
    }

    #[test]
    fn partitions_consume_the_devices_counters_from_a_slice_of_their_own() {
        let s = sets(
            "- {preset: nvidia-gpu, count: 2, partitions: [{name: 3g.40gb, count: 2, consumes: {memory: 40Gi}}, {name: 1g.10gb, count: 7, consumes: {memory: 10Gi}}]}\n",
        );
        let out = slices(&s, &at("n-0"));
        assert_eq!(out.len(), 2, "devices, then counters");
        assert!(out.iter().all(|s| s.spec.pool.resource_slice_count == 2));
        let d = out[0].spec.devices.as_ref().unwrap();
        assert_eq!(d.len(), 2 * (1 + 2 + 7));
        let counters = out[1].spec.shared_counters.as_ref().unwrap();
        assert!(out[1].spec.devices.is_none());
        assert_eq!(counters[0].name, "gpu-0-counter-set");
        assert_eq!(counters[0].counters["memory"].value, Quantity("80Gi".into()));
        let whole = &d[0];
        assert_eq!(whole.consumes_counters.as_ref().unwrap()[0].counters["memory"].value, Quantity("80Gi".into()));
        let mig = d.iter().find(|d| d.name == "gpu-0-mig-1g10gb-6").unwrap();
        assert_eq!(attr(mig, "type").string.as_deref(), Some("mig"));
        assert_eq!(attr(mig, "profile").string.as_deref(), Some("1g.10gb"));
        assert_eq!(attr(mig, "parentUUID").string, attr(whole, "uuid").string);
        assert_eq!(mig.consumes_counters.as_ref().unwrap()[0].counter_set, "gpu-0-counter-set");
        assert_eq!(mig.capacity.as_ref().unwrap()["memory"].value, Quantity("10Gi".into()));
    }

    #[test]
    fn many_devices_spread_over_slices_within_the_limits() {
        let s = sets(
            "- {driver: g.example.com, count: 100, capacity: {memory: 8Gi}, partitions: [{name: half, count: 2, consumes: {memory: 4Gi}}]}\n",
        );
        let out = slices(&s, &at("n-0"));
        let devices: usize = out
            .iter()
            .filter_map(|s| s.spec.devices.as_ref())
            .map(|d| {
                assert!(d.len() <= 64);
                d.len()
            })
            .sum();
        assert_eq!(devices, 300);
        let sets_: usize = out
            .iter()
            .filter_map(|s| s.spec.shared_counters.as_ref())
            .map(|c| {
                assert!(c.len() <= 8);
                c.len()
            })
            .sum();
        assert_eq!(sets_, 100);
        assert!(out.iter().all(|s| s.spec.pool.resource_slice_count == out.len() as i64));
        let mut names: Vec<_> = out.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
        names.dedup();
        assert_eq!(names.len(), out.len());
    }

    #[test]
    fn a_seeded_share_of_devices_is_tainted_unhealthy() {
        let s = sets("- {driver: g.example.com, count: 100, unhealthyPercent: 20}\n");
        let out = slices(&s, &at("n-0"));
        let tainted: Vec<&Device> =
            out.iter().flat_map(|s| s.spec.devices.iter().flatten()).filter(|d| d.taints.is_some()).collect();
        assert!((8..35).contains(&tainted.len()), "about a fifth: {}", tainted.len());
        let t = &tainted[0].taints.as_ref().unwrap()[0];
        assert_eq!((t.key.as_str(), t.effect.as_str()), (UNHEALTHY_TAINT, "NoSchedule"));
    }

    #[test]
    fn long_names_stay_within_the_limit() {
        let long = "n".repeat(250);
        let name = slice_name(&long, "gpu.example.com");
        assert!(name.len() <= 253 - "-counters-15".len());
        assert_ne!(name, slice_name(&"m".repeat(250), "gpu.example.com"));
    }
}
