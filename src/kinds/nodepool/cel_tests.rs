//! The CRD's CEL rules, evaluated client-side (kube's `cel` feature) on the same schema the
//! API server gets.

use super::NodePool;
fn node_pool(spec: &str) -> NodePool {
    serde_yaml::from_str(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n{spec}"
    ))
    .unwrap()
}

fn cel_errors(p: &NodePool) -> String {
    match p.validate_cel() {
        Ok(()) => String::new(),
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn a_valid_pool_passes_every_rule() {
    let p = node_pool(
        "  nodeCount: 3\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  internalIPs: 10.1.0.0/24\n  nodeTemplate:\n    apiVersion: v1\n    kind: Node\n    metadata: {labels: {a.b/c: d}, annotations: {x: y}}\n",
    );
    assert_eq!(cel_errors(&p), "");
}

#[test]
fn template_names_must_stay_empty() {
    let e = cel_errors(&node_pool("  nodeCount: 1\n  nodeTemplate:\n    metadata: {name: fixed}\n"));
    assert!(e.contains("children are named"), "{e}");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  nodeTemplate:\n    metadata: {generateName: x-}\n"));
    assert!(e.contains("children are named"), "{e}");
}

#[test]
fn cidrs_are_checked() {
    let e = cel_errors(&node_pool("  nodeCount: 1\n  podCIDR: {cidr: not-a-cidr, maskSize: 24}\n  nodeTemplate: {}\n"));
    assert!(e.contains("must be a CIDR"), "{e}");
    let e =
        cel_errors(&node_pool("  nodeCount: 1\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 12}\n  nodeTemplate: {}\n"));
    assert!(e.contains("maskSize must be longer"), "{e}");
    let e =
        cel_errors(&node_pool("  nodeCount: 1\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 33}\n  nodeTemplate: {}\n"));
    assert!(e.contains("at most 32"), "{e}");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  internalIPs: 10.0.0.0/33\n  nodeTemplate: {}\n"));
    assert!(e.contains("must be a CIDR"), "{e}");
}

#[test]
fn ranges_must_be_large_enough_for_the_count() {
    let e =
        cel_errors(&node_pool("  nodeCount: 300\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  nodeTemplate: {}\n"));
    assert!(e.contains("fewer subnets"), "{e}");
    assert_eq!(
        cel_errors(&node_pool("  nodeCount: 256\n  podCIDR: {cidr: 10.0.0.0/16, maskSize: 24}\n  nodeTemplate: {}\n")),
        ""
    );
    let e = cel_errors(&node_pool("  nodeCount: 300\n  internalIPs: 10.0.0.0/24\n  nodeTemplate: {}\n"));
    assert!(e.contains("fewer host addresses"), "{e}");
}

#[test]
fn label_keys_and_values_are_checked() {
    let e = cel_errors(&node_pool("  nodeCount: 1\n  nodeTemplate:\n    metadata: {labels: {'bad key!': x}}\n"));
    assert!(e.contains("label key"), "{e}");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  nodeTemplate:\n    metadata: {labels: {ok: '-bad-'}}\n"));
    assert!(e.contains("label value"), "{e}");
}

#[test]
fn api_version_and_kind_in_the_template() {
    let e = cel_errors(&node_pool("  nodeCount: 1\n  nodeTemplate: {kind: Pod}\n"));
    assert!(e.contains("must be Node"), "{e}");
}

#[test]
fn topology_weights_go_with_zones() {
    let e = cel_errors(&node_pool("  nodeCount: 1\n  topology: {zones: [a, b], weights: [1]}\n"));
    assert!(e.contains("one weight per zone"), "{e}");
    assert_eq!(cel_errors(&node_pool("  nodeCount: 1\n  topology: {zones: [a, b], weights: [1, 2]}\n")), "");
}

#[test]
fn devices_are_checked() {
    let ok = "  nodeCount: 1\n  devices:\n  - {driver: gpu.example.com, count: 8, attributes: {model: {string: A100}}, capacity: {memory: 80Gi}}\n";
    assert_eq!(cel_errors(&node_pool(ok)), "");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  devices: [{driver: Not_A_Domain}]\n"));
    assert!(e.contains("must be a DNS subdomain"), "{e}");
    let e =
        cel_errors(&node_pool("  nodeCount: 1\n  devices: [{driver: a.b, attributes: {m: {string: x, int: 1}}}]\n"));
    assert!(e.contains("exactly one of: string, int, bool, version"), "{e}");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  devices: [{driver: a.b}, {driver: a.b}]\n"));
    assert!(e.contains("list each driver once"), "{e}");
    let presets = "  nodeCount: 1\n  devices: [{preset: nvidia-gpu, partitions: [{name: 1g.10gb, count: 7, consumes: {memory: 10Gi}}]}, {preset: dra-cpu}]\n";
    assert_eq!(cel_errors(&node_pool(presets)), "");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  devices: [{preset: nvidia-gpu}, {driver: gpu.nvidia.com}]\n"));
    assert!(e.contains("list each driver once"), "{e}");
    let e = cel_errors(&node_pool("  nodeCount: 1\n  devices: [{count: 2}]\n"));
    assert!(e.contains("set driver, or a preset"), "{e}");
}
