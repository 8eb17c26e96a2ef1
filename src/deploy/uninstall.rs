//! What `kwok-pools uninstall` does to each object it finds, decided apart from the calls that
//! do it: a pool's child is deleted; a child already being deleted that waits for the
//! simulator (a pod for its kubelet, a VMI for KubeVirt's finalizer) is let go, since no
//! simulator may run any more; one that waits for somebody else's finalizer is reported.
//! And what the install registered that outlives the operator: its webhook configurations
//! and admission policies, by name.

use kube::api::ObjectMeta;

/// What to do with one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Delete it (its deletion may still wait for someone).
    Delete,
    /// Delete it at once (grace period 0): a pod whose kubelet is simulated.
    Force,
    /// Remove the simulator's finalizers: these are the ones left.
    Release(Vec<String>),
    /// Its deletion waits on finalizers the simulator does not own: named for the report.
    Blocked(Vec<String>),
}

/// What to do with `meta`, a child of a deleted pool (or a pod on one of its nodes);
/// `simulator_finalizers` are the ones the kind's simulator owns, `is_pod` says a kubelet
/// finishes its deletion.
pub fn act(meta: &ObjectMeta, simulator_finalizers: &[&str], is_pod: bool) -> Act {
    if meta.deletion_timestamp.is_none() {
        return Act::Delete;
    }
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| simulator_finalizers.contains(&f.as_str())) {
        return Act::Release(finalizers.into_iter().filter(|f| !simulator_finalizers.contains(&f.as_str())).collect());
    }
    if !finalizers.is_empty() {
        return Act::Blocked(finalizers);
    }
    if is_pod { Act::Force } else { Act::Delete }
}

/// The webhook configurations' name of `instance` (as `kwok-pools run --instance` names them).
pub fn webhook_name(instance: &str) -> String {
    if instance == "kwok-pools" { instance.to_string() } else { format!("kwok-pools-{instance}") }
}

/// The admission policies (and their bindings, named alike) an install named `name` may have:
/// the ones that confine the operator's identity, the CA-only one of the `webhookCertSecret`
/// bundle, and the pool creators' check.
pub fn policy_names(name: &str) -> Vec<String> {
    let confining = ["simulated-nodes", "simulated-pods", "simulated-vmis", "simulated-vms", "simulated-slices"];
    confining
        .iter()
        .chain(&["webhook-ca-only"])
        .map(|suffix| format!("{name}-{suffix}"))
        .chain([crate::admission::creators::policy_name(name)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn meta(deleting: bool, finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn children_are_deleted_then_let_go_of_what_only_the_simulator_would_finish() {
        let ours = ["kubevirt.io/foregroundDeleteVirtualMachine"];
        assert_eq!(act(&meta(false, &[]), &ours, true), Act::Delete);
        assert_eq!(act(&meta(true, &[]), &ours, true), Act::Force, "a terminating pod has no kubelet to finish it");
        assert_eq!(act(&meta(true, &[]), &ours, false), Act::Delete);
        assert_eq!(
            act(&meta(true, &[ours[0], "example.com/keep"]), &ours, false),
            Act::Release(vec!["example.com/keep".into()]),
            "only the simulator's finalizer goes"
        );
        assert_eq!(
            act(&meta(true, &["example.com/keep"]), &ours, true),
            Act::Blocked(vec!["example.com/keep".into()]),
            "somebody else's finalizer is theirs to remove"
        );
    }

    #[test]
    fn the_charts_uninstall_hook_may_delete_every_kinds_pools_and_children() {
        let hook = include_str!("../../charts/kwok-pools/templates/uninstall-hook.yaml");
        struct Check<'a>(&'a str);
        impl crate::kinds::Visitor for Check<'_> {
            fn visit<K: crate::kinds::Kind>(&mut self) {
                let plural = K::plural(&());
                let child = <K::Child as kube::Resource>::plural(&());
                let has = |resource: &str| self.0.lines().any(|l| l.contains("resources: [") && l.contains(resource));
                // The test-only kind is never installed by the chart.
                if plural != "configmappools" {
                    assert!(has(&plural) && has(&child), "the hook's ClusterRole lacks {plural} or {child}");
                }
            }
        }
        crate::kinds::visit_all(&mut Check(hook));
    }

    #[test]
    fn names_follow_the_instance() {
        assert_eq!(webhook_name("kwok-pools"), "kwok-pools");
        assert_eq!(webhook_name("team-a"), "kwok-pools-team-a");
        assert!(policy_names("kwok-pools").contains(&"kwok-pools-pool-creators".to_string()));
        let config = crate::deploy::policy::config_yaml();
        for name in policy_names("kwok-pools").into_iter().filter(|n| !n.ends_with("-webhook-ca-only")) {
            assert!(config.contains(&format!("name: {name}")), "config/policy.yaml has no {name}");
        }
        // And the other way round: uninstall removes every policy an install has.
        let installed: Vec<&str> = config
            .split("---\n")
            .filter(|d| d.contains("kind: ValidatingAdmissionPolicy\n"))
            .filter_map(|d| d.lines().find_map(|l| l.strip_prefix("  name: ")))
            .collect();
        assert!(installed.len() >= 6, "{installed:?}");
        for name in installed {
            assert!(policy_names("kwok-pools").iter().any(|n| n == name), "uninstall leaves {name}");
        }
    }
}
