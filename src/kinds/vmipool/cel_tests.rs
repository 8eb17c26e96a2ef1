//! The CRD's CEL rules, evaluated client-side (kube's `cel` feature) on the same schema the
//! API server gets.

use super::VMIPool;

#[test]
fn a_vmi_template_names_kubevirts_api_or_nothing() {
    let pool = |template: &str| -> VMIPool {
        serde_yaml::from_str(&format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: VMIPool\nmetadata: {{name: v, namespace: d}}\nspec:\n  vmiCount: 1\n  vmiTemplate:\n{template}"
        ))
        .unwrap()
    };
    let ok = pool(
        "    apiVersion: kubevirt.io/v1\n    kind: VirtualMachineInstance\n    spec: {domain: {memory: {guest: 64Mi}}}\n",
    );
    assert!(ok.validate_cel().is_ok());
    let e = format!("{:?}", pool("    apiVersion: v1\n    spec: {}\n").validate_cel());
    assert!(e.contains("must be kubevirt.io/v1"), "{e}");
    let e = format!("{:?}", pool("    metadata: {name: fixed}\n    spec: {}\n").validate_cel());
    assert!(e.contains("must be empty"), "{e}");
}
