//! Live migration without KubeVirt: plays virt-controller's migration and evacuation
//! controllers and the handlers' part for VirtualMachineInstanceMigrations (the stand-in CRD
//! `--child-crds` installs). Each migration is decided from the stores
//! ([`super::migration_plan`]), one step at a time; a drained node's VMIs (marked by the
//! eviction webhook with `status.evacuationNodeName`) get migrations as KubeVirt's evacuation
//! controller makes them, at most 5 at once in the cluster and 2 out of a node.

use super::super::kubevirt::VirtualMachineInstance;
use super::super::migration::{
    EVACUATION_ANNOTATION, MIGRATION_JOB_LABEL, VMI_NAME_LABEL, VirtualMachineInstanceMigration,
};
use super::migration_plan::{self as mp, Seen, Step};
use super::status::{CREATED_BY_LABEL, unpause_patch};
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::kubelet::recorder::KubeletRecorder;
use crate::shard::Shard;
use crate::simulator::lifecycle::Lifecycles;
use crate::simulator::manage::Manage;
use crate::simulator::selector::Selector;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{Patch, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How many migrations run at once (KubeVirt's `parallelMigrationsPerCluster` and
/// `parallelOutboundMigrationsPerNode`, 5 and 2 by default).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub per_cluster: usize,
    pub per_node: usize,
}

/// How long a step done is not done again while the stores do not show it.
const SETTLE: Duration = Duration::from_secs(10);

pub struct MigrationController {
    pub client: Client,
    /// Which VMIs are simulated (their migrations with them).
    pub selector: Selector,
    pub limits: Limits,
    pub shard: Shard,
    pub manage: Manage,
    pub lifecycles: Lifecycles,
    pub migrations: Store<VirtualMachineInstanceMigration>,
    pub vmis: Store<VirtualMachineInstance>,
    pub pods: Store<SlimPod>,
    pub nodes: Store<Node>,
    pub metrics: Arc<Metrics>,
    pub recorder: KubeletRecorder,
}

/// An evacuation migration asked for.
struct Evacuating {
    /// The node it moves the VMI off.
    node: String,
    at: Instant,
    /// Its namespace and name, once created.
    made: Option<(String, String)>,
}

/// Migration UID → (source node, when its target pod was asked for).
type Starting = HashMap<String, (Option<String>, Instant)>;

#[derive(Clone)]
struct Loop {
    c: Arc<MigrationController>,
    /// Migration UID → a step in flight.
    busy: Arc<Mutex<HashSet<String>>>,
    /// Migration UID → the last step done and when (not repeated while the stores lag).
    done: Arc<Mutex<HashMap<String, (Step, Instant)>>>,
    /// VMI UID → the evacuation migration made for it, until the store shows it.
    evacuating: Arc<Mutex<HashMap<String, Evacuating>>>,
    /// Migration UID → (source node, when its target pod was asked for) until the store
    /// shows it past Pending: counted as running.
    starting: Arc<Mutex<Starting>>,
    again: UnboundedSender<ObjectRef<VirtualMachineInstanceMigration>>,
}

impl MigrationController {
    pub async fn run(
        self,
        mut migrations: UnboundedReceiver<Change<VirtualMachineInstanceMigration>>,
        mut vmis: UnboundedReceiver<Change<VirtualMachineInstance>>,
        mut pods: UnboundedReceiver<Change<SlimPod>>,
    ) {
        let (again, mut looks) = unbounded_channel();
        let l = Loop {
            c: Arc::new(self),
            busy: Arc::default(),
            done: Arc::default(),
            evacuating: Arc::default(),
            starting: Arc::default(),
            again,
        };
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                c = migrations.recv() => match c {
                    Some(Change::Applied(m)) => {
                        l.look(&m);
                        if m.ended() {
                            l.look_queued();
                            l.evacuate_all();
                        }
                    }
                    Some(Change::Deleted(m)) => {
                        let uid = m.metadata.uid.clone().unwrap_or_default();
                        crate::sync::lock(&l.done).remove(&uid);
                        crate::sync::lock(&l.starting).remove(&uid);
                        l.cancel(&m);
                        l.look_queued();
                        l.evacuate_all();
                    }
                    Some(Change::Synced) => {}
                    None => return,
                },
                c = vmis.recv() => match c {
                    Some(Change::Applied(vmi)) => {
                        l.look_vmi(&vmi);
                        l.evacuate(&vmi);
                    }
                    Some(Change::Deleted(vmi)) => l.look_vmi(&vmi),
                    Some(Change::Synced) => {}
                    None => return,
                },
                c = pods.recv() => match c {
                    Some(Change::Applied(p) | Change::Deleted(p)) => l.look_pod(&p),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(key) = looks.recv() => {
                    if let Some(m) = l.c.migrations.get(&key) {
                        l.look(&m);
                    }
                }
                _ = tick.tick() => {
                    for m in l.c.migrations.state() {
                        l.look(&m);
                    }
                    l.evacuate_all();
                }
            }
        }
    }
}

