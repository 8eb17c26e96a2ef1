//! The pod half of the simulator: every pod bound to a managed node, whoever made it, runs
//! (one status write), gets addresses from its node's podCIDR, completes when a Job owns it,
//! and is removed when deleted once its grace period (or a shorter configured delay) passes.

use super::manage::Manage;
use super::node_status;
use super::pod_ipam::{Allocation, PodIpam};
use super::pod_status;
use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::pool::FIELD_MANAGER;
use crate::telemetry::metrics::{Metrics, ResultLabels};
use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::time::{DelayQueue, delay_queue};

#[derive(Clone, Debug)]
pub struct PodSimConfig {
    pub manage: Manage,
    /// Remove deleted pods after this long instead of their whole grace period.
    pub termination_delay: Option<Duration>,
    /// How long a pod owned by a Job runs before it completes.
    pub job_run_time: Duration,
}

pub struct PodSimulator {
    pub client: Client,
    pub config: PodSimConfig,
    pub nodes: Store<Node>,
    pub pods: Store<SlimPod>,
    pub metrics: Arc<Metrics>,
    pub writes: Arc<Semaphore>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Timer {
    Complete(ObjectRef<SlimPod>, String),
    Remove(ObjectRef<SlimPod>, String),
    /// Look at the pod again after a failed write.
    Retry(ObjectRef<SlimPod>),
}

#[derive(Default)]
struct Tracked {
    node: String,
    in_flight: bool,
    /// We wrote Running; the store may not show it yet.
    started: bool,
    complete_key: Option<delay_queue::Key>,
    remove_key: Option<delay_queue::Key>,
    /// The final delete went through (the object may linger for others' finalizers).
    removed: bool,
    exhausted_reported: bool,
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

fn now_value() -> serde_json::Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or_default()
}

struct Loop {
    sim: Arc<PodSimulator>,
    ipam: PodIpam,
    tracked: HashMap<String, Tracked>,
    /// Pods waiting for their node to get a podCIDR or a free address, by node.
    waiting: HashMap<String, HashSet<ObjectRef<SlimPod>>>,
    queue: DelayQueue<Timer>,
    done: UnboundedSender<Done>,
    recorder: Recorder,
}

impl PodSimulator {
    pub async fn run(self, mut pods: UnboundedReceiver<Change<SlimPod>>, mut nodes: UnboundedReceiver<Change<Node>>) {
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let recorder = Recorder::new(self.client.clone(), Reporter { controller: "kwok-pools".into(), instance: None });
        let (done_tx, mut done_rx) = unbounded_channel();
        let mut l = Loop {
            sim: Arc::new(self),
            ipam: PodIpam::default(),
            tracked: HashMap::new(),
            waiting: HashMap::new(),
            queue: DelayQueue::new(),
            done: done_tx,
            recorder,
        };
        l.rebuild();
        loop {
            tokio::select! {
                change = pods.recv() => match change {
                    Some(Change::Applied(pod)) => l.on_pod(&pod),
                    Some(Change::Deleted(pod)) => l.on_deleted(&pod),
                    Some(Change::Synced) => {}
                    None => return,
                },
                change = nodes.recv() => match change {
                    Some(Change::Applied(node)) => l.on_node(&node),
                    Some(Change::Deleted(node)) => l.ipam.forget_node(&node.name_any()),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(expired) = l.queue.next(), if !l.queue.is_empty() => l.on_timer(expired.into_inner()),
                Some(Done::Write { uid, key, ok, removed }) = done_rx.recv() => {
                    if let Some(t) = l.tracked.get_mut(&uid) {
                        t.in_flight = false;
                        t.removed |= removed;
                        if !ok {
                            t.started = false;
                        }
                    }
                    if ok {
                        // Look again: the pod may have changed while the write was in flight.
                        if let Some(pod) = l.sim.pods.get(&key) {
                            l.on_pod(&pod);
                        }
                    } else {
                        l.queue.insert(Timer::Retry(key), Duration::from_secs(1));
                    }
                }
            }
            l.sim.metrics.managed_pods.set(l.tracked.len() as i64);
        }
    }
}

impl Loop {
    /// Addresses of live pods survive a restart: record them before anything is allocated.
    fn rebuild(&mut self) {
        let mut conflicts = 0;
        for pod in self.sim.pods.state() {
            let Some(node) = self.managed_node(&pod) else { continue };
            if matches!(pod_status::phase(&pod), "Succeeded" | "Failed") || pod_status::host_network(&pod) {
                continue;
            }
            let ips = pod_status::pod_ips(&pod);
            if ips.is_empty() {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if !self.ipam.observe(&node.name_any(), &node_cidrs(&node), &uid, &ips) {
                conflicts += 1;
                tracing::warn!(pod = %pod.name_any(), ?ips, "pod address outside its node's podCIDR or held by another pod");
            }
        }
        tracing::info!(pods = self.sim.pods.len(), conflicts, "pod addresses rebuilt from the existing pods");
    }

    fn managed_node(&self, pod: &SlimPod) -> Option<Arc<Node>> {
        let name = pod.node_name.as_ref()?;
        let node = self.sim.nodes.get(&ObjectRef::new(name))?;
        self.sim.config.manage.manages(&node).then_some(node)
    }

    fn untrack(&mut self, uid: &str) {
        if let Some(t) = self.tracked.remove(uid) {
            for k in [t.complete_key, t.remove_key].into_iter().flatten() {
                self.queue.try_remove(&k);
            }
            let _ = self.ipam.release(&t.node, uid);
        }
    }

    fn on_deleted(&mut self, pod: &SlimPod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.untrack(&uid);
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

    fn on_pod(&mut self, pod: &Arc<SlimPod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(node) = self.managed_node(pod) else {
            // Not ours (unscheduled, or a real node, or a node that is gone: PodGC's job).
            if self.tracked.contains_key(&uid) {
                self.untrack(&uid);
            }
            // Bound to a node the store does not show yet (a re-list holds new nodes back):
            // look again when that node appears.
            if let Some(node) = pod.node_name.as_ref()
                && self.sim.nodes.get(&ObjectRef::new(node)).is_none()
            {
                self.waiting.entry(node.clone()).or_default().insert(ObjectRef::from_obj(pod.as_ref()));
            }
            return;
        };
        let node_name = node.name_any();
        let key = ObjectRef::from_obj(pod.as_ref());
        let t = self.tracked.entry(uid.clone()).or_default();
        t.node = node_name.clone();
        if t.in_flight {
            return;
        }

        if let Some(deleted_at) = pod.metadata.deletion_timestamp.as_ref() {
            if t.remove_key.is_none() && !t.removed {
                let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64;
                let terminal = matches!(pod_status::phase(pod), "Succeeded" | "Failed");
                let wait = if terminal {
                    Duration::ZERO
                } else {
                    self.sim
                        .config
                        .termination_delay
                        .map_or(Duration::from_secs(grace), |d| d.min(Duration::from_secs(grace)))
                };
                // Like a kubelet, wait from now; but never past the deletion timestamp (seconds
                // resolution, hence the extra second), which matters after a restart.
                let until_deadline = (deleted_at.0 - k8s_openapi::jiff::Timestamp::now())
                    .total(k8s_openapi::jiff::Unit::Second)
                    .unwrap_or(0.0)
                    + 1.0;
                let remaining = wait.min(Duration::from_secs_f64(until_deadline.max(0.0)));
                t.remove_key = Some(self.queue.insert(Timer::Remove(key, uid.clone()), super::timer_delay(remaining)));
            }
            return;
        }

        match pod_status::phase(pod) {
            "Succeeded" | "Failed" => {
                // A finished pod is not live: its address goes back, and may fit a waiting pod.
                if self.ipam.release(&node_name, &uid) {
                    self.retry_waiting(&node_name);
                }
                return;
            }
            _ => {}
        }

        if !pod_status::is_running(pod) {
            if t.started {
                return; // our Running write is on its way through the watch
            }
            let host_ips = node_status::internal_ips(&node);
            let pod_ips = if pod_status::host_network(pod) {
                host_ips.clone()
            } else {
                match self.ipam.allocate(&node_name, &node_cidrs(&node), &uid) {
                    Allocation::Ips(ips) => ips,
                    Allocation::NoRange => {
                        self.waiting.entry(node_name).or_default().insert(key);
                        return;
                    }
                    Allocation::Exhausted(net) => {
                        self.waiting.entry(node_name.clone()).or_default().insert(key);
                        let t = self.tracked.get_mut(&uid).expect("tracked");
                        if !t.exhausted_reported {
                            t.exhausted_reported = true;
                            self.report_exhausted(pod, &node_name, net);
                        }
                        return;
                    }
                }
            };
            if host_ips.is_empty() {
                // The node has no address yet; its next update retries.
                self.waiting.entry(node_name).or_default().insert(key);
                return;
            }
            let patch = pod_status::running_patch(pod, &host_ips, &pod_ips, &now_value());
            let t = self.tracked.get_mut(&uid).expect("tracked");
            t.started = true;
            t.in_flight = true;
            self.spawn_status(pod.clone(), patch, "run");
            return;
        }

        // Running: keep the addresses known, Ready in step with readiness gates, Job pods finishing.
        t.started = true;
        let ips = pod_status::pod_ips(pod);
        if !pod_status::host_network(pod) && !ips.is_empty() {
            self.ipam.observe(&node_name, &node_cidrs(&node), &uid, &ips);
        }
        let t = self.tracked.get_mut(&uid).expect("tracked");
        if let Some(patch) = pod_status::ready_fix(pod, &now_value()) {
            t.in_flight = true;
            self.spawn_status(pod.clone(), patch, "ready");
            return;
        }
        if pod_status::owned_by_job(pod) && t.complete_key.is_none() {
            let started = pod.start_time;
            let ran = started
                .map(|s| {
                    (k8s_openapi::jiff::Timestamp::now() - s)
                        .total(k8s_openapi::jiff::Unit::Second)
                        .unwrap_or(0.0)
                        .max(0.0)
                })
                .unwrap_or(0.0);
            let remaining = self.sim.config.job_run_time.saturating_sub(Duration::from_secs_f64(ran));
            t.complete_key = Some(self.queue.insert(Timer::Complete(key, uid.clone()), super::timer_delay(remaining)));
        }
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Complete(key, uid) => {
                // The key is spent whatever happens next.
                let Some(t) = self.tracked.get_mut(&uid) else { return };
                t.complete_key = None;
                let Some(pod) = self.sim.pods.get(&key) else { return };
                if pod.metadata.deletion_timestamp.is_some() || pod_status::phase(&pod) != "Running" {
                    return;
                }
                t.in_flight = true;
                let patch = pod_status::completed_patch(&pod, &now_value());
                self.spawn_status(pod, patch, "complete");
            }
            Timer::Retry(key) => {
                if let Some(pod) = self.sim.pods.get(&key) {
                    self.on_pod(&pod);
                }
            }
            Timer::Remove(key, uid) => {
                if let Some(t) = self.tracked.get_mut(&uid) {
                    t.remove_key = None;
                }
                let Some(pod) = self.sim.pods.get(&key) else { return };
                if pod.metadata.uid.as_deref() != Some(uid.as_str()) {
                    return;
                }
                if let Some(t) = self.tracked.get_mut(&uid) {
                    t.in_flight = true;
                }
                self.spawn_remove(pod);
            }
        }
    }

    fn report_exhausted(&self, pod: &SlimPod, node: &str, net: IpNet) {
        let recorder = self.recorder.clone();
        let reference = pod.object_ref(&());
        let note = format!(
            "node {node} has no free address in its podCIDR {net}: delete pods on it, or give the node a larger range (NodePool spec.podCIDR.maskSize)"
        );
        tracing::warn!(pod = %pod.name_any(), node, %net, "pod address range exhausted");
        tokio::spawn(async move {
            let ev = Event {
                type_: EventType::Warning,
                reason: "PodCIDRExhausted".into(),
                note: Some(note),
                action: "AllocatePodIP".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::debug!(error = %e, "event not published");
            }
        });
    }

    fn spawn_status(&self, pod: Arc<SlimPod>, patch: serde_json::Value, transition: &'static str) {
        let sim = self.sim.clone();
        let done = self.done.clone();
        tokio::spawn(async move {
            let _permit = sim.writes.acquire().await.expect("write semaphore is never closed");
            let ns = pod.namespace().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
            let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            let mut patch = patch;
            // The UID makes the API server refuse the write if the pod was replaced meanwhile
            // by another of the same name (a pool reuses names).
            patch["metadata"] = serde_json::json!({ "uid": pod.uid() });
            let result = api.patch_status(&pod.name_any(), &pp, &Patch::Strategic(&patch)).await;
            let ok = result.is_ok();
            sim.metrics.write("pods", "patch-status", ok);
            sim.metrics.pod_transitions.get_or_create(&ResultLabels { result: transition.into() }).inc();
            // Gone or replaced: nothing to retry for this pod.
            let gone = matches!(&result, Err(kube::Error::Api(s)) if s.code == 404 || (s.code == 422 && s.message.contains("metadata.uid")));
            if let Err(e) = &result
                && !gone
            {
                tracing::warn!(pod = %pod.name_any(), namespace = %ns, error = %e, "pod status write failed; will retry");
            }
            let _ = done.send(Done::after(&pod, ok || gone, false));
        });
    }

    fn spawn_remove(&self, pod: Arc<SlimPod>) {
        let sim = self.sim.clone();
        let done = self.done.clone();
        tokio::spawn(async move {
            let _permit = sim.writes.acquire().await.expect("write semaphore is never closed");
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
            let _ = done.send(Done::after(&pod, ok, ok));
        });
    }
}
