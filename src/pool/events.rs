//! Kubernetes Events on pools, for `kubectl describe` readers: scaling and rolling started,
//! the pool ready again, and every problem (invalid spec, name conflict, range exhausted,
//! failed writes) when it first appears. Events come from condition changes between the
//! status a pool had and the one written, so a steady pool emits nothing; a limiter keeps a
//! flapping pool to one event per reason per pool every [`MIN_INTERVAL`].

use crate::api::common::{PoolStatus, conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The least time between two events with one reason on one pool.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

fn find<'a>(status: Option<&'a PoolStatus>, type_: &str) -> Option<&'a Condition> {
    status?.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` turned True, or changed reason while True.
fn turned_true<'a>(before: Option<&PoolStatus>, after: &'a PoolStatus, type_: &str) -> Option<&'a Condition> {
    let now = find(Some(after), type_).filter(|c| c.status == "True")?;
    let was = find(before, type_);
    let same = was.is_some_and(|w| w.status == "True" && w.reason == now.reason);
    (!same).then_some(now)
}

/// The events a status change is worth.
pub fn changes(before: Option<&PoolStatus>, after: &PoolStatus) -> Vec<PoolEvent> {
    let mut out = Vec::new();
    if let Some(c) = turned_true(before, after, conditions::DEGRADED) {
        out.push(PoolEvent { warning: true, reason: c.reason.clone(), note: c.message.clone() });
    }
    if let Some(c) = turned_true(before, after, conditions::PROGRESSING) {
        out.push(PoolEvent { warning: false, reason: c.reason.clone(), note: c.message.clone() });
    }
    // Ready again after a change (not on the very first status: creation says enough).
    if before.is_some_and(|b| !b.conditions.is_empty())
        && let Some(c) = turned_true(before, after, conditions::READY)
    {
        out.push(PoolEvent { warning: false, reason: c.reason.clone(), note: c.message.clone() });
    }
    out
}

/// At most one event per (pool, reason) per interval.
#[derive(Default)]
pub struct Limiter {
    last: Mutex<HashMap<(String, String), Instant>>,
}

impl Limiter {
    pub fn allow(&self, pool_uid: &str, reason: &str, now: Instant, interval: Duration) -> bool {
        let mut last = crate::sync::lock(&self.last);
        // Forget what no longer limits anything, so the map stays as small as the pools.
        if last.len() > 4096 {
            last.retain(|_, at| now.duration_since(*at) < interval);
        }
        let key = (pool_uid.to_string(), reason.to_string());
        match last.get(&key) {
            Some(at) if now.duration_since(*at) < interval => false,
            _ => {
                last.insert(key, now);
                true
            }
        }
    }
}

/// Publishes pool events (in the background: a reconcile never waits for an event).
pub struct Events {
    recorder: Recorder,
    limiter: Limiter,
}

impl Events {
    pub fn new(client: kube::Client, instance: &str) -> Self {
        let reporter = Reporter { controller: "kwok-pools".into(), instance: Some(instance.to_string()) };
        Self { recorder: Recorder::new(client, reporter), limiter: Limiter::default() }
    }

    pub fn emit(&self, reference: k8s_openapi::api::core::v1::ObjectReference, uid: &str, events: Vec<PoolEvent>) {
        for e in events {
            if !self.limiter.allow(uid, &e.reason, Instant::now(), MIN_INTERVAL) {
                continue;
            }
            let recorder = self.recorder.clone();
            let reference = reference.clone();
            tokio::spawn(async move {
                let ev = Event {
                    type_: if e.warning { EventType::Warning } else { EventType::Normal },
                    reason: e.reason,
                    note: Some(e.note.chars().take(1024).collect()),
                    action: "Reconcile".into(),
                    secondary: None,
                };
                if let Err(err) = recorder.publish(&ev, &reference).await {
                    tracing::debug!(error = %err, "pool event not published (the operator needs create on events)");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} {reason}"),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn status(conds: &[(&str, &str, &str)]) -> PoolStatus {
        PoolStatus { conditions: conds.iter().map(|(t, s, r)| cond(t, s, r)).collect(), ..Default::default() }
    }

    fn reasons(e: &[PoolEvent]) -> Vec<(&str, bool)> {
        e.iter().map(|e| (e.reason.as_str(), e.warning)).collect()
    }

    #[test]
    fn scaling_then_ready_then_nothing() {
        let ready =
            status(&[("Ready", "True", "AllReady"), ("Progressing", "False", "Idle"), ("Degraded", "False", "Ok")]);
        let scaling = status(&[
            ("Ready", "False", "NotAllReady"),
            ("Progressing", "True", "ScalingUp"),
            ("Degraded", "False", "Ok"),
        ]);
        assert_eq!(reasons(&changes(Some(&ready), &scaling)), vec![("ScalingUp", false)]);
        assert_eq!(reasons(&changes(Some(&scaling), &ready)), vec![("AllReady", false)]);
        assert!(changes(Some(&ready), &ready).is_empty());
        assert!(changes(Some(&scaling), &scaling).is_empty());
    }

    #[test]
    fn problems_are_warnings_once_and_again_when_the_reason_changes() {
        let ok = status(&[("Degraded", "False", "Ok")]);
        let bad = status(&[("Degraded", "True", "NameConflict")]);
        let worse = status(&[("Degraded", "True", "RangeExhausted")]);
        assert_eq!(reasons(&changes(Some(&ok), &bad)), vec![("NameConflict", true)]);
        assert!(changes(Some(&bad), &bad).is_empty());
        assert_eq!(reasons(&changes(Some(&bad), &worse)), vec![("RangeExhausted", true)]);
        assert_eq!(reasons(&changes(None, &bad)), vec![("NameConflict", true)]);
    }

    #[test]
    fn limiter_allows_one_per_reason_per_interval() {
        let l = Limiter::default();
        let t0 = Instant::now();
        assert!(l.allow("u", "ScalingUp", t0, MIN_INTERVAL));
        assert!(!l.allow("u", "ScalingUp", t0 + Duration::from_secs(5), MIN_INTERVAL));
        assert!(l.allow("u", "RollingUpdate", t0 + Duration::from_secs(5), MIN_INTERVAL));
        assert!(l.allow("v", "ScalingUp", t0 + Duration::from_secs(5), MIN_INTERVAL));
        assert!(l.allow("u", "ScalingUp", t0 + MIN_INTERVAL, MIN_INTERVAL));
    }
}