/// The migrations of a VMI (by namespace and name), in the store.
fn of_vmi(
    store: &Store<VirtualMachineInstanceMigration>,
    ns: &str,
    vmi: &str,
) -> Vec<Arc<VirtualMachineInstanceMigration>> {
    store
        .state()
        .into_iter()
        .filter(|m| m.metadata.namespace.as_deref() == Some(ns) && m.spec.vmi_name == vmi)
        .collect()
}

/// Whether a migration is running: past Pending and not ended.
fn running(m: &VirtualMachineInstanceMigration) -> bool {
    !m.ended() && !matches!(m.phase(), "" | "Pending")
}

impl Loop {
    /// A migration deleted before it ended (KubeVirt's finalizer is not kept): the VMI's
    /// migration state says it failed and its target pod goes; the VMI stays where it is.
    fn cancel(&self, m: &VirtualMachineInstanceMigration) {
        if m.ended() {
            return;
        }
        let (l, m) = (self.clone(), m.clone());
        tokio::spawn(async move {
            // A step in flight finishes first, and the stores catch up with it and with a
            // target pod just created.
            let uid = m.metadata.uid.clone().unwrap_or_default();
            for _ in 0..300 {
                if !crate::sync::lock(&l.busy).contains(&uid) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(mp::STORE_LAG.min(Duration::from_secs(3))).await;
            let ns = m.namespace().unwrap_or_default();
            let Some(vmi) = l.c.vmis.get(&ObjectRef::new(&m.spec.vmi_name).within(&ns)) else { return };
            if !l.c.selector.matches(vmi.metadata.labels.as_ref()) {
                return;
            }
            let state = mp::state_of(&vmi, &uid).cloned();
            if state.as_ref().is_some_and(|s| s.get("completed") == Some(&json!(true))) {
                return; // it finished: the VMI may run in the target pod now
            }
            let (target, _) = l.pods_of(&vmi, &m);
            if state.is_some() {
                let now = now();
                if let Err(e) = patch_vmi(&l.c, &vmi, mp::aborted_patch(&vmi, "the migration was deleted", &now)).await
                {
                    tracing::debug!(error = %e, "the VMI's migration state not written after its migration was deleted");
                }
            }
            let on_vmi_node = target.as_ref().is_some_and(|t| {
                t.node_name.is_some() && t.node_name == vmi.status.as_ref().and_then(|s| s.node_name.clone())
            });
            if !on_vmi_node && let Err(e) = delete_pod(&l.c, target.as_deref()).await {
                tracing::warn!(error = %e, "the target pod of a deleted migration was not deleted");
            }
        });
    }

    /// Migrations waiting for a slot.
    fn look_queued(&self) {
        for m in self.c.migrations.state() {
            if m.phase() == "Pending" {
                self.look(&m);
            }
        }
    }

    /// The node a migration's VMI runs on now.
    fn source_node(&self, m: &VirtualMachineInstanceMigration) -> Option<String> {
        let key = ObjectRef::new(&m.spec.vmi_name).within(m.metadata.namespace.as_deref().unwrap_or_default());
        self.c.vmis.get(&key).and_then(|v| v.status.as_ref()?.node_name.clone())
    }

    /// Whether a migration out of `node` may start now, within the parallel limits.
    fn slot(&self, node: Option<&str>) -> bool {
        let all = self.c.migrations.state();
        let mut starting = crate::sync::lock(&self.starting);
        let shown: HashSet<&str> =
            all.iter().filter(|m| running(m)).filter_map(|m| m.metadata.uid.as_deref()).collect();
        // Asked for and still Pending in the store (or not there yet): counted as running.
        let queued: HashSet<&str> = all
            .iter()
            .filter(|m| matches!(m.phase(), "" | "Pending"))
            .filter_map(|m| m.metadata.uid.as_deref())
            .collect();
        starting.retain(|uid, (_, at)| queued.contains(uid.as_str()) && at.elapsed() < Duration::from_secs(30));
        let from_node = all.iter().filter(|m| running(m)).filter(|m| self.source_node(m).as_deref() == node).count()
            + starting.values().filter(|(n, _)| n.as_deref() == node).count();
        shown.len() + starting.len() < self.c.limits.per_cluster && from_node < self.c.limits.per_node
    }

    fn look_vmi(&self, vmi: &VirtualMachineInstance) {
        let ns = vmi.namespace().unwrap_or_default();
        for m in of_vmi(&self.c.migrations, &ns, &vmi.name_any()) {
            if !m.ended() || m.phase() == "Succeeded" || m.phase() == "Failed" {
                self.look(&m);
            }
        }
    }

    fn look_pod(&self, pod: &SlimPod) {
        if pod.label(CREATED_BY_LABEL).is_none() {
            return;
        }
        let ns = pod.namespace().unwrap_or_default();
        let job = pod.label(MIGRATION_JOB_LABEL);
        for m in self.c.migrations.state() {
            if m.metadata.namespace.as_deref() != Some(ns.as_str()) {
                continue;
            }
            // Its target, or (once it succeeded) the source pod it ends.
            if job == m.metadata.uid.as_deref() || m.phase() == "Succeeded" {
                self.look(&m);
            }
        }
    }

    /// Migration `m`'s target pod and source pod: the pod its migration state names (its
    /// own copy, else the VMI's), else — before it succeeded — the VMI's pod on its node now;
    /// never the target.
    fn pods_of(
        &self,
        vmi: &VirtualMachineInstance,
        m: &VirtualMachineInstanceMigration,
    ) -> (Option<Arc<SlimPod>>, Option<Arc<SlimPod>>) {
        let uid = m.metadata.uid.as_deref().unwrap_or_default();
        let pods = self.launchers(vmi);
        let target = pods.iter().find(|p| p.label(MIGRATION_JOB_LABEL) == Some(uid)).cloned();
        let vmi_node = vmi.status.as_ref().and_then(|s| s.node_name.clone());
        let own = m.status.as_ref().and_then(|s| s.rest.get("migrationState"));
        let recorded = [own, mp::state_of(vmi, uid)]
            .into_iter()
            .flatten()
            .find_map(|s| s.get("sourcePod").and_then(Value::as_str));
        let others = || pods.iter().filter(|p| p.label(MIGRATION_JOB_LABEL) != Some(uid));
        let source = match recorded {
            Some(name) => others().find(|p| p.name() == name).cloned(),
            None if m.phase() != "Succeeded" => {
                others().find(|p| p.node_name.is_some() && p.node_name == vmi_node).cloned()
            }
            None => None,
        };
        (target, source)
    }

    /// The VMI's launcher pods in the store (by its UID label).
    fn launchers(&self, vmi: &VirtualMachineInstance) -> Vec<Arc<SlimPod>> {
        let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
        let ns = vmi.namespace();
        self.c
            .pods
            .state()
            .into_iter()
            .filter(|p| p.label(CREATED_BY_LABEL) == Some(uid) && p.namespace() == ns)
            .collect()
    }

    fn look(&self, m: &Arc<VirtualMachineInstanceMigration>) {
        let (ns, uid) = (m.namespace().unwrap_or_default(), m.metadata.uid.clone().unwrap_or_default());
        let vmi = self.c.vmis.get(&ObjectRef::new(&m.spec.vmi_name).within(&ns));
        let labels = vmi.as_ref().map_or(m.metadata.labels.as_ref(), |v| v.metadata.labels.as_ref());
        if !self.c.selector.matches(labels) || !self.c.shard.owns(&Shard::vmi_key(&ns, &m.spec.vmi_name)) {
            return;
        }
        if crate::sync::lock(&self.busy).contains(&uid) {
            return;
        }
        let (target, source) = vmi.as_deref().map(|v| self.pods_of(v, m)).unwrap_or_default();
        let vmi_node = vmi.as_ref().and_then(|v| v.status.as_ref()).and_then(|s| s.node_name.clone());
        let other = of_vmi(&self.c.migrations, &ns, &m.spec.vmi_name)
            .into_iter()
            .filter(|o| o.metadata.uid != m.metadata.uid && !o.ended())
            .find(|o| {
                let key = |x: &VirtualMachineInstanceMigration| {
                    (x.metadata.creation_timestamp.clone().map(|t| t.0), x.metadata.uid.clone())
                };
                key(o) < key(m)
            })
            .map(|o| o.name_any());
        let target_managed = target
            .as_ref()
            .and_then(|p| p.node_name.as_deref())
            .and_then(|n| self.c.nodes.get(&ObjectRef::new(n)))
            .is_some_and(|n| self.c.manage.manages(&n));
        let slot = m.phase() == "Pending" && target.is_none() && self.slot(vmi_node.as_deref());
        let refs = vmi.as_ref().map(|v| super::plan::pool_refs(&v.metadata)).unwrap_or_default();
        let plan = super::plan::of_migration(&self.c.lifecycles, &refs, &ns, &m.name_any(), &uid);
        let seen = Seen {
            vmi: vmi.as_deref(),
            target: target.as_deref(),
            source: source.as_deref(),
            other_active: other.as_deref(),
            target_managed,
            slot,
            plan: &plan,
            now: k8s_openapi::jiff::Timestamp::now(),
        };
        let step = mp::next_step(m, &seen);
        if let Step::Wait(wait) = step {
            if let Some(wait) = wait {
                self.look_in(m, wait);
            }
            return;
        }
        {
            let mut done = crate::sync::lock(&self.done);
            if let Some((last, at)) = done.get(&uid)
                && *last == step
                && at.elapsed() < SETTLE
            {
                drop(done);
                self.look_in(m, SETTLE);
                return;
            }
            done.remove(&uid);
        }
        if step == Step::CreateTarget {
            crate::sync::lock(&self.starting).insert(uid.clone(), (vmi_node.clone(), Instant::now()));
        }
        crate::sync::lock(&self.busy).insert(uid.clone());
        let l = self.clone();
        let m = m.clone();
        tokio::spawn(async move {
            let ok = act(&l.c, &m, vmi.as_deref(), source.as_deref(), target.as_deref(), &step).await;
            crate::sync::lock(&l.busy).remove(&uid);
            if ok {
                crate::sync::lock(&l.done).insert(uid, (step, Instant::now()));
                let _ = l.again.send(ObjectRef::from_obj(m.as_ref()));
            } else {
                l.look_in(&m, Duration::from_secs(2));
            }
        });
    }

    fn look_in(&self, m: &VirtualMachineInstanceMigration, wait: Duration) {
        let (again, key) = (self.again.clone(), ObjectRef::from_obj(m));
        tokio::spawn(async move {
            tokio::time::sleep(wait + Duration::from_millis(100)).await;
            let _ = again.send(key);
        });
    }

    fn evacuate_all(&self) {
        for vmi in self.c.vmis.state() {
            self.evacuate(&vmi);
        }
    }

    /// A VMI marked for evacuation off the node it runs on gets a migration, as KubeVirt's
    /// evacuation controller makes one, within the parallel limits.
    fn evacuate(&self, vmi: &VirtualMachineInstance) {
        let Some(status) = vmi.status.as_ref() else { return };
        let Some(from) = status.rest.get("evacuationNodeName").and_then(Value::as_str) else { return };
        if status.node_name.as_deref() != Some(from)
            || vmi.phase() != "Running"
            || vmi.metadata.deletion_timestamp.is_some()
        {
            return;
        }
        // KubeVirt's evacuation controller migrates only what migrates on eviction; an
        // `External` VMI is left to whoever set that strategy.
        let migratable = vmi.condition("LiveMigratable").is_some_and(|c| c.status == "True");
        match vmi.spec.eviction_strategy.as_deref() {
            Some("LiveMigrate") => {}
            Some("LiveMigrateIfPossible") if migratable => {}
            _ => return,
        }
        let (ns, name, uid) =
            (vmi.namespace().unwrap_or_default(), vmi.name_any(), vmi.metadata.uid.clone().unwrap_or_default());
        if !self.c.selector.matches(vmi.metadata.labels.as_ref()) || !self.c.shard.owns(&Shard::vmi_key(&ns, &name)) {
            return;
        }
        let all = self.c.migrations.state();
        if evacuation_backoff(&all, &ns, &name, k8s_openapi::jiff::Timestamp::now()).is_some() {
            return; // looked at again on the next tick
        }
        let active: Vec<&Arc<VirtualMachineInstanceMigration>> = all.iter().filter(|m| !m.ended()).collect();
        if active.iter().any(|m| m.metadata.namespace.as_deref() == Some(ns.as_str()) && m.spec.vmi_name == name) {
            return;
        }
        let mut evacuating = crate::sync::lock(&self.evacuating);
        // Made and not in the store yet (or still being made): counted beside the store's.
        let names: HashSet<(&str, &str)> =
            all.iter().filter_map(|m| Some((m.metadata.namespace.as_deref()?, m.metadata.name.as_deref()?))).collect();
        evacuating.retain(|_, e| {
            e.at.elapsed() < Duration::from_secs(30)
                && e.made.as_ref().is_none_or(|(ns, n)| !names.contains(&(ns.as_str(), n.as_str())))
        });
        if evacuating.contains_key(&uid) {
            return;
        }
        let from_node = |m: &VirtualMachineInstanceMigration| self.source_node(m).as_deref() == Some(from);
        let in_flight = active.len() + evacuating.len();
        let out_of_node =
            active.iter().filter(|m| from_node(m)).count() + evacuating.values().filter(|e| e.node == from).count();
        if in_flight >= self.c.limits.per_cluster || out_of_node >= self.c.limits.per_node {
            return; // looked at again when a migration ends
        }
        evacuating.insert(uid, Evacuating { node: from.to_string(), at: Instant::now(), made: None });
        let (c, evac) = (self.c.clone(), self.evacuating.clone());
        let (from, vmi_uid) = (from.to_string(), vmi.metadata.uid.clone().unwrap_or_default());
        tokio::spawn(async move {
            let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(c.client.clone(), &ns);
            let mut m = VirtualMachineInstanceMigration::of(&name);
            m.metadata.generate_name = Some("kubevirt-evacuation-".into());
            m.metadata.annotations = Some([(EVACUATION_ANNOTATION.to_string(), from.clone())].into());
            m.metadata.labels = Some([(VMI_NAME_LABEL.to_string(), name.clone())].into());
            let r = api.create(&PostParams::default(), &m).await;
            c.metrics.write("virtualmachineinstancemigrations", "create", r.is_ok());
            match r {
                Ok(m) => {
                    tracing::info!(vmi = %name, namespace = %ns, node = %from, migration = %m.name_any(), "evacuating the VMI off its drained node");
                    if let Some(e) = crate::sync::lock(&evac).get_mut(&vmi_uid) {
                        e.made = Some((ns.clone(), m.name_any()));
                    }
                }
                Err(e) => {
                    tracing::warn!(vmi = %name, namespace = %ns, error = %e, "cannot create the evacuation migration; trying again");
                    crate::sync::lock(&evac).remove(&vmi_uid);
                }
            }
        });
    }
}

/// How long a VMI whose evacuation migrations failed waits before the next one: 20 s after
/// the last, doubling per failure, at most 5 minutes (`None`: go now).
fn evacuation_backoff(
    all: &[Arc<VirtualMachineInstanceMigration>],
    ns: &str,
    vmi: &str,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Duration> {
    let failed: Vec<k8s_openapi::jiff::Timestamp> = all
        .iter()
        .filter(|m| m.metadata.namespace.as_deref() == Some(ns) && m.spec.vmi_name == vmi && m.phase() == "Failed")
        .filter(|m| m.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(EVACUATION_ANNOTATION)))
        .filter_map(|m| mp::phase_since(m, "Failed"))
        .collect();
    let last = failed.iter().max()?;
    let exp = u32::try_from(failed.len().saturating_sub(1)).unwrap_or(u32::MAX).min(4);
    let backoff = (Duration::from_secs(20) * 2u32.pow(exp)).min(Duration::from_secs(300));
    let since = Duration::from_secs_f64((now - *last).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0).max(0.0));
    (since < backoff).then(|| backoff - since)
}

