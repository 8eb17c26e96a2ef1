//! The rules on `spec.devices` that the CRD schema cannot say (the operator's admission and
//! reconcile layers): names, units, partitions that fit their device, and the API server's
//! limits on what one node publishes.

use super::{AttributeValue, DeviceSet};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::{BTreeMap, BTreeSet};

/// Most drivers a pool lists.
pub const MAX_DRIVERS: usize = 8;
/// Most devices (whole and partitions) one node publishes for one driver.
pub const MAX_DEVICES_PER_NODE: u32 = 1024;

pub(super) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

pub(super) fn is_dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// An attribute or capacity name: a C identifier, optionally behind a domain (`model`,
/// `gpu.example.com/model`).
fn is_qualified(name: &str) -> bool {
    let (domain, id) = match name.rsplit_once('/') {
        Some((d, id)) => (Some(d), id),
        None => (None, name),
    };
    let id_ok = !id.is_empty()
        && id.len() <= 32
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    id_ok && domain.is_none_or(|d| d.len() <= 63 && is_dns_subdomain(d))
}

/// The shared counter a capacity becomes on a partitionable device: its name without the
/// domain, as a DNS label (`copyEngines` → `copy-engines`), as the NVIDIA driver names them.
pub fn counter_name(capacity: &str) -> String {
    let id = capacity.rsplit('/').next().unwrap_or(capacity);
    let mut out = String::new();
    for c in id.chars() {
        if c.is_ascii_uppercase() {
            if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '_' {
            out.push('-');
        } else {
            out.push(c);
        }
    }
    out
}

fn amount(q: &Quantity) -> Option<f64> {
    crate::api::validation::quantity::approximate(&q.0).filter(|v| *v >= 0.0)
}

fn value_problems(
    path: &str,
    attributes: &BTreeMap<String, AttributeValue>,
    capacity: &BTreeMap<String, Quantity>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, v) in attributes {
        if !is_qualified(name) {
            out.push(format!(
                "{path}.attributes[{name}]: not an attribute name such as model or gpu.example.com/model"
            ));
        }
        let set = [v.string.is_some(), v.int.is_some(), v.bool.is_some(), v.version.is_some()];
        if set.iter().filter(|s| **s).count() != 1 {
            out.push(format!("{path}.attributes[{name}]: set exactly one of: string, int, bool, version"));
        }
        if let Some(version) = &v.version
            && !is_semver(version)
        {
            out.push(format!("{path}.attributes[{name}].version: {version:?} is not a semantic version such as 1.2.3"));
        }
    }
    for (name, q) in capacity {
        if !is_qualified(name) {
            out.push(format!("{path}.capacity[{name}]: not a capacity name such as memory"));
        }
        if amount(q).is_none() {
            out.push(format!("{path}.capacity[{name}]: {:?} is not a quantity such as 80Gi", q.0));
        }
    }
    out
}

