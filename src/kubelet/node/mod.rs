//! The node half of the simulator: every managed node gets a healthy status when it lacks
//! one, a lease renewed every leaseDuration/4 (with jitter), and a periodic status heartbeat.
//! Timers, write attempts and background writes are the simulator's shared machinery. A node its
//! NodePool makes flap (`spec.lifecycle.nodes`) goes quiet during its NotReady windows: no
//! lease, no status, as if its kubelet were gone.

mod cloud;
pub mod lease;
pub mod renewal;

use crate::kubelet::images::NodeImages;
use crate::kubelet::status::fate;
use k8s_openapi::api::core::v1::ContainerImage;

use crate::api::lifecycle::BadCondition;
use crate::informer::Change;
use crate::ipam::HostAllocator;
use crate::kubelet::status::endpoint::{Endpoint, Endpoints, hostname_address};
use crate::kubelet::status::node::{self as node_status, NodeDefaults, Report};
use crate::shard::Shard;
use crate::simulator::clock::Clock;
use crate::simulator::lifecycle::{Knobs, Lifecycles};
use crate::simulator::machinery::{Attempts, Class, Timers, WriteBudget, Writes};
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::{Metrics, ResultLabels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Patch;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use renewal::{Latency, Stretch};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::time::Instant;
use tracing::Instrument;

#[derive(Clone, Debug)]
pub struct NodeSimConfig {
    pub manage: Manage,
    /// Lease duration written into each lease; renewals come every quarter of it.
    pub lease_duration: Duration,
    /// How often the node conditions' heartbeat times are refreshed.
    pub status_frequency: Duration,
    pub defaults: NodeDefaults,
    /// Where the worker reads the time.
    pub clock: Clock,
}

pub struct NodeSimulator {
    pub client: Client,
    pub config: NodeSimConfig,
    pub nodes: Store<Node>,
    pub addresses: Arc<Mutex<HostAllocator>>,
    pub metrics: Arc<Metrics>,
    /// The write budget shared with the pod and VMI simulators (lease renewals have room
    /// reserved in it).
    pub writes: WriteBudget,
    /// The pools' lifecycle knobs (flapping nodes).
    pub lifecycles: Lifecycles,
    /// Which nodes are this replica's (all, unless the simulator is sharded).
    pub shard: Shard,
    /// Written on each node Lease this replica renews (`kwok-pools.x-k8s.io/simulator`).
    pub identity: Option<String>,
    /// Where each node's kubelet API answers, when this replica serves it.
    pub kubelet: Option<Arc<Mutex<Endpoints>>>,
    /// How far lease renewals stretch while the write budget has a backlog.
    pub stretch: Stretch,
    /// The images each node's pods pulled (`None`: `status.images` is not reported), and the
    /// nodes that pulled one they lacked.
    pub images: Option<Arc<NodeImages>>,
    pub image_news: Option<UnboundedReceiver<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Timer {
    Lease(String),
    Status(String),
    /// A bad condition of its knobs starts or ends.
    Conditions(String),
    /// Its pods pulled an image it did not list: the status lists it at the next update.
    Images(String),
    /// Its cloud lifecycle (boot, launch failure, interruption) moves to its next phase.
    Cloud(String),
}

struct Tracked {
    uid: String,
    lease_due: Instant,
    /// In a NotReady window of its flapping schedule (lease and status stop).
    away: bool,
    status: Attempts,
    /// Never two renewals at once for one node; failures in a row for the back-off.
    lease: Attempts,
    /// A renewal by this replica went through (later ones send only the renew time).
    lease_written: bool,
    /// The Lease's resourceVersion after this replica's last renewal (the next one expects it).
    lease_version: Option<String>,
    /// When another writer was last seen renewing the Lease (the node is marked meanwhile).
    conflict: Option<Instant>,
    /// The status report interval its status timer runs on (its pool's heartbeat may change it).
    status_every: Duration,
    /// When this replica's last renewal that went through was sent.
    renewed_at: Option<Instant>,
    /// Since when (seconds since the epoch) its knobs have had an outage: the outage counts
    /// from there.
    outage_since: Option<Duration>,
    /// Since when it has carried kwok's node chaos label: the chaos's delay counts from there.
    chaos_since: Option<Duration>,
    /// The image list this replica last sent for it ([`crate::kubelet::status::images::fingerprint`]).
    images_sent: u64,
    /// What this replica wrote of its cloud lifecycle.
    cloud: cloud::CloudSent,
}

enum Done {
    Status {
        name: String,
        /// The image list the write carried, when it went through: the node shows it now (a
        /// failed write leaves it to be sent again).
        images: Option<u64>,
    },
    /// `ours`: the lease names this replica (else the next renewal writes it whole).
    Lease {
        name: String,
        ok: bool,
        ours: bool,
        version: Option<String>,
        /// Another writer renewed the Lease since the last renewal (its field manager).
        foreign: Option<String>,
        /// When the write was sent, and how long it took from due to done.
        sent: Instant,
        took: Duration,
    },
    /// The node's conflict annotation was written.
    Noted,
    /// A renewal not sent: the shard handed the node to another replica while it waited.
    LeaseDropped { name: String },
}

fn jittered(base: Duration, low: f64, high: f64) -> Duration {
    crate::simulator::timer_delay(base).mul_f64(rand::rng().random_range(low..high))
}

/// The simulator's loop state: what it tracks, its timers and its writes.
struct NodeLoop {
    sim: Arc<NodeSimulator>,
    tracked: HashMap<String, Tracked>,
    timers: Timers<Timer>,
    writes: Writes<Done>,
    lease_writes: Writes<Done>,
    /// How long renewals take from due to done, smoothed (the margin stretched renewals keep).
    latency: Latency,
    /// The kubelet's events about nodes (launch failures, interruptions, shutdowns).
    recorder: crate::kubelet::recorder::KubeletRecorder,
    /// Since when (seconds since the epoch) each group of a correlated outage has been seen
    /// under its knobs: its nodes share one window counted from there.
    outage_groups: HashMap<String, Duration>,
}

impl NodeSimulator {
    fn renew_interval(&self) -> Duration {
        self.config.lease_duration / 4
    }

    /// The lease duration and status interval the node's pool sets for its heartbeat.
    fn heartbeat(&self, node: &Node) -> (Option<Duration>, Option<Duration>) {
        fate::heartbeat(self.lifecycles.node_knobs(node).as_deref())
    }

    /// The node's lease duration: its pool's heartbeat, else the operator's.
    fn lease_duration_of(&self, node: &Node) -> Duration {
        self.heartbeat(node).0.unwrap_or(self.config.lease_duration)
    }

    /// How often the node's lease is renewed: a quarter of its duration, as the kubelet does.
    fn renew_interval_of(&self, node: &Node) -> Duration {
        self.lease_duration_of(node) / 4
    }

    /// How often the node's status is reported although nothing changed.
    fn status_frequency_of(&self, node: &Node) -> Duration {
        self.heartbeat(node).1.unwrap_or(self.config.status_frequency)
    }

    /// Runs until the change stream ends.
    pub async fn run(mut self, mut changes: UnboundedReceiver<Change<Node>>) {
        let mut image_news = self.image_news.take();
        let (done_tx, mut done_rx) = unbounded_channel::<Done>();
        let writes = self.writes.writes(Class::Other, done_tx.clone()).fenced_by(self.shard.clone());
        let lease_writes = self.writes.writes(Class::Heartbeat, done_tx).fenced_by(self.shard.clone());
        let mut shard = self.shard.clone();
        let mut knobs = self.lifecycles.changes();
        let recorder = crate::kubelet::recorder::KubeletRecorder::new(self.client.clone(), "kubelet");
        let mut l = NodeLoop {
            recorder,
            outage_groups: HashMap::new(),
            sim: Arc::new(self),
            tracked: HashMap::new(),
            timers: Timers::default(),
            writes,
            lease_writes,
            latency: Latency::default(),
        };
        loop {
            tokio::select! {
                () = shard.changed() => l.on_shard_change(),
                Ok(()) = knobs.changed() => l.on_knobs_changed(),
                change = changes.recv() => match change {
                    Some(Change::Applied(node)) => l.on_node(&node),
                    Some(Change::Deleted(node)) => l.on_deleted(&node),
                    Some(Change::Synced) => {}
                    None => return,
                },
                Some(timer) = l.timers.next(), if !l.timers.is_empty() => l.on_timer(timer),
                Some(name) = next_news(&mut image_news) => l.on_new_images(name),
                Some(done) = done_rx.recv() => l.on_done(done),
            }
            l.sim.metrics.managed_nodes.set(l.tracked.len() as i64);
        }
    }
}

/// The next node with images it did not list (never, without a registry).
async fn next_news(news: &mut Option<UnboundedReceiver<String>>) -> Option<String> {
    match news.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// How long after a new image the node lists it: the kubelet's status update period.
const IMAGES_AFTER: Duration = Duration::from_secs(10);

impl NodeLoop {
    /// A node's pods pulled an image it does not list: its status says so within the
    /// kubelet's status update period (one write for all the images pulled meanwhile).
    fn on_new_images(&mut self, name: String) {
        if self.tracked.contains_key(&name) {
            self.timers.set_once(Timer::Images(name), jittered(IMAGES_AFTER, 0.5, 1.0));
        }
    }

    /// What the node's `status.images` should become, when it differs from what this replica
    /// last sent (the store keeps no image list: nodes' lists are trimmed from it).
    fn images_update(&self, name: &str) -> Option<Vec<ContainerImage>> {
        let wanted = self.sim.images.as_ref()?.report(name)?;
        let sent = crate::kubelet::status::images::fingerprint(&wanted);
        (self.tracked.get(name)?.images_sent != sent).then_some(wanted)
    }

    /// The policies changed: every node this replica simulates is looked at again (its
    /// conditions, its heartbeat).
    fn on_knobs_changed(&mut self) {
        let nodes: Vec<Arc<Node>> =
            self.sim.nodes.state().into_iter().filter(|n| self.tracked.contains_key(&n.name_any())).collect();
        for node in &nodes {
            self.on_node(node);
        }
    }

    /// The shard's view changed: every node is looked at again (nodes that left are dropped
    /// at once; nodes that came get a lease renewal right away).
    fn on_shard_change(&mut self) {
        let nodes = self.sim.nodes.state();
        let before = self.tracked.len();
        for node in &nodes {
            self.on_node(node);
        }
        tracing::info!(before, now = self.tracked.len(), "simulator shard changed: nodes of this replica");
    }

    fn on_done(&mut self, done: Done) {
        match done {
            Done::Status { name, images } => {
                if let Some(t) = self.tracked.get_mut(&name) {
                    t.status.finish(true);
                    if let Some(sent) = images {
                        t.images_sent = sent;
                    }
                }
            }
            Done::Noted => {}
            Done::LeaseDropped { name } => {
                if let Some(t) = self.tracked.get_mut(&name) {
                    t.lease.finish(true);
                }
            }
            Done::Lease { name, ok, ours, version, foreign, sent, took } => {
                self.latency.observe(took);
                let Some(t) = self.tracked.get_mut(&name) else { return };
                if ok {
                    t.lease_written = ours;
                    t.lease_version = version;
                    t.renewed_at = Some(sent);
                }
                let quiet_for = self.sim.config.lease_duration * 3;
                match (foreign, t.conflict) {
                    (Some(who), seen) => {
                        if seen.is_none() {
                            tracing::warn!(node = %name, other = %who, "another simulator renews this node's lease too: run one of them with --no-simulator, or give each its own nodes with --manage-nodes-with-label-selector");
                            self.sim.metrics.foreign_lease_holders.inc();
                            note_conflict(&self.writes, &self.sim, &name, Some(who));
                        }
                        t.conflict = Some(Instant::now());
                    }
                    // Quiet for three lease durations: the other writer is gone.
                    (None, Some(at)) if ok && at.elapsed() > quiet_for => {
                        t.conflict = None;
                        self.sim.metrics.foreign_lease_holders.dec();
                        note_conflict(&self.writes, &self.sim, &name, None);
                    }
                    _ => {}
                }
                if let Some(failures) = t.lease.finish(ok) {
                    // Retry sooner than a whole interval, backing off while the API server
                    // keeps failing.
                    let retry = crate::simulator::retry_after(failures, self.sim.renew_interval());
                    self.timers.set(Timer::Lease(name), retry);
                    t.lease_due = Instant::now() + retry;
                }
            }
        }
    }

    /// Notes the node's InternalIPs with the allocator: (an address clashes with another
    /// node's, the default range is full).
    fn observe_addresses(&self, node: &Node, name: &str) -> (bool, bool, Option<String>) {
        // Every node's addresses count, managed or not, so defaults never collide. Two nodes
        // with one address (two replicas or instances picked it at once): the node with the
        // greater name moves, a rule every replica applies alike.
        let mut addresses = crate::sync::lock(&self.sim.addresses);
        let mut clash = false;
        let mut loser = None;
        for ip in node_status::internal_ips(node) {
            if addresses.observe(name, ip) || !addresses.is_used(ip) || addresses.get(name) == Some(ip) {
                continue;
            }
            match addresses.holder(ip).map(str::to_string) {
                Some(holder) if holder.as_str() > name => {
                    addresses.hand_to(ip, name);
                    loser = Some(holder);
                }
                _ => clash = true,
            }
        }
        (clash, addresses.is_full(), loser)
    }

    fn untrack(&mut self, name: &str) {
        if let Some(t) = self.tracked.remove(name) {
            if t.conflict.is_some() {
                self.sim.metrics.foreign_lease_holders.dec();
            }
            self.timers.cancel(&Timer::Lease(name.to_string()));
            self.timers.cancel(&Timer::Status(name.to_string()));
            self.timers.cancel(&Timer::Cloud(name.to_string()));
            if let Some(k) = &self.sim.kubelet {
                crate::sync::lock(k).release(name);
            }
        }
    }

    /// Where the node's kubelet API answers (assigned on first sight, keeping the address the
    /// node reports where it can).
    fn endpoint(&self, node: &Node, name: &str) -> Option<Endpoint> {
        let k = self.sim.kubelet.as_ref()?;
        crate::sync::lock(k).assign(name, hostname_address(node))
    }

    fn on_node(&mut self, node: &Arc<Node>) {
        let name = node.name_any();
        let (clash, range_full, loser) = self.observe_addresses(node, &name);
        if let Some(loser) = loser
            && let Some(other) = self.sim.nodes.get(&ObjectRef::new(&loser))
        {
            // The other node lost its address to this one: look at it again (it moves, if ours).
            self.on_node(&other);
        }
        if !self.sim.config.manage.manages(node)
            || node.metadata.deletion_timestamp.is_some()
            || !self.sim.shard.owns(&name)
        {
            self.untrack(&name);
            return;
        }
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if self.tracked.get(&name).is_some_and(|t| t.uid != uid) {
            // Replaced under the same name: a new node.
            self.untrack(&name);
        }
        if !self.tracked.contains_key(&name) {
            // First sight: lease right away, status heartbeat somewhere in the next period.
            self.timers.set(Timer::Lease(name.clone()), Duration::ZERO);
            let status_every = self.sim.status_frequency_of(node);
            self.timers.set(Timer::Status(name.clone()), jittered(status_every, 0.5, 1.0));
            let t = Tracked {
                status_every,
                uid,
                lease_due: Instant::now(),
                away: false,
                status: Attempts::default(),
                lease: Attempts::default(),
                lease_written: false,
                lease_version: None,
                conflict: None,
                renewed_at: None,
                outage_since: None,
                chaos_since: None,
                images_sent: 0,
                cloud: cloud::CloudSent::default(),
            };
            self.tracked.insert(name.clone(), t);
        }
        let Some(t) = self.tracked.get_mut(&name) else { return };
        if t.away {
            return; // its kubelet is "gone": nothing is written until the window ends
        }
        // A missing address is only worth a write while the range has room (else every write
        // would trigger the next).
        let wants_ip = node_status::internal_ips(node).is_empty() && !range_full;
        let endpoint = self.endpoint(node, &name);
        let bad = self.bad_now(node, &name);
        let images = self.images_update(&name);
        let Some(t) = self.tracked.get_mut(&name) else { return };
        if (node_status::needs_write(node, endpoint.as_ref(), &bad) || wants_ip || clash) && t.status.begin() {
            if clash {
                tracing::warn!(node = %name, "InternalIP already held by another node; giving this one a new address");
            }
            spawn_status(&self.writes, &self.sim, node.clone(), true, bad, images);
        }
    }

    fn on_deleted(&mut self, node: &Arc<Node>) {
        let name = node.name_any();
        self.untrack(&name);
        if let Some(images) = &self.sim.images {
            images.forget(&name);
        }
        if let Some(k) = &self.sim.kubelet {
            crate::sync::lock(k).release(&name);
        }
        crate::sync::lock(&self.sim.addresses).release(&name);
    }

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Lease(name) => self.on_lease_timer(name),
            Timer::Status(name) => {
                let Some(t) = self.tracked.get_mut(&name) else { return };
                let node = self.sim.nodes.get(&ObjectRef::new(&name));
                let every =
                    node.as_deref().map_or(self.sim.config.status_frequency, |n| self.sim.status_frequency_of(n));
                t.status_every = every;
                self.timers.set(Timer::Status(name.clone()), jittered(every, 0.9, 1.1));
                if t.away {
                    return;
                }
                let Some(node) = node else { return };
                let bad = self.bad_now(&node, &name);
                if self.defer_report(&node, &name, &bad, every) {
                    return;
                }
                let images = self.images_update(&name);
                let Some(t) = self.tracked.get_mut(&name) else { return };
                if t.status.begin() {
                    spawn_status(&self.writes, &self.sim, node, false, bad, images);
                }
            }
            Timer::Conditions(name) | Timer::Cloud(name) => {
                if let Some(node) = self.sim.nodes.get(&ObjectRef::new(&name)) {
                    self.on_node(&node);
                }
            }
            Timer::Images(name) => self.on_images_timer(name),
        }
    }

    /// The node lists the images its pods pulled (when a write of its status is in flight,
    /// a moment later).
    fn on_images_timer(&mut self, name: String) {
        let Some(node) = self.sim.nodes.get(&ObjectRef::new(&name)) else { return };
        let Some(images) = self.images_update(&name) else { return };
        let bad = self.bad_now(&node, &name);
        let Some(t) = self.tracked.get_mut(&name) else { return };
        if t.away {
            return; // its status after the window lists them
        }
        if t.status.begin() {
            spawn_status(&self.writes, &self.sim, node, false, bad, Some(images));
        } else {
            self.timers.set(Timer::Images(name), Duration::from_secs(1));
        }
    }

    /// What `node` reports now: the bad conditions of its knobs (with a timer for when that
    /// changes next) and kwok's node chaos once its delay is over.
    fn bad_now(&mut self, node: &Node, name: &str) -> Report {
        // The knobs once for both: the lookup runs on every heartbeat.
        let knobs = self.sim.lifecycles.node_knobs(node);
        let chaos = self.chaos_now(node, name);
        let cloud = self.cloud_now(node, name, knobs.as_deref());
        Report { bad: self.bad_conditions(node, name, knobs.as_deref()), chaos, cloud }
    }

    /// kwok's node chaos, once its delay has passed since the simulator first saw the label
    /// (a timer looks again then).
    fn chaos_now(&mut self, node: &Node, name: &str) -> Option<node_status::NodeChaos> {
        let now = self.sim.config.clock.now().epoch();
        let found = node_status::node_chaos(node);
        let t = self.tracked.get_mut(name)?;
        let Some((chaos, after)) = found else {
            t.chaos_since = None;
            return None;
        };
        let since = *t.chaos_since.get_or_insert(now);
        let due = since + after.sample(crate::api::duration::unit(0, &[name, "chaos"]));
        if now >= due {
            return Some(chaos);
        }
        let wait = crate::simulator::timer_delay(due.saturating_sub(now)) + Duration::from_millis(100);
        self.timers.set(Timer::Conditions(name.to_string()), wait);
        None
    }

    /// The bad conditions of `node`'s knobs now.
    fn bad_conditions(&mut self, node: &Node, name: &str, knobs: Option<&dyn Knobs>) -> Vec<BadCondition> {
        let mut plans = fate::node_conditions(knobs, node);
        if let Some((window, true)) = self.outage(node, name, knobs) {
            plans.push(fate::ConditionPlan { condition: BadCondition::NotReady, windows: Some(window) });
        }
        if plans.is_empty() {
            return Vec::new();
        }
        let now = self.sim.config.clock.now().epoch();
        let (bad, next) = fate::bad_at(&plans, now);
        if let Some(next) = next {
            // A moment past the change, so the window has surely turned when it is looked at.
            let wait = crate::simulator::timer_delay(next.saturating_sub(now)) + Duration::from_millis(100);
            self.timers.set(Timer::Conditions(name.to_string()), wait);
        }
        bad
    }

    /// The outage `node`'s knobs give it, counted from when they first had one here (see
    /// [`fate::node_outage`]).
    fn outage(
        &mut self,
        node: &Node,
        name: &str,
        knobs: Option<&dyn Knobs>,
    ) -> Option<(crate::simulator::lifecycle::Flap, bool)> {
        let outage = knobs.and_then(Knobs::nodes).and_then(|n| n.outage.as_ref());
        let now = self.sim.config.clock.now().epoch();
        let t = self.tracked.get_mut(name)?;
        let Some(outage) = outage else {
            t.outage_since = None;
            return None;
        };
        // A correlated outage: one window for its whole group, from when the group was first
        // seen under this outage (a changed outage is a new one).
        let group = match &outage.scope {
            Some(scope) => Some(scope.group_of(node.metadata.labels.as_ref())?),
            None => None,
        };
        let since = match &group {
            Some(g) => {
                let key = format!("{g}/{}", serde_json::to_string(outage).unwrap_or_default());
                *self.outage_groups.entry(key).or_insert(now)
            }
            None => *t.outage_since.get_or_insert(now),
        };
        fate::node_outage(knobs, node, since, group.as_deref())
    }

    fn on_lease_timer(&mut self, name: String) {
        let node = self.sim.nodes.get(&ObjectRef::new(&name));
        let Some(t) = self.tracked.get_mut(&name) else { return };
        let due = t.lease_due;
        let every = node.as_deref().map_or(self.sim.renew_interval(), |n| self.sim.renew_interval_of(n));
        let next = jittered(every, 0.85, 1.0);
        self.timers.set(Timer::Lease(name.clone()), next);
        t.lease_due = Instant::now() + next;
        let Some(node) = node else { return };
        // Its pool's heartbeat changed the status interval (or was not known at first sight):
        // the status timer follows now rather than at its old due time.
        let status_every = self.sim.status_frequency_of(&node);
        let Some(t) = self.tracked.get_mut(&name) else { return };
        if t.status_every != status_every {
            t.status_every = status_every;
            self.timers.set(Timer::Status(name.clone()), jittered(status_every, 0.1, 1.0));
        }
        let now = self.sim.config.clock.now().epoch();
        let knobs = self.sim.lifecycles.node_knobs(&node);
        let silent = self.outage(&node, &name, knobs.as_deref()).filter(|(_, reports_false)| !reports_false);
        let flap = fate::node_flap(knobs.as_deref(), &node).and_then(|f| f.away_until(now));
        let Some(t) = self.tracked.get_mut(&name) else { return };
        if let Some(until) = flap.or_else(|| silent.and_then(|(w, _)| w.away_until(now))) {
            // A NotReady window (its flapping, or its outage): no renewal until it ends.
            let wait = crate::simulator::timer_delay(until.saturating_sub(now));
            if !t.away {
                tracing::info!(node = %name, back_in = ?wait, "flapping node goes NotReady");
                self.sim.metrics.injected("node_not_ready");
            }
            t.away = true;
            self.timers.set(Timer::Lease(name), wait);
            t.lease_due = Instant::now() + wait;
            return;
        }
        if std::mem::take(&mut t.away) {
            tracing::info!(node = %name, "flapping node comes back");
            let endpoint = self.sim.kubelet.as_ref().and_then(|k| crate::sync::lock(k).get(&name));
            let bad = self.bad_now(&node, &name);
            let images = self.images_update(&name);
            let Some(t) = self.tracked.get_mut(&name) else { return };
            if (node_status::needs_write(&node, endpoint.as_ref(), &bad) || images.is_some()) && t.status.begin() {
                spawn_status(&self.writes, &self.sim, node.clone(), true, bad, images);
            }
        }
        if self.defer_renewal(&node, &name) {
            return;
        }
        let Some(t) = self.tracked.get_mut(&name) else { return };
        // The last renewal has not come back: not a second one beside it.
        if t.lease.begin() {
            let (sim, first, expect) = (self.sim.clone(), !t.lease_written, t.lease_version.clone());
            // Urgent once the lease is half its duration old (a first one at once): from then
            // on it goes before writes that are not heartbeats.
            let urgent_at = urgency(t.renewed_at, self.sim.lease_duration_of(&node));
            let dropped = Done::LeaseDropped { name: name.clone() };
            self.lease_writes.spawn_for("", name, dropped, Some(urgent_at), move || {
                // One span per heartbeat, made once the write has room (a backlog holds none).
                let span = tracing::debug_span!("heartbeat", node = %node.name_any(), first);
                lease_write(sim, node, due, first, expect).instrument(span)
            });
        }
    }
}

impl NodeLoop {
    /// Whether the node's periodic status report waits (its timer moved) because it would
    /// change nothing and the simulator's writes queue ([`renewal::defer_report`]).
    fn defer_report(&mut self, node: &Node, name: &str, bad: &Report, every: Duration) -> bool {
        let endpoint = self.sim.kubelet.as_ref().and_then(|k| crate::sync::lock(k).get(name));
        let age = node_status::report_age(node, self.sim.config.clock.now().wall);
        if node_status::needs_write(node, endpoint.as_ref(), bad)
            || !renewal::defer_report(self.sim.writes.pressure(), age, every)
        {
            return false;
        }
        self.timers.set(Timer::Status(name.to_string()), jittered(every / 10, 0.5, 1.0));
        self.sim.metrics.deferred_status_reports.inc();
        true
    }

    /// Whether the node's renewal waits (its timer moved) because the simulator's writes queue
    /// behind a saturated API server and its lease is still young enough ([`Stretch`]). The
    /// wait is re-judged at least every half cadence, so renewals return to the kubelet's
    /// cadence as soon as the backlog drains.
    fn defer_renewal(&mut self, node: &Node, name: &str) -> bool {
        let pressure = self.sim.writes.pressure();
        self.sim.metrics.write_pressure.set(pressure);
        let Some(t) = self.tracked.get_mut(name) else { return false };
        let Some(last) = t.renewed_at else { return false };
        if pressure <= 0.0 || t.conflict.is_some() {
            return false;
        }
        let base = self.sim.renew_interval_of(node);
        let interval = self.sim.stretch.interval(self.sim.lease_duration_of(node), base, self.latency.get(), pressure);
        let since = last.elapsed();
        if interval <= base || since >= interval.mul_f64(0.9) {
            return false;
        }
        let wait = (interval - since).min(base / 2);
        self.timers.set(Timer::Lease(name.to_string()), jittered(wait, 0.9, 1.0));
        t.lease_due = Instant::now() + wait;
        self.sim.metrics.deferred_lease_renewals.inc();
        true
    }
}

/// Renews the node's lease (created if missing); `due` is when the renewal was due.
async fn lease_write(
    this: Arc<NodeSimulator>,
    node: Arc<Node>,
    due: Instant,
    first: bool,
    expect: Option<String>,
) -> Done {
    let api: Api<Lease> = Api::namespaced(this.client.clone(), lease::LEASE_NAMESPACE);
    let secs = this.lease_duration_of(&node).as_secs().max(1) as i32;
    let lateness = due.elapsed();
    let sent = Instant::now();
    let now = this.config.clock.now().wall;
    let result = lease::renew(&api, &node, secs, (this.identity.as_deref(), now), first, expect.as_deref()).await;
    let ok = result.is_ok();
    let ours = result.as_ref().is_ok_and(|r| r.ours);
    tracing::debug!(
        node = %node.name_any(),
        replica = this.identity.as_deref().unwrap_or_default(),
        first,
        ok,
        ours,
        version = result.as_ref().ok().and_then(|r| r.version.as_deref()).unwrap_or_default(),
        "lease written (not ours: it names another replica, written whole next time)"
    );
    let (version, foreign) = match &result {
        Ok(r) => (r.version.clone(), r.foreign.clone()),
        Err(_) => (None, None),
    };
    let verb = match &result {
        Ok(r) => r.verb,
        Err(e) => {
            tracing::warn!(node = %node.name_any(), error = %e, "lease renewal failed; retrying in 1s");
            "renew"
        }
    };
    this.metrics.write("leases", verb, ok);
    this.metrics.lease_renewals.get_or_create(&ResultLabels { result: if ok { "ok" } else { "error" }.into() }).inc();
    // Late: written more than a whole renewal interval after it was due, i.e. the lease
    // was older than half its duration (still valid, but the margin is being eaten).
    if ok {
        this.metrics.lease_lateness.observe(lateness.as_secs_f64());
    }
    if ok && due.elapsed() > this.renew_interval_of(&node) {
        this.metrics.late_lease_renewals.inc();
    }
    Done::Lease { name: node.name_any(), ok, ours, version, foreign, sent, took: due.elapsed() }
}

/// Marks the node with the other renewer of its Lease (`None`: unmarks it), for its pool.
fn note_conflict(writes: &Writes<Done>, sim: &Arc<NodeSimulator>, name: &str, other: Option<String>) {
    let (sim, name) = (sim.clone(), name.to_string());
    writes.spawn(move || async move {
        let api: Api<Node> = Api::all(sim.client.clone());
        let pp = crate::api::conventions::patch_params();
        let patch = serde_json::json!({ "metadata": { "annotations": { lease::CONFLICT_ANNOTATION: other } } });
        let result = api.patch(&name, &pp, &Patch::Merge(&patch)).await;
        sim.metrics.write("nodes", "patch", result.is_ok());
        if let Err(e) = result {
            tracing::warn!(node = %name, error = %e, "cannot mark the node's simulator conflict");
        }
        Done::Noted
    });
}

/// When a renewal becomes urgent: half its lease's duration after the last renewal. A node
/// this replica has not renewed yet is urgent at once: a new node has no lease at all (a
/// kubelet makes its lease right after registering, and a node without one is not alive to
/// the node lifecycle controller nor to any client that checks), and one just taken over from
/// another replica may carry a lease as old as the node. Only later renewals wait their turn
/// among the heartbeats.
fn urgency(renewed_at: Option<Instant>, lease: Duration) -> Instant {
    renewed_at.map_or_else(Instant::now, |at| at + lease / 2)
}

/// A status write of `node` (`full`: the whole kubelet status, else a heartbeat; `images`: the
/// image list too), made once the budget has room.
fn spawn_status(
    writes: &Writes<Done>,
    sim: &Arc<NodeSimulator>,
    node: Arc<Node>,
    full: bool,
    bad: Report,
    images: Option<Vec<ContainerImage>>,
) {
    let sim = sim.clone();
    let name = node.name_any();
    let dropped = Done::Status { name: name.clone(), images: None };
    writes.spawn_for("", name, dropped, None, move || {
        let span = tracing::debug_span!("node_status", node = %node.name_any(), full);
        status_write(sim, node, full, bad, images).instrument(span)
    });
}

/// Writes the node's status; `bad`: the conditions its knobs make bad now.
async fn status_write(
    this: Arc<NodeSimulator>,
    node: Arc<Node>,
    full: bool,
    bad: Report,
    images: Option<Vec<ContainerImage>>,
) -> Done {
    let name = node.name_any();
    let now = this.config.clock.now().time();
    let patch = if full {
        let mut base = node.status.clone().unwrap_or_default();
        let mut ips = Vec::new();
        {
            let mut addresses = crate::sync::lock(&this.addresses);
            // Keep the addresses that are this node's (or outside the default range);
            // drop one that another node holds.
            let theirs = |ip: &std::net::IpAddr| addresses.is_used(*ip) && addresses.get(&name) != Some(*ip);
            ips.extend(node_status::internal_ips(&node).into_iter().filter(|ip| !theirs(ip)));
            if let Some(list) = base.addresses.as_mut() {
                list.retain(|a| a.type_ != "InternalIP" || a.address.parse().is_ok_and(|ip| !theirs(&ip)));
            }
            if ips.is_empty() {
                match addresses.allocate_spread(&name) {
                    Some(ip) => ips.push(ip),
                    None => {
                        tracing::warn!(node = %name, range = %addresses.net(), "default node address range is full: raise --node-ip-range")
                    }
                }
            }
        }
        let endpoint = this.kubelet.as_ref().and_then(|k| crate::sync::lock(k).get(&name));
        let mut status =
            node_status::simulated(&name, Some(&base), &ips, endpoint.as_ref(), &now, &this.config.defaults);
        if !bad.bad.is_empty() || bad.chaos.is_some() || bad.cloud.is_some() {
            let previous = node.status.as_ref().and_then(|s| s.conditions.as_deref());
            status.conditions = Some(node_status::reported_conditions(previous, &now, &bad));
        }
        let mut patch = serde_json::json!({ "status": status });
        // The addresses are the whole list (a strategic merge would merge them by type).
        if let Some(list) = patch["status"]["addresses"].as_array_mut() {
            list.insert(0, serde_json::json!({ "$patch": "replace" }));
        }
        patch
    } else {
        let previous = node.status.as_ref().and_then(|s| s.conditions.as_deref());
        let conditions = node_status::reported_conditions(previous, &now, &bad);
        serde_json::json!({ "status": { "conditions": conditions } })
    };
    let mut patch = patch;
    let fingerprint = images.as_deref().map(crate::kubelet::status::images::fingerprint);
    if let Some(images) = images {
        // A list without a merge key: the patch replaces it whole, as the kubelet's does.
        patch["status"]["images"] = serde_json::json!(images);
    }
    let api: Api<Node> = Api::all(this.client.clone());
    // A strategic merge, as the kubelet writes: conditions merge by type, so the ones other
    // components own (node-problem-detector's, say) survive the heartbeat. Refused if the node
    // was replaced by another of the same name meanwhile.
    let uid = node.metadata.uid.as_deref().unwrap_or_default();
    let result = crate::simulator::machinery::status_patch(&api, &name, uid, patch).await;
    this.metrics.write("nodes", "patch-status", result.is_ok());
    if let Err(e) = &result
        && !crate::simulator::machinery::object_gone(&result)
    {
        tracing::warn!(node = %name, error = %e, "node status write failed");
    }
    Done::Status { name, images: fingerprint.filter(|_| result.is_ok()) }
}

#[cfg(test)]
mod urgency_tests {
    use super::urgency;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn a_first_renewal_is_urgent_at_once_and_later_ones_half_a_lease_after_the_last() {
        let lease = Duration::from_secs(40);
        let before = Instant::now();
        let first = urgency(None, lease);
        assert!(first >= before && first <= Instant::now(), "a node without a renewal by this replica: now");
        let renewed = Instant::now();
        assert_eq!(urgency(Some(renewed), lease), renewed + Duration::from_secs(20));
    }
}

#[cfg(test)]
mod tests;
