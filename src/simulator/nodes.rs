//! The node half of the simulator: every managed node gets a healthy status when it lacks
//! one, a lease renewed every leaseDuration/4 (with jitter), and a periodic status heartbeat.
//! All timers live on one `DelayQueue`; writes run as bounded background tasks. A node its
//! NodePool makes flap (`spec.lifecycle.nodes`) goes quiet during its NotReady windows: no
//! lease, no status, as if its kubelet were gone.

use super::ipam::HostAllocator;
use super::leases;
use super::lifecycle::{Lifecycles, epoch_now};
use super::manage::Manage;
use super::node_status::{self, NodeDefaults};
use crate::informer::Change;
use crate::pool::FIELD_MANAGER;
use crate::telemetry::metrics::{Metrics, ResultLabels};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::time::{DelayQueue, delay_queue};

#[derive(Clone, Debug)]
pub struct NodeSimConfig {
    pub manage: Manage,
    /// Lease duration written into each lease; renewals come every quarter of it.
    pub lease_duration: Duration,
    /// How often the node conditions' heartbeat times are refreshed.
    pub status_frequency: Duration,
    pub defaults: NodeDefaults,
}

pub struct NodeSimulator {
    pub client: Client,
    pub config: NodeSimConfig,
    pub nodes: Store<Node>,
    pub leases: Store<Lease>,
    pub addresses: Arc<Mutex<HostAllocator>>,
    pub metrics: Arc<Metrics>,
    pub writes: Arc<Semaphore>,
    /// The pools' lifecycle knobs (flapping nodes).
    pub lifecycles: Lifecycles,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Timer {
    Lease(String),
    Status(String),
}

struct Tracked {
    uid: String,
    lease_key: delay_queue::Key,
    status_key: delay_queue::Key,
    lease_due: Instant,
    status_in_flight: bool,
    /// In a NotReady window of its flapping schedule (lease and status stop).
    away: bool,
    /// A renewal is on its way: never two at once for one node.
    lease_in_flight: bool,
    /// Renewals that failed in a row (for the back-off).
    lease_failures: u32,
}

enum Done {
    Status { name: String },
    Lease { name: String, ok: bool },
}

fn jittered(base: Duration, low: f64, high: f64) -> Duration {
    super::timer_delay(base).mul_f64(rand::rng().random_range(low..high))
}

impl NodeSimulator {
    fn renew_interval(&self) -> Duration {
        self.config.lease_duration / 4
    }

