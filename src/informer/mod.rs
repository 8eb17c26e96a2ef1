//! One watch per kind, shared: a reflector store that controllers and the simulator read, and
//! a fan-out of changes (including deletions, which kube's shared streams do not carry) to
//! every subscriber. Objects are trimmed or converted to a compact form (see [`pod::SlimPod`])
//! before they are stored, so memory grows with what the operator must remember, not with
//! whole objects.

#[cfg(test)]
pub mod fixtures;
pub mod health;
pub mod owners;
pub mod pod;
pub mod registry;
pub mod shape;
pub mod shared;
pub mod volumes;

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
    state: Mutex<health::WatchState>,
    relist: tokio::sync::Notify,
    /// The stored objects by controller owner, for the owner kinds asked for.
    owners: owners::Owners<K>,
}

/// Marks the informer's watch as ended when dropped (its task is over).
struct Ended<K: Resource<DynamicType = ()> + Clone + 'static>(Arc<Informer<K>>);

impl<K: Resource<DynamicType = ()> + Clone + 'static> Ended<K> {
    fn mark(&self, how: &str) {
        tracing::error!(kind = %K::kind(&()), how, "a watch task ended; the operator is no longer healthy");
        crate::sync::lock(&self.0.state).ended = true;
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Drop for Ended<K> {
    fn drop(&mut self) {
        // A task cancelled at shutdown is not a failure; one that unwinds is.
        if std::thread::panicking() {
            self.mark("panicked");
        }
    }
}

/// What an informer stores (the rest of what it watches is dropped on arrival).
pub type Keep<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

/// An informer seen without its type: what `/readyz` asks.
pub trait Watched: Send + Sync {
    /// The plural of what it watches.
    fn watched(&self) -> String;
    fn state(&self) -> health::WatchState;
    /// Objects in its store.
    fn cached(&self) -> usize;
}

impl<K> Watched for Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn watched(&self) -> String {
        K::plural(&()).to_string()
    }

    fn state(&self) -> health::WatchState {
        crate::sync::lock(&self.state).clone()
    }

    fn cached(&self) -> usize {
        self.reader.len()
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    pub fn new() -> Arc<Self> {
        let writer = reflector::store::Writer::<K>::default();
        Arc::new(Self {
            reader: writer.as_reader(),
            writer: Mutex::new(Some(writer)),
            subscribers: Arc::default(),
            state: Mutex::default(),
            relist: tokio::sync::Notify::new(),
            owners: Arc::default(),
        })
    }

    /// The stored objects indexed by their controller owner's UID, for owners of `kind` (kept
    /// up to date with the store from now on, before each change is sent).
    pub fn index_owners(&self, kind: &str) -> owners::Owners<K> {
        crate::sync::lock(&self.owners).add_kind(kind, self.reader.state().iter());
        self.owners.clone()
    }

    fn index(&self, f: impl FnOnce(&mut owners::OwnerIndex<K>)) {
        f(&mut crate::sync::lock(&self.owners));
    }

    pub fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// A receiver of every change from now on. Subscribe before [`Informer::start`] to see
    /// the first list.
    pub fn subscribe(&self) -> UnboundedReceiver<Change<K>> {
        let (tx, rx) = unbounded_channel();
        crate::sync::lock(&self.subscribers).push(tx);
        rx
    }

    /// Starts watching `api`. `convert` turns each object into what is stored (trimming what
    /// nobody reads).
    pub fn start<W>(
        self: &Arc<Self>,
        api: Api<W>,
        config: watcher::Config,
        convert: impl Fn(W) -> K + Send + Sync + 'static,
    ) where
        W: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        self.start_filtered(api, config, convert, None);
    }

    /// Lists and watches again from scratch (e.g. when what `keep` keeps grew).
    pub fn relist(&self) {
        self.relist.notify_one();
    }

    /// [`Informer::start`], storing only what `keep` keeps (an object that stops being kept
    /// leaves the store as if deleted).
    pub fn start_filtered<W>(
        self: &Arc<Self>,
        api: Api<W>,
        config: watcher::Config,
        convert: impl Fn(W) -> K + Send + Sync + 'static,
        keep: Option<Keep<K>>,
    ) where
        W: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let Some(mut writer) = crate::sync::lock(&self.writer).take() else {
            tracing::warn!(kind = %K::kind(&()), "informer started twice");
            return;
        };
        let this = self.clone();
        let kept = move |obj: &K| keep.as_ref().is_none_or(|k| k(obj));
        tokio::spawn(async move {
            let kind = W::kind(&()).to_string();
            // However the task ends (a panic included), the store stops being fed: say so.
            let ended = Ended(this.clone());
            let watch =
                move || watcher(api.clone(), config.clone()).backoff(crate::backoff::WatchBackoff::default()).boxed();
            let mut stream = watch();
            // What the current list holds, with UIDs: an object replaced under the same name
            // while the watch was down counts as deleted too.
            let mut listing: HashMap<ObjectRef<K>, Option<String>> = HashMap::new();
            loop {
                let next = tokio::select! {
                    next = stream.next() => match next { Some(next) => next, None => break },
                    () = this.relist.notified() => {
                        tracing::info!(%kind, "listing again");
                        stream = watch();
                        continue;
                    }
                };
                let event: Event<K> = match next {
                    Ok(event) => match admit(event, &convert, &kept, &this.reader) {
                        Some(event) => event,
                        None => continue,
                    },
                    Err(e) => {
                        let advice = health::advice(&kind, &e);
                        tracing::warn!(%kind, error = %advice, "watch failed; retrying with backoff");
                        this.set_state(|s| s.failed(advice, std::time::Instant::now()));
                        continue;
                    }
                };
                this.set_state(if matches!(event, Event::InitDone) {
                    health::WatchState::synced
                } else {
                    health::WatchState::ok
                });
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
                        this.index(|i| i.rebuild(this.reader.state().iter()));
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
                this.store_and_send(&mut writer, event);
            }
            ended.mark("its stream ended");
        });
    }

    /// Stores a watch event, indexes it by owner and sends the change, in that order.
    fn store_and_send(&self, writer: &mut reflector::store::Writer<K>, event: Event<K>) {
        let old = match &event {
            Event::Apply(obj) => self.reader.get(&ObjectRef::from_obj(obj)),
            _ => None,
        };
        writer.apply_watcher_event(&event);
        match event {
            Event::Apply(obj) => {
                let stored = self.reader.get(&ObjectRef::from_obj(&obj)).unwrap_or_else(|| Arc::new(obj));
                self.index(|i| i.applied(old.as_deref(), &stored));
                self.send(Change::Applied(stored));
            }
            Event::Delete(obj) => {
                self.index(|i| i.deleted(&obj));
                self.send(Change::Deleted(Arc::new(obj)));
            }
            _ => {}
        }
    }

    fn set_state(&self, f: impl FnOnce(&mut health::WatchState)) {
        f(&mut crate::sync::lock(&self.state));
    }

    fn send(&self, change: Change<K>) {
        let mut subs = crate::sync::lock(&self.subscribers);
        subs.retain(|tx| tx.send(change.clone()).is_ok());
    }
}

