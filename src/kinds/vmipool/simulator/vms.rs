//! KubeVirt's VM controller, played when no KubeVirt runs: every VirtualMachine the simulator
//! handles gets its VMI created from `spec.template` or deleted as [`super::vm_plan`] decides,
//! and its status written (`printableStatus`, `ready`, `created`, conditions, requests). The
//! VMI itself is then simulated as any other ([`super::vmis`]).

use super::super::kubevirt::VirtualMachineInstance;
use super::super::vm::VirtualMachine;
use super::vm_plan::{self, Act};
use crate::informer::Change;
use crate::shard::Shard;
use crate::simulator::selector::Selector;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How long a VMI we created or deleted may take to show in the store before we act again.
const EXPECT_FOR: Duration = Duration::from_secs(15);

pub struct VmController {
    pub client: kube::Client,
    pub selector: Selector,
    pub shard: Shard,
    pub vms: Store<VirtualMachine>,
    pub vmis: Store<VirtualMachineInstance>,
    pub metrics: Arc<crate::telemetry::metrics::Metrics>,
}

/// What this controller did last to a VM's VMI, until the store shows it.
enum Expect {
    Created(Instant),
    Deleted(String, Instant),
}

struct Loop {
    c: Arc<VmController>,
    busy: Arc<Mutex<HashSet<String>>>,
    expect: Arc<Mutex<HashMap<String, Expect>>>,
    again: UnboundedSender<ObjectRef<VirtualMachine>>,
}

impl VmController {
    pub async fn run(
        self,
        mut vms: UnboundedReceiver<Change<VirtualMachine>>,
        mut vmis: UnboundedReceiver<Change<VirtualMachineInstance>>,
    ) {
        let (again, mut looks) = unbounded_channel();
        let l = Loop { c: Arc::new(self), busy: Arc::default(), expect: Arc::default(), again };
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                c = vms.recv() => match c {
                    Some(Change::Applied(vm)) => l.look(&vm),
                    Some(_) => {}
                    None => return,
                },
                c = vmis.recv() => match c {
                    Some(Change::Applied(vmi) | Change::Deleted(vmi)) => l.look_owner(&vmi),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(key) = looks.recv() => {
                    if let Some(vm) = l.c.vms.get(&key) {
                        l.look(&vm);
                    }
                }
                _ = tick.tick() => {
                    for vm in l.c.vms.state() {
                        l.look(&vm);
                    }
                }
            }
        }
    }
}

impl Loop {
    fn look_owner(&self, vmi: &VirtualMachineInstance) {
        let owner = vmi.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "VirtualMachine");
        let Some(owner) = owner else { return };
        let key = ObjectRef::new(&owner.name).within(&vmi.namespace().unwrap_or_default());
        if let Some(vm) = self.c.vms.get(&key) {
            self.look(&vm);
        }
    }

    /// The VM's VMI (its name, controlled by it); `Err` when a VMI of that name belongs to
    /// something else.
    fn vmi_of(&self, vm: &VirtualMachine) -> Result<Option<Arc<VirtualMachineInstance>>, ()> {
        let key = ObjectRef::new(&vm.name_any()).within(&vm.namespace().unwrap_or_default());
        let Some(vmi) = self.c.vmis.get(&key) else { return Ok(None) };
        let ours = vmi
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == vm.metadata.uid.as_ref());
        if ours { Ok(Some(vmi)) } else { Err(()) }
    }

    /// Whether the store shows what we did last (else wait for it, a while).
    fn settled(&self, uid: &str, vmi: Option<&VirtualMachineInstance>) -> bool {
        let mut expect = crate::sync::lock(&self.expect);
        let shown = match expect.get(uid) {
            None => return true,
            Some(Expect::Created(at)) => vmi.is_some() || at.elapsed() > EXPECT_FOR,
            Some(Expect::Deleted(gone, at)) => {
                vmi.is_none_or(|v| v.metadata.uid.as_ref() != Some(gone) || v.metadata.deletion_timestamp.is_some())
                    || at.elapsed() > EXPECT_FOR
            }
        };
        if shown {
            expect.remove(uid);
        }
        shown
    }

    fn look(&self, vm: &Arc<VirtualMachine>) {
        if !self.c.selector.matches(vm.metadata.labels.as_ref()) {
            return;
        }
        let (ns, name) = (vm.namespace().unwrap_or_default(), vm.name_any());
        if !self.c.shard.owns(&Shard::vmi_key(&ns, &name)) {
            return;
        }
        let uid = vm.metadata.uid.clone().unwrap_or_default();
        if crate::sync::lock(&self.busy).contains(&uid) {
            return;
        }
        let Ok(vmi) = self.vmi_of(vm) else {
            tracing::debug!(vm = %name, namespace = %ns, "a VMI of the VM's name belongs to something else; left alone");
            return;
        };
        if !self.settled(&uid, vmi.as_deref()) {
            return;
        }
        let d = vm_plan::decide(vm, vmi.as_deref(), k8s_openapi::jiff::Timestamp::now());
        if let Some(wait) = d.again_in {
            let (again, key) = (self.again.clone(), ObjectRef::from_obj(vm.as_ref()));
            tokio::spawn(async move {
                tokio::time::sleep(wait + Duration::from_millis(200)).await;
                let _ = again.send(key);
            });
        }
        let status = with_times(vm, d.status);
        if d.act == Act::Nothing && !differs(vm, &status) {
            return;
        }
        crate::sync::lock(&self.busy).insert(uid.clone());
        let (c, busy, expect, vm) = (self.c.clone(), self.busy.clone(), self.expect.clone(), vm.clone());
        let again = self.again.clone();
        tokio::spawn(async move {
            let done = act(&c, &vm, &d.act, &status).await;
            if done && d.act != Act::Nothing {
                let e = match &d.act {
                    Act::Create => Expect::Created(Instant::now()),
                    Act::Delete(gone) => Expect::Deleted(gone.clone(), Instant::now()),
                    Act::Nothing => unreachable!(),
                };
                crate::sync::lock(&expect).insert(uid.clone(), e);
            }
            crate::sync::lock(&busy).remove(&uid);
            if !done {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let _ = again.send(ObjectRef::from_obj(vm.as_ref()));
            }
        });
    }
}

