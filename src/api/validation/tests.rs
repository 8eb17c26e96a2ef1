//! garde rules: each bad input is refused with a message that names its manifest path.

use super::*;
use crate::api::{NodePool, NodePoolSpec, PodPool, PodPoolSpec};

fn nodepool(yaml: &str) -> NodePool {
    serde_yaml::from_str(yaml).unwrap()
}

fn nodepool_spec(extra: &str) -> NodePool {
    nodepool(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  nodeCount: 3\n{extra}"
    ))
}

fn errors_of(pool: &NodePool, ctx: &NodePoolRules) -> Vec<String> {
    check_nodepool(&pool.spec, ctx).err().unwrap_or_default()
}

fn one_error(pool: &NodePool, ctx: &NodePoolRules, path: &str) -> String {
    let errs = errors_of(pool, ctx);
    let hit = errs.iter().find(|e| e.starts_with(&format!("{path}:")));
    hit.unwrap_or_else(|| panic!("no error at {path} in {errs:?}")).clone()
}

#[test]
fn a_plain_pool_is_fine() {
    let p = nodepool_spec(
        "  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  internalIPs: 10.1.0.0/24\n  nodeTemplate:\n    metadata: {labels: {a: b}}\n    spec: {taints: [{key: x, effect: NoSchedule}]}\n    status: {capacity: {cpu: 32}, allocatable: {cpu: 30}}\n",
    );
    assert_eq!(errors_of(&p, &NodePoolRules::default()), Vec::<String>::new());
}

#[test]
fn allocatable_above_capacity_names_the_resource() {
    let p = nodepool_spec(
        "  nodeTemplate:\n    status:\n      capacity: {cpu: 32, memory: 1Gi}\n      allocatable: {cpu: 64, memory: 512Mi}\n",
    );
    let e = one_error(&p, &NodePoolRules::default(), "spec.nodeTemplate.status.allocatable.cpu");
    assert!(e.contains("must not exceed capacity"), "{e}");
    assert_eq!(errors_of(&p, &NodePoolRules::default()).len(), 1, "memory is fine");
}

#[test]
fn taints_must_be_well_formed_and_unique() {
    let p = nodepool_spec(
        "  nodeTemplate:\n    spec:\n      taints:\n      - {key: a, effect: NoSchedule}\n      - {key: a, effect: NoSchedule}\n      - {key: 'bad key', effect: NoSchedule}\n      - {key: b, effect: Sometimes}\n",
    );
    let ctx = NodePoolRules::default();
    assert!(one_error(&p, &ctx, "spec.nodeTemplate.spec.taints[1]").contains("duplicates taints[0]"));
    assert!(one_error(&p, &ctx, "spec.nodeTemplate.spec.taints[2].key").contains("qualified name"));
    assert!(one_error(&p, &ctx, "spec.nodeTemplate.spec.taints[3].effect").contains("NoExecute"));
}

#[test]
fn labels_the_pool_sets_cannot_be_templated() {
    let p = nodepool_spec(
        "  nodeTemplate:\n    metadata:\n      labels: {pools.kwok.x-k8s.io/index: '7', kubernetes.io/hostname: x}\n",
    );
    let ctx = NodePoolRules::default();
    assert!(
        one_error(&p, &ctx, "spec.nodeTemplate.metadata.labels.pools.kwok.x-k8s.io/index").contains("set by the pool")
    );
    assert!(
        one_error(&p, &ctx, "spec.nodeTemplate.metadata.labels.kubernetes.io/hostname").contains("set by the pool")
    );
}

#[test]
fn a_templated_pod_cidr_is_refused() {
    let p = nodepool_spec("  nodeTemplate:\n    spec: {podCIDR: 10.0.0.0/24}\n");
    assert!(one_error(&p, &NodePoolRules::default(), "spec.nodeTemplate.spec.podCIDR").contains("range of its own"));
}

#[test]
fn pod_cidrs_of_two_pools_never_overlap() {
    let p = nodepool_spec("  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  nodeTemplate: {}\n");
    let ctx = NodePoolRules { others: vec![("q".into(), Some("10.0.128.0/17".parse().unwrap()), None)], old: None };
    let e = one_error(&p, &ctx, "spec.podCIDR.cidr");
    assert!(e.contains("NodePool q") && e.contains("10.0.128.0/17"), "{e}");
    let apart = NodePoolRules { others: vec![("q".into(), Some("10.1.0.0/16".parse().unwrap()), None)], old: None };
    assert!(errors_of(&p, &apart).is_empty());
}

#[test]
fn ranges_must_hold_the_count() {
    let p =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/23, maskSize: 24}\n  internalIPs: 10.1.0.0/31\n  nodeTemplate: {}\n");
    let ctx = NodePoolRules::default();
    assert!(one_error(&p, &ctx, "spec.podCIDR").contains("2 subnets"));
    assert!(one_error(&p, &ctx, "spec.internalIPs").contains("2 host addresses"));
    let p = nodepool_spec("  podCIDR: {cidr: 10.0.0.0/16, maskSize: 8}\n  nodeTemplate: {}\n");
    assert!(one_error(&p, &ctx, "spec.podCIDR.maskSize").contains("longer than the prefix"));
}

