//! The VMI half of the simulator: plays KubeVirt's virt-controller (admission defaults, the
//! launcher pod, phases, deletion) and virt-handler (Running) for VMIs on managed nodes, or,
//! beside a real KubeVirt, only virt-handler's part (writing as KubeVirt's handler account,
//! since KubeVirt's webhook puts back status written by anyone else). The launcher pods are
//! ordinary pods: the pod simulator runs them and gives them their addresses.

use super::super::kubevirt::VirtualMachineInstance;
use super::super::metrics::VmiPoolMetrics;
use super::status::{self as vmi_status, APP_LABEL, CREATED_BY_LABEL, Step};
use crate::api::conventions::FIELD_MANAGER;
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::shard::Shard;
use crate::simulator::machinery::{Attempts, Class, Timers, WriteBudget, Writes, object_gone};
use crate::simulator::manage::Manage;
use crate::simulator::selector::Selector;
use crate::telemetry::metrics::{Metrics, ResultLabels};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tracing::Instrument;

/// Which part of KubeVirt the simulator plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubevirtRole {
    /// No KubeVirt runs: virt-controller's and virt-handler's parts.
    Controller,
    /// A real KubeVirt runs: only virt-handler's part (Scheduled → Running).
    Handler,
}

pub struct VmiSimulator {
    /// Writes VMIs (beside a real KubeVirt: as KubeVirt's handler account).
    pub client: Client,
    /// Writes pods (the operator's own identity).
    pub pod_client: Client,
    pub role: KubevirtRole,
    pub manage: Manage,
    /// Which VMIs are simulated, by label (empty: all).
    pub selector: Selector,
    pub nodes: Store<Node>,
    pub pods: Store<SlimPod>,
    pub vmis: Store<VirtualMachineInstance>,
    pub metrics: Arc<Metrics>,
    /// VMIPool's own metrics (`kwok_pools_simulator_vmi_transitions`).
    pub vmi_metrics: Arc<VmiPoolMetrics>,
    pub writes: WriteBudget,
    /// Which VMIs are this replica's: those on its nodes, and (before they have one) those
    /// whose own key is its (all, unless the simulator is sharded).
    pub shard: Shard,
    /// The pools' knobs: boot time and failures (`spec.lifecycle.vmis`).
    pub lifecycles: crate::simulator::lifecycle::Lifecycles,
}

struct Done {
    vmi: ObjectRef<VirtualMachineInstance>,
    uid: String,
    step: Step,
    ok: bool,
}

/// How often every VMI is looked at again, whatever the events say.
const RESYNC: Duration = Duration::from_secs(30);

/// How long a write the stores do not show yet holds back the next step (in case an event
/// is lost).
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// What the simulator wrote for a VMI that the stores do not show yet: the phase it set, and
/// whether it created the launcher pod. Until the stores catch up the VMI waits, so a stale
/// view never creates a second launcher pod or fails a VMI whose pod is on its way.
#[derive(Default)]
struct Expected {
    phase: Option<(&'static str, std::time::Instant)>,
    launcher: Option<std::time::Instant>,
    /// The launcher pod's readiness gate was set.
    unpaused: Option<std::time::Instant>,
}

impl Expected {
    fn pending(&mut self, vmi: &VirtualMachineInstance, launcher: Option<&SlimPod>) -> bool {
        let has_launcher = launcher.is_some();
        let unpaused = launcher.is_some_and(|p| p.condition(vmi_status::UNPAUSED_GATE) == Some("True"));
        if self.unpaused.is_some_and(|at| unpaused || at.elapsed() > EXPECTATION_TTL) {
            self.unpaused = None;
        }
        if self.phase.is_some_and(|(p, at)| vmi.phase() == p || at.elapsed() > EXPECTATION_TTL) {
            self.phase = None;
        }
        if self.launcher.is_some_and(|at| has_launcher || at.elapsed() > EXPECTATION_TTL) {
            self.launcher = None;
        }
        self.phase.is_some() || self.launcher.is_some() || self.unpaused.is_some()
    }
}

struct VmiLoop {
    sim: Arc<VmiSimulator>,
    /// VMI UID → its launcher pods (two while a migration's target pod runs).
    launchers: HashMap<String, Vec<ObjectRef<SlimPod>>>,
    /// VMI UID → its write (one at a time).
    attempts: HashMap<String, Attempts>,
    /// VMI UID → what was written but not seen yet.
    expected: HashMap<String, Expected>,
    retries: Timers<ObjectRef<VirtualMachineInstance>>,
    writes: Writes<Done>,
}

fn now() -> serde_json::Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or_default()
}

