#![allow(clippy::duplicated_attributes)] // kube(printcolumn(...)) repeats keys by design
//! VMIPool: a namespaced pool of KubeVirt VirtualMachineInstances.

use super::kubevirt::VmiSpec;
use crate::api::common::{Placement, PoolStatus, TemplateMetadata};
use crate::api::lifecycle::{Delay, LifecycleSpec, Sections, delay_problem, percent, percent_schema};
use crate::api::schema;
use crate::api::validation;
use garde::Validate;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A pool of `vmiCount` VirtualMachineInstances named `<pool>-<index>`, each rendered from
/// `vmiTemplate`.
#[derive(CustomResource, KubeSchema, Validate, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "pools.kwok.x-k8s.io",
    version = "v1alpha1",
    kind = "VMIPool",
    plural = "vmipools",
    namespaced,
    status = "PoolStatus",
    shortname = "kvmip",
    category = "pools",
    derive = "PartialEq",
    doc = "A pool of KubeVirt VirtualMachineInstances on fake nodes",
    scale(
        spec_replicas_path = ".spec.vmiCount",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.vmiCount", description = "VMIs wanted"),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "VMIs Running and Ready"
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "VMIs rendered from the current template"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.failedReplicas",
        description = "VMIs that Failed",
        priority = 1
    ),
    cel
)]
#[x_kube(validation = Rule::new("has(self.virtualMachine) == has(oldSelf.virtualMachine)")
    .message("cannot be added or removed on an existing pool (its children would change kind): create a new VMIPool instead")
    .field_path(".virtualMachine"))]
#[serde(rename_all = "camelCase")]
pub struct VMIPoolSpec {
    /// How many VMIs the pool keeps (0 to 100000).
    #[schemars(range(min = 0, max = 100000))]
    #[garde(custom(validation::count))]
    pub vmi_count: i32,

    /// The VirtualMachineInstance every child is rendered from.
    #[serde(default)]
    #[schemars(extend("default" = {}))]
    #[garde(custom(VmiTemplate::rules))]
    pub vmi_template: VmiTemplate,

    /// How many VMIs may be unavailable while a template change rolls out: a number or a
    /// percentage of vmiCount (default 25%, at least one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::int_or_percent")]
    #[garde(custom(validation::max_unavailable))]
    pub max_unavailable: Option<IntOrString>,

    /// Where the children may run: `Simulated` (default) confines them to simulated nodes
    /// whatever the template says; `Any` leaves placement to the template (the operator then
    /// creates them only in namespaces labelled `pools.kwok.x-k8s.io/unconfined=true`).
    #[serde(default, skip_serializing_if = "Placement::is_default")]
    #[garde(skip)]
    pub placement: Placement,

    /// Keep VirtualMachines instead of bare VMIs: the pool keeps `vmiCount` VirtualMachines
    /// `<pool>-<index>` whose template is `vmiTemplate`, each running its VMI as
    /// `runStrategy` says (KubeVirt's VM controller, or the simulator's without KubeVirt,
    /// starts and stops the VMIs). Set when the pool is created; it cannot be added or removed
    /// later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(skip)]
    pub virtual_machine: Option<VirtualMachineChoice>,

    /// How the VMIs behave: boot time (Scheduled → Running) and a share that fails to boot,
    /// reproducible with `seed`. See docs/lifecycle.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[garde(custom(validation::lifecycle))]
    pub lifecycle: Option<VmiPoolLifecycle>,
}

/// `spec.virtualMachine`: the pool keeps VirtualMachines.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineChoice {
    /// How every VM runs its VMI (KubeVirt's `spec.runStrategy`; default `Always`). A change
    /// reaches every VM at once: `Halted` stops them all, `Always` starts them again.
    #[serde(default)]
    pub run_strategy: RunStrategy,
}

/// KubeVirt's run strategies.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RunStrategy {
    /// A VMI always runs: created again whenever it ends.
    #[default]
    Always,
    /// The VMI is created again only when it fails (not when it succeeds).
    RerunOnFailure,
    /// Nothing starts or stops the VMI but `virtctl start/stop` (KubeVirt's API server).
    Manual,
    /// No VMI runs.
    Halted,
    /// The VMI runs once and is not created again when it ends.
    Once,
}

impl RunStrategy {
    /// The name KubeVirt spells.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Manual => "Manual",
            RunStrategy::Halted => "Halted",
            RunStrategy::Once => "Once",
        }
    }
}

/// `spec.lifecycle` of a VMIPool: a seed and what the VMIs do (VMIPool's own section; the
/// shared simulator reads none of it).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmiPoolLifecycle {
    /// Makes every random choice reproducible: which VMIs fail, each boot time. Without it,
    /// each run differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmis: Option<VmiLifecycle>,
}

/// What VMIs do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmiLifecycle {
    /// How long a VMI takes from Scheduled to Running (its VM "boots"; default at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_time: Option<Delay>,
    /// Percent of VMIs whose VM fails to boot: they reach Failed instead of Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub fail_percent: Option<u8>,
    /// Whether a guest agent runs in the VMs (default false, as in KubeVirt's cirros example):
    /// with one, a Running VMI has the `AgentConnected` condition, a filled `guestOSInfo` and
    /// interfaces reported by `domain, guest-agent`; without one, only what the domain shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_agent: Option<bool>,
    /// How long a live migration's Running phase takes (the memory copy), from the moment the
    /// target is ready (default 2s): a VirtualMachineInstanceMigration, or a drain's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_time: Option<Delay>,
    /// Percent of live migrations that fail at the end of their Running phase: the migration
    /// ends Failed, the target pod goes, the VMI stays on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub migration_fail_percent: Option<u8>,
}

impl LifecycleSpec for VmiPoolLifecycle {
    fn sections(&self) -> Sections<'_> {
        Sections { seed: self.seed, ..Sections::default() }
    }

    fn own_problems(&self) -> Vec<String> {
        let Some(v) = &self.vmis else { return Vec::new() };
        delay_problem("vmis.bootTime", v.boot_time.as_ref())
            .into_iter()
            .chain(percent("vmis.failPercent", v.fail_percent))
            .chain(delay_problem("vmis.migrationTime", v.migration_time.as_ref()))
            .chain(percent("vmis.migrationFailPercent", v.migration_fail_percent))
            .collect()
    }
}

/// A VirtualMachineInstance whose metadata leaves the name to the pool. A whole VMI manifest
/// (`apiVersion: kubevirt.io/v1`, `kind: VirtualMachineInstance`) is accepted.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VmiTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'kubevirt.io/v1' || self == 'kubevirt.io/v1alpha3'").message("must be kubevirt.io/v1 (or omitted)"))]
    pub api_version: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 'VirtualMachineInstance'").message("must be VirtualMachineInstance (or omitted)"))]
    pub kind: Option<String>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,

    /// The VMI spec. Unless it sets nodeSelector or affinity, the pool adds the nodeSelector
    /// `type: kwok`; it always tolerates the fake-node taint.
    #[serde(default)]
    pub spec: VmiSpec,
}

impl VmiTemplate {
    /// What children are rendered from (for the template hash).
    pub fn rendered_part(&self) -> VmiTemplate {
        VmiTemplate {
            metadata: self.metadata.as_ref().map(TemplateMetadata::rendered_part),
            spec: self.spec.clone(),
            ..Default::default()
        }
    }
}
