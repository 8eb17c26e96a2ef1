//! What a simulated container and node use, as the kubelet reports it on `/metrics/resource`
//! and `/stats/summary`: a level per container from the pool's `usage` knobs (or the pod's
//! `kwok.x-k8s.io/usage-cpu`/`-memory` annotations), shaped over time since the governing
//! pool was created, and its cumulative CPU as the exact integral of that shape — so every
//! replica computes the same counter for the same container at the same time. Pure.

pub use crate::api::kubelet::Overrides;
use crate::api::kubelet::{Curve, Spread, Usage, level, quantity};

/// CPU a container uses when nothing is said (cores).
pub const DEFAULT_CPU: f64 = 0.001;
/// Memory a container uses when nothing is said (bytes).
pub const DEFAULT_MEMORY: f64 = 1024.0 * 1024.0;
/// What a node's own daemons use when nothing is said.
pub const DEFAULT_NODE_CPU: f64 = 0.1;
pub const DEFAULT_NODE_MEMORY: f64 = 512.0 * 1024.0 * 1024.0;

/// The usage knobs that govern a pod, parsed once.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub cpu: Option<Spread>,
    pub memory: Option<Spread>,
    pub gpu_utilization: Option<Spread>,
    pub gpu_memory: Option<Spread>,
    pub curve: Curve,
    pub seed: Option<i64>,
    /// When the shape's time starts (Unix seconds): the governing pool's creation.
    pub origin: f64,
}

impl Model {
    /// The model of `usage` (invalid parts fall back to the defaults: the pool's validation
    /// reports them).
    pub fn new(usage: Option<&Usage>, seed: Option<i64>, origin: f64) -> Self {
        let spread = |a: Option<&crate::api::kubelet::Amount>| a.and_then(|a| a.spread().ok());
        Self {
            cpu: spread(usage.and_then(|u| u.cpu.as_ref())),
            memory: spread(usage.and_then(|u| u.memory.as_ref())),
            gpu_utilization: spread(usage.and_then(|u| u.gpu_utilization.as_ref())),
            gpu_memory: spread(usage.and_then(|u| u.gpu_memory.as_ref())),
            curve: usage.and_then(|u| u.shape.as_ref()).and_then(|s| s.curve().ok()).unwrap_or(Curve::Constant),
            seed,
            origin,
        }
    }
}

impl Default for Model {
    fn default() -> Self {
        Self {
            cpu: None,
            memory: None,
            gpu_utilization: None,
            gpu_memory: None,
            curve: Curve::Constant,
            seed: None,
            origin: 0.0,
        }
    }
}

/// A container's identity for its seeded levels: with a seed, namespace, pod and container
/// names (a replacement repeats them); without, its pod's UID (each pod differs).
pub struct Identity<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: &'a str,
    pub container: &'a str,
}

/// A container's usage at a moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Cores used now.
    pub cpu: f64,
    /// Core-seconds used since the container started (never zero: metrics-server drops a
    /// container whose counter is).
    pub cpu_seconds: f64,
    /// Working set (bytes).
    pub memory: f64,
}

/// What container `id` uses at `now` (Unix seconds), having started at `started`.
pub fn container(model: &Model, id: &Identity<'_>, overrides: Overrides, started: f64, now: f64) -> Sample {
    let key: Vec<&str> = match model.seed {
        Some(_) => vec![id.namespace, id.pod, id.container],
        None => vec![id.uid, id.container],
    };
    let cpu_level =
        overrides.cpu.or_else(|| model.cpu.as_ref().map(|s| level(s, model.seed, &key, "cpu"))).unwrap_or(DEFAULT_CPU);
    let memory = overrides
        .memory
        .or_else(|| model.memory.as_ref().map(|s| level(s, model.seed, &key, "memory")))
        .unwrap_or(DEFAULT_MEMORY)
        .max(1.0);
    let (from, to) = ((started - model.origin).max(0.0), (now - model.origin).max(0.0));
    let cpu_seconds = cpu_level * (model.curve.integral(to) - model.curve.integral(from));
    Sample {
        cpu: cpu_level * model.curve.factor(to),
        cpu_seconds: cpu_seconds.max(1e-6 * (now - started).max(1.0)),
        memory,
    }
}

/// What a GPU held by a pod's claim shows at `now`: (utilisation in percent, framebuffer
/// bytes used), drawn per pod and device (`key`) and shaped like the CPU.
pub fn gpu(model: &Model, key: &[&str], now: f64) -> (f64, f64) {
    let util = model.gpu_utilization.as_ref().map_or(0.0, |s| level(s, model.seed, key, "gpu-utilization"));
    let memory = model.gpu_memory.as_ref().map_or(0.0, |s| level(s, model.seed, key, "gpu-memory"));
    let factor = model.curve.factor((now - model.origin).max(0.0));
    ((util * factor).clamp(0.0, 100.0), memory.max(0.0))
}

/// A node's own daemons' usage: (cores, bytes).
pub fn node_base(usage: Option<&crate::api::kubelet::NodeUsage>) -> (f64, f64) {
    let q = |v: Option<&String>, default: f64| v.and_then(|v| quantity(v)).unwrap_or(default);
    (
        q(usage.and_then(|u| u.cpu.as_ref()), DEFAULT_NODE_CPU),
        q(usage.and_then(|u| u.memory.as_ref()), DEFAULT_NODE_MEMORY),
    )
}

/// A cumulative counter kept monotonic as its rate changes: the trapezoid of the rate
/// between readings (a node's own daemons, whose level a pool edit may change).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counter {
    /// (when, rate then, total then).
    last: Option<(f64, f64, f64)>,
}

