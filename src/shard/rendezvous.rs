//! Rendezvous (highest-random-weight) hashing: every key goes to the member with the highest
//! weight for it. When a member joins, only the keys it wins move (to it); when one leaves,
//! only its keys move, each to its runner-up. Weights are SHA-256 based, so every replica and
//! every build agrees on them.

use sha2::{Digest, Sha256};

/// The weight of `member` for `key`.
pub fn weight(member: &str, key: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(member.as_bytes());
    h.update([0u8]);
    h.update(key.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

/// The member that owns `key` (ties, which need a SHA-256 prefix collision, go to the smaller
/// name); `None` without members.
pub fn owner<'a>(members: &'a [String], key: &str) -> Option<&'a str> {
    members.iter().map(|m| (weight(m, key), std::cmp::Reverse(m.as_str()))).max().map(|(_, std::cmp::Reverse(m))| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    fn assign(m: &[String], keys: &[String]) -> HashMap<String, String> {
        keys.iter().map(|k| (k.clone(), owner(m, k).unwrap().to_string())).collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("pool-a-{i}")).collect()
    }

    #[test]
    fn no_members_no_owner_and_one_member_owns_all() {
        assert_eq!(owner(&[], "x"), None);
        let one = members(1);
        assert!(keys(100).iter().all(|k| owner(&one, k) == Some("replica-0")));
    }

    #[test]
    fn spread_is_about_even() {
        let m = members(3);
        let a = assign(&m, &keys(6000));
        for member in &m {
            let n = a.values().filter(|o| *o == member).count();
            assert!((1700..=2300).contains(&n), "{member} owns {n} of 6000");
        }
    }

    #[test]
    fn order_of_members_does_not_matter() {
        let mut m = members(4);
        let before = assign(&m, &keys(500));
        m.reverse();
        assert_eq!(before, assign(&m, &keys(500)));
    }

    #[test]
    fn a_leaving_member_moves_only_its_keys() {
        let m = members(3);
        let ks = keys(3000);
        let before = assign(&m, &ks);
        let after = assign(&m[..2], &ks);
        for k in &ks {
            if before[k] != "replica-2" {
                assert_eq!(before[k], after[k], "{k} moved though its owner stayed");
            } else {
                assert_ne!(after[k], "replica-2");
            }
        }
    }

    #[test]
    fn a_joining_member_takes_only_keys_it_wins() {
        let m = members(3);
        let ks = keys(3000);
        let before = assign(&m[..2], &ks);
        let after = assign(&m, &ks);
        let moved: Vec<_> = ks.iter().filter(|k| before[*k] != after[*k]).collect();
        assert!(moved.iter().all(|k| after[*k] == "replica-2"), "keys moved between old members");
        assert!((800..=1200).contains(&moved.len()), "{} of 3000 moved to the new member", moved.len());
    }
}
