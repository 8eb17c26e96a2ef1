//! Rules the CRD schema and CEL cannot say well, checked with garde: by the admission webhook
//! at once, and by the reconciler again before it acts. Every message names the field by its
//! path in the manifest (`spec.nodeTemplate.status.allocatable.cpu`) and says what is allowed.
//!
//! The spec types carry `#[garde(...)]` attributes that call the functions here. A custom
//! rule that looks inside a field reports each problem on its own line, starting with the
//! path below that field (`.status.allocatable.cpu: …`); [`messages`] joins the paths.

use super::common::{MAX_COUNT, MaxUnavailable, SubnetRange, TemplateMetadata};
use super::conventions::{HOSTNAME_LABEL, RESERVED_LABELS};
use super::lifecycle::{self, Lifecycle};
use super::nodepool::{NodePoolSpec, NodeTemplate};
use super::podpool::{PodPoolSpec, PodTemplate};
use super::ranges;
use super::vmipool::{VMIPoolSpec, VmiTemplate};
use crate::api::{NodePool, PodPool, VMIPool};
use garde::Validate;
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::sync::Arc;

/// Labels a node template may not set: the pool sets them itself.
const NODE_RESERVED_LABELS: [&str; 4] = [RESERVED_LABELS[0], RESERVED_LABELS[1], RESERVED_LABELS[2], HOSTNAME_LABEL];
const POD_RESERVED_LABELS: [&str; 3] = RESERVED_LABELS;

/// What NodePool rules need beyond the spec.
#[derive(Clone, Debug, Default)]
pub struct NodePoolRules {
    /// Ranges of the other NodePools: (name, podCIDR, internalIPs).
    pub others: Vec<(String, Option<IpNet>, Option<IpNet>)>,
    /// On update: the spec before the change and how many children the pool has.
    pub old: Option<(NodePoolSpec, u32)>,
}

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

fn lines(problems: Vec<String>) -> garde::Result {
    if problems.is_empty() { Ok(()) } else { Err(garde::Error::new(problems.join("\n"))) }
}

