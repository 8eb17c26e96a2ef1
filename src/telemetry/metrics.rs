//! Prometheus metrics (prometheus-client). Names carry no `_total`: the encoder adds it to
//! counters (and panics in debug builds if we add it ourselves).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// The metrics a kind declares for its own simulator (its `Simulate::Metrics`), registered once
/// per process beside the shared ones, so a kind adds a metric without touching this file.
pub trait KindMetrics: Default + Send + Sync + 'static {
    /// Registers each metric in `registry` (names get the `kwok_pools_` prefix).
    fn register(&self, registry: &mut Registry);
}

/// No metrics of its own.
impl KindMetrics for () {
    fn register(&self, _registry: &mut Registry) {}
}

/// Where the kinds' own metrics are registered when the process's metrics are made.
pub struct KindSet<'a> {
    registry: &'a mut Registry,
    kinds: &'a mut HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl KindSet<'_> {
    /// Registers `M` (once, however many kinds declare it).
    pub fn add<M: KindMetrics>(&mut self) {
        if !self.kinds.contains_key(&TypeId::of::<M>()) {
            let metrics = M::default();
            metrics.register(self.registry);
            self.kinds.insert(TypeId::of::<M>(), Arc::new(metrics));
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub resource: String,
    pub verb: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub kind: String,
    pub allowed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub event: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<KindLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<KindLabels, Histogram>,
    pub pool_desired: Family<PoolLabels, Gauge>,
    pub pool_ready: Family<PoolLabels, Gauge>,
    pub pool_updated: Family<PoolLabels, Gauge>,
    pub api_writes: Family<WriteLabels, Counter>,
    pub managed_nodes: Gauge,
    pub managed_pods: Gauge,
    pub lease_renewals: Family<ResultLabels, Counter>,
    pub late_lease_renewals: Counter,
    /// Nodes whose Lease another writer renews too.
    pub foreign_lease_holders: Gauge,
    pub pod_transitions: Family<ResultLabels, Counter>,
    pub admission_reviews: Family<AdmissionLabels, Counter>,
    pub injected: Family<EventLabels, Counter>,
    /// Child writes per pool and verb (create, update, delete).
    pub child_writes: Family<ChildWriteLabels, Counter>,
    /// How late node lease renewals are written, after they were due.
    pub lease_lateness: Histogram,
    /// Lease renewals put off because the simulator's writes queue behind the API server.
    pub deferred_lease_renewals: Counter,
    /// Unchanged node status reports put off while the simulator's writes queue.
    pub deferred_status_reports: Counter,
    /// The simulator's write backlog as a share of its budget (0 to 1).
    pub write_pressure: Gauge<f64, AtomicU64>,
    /// 1 while this replica runs the pool controllers (holds the leader Lease).
    pub leader: Gauge,
    /// Live members of the simulator shard (0: not sharded).
    pub shard_members: Gauge,
    /// Changes of the shard's membership this replica went through.
    pub shard_handovers: Counter,
    /// Objects in each watch cache (set at each scrape).
    pub cached_objects: Family<ResourceLabels, Gauge>,
    /// Each kind's own metrics, by type.
    kinds: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChildWriteLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub verb: String,
    pub result: String,
}

/// The operations metrics (leader, shard, per-pool writes, lease lateness), registered apart
/// from the rest.
struct Operations {
    child_writes: Family<ChildWriteLabels, Counter>,
    lease_lateness: Histogram,
    deferred_lease_renewals: Counter,
    deferred_status_reports: Counter,
    write_pressure: Gauge<f64, AtomicU64>,
    leader: Gauge,
    shard_members: Gauge,
    shard_handovers: Counter,
    cached_objects: Family<ResourceLabels, Gauge>,
    foreign_lease_holders: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

fn register_operations(registry: &mut Registry) -> Operations {
    let o = Operations {
        child_writes: Family::default(),
        // 10 ms .. ~82 s
        lease_lateness: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
        deferred_lease_renewals: Counter::default(),
        deferred_status_reports: Counter::default(),
        write_pressure: Gauge::default(),
        leader: Gauge::default(),
        shard_members: Gauge::default(),
        shard_handovers: Counter::default(),
        cached_objects: Family::default(),
        foreign_lease_holders: Gauge::default(),
    };
    registry.register(
        "simulator_foreign_lease_holders",
        "Nodes simulated here whose Lease another writer renews too (kwok-controller, another instance): two simulators",
        o.foreign_lease_holders.clone(),
    );
    registry.register(
        "informer_cached_objects",
        "Objects held in the operator's watch caches, by resource (what its memory grows with)",
        o.cached_objects.clone(),
    );
    registry.register("pool_child_writes", "Writes of a pool's children by verb and result", o.child_writes.clone());
    registry.register(
        "simulator_lease_lateness_seconds",
        "How long after it was due each node lease renewal was sent",
        o.lease_lateness.clone(),
    );
    registry.register(
        "simulator_deferred_lease_renewals",
        "Node lease renewals put off (inside the lease's safe share) while the simulator's writes queue behind a saturated API server",
        o.deferred_lease_renewals.clone(),
    );
    registry.register(
        "simulator_deferred_status_reports",
        "Node status reports that would change nothing put off (at most one more report interval) while the simulator's writes queue behind a saturated API server",
        o.deferred_status_reports.clone(),
    );
    registry.register(
        "simulator_write_pressure",
        "The simulator's writes waiting for room, as a share of its budget (0: none wait; 1: a whole budget waits)",
        o.write_pressure.clone(),
    );
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease and runs the pool controllers",
        o.leader.clone(),
    );
    registry.register(
        "shard_members",
        "Live members of the simulator shard (0 when not sharded)",
        o.shard_members.clone(),
    );
    registry.register(
        "shard_handovers",
        "Membership changes of the simulator shard seen by this replica",
        o.shard_handovers.clone(),
    );
    o
}

impl Default for Metrics {
    /// The shared metrics only (tests; the operator adds the kinds' with [`Metrics::new`]).
    fn default() -> Self {
        Self::new(|_| {})
    }
}

impl Metrics {
    /// The process's metrics, with the kinds' own that `kinds` adds.
    pub fn new(kinds: impl FnOnce(&mut KindSet<'_>)) -> Self {
        let mut registry = Registry::with_prefix("kwok_pools");
        let reconciles = Family::<KindLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let pool_desired = Family::<PoolLabels, Gauge>::default();
        let pool_ready = Family::<PoolLabels, Gauge>::default();
        let pool_updated = Family::<PoolLabels, Gauge>::default();
        let api_writes = Family::<WriteLabels, Counter>::default();
        let managed_nodes = Gauge::default();
        let managed_pods = Gauge::default();
        let lease_renewals = Family::<ResultLabels, Counter>::default();
        let late_lease_renewals = Counter::default();
        let pod_transitions = Family::<ResultLabels, Counter>::default();
        let admission_reviews = Family::<AdmissionLabels, Counter>::default();
        let injected = Family::<EventLabels, Counter>::default();
        registry.register("reconciles", "Pool reconciliations by kind", reconciles.clone());
        registry.register("reconcile_errors", "Failed reconciliations by kind and error", reconcile_errors.clone());
        registry.register("reconcile_duration_seconds", "Time per reconciliation", reconcile_duration.clone());
        registry.register("pool_desired_replicas", "Children a pool wants", pool_desired.clone());
        registry.register("pool_ready_replicas", "Children of a pool that are ready", pool_ready.clone());
        registry.register("pool_updated_replicas", "Children of a pool on the current template", pool_updated.clone());
        registry.register("api_writes", "Writes to the API server by resource, verb and result", api_writes.clone());
        registry.register("simulator_managed_nodes", "Nodes the simulator keeps alive", managed_nodes.clone());
        registry.register("simulator_managed_pods", "Pods on managed nodes", managed_pods.clone());
        registry.register("simulator_lease_renewals", "Node lease renewals by result", lease_renewals.clone());
        registry.register(
            "simulator_late_lease_renewals",
            "Lease renewals written later than a quarter of the lease duration after they were due",
            late_lease_renewals.clone(),
        );
        registry.register(
            "simulator_pod_transitions",
            "Pod lifecycle writes by transition (terminal-status-skipped: a deleted pod removed without its terminal status while the simulator's writes queued)",
            pod_transitions.clone(),
        );
        registry.register(
            "admission_reviews",
            "AdmissionReviews answered by kind and verdict",
            admission_reviews.clone(),
        );
        registry.register(
            "simulator_injected_events",
            "Faults the lifecycle knobs injected: pod_fail, pod_crash, node_not_ready",
            injected.clone(),
        );
        let ops = register_operations(&mut registry);
        let mut by_kind = HashMap::new();
        kinds(&mut KindSet { registry: &mut registry, kinds: &mut by_kind });
        Self {
            kinds: by_kind,
            child_writes: ops.child_writes,
            lease_lateness: ops.lease_lateness,
            deferred_lease_renewals: ops.deferred_lease_renewals,
            deferred_status_reports: ops.deferred_status_reports,
            write_pressure: ops.write_pressure,
            leader: ops.leader,
            shard_members: ops.shard_members,
            shard_handovers: ops.shard_handovers,
            cached_objects: ops.cached_objects,
            foreign_lease_holders: ops.foreign_lease_holders,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            pool_desired,
            pool_ready,
            pool_updated,
            api_writes,
            managed_nodes,
            managed_pods,
            lease_renewals,
            late_lease_renewals,
            pod_transitions,
            admission_reviews,
            injected,
        }
    }
}

impl Metrics {
    /// A kind's own metrics, as registered; an unregistered set (counted, never scraped) when
    /// the kind was not added (a test that built the metrics without the kinds).
    pub fn kind<M: KindMetrics>(&self) -> Arc<M> {
        self.kinds.get(&TypeId::of::<M>()).and_then(|m| m.clone().downcast::<M>().ok()).unwrap_or_default()
    }

    /// Counts one write.
    pub fn write(&self, resource: &str, verb: &str, ok: bool) {
        self.api_writes
            .get_or_create(&WriteLabels {
                resource: resource.into(),
                verb: verb.into(),
                result: if ok { "ok" } else { "error" }.into(),
            })
            .inc();
    }

    /// Counts one write of a pool's child.
    pub fn child_write(&self, pool: &PoolLabels, verb: &str, ok: bool) {
        let labels = ChildWriteLabels {
            kind: pool.kind.clone(),
            namespace: pool.namespace.clone(),
            name: pool.name.clone(),
            verb: verb.into(),
            result: if ok { "ok" } else { "error" }.into(),
        };
        self.child_writes.get_or_create(&labels).inc();
    }

    /// Forgets every series of a pool that is gone: its gauges and its child-write counters
    /// (a deleted pool's series would otherwise stay in every scrape for good).
    pub fn forget_pool(&self, pool: &PoolLabels) {
        self.pool_desired.remove(pool);
        self.pool_ready.remove(pool);
        self.pool_updated.remove(pool);
        for verb in ["create", "apply", "claim", "patch-status", "delete"] {
            for result in ["ok", "error"] {
                self.child_writes.remove(&ChildWriteLabels {
                    kind: pool.kind.clone(),
                    namespace: pool.namespace.clone(),
                    name: pool.name.clone(),
                    verb: verb.into(),
                    result: result.into(),
                });
            }
        }
    }

    /// Starts timing a reconciliation; the time is recorded when the guard drops.
    pub fn reconcile_timer(&self, kind: &str) -> ReconcileTimer<'_> {
        self.reconciles.get_or_create(&KindLabels { kind: kind.into() }).inc();
        ReconcileTimer { metrics: self, kind: kind.to_string(), start: Instant::now() }
    }

    /// Counts one fault a lifecycle knob injected (`fail`, `crash`, `oom-kill`, `image-pull-fail`,
    /// `init-fail`, `unready`, `node_not_ready`).
    pub fn injected(&self, event: &str) {
        let event = match event {
            "fail" => "pod_fail",
            "crash" => "pod_crash",
            "oom-kill" => "pod_oom_kill",
            "image-pull-fail" => "pod_image_pull_fail",
            "init-fail" => "pod_init_fail",
            "unready" => "pod_unready",
            other => other,
        };
        self.injected.get_or_create(&EventLabels { event: event.into() }).inc();
    }

    pub fn reconcile_failed(&self, kind: &str, error: &str) {
        self.reconcile_errors.get_or_create(&ErrorLabels { kind: kind.into(), error: error.into() }).inc();
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; a failure would show as a truncated scrape.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}

/// Records the duration of a reconciliation when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    kind: String,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .get_or_create(&KindLabels { kind: std::mem::take(&mut self.kind) })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_with_total_suffix() {
        let m = Metrics::default();
        m.write("nodes", "apply", true);
        {
            let _t = m.reconcile_timer("NodePool");
        }
        let text = m.encode();
        assert!(
            text.contains("kwok_pools_api_writes_total{resource=\"nodes\",verb=\"apply\",result=\"ok\"} 1"),
            "{text}"
        );
        assert!(text.contains("kwok_pools_reconcile_duration_seconds_count{kind=\"NodePool\"} 1"), "{text}");
    }

    #[test]
    fn a_gone_pool_leaves_no_series_behind() {
        let m = Metrics::default();
        let pool = |name: &str| PoolLabels { kind: "PodPool".into(), namespace: "d".into(), name: name.into() };
        for name in ["gone", "kept"] {
            m.pool_desired.get_or_create(&pool(name)).set(3);
            m.child_write(&pool(name), "create", true);
            m.child_write(&pool(name), "delete", false);
        }
        m.forget_pool(&pool("gone"));
        let text = m.encode();
        assert!(!text.contains("name=\"gone\""), "{text}");
        assert!(text.contains("name=\"kept\""), "{text}");
    }
}