/// Whether `pod` is a launcher pod, and of which VMI (by UID).
fn launcher_of(pod: &SlimPod) -> Option<&str> {
    (pod.label(APP_LABEL) == Some("virt-launcher")).then(|| pod.label(CREATED_BY_LABEL))?
}

impl VmiSimulator {
    /// Runs until a change stream ends.
    pub async fn run(
        self,
        mut vmis: UnboundedReceiver<Change<VirtualMachineInstance>>,
        mut pods: UnboundedReceiver<Change<SlimPod>>,
    ) {
        let (done_tx, mut done_rx) = unbounded_channel::<Done>();
        let writes = self.writes.writes(Class::Other, done_tx).fenced_by(self.shard.clone());
        let mut l = VmiLoop {
            sim: Arc::new(self),
            launchers: HashMap::new(),
            attempts: HashMap::new(),
            expected: HashMap::new(),
            retries: Timers::default(),
            writes,
        };
        // Launcher pods that exist already (the pod store synced before this started).
        for pod in l.sim.pods.state() {
            if let Some(uid) = launcher_of(&pod) {
                l.launchers.entry(uid.to_string()).or_default().push(ObjectRef::from_obj(pod.as_ref()));
            }
        }
        // Every VMI gets looked at now (the first list may have gone to other subscribers
        // before this one started), and again every half minute: no VMI waits on an event
        // that never comes.
        let mut resync = tokio::time::interval(RESYNC);
        let mut shard = l.sim.shard.clone();
        loop {
            tokio::select! {
                () = shard.changed() => {
                    for vmi in l.sim.vmis.state() {
                        l.look(&vmi);
                    }
                }
                _ = resync.tick() => {
                    for vmi in l.sim.vmis.state() {
                        l.look(&vmi);
                    }
                }
                change = vmis.recv() => match change {
                    Some(Change::Applied(vmi)) => l.look(&vmi),
                    Some(Change::Deleted(vmi)) => {
                        let uid = vmi.metadata.uid.clone().unwrap_or_default();
                        l.attempts.remove(&uid);
                        l.launchers.remove(&uid);
                        l.expected.remove(&uid);
                    }
                    Some(Change::Synced) => {}
                    None => return,
                },
                change = pods.recv() => match change {
                    Some(Change::Applied(pod)) => l.on_pod(&pod, false),
                    Some(Change::Deleted(pod)) => l.on_pod(&pod, true),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(vmi) = l.retries.next(), if !l.retries.is_empty() => l.look_again(&vmi),
                Some(done) = done_rx.recv() => l.on_done(done),
            }
        }
    }
}

impl VmiLoop {
    fn on_pod(&mut self, pod: &SlimPod, deleted: bool) {
        let Some(vmi_uid) = launcher_of(pod) else { return };
        let key = ObjectRef::from_obj(pod);
        if deleted {
            if let Some(list) = self.launchers.get_mut(vmi_uid) {
                list.retain(|k| *k != key);
                if list.is_empty() {
                    self.launchers.remove(vmi_uid);
                }
            }
        } else {
            let list = self.launchers.entry(vmi_uid.to_string()).or_default();
            if !list.contains(&key) {
                list.push(key);
            }
        }
        // The VMI is the pod's controller owner.
        let owner =
            pod.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "VirtualMachineInstance");
        if let (Some(owner), Some(ns)) = (owner, pod.namespace()) {
            self.look_again(&ObjectRef::new(&owner.name).within(&ns));
        }
    }

