//! An informer's objects indexed by their controller owner's UID, for the owner kinds a pool
//! controller asks for: a pool's reconcile looks at its own children, not at every object of
//! the kind (1,000 PodPools of 10 pods each would otherwise scan 10,000 pods per reconcile).
//! Objects owned by other kinds (a ReplicaSet's pods) are not indexed and cost nothing.

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub struct OwnerIndex<K: Resource<DynamicType = ()>> {
    kinds: Vec<String>,
    by_owner: HashMap<String, HashSet<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for OwnerIndex<K> {
    fn default() -> Self {
        Self { kinds: Vec::new(), by_owner: HashMap::new() }
    }
}

impl<K: Resource<DynamicType = ()>> OwnerIndex<K> {
    /// The UID of `obj`'s controller owner, when it is of an indexed kind.
    fn owner<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let refs = obj.meta().owner_references.as_deref()?;
        let owner = refs.iter().find(|o| o.controller == Some(true))?;
        self.kinds.contains(&owner.kind).then_some(owner.uid.as_str())
    }

    /// Whether objects owned by `kind` are indexed.
    pub fn indexes(&self, kind: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
    }

    /// Indexes the objects owned by `kind` from now on, starting with those in `objects`.
    pub fn add_kind<'a>(&mut self, kind: &str, objects: impl IntoIterator<Item = &'a Arc<K>>)
    where
        K: 'a,
    {
        if self.indexes(kind) {
            return;
        }
        self.kinds.push(kind.to_string());
        for obj in objects {
            // (Objects of kinds indexed before are found again: a set keeps them once.)
            if let Some(owner) = self.owner(obj) {
                let owner = owner.to_string();
                self.by_owner.entry(owner).or_default().insert(ObjectRef::from_obj(obj.as_ref()));
            }
        }
    }

    /// `obj` was stored, replacing `old` (its owner may have changed).
    pub fn applied(&mut self, old: Option<&K>, obj: &K) {
        if self.kinds.is_empty() {
            return;
        }
        let (was, is) = (old.and_then(|o| self.owner(o)), self.owner(obj));
        if was == is && was.is_some_and(|uid| self.by_owner.contains_key(uid)) {
            return;
        }
        let r = ObjectRef::from_obj(obj);
        if let Some(was) = was {
            let was = was.to_string();
            self.remove(&was, &r);
        }
        if let Some(is) = is {
            let is = is.to_string();
            self.by_owner.entry(is).or_default().insert(r);
        }
    }

    /// `obj` left the store.
    pub fn deleted(&mut self, obj: &K) {
        if let Some(uid) = self.owner(obj) {
            let uid = uid.to_string();
            self.remove(&uid, &ObjectRef::from_obj(obj));
        }
    }

    fn remove(&mut self, uid: &str, r: &ObjectRef<K>) {
        if let Some(set) = self.by_owner.get_mut(uid) {
            set.remove(r);
            if set.is_empty() {
                self.by_owner.remove(uid);
            }
        }
    }

    /// The index again from what the store holds (after a re-list replaced it).
    pub fn rebuild<'a>(&mut self, objects: impl IntoIterator<Item = &'a Arc<K>>)
    where
        K: 'a,
    {
        self.by_owner.clear();
        for obj in objects {
            if let Some(uid) = self.owner(obj) {
                let uid = uid.to_string();
                self.by_owner.entry(uid).or_default().insert(ObjectRef::from_obj(obj.as_ref()));
            }
        }
    }

    /// The objects whose controller owner has `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<ObjectRef<K>> {
        self.by_owner.get(uid).map(|set| set.iter().cloned().collect()).unwrap_or_default()
    }
}

/// The index as the informer and its readers share it.
pub type Owners<K> = Arc<Mutex<OwnerIndex<K>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str, owner: Option<(&str, &str)>) -> Pod {
        use crate::informer::fixtures::TestPod;
        let pod = Pod::test(name).namespace("ns");
        match owner {
            Some((kind, uid)) => pod.owned_by("v1", kind, "x", uid),
            None => pod,
        }
    }

    fn names(index: &OwnerIndex<Pod>, uid: &str) -> Vec<String> {
        let mut v: Vec<String> = index.owned_by(uid).into_iter().map(|r| r.name).collect();
        v.sort();
        v
    }

    #[test]
    fn only_the_asked_kinds_are_indexed_and_changes_of_owner_move_the_object() {
        let existing = [Arc::new(pod("a", Some(("PodPool", "u1")))), Arc::new(pod("r", Some(("ReplicaSet", "u9"))))];
        let mut index = OwnerIndex::<Pod>::default();
        index.applied(None, &pod("early", Some(("PodPool", "u1"))));
        assert!(index.owned_by("u1").is_empty(), "nothing is indexed before a kind is asked for");
        index.add_kind("PodPool", existing.iter());
        assert_eq!(names(&index, "u1"), ["a"]);
        assert!(index.owned_by("u9").is_empty(), "other owners' objects are not indexed");

        index.applied(None, &pod("b", Some(("PodPool", "u1"))));
        index.applied(None, &pod("c", Some(("PodPool", "u2"))));
        assert_eq!(names(&index, "u1"), ["a", "b"]);
        // Released by its owner and adopted by another pool.
        index.applied(Some(&pod("b", Some(("PodPool", "u1")))), &pod("b", Some(("PodPool", "u2"))));
        assert_eq!((names(&index, "u1"), names(&index, "u2")), (vec!["a".into()], vec!["b".into(), "c".into()]));
        // Orphaned: in no set.
        index.applied(Some(&pod("a", Some(("PodPool", "u1")))), &pod("a", None));
        assert!(index.owned_by("u1").is_empty());
        index.deleted(&pod("c", Some(("PodPool", "u2"))));
        assert_eq!(names(&index, "u2"), ["b"]);

        let relisted = [Arc::new(pod("z", Some(("PodPool", "u3"))))];
        index.rebuild(relisted.iter());
        assert!(index.owned_by("u2").is_empty());
        assert_eq!(names(&index, "u3"), ["z"]);
    }
}
