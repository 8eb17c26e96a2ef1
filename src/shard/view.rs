//! Which keys (node names, VMIs without a node) this replica simulates, given the live
//! members. Pure: the membership loop publishes these, the simulators ask them.

use super::rendezvous;
use std::sync::Arc;
use tokio::sync::watch;

/// One published view of the shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    me: String,
    /// `None`: not sharded, everything is ours.
    members: Option<Vec<String>>,
    /// During a hand-over, the views before it: a key is ours only if it is ours in each of
    /// them as well, so a replica lets go at once and takes over only when the hand-over ends
    /// (by which time the previous owner has let go).
    before: Vec<Vec<String>>,
}

impl Ownership {
    /// Not sharded: every key is ours.
    pub fn whole() -> Self {
        Self { me: String::new(), members: None, before: Vec::new() }
    }

    /// Nothing is ours (not a member yet, or our membership may have lapsed).
    pub fn nothing(me: &str) -> Self {
        Self { me: me.to_string(), members: Some(Vec::new()), before: Vec::new() }
    }

    /// The settled view with these members.
    pub fn settled(me: &str, members: Vec<String>) -> Self {
        let mut members = members;
        members.sort();
        members.dedup();
        Self { me: me.to_string(), members: Some(members), before: Vec::new() }
    }

    /// The view while handing over from `self` to `next`: only keys ours in both (and in any
    /// view still being handed over from).
    pub fn handing_over_to(&self, next: &Ownership) -> Self {
        let mut before = self.before.clone();
        before.extend(self.members.clone());
        Self { me: next.me.clone(), members: next.members.clone(), before }
    }

    #[cfg(test)]
    fn in_hand_over(&self) -> bool {
        !self.before.is_empty()
    }

    pub fn members(&self) -> &[String] {
        self.members.as_deref().unwrap_or_default()
    }

    /// Whether `key` is ours.
    pub fn owns(&self, key: &str) -> bool {
        let Some(members) = &self.members else { return true };
        let mine = |m: &[String]| rendezvous::owner(m, key) == Some(self.me.as_str());
        mine(members) && self.before.iter().all(|b| mine(b))
    }

    /// The same members (hand-over state aside).
    pub fn same_members(&self, other: &Ownership) -> bool {
        self.members == other.members
    }
}

/// What the simulators hold: the current view, and a way to hear when it changes.
#[derive(Clone, Debug)]
pub struct Shard(watch::Receiver<Arc<Ownership>>);

impl Shard {
    pub fn new(rx: watch::Receiver<Arc<Ownership>>) -> Self {
        Self(rx)
    }

    /// Everything, forever (one process, no sharding).
    pub fn whole() -> Self {
        let (tx, rx) = watch::channel(Arc::new(Ownership::whole()));
        // The sender is dropped: the view never changes and `changed` never fires.
        drop(tx);
        Self(rx)
    }

    pub fn owns(&self, key: &str) -> bool {
        self.0.borrow().owns(key)
    }

    /// Resolves when the view changes; never, if it cannot change any more.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The key of a VMI that has no node yet.
    pub fn vmi_key(namespace: &str, name: &str) -> String {
        format!("vmi:{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    #[test]
    fn whole_owns_everything_and_nothing_owns_nothing() {
        assert!(names(50).iter().all(|k| Ownership::whole().owns(k)));
        assert!(!names(50).iter().any(|k| Ownership::nothing("a").owns(k)));
    }

    #[test]
    fn every_key_has_exactly_one_owner_among_settled_members() {
        let members: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let views: Vec<Ownership> = members.iter().map(|m| Ownership::settled(m, members.clone())).collect();
        for key in names(1000) {
            assert_eq!(views.iter().filter(|v| v.owns(&key)).count(), 1, "{key}");
        }
    }

    #[test]
    fn during_a_hand_over_no_key_has_two_owners() {
        let two: Vec<String> = ["a", "b"].map(String::from).to_vec();
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        // a and b learn that c joined; c is new (it owned nothing before).
        let a = Ownership::settled("a", two.clone()).handing_over_to(&Ownership::settled("a", three.clone()));
        let b = Ownership::settled("b", two.clone()).handing_over_to(&Ownership::settled("b", three.clone()));
        let c = Ownership::nothing("c").handing_over_to(&Ownership::settled("c", three.clone()));
        let old_a = Ownership::settled("a", two.clone());
        let old_b = Ownership::settled("b", two.clone());
        let settled_c = Ownership::settled("c", three.clone());
        for key in names(2000) {
            // Hand-over views never overlap each other, the old views, or the new owner's
            // final view (c only takes once a and b have let go).
            assert!([&a, &b, &c].iter().filter(|v| v.owns(&key)).count() <= 1);
            assert!(!(a.owns(&key) && settled_c.owns(&key)));
            assert!(!(b.owns(&key) && settled_c.owns(&key)));
            assert!(!(c.owns(&key) && (old_a.owns(&key) || old_b.owns(&key))));
            assert!(!c.owns(&key), "a new member takes nothing before the hand-over ends");
        }
        assert!(a.in_hand_over() && !settled_c.in_hand_over());
    }

    #[test]
    fn a_view_changing_again_mid_hand_over_keeps_every_earlier_view() {
        let v1 = Ownership::settled("a", vec!["a".into(), "b".into()]);
        let v2 = Ownership::settled("a", vec!["a".into()]);
        let v3 = Ownership::settled("a", vec!["a".into(), "c".into()]);
        let mid = v1.handing_over_to(&v2).handing_over_to(&v3);
        for key in names(500) {
            assert_eq!(mid.owns(&key), v1.owns(&key) && v2.owns(&key) && v3.owns(&key));
        }
    }

    #[tokio::test]
    async fn whole_shard_never_changes() {
        let mut s = Shard::whole();
        assert!(s.owns("x"));
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), s.changed()).await;
        assert!(waited.is_err());
    }
}
