//! A VMIPool that keeps VirtualMachines (`spec.virtualMachine`), on the pool core. The core is
//! typed by one child kind per pool kind, so such pools are a second view of the same
//! VMIPool objects ([`VmPool`], wired through the registry's views): its children are the VMs
//! `<pool>-<index>`, each with the rendered VMI as its template and the pool's run strategy.
//! A VMIPool without `spec.virtualMachine` is left to [`super::kind`], one with it to this view
//! (the choice cannot change on an existing pool). Whoever plays KubeVirt's VM controller (the
//! simulator's [`super::simulator::vms`], or KubeVirt itself) starts and stops the VMIs.

use super::api::RunStrategy;
use super::kubevirt::{VirtualMachineInstance, VmiSpec};
use super::vm::{VirtualMachine, VmSpec};
use super::{VMIPool, VmiEnv, kubevirt_crd};
use crate::api::conventions::{INDEX_LABEL, INSTANCE_LABEL, POOL_LABEL};
use crate::api::{Placement, PoolStatus};
use crate::informer::{Informer, Informers};
use crate::pool::plan::UpdateMode;
use crate::pool::status::{Problem, Reason};
use crate::pool::{ChildCrd, ChildId, NoFlags, PoolKind, Shared, hash};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::{ApiResource, NamespaceResourceScope};
use kube::{Api, Client, CustomResourceExt, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::borrow::Cow;
use std::sync::Arc;

/// On the template of a pool's VM (so on the VMI KubeVirt makes from it): the UID of the
/// VMIPool, so that the pool's lifecycle knobs govern a VMI whose controller is its VM.
pub use crate::api::conventions::POOL_UID_ANNOTATION;

/// A VMIPool seen as a pool of VirtualMachines (the same object, serialized as is).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VmPool(pub VMIPool);

impl Resource for VmPool {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        VMIPool::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        VMIPool::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        VMIPool::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        VMIPool::plural(dt)
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        self.0.meta_mut()
    }
}

impl CustomResourceExt for VmPool {
    fn crd() -> CustomResourceDefinition {
        VMIPool::crd()
    }
    fn crd_name() -> &'static str {
        VMIPool::crd_name()
    }
    fn api_resource() -> ApiResource {
        VMIPool::api_resource()
    }
    fn shortnames() -> &'static [&'static str] {
        VMIPool::shortnames()
    }
}

impl VmPool {
    fn run_strategy(&self) -> RunStrategy {
        self.0.spec.virtual_machine.as_ref().map(|v| v.run_strategy).unwrap_or_default()
    }
}

/// The VM's template as KubeVirt reads it: the VMI's metadata and spec.
fn template(vmi: &VirtualMachineInstance) -> Result<serde_json::Value, Problem> {
    let spec = serde_json::to_value(&vmi.spec)
        .map_err(|e| Problem::new(Reason::InvalidSpec, format!("spec.vmiTemplate.spec: {e}")))?;
    let mut metadata = json!({});
    if let Some(labels) = &vmi.metadata.labels {
        metadata["labels"] = json!(labels);
    }
    if let Some(annotations) = &vmi.metadata.annotations {
        metadata["annotations"] = json!(annotations);
    }
    if let Some(finalizers) = &vmi.metadata.finalizers {
        metadata["finalizers"] = json!(finalizers);
    }
    Ok(json!({"metadata": metadata, "spec": spec}))
}

impl PoolKind for VmPool {
    type Child = VirtualMachine;
    type Stored = VirtualMachine;
    type Env = VmiEnv;
    type Flags = NoFlags;
    const NOUN: &'static str = "VM";
    const TEMPLATE_PATH: &'static str = "spec.vmiTemplate";
    // VMs are updated in place (a new run strategy reaches every VM at once), by apply; they
    // are created by POST, which never takes over a VM of the same name.
    const PATCHES_CHILDREN: bool = true;
    const CREATE_WITH_POST: bool = true;
    const CHILD_CRD: Option<ChildCrd> = Some(ChildCrd {
        name: kubevirt_crd::VM_NAME,
        install: "install KubeVirt, or KubeVirt's CRDs alone with `kwok-pools crd --child-crds | kubectl apply --server-side -f -`",
        stand_in: kubevirt_crd::vm_crd,
        companions: Vec::new,
    });

    fn handled_here(&self) -> bool {
        self.0.spec.virtual_machine.is_some()
    }

    fn validation_env() -> VmiEnv {
        VmiEnv
    }

