//! Child changes wake their pools at most once per period each, and every change is followed
//! by a wake within one period (the trailing edge is never lost).
//!
//! kube-runtime's `debounce` does the opposite under a steady stream: each trigger pushes the
//! pool's pending reconcile back by the whole debounce, so a pool whose children change more
//! often than that is not reconciled at all until they pause. Creating a NodePool of 5,000
//! showed it: the controller manager patches each new node's taints at hundreds a second,
//! and every round of creations waited seconds for that stream to pause.

use super::PoolKind;
use crate::api::conventions::SIMULATOR_CONFLICT_ANNOTATION;
use futures::{Stream, StreamExt};
use kube::{Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What a pool's reconcile reads of a child — whose it is, its template hash, whether it is
/// ready, terminating, finished or failing, and its simulator conflict — as a hash. Nothing
/// else of a child changes a pool's plan or status, so a change of anything else (a node's
/// status heartbeat, a pod's probe time) wakes no pool.
fn child_view<P: PoolKind>(child: &P::Stored) -> u64 {
    let mut h = DefaultHasher::new();
    child.meta().uid.hash(&mut h);
    for owner in child.owner_references().iter().filter(|o| o.controller == Some(true)) {
        owner.uid.hash(&mut h);
    }
    P::child_hash(child).hash(&mut h);
    P::is_ready(child).hash(&mut h);
    child.meta().deletion_timestamp.is_some().hash(&mut h);
    P::is_finished(child).hash(&mut h);
    P::is_failing(child).hash(&mut h);
    child.annotations().get(SIMULATOR_CONFLICT_ANNOTATION).hash(&mut h);
    h.finish()
}

/// The last view ([`child_view`]) of each child that woke its pools, by the child's
/// namespace and name (hashed: a few dozen bytes a child).
#[derive(Default)]
pub struct Views(HashMap<u64, u64>);

fn key<C: Resource>(child: &C) -> u64 {
    let mut h = DefaultHasher::new();
    child.meta().namespace.hash(&mut h);
    child.meta().name.hash(&mut h);
    h.finish()
}

impl Views {
    /// Whether `child` looks different to its pools than when it last woke them (a child
    /// not seen before does); remembers how it looks now.
    pub fn changed<P: PoolKind>(&mut self, child: &P::Stored) -> bool {
        let view = child_view::<P>(child);
        self.0.insert(key(child), view) != Some(view)
    }

    /// Forgets a deleted child.
    pub fn forget<C: Resource>(&mut self, child: &C) {
        self.0.remove(&key(child));
    }
}

/// `input` with repeats of a key within `period` folded into one, emitted at the end of the
/// period in which the key last came (and all that is waiting when `input` ends).
pub fn coalesce<K, S>(input: S, period: Duration) -> impl Stream<Item = K> + Send + 'static
where
    S: Stream<Item = K> + Send + 'static,
    K: Hash + Eq + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut input = std::pin::pin!(input);
        let mut waiting: HashSet<K> = HashSet::new();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                item = input.next() => match item {
                    Some(key) => {
                        waiting.insert(key);
                    }
                    None => break,
                },
                _ = tick.tick(), if !waiting.is_empty() => {
                    for key in waiting.drain() {
                        if tx.send(key).is_err() {
                            return; // nobody listens any more
                        }
                    }
                }
            }
        }
        for key in waiting.drain() {
            let _ = tx.send(key);
        }
    });
    UnboundedReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    // Real time (tokio's paused clock needs its test-util feature, which would also be built
    // into the binary `cargo bench` measures); the bounds leave room for a busy machine.
    use super::coalesce;
    use futures::StreamExt;
    use std::time::Duration;
    use tokio::time::Instant;

    const PERIOD: Duration = Duration::from_millis(50);

    /// Sends each of `keys` every 5 ms for `for_`, collecting what comes out and when.
    async fn steady(keys: &[&'static str], for_: Duration) -> Vec<(Duration, &'static str)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
        let mut out = coalesce(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), PERIOD);
        let start = Instant::now();
        let keys = keys.to_vec();
        tokio::spawn(async move {
            while start.elapsed() < for_ {
                for k in &keys {
                    let _ = tx.send(*k);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut seen = Vec::new();
        while let Some(k) = out.next().await {
            seen.push((start.elapsed(), k));
        }
        seen
    }

    #[tokio::test]
    async fn a_steady_stream_of_changes_still_wakes_the_pool_every_period() {
        let seen = steady(&["pool-a"], Duration::from_secs(1)).await;
        // ~200 changes in 1 s: about one wake per 50 ms period (20), never a starved pool,
        // never one wake per change.
        assert!((8..=30).contains(&seen.len()), "{} wakes: {seen:?}", seen.len());
        let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(gaps.iter().all(|g| *g < Duration::from_millis(400)), "a pool waited too long: {gaps:?}");
    }

    #[tokio::test]
    async fn each_pool_is_woken_on_its_own_whatever_the_others_do() {
        let seen = steady(&["a", "b", "c"], Duration::from_secs(1)).await;
        for key in ["a", "b", "c"] {
            let n = seen.iter().filter(|(_, k)| *k == key).count();
            assert!((8..=30).contains(&n), "{key}: {n} wakes in {seen:?}");
        }
    }

    #[tokio::test]
    async fn a_lone_change_wakes_at_once_and_the_last_is_never_lost() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = coalesce(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), PERIOD);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = Instant::now();
        tx.send("quiet-pool").unwrap();
        assert_eq!(out.next().await, Some("quiet-pool"));
        assert!(sent.elapsed() < Duration::from_millis(300), "woken {:?} after the change", sent.elapsed());
        tx.send("last").unwrap();
        drop(tx);
        assert_eq!(out.next().await, Some("last"), "waiting keys are flushed when the input ends");
        assert_eq!(out.next().await, None);
    }
}
