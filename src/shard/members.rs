//! Who the live members are, from their membership Leases. Pure, so the rules are tested
//! without a cluster. A member is judged by how long *this* process has seen its Lease
//! unchanged (client-go's rule), never by its renew time against the local clock: a replica
//! whose clock is ahead would otherwise see every other member expired at once and take all
//! their nodes, and one whose clock is behind would keep a dead member's nodes unsimulated.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A member's lease as read: who, since when, renewed when (as written), for how long, and when
/// this process first saw that renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub identity: String,
    pub acquired: Timestamp,
    pub renewed: Timestamp,
    pub duration: Duration,
    /// When this process first saw this renewal (set by [`Observations::observe`]).
    pub seen: Instant,
}

impl Member {
    /// Reads a membership Lease (`None` for one missing a field: not a member), seen `now`.
    pub fn from_lease(lease: &Lease, now: Instant) -> Option<Self> {
        let spec = lease.spec.as_ref()?;
        let renewed = spec.renew_time.as_ref()?.0;
        Some(Member {
            identity: spec.holder_identity.clone()?,
            acquired: spec.acquire_time.as_ref().map_or(renewed, |t| t.0),
            renewed,
            duration: Duration::from_secs(u64::try_from(spec.lease_duration_seconds?).ok()?),
            seen: now,
        })
    }

    fn live(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.seen) < self.duration
    }

    fn expires(&self) -> Instant {
        self.seen + self.duration
    }
}

/// When each member's current renewal was first seen here.
#[derive(Debug, Default)]
pub struct Observations(HashMap<String, (Timestamp, Instant)>);

impl Observations {
    /// `member` with `seen` set to when its renewal was first seen (now, if it is new).
    pub fn observe(&mut self, mut member: Member, now: Instant) -> Member {
        let entry = self.0.entry(member.identity.clone()).or_insert((member.renewed, now));
        if entry.0 != member.renewed {
            *entry = (member.renewed, now);
        }
        member.seen = entry.1;
        member
    }

    /// Forgets members not in `keep` (their Leases are gone).
    pub fn retain(&mut self, keep: &[Member]) {
        self.0.retain(|id, _| keep.iter().any(|m| &m.identity == id));
    }
}

