//! The committed CRDs must be what the Rust types generate (run `make crds` after a change).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

#[test]
fn committed_crds_are_up_to_date() {
    let committed = std::fs::read_to_string(kwok_pools_test_support::repo().join("crds/kwok-pools.yaml"))
        .expect("crds/kwok-pools.yaml exists: run `make crds`");
    let generated = kwok_pools::kinds::crds_yaml();
    assert!(committed == generated, "crds/kwok-pools.yaml is stale: run `make crds` and commit the result");
}

#[test]
fn the_helm_chart_ships_the_same_crds() {
    let committed = std::fs::read_to_string(kwok_pools_test_support::repo().join("crds/kwok-pools.yaml")).unwrap();
    let chart = std::fs::read_to_string(kwok_pools_test_support::repo().join("charts/kwok-pools/crds/kwok-pools.yaml"))
        .unwrap();
    assert!(committed == chart, "charts/kwok-pools/crds/kwok-pools.yaml differs from crds/: run `make crds`");
}

#[test]
fn crds_stay_well_under_the_size_limits() {
    for crd in kwok_pools::kinds::crds() {
        let bytes = serde_json::to_vec(&crd).unwrap().len();
        let name = crd.metadata.name.unwrap_or_default();
        // etcd's request limit is 1.5 MiB; client-side apply's annotation limit is 256 KiB.
        assert!(bytes < 256 * 1024, "{name} is {bytes} bytes");
    }
}
