//! The shared informers of one process, by stored type: whoever needs nodes, pods, pools or
//! leases asks here, and every asker of one type gets the same watch and store. Informers
//! are created first and started together ([`Informers::start_all`]), so every subscriber
//! made during wiring sees the first list; one asked for later starts at once.

use super::Informer;
use kube::{Client, Resource};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

type Start = Box<dyn FnOnce(Client) + Send>;

pub struct Informers {
    client: Client,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_type: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    /// The same informers, for health.
    watched: Vec<Arc<dyn super::Watched>>,
    /// What the informer of a type keeps, when not everything ([`Informers::keep`]).
    keep: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    /// Pod labels and annotations kept in stored pods ([`Informers::pod_keys`]).
    pod_keys: Arc<super::pod::ReadKeys>,
    /// Starts of informers created before [`Informers::start_all`].
    waiting: Vec<Start>,
    started: bool,
}

impl Informers {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self { client, inner: Mutex::default() })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The informer of `K`, created on first use; `start` begins its watch (called once,
    /// with [`Informers::start_all`] or at once if that already ran).
    pub fn shared<K>(&self, start: impl FnOnce(&Arc<Informer<K>>, Client) + Send + 'static) -> Arc<Informer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    {
        let mut inner = crate::sync::lock(&self.inner);
        if let Some(found) = inner.by_type.get(&TypeId::of::<K>())
            && let Ok(informer) = found.clone().downcast::<Informer<K>>()
        {
            return informer;
        }
        let informer = Informer::<K>::new();
        inner.by_type.insert(TypeId::of::<K>(), informer.clone());
        inner.watched.push(informer.clone());
        let handle = informer.clone();
        let run: Start = Box::new(move |client| start(&handle, client));
        if inner.started {
            drop(inner);
            run(self.client.clone());
        } else {
            inner.waiting.push(run);
        }
        informer
    }

    /// The informer of `K` if one was asked for.
    pub fn get<K>(&self) -> Option<Arc<Informer<K>>>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    {
        let inner = crate::sync::lock(&self.inner);
        inner.by_type.get(&TypeId::of::<K>()).cloned()?.downcast::<Informer<K>>().ok()
    }

    /// Stores of `K` keep only what `keep` keeps: set before the informer is first asked for.
    pub fn keep<K: Send + Sync + 'static>(&self, keep: super::Keep<K>) {
        crate::sync::lock(&self.inner).keep.insert(TypeId::of::<K>(), Arc::new(keep));
    }

    /// Stored pods keep these labels too (someone reads them): set before pods are first asked for.
    pub fn read_pod_labels(&self, labels: &[&'static str]) {
        self.pod_keys().add_static_labels(labels);
    }

    /// The pod labels and annotations stored pods keep: the pool conventions and what was
    /// asked for, now or later (a lifecycle policy's keys; it relists the pods when it adds one).
    pub fn pod_keys(&self) -> Arc<super::pod::ReadKeys> {
        crate::sync::lock(&self.inner).pod_keys.clone()
    }

    /// What stores of `K` keep (`None`: everything).
    pub fn kept<K: Send + Sync + 'static>(&self) -> Option<super::Keep<K>> {
        let inner = crate::sync::lock(&self.inner);
        inner.keep.get(&TypeId::of::<K>())?.downcast_ref::<super::Keep<K>>().cloned()
    }

    /// What keeps the operator from being ready: watches not listed yet or failing for
    /// longer than the grace.
    pub fn problems(&self) -> Vec<String> {
        let now = std::time::Instant::now();
        self.watched()
            .iter()
            .filter_map(|w| w.state().problem(&w.watched(), now, super::health::FAILING_GRACE))
            .collect()
    }

    /// Watches whose task ended: the process is broken (`/healthz` fails, so it is restarted).
    pub fn dead(&self) -> Vec<String> {
        self.watched()
            .iter()
            .filter(|w| w.state().ended)
            .map(|w| format!("the watch of {} ended", w.watched()))
            .collect()
    }

    /// Every informer asked for so far.
    pub fn watched(&self) -> Vec<Arc<dyn super::Watched>> {
        crate::sync::lock(&self.inner).watched.clone()
    }

    /// Starts every informer created so far; later ones start when created.
    pub fn start_all(&self) {
        let waiting = {
            let mut inner = crate::sync::lock(&self.inner);
            inner.started = true;
            std::mem::take(&mut inner.waiting)
        };
        for start in waiting {
            start(self.client.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn offline_client() -> Client {
        let service = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(503).body(kube::client::Body::empty()).expect("response"),
            )
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn one_informer_per_type_started_once_and_only_when_asked() {
        let informers = Informers::new(offline_client());
        let starts = Arc::new(AtomicUsize::new(0));
        let count = |starts: &Arc<AtomicUsize>| {
            let starts = starts.clone();
            move |_: &Arc<Informer<ConfigMap>>, _: Client| {
                starts.fetch_add(1, Ordering::SeqCst);
            }
        };
        let a = informers.shared(count(&starts));
        let b = informers.shared(count(&starts));
        assert!(Arc::ptr_eq(&a, &b), "one informer per type");
        assert!(informers.get::<Secret>().is_none());
        assert_eq!(starts.load(Ordering::SeqCst), 0, "nothing starts before start_all");
        informers.start_all();
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        // Asked for after start_all: starts at once.
        let late = Arc::new(AtomicUsize::new(0));
        let l = late.clone();
        informers.shared(move |_: &Arc<Informer<Secret>>, _| {
            l.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(late.load(Ordering::SeqCst), 1);
        assert!(informers.get::<Secret>().is_some());
    }
}
