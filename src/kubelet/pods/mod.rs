//! The pod half of the simulator: every pod bound to a managed node, whoever made it, runs
//! (one status write), gets addresses from its node's podCIDR, completes when it may finish
//! (a Job's pod, or any `Never`/`OnFailure` pod its knobs or annotations give a run time),
//! and is removed when deleted once its exit delay (at most its grace period) passes. The
//! lifecycle knobs of its pool (see [`crate::simulator::lifecycle`]) and its own annotations
//! delay its start and set its fate; what each fate does after the start is in [`outcomes`].

pub mod fallback;
mod outcomes;

use crate::api::conventions::FIELD_MANAGER;
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::ipam::pods::{Allocation, PodIpam};
use crate::kubelet::status::fate::{self, Defaults, Fate, PodPlan};
use crate::kubelet::status::node as node_status;
use crate::kubelet::status::patches as pod_status;
use crate::kubelet::{AllDevices, Prepare};
use crate::shard::Shard;
use crate::simulator::lifecycle::{Lifecycles, epoch_now};
use crate::simulator::machinery::{Attempts, Class, Timers, WriteBudget, Writes};
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::{Metrics, ResultLabels};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tracing::Instrument;

#[derive(Clone)]
pub struct PodSimConfig {
    pub manage: Manage,
    /// The lifecycle knobs of the pools.
    pub lifecycles: Lifecycles,
    /// What pods whose pools say nothing get (the kubelet's flags).
    pub defaults: Defaults,
    /// Where pods on nodes without a podCIDR get addresses (`--pod-cidr-fallback`), and how
    /// long a node goes without one first.
    pub fallback: Option<(crate::ipam::fallback::FallbackRange, Duration)>,
}

pub struct PodSimulator {
    pub client: Client,
    pub config: PodSimConfig,
    pub nodes: Store<Node>,
    pub pods: Store<SlimPod>,
    pub metrics: Arc<Metrics>,
    pub writes: WriteBudget,
    /// Which nodes' pods are this replica's (all, unless the simulator is sharded).
    pub shard: Shard,
    /// What the kinds add to their nodes: the prepare step of pods with claims.
    pub devices: AllDevices,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Timer {
    /// The start delay is over.
    Start(ObjectRef<SlimPod>, String),
    /// A crash-looping container crashes.
    Crash(ObjectRef<SlimPod>, String),
    /// Its back-off is over: it runs again (or fails again, if it fails at start).
    Restart(ObjectRef<SlimPod>, String),
    Complete(ObjectRef<SlimPod>, String),
    Remove(ObjectRef<SlimPod>, String),
    /// Look at the pod again after a failed write.
    Retry(ObjectRef<SlimPod>),
    /// Its `activeDeadlineSeconds` have passed since it started.
    Deadline(ObjectRef<SlimPod>, String),
    /// A failing image pull turns into ImagePullBackOff.
    PullBackOff(ObjectRef<SlimPod>, String),
    /// A failed init container's back-off is over: it fails again.
    InitRetry(ObjectRef<SlimPod>, String),
    /// Its readiness probe starts or stops failing.
    Probe(ObjectRef<SlimPod>, String),
    /// The node (by name) may fall back to a block of the fallback range now.
    NodeRange(String),
    /// A deferred resize is tried again.
    Resize(ObjectRef<SlimPod>, String),
}

struct Tracked {
    node: String,
    /// The pod's status or delete write (one at a time; failures in a row for the back-off).
    write: Attempts,
    /// We wrote Running; the store may not show it yet.
    started: bool,
    /// When the simulator first saw the pod on its node (start delays count from here).
    seen: Instant,
    /// `down` and `restarts` were read from the pod (first sight).
    known: bool,
    /// We wrote the pod acknowledged (Pending, ContainerCreating) during its start delay.
    acknowledged: bool,
    /// Its containers are down (crashed, in back-off), as last written or seen.
    down: bool,
    restarts: i32,
    /// The final delete went through (the object may linger for others' finalizers).
    removed: bool,
    /// Deleted: how its containers end (from its exit delay and grace period), and whether
    /// that terminal status was written (the final delete follows it).
    ending: Option<pod_status::Ending>,
    terminal_written: bool,
    exhausted_reported: bool,
    /// Its annotations' problems were reported (an event on the pod).
    annotations_reported: bool,
    /// A failed prepare of its claims was reported (an event on the pod).
    prepare_reported: bool,
}

impl Default for Tracked {
    fn default() -> Self {
        Self {
            node: String::new(),
            write: Attempts::default(),
            started: false,
            seen: Instant::now(),
            known: false,
            acknowledged: false,
            down: false,
            restarts: 0,
            removed: false,
            ending: None,
            terminal_written: false,
            exhausted_reported: false,
            annotations_reported: false,
            prepare_reported: false,
        }
    }
}

enum Done {
    Write { uid: String, key: ObjectRef<SlimPod>, ok: bool, removed: bool },
}

impl Done {
    fn after(pod: &SlimPod, ok: bool, removed: bool) -> Self {
        Done::Write { uid: pod.uid().to_string(), key: ObjectRef::from_obj(pod), ok, removed }
    }
}

/// The podCIDRs of a node.
pub fn node_cidrs(node: &Node) -> Vec<IpNet> {
    let spec = node.spec.as_ref();
    let mut cidrs: Vec<IpNet> = spec
        .and_then(|s| s.pod_cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.parse::<IpNet>().ok().map(|n| n.trunc()))
        .collect();
    if cidrs.is_empty()
        && let Some(c) = spec.and_then(|s| s.pod_cidr.as_ref()).and_then(|c| c.parse::<IpNet>().ok())
    {
        cidrs.push(c.trunc());
    }
    cidrs
}

/// The shard key of a pod's writes: its node (every write is for a pod bound to one).
fn shard_key(pod: &SlimPod) -> String {
    pod.node_name.clone().unwrap_or_default()
}

fn now_value() -> serde_json::Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or_default()
}

