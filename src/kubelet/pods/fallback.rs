//! Addresses for pods on nodes without a podCIDR: each such node gets a block of the
//! `--pod-cidr-fallback` range, claimed cluster-wide by creating the block's Lease in
//! `kube-node-lease` (a create is atomic, so two replicas or two operators never hold one
//! block), owned by the node so the claim goes with it. Which blocks exist and how they are
//! named: [`crate::ipam::fallback`].

use crate::api::conventions::{FAKE_NODE_ANNOTATION, FAKE_VALUE};
use crate::ipam::fallback::{BLOCK_ANNOTATION, CLAIM_NAMESPACE, FallbackRange, NODE_UID_LABEL, lease_name};
use ipnet::IpNet;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The claims this replica knows of, and the ones on their way.
pub struct Fallback {
    pub range: FallbackRange,
    /// How long a node goes without a podCIDR before its pods fall back (a controller
    /// manager that allocates node CIDRs gives one within moments).
    pub after: Duration,
    /// Node UID → its block.
    claims: HashMap<String, IpNet>,
    /// Blocks known to be claimed, by any node.
    taken: HashSet<IpNet>,
    /// Nodes (by UID) whose claim is on its way.
    claiming: HashSet<String>,
    /// Nodes (by UID) told that the range is full.
    full_reported: HashSet<String>,
}

/// What a node whose pods wait for a range does next.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// It may still get a podCIDR: look again after this long.
    Wait(Duration),
    /// Claim this block.
    Claim(IpNet),
    /// A claim is on its way, or the node has its block.
    Nothing,
    /// Every block is taken (`true` the first time for this node).
    Full(bool),
}

/// How a claim went.
#[derive(Debug)]
pub enum Outcome {
    /// The node holds the block (`new`: this claim created it).
    Claimed { new: bool },
    /// Another node holds it.
    Taken,
    /// The API server did not answer as it should: try again later.
    Failed(String),
}

pub struct Claim {
    pub node: String,
    pub uid: String,
    /// The block asked for.
    pub wanted: IpNet,
    /// The block the node holds (another than `wanted` when it held one already).
    pub block: IpNet,
    pub outcome: Outcome,
}

impl Fallback {
    pub fn new(range: FallbackRange, after: Duration) -> Self {
        Self {
            range,
            after,
            claims: HashMap::new(),
            taken: HashSet::new(),
            claiming: HashSet::new(),
            full_reported: HashSet::new(),
        }
    }

    /// The block of the node with this UID, if it holds one.
    pub fn block_of(&self, node_uid: &str) -> Option<IpNet> {
        self.claims.get(node_uid).copied()
    }

    /// What `node` (no podCIDR, pods waiting) does next, `age` after it was made.
    pub fn next(&mut self, node: &Node, age: Duration) -> Next {
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if self.claims.contains_key(&uid) || self.claiming.contains(&uid) {
            return Next::Nothing;
        }
        if age < self.after {
            return Next::Wait(self.after - age);
        }
        let free = self.range.candidates(&node.name_any()).find(|b| !self.taken.contains(b));
        match free {
            Some(block) => {
                self.claiming.insert(uid);
                self.taken.insert(block);
                Next::Claim(block)
            }
            None => Next::Full(self.full_reported.insert(uid)),
        }
    }

    /// A pod on a node without a podCIDR has `ip`: when it is in the range and the node's
    /// claim is not known here (another replica made it, before this one took the node over),
    /// the node's block is the one holding it — only its claim could have given it.
    pub fn adopt(&mut self, node_uid: &str, ip: std::net::IpAddr) {
        if self.claims.contains_key(node_uid) || !self.range.net.contains(&ip) {
            return;
        }
        if let Ok(block) = IpNet::new(ip, self.range.mask) {
            let block = block.trunc();
            self.taken.insert(block);
            self.claims.insert(node_uid.to_string(), block);
        }
    }

    /// Records how a claim went.
    pub fn on_claim(&mut self, claim: &Claim) {
        self.claiming.remove(&claim.uid);
        if claim.block != claim.wanted {
            self.taken.remove(&claim.wanted);
            self.taken.insert(claim.block);
        }
        match claim.outcome {
            Outcome::Claimed { .. } => {
                self.claims.insert(claim.uid.clone(), claim.block);
            }
            Outcome::Taken => {}
            Outcome::Failed(_) => {
                self.taken.remove(&claim.block);
            }
        }
    }

