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

    fn settled(&self, now: Timestamp, settle: Duration) -> bool {
        let Ok(d) = SignedDuration::try_from(settle) else { return false };
        self.acquired.checked_add(d).is_ok_and(|at| at <= now)
    }
}

/// The members that share the work at `now`: those whose lease is live and has been held for
/// `settle` (so every replica has seen it before it takes anything); if no live member has
/// settled yet, nobody simulates anything, and all live ones count at once.
pub fn sharing(members: &[Member], now: Timestamp, settle: Duration) -> Vec<String> {
    let live: Vec<&Member> = members.iter().filter(|m| m.live(now)).collect();
    let settled: Vec<&Member> = live.iter().copied().filter(|m| m.settled(now, settle)).collect();
    let chosen = if settled.is_empty() { live } else { settled };
    let mut names: Vec<String> = chosen.into_iter().map(|m| m.identity.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The next moment `sharing` can change without a lease changing (an expiry or a member
/// settling), if any.
pub fn next_change(members: &[Member], now: Timestamp, settle: Duration) -> Option<Timestamp> {
    let after = |t: Timestamp, d: Duration| SignedDuration::try_from(d).ok().and_then(|d| t.checked_add(d).ok());
    members
        .iter()
        .flat_map(|m| [after(m.renewed, m.duration), after(m.acquired, settle)])
        .flatten()
        .filter(|t| *t > now)
        .min()
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

    const SETTLE: Duration = Duration::from_secs(3);

    #[test]
    fn expired_members_drop_out() {
        let ms = [m("a", 0, 95), m("b", 0, 80)];
        assert_eq!(sharing(&ms, t(100), SETTLE), vec!["a"]);
        assert_eq!(sharing(&ms, t(106), SETTLE), Vec::<String>::new());
    }

    #[test]
    fn a_new_member_counts_once_settled() {
        let ms = [m("a", 0, 99), m("b", 99, 99)];
        assert_eq!(sharing(&ms, t(100), SETTLE), vec!["a"]);
        assert_eq!(sharing(&ms, t(102), SETTLE), vec!["a", "b"]);
        assert_eq!(next_change(&ms, t(100), SETTLE), Some(t(102)));
    }

    #[test]
    fn first_members_count_at_once() {
        let ms = [m("b", 99, 99), m("a", 99, 99)];
        assert_eq!(sharing(&ms, t(100), SETTLE), vec!["a", "b"]);
    }

    #[test]
    fn a_lease_without_a_holder_is_no_member() {
        let lease = Lease::default();
        assert_eq!(Member::from_lease(&lease), None);
    }
}