struct Loop {
    sim: Arc<PodSimulator>,
    ipam: PodIpam,
    tracked: HashMap<String, Tracked>,
    /// Pods waiting for their node to get a podCIDR or a free address, by node.
    waiting: HashMap<String, HashSet<ObjectRef<SlimPod>>>,
    timers: Timers<Timer>,
    writes: Writes<Done>,
    recorder: Recorder,
    /// Blocks of the fallback range for nodes without a podCIDR (`None`: off).
    fallback: Option<fallback::Fallback>,
    claims: tokio::sync::mpsc::UnboundedSender<fallback::Claim>,
}

impl PodSimulator {
    pub async fn run(self, mut pods: UnboundedReceiver<Change<SlimPod>>, mut nodes: UnboundedReceiver<Change<Node>>) {
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let recorder = Recorder::new(self.client.clone(), Reporter { controller: "kwok-pools".into(), instance: None });
        let (done_tx, mut done_rx) = unbounded_channel();
        let writes = self.writes.writes(Class::Other, done_tx).fenced_by(self.shard.clone());
        let (claims_tx, mut claims_rx) = unbounded_channel();
        let mut fallback = self.config.fallback.clone().map(|(range, after)| fallback::Fallback::new(range, after));
        if let Some(f) = fallback.as_mut() {
            // The blocks claimed before (a restart): their pods' addresses are rebuilt below.
            match f.load(&self.client).await {
                Ok(n) => tracing::info!(range = %f.range.net, claims = n, "fallback pod ranges read"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list the fallback pod range claims (Leases in kube-node-lease); nodes without a podCIDR may get a new block: check the operator's RBAC")
                }
            }
        }
        let mut l = Loop {
            sim: Arc::new(self),
            ipam: PodIpam::default(),
            tracked: HashMap::new(),
            waiting: HashMap::new(),
            timers: Timers::default(),
            writes,
            recorder,
            fallback,
            claims: claims_tx,
        };
        l.rebuild();
        let mut shard = l.sim.shard.clone();
        loop {
            tokio::select! {
                () = shard.changed() => l.on_shard_change(),
                change = pods.recv() => match change {
                    Some(Change::Applied(pod)) => l.on_pod(&pod),
                    Some(Change::Deleted(pod)) => l.on_deleted(&pod),
                    Some(Change::Synced) => {}
                    None => return,
                },
                change = nodes.recv() => match change {
                    Some(Change::Applied(node)) => l.on_node(&node),
                    Some(Change::Deleted(node)) => {
                        l.ipam.forget_node(&node.name_any());
                        if let Some(f) = l.fallback.as_mut() {
                            f.forget(node.metadata.uid.as_deref().unwrap_or_default());
                        }
                    }
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(timer) = l.timers.next(), if !l.timers.is_empty() => l.on_timer(timer),
                Some(done) = done_rx.recv() => l.on_done(done),
                Some(claim) = claims_rx.recv() => l.on_claim(claim),
            }
            l.sim.metrics.managed_pods.set(l.tracked.len() as i64);
        }
    }
}

impl Loop {
    fn on_done(&mut self, Done::Write { uid, key, ok, removed }: Done) {
        let mut failures = None;
        if let Some(t) = self.tracked.get_mut(&uid) {
            t.removed |= removed;
            failures = t.write.finish(ok);
            if failures.is_some() {
                // Whatever failed is written again from what the store shows.
                t.started = false;
                t.terminal_written = false;
            }
        }
        if ok {
            // Look again: the pod may have changed while the write was in flight.
            self.look_again(&key);
        } else {
            let retry = crate::simulator::retry_after(failures.unwrap_or(1), Duration::from_secs(30));
            self.timers.set(Timer::Retry(key), retry);
        }
    }

    /// Addresses of live pods survive a restart: record them before anything is allocated.
    fn rebuild(&mut self) {
        let mut conflicts = 0;
        for pod in self.sim.pods.state() {
            let Some(node) = self.managed_node(&pod) else { continue };
            if pod_status::is_terminal(&pod) || pod_status::host_network(&pod) {
                continue;
            }
            let ips = pod_status::pod_ips(&pod);
            if ips.is_empty() {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.adopt_block(&node, &ips);
            if !self.ipam.observe(&node.name_any(), &self.cidrs(&node), &uid, &ips) {
                conflicts += 1;
                tracing::warn!(pod = %pod.name_any(), ?ips, "pod address outside its node's podCIDR or held by another pod");
            }
        }
        tracing::info!(pods = self.sim.pods.len(), conflicts, "pod addresses rebuilt from the existing pods");
    }

    /// The shard's view changed: pods of nodes that left are dropped (with their addresses);
    /// the addresses of pods on nodes that came are read back before any pod gets one, then
    /// those pods are looked at.
    fn on_shard_change(&mut self) {
        let pods = self.sim.pods.state();
        for pod in &pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if self.tracked.contains_key(&uid) && self.managed_node(pod).is_none() {
                self.untrack(pod, &uid);
            }
        }
        for node in self.ipam.nodes() {
            if !self.sim.shard.owns(&node) {
                self.ipam.forget_node(&node);
            }
        }
        self.rebuild();
        for pod in &pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if !self.tracked.contains_key(&uid) && self.managed_node(pod).is_some() {
                self.on_pod(pod);
            }
        }
    }

