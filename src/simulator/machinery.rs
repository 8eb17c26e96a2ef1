//! The machinery every simulated kind shares (nodes, pods, VMIs): one timer wheel
//! keyed by the timer itself, the state of one kind of write per object (in flight, failures
//! in a row), and writes run as bounded background tasks that report back to the loop.
//!
//! Channels: the loop's `done` channel carries at most one message per write in flight, and
//! writes in flight are bounded by the budget plus one per tracked object
//! (each object has at most one write of each kind on its way), so it cannot grow beyond what
//! is tracked.

use super::fair::FairRoom;
use super::timer_delay;
use crate::shard::Shard;
use futures::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

/// Timers on one wheel, each at most once: setting a timer that is already set moves it. A
/// timer's key is held once (shared by the wheel and the index): a simulator with 100,000 pods
/// waiting on timers keeps 100,000 keys, not twice that.
pub struct Timers<T> {
    queue: DelayQueue<Arc<T>>,
    keys: HashMap<Arc<T>, delay_queue::Key>,
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
                let timer = Arc::new(timer);
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

    fn is_set(&self, timer: &T) -> bool {
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
        self.keys.remove(timer.as_ref());
        // The index's copy is gone: the wheel's is the only one left, taken without a clone.
        Some(Arc::try_unwrap(timer).unwrap_or_else(|shared| (*shared).clone()))
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

/// The simulator's write budget, shared by every simulated kind: at most `total` writes in
/// flight. Writes other than heartbeats wait their namespace's turn ([`FairRoom`]: one
/// namespace's backlog never holds up another's writes by more than a round). A quarter is reserved for heartbeats (lease
/// renewals), so a flood of pod or status writes never makes a heartbeat wait long (a kubelet's
/// lease does not queue behind its status updates); every other write may use the rest.
///
/// Neither class may crowd the other out of the queue: other writes hold at most their room
/// there, and heartbeats at most theirs — a renewal beyond it waits outside the queue until it
/// is urgent (its lease getting old), then joins the queue at once. Without that cap thousands of
/// renewals falling due together queue ahead of every pod write, which then waits seconds behind
/// writes that were not urgent; with it, a pod write waits behind at most the heartbeats' room
/// and the urgent renewals, and the API server never sees more than `total` at once from this
/// replica.
#[derive(Clone, Debug)]
pub struct WriteBudget {
    all: Arc<Semaphore>,
    others: FairRoom,
    /// Heartbeats that are not urgent, in the queue or in flight.
    beats: Arc<Semaphore>,
    /// Room for writes other than heartbeats.
    others_total: usize,
    /// Writes other than heartbeats waiting for room: the backlog a saturated API server
    /// leaves behind (what lease renewals yield to).
    waiting: Arc<AtomicUsize>,
}

impl WriteBudget {
    /// A quarter of `total` reserved for heartbeats (at least one, when `total` > 1).
    pub fn new(total: usize) -> Self {
        let total = total.max(1);
        let reserved = (total / 4).max(usize::from(total > 1));
        Self {
            all: Arc::new(Semaphore::new(total)),
            others: FairRoom::new(total - reserved),
            beats: Arc::new(Semaphore::new(reserved.max(1))),
            others_total: total - reserved,
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How saturated the budget is, 0 to 1: the writes waiting for room (heartbeats aside) as
    /// a share of the room there is. 0 while every write goes at once; 1 once a whole budget's
    /// worth waits behind the writes in flight.
    pub fn pressure(&self) -> f64 {
        let waiting = self.waiting.load(Ordering::Relaxed) as f64;
        (waiting / self.others_total.max(1) as f64).min(1.0)
    }

    /// Writes of one class under this budget, reporting on `done`.
    pub fn writes<D>(&self, class: Class, done: UnboundedSender<D>) -> Writes<D> {
        Writes { budget: self.clone(), class, done, shard: Shard::whole() }
    }

    /// Waits for room for a write of `class`; the room is held until the guard drops. A
    /// heartbeat becomes urgent at `urgent_at` (never, without one).
    async fn room(&self, class: Class, namespace: &str, urgent_at: Option<Instant>) -> Room {
        // Closed semaphores (never done here) still let the write through.
        match class {
            Class::Other => {
                let seat = {
                    let _waiting = Waiting::new(&self.waiting);
                    self.others.seat(namespace).await
                };
                let all = self.all.clone().acquire_owned().await.ok();
                Room { _all: all, _class: None, _seat: Some(seat) }
            }
            Class::Heartbeat => {
                let in_turn = async {
                    let beat = self.beats.clone().acquire_owned().await.ok();
                    (beat, self.all.clone().acquire_owned().await.ok())
                };
                let urgent = async {
                    match urgent_at {
                        Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
                        Some(_) => {}
                        None => std::future::pending::<()>().await,
                    }
                    (None, self.all.clone().acquire_owned().await.ok())
                };
                let (beat, all) = tokio::select! {
                    biased;
                    room = in_turn => room,
                    room = urgent => room,
                };
                Room { _all: all, _class: beat, _seat: None }
            }
        }
    }
}

/// One write counted as waiting for room until it has it (or is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What kind of write: heartbeats have room reserved for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Heartbeat,
    Other,
}

struct Room {
    _all: Option<tokio::sync::OwnedSemaphorePermit>,
    _class: Option<tokio::sync::OwnedSemaphorePermit>,
    _seat: Option<super::fair::Seat>,
}

/// Writes of one class run as background tasks within the budget, each reporting its outcome
/// on the loop's channel.
pub struct Writes<D> {
    budget: WriteBudget,
    class: Class,
    done: UnboundedSender<D>,
    /// The shard a write must still hold its object in when it gets room (see
    /// [`Writes::spawn_for`]).
    shard: Shard,
}

impl<D: Send + 'static> Writes<D> {
    /// These writes, each sent only while this replica's shard holds its object.
    #[must_use]
    pub fn fenced_by(self, shard: Shard) -> Self {
        Self { shard, ..self }
    }

    /// Runs the write `make` builds once there is room for it. A write waiting for room holds
    /// only `make` (what it captures): the request's own state, several KiB for a kube call,
    /// exists only for the writes in flight. Tens of thousands can wait at once (a client
    /// deleting pods faster than a slow API server takes the final deletes), and their memory
    /// must not grow with the backlog.
    pub fn spawn<F, W>(&self, make: F)
    where
        F: FnOnce() -> W + Send + 'static,
        W: Future<Output = D> + Send + 'static,
    {
        self.spawn_by(None, make);
    }

    /// As [`Writes::spawn`], for a heartbeat that becomes urgent at `urgent_at`: from then on
    /// it takes the first free place in the budget rather than waiting for the heartbeats'.
    fn spawn_by<F, W>(&self, urgent_at: Option<Instant>, make: F)
    where
        F: FnOnce() -> W + Send + 'static,
        W: Future<Output = D> + Send + 'static,
    {
        self.run(None, "", urgent_at, make);
    }

    /// As [`Writes::spawn_by`], for a write on behalf of `key` in the shard (a node's name,
    /// or a VMI's key without one): if the shard has handed `key` to another replica by the
    /// time the write has room, it is not sent and `dropped` is reported instead. A write can
    /// queue for seconds behind a busy API server, far longer than a hand-over waits for the
    /// previous owner's writes in flight; sent late, it would renew a lease (or move a pod)
    /// the new owner already writes: two replicas at once. `namespace` is the object's
    /// (empty for a cluster-scoped one): its turn in the budget.
    pub fn spawn_for<F, W>(&self, namespace: &str, key: String, dropped: D, urgent_at: Option<Instant>, make: F)
    where
        F: FnOnce() -> W + Send + 'static,
        W: Future<Output = D> + Send + 'static,
    {
        self.run(Some((self.shard.clone(), key, dropped)), namespace, urgent_at, make);
    }

    fn run<F, W>(&self, fence: Option<(Shard, String, D)>, namespace: &str, urgent_at: Option<Instant>, make: F)
    where
        F: FnOnce() -> W + Send + 'static,
        W: Future<Output = D> + Send + 'static,
    {
        let (budget, class, done) = (self.budget.clone(), self.class, self.done.clone());
        let namespace = namespace.to_string();
        tokio::spawn(async move {
            let _room = budget.room(class, &namespace, urgent_at).await;
            if let Some((shard, key, dropped)) = fence
                && !shard.owns(&key)
            {
                tracing::debug!(key = %key, "write not sent: the shard handed its object to another replica");
                let _ = done.send(dropped);
                return;
            }
            let write = Box::pin(make());
            let _ = done.send(write.await);
        });
    }
}

/// A strategic-merge patch of `name`'s status subresource (conditions merge by type, so the
/// ones other components own survive), guarded by its `uid`: the API server refuses it when
/// the object was replaced by another of the same name meanwhile ([`object_gone`] tells).
pub async fn status_patch<K>(api: &kube::Api<K>, name: &str, uid: &str, mut patch: serde_json::Value) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    patch["metadata"] = serde_json::json!({ "uid": uid });
    api.patch_status(name, &crate::api::conventions::patch_params(), &kube::api::Patch::Strategic(&patch)).await
}

/// Whether a write failed because its object is gone or was replaced by another of the same
/// name (404, or a 422 on the `metadata.uid` the write was guarded by): nothing to retry.
pub fn object_gone(result: &Result<impl Sized, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 404 || (s.code == 422 && s.message.contains("metadata.uid")))
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

