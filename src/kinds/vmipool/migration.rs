//! KubeVirt's `VirtualMachineInstanceMigration` (kubevirt.io/v1), as much as the simulator
//! reads and writes of it: the VMI it moves, its phase and the times it entered each. No
//! crate has these types; they follow KubeVirt's JSON names and decode leniently.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The label KubeVirt puts on a migration's target launcher pod: the migration's UID.
pub const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";
/// The label KubeVirt puts on a migration: the VMI it moves.
pub const VMI_NAME_LABEL: &str = "kubevirt.io/vmi-name";
/// The annotation of a migration the evacuation controller made: the node drained.
pub const EVACUATION_ANNOTATION: &str = "kubevirt.io/evacuationMigration";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceMigration {
    #[serde(default = "super::kubevirt::api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MigrationSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MigrationStatus>,
}

fn kind() -> String {
    "VirtualMachineInstanceMigration".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The VMI to move (in the migration's namespace).
    #[serde(default)]
    pub vmi_name: String,
    /// The rest (addedNodeSelector, …), as written.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The rest (phaseTransitionTimestamps, conditions, migrationState), as written.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

impl VirtualMachineInstanceMigration {
    /// A new migration of `vmi` (metadata to be filled in).
    pub fn of(vmi: &str) -> Self {
        Self {
            api_version: super::kubevirt::api_version(),
            kind: kind(),
            metadata: ObjectMeta::default(),
            spec: MigrationSpec { vmi_name: vmi.to_string(), rest: BTreeMap::new() },
            status: None,
        }
    }

    /// The phase, `""` before the controller saw it.
    pub fn phase(&self) -> &str {
        self.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
    }

    /// Whether it ended (Succeeded or Failed).
    pub fn ended(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }
}

super::kubevirt::kubevirt_resource!(
    VirtualMachineInstanceMigration,
    "VirtualMachineInstanceMigration",
    "virtualmachineinstancemigrations"
);