/// The members that share the work at `now`: those whose lease was renewed within its
/// duration as seen here. (A member that just joined takes nothing until its hand-over ends,
/// by when the others have seen it and let go: see `membership`.)
pub fn sharing(members: &[Member], now: Instant) -> Vec<String> {
    let mut names: Vec<String> = members.iter().filter(|m| m.live(now)).map(|m| m.identity.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The next moment `sharing` can change without a lease changing (an expiry), if any.
pub fn next_change(members: &[Member], now: Instant) -> Option<Instant> {
    members.iter().map(Member::expires).filter(|t| *t > now).min()
}

/// Who shares the work: the members live by their Leases (`live`), and each member of the
/// current `view` that looks expired but whose expiry no recent direct read of its own Lease
/// has confirmed (`confirmed`). A read confirms only the member it read: the watch lags for
/// every member at once under load, and one member's read says nothing of the others.
pub fn sharing_confirmed(mut live: Vec<String>, view: &[String], confirmed: impl Fn(&str) -> bool) -> Vec<String> {
    live.extend(view.iter().filter(|m| !confirmed(m)).cloned());
    live.sort();
    live.dedup();
    live
}

/// The newest renewal of each member, from the watch's view and a fresher read (a watch can
/// lag by seconds behind a busy API server; a member is only given up once a fresh read says
/// so too).
pub fn merge(watched: Vec<Member>, fresh: &[Member]) -> Vec<Member> {
    let mut by_id: std::collections::BTreeMap<String, Member> = std::collections::BTreeMap::new();
    for m in watched.into_iter().chain(fresh.iter().cloned()) {
        match by_id.get(&m.identity) {
            Some(known) if known.renewed >= m.renewed => {}
            _ => {
                by_id.insert(m.identity.clone(), m);
            }
        }
    }
    by_id.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn m(id: &str, renewed: i64, seen: Instant) -> Member {
        Member { identity: id.into(), acquired: t(0), renewed: t(renewed), duration: Duration::from_secs(10), seen }
    }

    #[test]
    fn expired_members_drop_out_by_the_time_seen_here() {
        let base = Instant::now();
        let ms = [m("a", 95, base + Duration::from_secs(5)), m("b", 80, base)];
        let at = |s: u64| base + Duration::from_secs(s);
        assert_eq!(sharing(&ms, at(9)), vec!["a", "b"]);
        assert_eq!(sharing(&ms, at(11)), vec!["a"]);
        assert_eq!(sharing(&ms, at(16)), Vec::<String>::new());
        assert_eq!(next_change(&ms, at(11)), Some(at(15)));
    }

    #[test]
    fn a_renew_time_from_a_skewed_clock_changes_nothing() {
        // A member whose clock is 15 s behind writes renew times 15 s in the past: another
        // replica comparing them with its own clock would drop it at once. Seen here, a
        // renewal is a renewal.
        let base = Instant::now();
        let mut seen = Observations::default();
        let behind = seen.observe(m("a", -15, base), base);
        assert_eq!(sharing(&[behind], base + Duration::from_secs(9)), vec!["a"]);
        // Its next renewal (still 15 s behind) resets its age; a renewal not seen ages it.
        let again = seen.observe(m("a", -12, base), base + Duration::from_secs(3));
        assert_eq!(again.seen, base + Duration::from_secs(3));
        let same = seen.observe(m("a", -12, base), base + Duration::from_secs(8));
        assert_eq!(same.seen, base + Duration::from_secs(3), "unchanged: first seen stays");
        assert_eq!(sharing(&[same], base + Duration::from_secs(14)), Vec::<String>::new());
    }

    #[test]
    fn members_are_sorted_and_counted_once() {
        let base = Instant::now();
        let ms = [m("b", 99, base), m("a", 99, base), m("a", 98, base)];
        assert_eq!(sharing(&ms, base), vec!["a", "b"]);
    }

    #[test]
    fn a_fresh_read_keeps_a_member_the_lagging_watch_shows_expired() {
        let base = Instant::now();
        let mut seen = Observations::default();
        let watched = vec![seen.observe(m("a", 80, base), base), seen.observe(m("b", 95, base), base)];
        let later = base + Duration::from_secs(12);
        let fresh = [seen.observe(m("a", 99, base), later)];
        let all: Vec<Member> = merge(watched, &fresh);
        let b = all.iter().find(|x| x.identity == "b").unwrap().clone();
        let b = seen.observe(b, later);
        let a = all.iter().find(|x| x.identity == "a").unwrap().clone();
        assert_eq!(sharing(&[a, b], later), vec!["a"], "a renewed (a fresh read saw it), b did not for 12 s");
        // An older fresh read never hides a newer watched renewal.
        let all = merge(vec![m("a", 99, base)], &[m("a", 80, base)]);
        assert_eq!(all[0].renewed, t(99));
    }

    #[test]
    fn a_read_confirms_only_the_member_it_read() {
        let view: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        // The lagging watch shows b and c expired; only b's own read agrees.
        let live = vec!["a".to_string()];
        assert_eq!(sharing_confirmed(live.clone(), &view, |m| m == "b"), vec!["a", "c"]);
        assert_eq!(sharing_confirmed(live, &view, |_| false), vec!["a", "b", "c"]);
        // A member not in the view joins only by its live Lease.
        assert_eq!(sharing_confirmed(vec!["a".into(), "d".into()], &view, |_| true), vec!["a", "d"]);
    }

    #[test]
    fn a_lease_without_a_holder_is_no_member() {
        let lease = Lease::default();
        assert_eq!(Member::from_lease(&lease, Instant::now()), None);
    }
}
