//! Limits a hostile or broken client cannot push past on a port the operator serves (the
//! webhook, the simulated kubelets' API): established connections are bounded, and a handshake
//! in progress takes no slot. The bound may follow what is served (the kubelet API's grows
//! with the nodes: metrics-server and Prometheus each keep a connection per node).

use axum_server::accept::Accept;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

/// How many connections may be open now.
pub type Bound = Arc<dyn Fn() -> usize + Send + Sync>;

/// An acceptor that completes the TLS handshake (within its timeout, taking no slot), then lets
/// at most `max` established connections be open at once; a connection beyond that is closed.
#[derive(Clone)]
pub struct ConnectionLimit<A> {
    open: Arc<AtomicUsize>,
    max: Bound,
    inner: A,
    /// What is served (in the warning when the limit is reached).
    what: &'static str,
}

impl<A> ConnectionLimit<A> {
    /// At most `max` at once.
    pub fn new(what: &'static str, max: usize, inner: A) -> Self {
        Self::following(what, Arc::new(move || max), inner)
    }

    /// At most what `max` says when a connection comes.
    pub fn following(what: &'static str, max: Bound, inner: A) -> Self {
        Self { open: Arc::new(AtomicUsize::new(0)), max, inner, what }
    }
}

/// One open connection's slot, given back when the connection ends.
pub struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot if fewer than `max` are taken.
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let max = max.max(1);
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<A, I, S> Accept<I, S> for ConnectionLimit<A>
where
    A: Accept<I, S> + Clone + Send + Sync + 'static,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
    I: Send + 'static,
    S: Send + 'static,
{
    type Stream = A::Stream;
    type Service = Held<A::Service>;
    type Future = BoxFuture<'static, std::io::Result<(A::Stream, Held<A::Service>)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let handshake = self.inner.accept(stream, service);
        let (open, max, self_what) = (self.open.clone(), self.max.clone(), self.what);
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            let limit = max();
            match Slot::take(&open, limit) {
                Some(slot) => Ok((stream, Held { inner: service, _slot: Arc::new(slot) })),
                None => {
                    tracing::warn!(what = self_what, limit, "connection limit reached; a connection was closed");
                    Err(std::io::Error::other("too many connections"))
                }
            }
        })
    }
}

/// A connection's service, holding its connection slot for as long as the connection lives.
#[derive(Clone)]
pub struct Held<S> {
    inner: S,
    _slot: Arc<Slot>,
}

impl<S: tower_service::Service<R>, R> tower_service::Service<R> for Held<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let open = Arc::new(AtomicUsize::new(0));
        let a = Slot::take(&open, 2).unwrap();
        let _b = Slot::take(&open, 2).unwrap();
        assert!(Slot::take(&open, 2).is_none(), "two of two taken");
        assert!(Slot::take(&open, 3).is_some(), "a bound that grew lets one more in");
        drop(a);
        assert_eq!(open.load(Ordering::Acquire), 1);
    }
}
