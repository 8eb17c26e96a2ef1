//! Where a simulated node's kubelet API answers, as the node reports it: its `Hostname`
//! address (the first address type the API server and metrics-server try) and
//! `daemonEndpoints.kubeletEndpoint.port`. The node's InternalIPs stay the pool's.
//!
//! On one machine every node gets an address of its own in 127.128.0.0/9 (Linux answers all of
//! 127/8 on the loopback interface), so the server knows which node a connection is for from
//! the address it came in on, as a real kubelet knows its own node. In a cluster every node of
//! a replica shares the replica's pod IP; node-scoped paths then carry the node's name
//! (`/metrics/nodes/<node>/metrics/resource`, which the node's
//! `metrics.k8s.io/resource-metrics-path` annotation tells metrics-server). Pure.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The node annotation metrics-server (v0.7+) scrapes instead of `/metrics/resource`.
pub const RESOURCE_METRICS_PATH_ANNOTATION: &str = "metrics.k8s.io/resource-metrics-path";

/// The node-scoped resource metrics path of `node` (kwok's spelling, so tooling made for kwok works).
pub fn resource_metrics_path(node: &str) -> String {
    format!("/metrics/nodes/{node}/metrics/resource")
}

/// A node's kubelet endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub address: IpAddr,
    pub port: i32,
}

/// How addresses are advertised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advertise {
    /// One loopback address per node (a local cluster).
    Loopback,
    /// Every node at this address (the replica's pod IP).
    Shared(IpAddr),
}

/// The first and last loopback address handed out: 127.128.0.1 ..= 127.255.255.254.
const FIRST: u32 = u32::from_be_bytes([127, 128, 0, 1]);
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);

/// Whether `ip` is one of the per-node loopback addresses.
fn is_node_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => (FIRST..=LAST).contains(&u32::from(v4)),
        IpAddr::V6(_) => false,
    }
}

/// The endpoints of the nodes this replica serves.
#[derive(Debug)]
pub struct Endpoints {
    advertise: Advertise,
    port: i32,
    by_node: HashMap<String, Ipv4Addr>,
    by_address: HashMap<Ipv4Addr, String>,
    next: u32,
}

impl Endpoints {
    pub fn new(advertise: Advertise, port: u16) -> Self {
        Self { advertise, port: i32::from(port), by_node: HashMap::new(), by_address: HashMap::new(), next: FIRST }
    }

    pub fn advertise(&self) -> Advertise {
        self.advertise
    }

    /// How many nodes have an endpoint here.
    pub fn count(&self) -> usize {
        self.by_node.len()
    }

    pub fn port(&self) -> i32 {
        self.port
    }

    /// The endpoint of `node`, assigned on first ask: the address it reports (`current`) if that
    /// is a free node loopback address, else the next free one. `None` only when all 8 million
    /// are taken.
    pub fn assign(&mut self, node: &str, current: Option<IpAddr>) -> Option<Endpoint> {
        let address = match self.advertise {
            Advertise::Shared(ip) => ip,
            Advertise::Loopback => IpAddr::V4(self.loopback(node, current)?),
        };
        Some(Endpoint { address, port: self.port })
    }

    fn loopback(&mut self, node: &str, current: Option<IpAddr>) -> Option<Ipv4Addr> {
        if let Some(ip) = self.by_node.get(node) {
            return Some(*ip);
        }
        let wanted = match current {
            Some(IpAddr::V4(v4)) if is_node_loopback(current?) && !self.by_address.contains_key(&v4) => Some(v4),
            _ => None,
        };
        let ip = match wanted {
            Some(ip) => ip,
            None => self.next_free()?,
        };
        self.by_node.insert(node.to_string(), ip);
        self.by_address.insert(ip, node.to_string());
        Some(ip)
    }

    fn next_free(&mut self) -> Option<Ipv4Addr> {
        let span = LAST - FIRST + 1;
        for step in 0..span {
            let n = FIRST + (self.next - FIRST + step) % span;
            let ip = Ipv4Addr::from(n);
            if !self.by_address.contains_key(&ip) {
                self.next = if n == LAST { FIRST } else { n + 1 };
                return Some(ip);
            }
        }
        None
    }

    /// The endpoint `node` has, if assigned.
    pub fn get(&self, node: &str) -> Option<Endpoint> {
        match self.advertise {
            Advertise::Shared(ip) => Some(Endpoint { address: ip, port: self.port }),
            Advertise::Loopback => {
                self.by_node.get(node).map(|ip| Endpoint { address: IpAddr::V4(*ip), port: self.port })
            }
        }
    }

    /// The node a connection to `local` is for (loopback mode only).
    pub fn node_at(&self, local: IpAddr) -> Option<&str> {
        match local {
            IpAddr::V4(v4) => self.by_address.get(&v4).map(String::as_str),
            IpAddr::V6(_) => None,
        }
    }

    pub fn release(&mut self, node: &str) {
        if let Some(ip) = self.by_node.remove(node) {
            self.by_address.remove(&ip);
        }
    }
}

/// The `Hostname` address a node reports, if it is an IP.
pub fn hostname_address(node: &k8s_openapi::api::core::v1::Node) -> Option<IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "Hostname")
        .and_then(|a| a.address.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_its_own_loopback_address_kept_across_restarts() {
        let mut e = Endpoints::new(Advertise::Loopback, 10250);
        let a = e.assign("a", None).unwrap();
        let b = e.assign("b", None).unwrap();
        assert_ne!(a.address, b.address);
        assert_eq!(e.assign("a", None), Some(a), "stable");
        assert_eq!(e.node_at(b.address), Some("b"));
        assert_eq!(a.port, 10250);
        assert!(is_node_loopback(a.address));
        // A restarted replica keeps what the nodes report, where free.
        let mut again = Endpoints::new(Advertise::Loopback, 10250);
        assert_eq!(again.assign("b", Some(b.address)), Some(b));
        let taken = again.assign("c", Some(b.address)).unwrap();
        assert_ne!(taken.address, b.address, "not another node's");
        // An address outside the range is not taken over.
        let other = again.assign("d", Some("10.0.0.1".parse().unwrap())).unwrap();
        assert!(is_node_loopback(other.address));
        again.release("b");
        assert_eq!(again.node_at(b.address), None);
    }

    #[test]
    fn a_shared_address_for_every_node_in_a_cluster() {
        let ip: IpAddr = "10.244.1.7".parse().unwrap();
        let mut e = Endpoints::new(Advertise::Shared(ip), 10250);
        assert_eq!(e.assign("a", None).unwrap().address, ip);
        assert_eq!(e.assign("b", None).unwrap().address, ip);
        assert_eq!(e.node_at(ip), None, "the path names the node");
        assert_eq!(resource_metrics_path("n-1"), "/metrics/nodes/n-1/metrics/resource");
    }
}