    fn lifecycle(&self) -> Option<&dyn crate::api::lifecycle::LifecycleSpec> {
        self.0.lifecycle()
    }

    fn count(&self) -> u32 {
        self.0.count()
    }

    fn template_hash(&self) -> String {
        hash::of(&(self.0.template_hash(), self.run_strategy()))
    }

    fn pool_status(&self) -> Option<&PoolStatus> {
        self.0.status.as_ref()
    }

    fn update_mode(&self) -> UpdateMode {
        UpdateMode::InPlace
    }

    fn problems(&self, old: Option<&Self>, peers: &[Arc<Self>]) -> Vec<String> {
        let _ = peers;
        <VMIPool as PoolKind>::problems(&self.0, old.map(|o| &o.0), &[])
    }

    fn env(_flags: &NoFlags, _shared: &Shared) -> Result<VmiEnv, crate::setup::SetupError> {
        Ok(VmiEnv)
    }

    fn children(informers: &Informers) -> Arc<Informer<VirtualMachine>> {
        crate::informer::shared::all(informers)
    }

    fn example() -> Self {
        let mut pool = VMIPool::example();
        pool.spec.virtual_machine = Some(super::api::VirtualMachineChoice::default());
        VmPool(pool)
    }

    fn placement(&self) -> Option<Placement> {
        self.0.placement()
    }

    fn confine(vm: &mut VirtualMachine) {
        let Some(template) = vm.spec.template.as_mut() else { return };
        let Ok(mut spec) = serde_json::from_value::<VmiSpec>(template["spec"].clone()) else { return };
        crate::pool::placement::confine(&mut spec.node_selector, &mut spec.tolerations);
        if let Ok(spec) = serde_json::to_value(spec) {
            template["spec"] = spec;
        }
    }

    /// The VM: the VMI the VMIPool renders as its template (with the pool's labels, so the
    /// VMI shows whose it is) and the pool's run strategy.
    fn render(&self, id: &ChildId, env: &VmiEnv) -> Result<VirtualMachine, Problem> {
        let mut vmi = self.0.render(id, env)?;
        let labels = vmi.metadata.labels.get_or_insert_default();
        labels.insert(POOL_LABEL.into(), self.name_any());
        labels.insert(INDEX_LABEL.into(), id.index.to_string());
        // A named instance's pool: its VMIs are that instance's to simulate (as `stamp` does).
        match self.labels().get(INSTANCE_LABEL) {
            Some(instance) => labels.insert(INSTANCE_LABEL.into(), instance.clone()),
            None => labels.remove(INSTANCE_LABEL),
        };
        if let Some(uid) = self.uid() {
            vmi.metadata.annotations.get_or_insert_default().insert(POOL_UID_ANNOTATION.into(), uid);
        }
        let spec = VmSpec {
            running: None,
            run_strategy: Some(self.run_strategy().as_str().into()),
            template: Some(template(&vmi)?),
        };
        // The VM carries the template's labels and annotations; its finalizers are the VMI's.
        let mut metadata = crate::pool::stamp::from_template(self.0.spec.vmi_template.metadata.as_ref());
        metadata.finalizers = None;
        let (api_version, kind) = (super::kubevirt::api_version(), VirtualMachine::kind(&()).into_owned());
        Ok(VirtualMachine { api_version, kind, metadata, spec, status: None })
    }

    /// Ready as KubeVirt says: its VMI runs and is Ready (`status.ready`).
    fn is_ready(vm: &VirtualMachine) -> bool {
        vm.status.as_ref().and_then(|s| s.rest.get("ready")).and_then(|r| r.as_bool()).unwrap_or(false)
    }

    /// A VM whose VMI cannot start (KubeVirt's error statuses).
    fn is_failing(vm: &VirtualMachine) -> bool {
        let status = vm.status.as_ref().and_then(|s| s.printable_status.as_deref()).unwrap_or_default();
        matches!(
            status,
            "CrashLoopBackOff"
                | "ErrorUnschedulable"
                | "ErrImagePull"
                | "ImagePullBackOff"
                | "ErrorPvcNotFound"
                | "DataVolumeError"
        )
    }

    fn child_api(client: Client, pool: &Self) -> Api<VirtualMachine> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }

    fn pool_api(client: Client, pool: &Self) -> Api<Self> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }
}

impl crate::pool::Simulate for VmPool {
    type Metrics = ();
}

#[cfg(test)]
#[path = "vm_pool_tests.rs"]
mod tests;