    /// The plan of `pod` on `node`: the knobs of the pool that governs it, else the flags.
    fn plan(&self, pod: &SlimPod, node: &Node) -> PodPlan {
        let pool = self.sim.config.lifecycles.pod_pool(pod, node);
        fate::pod_plan(pool.as_deref(), pod, &self.sim.config.defaults)
    }

    fn managed_node(&self, pod: &SlimPod) -> Option<Arc<Node>> {
        let name = pod.node_name.as_ref()?;
        if !self.sim.shard.owns(name) {
            return None;
        }
        let node = self.sim.nodes.get(&ObjectRef::new(name))?;
        self.sim.config.manage.manages(&node).then_some(node)
    }

    fn untrack(&mut self, pod: &SlimPod, uid: &str) {
        if let Some(t) = self.tracked.remove(uid) {
            self.cancel_timers(&ObjectRef::from_obj(pod), uid);
            let _ = self.ipam.release(&t.node, uid);
        }
    }

    fn on_deleted(&mut self, pod: &SlimPod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.untrack(pod, &uid);
        if let Some(node) = pod.node_name.as_ref() {
            let _ = self.ipam.release(node, &uid);
            if let Some(w) = self.waiting.get_mut(node) {
                w.remove(&ObjectRef::from_obj(pod));
            }
            // An address came free: pods waiting on this node may fit now.
            self.retry_waiting(node);
        }
    }

    fn on_node(&mut self, node: &Node) {
        if !node_cidrs(node).is_empty() || !node_status::internal_ips(node).is_empty() {
            self.retry_waiting(&node.name_any());
        }
    }

    fn retry_waiting(&mut self, node: &str) {
        let Some(waiting) = self.waiting.remove(node) else { return };
        for key in waiting {
            if let Some(pod) = self.sim.pods.get(&key) {
                self.on_pod(&pod);
            }
        }
    }

    /// One pod seen (or looked at again): the pipeline of what a kubelet would do next. The
    /// lifecycle knobs are read each time, so a pool's change applies at once.
    fn on_pod(&mut self, pod: &Arc<SlimPod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(node) = self.managed_node(pod) else {
            self.not_ours(pod, &uid);
            return;
        };
        let t = self.tracked.entry(uid.clone()).or_default();
        t.node = node.name_any();
        if t.write.in_flight {
            return;
        }
        if !t.known {
            // After a restart the pod tells where its crash loop stands.
            t.known = true;
            t.down = pod.crash_looping;
            t.restarts = pod.restart_count;
        }
        if !t.annotations_reported
            && let Some(o) = pod.overrides.as_deref().filter(|o| !o.problems.is_empty())
        {
            t.annotations_reported = true;
            let note = format!("{} (fix the annotation on the pod or its template)", o.problems.join("; "));
            self.warn(pod, "BadAnnotation", "ReadAnnotations", note);
        }
        let plan = self.plan(pod, &node);
        let away = self.away_until(&node);
        if pod.metadata.deletion_timestamp.is_some() {
            self.schedule_removal(pod, &uid, &plan, away);
        } else if let Some(until) = away {
            // Its node's kubelet is "gone": nothing happens to the pod until the node is back.
            self.look_again_at(pod, &uid, until);
        } else if pod_status::is_terminal(pod) {
            // A finished pod is not live: its address goes back, and may fit a waiting pod.
            if self.ipam.release(&node.name_any(), &uid) {
                self.retry_waiting(&node.name_any());
            }
        } else {
            self.watch_deadline(pod, &uid);
            if !pod_status::is_running(pod) {
                self.start(pod, &node, &uid, &plan);
            } else {
                self.keep_running(pod, &node, &uid, &plan);
            }
        }
    }

