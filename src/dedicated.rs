//! Work that must not wait behind the rest of the process: a thread of its own with a
//! single-threaded runtime. Give such work its own Kubernetes client too (built on that
//! runtime), or its requests queue behind the others' on the shared client.
//!
//! Used for the simulator shard membership: when the simulator is busiest (thousands of nodes
//! coming up on a loaded API server) is exactly when a late membership renewal would make the
//! other replicas take this one's nodes for a moment.

use std::future::Future;
use tokio::sync::oneshot;

/// A dedicated thread that cannot be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the {what} thread: {source}")]
pub struct ThreadError {
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

/// Starts `work` on a thread named `name`. The receiver resolves when the work ends (with
/// `Err` if it panicked or its runtime could not start).
pub fn spawn<F, Fut>(name: &str, work: F) -> std::io::Result<oneshot::Receiver<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let (done, ended) = oneshot::channel();
    let what = name.to_string();
    std::thread::Builder::new().name(name.to_string()).spawn(
        move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => {
                runtime.block_on(work());
                let _ = done.send(());
            }
            Err(e) => tracing::error!(error = %e, thread = %what, "cannot start a runtime for this thread"),
        },
    )?;
    Ok(ended)
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn work_runs_apart_and_its_end_is_seen() {
        let main_thread = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        let ended = super::spawn("apart", move || async move {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            tx.send(std::thread::current().id()).unwrap();
        })
        .unwrap();
        assert!(ended.await.is_ok());
        assert_ne!(rx.recv().unwrap(), main_thread);
    }

    #[tokio::test]
    async fn a_panic_is_seen_as_an_end() {
        let ended = super::spawn("dies", || async { panic!("on purpose") }).unwrap();
        assert!(ended.await.is_err());
    }
}
