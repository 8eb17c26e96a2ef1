//! NodePool's own rules (garde): its template owns only what the pool does not set, and its
//! per-index identity ranges (`podCIDR`, `internalIPs`) are valid, big enough, apart from
//! every other pool's and never move a live node's. Shared primitives are in
//! [`crate::api::validation`].

use super::api::{KubevirtNodes, NodePool, NodePoolRules, NodePoolSpec, NodeTemplate, Topology};
use crate::api::common::SubnetRange;
use crate::api::conventions::{HOSTNAME_LABEL, RESERVED_LABELS};
use crate::api::ranges;
use crate::api::validation::{check, label_value_problem, lines, metadata_problems, parse_net, quantity};
use ipnet::IpNet;
use kube::ResourceExt;
use std::sync::Arc;

/// Labels a node template may not set: the pool sets them itself.
/// The well-known topology labels.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";

const NODE_RESERVED_LABELS: [&str; 5] =
    [RESERVED_LABELS[0], RESERVED_LABELS[1], RESERVED_LABELS[2], RESERVED_LABELS[3], HOSTNAME_LABEL];

impl NodePoolRules {
    /// The context for `pool` among `all` pools (itself excluded by name), before an update
    /// from `old` when there is one.
    pub fn new(pool: &str, all: &[Arc<NodePool>], old: Option<(&NodePool, u32)>) -> Self {
        let others = all
            .iter()
            .filter(|p| p.name_any() != pool && p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                (
                    p.name_any(),
                    p.spec.pod_cidr.as_ref().and_then(|r| r.cidr.parse::<IpNet>().ok()).map(|n| n.trunc()),
                    p.spec.internal_ips.as_ref().and_then(|r| r.parse::<IpNet>().ok()).map(|n| n.trunc()),
                )
            })
            .collect();
        Self { others, old: old.map(|(p, n)| (p.spec.clone(), n)) }
    }

    /// How many nodes the pool had before the update (0 on a create).
    fn live(&self) -> u32 {
        self.old.as_ref().map_or(0, |(_, n)| *n)
    }
}

impl NodeTemplate {
    /// Rules on a node template: only what the pool owns. Everything else a Node may say is the
    /// API server's to judge (the webhook and the reconciler have it validate the rendered node).
    /// garde runs it on `spec.nodeTemplate` (`api.rs` names it).
    pub fn rules(t: &Self, _ctx: &NodePoolRules) -> garde::Result {
        let mut out = Vec::new();
        metadata_problems(t.metadata.as_ref(), &NODE_RESERVED_LABELS, &mut out);
        if let Some(spec) = &t.spec
            && (spec.pod_cidr.as_deref().is_some_and(|c| !c.is_empty())
                || spec.pod_cidrs.as_ref().is_some_and(|c| !c.is_empty()))
        {
            out.push(".spec.podCIDR: must be empty: every node needs a range of its own; set spec.podCIDR {cidr, maskSize} on the pool instead".into());
        }
        lines(out)
    }
}

/// Advice that does not refuse the pool (the API server accepts such a Node): allocatable
/// above capacity, which no kubelet reports. Never panics, whatever the quantities.
pub fn node_template_warnings(t: &NodeTemplate) -> Vec<String> {
    let Some(status) = &t.status else { return vec![] };
    let (Some(cap), Some(alloc)) = (&status.capacity, &status.allocatable) else { return vec![] };
    alloc
        .iter()
        .filter_map(|(k, a)| {
            let c = cap.get(k)?;
            let (qa, qc) = (quantity::approximate(&a.0)?, quantity::approximate(&c.0)?);
            (qa > qc).then(|| {
                format!(
                    "spec.nodeTemplate.status.allocatable.{k}: {} is more than status.capacity.{k} ({}); a kubelet never reports that",
                    a.0, c.0
                )
            })
        })
        .collect()
}

/// The i-th item of a range (as text), and how many items a range holds.
type Nth<'a> = &'a dyn Fn(&IpNet, u32) -> Option<String>;
type Len<'a> = &'a dyn Fn(&IpNet) -> u128;

