//! The conventions every child follows, written once: the labels and owner a pool puts on its
//! children, how children are named, what marks a node as fake (kwok's annotation, label and
//! taint, which other tools rely on), and the field manager of every write.

/// The field manager of every write the operator makes (children, status, CRDs, webhooks).
pub const FIELD_MANAGER: &str = "kwok-pools";

/// The parameters of every patch the operator makes: its field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// The parameters of every server-side apply the operator makes: its field manager, taking
/// over the fields it applies.
pub fn apply_params() -> kube::api::PatchParams {
    kube::api::PatchParams::apply(FIELD_MANAGER).force()
}

/// The label naming the pool a child belongs to.
pub const POOL_LABEL: &str = "pools.kwok.x-k8s.io/pool";
/// The label holding a child's index (0..count-1).
pub const INDEX_LABEL: &str = "pools.kwok.x-k8s.io/index";
/// The label holding the hash of the template a child was rendered from.
pub const HASH_LABEL: &str = "pools.kwok.x-k8s.io/template-hash";
/// The label that gives a pool to a named operator instance (`--instance`); a pool's children
/// carry it too, so that instance simulates them and no other does.
pub const INSTANCE_LABEL: &str = "pools.kwok.x-k8s.io/instance";
/// Labels the pool sets itself; a template may not set them.
pub const RESERVED_LABELS: [&str; 4] = [POOL_LABEL, INDEX_LABEL, HASH_LABEL, INSTANCE_LABEL];

/// Label on a published ResourceSlice: the pool (or policy) whose devices it shows.
pub const DEVICE_POOL_LABEL: &str = "pools.kwok.x-k8s.io/device-pool";
/// The annotation (value [`FAKE_VALUE`]) kwok and kwok-pools put on fake nodes.
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// On a pool's child: it goes first when the pool scales down (any value but `false`), as
/// Cluster API's `cluster.x-k8s.io/delete-machine`: an autoscaler marks the node it chose,
/// then lowers the pool's count.
pub const DELETE_ANNOTATION: &str = "pools.kwok.x-k8s.io/delete";
/// On a pool's child: the lower, the sooner it goes when the pool scales down (the
/// ReplicaSet controller's rule; nodes honour it too).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Whether the child's annotations mark it to go first, and its deletion cost (0 when unset
/// or not a number).
pub fn deletion_order(annotation: impl Fn(&str) -> Option<String>) -> (bool, i32) {
    let marked = annotation(DELETE_ANNOTATION).is_some_and(|v| !v.trim().eq_ignore_ascii_case("false"));
    let cost = annotation(DELETION_COST_ANNOTATION).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (marked, cost)
}

/// On a simulated child: another simulator renews it too (the value names it); set by the
/// simulator, reported by the pool as Degraded/SimulatorConflict.
pub const SIMULATOR_CONFLICT_ANNOTATION: &str = "pools.kwok.x-k8s.io/simulator-conflict";
/// The annotation the simulator puts on a VMI it plays virt-controller for (no KubeVirt runs)
/// when it admits it: the operator's admission policy lets its identity write such VMIs.
pub const SIMULATED_VMI_ANNOTATION: &str = "pools.kwok.x-k8s.io/simulated";
/// On an object a pool's child makes (the VMI of a VMIPool's VirtualMachine): the UID of the
/// pool, whose knobs govern it and whose uninstall sweeps it, though its owner is the child.
pub const POOL_UID_ANNOTATION: &str = "pools.kwok.x-k8s.io/pool-uid";
/// The user-info extra the simulator sends when it writes VMIs as KubeVirt's handler
/// (impersonating it), so the operator's admission policy knows those writes for its own.
pub const IMPERSONATOR_EXTRA: &str = "kwok-pools-impersonator";
/// Its value.
pub const IMPERSONATOR_VALUE: &str = "simulator";
/// The key of the taint that keeps real workloads off fake nodes (effect NoSchedule).
pub const FAKE_TAINT_KEY: &str = "kwok.x-k8s.io/node";
/// The value of the fake-node annotation and taint.
pub const FAKE_VALUE: &str = "fake";
/// The label (value `kwok`) that pods select fake nodes by.
pub const TYPE_LABEL: &str = "type";
pub const TYPE_VALUE: &str = "kwok";
/// The node label kube-scheduler's topology rules read; a node's own name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The name of child `index` of `pool`.
pub fn child_name(pool: &str, index: u32) -> String {
    format!("{pool}-{index}")
}

/// Splits a child name `<pool>-<index>` into pool and index; `None` for any other name,
/// leading zeros included (`web-01` is not a name a pool would make).
pub fn split_child_name(name: &str) -> Option<(&str, u32)> {
    let (pool, index) = name.rsplit_once('-')?;
    let canonical =
        !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) && (index.len() == 1 || !index.starts_with('0'));
    if pool.is_empty() || !canonical {
        return None;
    }
    Some((pool, index.parse().ok()?))
}

/// The index of `name` as a child of `pool`, if it is one of its names.
pub fn child_index(pool: &str, name: &str) -> Option<u32> {
    split_child_name(name).filter(|(p, _)| *p == pool).map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_names_round_trip_and_nothing_else_parses() {
        for (pool, i) in [("web", 0), ("web", 12), ("web-1", 2), ("a", u32::MAX)] {
            assert_eq!(split_child_name(&child_name(pool, i)), Some((pool, i)));
            assert_eq!(child_index(pool, &child_name(pool, i)), Some(i));
        }
        for name in ["web-01", "web-", "-1", "web", "web-1x", "web-+1", "web-99999999999"] {
            assert_eq!(split_child_name(name), None, "{name}");
        }
        assert_eq!(child_index("web", "webx-1"), None);
        assert_eq!(child_index("web", "web-1-2"), None);
    }
}