/// The conditions of `status` with their transition times: kept from the VM's condition of
/// the same type and status, else now.
fn with_times(vm: &VirtualMachine, mut status: Value) -> Value {
    let old = vm
        .status
        .as_ref()
        .and_then(|s| s.rest.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    if let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in list {
            let same = old.iter().find(|o| o["type"] == c["type"] && o["status"] == c["status"]);
            c["lastTransitionTime"] =
                same.and_then(|o| o.get("lastTransitionTime").cloned()).unwrap_or_else(|| json!(now));
            c["lastProbeTime"] = Value::Null;
        }
    }
    status
}

/// Whether the VM's status says something else than `want` (conditions compared on type,
/// status, reason and message).
fn differs(vm: &VirtualMachine, want: &Value) -> bool {
    let have = vm.status.as_ref().map_or(json!({}), |s| serde_json::to_value(s).unwrap_or_default());
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(list) = v.get_mut("conditions").and_then(Value::as_array_mut) {
            for m in list.iter_mut().filter_map(Value::as_object_mut) {
                m.remove("lastTransitionTime");
                m.remove("lastProbeTime");
                m.retain(|_, v| !v.is_null());
            }
        }
        v
    };
    let (have, want) = (strip(&have), strip(want));
    want.as_object().is_some_and(|w| w.iter().any(|(k, v)| have.get(k).unwrap_or(&Value::Null) != v))
}

/// The VMI `vm` runs, from its template (KubeVirt's `SetupVMIFromVM`).
fn vmi_for(vm: &VirtualMachine) -> Value {
    let template = vm.spec.template.clone().unwrap_or_default();
    let mut metadata = template.get("metadata").cloned().unwrap_or(json!({}));
    metadata["name"] = json!(vm.name_any());
    metadata["namespace"] = json!(vm.namespace());
    if let Some(m) = metadata.as_object_mut() {
        m.remove("generateName");
    }
    metadata["annotations"]["kubevirt.io/vm-generation"] = json!(vm.metadata.generation.unwrap_or(1).to_string());
    metadata["ownerReferences"] = json!([{
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm.name_any(),
        "uid": vm.metadata.uid, "controller": true, "blockOwnerDeletion": true,
    }]);
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": metadata,
           "spec": template.get("spec").cloned().unwrap_or(json!({}))})
}

/// Does `act`, then writes `status`; whether both went through.
async fn act(c: &VmController, vm: &VirtualMachine, act: &Act, status: &Value) -> bool {
    let ns = vm.namespace().unwrap_or_default();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(c.client.clone(), &ns);
    let done = match act {
        Act::Nothing => true,
        Act::Create => {
            let vmi: Result<VirtualMachineInstance, _> = serde_json::from_value(vmi_for(vm));
            let r = match vmi {
                Ok(vmi) => vmis.create(&PostParams::default(), &vmi).await.map(|_| ()),
                Err(e) => {
                    tracing::warn!(vm = %vm.name_any(), error = %e, "the VM's template does not read as a VMI");
                    Ok(())
                }
            };
            c.metrics.write("virtualmachineinstances", "create", r.is_ok());
            match r {
                Ok(()) => true,
                Err(kube::Error::Api(e)) if e.code == 409 => true,
                Err(e) => {
                    tracing::warn!(vm = %vm.name_any(), error = %e, "creating the VM's VMI failed; trying again");
                    false
                }
            }
        }
        Act::Delete(uid) => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                ..Default::default()
            };
            let r = vmis.delete(&vm.name_any(), &dp).await;
            c.metrics.write("virtualmachineinstances", "delete", r.is_ok());
            match r {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => true,
                Err(e) => {
                    tracing::warn!(vm = %vm.name_any(), error = %e, "stopping the VM's VMI failed; trying again");
                    false
                }
            }
        }
    };
    if !done {
        return false;
    }
    let vms: Api<VirtualMachine> = Api::namespaced(c.client.clone(), &ns);
    let params = crate::api::conventions::patch_params();
    let r = vms.patch_status(&vm.name_any(), &params, &Patch::Merge(json!({"status": status}))).await;
    c.metrics.write("virtualmachines/status", "patch", r.is_ok());
    match r {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        Err(e) => {
            tracing::warn!(vm = %vm.name_any(), error = %e, "writing the VM's status failed; trying again");
            false
        }
    }
}
