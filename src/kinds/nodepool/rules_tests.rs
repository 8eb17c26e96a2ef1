//! NodePool rules: each bad input is refused with a message that names its manifest path.

use super::*;

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
fn allocatable_above_capacity_is_advice_not_a_refusal() {
    // The API server takes such a Node, so the pool does too, with a warning per resource.
    let p = nodepool_spec(
        "  nodeTemplate:\n    status:\n      capacity: {cpu: 32, memory: 1Gi}\n      allocatable: {cpu: 64, memory: 512Mi}\n",
    );
    assert_eq!(errors_of(&p, &NodePoolRules::default()), Vec::<String>::new());
    let warnings = node_template_warnings(&p.spec.node_template);
    assert_eq!(warnings.len(), 1, "memory is fine: {warnings:?}");
    assert!(warnings[0].starts_with("spec.nodeTemplate.status.allocatable.cpu: 64 is more than"), "{warnings:?}");
}

#[test]
fn quantities_too_large_for_any_arithmetic_never_panic() {
    // Issue: `1e27` against `1m` overflowed a multiplication and killed the operator.
    for (alloc, cap) in [("1e27", "1m"), ("9e999999999", "1"), ("1Ei", "2E"), ("1", "-1e400"), ("lots", "1")] {
        let p = nodepool_spec(&format!(
            "  nodeTemplate:\n    status: {{allocatable: {{cpu: '{alloc}'}}, capacity: {{cpu: '{cap}'}}}}\n"
        ));
        assert!(errors_of(&p, &NodePoolRules::default()).is_empty());
        let _ = node_template_warnings(&p.spec.node_template);
    }
}

#[test]
fn what_the_pool_owns_is_refused_in_the_template_and_the_rest_accepted() {
    let p = nodepool_spec(
        "  nodeTemplate:\n    metadata:\n      name: n\n      ownerReferences: [{apiVersion: v1, kind: X, name: x, uid: u}]\n",
    );
    let ctx = NodePoolRules::default();
    assert!(one_error(&p, &ctx, "spec.nodeTemplate.metadata.name").contains("must be empty"));
    assert!(one_error(&p, &ctx, "spec.nodeTemplate.metadata.ownerReferences").contains("the pool owns"));
    // A pasted node: server-set metadata, a nodeInfo with two fields, taints: all fine here.
    let pasted = nodepool_spec(
        "  nodeTemplate:\n    metadata: {uid: 0b5c-11, resourceVersion: '9', creationTimestamp: null, finalizers: [example.com/x]}\n    spec: {taints: [{key: a, effect: NoSchedule}]}\n    status: {nodeInfo: {architecture: arm64, operatingSystem: linux}}\n",
    );
    assert_eq!(errors_of(&pasted, &ctx), Vec::<String>::new());
}

#[test]
fn annotation_keys_are_checked_in_lower_case_as_the_api_server_does() {
    let p = nodepool_spec("  nodeTemplate:\n    metadata: {annotations: {Example.COM/Note: x}}\n");
    assert_eq!(errors_of(&p, &NodePoolRules::default()), Vec::<String>::new());
    let p = nodepool_spec("  nodeTemplate:\n    metadata: {annotations: {'bad key!': x}}\n");
    assert!(
        one_error(&p, &NodePoolRules::default(), "spec.nodeTemplate.metadata.annotations.bad key!")
            .contains("qualified name")
    );
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

#[test]
fn every_problem_is_reported_at_once() {
    let p = nodepool_spec("  nodeTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/pool: x}, generateName: g-}\n");
    let problems = p.problems(None, &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().any(|m| m.starts_with("spec.nodeTemplate.metadata.labels.pools.kwok.x-k8s.io/pool")));
    assert!(problems.iter().any(|m| m.starts_with("spec.nodeTemplate.metadata.generateName")));
}

#[test]
fn range_moves_are_found_in_constant_time_whatever_the_count() {
    // A crafted review may carry any count (the schema's bound does not reach the webhook's
    // raw body): the check must not walk the nodes one by one.
    let has = |errs: &[String], path: &str, node: u32| {
        errs.iter().any(|e| e.starts_with(&format!("{path}:")) && e.contains(&format!("would move node {node} ")))
    };
    let old =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/8, maskSize: 30}\n  internalIPs: 10.0.0.0/8\n  nodeTemplate: {}\n");
    let ctx = NodePoolRules { others: vec![], old: Some((old.spec.clone(), u32::MAX)) };
    let mut moved =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/8, maskSize: 31}\n  internalIPs: 11.0.0.0/8\n  nodeTemplate: {}\n");
    moved.spec.node_count = i32::MAX;
    let errs = errors_of(&moved, &ctx);
    assert!(has(&errs, "spec.podCIDR", 0) && has(&errs, "spec.internalIPs", 0), "{errs:?}");
    // The same start and step, but a range that ends before the live nodes do.
    let mut shrunk =
        nodepool_spec("  podCIDR: {cidr: 10.0.0.0/9, maskSize: 30}\n  internalIPs: 10.0.0.0/9\n  nodeTemplate: {}\n");
    shrunk.spec.node_count = i32::MAX;
    let errs = errors_of(&shrunk, &ctx);
    assert!(has(&errs, "spec.podCIDR", 1 << 21), "{errs:?}");
    assert!(has(&errs, "spec.internalIPs", (1 << 23) - 2), "{errs:?}");
    // Grown: nothing moves.
    let few = NodePoolRules { others: vec![], old: Some((shrunk.spec.clone(), 1000)) };
    let errs = errors_of(&old, &few);
    assert!(errs.iter().all(|e| !e.contains("would move")), "{errs:?}");
}

