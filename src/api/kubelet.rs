//! What the simulated kubelet's API answers for a pool's pods and nodes, declared on the pool
//! beside the other lifecycle knobs: resource usage (a level per container from a
//! distribution, shaped over time), the logs a container prints, what `kubectl exec` gets.
//! Types, schema rules and their validation; the arithmetic on them is in `kubelet::usage`.

use super::duration::{parse_duration, unit};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// An amount that differs between containers: `fixed`, uniform between `min` and `max`, or
/// normal around `mean` with `stddev` (never below zero). Quantities as Kubernetes writes them
/// (`250m`, `1.5`, `128Mi`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.fixed), has(self.min) || has(self.max), has(self.mean) || has(self.stddev)].filter(x, x).size() == 1")
    .message("set exactly one of: fixed, min and max, mean and stddev"))]
pub struct Amount {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub fixed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub max: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub mean: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub stddev: Option<String>,
}

fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "maxLength": 32, "x-kubernetes-validations": [
        {"rule": "isQuantity(self)", "message": "must be a quantity such as 250m, 2 or 128Mi"}
    ]})
}

fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "maxLength": 32, "pattern": super::duration::DURATION_PATTERN})
}

/// An [`Amount`] parsed (in base units: cores for CPU, bytes for memory).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spread {
    Fixed(f64),
    Uniform(f64, f64),
    Normal { mean: f64, stddev: f64 },
}

impl Spread {
    /// A sample from two uniform numbers in [0, 1) (never below zero).
    pub fn sample(&self, u1: f64, u2: f64) -> f64 {
        match *self {
            Spread::Fixed(v) => v,
            Spread::Uniform(lo, hi) => lo + (hi - lo) * u1.clamp(0.0, 1.0),
            Spread::Normal { mean, stddev } => {
                let z = (-2.0 * (1.0 - u1).max(1e-12).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean + z * stddev).max(0.0)
            }
        }
    }
}

/// A quantity as a number of base units, if it is one.
pub fn quantity(text: &str) -> Option<f64> {
    crate::api::validation::quantity::approximate(text).filter(|v| v.is_finite() && *v >= 0.0)
}

impl Amount {
    /// The spread, or what is wrong (each message starts with the field: `.min: …`).
    pub fn spread(&self) -> Result<Spread, String> {
        let q = |field: &str, v: &Option<String>| -> Result<Option<f64>, String> {
            match v {
                None => Ok(None),
                Some(t) => quantity(t)
                    .map(Some)
                    .ok_or_else(|| format!(".{field}: {t:?} is not a quantity such as 250m, 2 or 128Mi")),
            }
        };
        let (fixed, min, max) = (q("fixed", &self.fixed)?, q("min", &self.min)?, q("max", &self.max)?);
        let (mean, stddev) = (q("mean", &self.mean)?, q("stddev", &self.stddev)?);
        match (fixed, min, max, mean, stddev) {
            (Some(f), None, None, None, None) => Ok(Spread::Fixed(f)),
            (None, Some(lo), Some(hi), None, None) if lo <= hi => Ok(Spread::Uniform(lo, hi)),
            (None, Some(_), Some(_), None, None) => Err(".min: is more than max: min must not exceed max".into()),
            (None, None, None, Some(mean), Some(stddev)) => Ok(Spread::Normal { mean, stddev }),
            _ => Err(": set exactly one of: fixed, min and max, mean and stddev".into()),
        }
    }
}

/// How a level changes over time, as a factor of it (1 = the level). Time counts from the
/// governing pool's creation, so every pod of a workload sees the same phase (as the load on
/// a service does); set exactly one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.ramp), has(self.wave), has(self.steps)].filter(x, x).size() <= 1")
    .message("set at most one of: ramp, wave, steps"))]