fn is_semver(v: &str) -> bool {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The capacities every device of `set` has: its preset's, then its own.
pub(super) fn capacity_of(set: &DeviceSet) -> BTreeMap<String, Quantity> {
    let mut out = set.preset.map(|p| p.device("", 0).capacity).unwrap_or_default();
    out.extend(set.capacity.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// The longest device name the set publishes.
fn longest_name(set: &DeviceSet) -> usize {
    let last = set.count().saturating_sub(1);
    let base = match (&set.name, set.preset) {
        (None, Some(p)) => p.device("", last).name.len(),
        (name, _) => name.as_deref().unwrap_or("gpu").len() + 1 + last.to_string().len(),
    };
    let part = set
        .partitions
        .iter()
        .map(|p| p.name.replace('.', "").len() + 1 + p.count.saturating_sub(1).to_string().len())
        .max();
    // "-mig-" is the longest word a preset puts before a profile.
    base + part.map_or(0, |p| 5 + p)
}

fn partition_problems(path: &str, set: &DeviceSet) -> Vec<String> {
    let mut out = Vec::new();
    let capacity = capacity_of(set);
    let mut names = BTreeSet::new();
    for (k, p) in set.partitions.iter().enumerate() {
        let ppath = format!("{path}.partitions[{k}]");
        let word = p.name.replace('.', "");
        if p.name.is_empty()
            || p.name.len() > 20
            || !is_dns_label(&word)
            || p.name.starts_with('.')
            || p.name.ends_with('.')
        {
            out.push(format!(
                "{ppath}.name: {:?} is not a profile such as 1g.10gb (lowercase letters, digits, '-' and '.')",
                p.name
            ));
        }
        if !names.insert(word) {
            out.push(format!("{ppath}.name: {} is listed twice", p.name));
        }
        if !(1..=16).contains(&p.count) {
            out.push(format!("{ppath}.count: {} is not a partition count from 1 to 16", p.count));
        }
        if p.consumes.is_empty() {
            out.push(format!(
                "{ppath}.consumes: name what one partition takes of the device's capacity, such as memory: 10Gi"
            ));
        }
        for (name, q) in &p.consumes {
            match (capacity.get(name).and_then(amount), amount(q)) {
                (_, None) => out.push(format!("{ppath}.consumes[{name}]: {:?} is not a quantity such as 10Gi", q.0)),
                (None, _) => out.push(format!(
                    "{ppath}.consumes[{name}]: the device has no capacity {name}; add it to capacity (it becomes a shared counter)"
                )),
                (Some(have), Some(take)) if take > have => out.push(format!(
                    "{ppath}.consumes[{name}]: {} is more than the device's {}",
                    q.0,
                    capacity[name].0
                )),
                _ => {}
            }
        }
        out.extend(value_problems(&ppath, &p.attributes, &BTreeMap::new()));
    }
    if !set.partitions.is_empty() {
        let mut counters = BTreeMap::new();
        for name in capacity.keys() {
            let counter = counter_name(name);
            if !is_dns_label(&counter) {
                out.push(format!("{path}.capacity[{name}]: {counter:?} is not a counter name; use letters and digits"));
            } else if let Some(other) = counters.insert(counter.clone(), name) {
                out.push(format!("{path}.capacity[{name}]: it and {other} are both counter {counter}; rename one"));
            }
        }
    }
    out
}

/// Problems with `spec.devices`, each starting with its path below `spec.devices`.
pub fn problems(sets: &[DeviceSet]) -> Vec<String> {
    let mut out = Vec::new();
    if sets.len() > MAX_DRIVERS {
        out.push(format!(": {} drivers; at most {MAX_DRIVERS}", sets.len()));
    }
    for (i, set) in sets.iter().enumerate() {
        let path = format!("[{i}]");
        match &set.driver {
            Some(d) if d.len() > 63 || !is_dns_subdomain(d) => {
                out.push(format!("{path}.driver: {d:?} is not a DNS subdomain such as gpu.example.com"));
            }
            None if set.preset.is_none() => out.push(format!("{path}.driver: set driver, or a preset that names one")),
            _ => {}
        }
        if sets[..i].iter().any(|o| o.driver() == set.driver()) {
            out.push(format!("{path}.driver: {} is listed twice; list each driver once", set.driver()));
        }
        if !(1..=128).contains(&set.count()) {
            out.push(format!("{path}.count: {} is not a device count from 1 to 128", set.count()));
        }
        if let Some(name) = &set.name
            && (name.len() > 40 || !is_dns_label(name))
        {
            out.push(format!("{path}.name: {name:?} is not a DNS label such as gpu (at most 40 characters)"));
        }
        out.extend(value_problems(&path, &set.attributes, &set.capacity));
        out.extend(partition_problems(&path, set));
        if set.devices_per_node() > MAX_DEVICES_PER_NODE {
            out.push(format!(
                "{path}.partitions: {} devices per node with their partitions; at most {MAX_DEVICES_PER_NODE}",
                set.devices_per_node()
            ));
        }
        if longest_name(set) > 63 {
            out.push(format!(
                "{path}.name: device names such as the longest here would be {} characters, more than 63; shorten name or the partition names",
                longest_name(set)
            ));
        }
        if let Some(p) = set.unhealthy_percent.filter(|p| *p > 100) {
            out.push(format!("{path}.unhealthyPercent: {p} is not a percentage from 0 to 100"));
        }
        if let Some(p) = set.prepare_fail_percent.filter(|p| *p > 100) {
            out.push(format!("{path}.prepareFailPercent: {p} is not a percentage from 0 to 100"));
        }
        let mut total = 0u32;
        for (k, v) in set.variants.iter().enumerate() {
            let vpath = format!("{path}.variants[{k}]");
            if v.percent > 100 {
                out.push(format!("{vpath}.percent: {} is not a percentage from 0 to 100", v.percent));
            }
            total += u32::from(v.percent);
            out.extend(value_problems(&vpath, &v.attributes, &v.capacity));
        }
        if total > 100 {
            out.push(format!("{path}.variants: the percentages add up to {total}, more than 100"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(yaml: &str) -> Vec<DeviceSet> {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn bad_devices_are_named_by_path() {
        let s = sets(
            "- {driver: Bad_Driver, count: 0, name: 'no.dots', attributes: {'9lives': {string: a, int: 1}, v: {version: one}}, capacity: {memory: lots}, variants: [{percent: 70}, {percent: 40}]}\n- {driver: Bad_Driver}\n- {count: 2}\n",
        );
        let errs = problems(&s);
        for want in [
            "[0].driver: \"Bad_Driver\"",
            "[1].driver: Bad_Driver is listed twice",
            "[0].count: 0",
            "[0].name: \"no.dots\"",
            "[0].attributes[9lives]: not an attribute name",
            "[0].attributes[9lives]: set exactly one",
            "[0].attributes[v].version: \"one\"",
            "[0].capacity[memory]: \"lots\"",
            "[0].variants: the percentages add up to 110",
            "[2].driver: set driver, or a preset",
        ] {
            assert!(errs.iter().any(|e| e.starts_with(want)), "no {want} in {errs:?}");
        }
    }

    #[test]
    fn presets_count_as_their_driver() {
        assert_eq!(problems(&sets("- {preset: nvidia-gpu}\n- {preset: dra-cpu}\n")), Vec::<String>::new());
        let errs = problems(&sets("- {preset: nvidia-gpu}\n- {driver: gpu.nvidia.com}\n"));
        assert!(errs.iter().any(|e| e.starts_with("[1].driver: gpu.nvidia.com is listed twice")), "{errs:?}");
    }

    #[test]
    fn partitions_must_fit_their_device() {
        let ok = "- {driver: g.example.com, capacity: {memory: 40Gi, multiProcessors: 98}, partitions: [{name: 1g.10gb, count: 4, consumes: {memory: 10Gi, multiProcessors: 14}}]}\n";
        assert_eq!(problems(&sets(ok)), Vec::<String>::new());
        assert_eq!(
            problems(&sets(
                "- {preset: nvidia-gpu, partitions: [{name: 1g.10gb, count: 7, consumes: {memory: 10Gi}}]}\n"
            )),
            Vec::<String>::new()
        );
        let bad = sets(
            "- {driver: g.example.com, count: 128, capacity: {memory: 40Gi}, partitions: [{name: 'Big!', count: 16, consumes: {memory: 50Gi, cores: 2}}, {name: x, count: 0, consumes: {}}]}\n",
        );
        let errs = problems(&bad);
        for want in [
            "[0].partitions[0].name: \"Big!\"",
            "[0].partitions[0].consumes[memory]: 50Gi is more than the device's 40Gi",
            "[0].partitions[0].consumes[cores]: the device has no capacity cores",
            "[0].partitions[1].count: 0",
            "[0].partitions[1].consumes: name what",
            "[0].partitions: 2176 devices per node",
        ] {
            assert!(errs.iter().any(|e| e.starts_with(want)), "no {want} in {errs:?}");
        }
        let long = sets(&format!(
            "- {{driver: g.example.com, name: {}, capacity: {{memory: 1Gi}}, partitions: [{{name: {}, count: 1, consumes: {{memory: 1Mi}}}}]}}\n",
            "n".repeat(40),
            "p".repeat(20)
        ));
        assert!(problems(&long).iter().any(|e| e.starts_with("[0].name: device names")), "{:?}", problems(&long));
    }

    #[test]
    fn counters_are_dns_labels_of_the_capacity_names() {
        assert_eq!(counter_name("copyEngines"), "copy-engines");
        assert_eq!(counter_name("dra.cpu/cpu"), "cpu");
        assert_eq!(counter_name("memory_slice0"), "memory-slice0");
    }
}
