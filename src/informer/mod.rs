//! One watch per kind, shared: a reflector store that controllers and the simulator read, and
//! a fan-out of changes (including deletions, which kube's shared streams do not carry) to
//! every subscriber. Objects are trimmed or converted to a compact form (see [`pod::SlimPod`])
//! before they are stored, so memory grows with what the operator must remember, not with
//! whole objects.

pub mod pod;
pub mod registry;
pub mod shared;

pub use registry::Informers;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// A change seen on the watch.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// Created or modified (or listed again after a re-list).
    Applied(Arc<K>),
    /// Deleted (or found missing after a re-list).
    Deleted(Arc<K>),
    /// The store holds a complete list (after the first list and after each re-list).
    Synced,
}

pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    reader: Store<K>,
    writer: Mutex<Option<reflector::store::Writer<K>>>,
    subscribers: Arc<Mutex<Vec<UnboundedSender<Change<K>>>>>,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    pub fn new() -> Arc<Self> {
        let writer = reflector::store::Writer::<K>::default();
        Arc::new(Self { reader: writer.as_reader(), writer: Mutex::new(Some(writer)), subscribers: Arc::default() })
    }

    pub fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// A receiver of every change from now on. Subscribe before [`Informer::start`] to see
    /// the first list.
    pub fn subscribe(&self) -> UnboundedReceiver<Change<K>> {
        let (tx, rx) = unbounded_channel();
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        rx
    }

    /// Starts watching `api`. `convert` turns each object into what is stored (trimming what
    /// nobody reads).
    pub fn start<W>(self: &Arc<Self>, api: Api<W>, config: watcher::Config, convert: fn(W) -> K)
    where
        W: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let Some(mut writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            tracing::warn!(kind = %K::kind(&()), "informer started twice");
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let kind = W::kind(&()).to_string();
            let mut stream = watcher(api, config).default_backoff().boxed();
            // What the current list holds, with UIDs: an object replaced under the same name
            // while the watch was down counts as deleted too.
            let mut listing: HashMap<ObjectRef<K>, Option<String>> = HashMap::new();
            while let Some(next) = stream.next().await {
                let event: Event<K> = match next {
                    Ok(Event::Apply(obj)) => Event::Apply(convert(obj)),
                    Ok(Event::InitApply(obj)) => Event::InitApply(convert(obj)),
                    Ok(Event::Delete(obj)) => Event::Delete(convert(obj)),
                    Ok(Event::Init) => Event::Init,
                    Ok(Event::InitDone) => Event::InitDone,
                    Err(e) => {
                        tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff");
                        continue;
                    }
                };
                match &event {
                    Event::Init => listing.clear(),
                    Event::InitApply(obj) => {
                        listing.insert(ObjectRef::from_obj(obj), obj.meta().uid.clone());
                    }
                    Event::InitDone => {
                        // Objects that were stored but are not in the new list are gone.
                        let gone: Vec<Arc<K>> = this
                            .reader
                            .state()
                            .into_iter()
                            .filter(|o| listing.get(&ObjectRef::from_obj(o.as_ref())) != Some(&o.meta().uid))
                            .collect();
                        writer.apply_watcher_event(&event);
                        for obj in gone {
                            this.send(Change::Deleted(obj));
                        }
                        for obj in this.reader.state() {
                            this.send(Change::Applied(obj));
                        }
                        this.send(Change::Synced);
                        listing.clear();
                        continue;
                    }
                    _ => {}
                }
                writer.apply_watcher_event(&event);
                match event {
                    Event::Apply(obj) => {
                        let stored = this.reader.get(&ObjectRef::from_obj(&obj)).unwrap_or_else(|| Arc::new(obj));
                        this.send(Change::Applied(stored));
                    }
                    Event::Delete(obj) => this.send(Change::Deleted(Arc::new(obj))),
                    _ => {}
                }
            }
        });
    }

    fn send(&self, change: Change<K>) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|tx| tx.send(change.clone()).is_ok());
    }
}

use kube::runtime::watcher::watcher;

/// Stores the object as it is, less [`trim_meta`].
pub fn trimmed<K: Resource>(mut obj: K) -> K {
    trim_meta(&mut obj);
    obj
}

/// Drops managedFields and the last-applied annotation: the largest parts of most objects,
/// and nothing the operator reads.
pub fn trim_meta<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
