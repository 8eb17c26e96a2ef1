//! The pod worker's loop: it reads the time once per event, finds the pod's node, plan and
//! tracked state, asks [`step`] or [`fire`] what to do, and applies the effects: timers on one
//! wheel, addresses from the allocator, events, and writes handed to the [`writer`] within the
//! simulator's write budget.

use super::step::{self, Effect, Input, NodeFacts, TimerKind, Tracked};
use super::{Done, PodSimulator, fallback, shard_key, writer};
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::ipam::pods::PodIpam;
use crate::kubelet::recorder::KubeletRecorder;
use crate::kubelet::status::admission;
use crate::kubelet::status::eviction;
use crate::kubelet::status::fate::{self, PodPlan};
use crate::kubelet::status::node as node_status;
use crate::kubelet::status::patches as pod_status;
use crate::kubelet::{Mount, Prepare};
use crate::simulator::clock::Now;
use crate::simulator::machinery::{Class, Timers, Writes};
use crate::telemetry::metrics::ResultLabels;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;
use tracing::Instrument;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Timer {
    /// One of a pod's timers (by its key and UID).
    Pod(ObjectRef<SlimPod>, String, TimerKind),
    /// Look at the pod again after a failed write.
    Retry(ObjectRef<SlimPod>),
    /// The node (by name) may fall back to a block of the fallback range now.
    NodeRange(String),
    /// The node's eviction manager looks again (by name).
    Evict(String),
}