fn now() -> Value {
    json!(k8s_openapi::jiff::Timestamp::now().to_string())
}

/// Carries out one step; whether it went through (or needs no retry).
async fn act(
    c: &MigrationController,
    m: &VirtualMachineInstanceMigration,
    vmi: Option<&VirtualMachineInstance>,
    source: Option<&SlimPod>,
    target: Option<&SlimPod>,
    step: &Step,
) -> bool {
    let result = play(c, m, vmi, source, target, step).await;
    match result {
        Ok(()) => true,
        Err(_) if crate::simulator::machinery::object_gone(&result) => true,
        Err(e) => {
            let (name, ns) = (m.name_any(), m.namespace().unwrap_or_default());
            tracing::warn!(migration = %name, namespace = %ns, step = ?step, error = %e, "migration write failed; trying again");
            false
        }
    }
}

/// The writes of one step.
async fn play(
    c: &MigrationController,
    m: &VirtualMachineInstanceMigration,
    vmi: Option<&VirtualMachineInstance>,
    source: Option<&SlimPod>,
    target: Option<&SlimPod>,
    step: &Step,
) -> kube::Result<()> {
    let ns = m.namespace().unwrap_or_default();
    let uid = m.metadata.uid.clone().unwrap_or_default();
    let now = now();
    let state = || vmi.and_then(|v| mp::state_of(v, &uid)).cloned();
    let phase = |p: &'static str| phase(c, m, mp::phase_patch(m, p, None, &now));
    match step {
        Step::Wait(_) => Ok(()),
        Step::Pending => phase("Pending").await,
        Step::Fail(why) => {
            tracing::info!(migration = %m.name_any(), namespace = %ns, reason = %why, "migration failed");
            if let Some(v) = vmi
                && state().is_some_and(|s| s.get("completed") != Some(&json!(true)))
            {
                patch_vmi(c, v, mp::aborted_patch(v, why, &now)).await?;
            }
            self::phase(c, m, mp::failed_patch(m, why, state().as_ref(), &now)).await
        }
        Step::CreateTarget => {
            let Some(v) = vmi else { return Ok(()) };
            let api: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
            let pp =
                PostParams { field_manager: Some(crate::api::conventions::FIELD_MANAGER.into()), ..Default::default() };
            let r = api.create(&pp, &mp::target_pod(v, &uid)).await.map(|_| ());
            c.metrics.write("pods", "create", r.is_ok());
            match r {
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                other => other?,
            }
            phase("Scheduling").await
        }
        Step::UnpauseTarget => match target {
            Some(p) => {
                let api: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
                let patch = unpause_patch(p, &now);
                let r = crate::simulator::machinery::status_patch(&api, p.name(), p.uid(), patch).await.map(|_| ());
                c.metrics.write("pods", "patch-status", r.is_ok());
                r
            }
            None => Ok(()),
        },
        Step::Scheduled => match (vmi, target) {
            (Some(v), Some(t)) => {
                patch_vmi(c, v, mp::handoff_patch(v, &uid, source, t)).await?;
                phase("Scheduled").await
            }
            _ => Ok(()),
        },
        Step::PreparingTarget => phase("PreparingTarget").await,
        Step::TargetReady => phase("TargetReady").await,
        Step::Running => {
            if let Some(v) = vmi {
                patch_vmi(c, v, mp::started_patch(v, &now)).await?;
            }
            phase("Running").await
        }
        Step::Complete => match (vmi, target) {
            (Some(v), Some(t)) => {
                patch_vmi(c, v, mp::completed_patch(v, source, t, &now)).await?;
                let node = t.node_name.clone().unwrap_or_default();
                event(c, v, EventType::Normal, format!("The VirtualMachineInstance migrated to node {node}.")).await;
                Ok(())
            }
            _ => Ok(()),
        },
        Step::Abort => match vmi {
            Some(v) => {
                patch_vmi(c, v, mp::aborted_patch(v, mp::FAILED_COPY, &now)).await?;
                let why = format!("VirtualMachineInstance migration uid {uid} failed. reason: {}", mp::FAILED_COPY);
                event(c, v, EventType::Warning, why).await;
                Ok(())
            }
            None => Ok(()),
        },
        Step::Finish(true) => self::phase(c, m, mp::phase_patch(m, "Succeeded", state().as_ref(), &now)).await,
        Step::Finish(false) => self::phase(c, m, mp::failed_patch(m, mp::FAILED_COPY, state().as_ref(), &now)).await,
        Step::DeleteSource => delete_pod(c, source).await,
        Step::DeleteTarget => delete_pod(c, target).await,
    }
}

