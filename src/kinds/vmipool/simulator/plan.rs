//! What is decided for each VMI from its VMIPool's `spec.lifecycle.vmis`: how long its VM
//! boots, whether the boot fails, whether a guest agent runs. Pure, seeded as every knob.

use super::super::api::{VMIPool, VmiLifecycle};
use super::super::vm_pool::POOL_UID_ANNOTATION;
use crate::api::conventions::POOL_LABEL;
use crate::api::duration::unit;
use crate::simulator::lifecycle::{Lifecycles, sample};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use std::time::Duration;

/// What is decided for one VMI: how long its VM boots, and whether the boot fails.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiPlan {
    pub boot_time: Duration,
    pub fails: bool,
    /// A guest agent runs in the VM (`vmis.guestAgent`).
    pub guest_agent: bool,
}

/// Decides a VMI's plan (`key`: its namespace and name with a seed, its UID without one).
pub fn plan_vmi(settings: Option<&VmiLifecycle>, seed: Option<i64>, namespace: &str, name: &str, uid: &str) -> VmiPlan {
    let Some(s) = settings else { return VmiPlan { boot_time: Duration::ZERO, fails: false, guest_agent: false } };
    let (seed, key): (i64, Vec<&str>) = match seed {
        Some(s) => (s, vec![namespace, name]),
        None => (0, vec![uid]),
    };
    let roll = unit(seed, &[&key[..], &["vmi-fate"]].concat()) * 100.0;
    VmiPlan {
        boot_time: sample(s.boot_time.as_ref(), seed, &key, "boot").unwrap_or(Duration::ZERO),
        fails: roll < f64::from(s.fail_percent.unwrap_or(0).min(100)),
        guest_agent: s.guest_agent.unwrap_or(false),
    }
}

/// What is decided for one live migration: how long its Running phase takes and whether it
/// fails then.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationPlan {
    pub time: Duration,
    pub fails: bool,
}

/// The default length of a migration's Running phase.
pub const MIGRATION_TIME: Duration = Duration::from_secs(2);

/// Decides a migration's plan from its VMI's pool knobs (`key`: the migration's namespace and
/// name with a seed, its UID without one).
pub fn plan_migration(
    settings: Option<&VmiLifecycle>,
    seed: Option<i64>,
    namespace: &str,
    name: &str,
    uid: &str,
) -> MigrationPlan {
    let (seed, key): (i64, Vec<&str>) = match seed {
        Some(s) => (s, vec![namespace, name]),
        None => (0, vec![uid]),
    };
    let Some(s) = settings else { return MigrationPlan { time: MIGRATION_TIME, fails: false } };
    let roll = unit(seed, &[&key[..], &["migration-fate"]].concat()) * 100.0;
    MigrationPlan {
        time: sample(s.migration_time.as_ref(), seed, &key, "migration").unwrap_or(MIGRATION_TIME),
        fails: roll < f64::from(s.migration_fail_percent.unwrap_or(0).min(100)),
    }
}

/// The owner references the knobs of a VMI are found by: its own, or — for the VMI of a VM a
/// VMIPool keeps (its controller is the VM) — its pool's, named by the pool label and the
/// pool UID its VM's template carries ([`POOL_UID_ANNOTATION`]).
pub fn pool_refs(vmi: &ObjectMeta) -> Vec<OwnerReference> {
    let refs = vmi.owner_references.clone().unwrap_or_default();
    let by_vm = refs.iter().any(|o| o.controller == Some(true) && o.kind == "VirtualMachine");
    let pool = vmi.labels.as_ref().and_then(|l| l.get(POOL_LABEL));
    let uid = vmi.annotations.as_ref().and_then(|a| a.get(POOL_UID_ANNOTATION));
    match (by_vm, pool, uid) {
        (true, Some(pool), Some(uid)) => vec![OwnerReference {
            api_version: VMIPool::api_version(&()).into_owned(),
            kind: VMIPool::kind(&()).into_owned(),
            name: pool.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }],
        _ => refs,
    }
}

/// The plan of migration `name` (`uid`) of a VMI with these owner references.
pub fn of_migration(
    lifecycles: &Lifecycles,
    vmi_refs: &[OwnerReference],
    namespace: &str,
    name: &str,
    uid: &str,
) -> MigrationPlan {
    let pool = lifecycles.governing(vmi_refs, Some(namespace));
    let lifecycle =
        pool.as_deref().and_then(|p| p.pool().downcast_ref::<VMIPool>()).and_then(|p| p.spec.lifecycle.as_ref());
    plan_migration(lifecycle.and_then(|l| l.vmis.as_ref()), lifecycle.and_then(|l| l.seed), namespace, name, uid)
}

/// The plan of a VMI with these owner references in `namespace`: its VMIPool's knobs, found
/// by the lifecycle engine (a VMI no VMIPool owns boots at once).
pub fn of(lifecycles: &Lifecycles, refs: &[OwnerReference], namespace: &str, name: &str, uid: &str) -> VmiPlan {
    let pool = lifecycles.governing(refs, Some(namespace));
    let lifecycle =
        pool.as_deref().and_then(|p| p.pool().downcast_ref::<VMIPool>()).and_then(|p| p.spec.lifecycle.as_ref());
    plan_vmi(lifecycle.and_then(|l| l.vmis.as_ref()), lifecycle.and_then(|l| l.seed), namespace, name, uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmis_boot_as_their_pool_says_and_a_seed_repeats_which_fail() {
        let knobs: VmiLifecycle = serde_yaml::from_str("{bootTime: {fixed: 3s}, failPercent: 30}").unwrap();
        let plans: Vec<VmiPlan> =
            (0..1000).map(|i| plan_vmi(Some(&knobs), Some(7), "ns", &format!("v-{i}"), "u")).collect();
        assert!(plans.iter().all(|p| p.boot_time == Duration::from_secs(3)));
        let failing = plans.iter().filter(|p| p.fails).count();
        assert!((240..360).contains(&failing), "about 30%: {failing}");
        let again: Vec<VmiPlan> =
            (0..1000).map(|i| plan_vmi(Some(&knobs), Some(7), "ns", &format!("v-{i}"), "other")).collect();
        assert_eq!(plans, again, "the seed decides by name, whatever the UID");
        let knobs: VmiLifecycle =
            serde_yaml::from_str("{migrationTime: {fixed: 4s}, migrationFailPercent: 50}").unwrap();
        let failing = (0..1000)
            .map(|i| plan_migration(Some(&knobs), Some(3), "ns", &format!("m-{i}"), "u"))
            .inspect(|p| assert_eq!(p.time, Duration::from_secs(4)))
            .filter(|p| p.fails)
            .count();
        assert!((420..580).contains(&failing), "about half: {failing}");
        assert_eq!(plan_migration(None, None, "ns", "m", "u"), MigrationPlan { time: MIGRATION_TIME, fails: false });
        assert_eq!(
            plan_vmi(None, None, "ns", "v", "u"),
            VmiPlan { boot_time: Duration::ZERO, fails: false, guest_agent: false }
        );
    }
}
