//! The leader election's decisions, pure (client-go's rules): a Lease is judged by how long
//! *this* process has seen it unchanged, never by comparing its renew time with the local clock,
//! so a replica whose clock is off cannot take the lead early nor keep a dead leader's.

use std::time::{Duration, Instant};

/// What the Lease said when last read, and when this process first saw it say so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The holder (`None` or empty: free).
    pub holder: Option<String>,
    /// The renew time as written (compared only for change, never with a clock).
    pub renew_time: Option<String>,
    pub duration: Duration,
    /// When this process first saw this record.
    pub seen: Instant,
}

impl Observed {
    /// The record read at `now`, keeping the time it was first seen when nothing changed.
    pub fn update(
        previous: Option<&Observed>,
        holder: Option<String>,
        renew_time: Option<String>,
        duration: Duration,
        now: Instant,
    ) -> Observed {
        let unchanged = previous.is_some_and(|p| p.holder == holder && p.renew_time == renew_time);
        let seen = if unchanged { previous.map_or(now, |p| p.seen) } else { now };
        Observed { holder, renew_time, duration, seen }
    }

    /// Whether the holder has let the Lease sit unchanged for a whole lease duration, as seen
    /// here: it is dead (or cut off), and the Lease may be taken.
    pub fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.seen) >= self.duration
    }

    fn held_by(&self, me: &str) -> bool {
        self.holder.as_deref() == Some(me)
    }

    fn free(&self) -> bool {
        self.holder.as_deref().is_none_or(str::is_empty)
    }
}

/// What to do with the Lease now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: renew.
    Renew,
    /// Free, or its holder is gone: take it.
    Acquire,
    /// Another holds it and lives.
    Wait,
}

/// The decision for `me` on the Lease as observed (`None`: it does not exist yet).
pub fn decide(me: &str, observed: Option<&Observed>, now: Instant) -> Decision {
    match observed {
        None => Decision::Acquire,
        Some(o) if o.held_by(me) => Decision::Renew,
        Some(o) if o.free() || o.expired(now) => Decision::Acquire,
        Some(_) => Decision::Wait,
    }
}

/// Whether a leader that last renewed at `renewed` must step down at `now`: it could not renew
/// within the renew deadline, which is shorter than the lease, so it stops before anyone else
/// may take over.
pub fn must_step_down(renewed: Option<Instant>, now: Instant, renew_deadline: Duration) -> bool {
    renewed.is_none_or(|at| now.saturating_duration_since(at) > renew_deadline)
}

/// Whether a replica whose election last heard from the API server at `heard` (`None`: never,
/// since `started`) is cut off at `now`: silent past the renew deadline, the point at which a
/// leader steps down. A cut-off replica says it is not ready.
pub fn cut_off(heard: Option<Instant>, started: Instant, now: Instant, renew_deadline: Duration) -> bool {
    now.saturating_duration_since(heard.unwrap_or(started)) > renew_deadline
}

/// The renew deadline for a lease of `duration`: two thirds of it (client-go's 10 s of 15 s).
pub fn renew_deadline(duration: Duration) -> Duration {
    duration.mul_f64(2.0 / 3.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    fn seen(holder: &str, renew: &str, base: Instant, secs: u64, prev: Option<&Observed>) -> Observed {
        Observed::update(prev, Some(holder.into()), Some(renew.into()), Duration::from_secs(15), at(base, secs))
    }

    #[test]
    fn a_lease_is_expired_only_after_it_sat_unchanged_for_a_whole_duration_here() {
        let base = Instant::now();
        let first = seen("a", "t1", base, 0, None);
        assert_eq!(decide("b", Some(&first), at(base, 14)), Decision::Wait);
        // Renewed (whatever time it claims): seen anew.
        let renewed = seen("a", "t0-claims-to-be-old", base, 10, Some(&first));
        assert_eq!(renewed.seen, at(base, 10));
        assert_eq!(decide("b", Some(&renewed), at(base, 20)), Decision::Wait, "5 s unchanged, not 15");
        let same = seen("a", "t0-claims-to-be-old", base, 24, Some(&renewed));
        assert_eq!(same.seen, at(base, 10), "unchanged: first seen stays");
        assert_eq!(decide("b", Some(&same), at(base, 25)), Decision::Acquire);
    }

    #[test]
    fn the_holder_renews_and_a_free_lease_is_taken() {
        let base = Instant::now();
        assert_eq!(decide("a", Some(&seen("a", "t", base, 0, None)), at(base, 1)), Decision::Renew);
        let free = Observed::update(None, None, None, Duration::from_secs(15), base);
        assert_eq!(decide("b", Some(&free), base), Decision::Acquire);
        assert_eq!(decide("b", None, base), Decision::Acquire);
    }

    #[test]
    fn a_leader_that_cannot_renew_steps_down_before_the_lease_runs_out() {
        let base = Instant::now();
        let deadline = renew_deadline(Duration::from_secs(15));
        assert_eq!(deadline, Duration::from_secs(10));
        assert!(!must_step_down(Some(base), at(base, 9), deadline));
        assert!(must_step_down(Some(base), at(base, 11), deadline));
        assert!(must_step_down(None, base, deadline), "never renewed");
    }

    #[test]
    fn a_replica_is_cut_off_once_the_api_server_is_silent_past_the_renew_deadline() {
        let base = Instant::now();
        let deadline = renew_deadline(Duration::from_secs(15));
        assert!(!cut_off(Some(base), base, at(base, 10), deadline), "at the deadline it still holds");
        assert!(cut_off(Some(base), base, at(base, 11), deadline));
        assert!(!cut_off(Some(at(base, 20)), base, at(base, 25), deadline), "heard again: in contact");
        assert!(!cut_off(None, base, at(base, 5), deadline), "a replica starting is given the deadline");
        assert!(cut_off(None, base, at(base, 11), deadline), "never heard at all");
        // It stops at 10 s; the others may take over only after 15 s unchanged.
        assert!(deadline < Duration::from_secs(15));
    }
}