pub(super) struct Loop {
    pub(super) sim: Arc<PodSimulator>,
    pub(super) ipam: PodIpam,
    pub(super) tracked: HashMap<String, Tracked>,
    /// Pods waiting for their node to get a podCIDR or a free address, by node.
    pub(super) waiting: HashMap<String, HashSet<ObjectRef<SlimPod>>>,
    /// The tracked pods of each node (what the kubelet's admission weighs a new pod against).
    pub(super) on_node: HashMap<String, HashSet<ObjectRef<SlimPod>>>,
    /// When each node's eviction manager last evicted a pod.
    last_eviction: HashMap<String, Instant>,
    /// The pod (by UID) the eviction manager evicts as it is stepped now, under this pressure.
    evicting: Option<(String, Vec<&'static str>)>,
    pub(super) timers: Timers<Timer>,
    writes: Writes<Done>,
    pub(super) recorder: KubeletRecorder,
    /// Blocks of the fallback range for nodes without a podCIDR (`None`: off).
    pub(super) fallback: Option<fallback::Fallback>,
    pub(super) claims: UnboundedSender<fallback::Claim>,
}

/// Runs the worker until a change stream ends.
pub(super) async fn run(
    sim: PodSimulator,
    mut pods: UnboundedReceiver<Change<SlimPod>>,
    mut nodes: UnboundedReceiver<Change<Node>>,
) {
    let _ = sim.pods.wait_until_ready().await;
    let _ = sim.nodes.wait_until_ready().await;
    let recorder = KubeletRecorder::new(sim.client.clone(), "kwok-pools");
    let (done_tx, mut done_rx) = unbounded_channel();
    let writes = sim.writes.writes(Class::Other, done_tx).fenced_by(sim.shard.clone());
    let (claims_tx, mut claims_rx) = unbounded_channel();
    let mut fallback = sim.config.fallback.clone().map(|(range, after)| fallback::Fallback::new(range, after));
    if let Some(f) = fallback.as_mut() {
        // The blocks claimed before (a restart): their pods' addresses are rebuilt below.
        match f.load(&sim.client).await {
            Ok(n) => tracing::info!(range = %f.range.net, claims = n, "fallback pod ranges read"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the fallback pod range claims (Leases in kube-node-lease); nodes without a podCIDR may get a new block: check the operator's RBAC")
            }
        }
    }
    let mut l = Loop {
        sim: Arc::new(sim),
        ipam: PodIpam::default(),
        tracked: HashMap::new(),
        waiting: HashMap::new(),
        on_node: HashMap::new(),
        last_eviction: HashMap::new(),
        evicting: None,
        timers: Timers::default(),
        writes,
        recorder,
        fallback,
        claims: claims_tx,
    };
    l.rebuild();
    let mut shard = l.sim.shard.clone();
    let mut knobs = l.sim.config.lifecycles.changes();
    loop {
        tokio::select! {
            () = shard.changed() => l.on_shard_change(),
            Ok(()) = knobs.changed() => l.on_knobs_changed(),
            change = pods.recv() => match change {
                Some(Change::Applied(pod)) => l.on_pod(&pod),
                Some(Change::Deleted(pod)) => l.on_deleted(&pod),
                Some(Change::Synced) => {}
                None => return,
            },
            change = nodes.recv() => match change {
                Some(Change::Applied(node)) => l.on_node(&node),
                Some(Change::Deleted(node)) => l.on_node_deleted(&node),
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

impl Loop {
    fn now(&self) -> Now {
        self.sim.config.clock.now()
    }

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

    /// The policies changed: every pod this replica simulates is looked at again with the
    /// knobs that govern it now.
    fn on_knobs_changed(&mut self) {
        let pods: Vec<Arc<SlimPod>> = self
            .sim
            .pods
            .state()
            .into_iter()
            .filter(|p| self.tracked.contains_key(p.metadata.uid.as_deref().unwrap_or_default()))
            .collect();
        for pod in &pods {
            self.on_pod(pod);
        }
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
        let pool = self.sim.config.lifecycles.pod_knobs(pod, node);
        let lifecycles = &self.sim.config.lifecycles;
        let pools_own = lifecycles.governing(pod.owner_references(), pod.metadata.namespace.as_deref()).is_some();
        fate::pod_plan(pool.as_deref(), pod, &self.sim.config.defaults, pools_own)
    }

    /// When the node's NotReady window (of a flapping pool) ends, if it is in one.
    fn away_until(&self, node: &Node, now: &Now) -> Option<Instant> {
        let pool = self.sim.config.lifecycles.node_knobs(node);
        let until = fate::node_flap(pool.as_deref(), node)?.away_until(now.epoch())?;
        Some(now.instant_of(until))
    }

    pub(super) fn managed_node(&self, pod: &SlimPod) -> Option<Arc<Node>> {
        let name = pod.node_name.as_ref()?;
        if !self.sim.shard.owns(name) {
            return None;
        }
        let node = self.sim.nodes.get(&ObjectRef::new(name))?;
        self.sim.config.manage.manages(&node).then_some(node)
    }

    fn untrack(&mut self, pod: &SlimPod, uid: &str) {
        if let Some(t) = self.tracked.remove(uid) {
            let key = ObjectRef::from_obj(pod);
            if let Some(set) = self.on_node.get_mut(&t.node) {
                set.remove(&key);
                if set.is_empty() {
                    self.on_node.remove(&t.node);
                }
            }
            for kind in t.armed() {
                self.timers.cancel(&Timer::Pod(key.clone(), uid.to_string(), kind));
            }
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
        if !super::node_cidrs(node).is_empty() || !node_status::internal_ips(node).is_empty() {
            self.retry_waiting(&node.name_any());
        }
        self.evict_on(node);
        self.shut_down_on(node);
    }

    /// The node's shutdown manager: while its kubelet says it shuts down, every pod on it ends.
    fn shut_down_on(&mut self, node: &Node) {
        let name = node.name_any();
        if !crate::kubelet::status::cloud::shutting_down(node) || !self.sim.shard.owns(&name) {
            return;
        }
        let pods: Vec<Arc<SlimPod>> =
            self.on_node.get(&name).into_iter().flatten().filter_map(|key| self.sim.pods.get(key)).collect();
        for pod in pods.iter().filter(|p| !pod_status::is_terminal(p)) {
            self.on_pod(pod);
        }
    }

    /// The node's eviction manager: under pressure, one running BestEffort pod evicted per
    /// monitoring interval (the first by namespace and name), looking again after it.
    fn evict_on(&mut self, node: &Node) {
        let name = node.name_any();
        if !self.sim.shard.owns(&name) || !self.sim.config.manage.manages(node) {
            return;
        }
        let pressure = eviction::pressure(node);
        if pressure.is_empty() {
            self.last_eviction.remove(&name);
            return;
        }
        let now = self.now().at;
        if let Some(last) = self.last_eviction.get(&name) {
            let since = now.saturating_duration_since(*last);
            if since < eviction::MONITORING_INTERVAL {
                self.timers.set(Timer::Evict(name), eviction::MONITORING_INTERVAL - since);
                return;
            }
        }
        let mut candidates: Vec<Arc<SlimPod>> = self
            .on_node
            .get(&name)
            .into_iter()
            .flatten()
            .filter_map(|key| self.sim.pods.get(key))
            .filter(|p| eviction::evictable(p, &pressure))
            .filter(|p| self.tracked.get(p.uid()).is_some_and(|t| !t.write.in_flight))
            .collect();
        candidates.sort_by(|a, b| {
            (a.metadata.namespace.as_deref(), a.name()).cmp(&(b.metadata.namespace.as_deref(), b.name()))
        });
        let Some(victim) = candidates.first().cloned() else { return };
        self.last_eviction.insert(name.clone(), now);
        self.evicting = Some((victim.uid().to_string(), pressure));
        self.on_pod(&victim);
        self.evicting = None;
        self.timers.set(Timer::Evict(name), eviction::MONITORING_INTERVAL);
    }

    fn on_node_deleted(&mut self, node: &Node) {
        self.ipam.forget_node(&node.name_any());
        if let Some(f) = self.fallback.as_mut() {
            f.forget(node.metadata.uid.as_deref().unwrap_or_default());
        }
    }

    pub(super) fn retry_waiting(&mut self, node: &str) {
        let Some(waiting) = self.waiting.remove(node) else { return };
        for key in waiting {
            if let Some(pod) = self.sim.pods.get(&key) {
                self.on_pod(&pod);
            }
        }
    }

    fn look_again(&mut self, key: &ObjectRef<SlimPod>) {
        if let Some(pod) = self.sim.pods.get(key) {
            self.on_pod(&pod);
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

    /// The kubelet's admission of a pod it has not started: weighed against the node's pods
    /// admitted before it (in the order the worker saw them), once; `None` admits it.
    fn admission(&mut self, pod: &SlimPod, node: &Node, uid: &str) -> Option<admission::Rejection> {
        let t = self.tracked.get(uid)?;
        let undecided = !t.admitted
            && !t.started
            && pod.start_time.is_none()
            && pod.metadata.deletion_timestamp.is_none()
            && !pod_status::is_terminal(pod);
        if !undecided {
            return None;
        }
        let admitted: Vec<Arc<SlimPod>> = self
            .on_node
            .get(&t.node)
            .into_iter()
            .flatten()
            .filter_map(|key| self.sim.pods.get(key))
            .filter(|p| p.uid() != uid && !pod_status::is_terminal(p))
            .filter(|p| p.start_time.is_some() || self.tracked.get(p.uid()).is_some_and(|o| o.admitted || o.started))
            .collect();
        let verdict = admission::admit(pod, node, admitted.iter().map(|p| p.as_ref()));
        if let Some(t) = self.tracked.get_mut(uid) {
            t.admitted = verdict.is_none();
        }
        verdict
    }

    /// One pod seen (or looked at again): [`step::step`] decides, this applies.
    pub(super) fn on_pod(&mut self, pod: &Arc<SlimPod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(node) = self.managed_node(pod) else {
            self.not_ours(pod, &uid);
            return;
        };
        let now = self.now();
        let t = self.tracked.entry(uid.clone()).or_insert_with(|| Tracked::new(now.at));
        if t.node.is_empty() {
            t.node = node.name_any();
            self.on_node.entry(t.node.clone()).or_default().insert(ObjectRef::from_obj(pod.as_ref()));
            if pod.phase() == "Running" {
                self.pulled(pod, &node); // found running: its images are on the node
            }
        }
        let Some(t) = self.tracked.get(&uid) else { return };
        if t.write.in_flight {
            return;
        }
        let rejection = self.admission(pod, &node, &uid);
        let Some(t) = self.tracked.get(&uid) else { return };
        let started = t.started;
        let (plan, host_ips) = (self.plan(pod, &node), node_status::internal_ips(&node));
        let prepare = if pod.claims && !started { self.sim.devices.prepare(&node, pod) } else { Prepare::Ready };
        let mount = if pod.volumes().is_some() && !started { self.sim.volumes.mount(&node, pod) } else { Mount::Ready };
        let facts = NodeFacts { plan: &plan, away: self.away_until(&node, &now), host_ips: &host_ips };
        let pressure = self.sim.writes.pressure();
        let rejection = rejection.as_ref();
        let evicted = if crate::kubelet::status::cloud::shutting_down(&node) {
            Some(eviction::Eviction::Shutdown)
        } else {
            self.evicting
                .as_ref()
                .filter(|(victim, _)| *victim == uid)
                .map(|(_, p)| eviction::Eviction::Pressure(p.clone()))
        };
        let evict = evicted.as_ref();
        let input = Input { pod, now, node: Some(facts), pod_ips: None, prepare, mount, pressure, rejection, evict };
        let Some(t) = self.tracked.get_mut(&uid) else { return };
        let effects = step::step(&input, t);
        let needs_addresses = effects.contains(&Effect::NeedAddresses);
        self.apply(pod, &node, &uid, effects);
        if !needs_addresses {
            return;
        }
        // The sandbox needs its addresses: the allocator gives them, or the pod waits.
        let Some(ips) = self.addresses(pod, &node, &uid) else { return };
        let input = Input { pod_ips: Some(&ips), ..input };
        let Some(t) = self.tracked.get_mut(&uid) else { return };
        let effects = step::step(&input, t);
        self.apply(pod, &node, &uid, effects);
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Retry(key) => self.look_again(&key),
            Timer::NodeRange(node) => self.retry_waiting(&node),
            Timer::Evict(node) => {
                if let Some(node) = self.sim.nodes.get(&ObjectRef::new(&node)) {
                    self.evict_on(&node);
                }
            }
            Timer::Pod(key, uid, kind) => self.on_pod_timer(&key, &uid, kind),
        }
    }

    /// One of a pod's timers went off: a look again, or [`step::fire`] decides.
    fn on_pod_timer(&mut self, key: &ObjectRef<SlimPod>, uid: &str, kind: TimerKind) {
        if let Some(t) = self.tracked.get_mut(uid) {
            t.fired(kind);
        }
        if matches!(kind, TimerKind::Start | TimerKind::Probe) {
            self.look_again(key);
            return;
        }
        let Some(pod) = self.sim.pods.get(key).filter(|p| p.metadata.uid.as_deref() == Some(uid)) else { return };
        if !self.tracked.contains_key(uid) {
            return;
        }
        let now = self.now();
        let node = self.managed_node(&pod);
        let known = node.as_ref().map(|n| (self.plan(&pod, n), self.away_until(n, &now), node_status::internal_ips(n)));
        let facts = known.as_ref().map(|(plan, away, ips)| NodeFacts { plan, away: *away, host_ips: ips });
        let input = Input {
            pod: &pod,
            now,
            node: facts,
            pod_ips: None,
            prepare: Prepare::Ready,
            mount: Mount::Ready,
            pressure: self.sim.writes.pressure(),
            rejection: None,
            evict: None,
        };
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let effects = step::fire(kind, &input, t);
        match node {
            Some(node) => self.apply(&pod, &node, uid, effects),
            None => self.apply_without_node(&pod, uid, effects),
        }
    }

    /// Applies what was decided for `pod` on `node`.
    fn apply(&mut self, pod: &Arc<SlimPod>, node: &Arc<Node>, uid: &str, effects: Vec<Effect>) {
        let key = ObjectRef::from_obj(pod.as_ref());
        for effect in effects {
            match effect {
                Effect::Resize => self.spawn_resize(pod.clone(), node.clone()),
                Effect::WaitForNode => {
                    self.waiting.entry(node.name_any()).or_default().insert(key.clone());
                }
                Effect::Release => {
                    if self.ipam.release(&node.name_any(), uid) {
                        self.retry_waiting(&node.name_any());
                    }
                }
                Effect::Observe(ips) => self.observe(node, uid, &ips),
                Effect::NeedAddresses => {}
                Effect::Status { patch, transition: transition @ ("run" | "crash" | "init") } => {
                    // Its containers are created: their images were pulled onto the node.
                    self.pulled(pod, node);
                    self.apply_one(pod, &key, uid, Effect::Status { patch, transition });
                }
                other => self.apply_one(pod, &key, uid, other),
            }
        }
    }

    /// Applies what was decided for a pod whose node is not one of ours (a timer of a pod
    /// being removed): only what needs no node.
    fn apply_without_node(&mut self, pod: &Arc<SlimPod>, uid: &str, effects: Vec<Effect>) {
        let key = ObjectRef::from_obj(pod.as_ref());
        for effect in effects {
            self.apply_one(pod, &key, uid, effect);
        }
    }

    fn apply_one(&mut self, pod: &Arc<SlimPod>, key: &ObjectRef<SlimPod>, uid: &str, effect: Effect) {
        match effect {
            Effect::Status { patch, transition } => self.spawn_status(pod.clone(), patch, transition),
            Effect::Remove => self.spawn_remove(pod.clone()),
            Effect::Arm(kind, after) => self.timers.set(Timer::Pod(key.clone(), uid.to_string(), kind), after),
            Effect::Cancel(kind) => self.timers.cancel(&Timer::Pod(key.clone(), uid.to_string(), kind)),
            Effect::Warn { reason, action, note } => self.warn(pod, &reason, action, note),
            Effect::Normal { reason, action, note } => self.event(pod, EventType::Normal, reason, action, note),
            Effect::Injected(what) => self.sim.metrics.injected(what),
            Effect::Skipped(what) => {
                self.sim.metrics.pod_transitions.get_or_create(&ResultLabels { result: what.into() }).inc();
            }
            Effect::Resize | Effect::WaitForNode | Effect::Release | Effect::Observe(_) | Effect::NeedAddresses => {}
        }
    }

    /// The node holds the images of `pod`'s containers.
    fn pulled(&self, pod: &SlimPod, node: &Node) {
        if let Some(images) = &self.sim.images {
            let containers = pod.init_containers.iter().chain(&pod.containers);
            images.pulled(&node.name_any(), containers.map(|c| c.image.as_str()));
        }
    }

    /// A running pod's addresses are its own in the allocator (after a restart, or a shard's
    /// hand-over).
    fn observe(&mut self, node: &Node, uid: &str, ips: &[IpAddr]) {
        self.adopt_block(node, ips);
        let cidrs = self.cidrs(node);
        self.ipam.observe(&node.name_any(), &cidrs, uid, ips);
    }

    /// A Warning event on the pod.
    pub(super) fn warn(&self, pod: &SlimPod, reason: &str, action: &str, note: String) {
        self.event(pod, EventType::Warning, reason, action, note);
    }

    /// One of the kubelet's events on the pod (the recorder aggregates repeats into a series).
    fn event(&self, pod: &SlimPod, type_: EventType, reason: &str, action: &str, note: String) {
        let recorder = self.recorder.clone();
        let reference = pod.object_ref(&());
        let (reason, action) = (reason.to_string(), action.to_string());
        tokio::spawn(async move {
            let ev = Event { type_, reason, note: Some(note), action, secondary: None };
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "event not published");
            }
        });
    }

    fn spawn_status(&self, pod: Arc<SlimPod>, patch: serde_json::Value, transition: &'static str) {
        let sim = self.sim.clone();
        self.spawn_pod(pod, "pod_transition", move |pod| writer::status(sim, pod, patch, transition));
    }

    fn spawn_resize(&self, pod: Arc<SlimPod>, node: Arc<Node>) {
        let (sim, recorder) = (self.sim.clone(), self.recorder.clone());
        self.spawn_pod(pod, "pod_resize", move |pod| writer::resize(sim, pod, node, recorder));
    }

    fn spawn_remove(&self, pod: Arc<SlimPod>) {
        let sim = self.sim.clone();
        self.spawn_pod(pod, "pod_removal", move |pod| writer::remove(sim, pod));
    }

    /// One write of `pod` once the budget has room, in its namespace's turn, fenced by its
    /// node's shard; one span per write, made once it has room (a backlog holds none).
    fn spawn_pod<F, W>(&self, pod: Arc<SlimPod>, what: &'static str, write: F)
    where
        F: FnOnce(Arc<SlimPod>) -> W + Send + 'static,
        W: std::future::Future<Output = Done> + Send + 'static,
    {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let dropped = Done::after(&pod, false, false);
        self.writes.spawn_for(&namespace.clone(), shard_key(&pod), dropped, None, move || {
            let span = tracing::debug_span!("pod_write", what, namespace = %namespace, pod = pod.name());
            write(pod).instrument(span)
        });
    }
}

/// Whether `pod` is terminal (for the address rebuild).
pub(super) fn holds_no_address(pod: &SlimPod) -> bool {
    pod_status::is_terminal(pod) || pod_status::host_network(pod)
}
