//! Rules the CRD schema and CEL cannot say well, shared by every kind and checked with garde:
//! by the admission webhook at once, and by the reconciler again before it acts. Every message
//! names the field by its path in the manifest (`spec.nodeTemplate.status.allocatable.cpu`)
//! and says what is allowed. A kind's own rules live beside its type
//! (`kinds/<kind>/rules.rs`) and build on the primitives here.
//!
//! The spec types carry `#[garde(...)]` attributes that call these functions. A custom rule
//! that looks inside a field reports each problem on its own line, starting with the path
//! below that field (`.status.allocatable.cpu: …`); [`messages`] joins the paths.

use super::common::{MAX_COUNT, MaxUnavailable, TemplateMetadata};
use super::lifecycle;
pub use super::names::{label_value_problem, qualified_name_problem};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One rule's problems as garde's result: each on its own line.
pub fn lines(problems: Vec<String>) -> garde::Result {
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

pub fn metadata_problems(meta: Option<&TemplateMetadata>, reserved: &[&str], out: &mut Vec<String>) {
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

pub fn parse_net(text: &str) -> Result<IpNet, String> {
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

/// Rules on a pool's `spec.lifecycle`, whatever the kind's lifecycle type: the shared
/// sections' and its own.
pub fn lifecycle<L: lifecycle::LifecycleSpec, C>(l: &Option<L>, _ctx: &C) -> garde::Result {
    lines(l.as_ref().map(|l| lifecycle::problems(l)).unwrap_or_default())
}

/// Checks a spec with garde in `ctx`: every problem, with its manifest path.
pub fn check<S: garde::Validate + ?Sized>(spec: &S, ctx: &S::Context) -> Vec<String> {
    spec.validate_with(ctx).err().map(|r| messages(&r)).unwrap_or_default()
}

pub mod quantity;

#[cfg(test)]
mod tests;
