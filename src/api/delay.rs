//! How long something takes (`Delay`: fixed, uniform or normal, or read from an annotation),
//! its parsed distribution and sampling, and the schema pieces and rules every knob shares
//! (durations, percentages). A leaf: the lifecycle and cloud knobs are built from it.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::duration::{DURATION_PATTERN, MAX_DURATION, parse_duration};

/// How long something takes: `fixed`, uniform between `min` and `max`, or normal around
/// `mean` with `stddev` (never below zero). Durations are written `500ms`, `2s`, `1m30s`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.fixed), has(self.min) || has(self.max), has(self.mean) || has(self.stddev)].filter(x, x).size() == (has(self.fromAnnotation) ? 0 : 1) || (has(self.fromAnnotation) && [has(self.fixed), has(self.min) || has(self.max), has(self.mean) || has(self.stddev)].filter(x, x).size() == 1)")
    .message("set exactly one of: fixed, min and max, mean and stddev (with fromAnnotation, at most one: what a pod without the annotation takes)"))]
#[x_kube(validation = Rule::new("has(self.min) == has(self.max)").message("min and max go together"))]
#[x_kube(validation = Rule::new("has(self.mean) == has(self.stddev)").message("mean and stddev go together"))]
pub struct Delay {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub fixed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub max: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub mean: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub stddev: Option<String>,
    /// Read the delay from this annotation of the pod, as kwok's `durationFrom` does: a
    /// duration (`30s`, `1m30s`) or a time (RFC 3339: the delay runs until then). With `min`
    /// and `max`, `max` is kwok's jitter: the delay is drawn between the annotation's value
    /// and `max` (or is `max` when that is not longer). A pod without the annotation, or with
    /// a value that does not read, takes the other fields, else no delay. Pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub from_annotation: Option<String>,
}

pub fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 32,
        "pattern": DURATION_PATTERN,
    })
}

pub fn percent_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 0, "maximum": 100})
}

/// A Delay with its durations parsed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    Fixed(Duration),
    Uniform(Duration, Duration),
    Normal { mean: Duration, stddev: Duration },
}

impl Delay {
    /// The distribution, or what is wrong with it (each message starts with the field, e.g.
    /// `.min: …`).
    pub fn distribution(&self) -> Result<Distribution, String> {
        let d = |field: &str, v: &Option<String>| -> Result<Option<Duration>, String> {
            match v {
                None => Ok(None),
                Some(t) => parse_duration(t).map(Some).ok_or_else(|| {
                    format!(".{field}: {t:?} is not a duration such as 500ms, 2s or 1m30s (at most 24h)")
                }),
            }
        };
        let (fixed, min, max) = (d("fixed", &self.fixed)?, d("min", &self.min)?, d("max", &self.max)?);
        let (mean, stddev) = (d("mean", &self.mean)?, d("stddev", &self.stddev)?);
        match (fixed, min, max, mean, stddev) {
            (Some(f), None, None, None, None) => Ok(Distribution::Fixed(f)),
            (None, Some(lo), Some(hi), None, None) if lo <= hi => Ok(Distribution::Uniform(lo, hi)),
            (None, Some(lo), Some(hi), None, None) => {
                Err(format!(".min: {lo:?} is more than max ({hi:?}): min must not exceed max"))
            }
            (None, None, None, Some(mean), Some(stddev)) => Ok(Distribution::Normal { mean, stddev }),
            // Read from the object; without it, no delay.
            (None, None, None, None, None) if self.from_annotation.is_some() => Ok(Distribution::Fixed(Duration::ZERO)),
            _ => Err(": set exactly one of: fixed, min and max, mean and stddev".into()),
        }
    }
}

impl Distribution {
    /// The longest a sample runs in practice: the fixed value, the maximum, or the mean plus
    /// three standard deviations.
    pub fn longest(&self) -> Duration {
        match *self {
            Distribution::Fixed(d) => d,
            Distribution::Uniform(_, hi) => hi,
            Distribution::Normal { mean, stddev } => (mean + stddev * 3).min(MAX_DURATION),
        }
    }

    /// A sample from two uniform numbers in [0, 1): deterministic for the same numbers.
    pub fn sample(&self, u1: f64, u2: f64) -> Duration {
        match *self {
            Distribution::Fixed(d) => d,
            Distribution::Uniform(lo, hi) => lo + (hi - lo).mul_f64(u1.clamp(0.0, 1.0)),
            Distribution::Normal { mean, stddev } => {
                // Box-Muller; u1 is kept away from 0 so the logarithm stays finite.
                let z = (-2.0 * (1.0 - u1).max(1e-12).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let secs = mean.as_secs_f64() + z * stddev.as_secs_f64();
                Duration::from_secs_f64(secs.clamp(0.0, MAX_DURATION.as_secs_f64()))
            }
        }
    }
}

/// `.{path}` and what is wrong when `d` is not one distribution of readable durations.
pub fn delay_problem(path: &str, d: Option<&Delay>) -> Option<String> {
    d?.distribution().err().map(|e| format!(".{path}{e}"))
}

/// `.{path}` and what is wrong when `v` is over 100.
pub fn percent(path: &str, v: Option<u8>) -> Option<String> {
    v.filter(|v| *v > 100).map(|v| format!(".{path}: {v} is not a percentage from 0 to 100"))
}
