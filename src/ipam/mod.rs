//! Address allocators: hand out host addresses of a range by key (node name, pod UID),
//! recycle them, and rebuild from what already exists; pod addresses per node ([`pods`]).

pub mod fallback;
pub mod pods;

use crate::api::ranges::{from_u128, host_count, host_range, to_u128};
#[cfg(test)]
use crate::api::ranges::{nth_host, nth_subnet};
use ipnet::IpNet;
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

/// FNV-1a: a stable spread of names over a range (the same in every process and build).
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Where a key's addresses are first looked for: FNV of the name, or for `<stem>-<index>`
/// (up to nine digits) FNV of the stem plus the index.
fn spread_point(key: &str) -> u128 {
    let indexed = key.rsplit_once('-').filter(|(stem, digits)| {
        !stem.is_empty() && (1..=9).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
    });
    match indexed.and_then(|(stem, digits)| Some((stem, digits.parse::<u64>().ok()?))) {
        Some((stem, index)) => u128::from(fnv(stem)) + u128::from(index),
        None => u128::from(fnv(key)),
    }
}

/// Hands out host addresses of one range by key.
#[derive(Debug, Clone)]
pub struct HostAllocator {
    net: IpNet,
    by_key: HashMap<String, u128>,
    used: HashSet<u128>,
    cursor: u128,
}

impl HostAllocator {
    pub fn new(net: IpNet) -> Self {
        let (first, _) = host_range(&net);
        Self { net, by_key: HashMap::new(), used: HashSet::new(), cursor: first }
    }

    /// Like [`HostAllocator::new`], handing out addresses from a point chosen by `seed`, so
    /// that allocators of different processes sharing one range rarely pick the same ones.
    pub fn seeded(net: IpNet, seed: &str) -> Self {
        let mut a = Self::new(net);
        let (first, last) = host_range(&net);
        a.cursor = first + u128::from(fnv(seed)) % (last - first + 1);
        a
    }