    /// Runs until the change stream ends.
    pub async fn run(self, mut changes: UnboundedReceiver<Change<Node>>) {
        let this = Arc::new(self);
        let mut queue: DelayQueue<Timer> = DelayQueue::new();
        let mut tracked: HashMap<String, Tracked> = HashMap::new();
        let (done_tx, mut done_rx) = unbounded_channel::<Done>();
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Some(Change::Applied(node)) => this.on_node(&node, &mut tracked, &mut queue, &done_tx),
                    Some(Change::Deleted(node)) => this.on_deleted(&node, &mut tracked, &mut queue),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(expired) = queue.next(), if !queue.is_empty() => {
                    let timer = expired.into_inner();
                    this.on_timer(timer, &mut tracked, &mut queue, &done_tx);
                }
                Some(done) = done_rx.recv() => match done {
                    Done::Status { name } => {
                        if let Some(t) = tracked.get_mut(&name) {
                            t.status_in_flight = false;
                        }
                    }
                    Done::Lease { name, ok } => {
                        if let Some(t) = tracked.get_mut(&name) {
                            t.lease_in_flight = false;
                            if ok {
                                t.lease_failures = 0;
                            } else {
                                // Retry sooner than a whole interval, backing off while the
                                // API server keeps failing.
                                t.lease_failures += 1;
                                let retry = super::retry_after(t.lease_failures, this.renew_interval());
                                queue.reset(&t.lease_key, retry);
                                t.lease_due = Instant::now() + retry;
                            }
                        }
                    }
                }
            }
            this.metrics.managed_nodes.set(tracked.len() as i64);
        }
    }

    fn on_node(
        self: &Arc<Self>,
        node: &Arc<Node>,
        tracked: &mut HashMap<String, Tracked>,
        queue: &mut DelayQueue<Timer>,
        done: &UnboundedSender<Done>,
    ) {
        let name = node.name_any();
        // Every node's addresses count, managed or not, so defaults never collide. An address
        // another node already holds (two operator instances picked it at once) is a clash.
        let (clash, range_full) = {
            let mut addresses = self.addresses.lock().expect("address allocator lock");
            let mut clash = false;
            for ip in node_status::internal_ips(node) {
                if !addresses.observe(&name, ip) && addresses.is_used(ip) && addresses.get(&name) != Some(ip) {
                    clash = true;
                }
            }
            (clash, addresses.is_full())
        };
        if !self.config.manage.manages(node) || node.metadata.deletion_timestamp.is_some() {
            if let Some(t) = tracked.remove(&name) {
                queue.try_remove(&t.lease_key);
                queue.try_remove(&t.status_key);
            }
            return;
        }
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let renewed_for_other_uid = tracked.get(&name).is_some_and(|t| t.uid != uid);
        if renewed_for_other_uid && let Some(t) = tracked.remove(&name) {
            queue.try_remove(&t.lease_key);
            queue.try_remove(&t.status_key);
        }
        if !tracked.contains_key(&name) {
            // First sight: lease right away, status heartbeat somewhere in the next period.
            let lease_key = queue.insert(Timer::Lease(name.clone()), Duration::ZERO);
            let status_key =
                queue.insert(Timer::Status(name.clone()), jittered(self.config.status_frequency, 0.5, 1.0));
            tracked.insert(
                name.clone(),
                Tracked {
                    uid,
                    lease_key,
                    status_key,
                    lease_due: Instant::now(),
                    status_in_flight: false,
                    away: false,
                    lease_in_flight: false,
                    lease_failures: 0,
                },
            );
        }
        let Some(t) = tracked.get_mut(&name) else { return };
        if t.away {
            return; // its kubelet is "gone": nothing is written until the window ends
        }
        // A missing address is only worth a write while the range has room (else every write
        // would trigger the next).
        let wants_ip = node_status::internal_ips(node).is_empty() && !range_full;
        if (node_status::needs_write(node) || wants_ip || clash) && !t.status_in_flight {
            if clash {
                tracing::warn!(node = %name, "InternalIP already held by another node; giving this one a new address");
            }
            t.status_in_flight = true;
            self.spawn_status(node.clone(), true, done.clone());
        }
    }

    fn on_deleted(&self, node: &Arc<Node>, tracked: &mut HashMap<String, Tracked>, queue: &mut DelayQueue<Timer>) {
        let name = node.name_any();
        if let Some(t) = tracked.remove(&name) {
            queue.try_remove(&t.lease_key);
            queue.try_remove(&t.status_key);
        }
        self.addresses.lock().expect("address allocator lock").release(&name);
    }

    fn on_timer(
        self: &Arc<Self>,
        timer: Timer,
        tracked: &mut HashMap<String, Tracked>,
        queue: &mut DelayQueue<Timer>,
        done: &UnboundedSender<Done>,
    ) {
        match timer {
            Timer::Lease(name) => {
                let Some(t) = tracked.get_mut(&name) else { return };
                let due = t.lease_due;
                // The next timer goes in first, whatever happens: the key must never point at
                // a spent timer (its slot is handed to the next insert, another node's timer).
                let next = jittered(self.renew_interval(), 0.85, 1.0);
                t.lease_key = queue.insert(Timer::Lease(name.clone()), next);
                t.lease_due = Instant::now() + next;
                let Some(node) = self.nodes.get(&ObjectRef::new(&name)) else { return };
                let now = epoch_now();
                if let Some(until) = self.lifecycles.node(&node).and_then(|f| f.away_until(now)) {
                    // A NotReady window: no renewal until it ends.
                    let wait = super::timer_delay(until.saturating_sub(now));
                    if !t.away {
                        tracing::info!(node = %name, back_in = ?wait, "flapping node goes NotReady");
                        self.metrics.injected("node_not_ready");
                    }
                    t.away = true;
                    queue.reset(&t.lease_key, wait);
                    t.lease_due = Instant::now() + wait;
                    return;
                }
                let back = std::mem::take(&mut t.away);
                if back {
                    tracing::info!(node = %name, "flapping node comes back");
                    if node_status::needs_write(&node) && !t.status_in_flight {
                        t.status_in_flight = true;
                        self.spawn_status(node.clone(), true, done.clone());
                    }
                }
                if t.lease_in_flight {
                    // The last renewal has not come back: not a second one beside it.
                    return;
                }
                t.lease_in_flight = true;
                self.spawn_lease(node, due, done.clone());
            }
            Timer::Status(name) => {
                let Some(t) = tracked.get_mut(&name) else { return };
                t.status_key =
                    queue.insert(Timer::Status(name.clone()), jittered(self.config.status_frequency, 0.9, 1.1));
                if t.status_in_flight || t.away {
                    return;
                }
                let Some(node) = self.nodes.get(&ObjectRef::new(&name)) else { return };
                t.status_in_flight = true;
                self.spawn_status(node, false, done.clone());
            }
        }
    }

    fn spawn_lease(self: &Arc<Self>, node: Arc<Node>, due: Instant, done: UnboundedSender<Done>) {
        let this = self.clone();
        tokio::spawn(async move {
            let _permit = this.writes.acquire().await.expect("write semaphore is never closed");
            let api: Api<Lease> = Api::namespaced(this.client.clone(), leases::LEASE_NAMESPACE);
            let secs = this.config.lease_duration.as_secs().max(1) as i32;
            let result = leases::renew(&api, &this.leases, &node, secs).await;
            let ok = result.is_ok();
            let verb = match &result {
                Ok(v) => *v,
                Err(e) => {
                    tracing::warn!(node = %node.name_any(), error = %e, "lease renewal failed; retrying in 1s");
                    "renew"
                }
            };
            this.metrics.write("leases", verb, ok);
            this.metrics
                .lease_renewals
                .get_or_create(&ResultLabels { result: if ok { "ok" } else { "error" }.into() })
                .inc();
            // Late: written more than a whole renewal interval after it was due, i.e. the lease
            // was older than half its duration (still valid, but the margin is being eaten).
            if ok && due.elapsed() > this.renew_interval() {
                this.metrics.late_lease_renewals.inc();
            }
            let _ = done.send(Done::Lease { name: node.name_any(), ok });
        });
    }

    /// Writes the node status: the full healthy status when `full`, else only the
    /// conditions' heartbeat.
    fn spawn_status(self: &Arc<Self>, node: Arc<Node>, full: bool, done: UnboundedSender<Done>) {
        let this = self.clone();
        tokio::spawn(async move {
            let _permit = this.writes.acquire().await.expect("write semaphore is never closed");
            let name = node.name_any();
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let patch = if full {
                let mut base = node.status.clone().unwrap_or_default();
                let mut ips = Vec::new();
                {
                    let mut addresses = this.addresses.lock().expect("address allocator lock");
                    // Keep the addresses that are this node's (or outside the default range);
                    // drop one that another node holds.
                    let theirs = |ip: &std::net::IpAddr| addresses.is_used(*ip) && addresses.get(&name) != Some(*ip);
                    ips.extend(node_status::internal_ips(&node).into_iter().filter(|ip| !theirs(ip)));
                    if let Some(list) = base.addresses.as_mut() {
                        list.retain(|a| a.type_ != "InternalIP" || a.address.parse().is_ok_and(|ip| !theirs(&ip)));
                    }
                    if ips.is_empty() {
                        match addresses.allocate(&name) {
                            Some(ip) => ips.push(ip),
                            None => {
                                tracing::warn!(node = %name, range = %addresses.net(), "default node address range is full: raise --node-ip-range")
                            }
                        }
                    }
                }
                let status = node_status::simulated(&name, Some(&base), &ips, &now, &this.config.defaults);
                serde_json::json!({ "status": status })
            } else {
                let conditions =
                    node_status::healthy_conditions(node.status.as_ref().and_then(|s| s.conditions.as_deref()), &now);
                serde_json::json!({ "status": { "conditions": conditions } })
            };
            let api: Api<Node> = Api::all(this.client.clone());
            let pp = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            let mut patch = patch;
            // Refused if the node was replaced by another of the same name meanwhile.
            patch["metadata"] = serde_json::json!({ "uid": node.metadata.uid });
            let result = api.patch_status(&name, &pp, &Patch::Merge(&patch)).await;
            this.metrics.write("nodes", "patch-status", result.is_ok());
            if let Err(e) = result
                && !matches!(&e, kube::Error::Api(s) if s.code == 404 || (s.code == 422 && s.message.contains("metadata.uid")))
            {
                tracing::warn!(node = %name, error = %e, "node status write failed");
            }
            let _ = done.send(Done::Status { name });
        });
    }
}
