//! What a replica's sharding membership is configured with, and the names it writes: its
//! Lease's name, label and annotation. Leaves for the membership loop and its renewal.

use std::time::Duration;

/// Membership Leases carry this label, valued with the operator instance.
pub const SHARD_LABEL: &str = "kwok-pools.x-k8s.io/shard-of";
/// How many nodes the member simulates, refreshed with each renewal (for `kwok-pools status`).
pub const NODES_ANNOTATION: &str = "kwok-pools.x-k8s.io/simulated-nodes";

#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub namespace: String,
    pub instance: String,
    pub identity: String,
    /// How long a member's Lease is valid after a renewal (renewed every third of it).
    pub duration: Duration,
    /// How long a replica waits before it takes keys it gained.
    pub handover: Duration,
}

impl MembershipConfig {
    pub fn lease_name(&self) -> String {
        lease_name(&self.instance, &self.identity)
    }

    pub(super) fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// Past this without a renewal the others have long taken our keys: simulate nothing.
    /// (Any shorter and an API server that is only slow would make every replica drop its
    /// nodes at once: nodes going NotReady hurt users more than a lease renewed twice for a
    /// moment.)
    pub(super) fn fence_after(&self) -> Duration {
        self.duration * 2
    }

    /// How long one direct read of a member's Lease may take.
    pub(super) fn read_timeout(&self) -> Duration {
        self.duration / 2
    }
}

/// `<instance>-shard-<identity>`, as a valid object name.
pub fn lease_name(instance: &str, identity: &str) -> String {
    let raw = format!("{instance}-shard-{identity}").to_lowercase();
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect();
    clean.trim_matches(|c: char| !c.is_ascii_alphanumeric()).chars().take(253).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(super::lease_name("kwok-pools", "Host_1:42"), "kwok-pools-shard-host-1-42");
        let long = super::lease_name("a", &"x".repeat(400));
        assert!(long.len() <= 253 && long.ends_with('x'));
    }
}
