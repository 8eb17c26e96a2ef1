//! Limits a hostile or broken client cannot push past on a port the operator serves (the
//! webhook, the simulated kubelets' API): established connections are bounded, and a handshake
//! in progress takes no slot.

use axum_server::accept::Accept;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// An acceptor that completes the TLS handshake (within its timeout, taking no slot), then lets
/// at most `max` established connections be open at once; a connection beyond that is closed.
#[derive(Clone)]
pub struct ConnectionLimit<A> {
    permits: Arc<Semaphore>,
    inner: A,
    /// What is served (in the warning when the limit is reached).
    what: &'static str,
}

impl<A> ConnectionLimit<A> {
    pub fn new(what: &'static str, max: usize, inner: A) -> Self {
        Self { permits: Arc::new(Semaphore::new(max.max(1))), inner, what }
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
        let (permits, self_what) = (self.permits.clone(), self.what);
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            match permits.try_acquire_owned() {
                Ok(permit) => Ok((stream, Held { inner: service, _permit: Arc::new(permit) })),
                Err(_) => {
                    tracing::warn!(what = self_what, "connection limit reached; a connection was closed");
                    Err(std::io::Error::other("too many connections"))
                }
            }
        })
    }
}

/// A connection's service, holding its connection permit for as long as the connection lives.
#[derive(Clone)]
pub struct Held<S> {
    inner: S,
    _permit: Arc<OwnedSemaphorePermit>,
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
