//! KubeVirt's `VirtualMachine` (kubevirt.io/v1), as much as the simulator reads of it: how it
//! runs (`runStrategy`, or the deprecated `running`), the VMI template (kept as written), and
//! the status fields the VM controller reads back (start requests, start failures). No crate
//! has these types; they follow KubeVirt's JSON names, and every field decodes leniently (one
//! malformed VM must not stop the watch).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachine {
    #[serde(default = "super::kubevirt::api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: VmSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VmStatus>,
}

fn kind() -> String {
    "VirtualMachine".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmSpec {
    /// Deprecated: `true` is `runStrategy: Always`, `false` is `Halted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// The VMI it runs: `metadata` and `spec`, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub state_change_requests: Vec<StateChangeRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    /// The rest of the status (ready, created, conditions, …), as written.
    #[serde(flatten)]
    pub rest: std::collections::BTreeMap<String, Value>,
}

/// A list that may be written `null`: empty.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A request to start or stop (what `virtctl start/stop` writes through KubeVirt's API).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeRequest {
    /// `Start` or `Stop`.
    #[serde(default)]
    pub action: String,
    /// The VMI a Stop is meant for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// VMIs that ended without ever running, in a row: the start back-off.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(default)]
    pub consecutive_fail_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_vmi_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<String>,
}

super::kubevirt::kubevirt_resource!(VirtualMachine, "VirtualMachine", "virtualmachines");
