//! VMIPool's own rules (garde): its template owns only what the pool does not set, and what
//! KubeVirt would refuse on a VMI create is refused at its path.

use super::api::{VMIPool, VmiTemplate};
use crate::api::conventions::RESERVED_LABELS;
use crate::api::validation::{check, lines, metadata_problems};

/// The most networks, volumes, interfaces or disks a VMI template may list (the schema says so
/// too): a real VMI has a handful, and every check below stays linear in them.
pub const MAX_DEVICES: usize = 256;

/// At most this many problems of one rule are listed; the rest are counted.
const SHOWN: usize = 10;

/// Names used twice in one list (each reported once), in time linear in the list.
fn duplicates<'a>(what: &str, names: impl Iterator<Item = &'a str>, out: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    let mut told = std::collections::HashSet::new();
    for n in names {
        if !seen.insert(n) && told.insert(n) {
            out.push(format!(".spec.{what}: the name {n:?} is used twice: names must be unique"));
        }
    }
}

/// `problems` with at most [`SHOWN`] listed and the rest counted.
fn capped(mut problems: Vec<String>, out: &mut Vec<String>) {
    let more = problems.len().saturating_sub(SHOWN);
    problems.truncate(SHOWN);
    if more > 0 {
        problems.push(format!(".spec: {more} more problems like the ones above"));
    }
    out.extend(problems);
}

impl VmiTemplate {
    /// Rules on a VMI template: what the pool owns, and what KubeVirt refuses on a VMI create
    /// (every interface has its network and the other way round, every disk its volume, names
    /// unique, memory set). Linear in the lists, which are bounded.
    /// garde runs it on the pool's template field (`api.rs` names it).
    pub fn rules(t: &Self, _ctx: &()) -> garde::Result {
        let mut out = Vec::new();
        metadata_problems(t.metadata.as_ref(), &RESERVED_LABELS, &mut out);
        let spec = &t.spec;
        let devices = &spec.domain.devices;
        let lists = [
            ("networks", spec.networks.len()),
            ("volumes", spec.volumes.len()),
            ("domain.devices.interfaces", devices.interfaces.len()),
            ("domain.devices.disks", devices.disks.len()),
        ];
        let too_long: Vec<String> = lists
            .iter()
            .filter(|(_, n)| *n > MAX_DEVICES)
            .map(|(what, n)| format!(".spec.{what}: {n} items: a VMI takes at most {MAX_DEVICES}"))
            .collect();
        if !too_long.is_empty() {
            out.extend(too_long);
            return lines(out);
        }
        let mut found = Vec::new();
        duplicates("networks", spec.networks.iter().map(|n| n.name.as_str()), &mut found);
        duplicates("volumes", spec.volumes.iter().map(|v| v.name.as_str()), &mut found);
        duplicates("domain.devices.interfaces", devices.interfaces.iter().map(|i| i.name.as_str()), &mut found);
        duplicates("domain.devices.disks", devices.disks.iter().map(|d| d.name.as_str()), &mut found);
        let networks: std::collections::HashSet<&str> = spec.networks.iter().map(|n| n.name.as_str()).collect();
        let interfaces: std::collections::HashSet<&str> = devices.interfaces.iter().map(|i| i.name.as_str()).collect();
        let volumes: std::collections::HashSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
        for (i, iface) in devices.interfaces.iter().enumerate() {
            if !networks.contains(iface.name.as_str()) {
                found.push(format!(
                    ".spec.domain.devices.interfaces[{i}].name: {:?} has no network of that name in spec.networks: add one (e.g. {{name: {}, pod: {{}}}})",
                    iface.name, iface.name
                ));
            }
        }
        for (i, net) in spec.networks.iter().enumerate() {
            if !interfaces.contains(net.name.as_str()) {
                found.push(format!(
                    ".spec.networks[{i}].name: {:?} has no interface of that name in spec.domain.devices.interfaces",
                    net.name
                ));
            }
            if net.pod.is_some() == net.multus.is_some() {
                found.push(format!(".spec.networks[{i}]: set exactly one of pod and multus"));
            }
        }
        for (i, disk) in devices.disks.iter().enumerate() {
            if !volumes.contains(disk.name.as_str()) {
                found.push(format!(
                    ".spec.domain.devices.disks[{i}].name: {:?} has no volume of that name in spec.volumes",
                    disk.name
                ));
            }
        }
        capped(found, &mut out);
        let requested =
            spec.domain.resources.as_ref().and_then(|r| r.requests.as_ref()).is_some_and(|r| r.contains_key("memory"));
        let guest = spec.domain.memory.as_ref().is_some_and(|m| m.guest.is_some());
        if !requested && !guest {
            out.push(".spec.domain: Required value: set memory.guest or resources.requests.memory, e.g. resources: {requests: {memory: 128Mi}}".into());
        }
        lines(out)
    }
}

impl VMIPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        let mut out = check(&self.spec, &());
        if self.spec.placement == crate::api::Placement::Simulated {
            let selector = self.spec.vmi_template.spec.node_selector.as_ref();
            out.extend(crate::pool::placement::selector_conflict(selector, "spec.vmiTemplate.spec"));
        }
        out
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
