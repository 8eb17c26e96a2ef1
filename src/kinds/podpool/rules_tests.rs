//! PodPool rules: each bad input is refused with a message that names its manifest path.

use super::*;

fn podpool(spec: &str) -> PodPool {
    serde_yaml::from_str(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: w, namespace: d}}\nspec:\n  podCount: 2\n{spec}"
    ))
    .unwrap()
}

fn pod_errors(p: &PodPool) -> Vec<String> {
    p.problems()
}

#[test]
fn pod_templates_need_a_container_and_leave_the_rest_to_the_api_server() {
    let ok = podpool("  podTemplate:\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&ok).is_empty());
    let none = podpool("  podTemplate:\n    spec: {containers: []}\n");
    assert!(
        pod_errors(&none)[0].starts_with("spec.podTemplate.spec.containers: Required value"),
        "{:?}",
        pod_errors(&none)
    );
    let missing = podpool("");
    assert!(pod_errors(&missing)[0].starts_with("spec.podTemplate.spec.containers: Required value"));
    // Names and images are the API server's to judge, on the rendered pod.
    let noimage = podpool("  podTemplate:\n    spec: {containers: [{name: a}, {name: a, image: x}]}\n");
    assert!(pod_errors(&noimage).is_empty());
    let owned =
        podpool("  podTemplate:\n    metadata: {namespace: x}\n    spec: {containers: [{name: a, image: b}]}\n");
    assert!(pod_errors(&owned)[0].starts_with("spec.podTemplate.metadata.namespace: must be empty"));
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
fn a_node_name_is_refused_under_simulated_placement_with_both_ways_out() {
    let pinned = podpool("  podTemplate:\n    spec: {nodeName: worker-3, containers: [{name: a, image: b}]}\n");
    let errors = pod_errors(&pinned);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("spec.podTemplate.spec.nodeName: \"worker-3\""), "{errors:?}");
    assert!(errors[0].contains("kubernetes.io/hostname: worker-3") && errors[0].contains("placement: Any"));
    let any = podpool(
        "  placement: Any\n  podTemplate:\n    spec: {nodeName: worker-3, containers: [{name: a, image: b}]}\n",
    );
    assert!(pod_errors(&any).is_empty(), "placement Any keeps the template's nodeName: {:?}", pod_errors(&any));
}