    fn look_again(&mut self, key: &ObjectRef<VirtualMachineInstance>) {
        if let Some(vmi) = self.sim.vmis.get(key) {
            self.look(&vmi);
        }
    }

    fn on_done(&mut self, done: Done) {
        let failures = self.attempts.get_mut(&done.uid).and_then(|a| a.finish(done.ok));
        let now = std::time::Instant::now();
        let live = self.sim.vmis.get(&done.vmi).is_some_and(|v| v.metadata.uid.as_deref() == Some(done.uid.as_str()));
        if !done.ok && done.step == Step::CreateLauncher && live {
            // The pod may exist even so (a timeout after the API server took it): wait for the
            // pod store before creating another.
            self.expected.entry(done.uid.clone()).or_default().launcher = Some(now);
        }
        if done.ok && live {
            let e = self.expected.entry(done.uid.clone()).or_default();
            match done.step {
                Step::Admit => e.phase = Some(("Pending", now)),
                Step::CreateLauncher => {
                    e.phase = Some(("Scheduling", now));
                    e.launcher = Some(now);
                }
                Step::Scheduling => e.phase = Some(("Scheduling", now)),
                Step::Scheduled => e.phase = Some(("Scheduled", now)),
                Step::Unpause => e.unpaused = Some(now),
                Step::Running => e.phase = Some(("Running", now)),
                Step::Fail(_) | Step::Stop { ran: false } => e.phase = Some(("Failed", now)),
                Step::Stop { ran: true } => e.phase = Some(("Succeeded", now)),
                _ => {}
            }
        }
        match failures {
            None => self.look_again(&done.vmi),
            Some(n) => self.retries.set(done.vmi, crate::simulator::retry_after(n, Duration::from_secs(30))),
        }
    }

    /// The VMI's launcher pod as the store shows it: the one on the VMI's node once it has
    /// one (a migration's target pod becomes it when the VMI moves), else the first one
    /// (never a migration's target).
    fn launcher(&self, vmi: &VirtualMachineInstance, uid: &str) -> Option<Arc<SlimPod>> {
        let pods: Vec<Arc<SlimPod>> = self.launchers.get(uid)?.iter().filter_map(|k| self.sim.pods.get(k)).collect();
        let node = vmi.status.as_ref().and_then(|s| s.node_name.as_deref());
        let on_node = pods.iter().find(|p| node.is_some() && p.node_name.as_deref() == node);
        let first = || pods.iter().find(|p| p.label(super::super::migration::MIGRATION_JOB_LABEL).is_none());
        on_node.or_else(first).cloned()
    }

    fn managed(&self, node: Option<&str>) -> bool {
        let Some(node) = node.and_then(|n| self.sim.nodes.get(&ObjectRef::new(n))) else { return false };
        self.sim.manage.manages(&node)
    }