    /// A pod with `activeDeadlineSeconds` and a start time: ended when they have passed, as
    /// the kubelet ends it.
    fn watch_deadline(&mut self, pod: &Arc<SlimPod>, uid: &str) {
        let (Some(deadline), Some(started)) = (pod.active_deadline_seconds, pod.start_time) else { return };
        let timer = Timer::Deadline(ObjectRef::from_obj(pod.as_ref()), uid.to_string());
        if self.timers.is_set(&timer) {
            return;
        }
        let ran = (k8s_openapi::jiff::Timestamp::now() - started).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0);
        let left = (f64::from(deadline) - ran).clamp(0.0, 1e9);
        self.timers.set(timer, Duration::from_secs_f64(left));
    }

    fn past_deadline(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some(pod) = self.sim.pods.get(key) else { return };
        if pod.metadata.uid.as_deref() != Some(uid)
            || pod.metadata.deletion_timestamp.is_some()
            || pod_status::is_terminal(&pod)
        {
            return;
        }
        let Some(t) = self.tracked.get_mut(uid) else { return };
        if !t.write.begin() {
            self.timers.set(Timer::Deadline(key.clone(), uid.to_string()), Duration::from_secs(1));
            return;
        }
        self.timers.cancel(&Timer::Complete(key.clone(), uid.to_string()));
        self.spawn_status(pod.clone(), pod_status::deadline_patch(&pod, &now_value()), "deadline");
    }

    /// When the node's NotReady window (of a flapping NodePool) ends, if it is in one.
    fn away_until(&self, node: &Node) -> Option<Instant> {
        let now = epoch_now();
        let until = fate::node_flap(self.sim.config.lifecycles.node_pool(node).as_deref(), node)?.away_until(now)?;
        Some(Instant::now() + until.saturating_sub(now))
    }

    /// Looks at the pod again at `when` (one timer per pod).
    fn look_again_at(&mut self, pod: &Arc<SlimPod>, uid: &str, when: Instant) {
        if self.tracked.contains_key(uid) {
            let timer = Timer::Start(ObjectRef::from_obj(pod.as_ref()), uid.to_string());
            self.timers.set_once(timer, when.saturating_duration_since(Instant::now()));
        }
    }

    /// A pod on no managed node: forget it; if its node is not in the store yet, wait for it.
    fn not_ours(&mut self, pod: &Arc<SlimPod>, uid: &str) {
        if self.tracked.contains_key(uid) {
            self.untrack(pod, uid);
        }
        // Bound to a node the store does not show yet (a re-list holds new nodes back): look
        // again when that node appears.
        if let Some(node) = pod.node_name.as_ref()
            && self.sim.nodes.get(&ObjectRef::new(node)).is_none()
        {
            self.waiting.entry(node.clone()).or_default().insert(ObjectRef::from_obj(pod.as_ref()));
        }
    }

    /// A deleted pod goes once its exit delay has passed: about a second for a process that
    /// honours SIGTERM, the whole grace period for one that ignores it, never past the grace.
    /// On a node in a NotReady window nobody confirms the exit until the node is back.
    fn schedule_removal(&mut self, pod: &Arc<SlimPod>, uid: &str, plan: &PodPlan, away: Option<Instant>) {
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let Some(deleted_at) = pod.metadata.deletion_timestamp.as_ref() else { return };
        let timer = Timer::Remove(ObjectRef::from_obj(pod.as_ref()), uid.to_string());
        if self.timers.is_set(&timer) || t.removed {
            return;
        }
        let grace = Duration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64);
        let terminal = pod_status::is_terminal(pod) || t.terminal_written;
        let wait = if terminal { Duration::ZERO } else { plan.exit_delay.map_or(grace, |d| d.min(grace)) };
        if !terminal {
            t.ending = Some(if !pod_status::is_running(pod) {
                pod_status::Ending::NeverStarted
            } else if plan.exit_delay.is_some_and(|d| d < grace) {
                pod_status::Ending::Signalled
            } else {
                pod_status::Ending::Killed
            });
        }
        // Like a kubelet, wait from now; but never past the deletion timestamp (seconds
        // resolution, hence the extra second), which matters after a restart.
        let until_deadline =
            (deleted_at.0 - k8s_openapi::jiff::Timestamp::now()).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0)
                + 1.0;
        let mut remaining = wait.min(Duration::from_secs_f64(until_deadline.clamp(0.0, 1e9)));
        if let Some(back) = away {
            remaining = remaining.max(back.saturating_duration_since(Instant::now()));
        }
        self.timers.set(timer, remaining);
    }

    /// A pod not running yet: acknowledged at once (Pending, its containers creating) when it
    /// has a start delay; after the delay, addresses and one status write: Running, or
    /// crashed, or Failed, as its fate says.
    fn start(&mut self, pod: &Arc<SlimPod>, node: &Node, uid: &str, plan: &PodPlan) {
        if pod.claims && !self.tracked.get(uid).is_some_and(|t| t.started) && !self.prepared(pod, node, uid) {
            return;
        }
        let node_name = node.name_any();
        let key = ObjectRef::from_obj(pod.as_ref());
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let start_timer = Timer::Start(key.clone(), uid.to_string());
        if t.started || self.timers.is_set(&start_timer) {
            return; // our write is on its way through the watch, or the start delay runs
        }
        let host_ips = node_status::internal_ips(node);
        if host_ips.is_empty() {
            // The node has no address yet; its next update retries.
            self.waiting.entry(node_name).or_default().insert(key);
            return;
        }
        let due = t.seen + plan.start_delay;
        if due > Instant::now() {
            self.timers.set(start_timer, due - Instant::now());
            if !t.acknowledged && pod.start_time.is_none() {
                // As a kubelet does before it pulls images: startTime, host IPs, creating.
                t.acknowledged = true;
                t.write.in_flight = true;
                let patch = pod_status::pending_patch(pod, &host_ips, &now_value());
                self.spawn_status(pod.clone(), patch, "acknowledge");
            }
            return;
        }
        let never_restarts = pod.restart_policy.as_deref() == Some("Never");
        let now = now_value();
        let (patch, transition) = match &plan.fate {
            Fate::FailsAtStart(exit) if never_restarts => {
                (pod_status::failed_patch(pod, &host_ips, exit, &now), "fail")
            }
            Fate::InitFails(exit) if never_restarts => {
                (pod_status::init_failed_patch(pod, (&host_ips, &[]), exit, 0, &now), "init-fail")
            }
            fate => {
                // The sandbox is made: the pod has its addresses whatever its containers do.
                let Some(pod_ips) = self.addresses(pod, node, uid) else { return };
                match fate {
                    Fate::FailsAtStart(exit) => {
                        let running = pod_status::running_patch(pod, &host_ips, &pod_ips, &now);
                        (pod_status::with(running, pod_status::crashed_patch(pod, 1, exit, &now)), "crash")
                    }
                    Fate::ImagePullFails => {
                        self.timers.set(Timer::PullBackOff(key.clone(), uid.to_string()), Duration::from_secs(10));
                        (pod_status::image_pull_patch(pod, &host_ips, &pod_ips, false, &now), "image-pull-fail")
                    }
                    Fate::InitFails(exit) => {
                        let retry = Timer::InitRetry(key.clone(), uid.to_string());
                        self.timers.set(retry, fate::crash_back_off(1));
                        (pod_status::init_failed_patch(pod, (&host_ips, &pod_ips), exit, 0, &now), "init-fail")
                    }
                    _ => (pod_status::running_patch(pod, &host_ips, &pod_ips, &now), "run"),
                }
            }
        };
        let Some(t) = self.tracked.get_mut(uid) else { return };
        if transition == "crash" {
            t.down = true;
            t.restarts = 1;
        }
        if transition != "run" {
            self.sim.metrics.injected(transition);
        }
        t.started = true;
        t.write.in_flight = true;
        self.spawn_status(pod.clone(), patch, transition);
    }

    /// The kubelet's prepare step for the pod's ResourceClaims: false while the pod cannot
    /// start — its claims are not known yet (looked at again in a second), or a driver fails
    /// to prepare one (acknowledged once, ContainerCreating, with the kubelet's event; for
    /// good, as a broken driver does).
    fn prepared(&mut self, pod: &Arc<SlimPod>, node: &Node, uid: &str) -> bool {
        let note = match self.sim.devices.prepare(node, pod) {
            Prepare::Ready => return true,
            Prepare::Later => {
                self.look_again_at(pod, uid, Instant::now() + Duration::from_secs(1));
                return false;
            }
            Prepare::Fails(note) => note,
        };
        let Some(t) = self.tracked.get_mut(uid) else { return false };
        if t.prepare_reported {
            return false;
        }
        t.prepare_reported = true;
        if !t.acknowledged && pod.start_time.is_none() {
            t.acknowledged = true;
            t.write.in_flight = true;
            let patch = pod_status::pending_patch(pod, &node_status::internal_ips(node), &now_value());
            self.spawn_status(pod.clone(), patch, "acknowledge");
        }
        self.sim.metrics.injected("prepare_fail");
        self.warn(pod, "FailedPrepareDynamicResources", "PrepareDynamicResources", note);
        false
    }

    /// The pod's addresses from its node's podCIDR (the node's own with host networking).
    /// `None` when it has to wait: no range yet, or the range is full (reported once).
    fn addresses(&mut self, pod: &Arc<SlimPod>, node: &Node, uid: &str) -> Option<Vec<std::net::IpAddr>> {
        if pod_status::host_network(pod) {
            return Some(node_status::internal_ips(node));
        }
        let node_name = node.name_any();
        let key = ObjectRef::from_obj(pod.as_ref());
        match self.ipam.allocate(&node_name, &self.cidrs(node), uid) {
            Allocation::Ips(ips) => Some(ips),
            Allocation::NoRange => {
                self.waiting.entry(node_name).or_default().insert(key);
                self.fall_back(node);
                None
            }
            Allocation::Exhausted(net) => {
                self.waiting.entry(node_name.clone()).or_default().insert(key);
                if let Some(t) = self.tracked.get_mut(uid)
                    && !t.exhausted_reported
                {
                    t.exhausted_reported = true;
                    self.report_exhausted(pod, &node_name, net);
                }
                None
            }
        }
    }

    /// A running pod: its addresses stay known, Ready follows its readiness gates, a crash
    /// loop goes round (a pod that is down always comes back after its back-off, whatever the
    /// knobs say now), a Job's pod finishes.
    fn keep_running(&mut self, pod: &Arc<SlimPod>, node: &Node, uid: &str, plan: &PodPlan) {
        let node_name = node.name_any();
        let ips = pod_status::pod_ips(pod);
        if !pod_status::host_network(pod) && !ips.is_empty() {
            self.adopt_block(node, &ips);
            let cidrs = self.cidrs(node);
            self.ipam.observe(&node_name, &cidrs, uid, &ips);
        }
        let key = ObjectRef::from_obj(pod.as_ref());
        let Some(t) = self.tracked.get_mut(uid) else { return };
        t.started = true;
        if let Some(patch) = pod_status::ready_fix(pod, &now_value()) {
            t.write.in_flight = true;
            self.spawn_status(pod.clone(), patch, "ready");
            return;
        }
        // A spec change the kubelet has not answered (an in-place resize).
        if pod.generation > pod.observed_generation.max(1) {
            t.write.in_flight = true;
            self.spawn_resize(pod.clone(), Arc::new(node.clone()));
            return;
        }
        let again = Timer::Resize(key.clone(), uid.to_string());
        if pod.condition("PodResizePending") == Some("True") && !self.timers.is_set(&again) {
            // Deferred: tried again now and then, as the kubelet does, until room comes free.
            self.timers.set(again, RESIZE_RETRY);
        }
        let Some(t) = self.tracked.get_mut(uid) else { return };
        if let Some(patch) = pod_status::ephemeral_patch(pod, &now_value()) {
            t.write.in_flight = true;
            self.spawn_status(pod.clone(), patch, "ephemeral");
            return;
        }
        if !t.down && self.probe(pod, uid, plan) {
            return;
        }
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let (crash, restart) =
            (Timer::Crash(key.clone(), uid.to_string()), Timer::Restart(key.clone(), uid.to_string()));
        if !self.timers.is_set(&crash) && !self.timers.is_set(&restart) {
            if t.down {
                self.timers.set(restart, fate::crash_back_off(t.restarts));
            } else if let Fate::CrashLoops { after, .. } = plan.fate {
                self.timers.set(crash, after);
            }
        }
        let looping = t.down || !plan.fate.runs();
        let complete = Timer::Complete(key, uid.to_string());
        if let Some(run_time) = plan.run_time
            && !looping
            && !self.timers.is_set(&complete)
        {
            let ran = pod
                .start_time
                .map(|s| {
                    (k8s_openapi::jiff::Timestamp::now() - s)
                        .total(k8s_openapi::jiff::Unit::Second)
                        .unwrap_or(0.0)
                        .clamp(0.0, 1e9)
                })
                .unwrap_or(0.0);
            self.timers.set(complete, run_time.saturating_sub(Duration::from_secs_f64(ran)));
        }
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Start(key, _) => self.look_again(&key),
            Timer::Crash(key, uid) => self.crash(&key, &uid),
            Timer::Restart(key, uid) => self.restart(&key, &uid),
            Timer::Complete(key, uid) => {
                let Some(t) = self.tracked.get_mut(&uid) else { return };
                let Some(pod) = self.sim.pods.get(&key) else { return };
                if pod.metadata.deletion_timestamp.is_some() || pod_status::phase(&pod) != "Running" {
                    return;
                }
                if !t.write.begin() {
                    // Another write is on its way: finish a moment later.
                    self.timers.set(Timer::Complete(key, uid), Duration::from_secs(1));
                    return;
                }
                let patch = pod_status::completed_patch(&pod, &now_value());
                self.spawn_status(pod, patch, "complete");
            }
            Timer::Retry(key) => self.look_again(&key),
            Timer::Remove(key, uid) => self.remove_or_end(&key, &uid),
            Timer::Deadline(key, uid) => self.past_deadline(&key, &uid),
            Timer::PullBackOff(key, uid) => self.pull_back_off(&key, &uid),
            Timer::InitRetry(key, uid) => self.init_retry(&key, &uid),
            Timer::Probe(key, _) => self.look_again(&key),
            Timer::NodeRange(node) => self.retry_waiting(&node),
            Timer::Resize(key, uid) => {
                let Some((pod, node)) = self.live(&key, &uid) else { return };
                if pod.condition("PodResizePending") != Some("True") {
                    return;
                }
                let Some(t) = self.tracked.get_mut(&uid) else { return };
                if !t.write.begin() {
                    self.timers.set(Timer::Resize(key, uid), Duration::from_secs(1));
                    return;
                }
                self.spawn_resize(pod, node);
            }
        }
    }

    /// The ranges a node's pods get addresses from: its podCIDRs, else its fallback block.
    fn cidrs(&self, node: &Node) -> Vec<IpNet> {
        let own = node_cidrs(node);
        if !own.is_empty() {
            return own;
        }
        let block = self.fallback.as_ref().and_then(|f| f.block_of(node.metadata.uid.as_deref().unwrap_or_default()));
        block.into_iter().collect()
    }

    /// A pod with addresses on a node without a podCIDR: the node's fallback block is the one
    /// holding them, if this replica does not know its claim yet (it took the node over).
    fn adopt_block(&mut self, node: &Node, ips: &[std::net::IpAddr]) {
        if let (Some(f), Some(ip)) = (self.fallback.as_mut(), ips.first())
            && node_cidrs(node).is_empty()
        {
            f.adopt(node.metadata.uid.as_deref().unwrap_or_default(), *ip);
        }
    }

    /// A node without a podCIDR whose pods wait: once it has gone without one for a while, it
    /// claims a block of the fallback range.
    fn fall_back(&mut self, node: &Node) {
        let Some(f) = self.fallback.as_mut() else { return };
        let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let age = created.map_or(Duration::MAX, |t| {
            let secs = (k8s_openapi::jiff::Timestamp::now() - t).total(k8s_openapi::jiff::Unit::Second).unwrap_or(0.0);
            Duration::from_secs_f64(secs.clamp(0.0, 1e9))
        });
        match f.next(node, age) {
            fallback::Next::Nothing | fallback::Next::Full(false) => {}
            fallback::Next::Wait(left) => self.timers.set(Timer::NodeRange(node.name_any()), left),
            fallback::Next::Claim(block) => {
                let (client, claims, node) = (self.sim.client.clone(), self.claims.clone(), node.clone());
                tokio::spawn(async move {
                    let _ = claims.send(fallback::claim(client, &node, block).await);
                });
            }
            fallback::Next::Full(true) => {
                let note = format!(
                    "node {} has no podCIDR and every /{} block of the fallback range {} is claimed: its pods wait for an address; give the operator a larger --pod-cidr-fallback (or a longer --pod-cidr-fallback-mask)",
                    node.name_any(),
                    f.range.mask,
                    f.range.net
                );
                tracing::warn!(node = %node.name_any(), "fallback pod range full");
                self.node_event(node, EventType::Warning, "PodCIDRFallbackFull", note);
            }
        }
    }

    /// How a fallback claim went: the node's pods get addresses, or it tries again.
    fn on_claim(&mut self, claim: fallback::Claim) {
        let Some(f) = self.fallback.as_mut() else { return };
        f.on_claim(&claim);
        let node =
            self.sim.nodes.get(&ObjectRef::new(&claim.node)).filter(|n| n.metadata.uid.as_deref() == Some(&claim.uid));
        let Some(node) = node else { return };
        match &claim.outcome {
            fallback::Outcome::Claimed { new } => {
                if *new {
                    let note = format!(
                        "node {} has no spec.podCIDR (the controller manager does not allocate node CIDRs here): its pods get addresses from {}, a block of the simulator's --pod-cidr-fallback {}",
                        claim.node, claim.block, f.range.net
                    );
                    tracing::info!(node = %claim.node, block = %claim.block, "node without a podCIDR: fallback block claimed");
                    self.node_event(&node, EventType::Normal, "NodeHasNoPodCIDR", note);
                }
                self.retry_waiting(&claim.node);
            }
            fallback::Outcome::Taken => self.fall_back(&node),
            fallback::Outcome::Failed(e) => {
                tracing::warn!(node = %claim.node, block = %claim.block, error = %e, "claiming a fallback pod range failed; retrying in 5s");
                self.timers.set(Timer::NodeRange(claim.node), Duration::from_secs(5));
            }
        }
    }

    /// An event on a node.
    fn node_event(&self, node: &Node, type_: EventType, reason: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = node.object_ref(&());
        let reason = reason.to_string();
        tokio::spawn(async move {
            let ev = Event { type_, reason, note: Some(note), action: "AllocatePodIP".into(), secondary: None };
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "event not published");
            }
        });
    }

    /// A deleted pod whose exit delay has passed: first its terminal status, as the kubelet
    /// (since 1.27) writes it, then — when that is written — the final delete. While the
    /// simulator's writes queue, a pod nothing keeps after the final delete goes straight to
    /// it ([`crate::kubelet::status::pod::reports_termination`]).
    fn remove_or_end(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some(pod) = self.sim.pods.get(key) else { return };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return;
        }
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let terminal = pod_status::is_terminal(&pod) || t.terminal_written;
        if !t.write.begin() {
            // Another write is on its way: again a moment later.
            self.timers.set(Timer::Remove(key.clone(), uid.to_string()), Duration::from_secs(1));
            return;
        }
        if terminal {
            self.spawn_remove(pod);
            return;
        }
        if !crate::kubelet::status::pod::reports_termination(&pod, self.sim.writes.pressure()) {
            let skipped = ResultLabels { result: "terminal-status-skipped".into() };
            self.sim.metrics.pod_transitions.get_or_create(&skipped).inc();
            self.spawn_remove(pod);
            return;
        }
        t.terminal_written = true;
        let ending = t.ending.unwrap_or(pod_status::Ending::Killed);
        let patch = pod_status::terminated_patch(&pod, ending, &now_value());
        self.spawn_status(pod, patch, "terminate");
    }

    /// Cancels every timer of the pod.
    fn cancel_timers(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let u = || uid.to_string();
        for t in [
            Timer::Start(key.clone(), u()),
            Timer::Crash(key.clone(), u()),
            Timer::Restart(key.clone(), u()),
            Timer::Complete(key.clone(), u()),
            Timer::Remove(key.clone(), u()),
            Timer::Deadline(key.clone(), u()),
            Timer::PullBackOff(key.clone(), u()),
            Timer::InitRetry(key.clone(), u()),
            Timer::Probe(key.clone(), u()),
            Timer::Resize(key.clone(), u()),
        ] {
            self.timers.cancel(&t);
        }
    }

    fn look_again(&mut self, key: &ObjectRef<SlimPod>) {
        if let Some(pod) = self.sim.pods.get(key) {
            self.on_pod(&pod);
        }
    }

    /// The live pod a loop timer is for, and its node, unless it is deleted, finished or
    /// replaced, or its node is gone.
    fn live(&self, key: &ObjectRef<SlimPod>, uid: &str) -> Option<(Arc<SlimPod>, Arc<Node>)> {
        let pod = self.sim.pods.get(key)?;
        let live = pod.metadata.uid.as_deref() == Some(uid)
            && pod.metadata.deletion_timestamp.is_none()
            && pod_status::phase(&pod) == "Running";
        let node = self.managed_node(&pod)?;
        live.then_some((pod, node))
    }

    /// When a loop timer cannot act now — a write in flight, or its node away — the time to
    /// try again.
    fn not_now(&self, uid: &str, node: &Node) -> Option<Duration> {
        if self.tracked.get(uid).is_some_and(|t| t.write.in_flight) {
            return Some(Duration::from_secs(1));
        }
        self.away_until(node).map(|until| until.saturating_duration_since(Instant::now()))
    }

    /// The live pod and node a loop timer (`Crash`, `Restart`) is for, if it can act now;
    /// otherwise the timer is armed again for when it can, and `None`.
    fn ready_for(&mut self, timer: Timer, uid: &str) -> Option<(Arc<SlimPod>, Arc<Node>)> {
        let key = match &timer {
            Timer::Crash(k, _) | Timer::Restart(k, _) => k.clone(),
            _ => return None,
        };
        let (pod, node) = self.live(&key, uid)?;
        let Some(wait) = self.not_now(uid, &node) else { return Some((pod, node)) };
        self.timers.set(timer, wait);
        None
    }

    fn report_exhausted(&self, pod: &SlimPod, node: &str, net: IpNet) {
        let note = format!(
            "node {node} has no free address in its podCIDR {net}: delete pods on it, or give the node a larger range (NodePool spec.podCIDR.maskSize)"
        );
        tracing::warn!(pod = %pod.name_any(), node, %net, "pod address range exhausted");
        self.warn(pod, "PodCIDRExhausted", "AllocatePodIP", note);
    }

    /// A Warning event on the pod.
    fn warn(&self, pod: &SlimPod, reason: &str, action: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = pod.object_ref(&());
        let (reason, action) = (reason.to_string(), action.to_string());
        tokio::spawn(async move {
            let ev = Event { type_: EventType::Warning, reason, note: Some(note), action, secondary: None };
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "event not published");
            }
        });
    }

    fn spawn_status(&self, pod: Arc<SlimPod>, patch: serde_json::Value, transition: &'static str) {
        let sim = self.sim.clone();
        self.writes.spawn_for(shard_key(&pod), Done::after(&pod, false, false), None, move || {
            // One span per transition, made once the write has room (a backlog holds none).
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let span = tracing::debug_span!("pod_transition", namespace = %ns, pod = pod.name(), transition);
            status_write(sim, pod, patch, transition).instrument(span)
        });
    }

    fn spawn_resize(&self, pod: Arc<SlimPod>, node: Arc<Node>) {
        let (sim, recorder) = (self.sim.clone(), self.recorder.clone());
        self.writes.spawn_for(shard_key(&pod), Done::after(&pod, false, false), None, move || {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let span = tracing::debug_span!("pod_resize", namespace = %ns, pod = pod.name());
            resize(sim, pod, node, recorder).instrument(span)
        });
    }

    fn spawn_remove(&self, pod: Arc<SlimPod>) {
        let sim = self.sim.clone();
        self.writes.spawn_for(shard_key(&pod), Done::after(&pod, false, false), None, move || {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let span = tracing::debug_span!("pod_removal", namespace = %ns, pod = pod.name());
            remove(sim, pod).instrument(span)
        });
    }
}

