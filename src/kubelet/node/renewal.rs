//! When a node's Lease is renewed: on the kubelet's cadence (a quarter of the lease duration)
//! while the API server has room, stretched toward a safe share of the duration while the
//! simulator's writes queue behind a saturated API server. The node lifecycle controller judges
//! a node by how long its Lease goes unrenewed against its grace period (the kubelet's lease
//! duration by default), so renewing on the kubelet's cadence buys nothing a user sees when
//! the API server is the bottleneck, and every renewal is a write the workload waits behind.
//!
//! Unchanged node status reports wait the same way ([`defer_report`]).
//!
//! Pure: the node simulator asks [`Stretch::interval`] when a renewal comes due.

use std::time::Duration;

/// How far renewals may stretch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    /// The longest wait between renewals, as a share of the lease duration (0.25: never
    /// stretch, the kubelet's cadence always).
    pub fraction: f64,
    /// Time the lease must keep, whatever the fraction: a shard's takeover of a dead replica's
    /// nodes (its membership lease and handover) happens inside it, besides the monitor
    /// period's share ([`MONITOR_SHARE`]).
    pub reserve: Duration,
}

impl Default for Stretch {
    fn default() -> Self {
        Self { fraction: DEFAULT_FRACTION, reserve: Duration::ZERO }
    }
}

/// The share of the lease duration kept for the controller manager's monitor period (it sees
/// a renewal up to one period late: 5 s of the kubelet's 40 s, 25 s of kwokctl's 200 s).
pub const MONITOR_SHARE: f64 = 0.125;

/// The default longest wait: 60 % of the lease duration (24 s of the kubelet's 40 s; the
/// rest covers the controller manager's monitor period, 5 s, and the measured queueing).
pub const DEFAULT_FRACTION: f64 = 0.6;

impl Stretch {
    /// The longest a renewal of a lease of `duration` may wait after the last one, given
    /// `latency`, how long renewals take from due to done (queueing and the round trip):
    /// twice that is kept as margin. Never less than the kubelet's cadence `base`.
    fn ceiling(&self, duration: Duration, base: Duration, latency: Duration) -> Duration {
        let kept = duration.mul_f64(1.0 - MONITOR_SHARE).saturating_sub(self.reserve);
        let cap = duration.mul_f64(self.fraction.clamp(0.0, 1.0)).min(kept);
        cap.saturating_sub(latency * 2).max(base)
    }

    /// How long after the last renewal the next one is due: `base` without pressure, the
    /// ceiling at full pressure (0 to 1), in proportion between.
    pub fn interval(&self, duration: Duration, base: Duration, latency: Duration, pressure: f64) -> Duration {
        let ceiling = self.ceiling(duration, base, latency);
        base + ceiling.saturating_sub(base).mul_f64(pressure.clamp(0.0, 1.0))
    }
}

/// Whether a node status report that would change nothing, due now, waits: while the
/// simulator's writes queue (`pressure` above 0) and the last report (`age`) is younger than
/// twice the report interval `every`. The node lifecycle controller takes a renewed Lease as
/// the node's heartbeat, so an unchanged report put off costs no one anything, and the
/// workload gets the write; the bound keeps every report at most two intervals old.
pub fn defer_report(pressure: f64, age: Option<Duration>, every: Duration) -> bool {
    pressure > 0.0 && age.is_some_and(|age| age < every * 2)
}

/// A smoothed measure of how long renewals take from due to done (each new one weighs a fifth).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency(Duration);

impl Latency {
    pub fn observe(&mut self, took: Duration) {
        self.0 = if self.0.is_zero() { took } else { self.0.mul_f64(0.8) + took.mul_f64(0.2) };
    }

    pub fn get(&self) -> Duration {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn without_pressure_renewals_keep_the_kubelets_cadence() {
        let s = Stretch::default();
        assert_eq!(s.interval(S(40), S(10), Duration::ZERO, 0.0), S(10));
        assert_eq!(s.interval(S(200), S(50), S(3), 0.0), S(50));
    }

    #[test]
    fn full_pressure_stretches_to_the_share_of_the_duration_less_the_margin() {
        let s = Stretch::default();
        assert_eq!(s.interval(S(40), S(10), Duration::ZERO, 1.0), S(24));
        assert_eq!(s.interval(S(200), S(50), Duration::ZERO, 1.0), S(120));
        // Renewals that take 2 s to get through keep 4 s more margin.
        assert_eq!(s.interval(S(40), S(10), S(2), 1.0), S(20));
        // Half the pressure, half the way.
        assert_eq!(s.interval(S(40), S(10), Duration::ZERO, 0.5), S(17));
        // Out-of-range pressure is clamped.
        assert_eq!(s.interval(S(40), S(10), Duration::ZERO, 7.0), S(24));
        assert_eq!(s.interval(S(40), S(10), Duration::ZERO, -1.0), S(10));
    }

    #[test]
    fn the_stretch_never_goes_below_the_cadence_nor_eats_a_shards_takeover() {
        let s = Stretch::default();
        // So slow that the margin would leave less than the cadence: the cadence.
        assert_eq!(s.interval(S(40), S(10), S(30), 1.0), S(10));
        // A kubelet-only setting never stretches.
        let never = Stretch { fraction: 0.25, reserve: Duration::ZERO };
        assert_eq!(never.interval(S(40), S(10), Duration::ZERO, 1.0), S(10));
        // Sharded: a dead replica's nodes are taken over within 14 s, and the monitor period
        // takes 5 s of 40, so a renewal never waits past 40 - 5 - 14 = 21 s.
        let sharded = Stretch { fraction: 0.6, reserve: S(14) };
        assert_eq!(sharded.interval(S(40), S(10), Duration::ZERO, 1.0), S(21));
        // With kwokctl's 200 s leases the share is what limits it.
        assert_eq!(sharded.interval(S(200), S(50), Duration::ZERO, 1.0), S(120));
        let slow_takeover = Stretch { fraction: 0.6, reserve: S(30) };
        assert_eq!(slow_takeover.interval(S(40), S(10), Duration::ZERO, 1.0), S(10));
    }

    #[test]
    fn unchanged_reports_wait_only_under_pressure_and_at_most_two_intervals() {
        let every = S(300);
        assert!(!defer_report(0.0, Some(S(300)), every), "with room, on the report interval");
        assert!(defer_report(0.1, Some(S(300)), every), "writes queue: the workload goes first");
        assert!(defer_report(1.0, Some(S(599)), every));
        assert!(!defer_report(1.0, Some(S(600)), every), "never more than two intervals old");
        assert!(!defer_report(1.0, None, every), "a node never reported is reported");
    }

    #[test]
    fn latency_is_smoothed() {
        let mut l = Latency::default();
        l.observe(Duration::from_millis(100));
        assert_eq!(l.get(), Duration::from_millis(100));
        l.observe(Duration::from_millis(600));
        assert_eq!(l.get(), Duration::from_millis(200));
    }
}
