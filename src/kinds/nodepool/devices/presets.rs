//! The real DRA drivers' published layouts a device set can start from, as their sources
//! describe them, so a DeviceClass written for the real driver selects simulated devices:
//!
//! - `nvidia-gpu`: the NVIDIA GPU driver (kubernetes-sigs/dra-driver-nvidia-gpu,
//!   `cmd/gpu-kubelet-plugin/deviceinfo.go`): driver `gpu.nvidia.com`, devices `gpu-<minor>`
//!   with `type: gpu`, `uuid`, `productName`, `brand`, `architecture`,
//!   `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (versions) and
//!   `resource.kubernetes.io/pciBusID`, capacity `memory`. Its DeviceClass `gpu.nvidia.com`
//!   selects `device.attributes['gpu.nvidia.com'].type == 'gpu'`; MIG partitions are
//!   `type: mig` with `profile` and `parentUUID` (class `mig.nvidia.com`).
//! - `dra-cpu`: dra-driver-cpu (kubernetes-sigs/dra-driver-cpu, grouped mode): driver
//!   `dra.cpu`, one device per NUMA node `cpudevnuma<nnn>`, shared by several claims, with
//!   `resource.kubernetes.io/numaNode`, `dra.cpu/socketID`, `dra.cpu/numCPUs`,
//!   `dra.cpu/smtEnabled` and capacity `dra.cpu/cpu`. Its DeviceClass `dra.cpu` selects
//!   `device.driver == "dra.cpu"`.

use super::AttributeValue as V;
use crate::ipam::fnv;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    NvidiaGpu,
    DraCpu,
}

/// What a preset gives device `index` of a node: its name, attributes and capacity.
pub struct PresetDevice {
    pub name: String,
    pub attributes: BTreeMap<String, V>,
    pub capacity: BTreeMap<String, Quantity>,
    /// Several claims may share it (dra-driver-cpu's grouped devices).
    pub shared: bool,
}

/// The GPU's product when the set says nothing: an A100 80 GB, as the NVIDIA driver reports it.
const NVIDIA_PRODUCT: &str = "NVIDIA A100-SXM4-80GB";
const CPUS_PER_NUMA_NODE: i64 = 32;

impl Preset {
    pub fn driver(self) -> &'static str {
        match self {
            Preset::NvidiaGpu => "gpu.nvidia.com",
            Preset::DraCpu => "dra.cpu",
        }
    }

    /// Devices per node when the set says nothing.
    pub fn count(self) -> u32 {
        match self {
            Preset::NvidiaGpu => 8,
            Preset::DraCpu => 2,
        }
    }

    /// Device `index` on `node`, as the real driver would publish it.
    pub fn device(self, node: &str, index: u32) -> PresetDevice {
        match self {
            Preset::NvidiaGpu => {
                let attributes = [
                    ("type", V::string("gpu")),
                    ("uuid", V::string(gpu_uuid("GPU", node, &index.to_string()))),
                    ("productName", V::string(NVIDIA_PRODUCT)),
                    ("brand", V::string("Nvidia")),
                    ("architecture", V::string("Ampere")),
                    ("cudaComputeCapability", V::version("8.0.0")),
                    ("driverVersion", V::version("570.124.6")),
                    ("cudaDriverVersion", V::version("12.8.0")),
                    ("resource.kubernetes.io/pciBusID", V::string(format!("0000:{:02x}:00.0", 0x10 + index * 0x10))),
                ];
                PresetDevice {
                    name: format!("gpu-{index}"),
                    attributes: attributes.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    capacity: [("memory".to_string(), Quantity("80Gi".into()))].into(),
                    shared: false,
                }
            }
            Preset::DraCpu => {
                let numa = i64::from(index);
                let attributes = [
                    ("resource.kubernetes.io/numaNode", V::int(numa)),
                    ("dra.cpu/socketID", V::int(numa)),
                    ("dra.cpu/numCPUs", V::int(CPUS_PER_NUMA_NODE)),
                    ("dra.cpu/smtEnabled", V::bool(true)),
                ];
                PresetDevice {
                    name: format!("cpudevnuma{index:03}"),
                    attributes: attributes.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    capacity: [("dra.cpu/cpu".to_string(), Quantity(CPUS_PER_NUMA_NODE.to_string()))].into(),
                    shared: true,
                }
            }
        }
    }

    /// The attributes a partition (`profile`, the `k`th of device `parent`) has besides its
    /// parent's, and the word in its name before the profile.
    pub fn partition(
        self,
        node: &str,
        parent: &str,
        parent_attributes: &BTreeMap<String, V>,
        profile: &str,
        k: u32,
    ) -> (BTreeMap<String, V>, &'static str) {
        match self {
            Preset::NvidiaGpu => {
                let mut a = BTreeMap::new();
                a.insert("type".to_string(), V::string("mig"));
                a.insert("profile".to_string(), V::string(profile));
                a.insert("uuid".to_string(), V::string(gpu_uuid("MIG", node, &format!("{parent}/{profile}/{k}"))));
                if let Some(uuid) = parent_attributes.get("uuid") {
                    a.insert("parentUUID".to_string(), uuid.clone());
                }
                (a, "mig-")
            }
            Preset::DraCpu => (BTreeMap::new(), ""),
        }
    }
}

/// A stable UUID in NVIDIA's form (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) from the node
/// and the device.
fn gpu_uuid(prefix: &str, node: &str, device: &str) -> String {
    let a = fnv(&format!("{node}/{device}"));
    let b = fnv(&format!("{device}/{node}/uuid"));
    let hex = format!("{a:016x}{b:016x}");
    format!("{prefix}-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}