#[test]
fn a_live_pool_keeps_its_nodes_ranges() {
    let old =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  internalIPs: 10.1.0.0/24\n  nodeTemplate: {}\n");
    let grown =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/15, maskSize: 24}\n  internalIPs: 10.1.0.0/23\n  nodeTemplate: {}\n");
    let ctx = NodePoolRules { others: vec![], old: Some((old.spec.clone(), 3)) };
    assert!(errors_of(&grown, &ctx).is_empty(), "{:?}", errors_of(&grown, &ctx));
    let moved =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/16, maskSize: 25}\n  internalIPs: 10.2.0.0/24\n  nodeTemplate: {}\n");
    assert!(one_error(&moved, &ctx, "spec.podCIDR").contains("would move node 0"));
    assert!(one_error(&moved, &ctx, "spec.internalIPs").contains("would move node 0"));
    // With no nodes yet, anything goes.
    let empty = NodePoolRules { others: vec![], old: Some((old.spec.clone(), 0)) };
    assert!(errors_of(&moved, &empty).is_empty());
}

#[test]
fn counts_are_bounded() {
    let mut p = nodepool_spec("  nodeTemplate: {}\n");
    p.spec.node_count = -1;
    assert!(one_error(&p, &NodePoolRules::default(), "spec.nodeCount").contains("0 to 100000"));
}

fn podpool(spec: &str) -> PodPool {
    serde_yaml::from_str(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: w, namespace: d}}\nspec:\n  podCount: 2\n{spec}"
    ))
    .unwrap()
}

fn pod_errors(p: &PodPool) -> Vec<String> {
    check_podpool(&p.spec).err().unwrap_or_default()
}

#[test]
fn pod_templates_need_named_containers_with_images() {
    let ok = podpool("  podTemplate:\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&ok).is_empty());
    let none = podpool("  podTemplate:\n    spec: {containers: []}\n");
    assert!(pod_errors(&none)[0].starts_with("spec.podTemplate.spec.containers: needs at least one"));
    let noimage = podpool("  podTemplate:\n    spec: {containers: [{name: a}, {name: a, image: x}]}\n");
    let errs = pod_errors(&noimage);
    assert!(errs.iter().any(|e| e.starts_with("spec.podTemplate.spec.containers[0].image: is required")), "{errs:?}");
    assert!(
        errs.iter().any(|e| e.starts_with("spec.podTemplate.spec.containers[1].name:") && e.contains("twice")),
        "{errs:?}"
    );
}

#[test]
fn max_unavailable_is_a_count_or_a_percentage() {
    let bad = podpool("  maxUnavailable: 120%\n  podTemplate:\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&bad)[0].starts_with("spec.maxUnavailable:"));
    let bad = podpool("  maxUnavailable: -1\n  podTemplate:\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&bad)[0].starts_with("spec.maxUnavailable:"));
    let good = podpool("  maxUnavailable: 30%\n  podTemplate:\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&good).is_empty());
}

#[test]
fn the_reconciler_check_joins_every_message() {
    let p = nodepool_spec(
        "  nodeTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/pool: x}}\n    status: {capacity: {cpu: 1}, allocatable: {cpu: 2}}\n",
    );
    let msg = validate_nodepool(&p, &[]).unwrap_err();
    assert!(
        msg.contains("spec.nodeTemplate.metadata.labels.pools.kwok.x-k8s.io/pool") && msg.contains("allocatable.cpu"),
        "{msg}"
    );
    let _ = (NodePoolSpec::clone, PodPoolSpec::clone);
}

#[test]
fn rust_names_become_manifest_names() {
    assert_eq!(super::manifest_name("node_template"), "nodeTemplate");
    assert_eq!(super::manifest_name("pod_cidr"), "podCIDR");
    assert_eq!(super::manifest_name("internal_ips"), "internalIPs");
    assert_eq!(super::manifest_name("max_unavailable"), "maxUnavailable");
}

#[test]
fn the_reconciler_blames_only_the_newer_of_two_overlapping_pools() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |p: &mut NodePool, s: i64| {
        p.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()))
    };
    let mut old = nodepool_spec("  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  nodeTemplate: {}\n");
    old.metadata.name = Some("old".into());
    at(&mut old, 100);
    let mut new = nodepool_spec("  podCIDR: {cidr: 10.0.0.0/17, maskSize: 24}\n  nodeTemplate: {}\n");
    new.metadata.name = Some("new".into());
    at(&mut new, 200);
    let all = vec![std::sync::Arc::new(old.clone()), std::sync::Arc::new(new.clone())];
    assert!(validate_nodepool(&old, &all).is_ok(), "the older pool keeps working");
    assert!(validate_nodepool(&new, &all).unwrap_err().contains("NodePool old"));
}
