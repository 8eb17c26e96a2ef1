//! The subset of KubeVirt's `VirtualMachineInstance` (kubevirt.io/v1) that users write in a
//! VMIPool template, typed, with everything else kept as written (`rest` on each level, and
//! `x-kubernetes-preserve-unknown-fields` in the schema), so KubeVirt's own example VMIs are
//! templates verbatim. No crate has these types; they follow KubeVirt's JSON names.

use crate::api::schema;
use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

// Every field decodes leniently (defaults where KubeVirt requires a value): the simulator
// watches every VMI in the cluster as this type, and one malformed VMI must not stop the watch.

/// Fields this project does not type, kept as written.
pub type Rest = BTreeMap<String, Value>;

/// The KubeVirt API group and version of VMIs.
pub const GROUP: &str = "kubevirt.io";
pub const VERSION: &str = "v1";

/// `spec` of a VirtualMachineInstance.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VmiSpec {
    #[serde(default)]
    pub domain: Domain,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub networks: Vec<Network>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<Affinity>")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<Vec<Toleration>>")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// `LiveMigrate`, `LiveMigrateIfPossible`, `None` or `External`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_strategy: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Domain {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub devices: Devices,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<BTreeMap<String, Quantity>>")]
    pub requests: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<BTreeMap<String, Quantity>>")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cores: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub sockets: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub threads: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Memory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_type::<Quantity>")]
    pub guest: Option<Quantity>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Devices {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub disks: Vec<Disk>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub interfaces: Vec<Interface>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A disk: its name, and how it is attached (`disk`, `cdrom`, `lun`), each with a `bus`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct Disk {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdrom: Option<DiskTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lun: Option<DiskTarget>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DiskTarget {
    /// `virtio`, `sata`, `scsi`, `usb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// An empty object that marks a choice (`masquerade: {}`), kept as written.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Marker {
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A network interface of the guest and how it binds to its network.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct Interface {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<Marker>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<Marker>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov: Option<Marker>,
    /// A network binding plugin, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct Binding {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A network the VMI connects to: the pod network, or a Multus network by name.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct Network {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multus: Option<MultusNetwork>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodNetwork {
    #[serde(default, rename = "vmNetworkCIDR", skip_serializing_if = "Option::is_none")]
    pub vm_network_cidr: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct MultusNetwork {
    #[serde(default)]
    pub network_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A volume: its name and one source.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct Volume {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_disk: Option<ContainerDisk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init_no_cloud: Option<CloudInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init_config_drive: Option<CloudInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<NamedSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_disk: Option<EmptyDisk>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct ContainerDisk {
    #[serde(default)]
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CloudInit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_base64: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct ClaimSource {
    #[serde(default)]
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct NamedSource {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true), transform = schema::no_defaults)]
pub struct EmptyDisk {
    #[serde(default)]
    #[schemars(schema_with = "schema::template_type::<Quantity>")]
    pub capacity: Quantity,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// The parts of a VMI's status the simulator and the pool read; the rest kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmiStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<VmiCondition>,
    #[serde(flatten)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmiCondition {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub rest: Rest,
}

/// A KubeVirt VirtualMachineInstance as the API server stores it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstance {
    #[serde(default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VmiSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VmiStatus>,
}

/// `kubevirt.io/v1`, the apiVersion of every KubeVirt object written here.
pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn kind() -> String {
    "VirtualMachineInstance".into()
}

impl VirtualMachineInstance {
    pub fn new(metadata: ObjectMeta, spec: VmiSpec) -> Self {
        Self { api_version: api_version(), kind: kind(), metadata, spec, status: None }
    }

    pub fn phase(&self) -> &str {
        self.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
    }

    /// The status of condition `type_`, if the VMI has it.
    pub fn condition(&self, type_: &str) -> Option<&VmiCondition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// `kube::Resource` for a namespaced KubeVirt type of kubevirt.io/v1 with a `metadata` field.
macro_rules! kubevirt_resource {
    ($type:ty, $kind:literal, $plural:literal) => {
        impl kube::core::Resource for $type {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::kinds::vmipool::kubevirt::GROUP.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::kinds::vmipool::kubevirt::VERSION.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use kubevirt_resource;

kubevirt_resource!(VirtualMachineInstance, "VirtualMachineInstance", "virtualmachineinstances");