#[test]
fn topology_spreads_zones_by_index_round_robin_or_by_weight() {
    let t = |zones: &[&str], weights: &[u32]| super::super::api::Topology {
        region: None,
        zones: zones.iter().map(|z| z.to_string()).collect(),
        weights: weights.to_vec(),
    };
    let even = t(&["a", "b", "c"], &[]);
    assert_eq!((0..7).map(|i| even.zone_of(i).unwrap()).collect::<String>(), "abcabca");
    let uneven = t(&["a", "b"], &[3, 1]);
    assert_eq!((0..8).map(|i| uneven.zone_of(i).unwrap()).collect::<String>(), "aaabaaab");
    assert_eq!(t(&[], &[]).zone_of(5), None);
    assert_eq!(
        t(&["a", "b"], &[1]).zone_of(3),
        Some("b"),
        "mismatched weights (refused at admission) fall back to round-robin"
    );
}

#[test]
fn topology_rules_name_the_field() {
    let ok = nodepool_spec("  topology: {region: eu-west-1, zones: [eu-west-1a, eu-west-1b], weights: [2, 1]}\n");
    assert_eq!(errors_of(&ok, &NodePoolRules::default()), Vec::<String>::new());
    let bad = nodepool_spec("  topology: {zones: [a, 'no spaces', a], weights: [1, 0]}\n");
    let errs = errors_of(&bad, &NodePoolRules::default());
    for want in
        ["spec.topology.zones[1]:", "spec.topology.zones[2]:", "spec.topology.weights:", "spec.topology.weights[1]: 0"]
    {
        assert!(errs.iter().any(|e| e.starts_with(want)), "no {want} in {errs:?}");
    }
    let both = nodepool_spec(
        "  topology: {zones: [a]}\n  nodeTemplate:\n    metadata: {labels: {topology.kubernetes.io/zone: z}}\n",
    );
    let e = one_error(&both, &NodePoolRules::default(), "spec.topology");
    assert!(e.contains("set it in one place"), "{e}");
}

#[test]
fn kubevirt_device_counts_are_checked() {
    let ok = nodepool_spec("  kubevirt: {devices: 110}\n");
    assert_eq!(errors_of(&ok, &NodePoolRules::default()), Vec::<String>::new());
    assert_eq!(errors_of(&nodepool_spec("  kubevirt: {}\n"), &NodePoolRules::default()), Vec::<String>::new());
    let e = one_error(&nodepool_spec("  kubevirt: {devices: 0}\n"), &NodePoolRules::default(), "spec.kubevirt.devices");
    assert!(e.contains("from 1 to 1000000"), "{e}");
    assert_eq!(super::super::api::KubevirtNodes::default().device_count(), 1000, "virt-handler's default");
}

#[test]
fn device_rules_name_the_field() {
    let ok = nodepool_spec("  devices: [{driver: gpu.example.com, count: 8, attributes: {model: {string: A100}}}]\n");
    assert_eq!(errors_of(&ok, &NodePoolRules::default()), Vec::<String>::new());
    let bad = nodepool_spec("  devices: [{driver: a.b, count: 200}, {driver: a.b, capacity: {memory: lots}}]\n");
    let errs = errors_of(&bad, &NodePoolRules::default());
    for want in [
        "spec.devices[0].count: 200",
        "spec.devices[1].driver: a.b is listed twice",
        "spec.devices[1].capacity[memory]:",
    ] {
        assert!(errs.iter().any(|e| e.starts_with(want)), "no {want} in {errs:?}");
    }
}
