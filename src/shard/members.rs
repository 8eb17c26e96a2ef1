//! Who the live members are, from their membership Leases. Pure, so the rules are tested
//! without a cluster.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// A member's lease as read: who, since when, renewed when, for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub identity: String,
    pub acquired: Timestamp,
    pub renewed: Timestamp,
    pub duration: Duration,
}

impl Member {
    /// Reads a membership Lease (`None` for one missing a field: not a member).
    pub fn from_lease(lease: &Lease) -> Option<Self> {
        let spec = lease.spec.as_ref()?;
        let renewed = spec.renew_time.as_ref()?.0;
        Some(Member {
            identity: spec.holder_identity.clone()?,
            acquired: spec.acquire_time.as_ref().map_or(renewed, |t| t.0),
            renewed,
            duration: Duration::from_secs(u64::try_from(spec.lease_duration_seconds?).ok()?),
        })
    }

    fn live(&self, now: Timestamp) -> bool {
        let Ok(d) = SignedDuration::try_from(self.duration) else { return false };
        self.renewed.checked_add(d).is_ok_and(|until| until > now)
    }
}

/// The members that share the work at `now`: those whose lease is live. (A member that just
/// joined takes nothing until its hand-over ends, by when the others have seen it and let go:
/// see `membership`.)
pub fn sharing(members: &[Member], now: Timestamp) -> Vec<String> {
    let mut names: Vec<String> = members.iter().filter(|m| m.live(now)).map(|m| m.identity.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The next moment `sharing` can change without a lease changing (an expiry), if any.
pub fn next_change(members: &[Member], now: Timestamp) -> Option<Timestamp> {
    let after = |t: Timestamp, d: Duration| SignedDuration::try_from(d).ok().and_then(|d| t.checked_add(d).ok());
    members.iter().filter_map(|m| after(m.renewed, m.duration)).filter(|t| *t > now).min()
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

    fn m(id: &str, acquired: i64, renewed: i64) -> Member {
        Member { identity: id.into(), acquired: t(acquired), renewed: t(renewed), duration: Duration::from_secs(10) }
    }

    #[test]
    fn expired_members_drop_out() {
        let ms = [m("a", 0, 95), m("b", 0, 80)];
        assert_eq!(sharing(&ms, t(100)), vec!["a"]);
        assert_eq!(sharing(&ms, t(106)), Vec::<String>::new());
        assert_eq!(next_change(&ms, t(100)), Some(t(105)));
    }

    #[test]
    fn members_are_sorted_and_counted_once() {
        let ms = [m("b", 99, 99), m("a", 99, 99), m("a", 98, 99)];
        assert_eq!(sharing(&ms, t(100)), vec!["a", "b"]);
    }

    #[test]
    fn a_fresh_read_keeps_a_member_the_lagging_watch_shows_expired() {
        let watched = vec![m("a", 0, 80), m("b", 0, 95)];
        let fresh = [m("a", 0, 99)];
        let all = merge(watched, &fresh);
        assert_eq!(sharing(&all, t(100)), vec!["a", "b"]);
        // An older fresh read never hides a newer watched renewal.
        let all = merge(vec![m("a", 0, 99)], &[m("a", 0, 80)]);
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
        assert_eq!(Member::from_lease(&lease), None);
    }
}