/// One per-index identity range of a NodePool (`podCIDR` or `internalIPs`): what item `i` of
/// the range is, so that size, overlap and moves are judged by one implementation.
struct IdentityRange<'a> {
    /// The manifest field (`podCIDR`, `internalIPs`), for messages naming other pools.
    field: &'static str,
    /// The sub-path of the CIDR under the field (`.cidr` or empty).
    cidr_path: &'static str,
    /// What the items are, in messages ("subnets of /24", "host addresses").
    items: String,
    net: IpNet,
    nth: Nth<'a>,
    len: Len<'a>,
    /// The same range before an update, with its own arithmetic.
    old: Option<(IpNet, Nth<'a>, Len<'a>)>,
    /// What a live pool's nodes keep, for the message on a move.
    keeps: &'static str,
    /// What to do when the range is too small.
    advice: &'static str,
}

impl IdentityRange<'_> {
    fn problems(&self, count: i32, others: impl Iterator<Item = (String, Option<IpNet>)>, live: u32) -> Vec<String> {
        let net = self.net;
        let mut out = Vec::new();
        let have = (self.len)(&net);
        if have < u128::from(count.max(0) as u32) {
            out.push(format!(": {net} has {have} {} but nodeCount is {count}: {}", self.items, self.advice));
        }
        for (other, their) in others {
            if let Some(their) = their
                && (their.contains(&net.network()) || net.contains(&their.network()))
            {
                out.push(format!(
                    "{}: {net} overlaps {their}, the {} of NodePool {other}: every pool needs a range of its own",
                    self.cidr_path, self.field
                ));
            }
        }
        if let Some((old_net, old_nth, old_len)) = &self.old {
            let live = live.min(count.max(0) as u32);
            let before = |i| old_nth(old_net, i);
            let after = |i| (self.nth)(&net, i);
            if let Some(i) = first_moved(live, before, after, (old_len(old_net), have)) {
                out.push(format!(
                    ": the change would move node {i} from {} to {}: a live pool's range may grow, but its nodes keep their {}",
                    before(i).unwrap_or_default(),
                    after(i).unwrap_or_else(|| "nothing".into()),
                    self.keeps
                ));
            }
        }
        out
    }
}

/// The first of the `live` nodes whose item (subnet, address) would move from `before(i)` to
/// `after(i)`, in constant time whatever the count. Both are arithmetic sequences over their
/// ranges (`lens` items each): equal at 0 and 1 means the same start and step, so they agree
/// up to the end of the shorter range.
fn first_moved<T: PartialEq>(
    live: u32,
    before: impl Fn(u32) -> Option<T>,
    after: impl Fn(u32) -> Option<T>,
    lens: (u128, u128),
) -> Option<u32> {
    let first = (0..live.min(2)).find(|&i| before(i) != after(i));
    if first.is_some() {
        return first;
    }
    let shorter = lens.0.min(lens.1);
    (shorter < u128::from(live)).then_some(shorter as u32)
}

/// How many `/mask` subnets `net` holds (saturating).
fn subnet_count(net: &IpNet, mask: u8) -> u128 {
    1u128.checked_shl(u32::from(mask.saturating_sub(net.prefix_len()))).unwrap_or(u128::MAX)
}