pub struct Shape {
    /// From `from` to `to` (factors) over `over`, then `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Between `low` and `high` (factors), a sine of period `period`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<Wave>,
    /// Factors that hold from `after` on, in order of `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub steps: Option<Vec<Step>>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Ramp {
    #[schemars(range(min = 0.0, max = 100.0))]
    pub from: f64,
    #[schemars(range(min = 0.0, max = 100.0))]
    pub to: f64,
    #[schemars(schema_with = "duration_schema")]
    pub over: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    #[schemars(range(min = 0.0, max = 100.0))]
    pub low: f64,
    #[schemars(range(min = 0.0, max = 100.0))]
    pub high: f64,
    #[schemars(schema_with = "duration_schema")]
    pub period: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    #[schemars(schema_with = "duration_schema")]
    pub after: String,
    #[schemars(range(min = 0.0, max = 100.0))]
    pub factor: f64,
}

/// A shape parsed: the factor at a time is [`Curve::factor`], its integral [`Curve::integral`].
#[derive(Clone, Debug, PartialEq)]
pub enum Curve {
    Constant,
    Ramp {
        from: f64,
        to: f64,
        over: f64,
    },
    Wave {
        low: f64,
        high: f64,
        period: f64,
    },
    /// (from this second on, factor), sorted; 1 before the first.
    Steps(Vec<(f64, f64)>),
}

impl Shape {
    /// The curve, or what is wrong (messages start with the field).
    pub fn curve(&self) -> Result<Curve, String> {
        let secs = |field: &str, t: &str| {
            parse_duration(t)
                .map(|d| d.as_secs_f64())
                .ok_or_else(|| format!(".{field}: {t:?} is not a duration such as 30s or 5m (at most 24h)"))
        };
        let factor = |field: &str, f: f64| {
            if (0.0..=100.0).contains(&f) {
                Ok(f)
            } else {
                Err(format!(".{field}: {f} must be a factor from 0 to 100"))
            }
        };
        match (&self.ramp, &self.wave, &self.steps) {
            (None, None, None) => Ok(Curve::Constant),
            (Some(r), None, None) => Ok(Curve::Ramp {
                from: factor("ramp.from", r.from)?,
                to: factor("ramp.to", r.to)?,
                over: secs("ramp.over", &r.over)?.max(1e-3),
            }),
            (None, Some(w), None) => {
                let (low, high) = (factor("wave.low", w.low)?, factor("wave.high", w.high)?);
                if low > high {
                    return Err(".wave.low: is more than high".into());
                }
                Ok(Curve::Wave { low, high, period: secs("wave.period", &w.period)?.max(1.0) })
            }
            (None, None, Some(steps)) => {
                let mut out = Vec::new();
                for (i, s) in steps.iter().enumerate() {
                    out.push((
                        secs(&format!("steps[{i}].after"), &s.after)?,
                        factor(&format!("steps[{i}].factor"), s.factor)?,
                    ));
                }
                out.sort_by(|a, b| a.0.total_cmp(&b.0));
                Ok(Curve::Steps(out))
            }
            _ => Err(": set at most one of: ramp, wave, steps".into()),
        }
    }
}

impl Curve {
    /// The factor `t` seconds after the start.
    pub fn factor(&self, t: f64) -> f64 {
        let t = t.max(0.0);
        match self {
            Curve::Constant => 1.0,
            Curve::Ramp { from, to, over } => from + (to - from) * (t / over).min(1.0),
            Curve::Wave { low, high, period } => {
                low + (high - low) * 0.5 * (1.0 - (std::f64::consts::TAU * t / period).cos())
            }
            Curve::Steps(steps) => steps.iter().rev().find(|(at, _)| *at <= t).map_or(1.0, |(_, f)| *f),
        }
    }

    /// ∫ factor from 0 to `t` (so a cumulative counter is the same wherever it is computed).
    pub fn integral(&self, t: f64) -> f64 {
        let t = t.max(0.0);
        match self {
            Curve::Constant => t,
            Curve::Ramp { from, to, over } => {
                let r = t.min(*over);
                let ramped = from * r + (to - from) * r * r / (2.0 * over);
                ramped + to * (t - r)
            }
            Curve::Wave { low, high, period } => {
                let w = std::f64::consts::TAU / period;
                low * t + (high - low) * 0.5 * (t - (w * t).sin() / w)
            }
            Curve::Steps(steps) => {
                let mut total = 0.0;
                let mut at = 0.0;
                let mut factor = 1.0;
                for (start, f) in steps {
                    if *start >= t {
                        break;
                    }
                    total += factor * (start.max(at) - at);
                    at = start.max(at);
                    factor = *f;
                }
                total + factor * (t - at)
            }
        }
    }
}