/// The manifest name of a spec field garde reports by its Rust name.
fn manifest_name(rust: &str) -> String {
    match rust {
        "pod_cidr" => "podCIDR".into(),
        "internal_ips" => "internalIPs".into(),
        other => {
            let mut out = String::new();
            let mut upper = false;
            for c in other.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    out.extend(c.to_uppercase());
                    upper = false;
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

/// Turns a garde report into messages with full manifest paths (`spec.` + field + sub-path).
pub fn messages(report: &garde::Report) -> Vec<String> {
    let mut out = Vec::new();
    for (path, error) in report.iter() {
        let field: Vec<String> = path.to_string().split('.').map(manifest_name).collect();
        let base = format!("spec.{}", field.join("."));
        for line in error.message().lines() {
            if line.starts_with('.') || line.starts_with('[') || line.starts_with(':') {
                out.push(format!("{base}{line}"));
            } else {
                out.push(format!("{base}: {line}"));
            }
        }
    }
    out
}

fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    (!(name_ok && prefix_ok)).then(|| {
        "must be a qualified name: an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric".to_string()
    })
}

fn label_value_problem(value: &str) -> Option<String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    (!ok).then(|| "must be empty or 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric".to_string())
}

fn metadata_problems(meta: Option<&TemplateMetadata>, reserved: &[&str], out: &mut Vec<String>) {
    let Some(meta) = meta else { return };
    for (field, value) in [("name", &meta.name), ("generateName", &meta.generate_name), ("namespace", &meta.namespace)]
    {
        if value.as_deref().is_some_and(|v| !v.is_empty()) {
            out.push(format!(
                ".metadata.{field}: must be empty: children are named <pool>-<index> in the pool's namespace"
            ));
        }
    }
    if meta.owner_references.as_ref().is_some_and(|o| !o.is_empty()) {
        out.push(".metadata.ownerReferences: must be empty: the pool owns its children".into());
    }
    for (key, value) in meta.labels.iter().flatten() {
        if reserved.contains(&key.as_str()) {
            out.push(format!(".metadata.labels.{key}: is set by the pool on every child; remove it from the template"));
        } else if let Some(p) = qualified_name_problem(key) {
            out.push(format!(".metadata.labels.{key}: the key {p}"));
        } else if let Some(p) = label_value_problem(value) {
            out.push(format!(".metadata.labels.{key}: the value {p}"));
        }
    }
    // The API server checks annotation keys in lower case (`Example.COM/x` is a fine key).
    for key in meta.annotations.iter().flatten().map(|(k, _)| k) {
        if let Some(p) = qualified_name_problem(&key.to_ascii_lowercase()) {
            out.push(format!(".metadata.annotations.{key}: the key {p}"));
        }
    }
}

/// Rules on a node template: only what the pool owns. Everything else a Node may say is the
/// API server's to judge (the webhook and the reconciler have it validate the rendered node).
pub fn node_template(t: &NodeTemplate, ctx: &NodePoolRules) -> garde::Result {
    let _ = ctx;
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

fn parse_net(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/16 or fd00::/48"))
}

/// A count from 0 to [`MAX_COUNT`].
pub fn count<C>(n: &i32, _ctx: &C) -> garde::Result {
    if (0..=MAX_COUNT).contains(n) {
        Ok(())
    } else {
        Err(garde::Error::new(format!("{n} is out of range: use 0 to {MAX_COUNT}")))
    }
}

/// `maxUnavailable`: an integer of at least 0, or a percentage from 0% to 100%.
pub fn max_unavailable(value: &Option<IntOrString>, _ctx: &()) -> garde::Result {
    match value.as_ref().map(MaxUnavailable::parse) {
        Some(Err(e)) => Err(garde::Error::new(e)),
        _ => Ok(()),
    }
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

/// Rules on `spec.podCIDR`: valid, big enough, not overlapping another pool, not moving the
/// subnets of existing nodes.
pub fn pod_cidr(count: i32) -> impl FnOnce(&Option<SubnetRange>, &NodePoolRules) -> garde::Result {
    move |range, ctx| pod_cidr_rule(range, ctx, count)
}

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
pub fn internal_ips(count: i32) -> impl FnOnce(&Option<String>, &NodePoolRules) -> garde::Result {
    move |range, ctx| internal_ips_rule(range, ctx, count)
}

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

/// Rules on a pod template: only what the pool owns (the API server judges the rendered pod,
/// and the schema requires a container).
pub fn pod_template(t: &PodTemplate, _ctx: &()) -> garde::Result {
    let mut out = Vec::new();
    metadata_problems(t.metadata.as_ref(), &POD_RESERVED_LABELS, &mut out);
    if t.spec.containers.is_empty() {
        out.push(".spec.containers: Required value: a Pod needs at least one container, e.g. containers: [{name: app, image: nginx}]".into());
    }
    lines(out)
}

/// Rules on a VMI template: what the pool owns, and what KubeVirt refuses on a VMI create
/// (every interface has its network and the other way round, every disk its volume, names
/// unique, memory set).
pub fn vmi_template(t: &VmiTemplate, _ctx: &()) -> garde::Result {
    let mut out = Vec::new();
    metadata_problems(t.metadata.as_ref(), &POD_RESERVED_LABELS, &mut out);
    let spec = &t.spec;
    let devices = &spec.domain.devices;
    let unique = |what: &str, names: Vec<&str>, out: &mut Vec<String>| {
        let mut seen = std::collections::BTreeSet::new();
        for n in names {
            if !seen.insert(n) {
                out.push(format!(".spec.{what}: the name {n:?} is used twice: names must be unique"));
            }
        }
    };
    unique("networks", spec.networks.iter().map(|n| n.name.as_str()).collect(), &mut out);
    unique("volumes", spec.volumes.iter().map(|v| v.name.as_str()).collect(), &mut out);
    unique("domain.devices.interfaces", devices.interfaces.iter().map(|i| i.name.as_str()).collect(), &mut out);
    unique("domain.devices.disks", devices.disks.iter().map(|d| d.name.as_str()).collect(), &mut out);
    for (i, iface) in devices.interfaces.iter().enumerate() {
        if !spec.networks.iter().any(|n| n.name == iface.name) {
            out.push(format!(
                ".spec.domain.devices.interfaces[{i}].name: {:?} has no network of that name in spec.networks: add one (e.g. {{name: {}, pod: {{}}}})",
                iface.name, iface.name
            ));
        }
    }
    for (i, net) in spec.networks.iter().enumerate() {
        if !devices.interfaces.iter().any(|iface| iface.name == net.name) {
            out.push(format!(
                ".spec.networks[{i}].name: {:?} has no interface of that name in spec.domain.devices.interfaces",
                net.name
            ));
        }
        if net.pod.is_some() == net.multus.is_some() {
            out.push(format!(".spec.networks[{i}]: set exactly one of pod and multus"));
        }
    }
    for (i, disk) in devices.disks.iter().enumerate() {
        if !spec.volumes.iter().any(|v| v.name == disk.name) {
            out.push(format!(
                ".spec.domain.devices.disks[{i}].name: {:?} has no volume of that name in spec.volumes",
                disk.name
            ));
        }
    }
    let requested =
        spec.domain.resources.as_ref().and_then(|r| r.requests.as_ref()).is_some_and(|r| r.contains_key("memory"));
    let guest = spec.domain.memory.as_ref().is_some_and(|m| m.guest.is_some());
    if !requested && !guest {
        out.push(".spec.domain: Required value: set memory.guest or resources.requests.memory, e.g. resources: {requests: {memory: 128Mi}}".into());
    }
    lines(out)
}

/// Rules on a NodePool's `spec.lifecycle`.
pub fn node_pool_lifecycle(l: &Option<Lifecycle>, _ctx: &NodePoolRules) -> garde::Result {
    lines(l.as_ref().map(|l| lifecycle::problems(l, true)).unwrap_or_default())
}

/// Rules on a PodPool's `spec.lifecycle` (no `nodes`).
pub fn pod_pool_lifecycle(l: &Option<Lifecycle>, _ctx: &()) -> garde::Result {
    lines(l.as_ref().map(|l| lifecycle::problems(l, false)).unwrap_or_default())
}

/// Checks a NodePool (messages with manifest paths), given the rules' context.
pub fn check_nodepool(spec: &NodePoolSpec, ctx: &NodePoolRules) -> Result<(), Vec<String>> {
    spec.validate_with(ctx).map_err(|r| messages(&r))
}

/// Checks a PodPool.
pub fn check_podpool(spec: &PodPoolSpec) -> Result<(), Vec<String>> {
    spec.validate().map_err(|r| messages(&r))
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

impl VMIPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        check_vmipool(&self.spec).err().unwrap_or_default()
    }
}

/// Checks a VMIPool.
pub fn check_vmipool(spec: &VMIPoolSpec) -> Result<(), Vec<String>> {
    spec.validate().map_err(|r| messages(&r))
}

impl PodPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        check_podpool(&self.spec).err().unwrap_or_default()
    }
}

pub mod quantity;

#[cfg(test)]
mod tests;