    pub fn net(&self) -> &IpNet {
        &self.net
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    fn offset_of(&self, ip: IpAddr) -> Option<u128> {
        if !self.net.contains(&ip) {
            return None;
        }
        let offset = to_u128(ip) - to_u128(self.net.network());
        let (first, last) = host_range(&self.net);
        (first..=last).contains(&offset).then_some(offset)
    }

    fn addr(&self, offset: u128) -> IpAddr {
        from_u128(to_u128(self.net.network()) + offset, matches!(self.net, IpNet::V4(_)))
    }

    /// The address of `key`, allocating the next free one if it has none. `None` when the
    /// range is exhausted.
    pub fn allocate(&mut self, key: &str) -> Option<IpAddr> {
        let start = self.cursor;
        self.allocate_from(key, start)
    }

    /// Like [`HostAllocator::allocate`], probing from a point chosen by the key itself, so that
    /// processes that each see every holder, but allocate for different keys, rarely pick the
    /// same address (sharded simulators).
    /// A name ending in `-<index>` (a pool's child) takes its stem's point plus the index when
    /// that is free, so the nodes of one pool take consecutive addresses and never clash with
    /// each other even when two processes pick them at the same moment without seeing each
    /// other's picks; when it is taken (another pool's block), the probe starts from the whole
    /// name's point instead of walking along the other block.
    pub fn allocate_spread(&mut self, key: &str) -> Option<IpAddr> {
        let (first, last) = host_range(&self.net);
        let size = last - first + 1;
        let indexed = first + spread_point(key) % size;
        let start = if self.used.contains(&indexed) { first + u128::from(fnv(key)) % size } else { indexed };
        let cursor = self.cursor;
        let ip = self.allocate_from(key, start);
        self.cursor = cursor;
        ip
    }

    /// The key holding `ip` (a scan: for the rare clash only).
    pub fn holder(&self, ip: IpAddr) -> Option<&str> {
        let offset = self.offset_of(ip)?;
        self.by_key.iter().find(|(_, o)| **o == offset).map(|(k, _)| k.as_str())
    }

    /// Gives `ip` to `key`, taking it from whoever held it (who then holds nothing).
    pub fn hand_to(&mut self, ip: IpAddr, key: &str) -> bool {
        if let Some(holder) = self.holder(ip).map(str::to_string) {
            self.by_key.remove(&holder);
            if let Some(offset) = self.offset_of(ip) {
                self.used.remove(&offset);
            }
        }
        self.release(key);
        self.observe(key, ip)
    }

    fn allocate_from(&mut self, key: &str, start: u128) -> Option<IpAddr> {
        if let Some(offset) = self.by_key.get(key) {
            return Some(self.addr(*offset));
        }
        let (first, last) = host_range(&self.net);
        let size = last - first + 1;
        if self.used.len() as u128 >= size {
            return None;
        }
        let mut offset = start.clamp(first, last);
        // Next fit: at most `used.len() + 1` probes find a free slot.
        loop {
            if !self.used.contains(&offset) {
                break;
            }
            offset = if offset == last { first } else { offset + 1 };
        }
        self.used.insert(offset);
        self.by_key.insert(key.to_string(), offset);
        self.cursor = if offset == last { first } else { offset + 1 };
        Some(self.addr(offset))
    }

    /// Records that `key` already holds `ip` (rebuilding after a restart). Returns false when
    /// `ip` is outside the range or already held by another key.
    pub fn observe(&mut self, key: &str, ip: IpAddr) -> bool {
        let Some(offset) = self.offset_of(ip) else { return false };
        if let Some(existing) = self.by_key.get(key) {
            return *existing == offset;
        }
        if !self.used.insert(offset) {
            return false;
        }
        self.by_key.insert(key.to_string(), offset);
        true
    }

    /// Returns the address of `key` to the pool.
    pub fn release(&mut self, key: &str) -> Option<IpAddr> {
        let offset = self.by_key.remove(key)?;
        self.used.remove(&offset);
        Some(self.addr(offset))
    }

    pub fn get(&self, key: &str) -> Option<IpAddr> {
        self.by_key.get(key).map(|o| self.addr(*o))
    }

    /// Whether every host address is taken.
    pub fn is_full(&self) -> bool {
        self.used.len() as u128 >= host_count(&self.net)
    }

    /// Whether `ip` is held by anyone.
    pub fn is_used(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|o| self.used.contains(&o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_allocators_of_two_processes_agree_on_different_keys() {
        // Two simulators, each allocating for its own nodes and observing the other's.
        let range = net("100.64.0.0/16");
        let (mut a, mut b) = (HostAllocator::new(range), HostAllocator::new(range));
        let mut seen = HashSet::new();
        for i in 0..2000 {
            let (mine, theirs) = if i % 2 == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
            let key = format!("node-{i}");
            let ip = mine.allocate_spread(&key).unwrap();
            assert!(theirs.observe(&key, ip), "{ip} of {key} was taken already");
            assert!(seen.insert(ip));
        }
        // The same key always starts at the same point.
        let mut c = HostAllocator::new(range);
        assert_eq!(c.allocate_spread("node-7"), HostAllocator::new(range).allocate_spread("node-7"));
    }

    #[test]
    fn one_pools_nodes_never_clash_even_when_picked_unseen() {
        // Three simulators of one pool's 6,000 nodes in the default-sized range, none seeing
        // the others' picks (all at the same moment): every node still has its own address.
        let range = net("198.18.0.0/15");
        let mut sims = [HostAllocator::new(range), HostAllocator::new(range), HostAllocator::new(range)];
        let mut seen = HashSet::new();
        for i in 0..6000 {
            let ip = sims[(fnv(&i.to_string()) % 3) as usize].allocate_spread(&format!("gpu-pool-{i}")).unwrap();
            assert!(seen.insert(ip), "gpu-pool-{i} got {ip} twice");
        }
        // Names without an index spread by their whole name; an index too long to be one too.
        let mut a = HostAllocator::new(range);
        let (x, y) = (a.allocate_spread("karpenter-abcde").unwrap(), a.allocate_spread("pool-12345678901").unwrap());
        assert_ne!(x, y);
        assert_eq!(spread_point("pool-7"), spread_point("pool-0") + 7);
        // A pool whose block lands on another's does not walk along it: its nodes start afresh
        // from their own names' points.
        let mut b = HostAllocator::new(net("10.0.0.0/16"));
        let base = (spread_point("blue-0") % 65534) as usize;
        for i in 0..1000 {
            b.allocate_spread(&format!("blue-{i}")).unwrap();
        }
        let stem = (0..).map(|k| format!("red{k}")).find(|s| {
            let p = (u128::from(fnv(s)) % 65534) as usize;
            p > base + 10 && p < base + 500
        });
        let red = b.allocate_spread(&format!("{}-0", stem.unwrap())).unwrap();
        let blue_end = b.get("blue-999").unwrap();
        assert_ne!(to_u128(red), to_u128(blue_end) + 1, "red-0 walked to the end of blue's block");
        assert_eq!(spread_point("pool-x7"), u128::from(fnv("pool-x7")));
        assert_eq!(spread_point("-7"), u128::from(fnv("-7")));
    }

    #[test]
    fn hand_to_moves_an_address_between_keys() {
        let mut a = HostAllocator::new(net("10.0.0.0/29"));
        let ip = a.allocate("x").unwrap();
        assert_eq!(a.holder(ip), Some("x"));
        assert!(a.hand_to(ip, "y"));
        assert_eq!((a.holder(ip), a.get("x"), a.get("y")), (Some("y"), None, Some(ip)));
        assert_eq!(a.len(), 1);
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn subnets_in_order_until_the_end() {
        let n = net("10.0.0.0/16");
        assert_eq!(nth_subnet(&n, 24, 0), Some(net("10.0.0.0/24")));
        assert_eq!(nth_subnet(&n, 24, 3), Some(net("10.0.3.0/24")));
        assert_eq!(nth_subnet(&n, 24, 255), Some(net("10.0.255.0/24")));
        assert_eq!(nth_subnet(&n, 24, 256), None);
        assert_eq!(nth_subnet(&n, 8, 0), None);
        assert_eq!(nth_subnet(&net("fd00::/48"), 64, 2), Some(net("fd00:0:0:2::/64")));
    }

    #[test]
    fn hosts_skip_network_and_broadcast() {
        let n = net("10.1.0.0/30");
        assert_eq!(nth_host(&n, 0), Some("10.1.0.1".parse().unwrap()));
        assert_eq!(nth_host(&n, 1), Some("10.1.0.2".parse().unwrap()));
        assert_eq!(nth_host(&n, 2), None);
        assert_eq!(host_count(&net("10.0.0.0/24")), 254);
        assert_eq!(host_count(&net("10.0.0.0/32")), 1);
        assert_eq!(nth_host(&net("fd00::/64"), 0), Some("fd00::1".parse().unwrap()));
    }

    #[test]
    fn allocator_is_unique_stable_and_recycles() {
        let mut a = HostAllocator::new(net("10.0.0.0/29")); // 6 hosts
        let ips: Vec<_> = (0..6).map(|i| a.allocate(&format!("k{i}")).unwrap()).collect();
        let unique: HashSet<_> = ips.iter().collect();
        assert_eq!(unique.len(), 6);
        assert!(ips.iter().all(|ip| a.net().contains(ip)));
        assert_eq!(a.allocate("k0"), Some(ips[0]), "same key, same address");
        assert_eq!(a.allocate("k6"), None, "exhausted");
        assert_eq!(a.release("k2"), Some(ips[2]));
        assert_eq!(a.allocate("k7"), Some(ips[2]), "recycled");
    }

    #[test]
    fn seeded_allocators_start_apart() {
        let mut a = HostAllocator::seeded(net("100.64.0.0/10"), "one");
        let mut b = HostAllocator::seeded(net("100.64.0.0/10"), "two");
        assert_ne!(a.allocate("x"), b.allocate("x"));
        let mut tiny = HostAllocator::seeded(net("10.0.0.0/30"), "any");
        assert!(tiny.allocate("a").is_some() && tiny.allocate("b").is_some() && tiny.allocate("c").is_none());
    }

    #[test]
    fn rebuild_from_existing_addresses() {
        let mut a = HostAllocator::new(net("10.0.0.0/24"));
        assert!(a.observe("old", "10.0.0.1".parse().unwrap()));
        assert!(!a.observe("dup", "10.0.0.1".parse().unwrap()), "taken by another key");
        assert!(!a.observe("x", "10.9.0.1".parse().unwrap()), "outside");
        assert_ne!(a.allocate("new"), Some("10.0.0.1".parse().unwrap()));
    }
}