/// What each container of a pod uses: CPU (cores) and memory (bytes) levels, shaped over time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// CPU each container uses (e.g. `fixed: 250m`; default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Amount>,
    /// Memory (working set) each container uses (e.g. `fixed: 64Mi`; default 1Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Amount>,
    /// How the CPU level (and GPU utilisation) changes over time (memory holds): default
    /// constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    /// Utilisation, in percent (0 to 100), of each GPU a pod's claims hold (e.g. `fixed: "80"`;
    /// default 0), shaped like the CPU: what `DCGM_FI_DEV_GPU_UTIL` shows on `/metrics/dcgm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<Amount>,
    /// Framebuffer memory used on each GPU a pod's claims hold (e.g. `fixed: 20Gi`; default 0):
    /// `DCGM_FI_DEV_FB_USED` and `_FB_FREE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<Amount>,
}

/// What a node uses beside its pods (its system daemons): fixed amounts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeUsage {
    /// Default 100m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub cpu: Option<String>,
    /// Default 512Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub memory: Option<String>,
}

/// What a container prints: `lines` once at its start, then `line` every `every` (`{n}` in it
/// is the count, `{pod}` the pod's name). The pod annotation `pools.kwok.x-k8s.io/logs` (its
/// lines) takes the place of `lines` for that pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Logs {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub lines: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub line: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub every: Option<String>,
}

/// What `kubectl exec` (and attach) get: nothing runs on the operator's machine, ever.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// A minimal shell (the default): `echo`, `true`, `false`, `env`, `printenv`, `hostname`,
    /// `cat` of the kubelet-managed files, `sleep`, `exit`, `sh -c` scripts and an interactive
    /// `sh`; any other command is not found (exit 127).
    #[default]
    Shell,
    /// The command's words on stdout, exit 0, and stdin echoed.
    Echo,
    /// `output` on stdout and `exitCode`, whatever the command.
    Reply,
    /// An error that names this knob, exit 126 (the command cannot run).
    Refuse,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Exec {
    #[serde(default)]
    pub mode: ExecMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 255))]
    pub exit_code: Option<i32>,
}

/// The pod annotation whose lines a container prints (in place of `logs.lines`).
pub const LOGS_ANNOTATION: &str = "pools.kwok.x-k8s.io/logs";
/// The pod annotations (kwok's names) that set each container's CPU and memory level.
pub const CPU_ANNOTATION: &str = "kwok.x-k8s.io/usage-cpu";
pub const MEMORY_ANNOTATION: &str = "kwok.x-k8s.io/usage-memory";

/// Levels a pod's annotations set for its containers (base units).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Overrides {
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
}

impl Overrides {
    /// From the annotations' texts (what is not a quantity is ignored); `None` when neither
    /// sets anything.
    pub fn parse(cpu: Option<&str>, memory: Option<&str>) -> Self {
        Self { cpu: cpu.and_then(quantity), memory: memory.and_then(quantity) }
    }

