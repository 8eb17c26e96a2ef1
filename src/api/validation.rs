//! Rules the CRD schema and CEL cannot say well, checked with garde: by the admission webhook
//! at once, and by the reconciler again before it acts. Every message names the field by its
//! path in the manifest (`spec.nodeTemplate.status.allocatable.cpu`) and says what is allowed.
//!
//! The spec types carry `#[garde(...)]` attributes that call the functions here. A custom
//! rule that looks inside a field reports each problem on its own line, starting with the
//! path below that field (`.status.allocatable.cpu: …`); [`messages`] joins the paths.

use super::common::{HASH_LABEL, INDEX_LABEL, MAX_COUNT, POOL_LABEL, SubnetRange, TemplateMetadata};
use super::lifecycle::{self, Lifecycle};
use super::nodepool::{NodePoolSpec, NodeTemplate};
use super::podpool::{PodPoolSpec, PodTemplate};
use crate::api::{NodePool, PodPool};
use garde::Validate;
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use std::sync::Arc;

/// Labels a node template may not set: the pool sets them itself.
const NODE_RESERVED_LABELS: [&str; 4] = [POOL_LABEL, INDEX_LABEL, HASH_LABEL, "kubernetes.io/hostname"];
const POD_RESERVED_LABELS: [&str; 3] = [POOL_LABEL, INDEX_LABEL, HASH_LABEL];

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
    match value {
        None => Ok(()),
        Some(IntOrString::Int(n)) if *n >= 0 => Ok(()),
        Some(IntOrString::String(s))
            if s.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| p <= 100) =>
        {
            Ok(())
        }
        Some(other) => Err(garde::Error::new(format!(
            "{:?} is not allowed: use a number of pods (0 or more) or a percentage such as 25%",
            match other {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s.clone(),
            }
        ))),
    }
}

/// Rules on `spec.podCIDR`: valid, big enough, not overlapping another pool, not moving the
/// subnets of existing nodes.
pub fn pod_cidr(count: i32) -> impl FnOnce(&Option<SubnetRange>, &NodePoolRules) -> garde::Result {
    move |range, ctx| pod_cidr_rule(range, ctx, count)
}

fn pod_cidr_rule(range: &Option<SubnetRange>, ctx: &NodePoolRules, count: i32) -> garde::Result {
    let Some(range) = range else { return Ok(()) };
    let net = match parse_net(&range.cidr) {
        Ok(n) => n,
        Err(e) => return Err(garde::Error::new(format!(".cidr: {e}"))),
    };
    let max = if net.addr().is_ipv4() { 32 } else { 128 };
    if range.mask_size <= net.prefix_len() || range.mask_size > max {
        return Err(garde::Error::new(format!(
            ".maskSize: {} must be longer than the prefix of {} (/{}) and at most {max}",
            range.mask_size,
            range.cidr,
            net.prefix_len()
        )));
    }
    let mut out = Vec::new();
    let bits = u32::from(range.mask_size - net.prefix_len());
    if bits < 32 && u64::from(count.max(0) as u32) > 1u64 << bits {
        out.push(format!(
            ": {} has {} subnets of /{} but nodeCount is {count}: use a larger cidr, a longer maskSize or fewer nodes",
            range.cidr,
            1u64 << bits,
            range.mask_size
        ));
    }
    for (other, their, _) in &ctx.others {
        if let Some(their) = their
            && (their.contains(&net.network()) || net.contains(&their.network()))
        {
            out.push(format!(
                ".cidr: {net} overlaps {their}, the podCIDR of NodePool {other}: every pool needs a range of its own"
            ));
        }
    }
    if let Some((old, children)) = &ctx.old
        && let Some(old_range) = &old.pod_cidr
        && let Ok(old_net) = parse_net(&old_range.cidr)
    {
        let live = (*children).min(count.max(0) as u32);
        let subnets = |net: &IpNet, mask: u8| {
            1u128.checked_shl(u32::from(mask.saturating_sub(net.prefix_len()))).unwrap_or(u128::MAX)
        };
        let before = |i| crate::simulator::ipam::nth_subnet(&old_net, old_range.mask_size, i);
        let after = |i| crate::simulator::ipam::nth_subnet(&net, range.mask_size, i);
        let lens = (subnets(&old_net, old_range.mask_size), subnets(&net, range.mask_size));
        if let Some(i) = first_moved(live, before, after, lens) {
            out.push(format!(
                ": the change would move node {i} from {} to {}: a live pool's range may grow, but its nodes keep their subnets (keep the start and maskSize, or scale to 0 first)",
                before(i).map(|n| n.to_string()).unwrap_or_default(),
                after(i).map(|n| n.to_string()).unwrap_or_else(|| "nothing".into())
            ));
        }
    }
    lines(out)
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

/// Rules on `spec.internalIPs`.
pub fn internal_ips(count: i32) -> impl FnOnce(&Option<String>, &NodePoolRules) -> garde::Result {
    move |range, ctx| internal_ips_rule(range, ctx, count)
}

fn internal_ips_rule(range: &Option<String>, ctx: &NodePoolRules, count: i32) -> garde::Result {
    let Some(text) = range else { return Ok(()) };
    let net = parse_net(text).map_err(|e| garde::Error::new(format!(": {e}")))?;
    let mut out = Vec::new();
    if crate::simulator::ipam::host_count(&net) < count.max(0) as u128 {
        out.push(format!(
            ": {net} has {} host addresses but nodeCount is {count}: use a larger range or fewer nodes",
            crate::simulator::ipam::host_count(&net)
        ));
    }
    for (other, _, their) in &ctx.others {
        if let Some(their) = their
            && (their.contains(&net.network()) || net.contains(&their.network()))
        {
            out.push(format!(
                ": {net} overlaps {their}, the internalIPs of NodePool {other}: node addresses must be unique"
            ));
        }
    }
    if let Some((old, children)) = &ctx.old
        && let Some(old_text) = &old.internal_ips
        && let Ok(old_net) = parse_net(old_text)
    {
        let live = (*children).min(count.max(0) as u32);
        let before = |i| crate::simulator::ipam::nth_host(&old_net, i);
        let after = |i| crate::simulator::ipam::nth_host(&net, i);
        let lens = (crate::simulator::ipam::host_count(&old_net), crate::simulator::ipam::host_count(&net));
        if let Some(i) = first_moved(live, before, after, lens) {
            out.push(format!(
                ": the change would move node {i} from {} to {}: a live pool's range may grow, but its nodes keep their addresses",
                before(i).map(|a| a.to_string()).unwrap_or_default(),
                after(i).map(|a| a.to_string()).unwrap_or_else(|| "nothing".into())
            ));
        }
    }
    lines(out)
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

/// The reconciler's check: every rule; one message. A range overlap is blamed on the newer
/// of the two pools only (by creation time, then name), so a pool that slipped past the
/// webhook never stalls the older one it overlaps.
pub fn validate_nodepool(pool: &NodePool, all: &[Arc<NodePool>]) -> Result<(), String> {
    let key = |p: &NodePool| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.name_any());
    let mine = key(pool);
    let older: Vec<Arc<NodePool>> = all.iter().filter(|p| key(p) < mine).cloned().collect();
    check_nodepool(&pool.spec, &NodePoolRules::new(&pool.name_any(), &older, None)).map_err(|m| m.join("; "))
}

pub fn validate_podpool(pool: &PodPool) -> Result<(), String> {
    check_podpool(&pool.spec).map_err(|m| m.join("; "))
}

pub mod quantity;

#[cfg(test)]
mod tests;
