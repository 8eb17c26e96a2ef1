//! The CRD's CEL rules, evaluated client-side (kube's `cel` feature) on the same schema the
//! API server gets.

use super::PodPool;

#[test]
fn max_unavailable_is_a_count_or_a_percentage() {
    let pp = |v: &str| -> PodPool {
        serde_yaml::from_str(&format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {{name: w, namespace: d}}\nspec:\n  podCount: 1\n  maxUnavailable: {v}\n  podTemplate:\n    spec: {{containers: [{{name: a, image: b}}]}}\n"
        ))
        .unwrap()
    };
    assert!(pp("3").validate_cel().is_ok());
    assert!(pp("'25%'").validate_cel().is_ok());
    let e = format!("{:?}", pp("lots").validate_cel().unwrap_err());
    assert!(e.contains("percentage"), "{e}");
    assert!(pp("'150%'").validate_cel().is_err());
}

#[test]
fn pod_templates_keep_names_empty() {
    let p: PodPool = serde_yaml::from_str(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {name: w, namespace: d}\nspec:\n  podCount: 1\n  podTemplate:\n    metadata: {namespace: other}\n    spec: {containers: [{name: a, image: b}]}\n",
    )
    .unwrap();
    let e = format!("{:?}", p.validate_cel().unwrap_err());
    assert!(e.contains("pool's namespace"), "{e}");
}
