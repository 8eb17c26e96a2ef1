//! Retry timing shared by every retry loop (pool reconciles, lease and status writes):
//! exponential with jitter, per key, so one failing pool or node never sets the pace of the
//! others and a burst of failures does not come back as one wave.

use rand::Rng;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// How long to wait before retry number `failures` (1, 2, …): 1 s doubling to `cap`, with
/// ±20 % jitter.
pub fn retry_after(failures: u32, cap: Duration) -> Duration {
    let base = Duration::from_secs(1).saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    base.min(cap).mul_f64(rand::rng().random_range(0.8..1.2))
}

/// Retries of a watch: [`retry_after`] capped at 5 s (kube's default grows to 30 s), so every
/// watch is back within seconds of an API server that returns; reset by the first event.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

pub const WATCH_RETRY_CAP: Duration = Duration::from_secs(5);

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(retry_after(self.failures, WATCH_RETRY_CAP))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The longest delay a timer wheel accepts is about two years; anything longer (a pod with a
/// grace period of years, a flag set absurdly high) waits a year and is looked at again.
pub fn timer_delay(d: Duration) -> Duration {
    d.min(Duration::from_secs(365 * 24 * 3600))
}

/// Consecutive failures per key (a pool, a node): [`Backoffs::failed`] gives the next delay,
/// [`Backoffs::succeeded`] starts over.
#[derive(Debug)]
pub struct Backoffs<K> {
    cap: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash> Backoffs<K> {
    pub fn new(cap: Duration) -> Self {
        Self { cap, failures: Mutex::new(HashMap::new()) }
    }

    /// Counts one more failure of `key`; the delay before its next try.
    pub fn failed(&self, key: K) -> Duration {
        let mut failures = crate::sync::lock(&self.failures);
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        retry_after(*n, self.cap)
    }

    pub fn succeeded(&self, key: &K) {
        crate::sync::lock(&self.failures).remove(key);
    }

    /// Keeps only the keys `keep` keeps (the entries of what is gone are dropped).
    pub fn retain(&self, keep: impl Fn(&K) -> bool) {
        crate::sync::lock(&self.failures).retain(|k, _| keep(k));
    }

    /// Failures of `key` in a row.
    pub fn failures(&self, key: &K) -> u32 {
        crate::sync::lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_retries_within_the_cap_and_starts_over_after_a_success() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = (0..10).map(|_| b.next().unwrap()).collect();
        assert!(delays[0] < Duration::from_millis(1300), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= WATCH_RETRY_CAP.mul_f64(1.2)), "{delays:?}");
        assert!(delays[9] >= WATCH_RETRY_CAP.mul_f64(0.8), "grows to the cap: {delays:?}");
        b.reset();
        assert!(b.next().unwrap() < Duration::from_millis(1300));
    }

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_a_cap() {
        let cap = Duration::from_secs(10);
        for (failures, base) in [(1u32, 1.0f64), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (40, 10.0)] {
            let d = retry_after(failures, cap).as_secs_f64();
            assert!(d >= base * 0.8 && d <= base * 1.2, "failure {failures}: {d}s");
        }
        let spread: std::collections::HashSet<u128> = (0..20).map(|_| retry_after(3, cap).as_millis()).collect();
        assert!(spread.len() > 1, "jittered");
    }

    #[test]
    fn each_key_backs_off_on_its_own_and_success_starts_over() {
        let b = Backoffs::new(Duration::from_secs(300));
        for _ in 0..4 {
            b.failed("a");
        }
        let a = b.failed("a");
        let other = b.failed("b");
        assert!(a >= Duration::from_millis(12_800) && a <= Duration::from_millis(19_200), "{a:?}");
        assert!(other <= Duration::from_millis(1200), "{other:?}");
        b.succeeded(&"a");
        assert_eq!(b.failures(&"a"), 0);
        assert!(b.failed("a") <= Duration::from_millis(1200));
    }

    #[test]
    fn entries_of_what_is_gone_are_dropped() {
        let b = Backoffs::new(Duration::from_secs(300));
        b.failed("live");
        b.failed("gone");
        b.retain(|k| *k == "live");
        assert_eq!((b.failures(&"live"), b.failures(&"gone")), (1, 0));
    }
}
