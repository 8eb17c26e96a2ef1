//! The kubelet's event recorder: events.k8s.io Events about pods, a repeat of one (same
//! object, type, reason and action) within six minutes patched into its event's series, as
//! client-go's recorder aggregates — remembering at most the last 4,096 events, as its
//! correlator's LRU cache does. kube-runtime's `Recorder` keeps every event for six minutes
//! and scans them all on each publish: with 10,000 pods starting, three Normal events each,
//! that cost 13 CPU-s and 150 MiB more than the pods themselves (`make bench
//! BENCH_ARGS=events`). Here a publish is one cache lookup.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

/// How many recent events repeats are looked for among (client-go's `maxLruCacheEntries`).
const REMEMBERED: usize = 4096;
/// How long after its last occurrence a repeat still joins an event's series.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// What makes two events one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    uid: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    warning: bool,
    reason: String,
    action: String,
}

#[derive(Clone)]
pub struct KubeletRecorder {
    client: kube::Client,
    controller: String,
    recent: Arc<Mutex<lru::LruCache<Key, K8sEvent>>>,
}

impl KubeletRecorder {
    pub fn new(client: kube::Client, controller: &str) -> Self {
        let size = NonZeroUsize::new(REMEMBERED).unwrap_or(NonZeroUsize::MIN);
        Self { client, controller: controller.to_string(), recent: Arc::new(Mutex::new(lru::LruCache::new(size))) }
    }

    /// Publishes `ev` about `regarding`: a new Event, or its series one more (a patch).
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key {
            uid: regarding.uid.clone(),
            namespace: regarding.namespace.clone(),
            name: regarding.name.clone(),
            warning: matches!(ev.type_, EventType::Warning),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
        };
        let seen = crate::sync::lock(&self.recent).get(&key).cloned().filter(|e| within(e, now));
        let ns = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &ns);
        let event = match seen {
            Some(mut e) => {
                let count = e.series.as_ref().map_or(2, |s| s.count + 1);
                e.series = Some(EventSeries { count, last_observed_time: MicroTime(now) });
                e.note.clone_from(&ev.note);
                let name = e.metadata.name.clone().unwrap_or_default();
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&e)).await?;
                e
            }
            None => {
                let e = self.event(ev, regarding, now);
                api.create(&PostParams::default(), &e).await?;
                e
            }
        };
        crate::sync::lock(&self.recent).put(key, event);
        Ok(())
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let object = regarding.name.clone().unwrap_or_else(|| self.controller.clone());
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.controller.clone()),
            type_: Some(if matches!(ev.type_, EventType::Warning) { "Warning" } else { "Normal" }.into()),
            related: ev.secondary.clone(),
            ..Default::default()
        }
    }
}

/// Whether a repeat at `now` still joins `e`'s series.
fn within(e: &K8sEvent, now: Timestamp) -> bool {
    let last = e.series.as_ref().map(|s| s.last_observed_time.0).or(e.event_time.as_ref().map(|t| t.0));
    last.is_some_and(|t| t + SERIES_WINDOW > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_joins_the_series_only_within_six_minutes() {
        let now = Timestamp::now();
        let fresh = K8sEvent { event_time: Some(MicroTime(now - SignedDuration::from_mins(5))), ..Default::default() };
        assert!(within(&fresh, now));
        let old = K8sEvent { event_time: Some(MicroTime(now - SignedDuration::from_mins(7))), ..Default::default() };
        assert!(!within(&old, now));
        let series = K8sEvent {
            series: Some(EventSeries { count: 3, last_observed_time: MicroTime(now - SignedDuration::from_mins(1)) }),
            ..old
        };
        assert!(within(&series, now), "a series counts from its last occurrence");
    }
}