async fn phase(c: &MigrationController, m: &VirtualMachineInstanceMigration, patch: Value) -> kube::Result<()> {
    let api: Api<VirtualMachineInstanceMigration> =
        Api::namespaced(c.client.clone(), &m.namespace().unwrap_or_default());
    let pp = crate::api::conventions::patch_params();
    let r = api.patch_status(&m.name_any(), &pp, &Patch::Merge(&patch)).await.map(|_| ());
    c.metrics.write("virtualmachineinstancemigrations/status", "patch", r.is_ok());
    r
}

async fn patch_vmi(c: &MigrationController, vmi: &VirtualMachineInstance, patch: Value) -> kube::Result<()> {
    super::vmis::write_vmi(&c.client, &c.metrics, vmi, patch).await
}

/// Deletes a launcher pod (a replaced one is not this pod: done).
async fn delete_pod(c: &MigrationController, pod: Option<&SlimPod>) -> kube::Result<()> {
    let Some(pod) = pod else { return Ok(()) };
    match super::vmis::remove_pod(&c.client, &c.metrics, pod).await {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other,
    }
}

/// The handler's `Migrated` event on the VMI.
async fn event(c: &MigrationController, vmi: &VirtualMachineInstance, type_: EventType, note: String) {
    let regarding = ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachineInstance".into()),
        name: vmi.metadata.name.clone(),
        namespace: vmi.metadata.namespace.clone(),
        uid: vmi.metadata.uid.clone(),
        ..Default::default()
    };
    let ev = Event { type_, reason: "Migrated".into(), note: Some(note), action: "Migrate".into(), secondary: None };
    if let Err(e) = c.recorder.publish(&ev, &regarding).await {
        tracing::debug!(error = %e, "migration event not recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_evacuation(vmi: &str, at: &str) -> Arc<VirtualMachineInstanceMigration> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "m", "namespace": "d", "annotations": {EVACUATION_ANNOTATION: "n1"}},
                "spec": {"vmiName": vmi},
                "status": {"phase": "Failed", "phaseTransitionTimestamps": [{"phase": "Failed", "phaseTransitionTimestamp": at}]},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn failed_evacuations_back_off_doubling_to_five_minutes() {
        let t = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        let one = vec![failed_evacuation("vm", "2026-01-01T00:00:00Z")];
        assert_eq!(evacuation_backoff(&one, "d", "vm", t("2026-01-01T00:00:05Z")), Some(Duration::from_secs(15)));
        assert_eq!(evacuation_backoff(&one, "d", "vm", t("2026-01-01T00:00:21Z")), None);
        assert_eq!(evacuation_backoff(&one, "d", "other", t("2026-01-01T00:00:05Z")), None);
        let many: Vec<_> = (0..8).map(|_| failed_evacuation("vm", "2026-01-01T00:00:00Z")).collect();
        assert_eq!(evacuation_backoff(&many, "d", "vm", t("2026-01-01T00:00:00Z")), Some(Duration::from_secs(300)));
    }
}
