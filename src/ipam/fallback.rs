//! Fallback pod ranges: a block of one range per node, for nodes without a podCIDR (clusters
//! whose controller manager does not allocate node CIDRs: EKS, Calico IPAM, many kubeadm
//! installs). Pure: which blocks a node tries and in what order, and how a block is named as
//! the Lease that claims it cluster-wide (see the pod simulator's `fallback`).

use super::fnv;
use crate::api::ranges::nth_subnet;
use ipnet::IpNet;

/// Label on a claim Lease: the UID of the node it is for (a node made again under the same
/// name claims afresh; the old claim goes with the old node, its owner).
pub const NODE_UID_LABEL: &str = "pools.kwok.x-k8s.io/pod-cidr-node-uid";
/// Annotation on a claim Lease: the block it claims.
pub const BLOCK_ANNOTATION: &str = "pools.kwok.x-k8s.io/pod-cidr";
/// Where claim Leases live: beside the node heartbeats.
pub const CLAIM_NAMESPACE: &str = "kube-node-lease";

/// One range cut into per-node blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallbackRange {
    pub net: IpNet,
    pub mask: u8,
}

impl FallbackRange {
    /// `net` cut into `/mask` blocks; a block must hold at least two pod addresses.
    pub fn new(net: IpNet, mask: u8) -> Result<Self, String> {
        let net = net.trunc();
        let bits = if matches!(net, IpNet::V4(_)) { 32 } else { 128 };
        if mask < net.prefix_len() || mask > bits - 2 {
            return Err(format!(
                "a /{mask} block does not fit {net}: use a mask from {} to {} (a block must hold at least two pod addresses)",
                net.prefix_len(),
                bits - 2
            ));
        }
        Ok(Self { net, mask })
    }

    /// How many blocks the range has (at most 2^32).
    pub fn blocks(&self) -> u64 {
        let span = u32::from(self.mask - self.net.prefix_len()).min(32);
        1u64 << span
    }

    /// Block `i`.
    pub fn block(&self, i: u64) -> Option<IpNet> {
        nth_subnet(&self.net, self.mask, u32::try_from(i).ok()?)
    }

    /// The blocks node `key` tries, in order: from a point its name picks, wrapping round, so
    /// that replicas claiming for different nodes rarely reach for the same block.
    pub fn candidates(&self, key: &str) -> impl Iterator<Item = IpNet> + '_ {
        let n = self.blocks();
        let start = fnv(key) % n;
        (0..n).filter_map(move |k| self.block((start + k) % n))
    }

    /// Whether `block` is one of this range's.
    pub fn holds(&self, block: &IpNet) -> bool {
        block.prefix_len() == self.mask && self.net.contains(&block.network())
    }
}

/// The name of the Lease that claims `block`: one per block, so two claims of it cannot both
/// be created.
pub fn lease_name(block: &IpNet) -> String {
    let text = block.to_string().replace(['.', ':', '/'], "-");
    format!("pod-cidr-{}", text.trim_matches('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(cidr: &str, mask: u8) -> FallbackRange {
        FallbackRange::new(cidr.parse().unwrap(), mask).unwrap()
    }

    #[test]
    fn a_range_is_cut_into_blocks_that_hold_pods() {
        let r = range("10.0.0.0/12", 24);
        assert_eq!(r.blocks(), 4096);
        assert_eq!(r.block(0).unwrap().to_string(), "10.0.0.0/24");
        assert_eq!(r.block(4095).unwrap().to_string(), "10.15.255.0/24");
        assert_eq!(r.block(4096), None);
        assert!(FallbackRange::new("10.0.0.0/24".parse().unwrap(), 16).unwrap_err().contains("from 24 to 30"));
        assert!(FallbackRange::new("10.0.0.0/24".parse().unwrap(), 31).is_err(), "no room for two pods");
        assert_eq!(range("10.0.0.1/24", 24).net.to_string(), "10.0.0.0/24", "kwok's --cidr form is accepted");
        assert_eq!(range("fd00::/48", 64).blocks(), 65536);
    }

    #[test]
    fn every_block_is_tried_once_from_a_point_the_name_picks() {
        let r = range("10.0.0.0/20", 24);
        let order: Vec<IpNet> = r.candidates("node-a").collect();
        assert_eq!(order.len(), 16);
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 16, "each block once");
        assert_eq!(order, r.candidates("node-a").collect::<Vec<_>>(), "the same order every time");
        let firsts: std::collections::HashSet<IpNet> =
            (0..40).map(|i| r.candidates(&format!("node-{i}")).next().unwrap()).collect();
        assert!(firsts.len() > 8, "names start at different blocks: {}", firsts.len());
    }

    #[test]
    fn blocks_are_named_as_leases() {
        assert_eq!(lease_name(&"10.0.3.0/24".parse().unwrap()), "pod-cidr-10-0-3-0-24");
        assert_eq!(lease_name(&"fd00:0:0:1::/64".parse().unwrap()), "pod-cidr-fd00-0-0-1---64");
        let r = range("10.0.0.0/12", 24);
        assert!(r.holds(&"10.0.3.0/24".parse().unwrap()));
        assert!(!r.holds(&"10.0.3.0/25".parse().unwrap()));
        assert!(!r.holds(&"10.16.0.0/24".parse().unwrap()));
    }
}
