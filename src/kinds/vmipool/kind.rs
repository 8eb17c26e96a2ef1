//! VMIPool on the pool core: how a VirtualMachineInstance child is rendered (placed on fake
//! nodes unless the template says otherwise), judged ready, and replaced on a template change.
//! Its CRD (KubeVirt's) may be missing: the pools wait, Degraded, until it is installed.

use super::kubevirt::VirtualMachineInstance;
use super::{VMIPool, VmiFlags, kubevirt_crd};
use crate::api::{Placement, PoolStatus};
use crate::informer::{Informer, Informers};
use crate::pool::placement::{confine, fake_node_selector, with_fake_node_toleration};
use crate::pool::plan::UpdateMode;
use crate::pool::stamp::from_template;
use crate::pool::status::Problem;
use crate::pool::{AlsoCreates, ChildCrd, ChildId, PoolKind, Shared, hash};
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;

/// Why a pool cannot switch between keeping VMIs and keeping VirtualMachines (also the CRD's
/// rule, which the API server applies first).
pub const MODE_CHANGE: &str = "spec.virtualMachine: cannot be added or removed on an existing pool (its children would change kind): create a new VMIPool instead";

/// The warning for a `maxUnavailable` that a pool of VMs does not use.
pub const MAX_UNAVAILABLE_UNUSED: &str = "spec.maxUnavailable has no effect with spec.virtualMachine: the VMs are updated in place (a new runStrategy at once; a new vmiTemplate reaches each VMI when it next starts), so nothing is unavailable for a roll";

/// Nothing beyond the pool is needed to render a VMI.
#[derive(Clone, Default)]
pub struct VmiEnv;

impl PoolKind for VMIPool {
    type Child = VirtualMachineInstance;
    type Stored = VirtualMachineInstance;
    type Env = VmiEnv;
    type Flags = VmiFlags;
    const NOUN: &'static str = "VMI";
    const TEMPLATE_PATH: &'static str = "spec.vmiTemplate";
    const CREATE_WITH_POST: bool = true;
    const ALSO_CREATES: &'static [AlsoCreates] =
        &[AlsoCreates { field: "virtualMachine", group: "kubevirt.io", plural: "virtualmachines" }];
    const CHILD_CRD: Option<ChildCrd> = Some(ChildCrd {
        name: kubevirt_crd::NAME,
        install: "install KubeVirt, or KubeVirt's VMI CRD alone with `kwok-pools crd --child-crds | kubectl apply --server-side -f -`",
        stand_in: kubevirt_crd::crd,
        companions: kubevirt_crd::companions,
    });

    /// Pools of bare VMIs; those that keep VirtualMachines are [`super::vm_pool::VmPool`]'s.
    fn handled_here(&self) -> bool {
        self.spec.virtual_machine.is_none()
    }

    /// A `maxUnavailable` beside `virtualMachine` does nothing: VMs are updated in place.
    fn warnings(&self) -> Vec<String> {
        if self.spec.virtual_machine.is_some() && self.spec.max_unavailable.is_some() {
            return vec![MAX_UNAVAILABLE_UNUSED.into()];
        }
        Vec::new()
    }

    fn validation_env() -> VmiEnv {
        VmiEnv
    }

    fn lifecycle(&self) -> Option<&dyn crate::api::lifecycle::LifecycleSpec> {
        self.spec.lifecycle.as_ref().map(|l| l as &dyn crate::api::lifecycle::LifecycleSpec)
    }

    fn count(&self) -> u32 {
        self.spec.vmi_count.max(0) as u32
    }

    fn template_hash(&self) -> String {
        // The placement counts only when it is not the default (existing pools keep their hash).
        match self.spec.placement {
            Placement::Simulated => hash::of(&self.spec.vmi_template.rendered_part()),
            other => hash::of(&(&self.spec.vmi_template.rendered_part(), other)),
        }
    }

    fn pool_status(&self) -> Option<&PoolStatus> {
        self.status.as_ref()
    }

    fn update_mode(&self) -> UpdateMode {
        UpdateMode::replace(self.spec.max_unavailable.as_ref(), self.count())
    }

    fn problems(&self, old: Option<&Self>, _peers: &[Arc<Self>]) -> Vec<String> {
        let mut out = VMIPool::problems(self);
        if old.is_some_and(|o| o.spec.virtual_machine.is_some() != self.spec.virtual_machine.is_some()) {
            out.push(MODE_CHANGE.into());
        }
        out
    }

    fn env(_flags: &VmiFlags, _shared: &Shared) -> Result<VmiEnv, crate::setup::SetupError> {
        Ok(VmiEnv)
    }

    fn children(informers: &Informers) -> Arc<Informer<VirtualMachineInstance>> {
        crate::informer::shared::all(informers)
    }

    fn example() -> Self {
        let mut pool = VMIPool::new(
            "vms",
            serde_json::from_value(serde_json::json!({
                "vmiCount": 2,
                "maxUnavailable": 1,
                "vmiTemplate": {"metadata": {"labels": {"app": "vm"}},
                                "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]},
                                                    "resources": {"requests": {"memory": "1Gi"}}},
                                         "networks": [{"name": "default", "pod": {}}]}},
            }))
            .unwrap_or_else(|e| unreachable!("the example VMIPool spec decodes: {e}")),
        );
        pool.metadata.namespace = Some("default".into());
        pool.metadata.uid = Some("example-uid".into());
        pool
    }

    fn placement(&self) -> Option<Placement> {
        Some(self.spec.placement)
    }

    fn confine(vmi: &mut VirtualMachineInstance) {
        confine(&mut vmi.spec.node_selector, &mut vmi.spec.tolerations);
    }

    fn render(&self, _id: &ChildId, _env: &VmiEnv) -> Result<VirtualMachineInstance, Problem> {
        let template = &self.spec.vmi_template;
        let mut spec = template.spec.clone();
        spec.tolerations = Some(with_fake_node_toleration(spec.tolerations.take()));
        // The template's own placement wins; without one, VMIs go to fake nodes.
        if spec.node_selector.as_ref().is_none_or(|s| s.is_empty()) && spec.affinity.is_none() {
            spec.node_selector = Some(fake_node_selector());
        }
        Ok(VirtualMachineInstance::new(from_template(template.metadata.as_ref()), spec))
    }

    fn is_ready(child: &VirtualMachineInstance) -> bool {
        child.phase() == "Running" && child.condition("Ready").is_some_and(|c| c.status == "True")
    }

    fn is_finished(child: &VirtualMachineInstance) -> bool {
        matches!(child.phase(), "Succeeded" | "Failed")
    }

    fn is_failing(child: &VirtualMachineInstance) -> bool {
        child.phase() == "Failed"
    }

    fn child_api(client: Client, pool: &Self) -> Api<VirtualMachineInstance> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }

    fn pool_api(client: Client, pool: &Self) -> Api<Self> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }
}