impl NodePoolSpec {
    /// garde's rule on `spec.topology`: label values, no zone twice, a weight per zone, and
    /// no template label saying otherwise (`api.rs` names it).
    pub fn topology_rules(
        template: &NodeTemplate,
    ) -> impl FnOnce(&Option<Topology>, &NodePoolRules) -> garde::Result + '_ {
        move |topology, _| lines(topology.as_ref().map(|t| topology_problems(t, template)).unwrap_or_default())
    }

    /// garde's rule on `spec.devices`.
    #[allow(clippy::ptr_arg)] // garde hands the field as it is declared
    pub fn devices_rules(sets: &Vec<super::devices::DeviceSet>, _: &NodePoolRules) -> garde::Result {
        lines(super::devices::problems(sets))
    }

    /// garde's rule on `spec.capacity`: a percentage, prices that are decimals.
    pub fn storage_rules(s: &Option<super::api::NodeStorage>, _: &NodePoolRules) -> garde::Result {
        let limit = s.as_ref().and_then(|s| s.attach_limit).filter(|l| *l > crate::api::storage::MAX_ATTACH_LIMIT);
        lines(
            limit
                .map(|l| format!(".attachLimit: {l} is more than {}", crate::api::storage::MAX_ATTACH_LIMIT))
                .into_iter()
                .collect(),
        )
    }

    pub fn capacity_rules(c: &Option<super::api::Capacity>, _: &NodePoolRules) -> garde::Result {
        let Some(c) = c else { return Ok(()) };
        let mut out = Vec::new();
        out.extend(crate::api::lifecycle::percent("spotPercent", c.spot_percent));
        let decimal = |t: &str| {
            let (whole, frac) = t.split_once('.').unwrap_or((t, "1"));
            (1..=12).contains(&whole.len())
                && (1..=12).contains(&frac.len())
                && whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
        };
        for (field, price) in [("onDemandPrice", &c.on_demand_price), ("spotPrice", &c.spot_price)] {
            if let Some(p) = price.as_deref().filter(|p| !decimal(p)) {
                out.push(format!(".{field}: {p:?} is not a price such as 0.096 (dollars per hour, a decimal)"));
            }
        }
        lines(out)
    }

    /// garde's rule on `spec.kubevirt`.
    pub fn kubevirt_rules(k: &Option<KubevirtNodes>, _: &NodePoolRules) -> garde::Result {
        match k.as_ref().and_then(|k| k.devices) {
            Some(n) if !(1..=1_000_000).contains(&n) => lines(vec![format!(
                ".devices: {n} is not a device count from 1 to 1000000 (virt-handler advertises 1000)"
            )]),
            _ => Ok(()),
        }
    }

    /// garde's rule on `spec.podCIDR` for `count` nodes (`api.rs` names it).
    pub fn pod_cidr_rules(count: i32) -> impl FnOnce(&Option<SubnetRange>, &NodePoolRules) -> garde::Result {
        move |range, ctx| pod_cidr_rule(range, ctx, count)
    }

    /// garde's rule on `spec.internalIPs` for `count` nodes (`api.rs` names it).
    pub fn internal_ips_rules(count: i32) -> impl FnOnce(&Option<String>, &NodePoolRules) -> garde::Result {
        move |range, ctx| internal_ips_rule(range, ctx, count)
    }
}

fn topology_problems(t: &Topology, template: &NodeTemplate) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, zone) in t.zones.iter().enumerate() {
        if let Some(p) = label_value_problem(zone).or_else(|| zone.is_empty().then(|| "must not be empty".into())) {
            out.push(format!(".zones[{i}]: {zone:?} {p}"));
        } else if !seen.insert(zone) {
            out.push(format!(".zones[{i}]: {zone:?} is listed twice; give it a weight instead"));
        }
    }
    if let Some(p) = t.region.as_deref().and_then(label_value_problem) {
        out.push(format!(".region: {p}"));
    }
    if !t.weights.is_empty() && t.weights.len() != t.zones.len() {
        out.push(format!(
            ".weights: {} weights for {} zones: give one weight per zone",
            t.weights.len(),
            t.zones.len()
        ));
    }
    for (i, w) in t.weights.iter().enumerate().filter(|(_, w)| !(1..=1000).contains(*w)) {
        out.push(format!(".weights[{i}]: {w} is not from 1 to 1000"));
    }
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    for (set, label) in [(!t.zones.is_empty(), ZONE_LABEL), (t.region.is_some(), REGION_LABEL)] {
        if set && labels.is_some_and(|l| l.contains_key(label)) {
            out.push(format!(
                ": spec.nodeTemplate.metadata.labels sets {label} too; set it in one place (spec.topology spreads it by index)"
            ));
        }
    }
    out
}

