//! What a NodePool's status says of its devices: per driver, how many its nodes publish, how
//! many a ResourceClaim holds, how many are tainted unhealthy. Pure: counted from the
//! published slices (labelled with their NodePool) and the claims' allocation results.

use super::POOL_LABEL;
use super::slices::UNHEALTHY_TAINT;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One driver's devices on a NodePool's nodes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCount {
    pub driver: String,
    /// Devices published (whole devices and partitions).
    pub total: u32,
    /// Devices a ResourceClaim holds.
    pub allocated: u32,
    /// Devices tainted unhealthy.
    #[serde(default)]
    pub unhealthy: u32,
}

/// The counts of every NodePool that publishes devices, by NodePool name, drivers in order.
pub fn count<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
    claims: impl IntoIterator<Item = &'a ResourceClaim>,
) -> BTreeMap<String, Vec<DeviceCount>> {
    let mut counts: BTreeMap<String, BTreeMap<String, DeviceCount>> = BTreeMap::new();
    // (driver, resource pool) → the NodePool publishing it.
    let mut owner: HashMap<(String, String), String> = HashMap::new();
    for s in slices {
        let Some(pool) = s.metadata.labels.as_ref().and_then(|l| l.get(POOL_LABEL)) else { continue };
        let driver = &s.spec.driver;
        owner.insert((driver.clone(), s.spec.pool.name.clone()), pool.clone());
        let c = counts
            .entry(pool.clone())
            .or_default()
            .entry(driver.clone())
            .or_insert_with(|| DeviceCount { driver: driver.clone(), ..DeviceCount::default() });
        for d in s.spec.devices.iter().flatten() {
            c.total += 1;
            if d.taints.iter().flatten().any(|t| t.key == UNHEALTHY_TAINT) {
                c.unhealthy += 1;
            }
        }
    }
    // A device several claims share (dra.cpu's) counts once.
    let mut held: HashSet<(&str, &str, &str)> = HashSet::new();
    for claim in claims {
        let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
            if !held.insert((&r.driver, &r.pool, &r.device)) {
                continue;
            }
            if let Some(pool) = owner.get(&(r.driver.clone(), r.pool.clone()))
                && let Some(c) = counts.get_mut(pool).and_then(|m| m.get_mut(&r.driver))
            {
                c.allocated += 1;
            }
        }
    }
    counts.into_iter().map(|(pool, by_driver)| (pool, by_driver.into_values().collect())).collect()
}

/// A claim as the simulator keeps it: its allocation results and whom it is reserved for.
pub fn slim_claim(mut claim: ResourceClaim) -> ResourceClaim {
    crate::informer::trim_meta(&mut claim);
    claim.spec = Default::default();
    if let Some(status) = claim.status.as_mut() {
        status.devices = None;
        if let Some(a) = status.allocation.as_mut() {
            a.node_selector = None;
            if let Some(d) = a.devices.as_mut() {
                d.config = None;
            }
        }
    }
    claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::nodepool::devices::{DeviceSet, slices::NodeRef, slices::slices};

    fn claim(results: &[(&str, &str, &str)]) -> ResourceClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results.iter().map(|(driver, pool, device)| serde_json::json!({
                "request": "r", "driver": driver, "pool": pool, "device": device
            })).collect::<Vec<_>>()}}}
        }))
        .unwrap()
    }

    #[test]
    fn devices_are_counted_per_pool_and_driver_and_held_ones_once() {
        let sets: Vec<DeviceSet> =
            serde_yaml::from_str("- {driver: g.example.com, count: 4, unhealthyPercent: 100}\n- {preset: dra-cpu}\n")
                .unwrap();
        let mut all = Vec::new();
        for node in ["a-0", "a-1"] {
            all.extend(slices(&sets, &NodeRef { pool: "a", generation: 1, seed: 0, node, uid: "u" }));
        }
        let other: Vec<DeviceSet> = serde_yaml::from_str("- {driver: g.example.com, count: 2}\n").unwrap();
        all.extend(slices(&other, &NodeRef { pool: "b", generation: 1, seed: 0, node: "b-0", uid: "u" }));
        let claims = [
            claim(&[("g.example.com", "a-0", "gpu-0"), ("g.example.com", "a-1", "gpu-3")]),
            claim(&[("dra.cpu", "a-0", "cpudevnuma000")]),
            claim(&[("dra.cpu", "a-0", "cpudevnuma000")]),
            claim(&[("g.example.com", "b-0", "gpu-1")]),
            claim(&[("g.example.com", "elsewhere", "gpu-0")]),
        ];
        let counts = count(&all, &claims);
        let want_a = vec![
            DeviceCount { driver: "dra.cpu".into(), total: 4, allocated: 1, unhealthy: 0 },
            DeviceCount { driver: "g.example.com".into(), total: 8, allocated: 2, unhealthy: 8 },
        ];
        assert_eq!(counts["a"], want_a);
        assert_eq!(
            counts["b"],
            vec![DeviceCount { driver: "g.example.com".into(), total: 2, allocated: 1, unhealthy: 0 }]
        );
        assert_eq!(counts.len(), 2);
    }

    #[test]
    fn a_slim_claim_keeps_its_results_only() {
        let slim = slim_claim(claim(&[("d", "p", "x")]));
        let results = slim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap();
        assert_eq!((results[0].driver.as_str(), results[0].device.as_str()), ("d", "x"));
    }
}
