//! VMIPool's own rules (garde): its template owns only what the pool does not set, and what
//! KubeVirt would refuse on a VMI create is refused at its path.

use super::api::{VMIPool, VmiTemplate};
use crate::api::conventions::RESERVED_LABELS;
use crate::api::validation::{check, lines, metadata_problems};

/// Rules on a VMI template: what the pool owns, and what KubeVirt refuses on a VMI create
/// (every interface has its network and the other way round, every disk its volume, names
/// unique, memory set).
pub fn vmi_template(t: &VmiTemplate, _ctx: &()) -> garde::Result {
    let mut out = Vec::new();
    metadata_problems(t.metadata.as_ref(), &RESERVED_LABELS, &mut out);
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

impl VMIPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        check(&self.spec, &())
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