/// Rules on `spec.podCIDR`: valid, big enough, not overlapping another pool, not moving the
/// subnets of existing nodes.
fn pod_cidr_rule(range: &Option<SubnetRange>, ctx: &NodePoolRules, count: i32) -> garde::Result {
    let Some(range) = range else { return Ok(()) };
    let net = parse_net(&range.cidr).map_err(|e| garde::Error::new(format!(".cidr: {e}")))?;
    let max = if net.addr().is_ipv4() { 32 } else { 128 };
    if range.mask_size <= net.prefix_len() || range.mask_size > max {
        return Err(garde::Error::new(format!(
            ".maskSize: {} must be longer than the prefix of {} (/{}) and at most {max}",
            range.mask_size,
            range.cidr,
            net.prefix_len()
        )));
    }
    let subnets_of = |mask: u8| move |n: &IpNet, i: u32| ranges::nth_subnet(n, mask, i).map(|s| s.to_string());
    let (nth, len) = (subnets_of(range.mask_size), move |n: &IpNet| subnet_count(n, range.mask_size));
    let old = ctx.old.as_ref().and_then(|(old, _)| {
        let r = old.pod_cidr.as_ref()?;
        Some((parse_net(&r.cidr).ok()?, r.mask_size))
    });
    let (old_nth, old_len) = match old {
        Some((_, mask)) => (subnets_of(mask), mask),
        None => (subnets_of(0), 0),
    };
    let old_len = move |n: &IpNet| subnet_count(n, old_len);
    let rule = IdentityRange {
        field: "podCIDR",
        cidr_path: ".cidr",
        items: format!("subnets of /{}", range.mask_size),
        net,
        nth: &nth,
        len: &len,
        old: old.map(|(n, _)| (n, &old_nth as Nth, &old_len as Len)),
        keeps: "subnets (keep the start and maskSize, or scale to 0 first)",
        advice: "use a larger cidr, a longer maskSize or fewer nodes",
    };
    let others = ctx.others.iter().map(|(name, cidr, _)| (name.clone(), *cidr));
    lines(rule.problems(count, others, ctx.live()))
}

/// Rules on `spec.internalIPs`: the same rules as `podCIDR`, item by host address.
fn internal_ips_rule(range: &Option<String>, ctx: &NodePoolRules, count: i32) -> garde::Result {
    let Some(text) = range else { return Ok(()) };
    let net = parse_net(text).map_err(|e| garde::Error::new(format!(": {e}")))?;
    let nth = |n: &IpNet, i: u32| ranges::nth_host(n, i).map(|a| a.to_string());
    let len = |n: &IpNet| ranges::host_count(n);
    let old = ctx.old.as_ref().and_then(|(old, _)| parse_net(old.internal_ips.as_ref()?).ok());
    let rule = IdentityRange {
        field: "internalIPs",
        cidr_path: "",
        items: "host addresses".into(),
        net,
        nth: &nth,
        len: &len,
        old: old.map(|n| (n, &nth as Nth, &len as Len)),
        keeps: "addresses (keep the start, or scale to 0 first)",
        advice: "use a larger range or fewer nodes",
    };
    let others = ctx.others.iter().map(|(name, _, ips)| (name.clone(), *ips));
    lines(rule.problems(count, others, ctx.live()))
}

/// Checks a NodePool (messages with manifest paths), given the rules' context.
pub fn check_nodepool(spec: &NodePoolSpec, ctx: &NodePoolRules) -> Result<(), Vec<String>> {
    let problems = check(spec, ctx);
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

impl NodePool {
    /// Every problem with this pool (messages with manifest paths): the one check the
    /// webhook and the reconciler both run. `old` is the pool before an update (its nodes
    /// keep their ranges); `peers` are the other NodePools (ranges must not overlap).
    pub fn problems(&self, old: Option<&NodePool>, peers: &[Arc<NodePool>]) -> Vec<String> {
        // Children of a live pool: what its status last counted (all of them if unknown).
        let old =
            old.map(|o| (o, o.status.as_ref().map_or(o.spec.node_count.max(0) as u32, |s| s.replicas.max(0) as u32)));
        check_nodepool(&self.spec, &NodePoolRules::new(&self.name_any(), peers, old)).err().unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
