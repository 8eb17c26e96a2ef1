//! The machinery every simulated kind shares (nodes, pods, and VMIs next): one timer wheel
//! keyed by the timer itself, the state of one kind of write per object (in flight, failures
//! in a row), and writes run as bounded background tasks that report back to the loop.
//!
//! Channels: the loop's `done` channel carries at most one message per write in flight, and
//! writes in flight are bounded by the semaphore's permits plus one per tracked object
//! (each object has at most one write of each kind on its way), so it cannot grow beyond what
//! is tracked.

use super::timer_delay;
use futures::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::time::{DelayQueue, delay_queue};

/// Timers on one wheel, each at most once: setting a timer that is already set moves it.
pub struct Timers<T> {
    queue: DelayQueue<T>,
    keys: HashMap<T, delay_queue::Key>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Self { queue: DelayQueue::new(), keys: HashMap::new() }
    }
}

impl<T: Clone + Eq + Hash> Timers<T> {
    /// Sets `timer` to fire after `delay` (clamped to what the wheel takes).
    pub fn set(&mut self, timer: T, delay: Duration) {
        let delay = timer_delay(delay);
        match self.keys.get(&timer) {
            Some(key) => self.queue.reset(key, delay),
            None => {
                let key = self.queue.insert(timer.clone(), delay);
                self.keys.insert(timer, key);
            }
        }
    }

    /// Sets `timer` unless it is set already.
    pub fn set_once(&mut self, timer: T, delay: Duration) {
        if !self.is_set(&timer) {
            self.set(timer, delay);
        }
    }

    pub fn cancel(&mut self, timer: &T) {
        if let Some(key) = self.keys.remove(timer) {
            self.queue.try_remove(&key);
        }
    }

    pub fn is_set(&self, timer: &T) -> bool {
        self.keys.contains_key(timer)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The next timer that fires (pending while none is set: use it in a `select!` with
    /// `if !timers.is_empty()`).
    pub async fn next(&mut self) -> Option<T> {
        let timer = self.queue.next().await?.into_inner();
        self.keys.remove(&timer);
        Some(timer)
    }
}

/// One kind of write to one object: never two at once, and how many failed in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    pub in_flight: bool,
    pub failures: u32,
}

impl Attempts {
    /// Marks a write as started; false (start nothing) when one is already on its way.
    pub fn begin(&mut self) -> bool {
        !std::mem::replace(&mut self.in_flight, true)
    }

    /// The write came back: `None` when it went through, else the failures in a row.
    pub fn finish(&mut self, ok: bool) -> Option<u32> {
        self.in_flight = false;
        if ok {
            self.failures = 0;
            None
        } else {
            self.failures = self.failures.saturating_add(1);
            Some(self.failures)
        }
    }
}

/// Writes run as background tasks, at most as many at once as `permits` allows (shared by
/// every simulated kind), each reporting its outcome on the loop's channel.
pub struct Writes<D> {
    pub permits: Arc<Semaphore>,
    pub done: UnboundedSender<D>,
}

impl<D: Send + 'static> Writes<D> {
    pub fn spawn(&self, write: impl Future<Output = D> + Send + 'static) {
        let (permits, done) = (self.permits.clone(), self.done.clone());
        tokio::spawn(async move {
            // A closed semaphore (never done here) still lets the write through.
            let _permit = permits.acquire_owned().await.ok();
            let _ = done.send(write.await);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real time, short delays: tokio's test-util (paused time) would also be compiled into
    // the benchmarked binary, and it slows every clock read.
    #[tokio::test]
    async fn a_timer_set_twice_fires_once_at_the_later_time_and_cancel_forgets_it() {
        let mut t = Timers::default();
        t.set("a", Duration::from_millis(500));
        t.set("a", Duration::from_millis(10));
        t.set_once("a", Duration::from_secs(60));
        t.set("b", Duration::from_millis(200));
        assert_eq!(t.len(), 2);
        assert_eq!(t.next().await, Some("a"));
        assert!(!t.is_set(&"a"), "a fired timer is no longer set");
        t.cancel(&"b");
        assert!(t.is_empty());
        // A spent timer set again is a new one (never a stale key).
        t.set("a", Duration::from_millis(10));
        assert_eq!(t.next().await, Some("a"));
    }

    #[test]
    fn attempts_allow_one_write_at_a_time_and_count_failures() {
        let mut a = Attempts::default();
        assert!(a.begin());
        assert!(!a.begin(), "never two at once");
        assert_eq!(a.finish(false), Some(1));
        assert!(a.begin());
        assert_eq!(a.finish(false), Some(2));
        assert!(a.begin());
        assert_eq!(a.finish(true), None);
        assert_eq!(a, Attempts::default());
    }

    #[tokio::test]
    async fn writes_report_back_and_respect_the_permits() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let permits = Arc::new(Semaphore::new(1));
        let writes = Writes { permits: permits.clone(), done: tx };
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for i in 0..4 {
            let busy = busy.clone();
            writes.spawn(async move {
                let now = busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                (i, now)
            });
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(rx.recv().await.expect("a report per write"));
        }
        assert!(seen.iter().all(|(_, concurrent)| *concurrent == 0), "one at a time: {seen:?}");
    }
}
