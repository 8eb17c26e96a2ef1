//! The kubelet's prepare step for a pod's ResourceClaims, simulated: whether the driver's
//! plugin fails to prepare one of the pod's devices (`prepareFailPercent`), drawn from the
//! pool's seed and the pod's namespace and name, so the same pod fails the same way.

use super::DeviceSet;
use crate::api::duration::unit;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// A prepare that fails: the claim, its driver, and the index of the device set that says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub claim: String,
    pub driver: String,
    pub set: usize,
}

/// Whether any set asks for failures at all (else the claims need not be looked at).
pub fn may_fail(sets: &[DeviceSet]) -> bool {
    sets.iter().any(|s| s.prepare_fail_percent.is_some_and(|p| p > 0))
}

/// The claims reserved for the pod with `uid`.
pub fn claims_of<'a>(
    uid: &'a str,
    claims: impl IntoIterator<Item = &'a ResourceClaim> + 'a,
) -> impl Iterator<Item = &'a ResourceClaim> + 'a {
    claims.into_iter().filter(move |c| {
        c.status.as_ref().and_then(|s| s.reserved_for.as_ref()).is_some_and(|r| r.iter().any(|r| r.uid == uid))
    })
}

/// The first of the pod's allocated devices whose prepare fails, if any.
pub fn failure<'a>(
    sets: &[DeviceSet],
    seed: i64,
    namespace: &str,
    pod: &str,
    claims: impl IntoIterator<Item = &'a ResourceClaim>,
) -> Option<Failure> {
    for claim in claims {
        let results = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref());
        for r in results.and_then(|d| d.results.as_ref()).into_iter().flatten() {
            let Some((i, set)) = sets.iter().enumerate().find(|(_, s)| s.driver() == r.driver) else { continue };
            let percent = f64::from(set.prepare_fail_percent.unwrap_or(0).min(100));
            if unit(seed, &[namespace, pod, &r.driver, "prepare"]) * 100.0 < percent {
                let claim = claim.metadata.name.clone().unwrap_or_default();
                return Some(Failure { claim, driver: r.driver.clone(), set: i });
            }
        }
    }
    None
}

/// The kubelet's event note for `f`.
pub fn note(f: &Failure) -> String {
    format!(
        "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim {}: driver {} failed to prepare the device (simulated: NodePool spec.devices[{}].prepareFailPercent)",
        f.claim, f.driver, f.set
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, uid: &str, driver: &str) -> ResourceClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "n"},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": [{"request": "r", "driver": driver, "pool": "node-0", "device": "gpu-0"}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_seeded_share_of_pods_fails_to_prepare_their_drivers_devices() {
        let sets: Vec<DeviceSet> =
            serde_yaml::from_str("- {driver: bad.example.com, prepareFailPercent: 30}\n- {driver: good.example.com}\n")
                .unwrap();
        assert!(may_fail(&sets));
        let claims: Vec<ResourceClaim> =
            (0..400).map(|i| claim(&format!("c{i}"), &format!("u{i}"), "bad.example.com")).collect();
        let failed = (0..400)
            .filter(|i| failure(&sets, 5, "n", &format!("p{i}"), claims_of(&format!("u{i}"), &claims)).is_some())
            .count();
        assert!((80..160).contains(&failed), "about 30 %: {failed} of 400");
        let one = claim("c", "u", "bad.example.com");
        let first = (0..400).find(|i| failure(&sets, 5, "n", &format!("p{i}"), [&one]).is_some()).unwrap();
        let f = failure(&sets, 5, "n", &format!("p{first}"), [&one]).unwrap();
        assert_eq!(f, Failure { claim: "c".into(), driver: "bad.example.com".into(), set: 0 });
        assert!(note(&f).contains("ResourceClaim c") && note(&f).contains("spec.devices[0].prepareFailPercent"));
        let good = claim("g", "u", "good.example.com");
        assert!(
            (0..400).all(|i| failure(&sets, 5, "n", &format!("p{i}"), [&good]).is_none()),
            "the other driver prepares"
        );
        assert_eq!(claims_of("u7", &claims).count(), 1);
    }
}