    /// One VMI seen or looked at again: its next step, one write at a time.
    fn look(&mut self, vmi: &Arc<VirtualMachineInstance>) {
        if !self.sim.selector.matches(vmi.metadata.labels.as_ref()) {
            return;
        }
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        if self.attempts.get(&uid).is_some_and(|a| a.in_flight) {
            return;
        }
        let pod = self.launcher(vmi, &uid);
        let controller = self.sim.role == KubevirtRole::Controller;
        let node = if controller {
            pod.as_ref().and_then(|p| p.node_name.clone())
        } else {
            vmi.status.as_ref().and_then(|s| s.node_name.clone())
        };
        let shard_key =
            node.clone().unwrap_or_else(|| Shard::vmi_key(&vmi.namespace().unwrap_or_default(), &vmi.name_any()));
        if !self.sim.shard.owns(&shard_key) {
            return; // another replica's
        }
        if self.expected.get_mut(&uid).is_some_and(|e| e.pending(vmi, pod.as_deref())) {
            return; // the stores do not show our last write yet; its event brings us back
        }
        let mut step = vmi_status::next_step(vmi, pod.as_deref(), controller, self.managed(node.as_deref()));
        if step == Step::Running {
            match self.boot(vmi, &uid) {
                Boot::Done => {}
                Boot::In(left) => {
                    self.retries.set(ObjectRef::from_obj(vmi.as_ref()), left);
                    return;
                }
                Boot::Fails => step = Step::Fail("the VM failed to boot (spec.lifecycle.vmis.failPercent)".into()),
            }
        }
        if step == Step::Wait || !self.attempts.entry(uid.clone()).or_default().begin() {
            return;
        }
        let (sim, vmi, key) = (self.sim.clone(), vmi.clone(), ObjectRef::from_obj(vmi.as_ref()));
        let dropped = Done { vmi: key.clone(), uid: uid.clone(), step: step.clone(), ok: false };
        let namespace = key.namespace.clone().unwrap_or_default();
        self.writes.spawn_for(&namespace, shard_key, dropped, None, move || {
            // One span per VMI step, made once the write has room (a backlog holds none).
            let span = tracing::debug_span!("vmi_step", namespace = vmi.metadata.namespace.as_deref().unwrap_or_default(), vmi = vmi.metadata.name.as_deref().unwrap_or_default(), step = ?step);
            async move {
                // A bug in one step must not wedge the VMI: a panic counts as a failed write.
                let run = std::panic::AssertUnwindSafe(act(&sim, &vmi, pod.as_deref(), node.as_deref(), &step));
                let ok = futures::FutureExt::catch_unwind(run).await.unwrap_or(false);
                Done { vmi: key, uid, step, ok }
            }
            .instrument(span)
        });
    }
}

/// Where a Scheduled VMI's boot stands.
enum Boot {
    /// Booted: Running now.
    Done,
    /// Still booting for this long.
    In(Duration),
    /// The boot fails.
    Fails,
}

impl VmiLoop {
    /// A Scheduled VMI's boot, from its pool's knobs: it takes `bootTime` from Scheduled, and a
    /// `failPercent` share of VMIs fail then.
    fn boot(&self, vmi: &VirtualMachineInstance, uid: &str) -> Boot {
        let (ns, name) = (vmi.namespace().unwrap_or_default(), vmi.name_any());
        let plan = super::plan::of(&self.sim.lifecycles, &super::plan::pool_refs(&vmi.metadata), &ns, &name, uid);
        let since = vmi_status::phase_since(vmi, "Scheduled");
        let booted = since.map_or(0.0, |at| {
            (k8s_openapi::jiff::Timestamp::now() - at).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0)
        });
        let left = plan.boot_time.as_secs_f64() - booted.max(0.0);
        if left > 0.0 {
            Boot::In(Duration::from_secs_f64(left))
        } else if plan.fails {
            Boot::Fails
        } else {
            Boot::Done
        }
    }
}