use kube::runtime::watcher::watcher;

/// A watch event as it is stored: converted, and what `kept` refuses dropped (a change that
/// makes a stored object no longer kept is its deletion).
fn admit<W, K>(
    event: Event<W>,
    convert: &impl Fn(W) -> K,
    kept: &impl Fn(&K) -> bool,
    store: &Store<K>,
) -> Option<Event<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    Some(match event {
        Event::Apply(obj) => {
            let obj = convert(obj);
            if kept(&obj) {
                Event::Apply(obj)
            } else if store.get(&ObjectRef::from_obj(&obj)).is_some() {
                Event::Delete(obj)
            } else {
                return None;
            }
        }
        Event::InitApply(obj) => {
            let obj = convert(obj);
            if !kept(&obj) {
                return None;
            }
            Event::InitApply(obj)
        }
        Event::Delete(obj) => Event::Delete(convert(obj)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    })
}

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

/// A store that closed before its first list (the process is stopping).
#[derive(Debug, thiserror::Error)]
#[error("the {what} store closed before syncing: {source}")]
pub struct SyncError {
    pub what: String,
    #[source]
    pub source: kube::runtime::reflector::store::WriterDropped,
}

/// A wait for one store's first list.
pub type SyncWait = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), SyncError>> + Send>>;

/// Waits for a store to sync, printing progress every few seconds.
pub async fn wait_synced<K>(what: &str, store: &Store<K>) -> Result<(), SyncError>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let start = std::time::Instant::now();
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(5), store.wait_until_ready()).await {
            Ok(Ok(())) => {
                tracing::info!(what, objects = store.len(), took = ?start.elapsed(), "store synced");
                return Ok(());
            }
            Ok(Err(source)) => return Err(SyncError { what: what.to_string(), source }),
            Err(_) => {
                tracing::info!(what, waited = ?start.elapsed(), "still waiting for the first list of {what} (is the API server reachable? are the CRDs installed?)")
            }
        }
    }
}

/// [`wait_synced`] as a [`SyncWait`].
pub fn sync_wait<K>(what: String, store: Store<K>) -> SyncWait
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(async move { wait_synced(&what, &store).await })
}