    /// Spawns `n` writes of `class` that each stay in flight until `release` is notified and
    /// count themselves in `busy`.
    fn hold(
        writes: &Writes<usize>,
        n: usize,
        busy: &Arc<std::sync::atomic::AtomicUsize>,
        release: &Arc<tokio::sync::Notify>,
    ) {
        hold_by(writes, None, n, busy, release);
    }

    /// As [`hold`], heartbeats urgent at `urgent_at`.
    fn hold_by(
        writes: &Writes<usize>,
        urgent_at: Option<Instant>,
        n: usize,
        busy: &Arc<std::sync::atomic::AtomicUsize>,
        release: &Arc<tokio::sync::Notify>,
    ) {
        for i in 0..n {
            let (busy, release) = (busy.clone(), release.clone());
            writes.spawn_by(urgent_at, move || async move {
                busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                release.notified().await;
                i
            });
        }
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn writes_report_back_and_stay_within_the_budget() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let budget = WriteBudget::new(8);
        let (others, heartbeats) = (budget.writes(Class::Other, tx.clone()), budget.writes(Class::Heartbeat, tx));
        let (busy_others, busy_beats) =
            (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
        let release = Arc::new(tokio::sync::Notify::new());
        // A flood of status writes takes only the unreserved room…
        hold(&others, 20, &busy_others, &release);
        settle().await;
        assert_eq!(busy_others.load(std::sync::atomic::Ordering::SeqCst), 6);
        // …so heartbeats still go at once, and the total stays within the budget.
        hold(&heartbeats, 5, &busy_beats, &release);
        settle().await;
        assert_eq!(busy_beats.load(std::sync::atomic::Ordering::SeqCst), 2);
        // Everything is done in the end, one report per write.
        let mut reports = 0;
        while reports < 25 {
            release.notify_waiters();
            settle().await;
            while rx.try_recv().is_ok() {
                reports += 1;
            }
        }
        assert_eq!(busy_others.load(std::sync::atomic::Ordering::SeqCst), 20);
        assert_eq!(busy_beats.load(std::sync::atomic::Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn a_write_whose_object_the_shard_handed_over_while_it_waited_is_not_sent() {
        use crate::shard::view::Ownership;
        let members = || vec!["a".to_string(), "b".to_string()];
        let (view_tx, view_rx) = tokio::sync::watch::channel(Arc::new(Ownership::settled("a", members())));
        let shard = Shard::new(view_rx);
        let key = (0..100).map(|i| format!("node-{i}")).find(|k| shard.owns(k)).expect("a key of a's");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let writes = WriteBudget::new(1).writes(Class::Other, tx).fenced_by(shard);
        let (busy, release) = (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(tokio::sync::Notify::new()));
        // The only place is taken; the fenced write queues while the key is still ours.
        hold(&writes, 1, &busy, &release);
        settle().await;
        let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = sent.clone();
        writes.spawn_for("", key.clone(), 999, None, move || async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            7
        });
        settle().await;
        // Handed to b meanwhile: when the place frees, the write reports dropped, unsent.
        view_tx.send_replace(Arc::new(Ownership::settled("a", vec!["b".to_string()])));
        release.notify_waiters();
        settle().await;
        let reports: Vec<usize> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(reports, vec![0, 999]);
        assert!(!sent.load(std::sync::atomic::Ordering::SeqCst), "never sent");
        // Ours again: sent.
        view_tx.send_replace(Arc::new(Ownership::settled("a", members())));
        writes.spawn_for("", key, 999, None, || async { 7 });
        settle().await;
        assert_eq!(rx.try_recv().ok(), Some(7));
    }

    fn count(busy: &Arc<std::sync::atomic::AtomicUsize>) -> usize {
        busy.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn renewals_falling_due_together_never_crowd_other_writes_out() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let budget = WriteBudget::new(8); // 6 for other writes, 2 for heartbeats in turn
        let (busy_beats, busy_others) =
            (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
        let release = Arc::new(tokio::sync::Notify::new());
        // A thousand renewals fall due at once, none urgent yet: they take their own room…
        let later = Some(Instant::now() + Duration::from_secs(3600));
        hold_by(&budget.writes(Class::Heartbeat, tx.clone()), later, 1000, &busy_beats, &release);
        settle().await;
        assert_eq!(count(&busy_beats), 2);
        // …and pod writes coming after them go at once, not behind the thousand.
        hold(&budget.writes(Class::Other, tx), 6, &busy_others, &release);
        settle().await;
        assert_eq!(count(&busy_others), 6);
        release.notify_waiters();
    }

    #[tokio::test]
    async fn an_urgent_renewal_takes_the_first_free_place_before_waiting_writes() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let budget = WriteBudget::new(8);
        let (beats, others) = (budget.writes(Class::Heartbeat, tx.clone()), budget.writes(Class::Other, tx));
        let (busy_beats, busy_others, busy_urgent) = (
            Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        );
        let release = Arc::new(tokio::sync::Notify::new());
        // The budget full: 2 renewals and 6 other writes in flight, more of both waiting.
        hold_by(&beats, Some(Instant::now() + Duration::from_secs(3600)), 10, &busy_beats, &release);
        hold(&others, 50, &busy_others, &release);
        settle().await;
        assert_eq!((count(&busy_beats), count(&busy_others)), (2, 6));
        // Renewals of leases half expired: in the shared queue at once, so they go with the
        // next places freed, before the 44 other writes that wait for their room and the
        // renewals still in turn.
        hold_by(&beats, Some(Instant::now()), 3, &busy_urgent, &release);
        settle().await;
        assert_eq!(count(&busy_urgent), 0, "no place is free yet");
        release.notify_one(); // one write finishes, its place goes to an urgent renewal
        settle().await;
        while rx.try_recv().is_ok() {}
        assert_eq!(count(&busy_urgent), 1);
        assert_eq!(count(&busy_beats) + count(&busy_others), 8, "the others still wait");
        release.notify_waiters();
    }

    #[tokio::test]
    async fn heartbeats_without_urgency_or_other_writes_use_their_room() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let budget = WriteBudget::new(8);
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        hold(&budget.writes(Class::Heartbeat, tx.clone()), 12, &busy, &release);
        settle().await;
        assert_eq!(count(&busy), 2);
        // Urgent ones may use the whole budget.
        hold_by(&budget.writes(Class::Heartbeat, tx), Some(Instant::now()), 12, &busy, &release);
        settle().await;
        assert_eq!(count(&busy), 8);
        release.notify_waiters();
    }

    #[tokio::test]
    async fn pressure_is_the_backlog_of_other_writes_against_their_room() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let budget = WriteBudget::new(8); // 6 for other writes, 2 reserved for heartbeats
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let others = budget.writes(Class::Other, tx.clone());
        hold(&others, 6, &busy, &release);
        settle().await;
        assert_eq!(budget.pressure(), 0.0, "a full budget with nothing behind it is no backlog");
        hold(&others, 3, &busy, &release);
        hold(&budget.writes(Class::Heartbeat, tx), 5, &busy, &release);
        settle().await;
        assert_eq!(budget.pressure(), 0.5, "3 writes wait for 6 places; waiting heartbeats do not count");
        hold(&others, 20, &busy, &release);
        settle().await;
        assert_eq!(budget.pressure(), 1.0, "capped at 1");
        // Released until every write has gone: the backlog is gone too.
        let mut done = 0;
        while done < 34 {
            release.notify_waiters();
            settle().await;
            while rx.try_recv().is_ok() {
                done += 1;
            }
        }
        assert_eq!(budget.pressure(), 0.0);
    }

    #[test]
    fn a_budget_of_one_still_lets_every_class_write() {
        let b = WriteBudget::new(1);
        let room = |b: &WriteBudget| (b.all.available_permits(), b.others.free(), b.beats.available_permits());
        assert_eq!(room(&b), (1, 1, 1));
        let b = WriteBudget::new(0);
        assert_eq!(room(&b), (1, 1, 1));
        let b = WriteBudget::new(96);
        assert_eq!(room(&b), (96, 72, 24));
    }

    #[test]
    fn a_write_to_a_gone_or_replaced_object_is_not_retried() {
        let status = |code: u16, message: &str| -> Result<(), kube::Error> {
            Err(kube::Error::Api(kube::core::Status::failure(message, "Invalid").with_code(code).boxed()))
        };
        assert!(object_gone(&status(404, "not found")));
        assert!(object_gone(&status(
            422,
            "Precondition failed: UID in precondition: x, UID in object meta: metadata.uid"
        )));
        assert!(!object_gone(&status(422, "spec.containers: Required value")), "a refusal of the object itself");
        assert!(!object_gone(&status(500, "etcd down")));
        assert!(!object_gone(&Ok::<(), kube::Error>(())));
    }
}
