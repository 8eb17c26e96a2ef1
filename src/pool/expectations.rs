//! Writes made but not yet seen: children this operator created or deleted that the store
//! does not show yet, per pool, so a reconcile that runs before the watch catches up neither
//! creates a child twice nor counts a deleted one as present.

use std::collections::HashMap;
use std::time::Duration;

/// Children this operator created or deleted that the store does not show yet, per pool, so
/// a reconcile that runs before the watch catches up neither creates a child twice nor
/// counts a deleted one as present. Entries expire after a while in case an event is lost.
#[derive(Default)]
pub struct Expectations {
    /// pool UID → child name → (what, when)
    inner: std::sync::Mutex<HashMap<String, PoolExpectations>>,
}

type PoolExpectations = HashMap<String, (Expect, std::time::Instant)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Expect {
    Create,
    Delete,
}

const EXPECTATION_TTL: Duration = Duration::from_secs(30);

impl Expectations {
    pub fn expect(&self, pool_uid: &str, names: &[String], what: Expect) {
        if names.is_empty() {
            return;
        }
        let now = std::time::Instant::now();
        let mut inner = crate::sync::lock(&self.inner);
        // Pools deleted meanwhile leave entries nobody asks about again: sweep them.
        inner.retain(|_, e| e.values().any(|(_, at)| at.elapsed() < EXPECTATION_TTL));
        let entry = inner.entry(pool_uid.to_string()).or_default();
        for n in names {
            entry.insert(n.clone(), (what, now));
        }
    }

    /// Drops satisfied and expired entries and returns what is still pending.
    pub fn pending(&self, pool_uid: &str, satisfied: impl Fn(&str, Expect) -> bool) -> Vec<(String, Expect)> {
        let mut inner = crate::sync::lock(&self.inner);
        let Some(entry) = inner.get_mut(pool_uid) else { return vec![] };
        entry.retain(|name, (what, at)| at.elapsed() < EXPECTATION_TTL && !satisfied(name, *what));
        let out = entry.iter().map(|(n, (w, _))| (n.clone(), *w)).collect();
        if entry.is_empty() {
            inner.remove(pool_uid);
        }
        out
    }

    pub fn forget(&self, pool_uid: &str) {
        crate::sync::lock(&self.inner).remove(pool_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_writes_are_kept_until_the_store_shows_them() {
        let e = Expectations::default();
        e.expect("uid", &["p-0".into(), "p-1".into()], Expect::Create);
        e.expect("uid", &["p-5".into()], Expect::Delete);
        let mut pending = e.pending("uid", |name, _| name == "p-0");
        pending.sort();
        assert_eq!(pending, vec![("p-1".to_string(), Expect::Create), ("p-5".to_string(), Expect::Delete)]);
        // What was satisfied is gone for good.
        assert_eq!(e.pending("uid", |_, _| false).len(), 2);
        assert!(e.pending("other", |_, _| false).is_empty());
        e.forget("uid");
        assert!(e.pending("uid", |_, _| false).is_empty());
    }
}