    /// From a pod's annotations, if they set a level.
    pub fn from_annotations(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<Self> {
        let a = annotations?;
        let o = Self::parse(a.get(CPU_ANNOTATION).map(String::as_str), a.get(MEMORY_ANNOTATION).map(String::as_str));
        (o.cpu.is_some() || o.memory.is_some()).then_some(o)
    }
}

/// Problems with the kubelet knobs of a lifecycle, each starting with its path below
/// `spec.lifecycle`.
pub fn problems(usage: Option<&Usage>, logs: Option<&Logs>, node: Option<&NodeUsage>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(u) = usage {
        for (field, a) in [
            ("cpu", &u.cpu),
            ("memory", &u.memory),
            ("gpuUtilization", &u.gpu_utilization),
            ("gpuMemory", &u.gpu_memory),
        ] {
            if let Some(a) = a
                && let Err(e) = a.spread()
            {
                out.push(format!(".pods.usage.{field}{e}"));
            }
        }
        if let Some(s) = &u.shape
            && let Err(e) = s.curve()
        {
            out.push(format!(".pods.usage.shape{e}"));
        }
    }
    if let Some(l) = logs
        && let Some(every) = &l.every
        && parse_duration(every).is_none_or(|d| d < Duration::from_millis(100))
    {
        out.push(format!(".pods.logs.every: {every:?} is not a duration of at least 100ms"));
    }
    if let Some(n) = node {
        for (field, v) in [("cpu", &n.cpu), ("memory", &n.memory)] {
            if let Some(v) = v
                && quantity(v).is_none()
            {
                out.push(format!(".nodes.usage.{field}: {v:?} is not a quantity"));
            }
        }
    }
    out
}

/// A level for one container from `spread`, the same in every process for the same pod (by
/// seed and name, or by UID without a seed).
pub fn level(spread: &Spread, seed: Option<i64>, identity: &[&str], what: &str) -> f64 {
    let s = seed.unwrap_or(0);
    let mut key: Vec<&str> = identity.to_vec();
    key.push(what);
    let u1 = unit(s, &key);
    key.push("2");
    spread.sample(u1, unit(s, &key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    /// The integral agrees with a fine numeric sum of the factor.
    fn check_integral(c: &Curve, until: f64) {
        let dt = 0.001;
        let mut sum = 0.0;
        let mut t = 0.0;
        while t < until {
            sum += c.factor(t + dt / 2.0) * dt;
            t += dt;
        }
        assert!(
            (c.integral(until) - sum).abs() < 1e-3 * until.max(1.0),
            "{c:?} at {until}: {} vs {sum}",
            c.integral(until)
        );
    }

    #[test]
    fn shapes_and_their_integrals_agree() {
        let shapes = [
            Curve::Constant,
            Curve::Ramp { from: 0.1, to: 2.0, over: 30.0 },
            Curve::Wave { low: 0.2, high: 1.5, period: 20.0 },
            Curve::Steps(vec![(0.0, 0.1), (10.0, 1.0), (25.0, 0.3)]),
            Curve::Steps(vec![(5.0, 2.0)]),
        ];
        for c in &shapes {
            for until in [0.0, 3.0, 12.5, 40.0] {
                check_integral(c, until);
            }
        }
        let ramp = &shapes[1];
        assert!(close(ramp.factor(0.0), 0.1) && close(ramp.factor(15.0), 1.05) && close(ramp.factor(99.0), 2.0));
        assert!(close(shapes[3].factor(12.0), 1.0) && close(shapes[4].factor(1.0), 1.0));
    }

    #[test]
    fn amounts_and_shapes_say_what_is_wrong() {
        let a: Amount = serde_json::from_value(serde_json::json!({"min": "500m", "max": "100m"})).unwrap();
        assert!(a.spread().unwrap_err().starts_with(".min:"));
        let a: Amount = serde_json::from_value(serde_json::json!({"fixed": "lots"})).unwrap();
        assert!(a.spread().unwrap_err().contains("not a quantity"));
        let a: Amount = serde_json::from_value(serde_json::json!({"fixed": "250m"})).unwrap();
        assert_eq!(a.spread().unwrap(), Spread::Fixed(0.25));
        let s: Shape =
            serde_json::from_value(serde_json::json!({"ramp": {"from": 0, "to": 1, "over": "forever"}})).unwrap();
        assert!(s.curve().unwrap_err().starts_with(".ramp.over:"));
        let u: Usage = serde_json::from_value(serde_json::json!({"cpu": {"mean": "1", "stddev": "x"}})).unwrap();
        assert_eq!(
            problems(Some(&u), None, None)[0],
            ".pods.usage.cpu.stddev: \"x\" is not a quantity such as 250m, 2 or 128Mi"
        );
    }

    #[test]
    fn levels_repeat_by_identity_and_spread() {
        let s = Spread::Uniform(0.1, 0.5);
        let a = level(&s, Some(7), &["ns", "web-0", "app"], "cpu");
        assert_eq!(a, level(&s, Some(7), &["ns", "web-0", "app"], "cpu"));
        assert!((0.1..=0.5).contains(&a));
        let many: Vec<f64> = (0..200).map(|i| level(&s, Some(7), &["ns", &format!("web-{i}"), "app"], "cpu")).collect();
        let mean = many.iter().sum::<f64>() / many.len() as f64;
        assert!((0.25..0.35).contains(&mean), "{mean}");
    }
}