    /// The node is gone: its claim goes with it (the Lease by its owner reference).
    pub fn forget(&mut self, node_uid: &str) {
        if let Some(block) = self.claims.remove(node_uid) {
            self.taken.remove(&block);
        }
        self.full_reported.remove(node_uid);
    }

    /// Learns the claims that exist (after a restart, the blocks whose addresses pods have).
    pub async fn load(&mut self, client: &Client) -> kube::Result<usize> {
        let api: Api<Lease> = Api::namespaced(client.clone(), CLAIM_NAMESPACE);
        let leases = api.list(&ListParams::default().labels(NODE_UID_LABEL)).await?;
        for lease in leases {
            let block = lease.annotations().get(BLOCK_ANNOTATION).and_then(|b| b.parse::<IpNet>().ok());
            let Some(block) = block.filter(|b| self.range.holds(b)) else { continue };
            self.taken.insert(block);
            if let Some(uid) = lease.labels().get(NODE_UID_LABEL) {
                self.claims.insert(uid.clone(), block);
            }
        }
        Ok(self.claims.len())
    }
}

/// The Lease that claims `block` for `node`.
pub fn claim_lease(node: &Node, block: &IpNet) -> Lease {
    let (name, uid) = (node.name_any(), node.metadata.uid.clone().unwrap_or_default());
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(block)),
            namespace: Some(CLAIM_NAMESPACE.into()),
            labels: Some([(NODE_UID_LABEL.to_string(), uid.clone())].into()),
            // The fake-node annotation: the admission policy lets the operator write only
            // Leases in kube-node-lease that carry it (a claim belongs to a simulated node).
            annotations: Some(
                [
                    (BLOCK_ANNOTATION.to_string(), block.to_string()),
                    (FAKE_NODE_ANNOTATION.to_string(), FAKE_VALUE.to_string()),
                ]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid,
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec { holder_identity: Some(name), ..Default::default() }),
    }
}

