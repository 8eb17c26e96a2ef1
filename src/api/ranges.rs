//! What a pool's address ranges mean: the i-th subnet of `podCIDR {cidr, maskSize}` and the
//! i-th host of `internalIPs`, and how many a range holds. Pure arithmetic, shared by the
//! validation rules, the rendering of children and the address allocators.

use ipnet::IpNet;
use std::net::IpAddr;

pub fn bits(net: &IpNet) -> u8 {
    match net {
        IpNet::V4(_) => 32,
        IpNet::V6(_) => 128,
    }
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

pub fn from_u128(v: u128, v4: bool) -> IpAddr {
    if v4 { IpAddr::V4((v as u32).into()) } else { IpAddr::V6(v.into()) }
}

/// The `index`-th subnet of length `mask` inside `net`, or `None` past the end.
pub fn nth_subnet(net: &IpNet, mask: u8, index: u32) -> Option<IpNet> {
    let total = bits(net);
    if mask < net.prefix_len() || mask > total {
        return None;
    }
    let span = u32::from(mask - net.prefix_len());
    if span < 32 && u64::from(index) >= 1u64 << span {
        return None;
    }
    let step = 1u128.checked_shl(u32::from(total - mask)).unwrap_or(0);
    let base = to_u128(net.network());
    let addr = base.checked_add(step.checked_mul(u128::from(index))?)?;
    IpNet::new(from_u128(addr, matches!(net, IpNet::V4(_))), mask).ok()
}

/// The usable host offsets of `net`: (first, last). IPv4 skips the network and broadcast
/// addresses (except /31 and /32); IPv6 skips the subnet-router anycast address.
pub fn host_range(net: &IpNet) -> (u128, u128) {
    let host_bits = u32::from(bits(net) - net.prefix_len());
    let size = if host_bits >= 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
    match net {
        IpNet::V4(_) if host_bits <= 1 => (0, size),
        IpNet::V4(_) => (1, size - 1),
        IpNet::V6(_) if host_bits == 0 => (0, 0),
        IpNet::V6(_) => (1, size),
    }
}

/// How many host addresses `net` has.
pub fn host_count(net: &IpNet) -> u128 {
    let (first, last) = host_range(net);
    last - first + 1
}

/// The `index`-th host address of `net`, or `None` past the end.
pub fn nth_host(net: &IpNet, index: u32) -> Option<IpAddr> {
    let (first, last) = host_range(net);
    let offset = first.checked_add(u128::from(index))?;
    if offset > last {
        return None;
    }
    Some(from_u128(to_u128(net.network()) + offset, matches!(net, IpNet::V4(_))))
}
