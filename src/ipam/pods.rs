//! Pod addresses per node: one allocator per podCIDR of each node (IPv4 and IPv6 for
//! dual-stack nodes), keyed by pod UID, rebuilt from existing pods after a restart.

use crate::ipam::HostAllocator;
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;

#[derive(Default)]
pub struct PodIpam {
    /// node name → (the podCIDRs the allocators were made for, allocators)
    nodes: HashMap<String, (Vec<IpNet>, Vec<HostAllocator>)>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Allocation {
    Ips(Vec<IpAddr>),
    /// The node has no podCIDR yet (node IPAM has not assigned one).
    NoRange,
    /// A range of the node is full.
    Exhausted(IpNet),
}

impl PodIpam {
    fn allocators(&mut self, node: &str, cidrs: &[IpNet]) -> &mut Vec<HostAllocator> {
        let entry = self.nodes.entry(node.to_string()).or_insert_with(|| (vec![], vec![]));
        if entry.0 != cidrs {
            // A new node under an old name, or its first sight: start afresh.
            *entry = (cidrs.to_vec(), cidrs.iter().map(|n| HostAllocator::new(*n)).collect());
        }
        &mut entry.1
    }

    /// Addresses for pod `uid` on `node` (one per podCIDR), the same ones on every call.
    pub fn allocate(&mut self, node: &str, cidrs: &[IpNet], uid: &str) -> Allocation {
        if cidrs.is_empty() {
            return Allocation::NoRange;
        }
        let allocators = self.allocators(node, cidrs);
        let mut ips = Vec::new();
        for a in allocators.iter_mut() {
            match a.allocate(uid) {
                Some(ip) => ips.push(ip),
                None => {
                    let net = *a.net();
                    for a in allocators.iter_mut() {
                        a.release(uid);
                    }
                    return Allocation::Exhausted(net);
                }
            }
        }
        Allocation::Ips(ips)
    }

    /// Records addresses a pod already has. Returns false for an address outside the node's
    /// ranges or held by another pod.
    pub fn observe(&mut self, node: &str, cidrs: &[IpNet], uid: &str, ips: &[IpAddr]) -> bool {
        if cidrs.is_empty() {
            return false;
        }
        let allocators = self.allocators(node, cidrs);
        let mut ok = true;
        for ip in ips {
            match allocators.iter_mut().find(|a| a.net().contains(ip)) {
                Some(a) => ok &= a.observe(uid, *ip),
                None => ok = false,
            }
        }
        ok
    }

    /// Returns the addresses of pod `uid` on `node`; whether it held any.
    pub fn release(&mut self, node: &str, uid: &str) -> bool {
        let mut released = false;
        if let Some((_, allocators)) = self.nodes.get_mut(node) {
            for a in allocators {
                released |= a.release(uid).is_some();
            }
        }
        released
    }

    /// The nodes with addresses on record.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    pub fn forget_node(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn dual_stack_nodes_give_one_address_per_family() {
        let mut ipam = PodIpam::default();
        let cidrs = nets(&["10.0.0.0/24", "fd00::/64"]);
        let Allocation::Ips(ips) = ipam.allocate("n", &cidrs, "pod-a") else { panic!() };
        assert_eq!(ips.len(), 2);
        assert!(ips[0].is_ipv4() && ips[1].is_ipv6());
        assert_eq!(ipam.allocate("n", &cidrs, "pod-a"), Allocation::Ips(ips));
    }

    #[test]
    fn exhaustion_and_recycling() {
        let mut ipam = PodIpam::default();
        let cidrs = nets(&["10.0.0.0/30"]); // two hosts
        assert!(matches!(ipam.allocate("n", &cidrs, "a"), Allocation::Ips(_)));
        assert!(matches!(ipam.allocate("n", &cidrs, "b"), Allocation::Ips(_)));
        assert_eq!(ipam.allocate("n", &cidrs, "c"), Allocation::Exhausted(cidrs[0]));
        ipam.release("n", "a");
        assert!(matches!(ipam.allocate("n", &cidrs, "c"), Allocation::Ips(_)));
        assert_eq!(ipam.allocate("m", &[], "x"), Allocation::NoRange);
    }

    #[test]
    fn rebuilt_state_is_never_handed_out_twice() {
        let mut ipam = PodIpam::default();
        let cidrs = nets(&["10.0.0.0/29"]);
        let held: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        assert!(ipam.observe("n", &cidrs, "old1", &held[..1]));
        assert!(ipam.observe("n", &cidrs, "old2", &held[1..]));
        for i in 0..4 {
            let Allocation::Ips(ips) = ipam.allocate("n", &cidrs, &format!("new{i}")) else { panic!() };
            assert!(!held.contains(&ips[0]));
        }
        assert!(!ipam.observe("n", &cidrs, "dup", &held[..1]), "an address held by another pod");
    }
}