/// Claims `block` for `node` by creating its Lease, unless the node holds a block already (a
/// claim another replica made, or this one before a restart); a Lease of the block that
/// exists already is another node's.
pub async fn claim(client: Client, node: &Node, block: IpNet) -> Claim {
    let api: Api<Lease> = Api::namespaced(client, CLAIM_NAMESPACE);
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let done =
        |held: IpNet, outcome| Claim { node: node.name_any(), uid: uid.clone(), wanted: block, block: held, outcome };
    match api.list(&ListParams::default().labels(&format!("{NODE_UID_LABEL}={uid}"))).await {
        Ok(held) => {
            let block_of = |l: &Lease| l.annotations().get(BLOCK_ANNOTATION)?.parse::<IpNet>().ok();
            if let Some(held) = held.items.iter().find_map(block_of) {
                return done(held, Outcome::Claimed { new: false });
            }
        }
        Err(e) => return done(block, Outcome::Failed(e.to_string())),
    }
    let pp = PostParams { field_manager: Some(crate::api::conventions::FIELD_MANAGER.into()), ..Default::default() };
    let outcome = match api.create(&pp, &claim_lease(node, &block)).await {
        Ok(_) => Outcome::Claimed { new: true },
        Err(kube::Error::Api(s)) if s.code == 409 => match api.get(&lease_name(&block)).await {
            Ok(l) if l.labels().get(NODE_UID_LABEL) == Some(&uid) => Outcome::Claimed { new: false },
            Ok(_) => Outcome::Taken,
            Err(e) => Outcome::Failed(e.to_string()),
        },
        Err(e) => Outcome::Failed(e.to_string()),
    };
    done(block, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        use crate::informer::fixtures::TestNode;
        Node::test(name)
    }

    #[test]
    fn a_node_waits_then_claims_a_free_block_and_keeps_it() {
        let range = FallbackRange::new("10.0.0.0/23".parse().unwrap(), 24).unwrap();
        let mut f = Fallback::new(range, Duration::from_secs(10));
        let a = node("a");
        assert_eq!(f.next(&a, Duration::from_secs(3)), Next::Wait(Duration::from_secs(7)), "it may get a podCIDR yet");
        let Next::Claim(first) = f.next(&a, Duration::from_secs(11)) else { panic!("a claim") };
        assert_eq!(f.next(&a, Duration::from_secs(11)), Next::Nothing, "one claim at a time");
        // Another replica holds it: the next free block.
        f.on_claim(&Claim {
            node: "a".into(),
            uid: "uid-a".into(),
            wanted: first,
            block: first,
            outcome: Outcome::Taken,
        });
        let Next::Claim(second) = f.next(&a, Duration::from_secs(12)) else { panic!("the other block") };
        assert_ne!(first, second);
        f.on_claim(&Claim {
            node: "a".into(),
            uid: "uid-a".into(),
            wanted: second,
            block: second,
            outcome: Outcome::Claimed { new: true },
        });
        assert_eq!(f.block_of("uid-a"), Some(second));
        assert_eq!(f.next(&a, Duration::from_secs(12)), Next::Nothing);
        // Both blocks taken: a second node is told once.
        let b = node("b");
        assert_eq!(f.next(&b, Duration::from_secs(20)), Next::Full(true));
        assert_eq!(f.next(&b, Duration::from_secs(21)), Next::Full(false));
        // The first node goes: its block is free again.
        f.forget("uid-a");
        assert_eq!(f.next(&b, Duration::from_secs(22)), Next::Claim(second));
    }

    #[test]
    fn a_failed_claim_frees_the_block_for_another_try() {
        let range = FallbackRange::new("10.0.0.0/24".parse().unwrap(), 24).unwrap();
        let mut f = Fallback::new(range, Duration::ZERO);
        let Next::Claim(block) = f.next(&node("a"), Duration::ZERO) else { panic!() };
        f.on_claim(&Claim {
            node: "a".into(),
            uid: "uid-a".into(),
            wanted: block,
            block,
            outcome: Outcome::Failed("timeout".into()),
        });
        assert_eq!(f.next(&node("a"), Duration::ZERO), Next::Claim(block));
    }

    #[test]
    fn a_node_taken_over_keeps_the_block_its_pods_show_or_its_lease_names() {
        let range = FallbackRange::new("10.0.0.0/20".parse().unwrap(), 24).unwrap();
        let mut f = Fallback::new(range, Duration::ZERO);
        f.adopt("uid-a", "10.0.5.17".parse().unwrap());
        assert_eq!(f.block_of("uid-a"), Some("10.0.5.0/24".parse().unwrap()));
        f.adopt("uid-a", "10.0.6.1".parse().unwrap());
        assert_eq!(f.block_of("uid-a"), Some("10.0.5.0/24".parse().unwrap()), "the first one stays");
        f.adopt("uid-b", "10.244.0.3".parse().unwrap());
        assert_eq!(f.block_of("uid-b"), None, "an address outside the range tells nothing");
        // A claim answered with the block the node held already.
        let Next::Claim(wanted) = f.next(&node("b"), Duration::ZERO) else { panic!() };
        let held: IpNet = "10.0.9.0/24".parse().unwrap();
        f.on_claim(&Claim {
            node: "b".into(),
            uid: "uid-b".into(),
            wanted,
            block: held,
            outcome: Outcome::Claimed { new: false },
        });
        assert_eq!(f.block_of("uid-b"), Some(held));
        assert!(!f.taken.contains(&wanted) && f.taken.contains(&held), "the asked-for block is free again");
    }

    #[test]
    fn the_claim_lease_names_its_block_and_belongs_to_the_node() {
        let lease = claim_lease(&node("n-1"), &"10.0.7.0/24".parse().unwrap());
        assert_eq!(lease.metadata.name.as_deref(), Some("pod-cidr-10-0-7-0-24"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(lease.annotations()[BLOCK_ANNOTATION], "10.0.7.0/24");
        assert_eq!(
            lease.annotations()["kwok.x-k8s.io/node"],
            "fake",
            "the admission policy lets the operator write it"
        );
        assert_eq!(lease.labels()[NODE_UID_LABEL], "uid-n-1");
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Node", "n-1", "uid-n-1"));
    }
}
