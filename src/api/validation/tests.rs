//! Shared rule primitives.

#[test]
fn max_unavailable_is_parsed_once_and_resolved_against_the_count() {
    use crate::api::common::MaxUnavailable;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let parse = |v: IntOrString| MaxUnavailable::parse(&v);
    assert_eq!(parse(IntOrString::Int(3)), Ok(MaxUnavailable::Count(3)));
    assert_eq!(parse(IntOrString::String("50%".into())), Ok(MaxUnavailable::Percent(50)));
    for bad in [IntOrString::Int(-1), IntOrString::String("101%".into()), IntOrString::String("5".into())] {
        assert!(parse(bad).unwrap_err().contains("is not allowed"));
    }
    assert_eq!(MaxUnavailable::resolve(None, 100), 25);
    assert_eq!(MaxUnavailable::resolve(None, 2), 1);
    assert_eq!(MaxUnavailable::resolve(Some(&MaxUnavailable::Percent(10)), 50), 5);
    assert_eq!(MaxUnavailable::resolve(Some(&MaxUnavailable::Count(0)), 50), 1);
    assert_eq!(MaxUnavailable::resolve(Some(&MaxUnavailable::Count(7)), 50), 7);
}

#[test]
fn rust_names_become_manifest_names() {
    assert_eq!(super::manifest_name("node_template"), "nodeTemplate");
    assert_eq!(super::manifest_name("pod_cidr"), "podCIDR");
    assert_eq!(super::manifest_name("internal_ips"), "internalIPs");
    assert_eq!(super::manifest_name("max_unavailable"), "maxUnavailable");
}
