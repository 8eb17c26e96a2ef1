//! Room shared fairly between namespaces: a fixed number of seats; while any are free a writer
//! takes one at once, and once they are all taken the writers waiting are queued per namespace
//! and a seat given back goes to the next namespace in turn (round robin), first come first
//! served within it. One namespace with ten thousand pod writes queued holds up another
//! namespace's single write by at most one round, not by its whole backlog.
//!
//! A seat is an object ([`Seat`]); it returns itself when dropped, also when it was handed to a
//! writer that had stopped waiting (the seat is dropped in the channel, and passes on).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Seats shared round robin between namespaces (see the module doc).
#[derive(Clone, Debug)]
pub struct FairRoom {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    free: usize,
    /// Writers waiting, by namespace.
    queues: HashMap<Arc<str>, VecDeque<oneshot::Sender<Seat>>>,
    /// Namespaces with writers waiting, in the order they are served.
    turns: VecDeque<Arc<str>>,
    /// Writers waiting (those that stopped waiting included, until their turn comes).
    waiting: usize,
}

/// One seat, given back when dropped.
#[derive(Debug)]
pub struct Seat {
    inner: Arc<Mutex<Inner>>,
}

impl FairRoom {
    pub fn new(seats: usize) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner { free: seats, ..Default::default() })) }
    }

    /// Waits for a seat, in `namespace`'s turn.
    pub async fn seat(&self, namespace: &str) -> Seat {
        let rx = {
            let mut guard = crate::sync::lock(&self.inner);
            let inner = &mut *guard;
            if inner.free > 0 && inner.waiting == 0 {
                inner.free -= 1;
                return Seat { inner: self.inner.clone() };
            }
            let (tx, rx) = oneshot::channel();
            let key: Arc<str> = Arc::from(namespace);
            let queue = inner.queues.entry(key.clone()).or_default();
            if queue.is_empty() {
                inner.turns.push_back(key);
            }
            queue.push_back(tx);
            inner.waiting += 1;
            rx
        };
        match rx.await {
            Ok(seat) => seat,
            // Never: a queued sender is only dropped by handing it a seat.
            Err(_) => Seat { inner: self.inner.clone() },
        }
    }

    /// Seats free now.
    pub fn free(&self) -> usize {
        crate::sync::lock(&self.inner).free
    }

    /// Writers waiting for a seat.
    pub fn waiting(&self) -> usize {
        crate::sync::lock(&self.inner).waiting
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut guard = crate::sync::lock(&self.inner);
        let inner = &mut *guard;
        while let Some(namespace) = inner.turns.pop_front() {
            let Some(queue) = inner.queues.get_mut(&namespace) else { continue };
            let next = queue.pop_front();
            if queue.is_empty() {
                inner.queues.remove(&namespace);
            } else {
                inner.turns.push_back(namespace);
            }
            let Some(tx) = next else { continue };
            inner.waiting = inner.waiting.saturating_sub(1);
            match tx.send(Seat { inner: self.inner.clone() }) {
                Ok(()) => return,
                // That writer stopped waiting: the seat goes on to the next (forgotten, not
                // dropped, which would lock again here).
                Err(seat) => std::mem::forget(seat),
            }
        }
        inner.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn one_namespace_backlog_does_not_hold_up_another_namespace_writes() {
        let room = FairRoom::new(1);
        let first = room.seat("busy").await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |ns: &'static str, i: usize| {
            let (room, order) = (room.clone(), order.clone());
            tokio::spawn(async move {
                let _seat = room.seat(ns).await;
                order.lock().unwrap().push((ns, i));
            })
        };
        let mut tasks: Vec<_> = (0..200).map(|i| spawn("busy", i)).collect();
        settle().await;
        tasks.push(spawn("quiet", 0));
        settle().await;
        assert_eq!(room.waiting(), 201);
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap();
        let quiet = order.iter().position(|(ns, _)| *ns == "quiet").unwrap();
        assert!(quiet <= 1, "the quiet namespace's write went {}th behind the busy one's backlog", quiet + 1);
        let busy: Vec<usize> = order.iter().filter(|(ns, _)| *ns == "busy").map(|(_, i)| *i).collect();
        assert_eq!(busy, (0..200).collect::<Vec<_>>(), "first come, first served within a namespace");
        assert_eq!(room.waiting(), 0);
    }

    #[tokio::test]
    async fn seats_are_bounded_and_a_writer_that_stops_waiting_loses_none() {
        let room = FairRoom::new(3);
        let held = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for i in 0..30 {
            let (room, held, most, release) = (room.clone(), held.clone(), most.clone(), release.clone());
            tasks.push(tokio::spawn(async move {
                let _seat = room.seat(["a", "b", "c"][i % 3]).await;
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                release.notified().await;
                held.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        // A writer that gives up while queued.
        let quitter = {
            let room = room.clone();
            tokio::spawn(async move { room.seat("d").await })
        };
        settle().await;
        quitter.abort();
        let mut done = 0;
        while done < 30 {
            release.notify_waiters();
            settle().await;
            done = tasks.iter().filter(|t| t.is_finished()).count();
        }
        assert_eq!(most.load(Ordering::SeqCst), 3, "never more seats taken than there are");
        // Every seat came back, the abandoned writer's too.
        let again: Vec<Seat> = futures::future::join_all((0..3).map(|_| room.seat("e"))).await;
        assert_eq!(again.len(), 3);
    }
}