impl Counter {
    /// The total at `now` with the rate `rate` there; the first reading counts `rate` since
    /// `since`.
    pub fn read(&mut self, now: f64, rate: f64, since: f64) -> f64 {
        let total = match self.last {
            None => rate * (now - since).max(1.0),
            Some((at, before, total)) if now > at => total + (before + rate) / 2.0 * (now - at),
            Some((_, _, total)) => total,
        };
        self.last = Some((now.max(self.last.map_or(now, |l| l.0)), rate, total));
        total.max(1e-6)
    }
}

/// A node's CPU counter as a kubelet keeps it: its daemons' share plus every container's own
/// counter, with the CPU of containers that have gone (or restarted) kept. Over any window
/// the node's rate is its base plus exactly what its containers used in that window, the
/// same figures a metrics pipeline computes for the pods — never a blend of two readings.
#[derive(Clone, Debug, Default)]
pub struct NodeCounter {
    base: Counter,
    /// CPU-seconds of containers no longer running.
    gone: f64,
    /// Each running container's counter at the last reading.
    running: std::collections::HashMap<String, f64>,
    /// (when, total) of the last reading.
    last: Option<(f64, f64)>,
}

impl NodeCounter {
    /// The node's total at `now`: the base at `base_rate` counted since `since`, and the
    /// running containers' own counters (`key`, CPU-seconds). A reading older than the
    /// last changes nothing.
    pub fn read(
        &mut self,
        now: f64,
        base_rate: f64,
        since: f64,
        containers: impl IntoIterator<Item = (String, f64)>,
    ) -> f64 {
        if let Some((at, total)) = self.last
            && now < at
        {
            return total;
        }
        let mut running = std::collections::HashMap::new();
        for (key, seconds) in containers {
            if let Some(before) = self.running.remove(&key)
                && seconds < before
            {
                // Restarted: its counter began again.
                self.gone += before;
            }
            running.insert(key, seconds);
        }
        self.gone += self.running.values().sum::<f64>();
        self.running = running;
        let total = self.base.read(now, base_rate, since) + self.gone + self.running.values().sum::<f64>();
        let total = self.last.map_or(total, |(_, before)| total.max(before));
        self.last = Some((now, total));
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kubelet::Usage;

    fn id() -> Identity<'static> {
        Identity { namespace: "d", pod: "web-0", uid: "u-1", container: "app" }
    }

    #[test]
    fn a_fixed_level_gives_its_rate_and_an_exact_counter() {
        let usage: Usage =
            serde_json::from_value(serde_json::json!({"cpu": {"fixed": "250m"}, "memory": {"fixed": "64Mi"}})).unwrap();
        let m = Model::new(Some(&usage), None, 1000.0);
        let s = container(&m, &id(), Overrides::default(), 1000.0, 1100.0);
        assert!((s.cpu - 0.25).abs() < 1e-9 && (s.cpu_seconds - 25.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s.memory, 64.0 * 1024.0 * 1024.0);
        // Every replica computes the same counter at the same time.
        assert_eq!(s, container(&m, &id(), Overrides::default(), 1000.0, 1100.0));
    }

    #[test]
    fn the_shape_counts_from_the_pool_and_annotations_win() {
        let usage: Usage = serde_json::from_value(serde_json::json!({
            "cpu": {"fixed": "1"}, "shape": {"steps": [{"after": "0s", "factor": 0.1}, {"after": "60s", "factor": 1.0}]}
        }))
        .unwrap();
        let m = Model::new(Some(&usage), Some(3), 0.0);
        // A pod started at 30 s: low until 60 s, then high — whatever its own start.
        let early = container(&m, &id(), Overrides::default(), 30.0, 50.0);
        let late = container(&m, &id(), Overrides::default(), 30.0, 70.0);
        assert!((early.cpu - 0.1).abs() < 1e-9 && (late.cpu - 1.0).abs() < 1e-9);
        assert!((late.cpu_seconds - (3.0 + 10.0)).abs() < 1e-6, "{late:?}");
        let o = Overrides::parse(Some("500m"), Some("1Gi"));
        let s = container(&m, &id(), o, 0.0, 10.0);
        assert!(
            (s.cpu - 0.05).abs() < 1e-9 && s.memory == 1024.0 * 1024.0 * 1024.0,
            "the annotation's level, the pool's shape"
        );
    }

    #[test]
    fn a_node_counter_is_its_base_and_its_containers_own_counters() {
        let mut c = NodeCounter::default();
        let a = c.read(100.0, 0.1, 90.0, [("a".to_string(), 5.0)]);
        assert!((a - 6.0).abs() < 1e-9, "{a}");
        // A container that started after the last reading counts only what it used since.
        let b = c.read(115.0, 0.1, 90.0, [("a".to_string(), 12.5), ("b".to_string(), 3.75)]);
        assert!((b - a - (1.5 + 7.5 + 3.75)).abs() < 1e-9, "{b}");
        // One gone, one restarted: their CPU is kept; the node's counter only grows.
        let c2 = c.read(125.0, 0.1, 90.0, [("b".to_string(), 1.0)]);
        assert!((c2 - (0.1 * 35.0 + 12.5 + 3.75 + 1.0)).abs() < 1e-9, "{c2}");
        assert_eq!(c.read(120.0, 5.0, 90.0, []), c2, "an older reading changes nothing");
    }

    #[test]
    fn a_node_counter_only_grows_as_pods_come_and_go() {
        let mut c = Counter::default();
        let a = c.read(100.0, 2.0, 90.0);
        assert_eq!(a, 20.0);
        let b = c.read(110.0, 0.5, 90.0);
        assert!(b > a && (b - (20.0 + 12.5)).abs() < 1e-9);
        assert_eq!(c.read(105.0, 9.0, 90.0), b, "an older reading changes nothing");
    }
}
