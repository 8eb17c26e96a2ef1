//! VMIPool rules: what KubeVirt would refuse is refused at its manifest path.

use super::super::api::VmiPoolLifecycle;
use super::*;

/// A VMIPool whose template is the spec (and labels) of one of KubeVirt's example VMIs.
fn vmipool_of_example(file: &str) -> (VMIPool, serde_json::Value) {
    // The run-time root first: cargo may reuse this test binary from a shared target directory
    // compiled in another clone.
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let path = format!("{root}/tests/fixtures/kubevirt/{file}");
    let vmi: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let pool = serde_json::json!({
        "apiVersion": "pools.kwok.x-k8s.io/v1alpha1", "kind": "VMIPool",
        "metadata": {"name": "vms", "namespace": "d"},
        "spec": {"vmiCount": 3, "vmiTemplate": {
            "apiVersion": vmi["apiVersion"], "kind": vmi["kind"],
            "metadata": {"labels": vmi["metadata"]["labels"]},
            "spec": vmi["spec"],
        }}
    });
    (serde_json::from_value(pool).unwrap(), vmi["spec"].clone())
}

#[test]
fn kubevirts_example_vmis_are_templates_verbatim() {
    for file in ["vmi-ephemeral.yaml", "vmi-fedora.yaml", "vmi-multus-ptp.yaml"] {
        let (pool, spec) = vmipool_of_example(file);
        assert_eq!(pool.problems(), Vec::<String>::new(), "{file}");
        // Nothing is lost: what is not typed (rng, resources: {}) is kept as written.
        assert_eq!(serde_json::to_value(&pool.spec.vmi_template.spec).unwrap(), spec, "{file}");
    }
}

#[test]
fn a_vmi_template_kubevirt_would_refuse_is_refused_at_its_paths() {
    let (good, _) = vmipool_of_example("vmi-fedora.yaml");
    let problems = |edit: &dyn Fn(&mut VMIPool)| {
        let mut p = good.clone();
        edit(&mut p);
        p.problems()
    };
    let has = |ps: Vec<String>, start: &str| {
        assert!(ps.iter().any(|p| p.starts_with(start)), "no problem at {start} in {ps:?}");
    };
    has(
        problems(&|p| p.spec.vmi_template.spec.networks.clear()),
        "spec.vmiTemplate.spec.domain.devices.interfaces[0].name:",
    );
    has(
        problems(&|p| p.spec.vmi_template.spec.domain.devices.interfaces.clear()),
        "spec.vmiTemplate.spec.networks[0].name:",
    );
    has(
        problems(&|p| p.spec.vmi_template.spec.volumes.truncate(1)),
        "spec.vmiTemplate.spec.domain.devices.disks[1].name:",
    );
    has(
        problems(&|p| p.spec.vmi_template.spec.domain.resources = None),
        "spec.vmiTemplate.spec.domain: Required value",
    );
    has(
        problems(&|p| p.spec.vmi_template.spec.networks[0].multus = Some(Default::default())),
        "spec.vmiTemplate.spec.networks[0]: set exactly one",
    );
    has(
        problems(&|p| {
            let v = p.spec.vmi_template.spec.volumes[0].clone();
            p.spec.vmi_template.spec.volumes.push(v);
        }),
        "spec.vmiTemplate.spec.volumes: the name \"containerdisk\" is used twice",
    );
    has(
        problems(&|p| {
            let labels = p.spec.vmi_template.metadata.as_mut().unwrap().labels.get_or_insert_default();
            labels.insert("pools.kwok.x-k8s.io/index".into(), "1".into());
        }),
        "spec.vmiTemplate.metadata.labels.pools.kwok.x-k8s.io/index:",
    );
    has(problems(&|p| p.spec.vmi_count = -1), "spec.vmiCount:");
}

#[test]
fn a_huge_template_is_refused_fast_with_a_short_message() {
    // A forged review bypasses the schema's maxItems: the rules must stay linear and short.
    let (good, _) = vmipool_of_example("vmi-fedora.yaml");
    let mut big = good.clone();
    let spec = &mut big.spec.vmi_template.spec;
    let iface = spec.domain.devices.interfaces[0].clone();
    let net = spec.networks[0].clone();
    for i in 0..20_000 {
        let mut f = iface.clone();
        f.name = format!("if-{i}");
        spec.domain.devices.interfaces.push(f);
        let mut n = net.clone();
        n.name = format!("net-{}", i + 1);
        spec.networks.push(n);
    }
    let start = std::time::Instant::now();
    let problems = big.problems();
    assert!(start.elapsed() < std::time::Duration::from_millis(500), "took {:?}", start.elapsed());
    assert!(problems.iter().any(|p| p.contains("a VMI takes at most 256")), "{problems:?}");
    assert!(problems.len() <= 4, "{}", problems.len());
    // Within the bound but every interface unmatched: listed up to ten, the rest counted.
    let mut wrong = good.clone();
    let spec = &mut wrong.spec.vmi_template.spec;
    for i in 0..200 {
        let mut f = iface.clone();
        f.name = format!("lonely-{i}");
        spec.domain.devices.interfaces.push(f);
    }
    let problems = wrong.problems();
    assert!(problems.iter().any(|p| p.contains("190 more problems")), "{problems:?}");
    assert!(problems.len() <= 12, "{}", problems.len());
}

#[test]
fn vmi_knobs_are_checked() {
    let l: VmiPoolLifecycle =
        serde_yaml::from_str("{vmis: {bootTime: {min: 20s, max: 10s}, failPercent: 101}}").unwrap();
    let p = crate::api::lifecycle::problems(&l);
    assert!(p.iter().any(|m| m.starts_with(".vmis.bootTime.min:")), "{p:?}");
    assert!(p.iter().any(|m| m.starts_with(".vmis.failPercent: 101")), "{p:?}");
    let ok: VmiPoolLifecycle =
        serde_yaml::from_str("{vmis: {bootTime: {mean: 30s, stddev: 5s}, failPercent: 3}}").unwrap();
    assert_eq!(crate::api::lifecycle::problems(&ok), Vec::<String>::new());
    let others: Result<VmiPoolLifecycle, _> = serde_yaml::from_str("{pods: {failPercent: 3}}");
    assert!(
        others.is_ok_and(|l| l == VmiPoolLifecycle::default()),
        "only its own sections (the API server refuses the rest)"
    );
}