/// Writes a pod's status transition; the UID makes the API server refuse the write if the pod
/// was replaced meanwhile by another of the same name (a pool reuses names).
async fn status_write(
    sim: Arc<PodSimulator>,
    pod: Arc<SlimPod>,
    mut patch: serde_json::Value,
    transition: &'static str,
) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    patch["metadata"] = serde_json::json!({ "uid": pod.uid() });
    let result = api.patch_status(&pod.name_any(), &pp, &Patch::Strategic(&patch)).await;
    let ok = result.is_ok();
    sim.metrics.write("pods", "patch-status", ok);
    sim.metrics.pod_transitions.get_or_create(&ResultLabels { result: transition.into() }).inc();
    // Gone or replaced: nothing to retry for this pod.
    let gone = crate::simulator::machinery::object_gone(&result);
    if let Err(e) = &result
        && !gone
    {
        tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "pod status write failed; will retry");
    }
    Done::after(&pod, ok || gone, false)
}

/// How often a deferred resize is tried again.
const RESIZE_RETRY: Duration = Duration::from_secs(5);

/// Answers a pod's in-place resize as the kubelet does: it fits beside the node's other pods
/// (done at once) or it is Deferred until room comes free.
async fn resize(sim: Arc<PodSimulator>, pod: Arc<SlimPod>, node: Arc<Node>, recorder: Recorder) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let full = match api.get_opt(pod.name()).await {
        Ok(Some(p)) if p.metadata.uid.as_deref() == Some(pod.uid()) => p,
        Ok(_) => return Done::after(&pod, true, false),
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "reading a resized pod failed; will retry");
            return Done::after(&pod, false, false);
        }
    };
    let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={}", node.name_any()));
    let others = match Api::<Pod>::all(sim.client.clone()).list(&on_node).await {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(node = %node.name_any(), error = %e, "listing a node's pods for a resize failed; will retry");
            return Done::after(&pod, false, false);
        }
    };
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let (patch, event) = match crate::kubelet::status::resize::decide(&full, &allocatable, &others, &now_value()) {
        crate::kubelet::status::resize::Decision::Fits(patch) => {
            let note = format!("Pod resize completed (generation {})", full.metadata.generation.unwrap_or(1));
            (patch, Some((EventType::Normal, "ResizeCompleted", note)))
        }
        crate::kubelet::status::resize::Decision::Deferred(patch, message) => {
            let shown = full
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodResizePending").and_then(|c| c.message.clone()));
            let event = (shown.as_deref() != Some(message.as_str()))
                .then(|| (EventType::Warning, "ResizeDeferred", format!("Pod resize Deferred: {message}")));
            (patch, event)
        }
    };
    let done = status_write(sim, pod.clone(), patch, "resize").await;
    if let (Done::Write { ok: true, .. }, Some((type_, reason, note))) = (&done, event) {
        let ev = Event { type_, reason: reason.into(), note: Some(note), action: "Resize".into(), secondary: None };
        if let Err(e) = recorder.publish(&ev, &pod.object_ref(&())).await {
            tracing::debug!(error = %e, "event not published");
        }
    }
    done
}

/// Removes a terminated pod (grace 0, on its UID), as the kubelet's final delete does.
async fn remove(sim: Arc<PodSimulator>, pod: Arc<SlimPod>) -> Done {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    let result = api.delete(&pod.name_any(), &dp).await;
    let ok = match &result {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
        Err(e) => {
            tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "removing a terminated pod failed");
            false
        }
    };
    sim.metrics.write("pods", "delete", ok);
    Done::after(&pod, ok, ok)
}