/// Carries out one step; whether it went through (or needs no retry).
async fn act(
    sim: &VmiSimulator,
    vmi: &VirtualMachineInstance,
    pod: Option<&SlimPod>,
    node: Option<&str>,
    step: &Step,
) -> bool {
    let now = now();
    let (name, ns) = (vmi.name_any(), vmi.namespace().unwrap_or_default());
    let result = match step {
        Step::Wait => return true,
        Step::Admit => patch_vmi(sim, vmi, vmi_status::admit_patch(vmi, &now)).await,
        Step::CreateLauncher => create_launcher(sim, vmi, &now).await,
        Step::Scheduling => patch_vmi(sim, vmi, vmi_status::scheduling_patch(vmi, &now)).await,
        Step::Unschedulable(reason, message) => {
            patch_vmi(sim, vmi, vmi_status::unschedulable_patch(vmi, reason, message, &now)).await
        }
        Step::Unpause => match pod {
            Some(p) => patch_pod_status(sim, p, vmi_status::unpause_patch(p, &now)).await,
            None => Ok(()),
        },
        Step::Scheduled => match (pod, node) {
            (Some(p), Some(n)) => patch_vmi(sim, vmi, vmi_status::scheduled_patch(vmi, p, n, &now)).await,
            _ => Ok(()),
        },
        Step::Running => {
            let ips = pod.map(|p| p.pod_ips.clone()).unwrap_or_default();
            let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
            let agent =
                super::plan::of(&sim.lifecycles, &super::plan::pool_refs(&vmi.metadata), &ns, &name, uid).guest_agent;
            patch_vmi(sim, vmi, vmi_status::running_patch(vmi, &ips, agent, &now)).await
        }
        Step::Fail(why) => patch_vmi(sim, vmi, vmi_status::failed_patch(vmi, why, &now)).await,
        Step::Stop { ran } => patch_vmi(sim, vmi, vmi_status::stopped_patch(vmi, *ran, &now)).await,
        Step::DeleteLauncher => match pod {
            Some(p) => delete_pod(sim, p).await,
            None => Ok(()),
        },
        Step::Release => patch_vmi(sim, vmi, vmi_status::release_patch(vmi)).await,
    };
    let transition = format!("{step:?}").split(['(', ' ']).next().unwrap_or_default().to_lowercase();
    sim.vmi_metrics.transitions.get_or_create(&ResultLabels { result: transition }).inc();
    match result {
        Ok(()) => true,
        // Gone or replaced meanwhile (a patch carries the UID, which the API server refuses
        // with a 422 for another object of the name): nothing to retry.
        Err(_) if object_gone(&result) => true,
        // A delete's UID precondition failed (409): the launcher was replaced. A create that
        // conflicts is retried.
        Err(kube::Error::Api(s)) if s.code == 409 && *step != Step::CreateLauncher => true,
        Err(e) => {
            tracing::warn!(vmi = %name, namespace = %ns, step = ?step, error = %e, "VMI write failed; retrying");
            false
        }
    }
}

async fn patch_vmi(sim: &VmiSimulator, vmi: &VirtualMachineInstance, patch: serde_json::Value) -> kube::Result<()> {
    write_vmi(&sim.client, &sim.metrics, vmi, patch).await
}

/// A merge patch of a VMI (status travels with it), counted; shared with the migrations.
pub(super) async fn write_vmi(
    client: &Client,
    metrics: &Metrics,
    vmi: &VirtualMachineInstance,
    patch: serde_json::Value,
) -> kube::Result<()> {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &vmi.namespace().unwrap_or_default());
    let pp = crate::api::conventions::patch_params();
    let r = api.patch(&vmi.name_any(), &pp, &Patch::Merge(&patch)).await.map(|_| ());
    metrics.write("virtualmachineinstances", "patch", r.is_ok());
    r
}

async fn create_launcher(
    sim: &VmiSimulator,
    vmi: &VirtualMachineInstance,
    now: &serde_json::Value,
) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(sim.pod_client.clone(), &vmi.namespace().unwrap_or_default());
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let r = api.create(&pp, &vmi_status::launcher_pod(vmi)).await.map(|_| ());
    sim.metrics.write("pods", "create", r.is_ok());
    r?;
    patch_vmi(sim, vmi, vmi_status::scheduling_patch(vmi, now)).await
}

async fn patch_pod_status(sim: &VmiSimulator, pod: &SlimPod, patch: serde_json::Value) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(sim.pod_client.clone(), &pod.namespace().unwrap_or_default());
    let r = crate::simulator::machinery::status_patch(&api, pod.name(), pod.uid(), patch).await.map(|_| ());
    sim.metrics.write("pods", "patch-status", r.is_ok());
    r
}

async fn delete_pod(sim: &VmiSimulator, pod: &SlimPod) -> kube::Result<()> {
    remove_pod(&sim.pod_client, &sim.metrics, pod).await
}

/// Deletes a launcher pod guarded by its UID, counted; shared with the migrations.
pub(super) async fn remove_pod(client: &Client, metrics: &Metrics, pod: &SlimPod) -> kube::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    let r = api.delete(pod.name(), &dp).await.map(|_| ());
    metrics.write("pods", "delete", r.is_ok());
    r
}
