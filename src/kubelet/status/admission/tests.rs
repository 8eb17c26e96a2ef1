use super::*;
use crate::informer::fixtures::TestPod;
use k8s_openapi::api::core::v1::Pod;

/// A pod on `n1` whose spec is `spec` (YAML) merged over the fixture's.
fn pod(name: &str, spec: &str) -> SlimPod {
    let mut p = Pod::test(name).on("n1");
    let extra: serde_json::Value = serde_yaml::from_str(spec).unwrap();
    let mut whole = serde_json::to_value(p.spec.take().unwrap()).unwrap();
    for (k, v) in extra.as_object().into_iter().flatten() {
        whole[k] = v.clone();
    }
    p.spec = Some(serde_json::from_value(whole).unwrap());
    p.slim()
}

fn asking(name: &str, cpu: &str, memory: &str) -> SlimPod {
    pod(name, &format!("containers: [{{name: app, resources: {{requests: {{cpu: '{cpu}', memory: '{memory}'}}}}}}]"))
}

fn node(yaml: &str) -> Node {
    serde_yaml::from_str(yaml).unwrap()
}

fn small() -> Node {
    node(
        "metadata: {name: n1, labels: {zone: a, tier: '3'}}\nstatus: {allocatable: {cpu: '2', memory: 4Gi, pods: '3', example.com/gpu: '1'}}",
    )
}

#[test]
fn a_pod_that_fits_is_admitted_and_one_past_the_cpu_left_is_out_of_cpu() {
    let first = asking("a", "1500m", "1Gi");
    assert_eq!(admit(&first, &small(), []), None);
    let second = asking("b", "1", "1Gi");
    let r = admit(&second, &small(), [&first]).unwrap();
    assert_eq!(r.reason, "OutOfcpu");
    assert_eq!(r.message, "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000");
    let big = asking("c", "100m", "5Gi");
    let r = admit(&big, &small(), []).unwrap();
    assert_eq!(r.reason, "OutOfmemory");
    assert!(r.message.ends_with(&format!("requested: {}, used: 0, capacity: {}", 5u64 << 30, 4u64 << 30)), "{r:?}");
}

#[test]
fn the_pods_limit_counts_first_and_extended_resources_only_where_the_node_has_them() {
    let any = || asking("x", "10m", "1Mi");
    let (a, b, c) = (any(), any(), any());
    let r = admit(&any(), &small(), [&a, &b, &c]).unwrap();
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")
    );
    let gpu = |n: &str| {
        pod(
            n,
            "containers: [{name: app, resources: {limits: {example.com/gpu: '1'}, requests: {example.com/gpu: '1'}}}]",
        )
    };
    let holder = gpu("g1");
    assert_eq!(admit(&holder, &small(), []), None);
    assert_eq!(admit(&gpu("g2"), &small(), [&holder]).unwrap().reason, "OutOfexample.com/gpu");
    // A resource the node does not have is dropped before the check, as the kubelet drops it.
    let other = pod("o", "containers: [{name: app, resources: {limits: {other.com/fpga: '1'}}}]");
    assert_eq!(admit(&other, &small(), []), None);
}

#[test]
fn requests_count_sidecars_beside_containers_and_the_largest_init_container() {
    let p = pod(
        "p",
        "initContainers: [{name: setup, resources: {requests: {cpu: '3'}}}, {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m}}}]\ncontainers: [{name: app, resources: {requests: {cpu: '1'}}}]",
    );
    assert_eq!(pod_requests(&p)["cpu"], 3000, "the init container's 3 CPU exceed 1 + 0.5");
    let p = pod(
        "q",
        "initContainers: [{name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m}}}, {name: setup, resources: {requests: {cpu: '1'}}}]\ncontainers: [{name: app, resources: {requests: {cpu: '2'}}}]",
    );
    assert_eq!(pod_requests(&p)["cpu"], 2500, "containers and sidecar: 2 + 0.5");
}

#[test]
fn selectors_affinity_ports_and_no_execute_taints_are_checked_in_the_kubelets_order() {
    let n = small();
    let r = admit(&pod("s", "nodeSelector: {zone: b}"), &n, []).unwrap();
    assert_eq!(r.reason, "NodeAffinity");
    assert_eq!(r.message, "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector");
    assert_eq!(admit(&pod("s", "nodeSelector: {zone: a}"), &n, []), None);
    let affinity = |expr: &str| {
        pod(
            "aff",
            &format!(
                "affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{expr}]}}}}}}"
            ),
        )
    };
    assert_eq!(admit(&affinity("{matchExpressions: [{key: tier, operator: Gt, values: ['2']}]}"), &n, []), None);
    assert!(admit(&affinity("{matchExpressions: [{key: tier, operator: Lt, values: ['2']}]}"), &n, []).is_some());
    assert_eq!(admit(&affinity("{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}"), &n, []), None);
    assert!(admit(&affinity("{matchExpressions: [{key: gpu, operator: Exists}]}"), &n, []).is_some());
    assert_eq!(
        admit(
            &affinity(
                "{matchExpressions: [{key: gpu, operator: Exists}]}, {matchExpressions: [{key: zone, operator: NotIn, values: [b]}]}"
            ),
            &n,
            []
        ),
        None,
        "terms are ORed"
    );

    let web = |name: &str, ip: &str| {
        pod(
            name,
            &format!("containers: [{{name: app, ports: [{{containerPort: 80, hostPort: 8080, hostIP: '{ip}'}}]}}]"),
        )
    };
    let first = web("w1", "");
    assert_eq!(admit(&first, &n, []), None);
    let r = admit(&web("w2", "10.0.0.1"), &n, [&first]).unwrap();
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    );
    let udp = pod("u", "containers: [{name: app, ports: [{containerPort: 80, hostPort: 8080, protocol: UDP}]}]");
    assert_eq!(admit(&udp, &n, [&first]), None, "another protocol is another port");

    let tainted = node(
        "metadata: {name: n1}\nspec: {taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}, {key: maintenance, value: 'yes', effect: NoExecute}]}\nstatus: {allocatable: {pods: '10'}}",
    );
    let r = admit(&pod("t", ""), &tainted, []).unwrap();
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    );
    assert_eq!(admit(&pod("t", "tolerations: [{key: maintenance, operator: Exists}]"), &tainted, []), None);
    assert_eq!(
        admit(&pod("t", "tolerations: [{key: maintenance, value: 'yes', effect: NoExecute}]"), &tainted, []),
        None
    );
    assert!(admit(&pod("t", "tolerations: [{key: maintenance, value: 'no'}]"), &tainted, []).is_some());
    assert!(
        admit(&pod("t", "tolerations: [{key: maintenance, operator: Exists, effect: NoSchedule}]"), &tainted, [])
            .is_some()
    );
    assert_eq!(
        admit(&pod("t", "tolerations: [{operator: Exists}]"), &tainted, []),
        None,
        "an empty key with Exists tolerates all"
    );
    // Resources first: a pod that fails both is OutOf…, as the kubelet reports the first.
    let both = pod("b", "nodeSelector: {zone: b}\ncontainers: [{name: app, resources: {requests: {cpu: '3'}}}]");
    assert_eq!(admit(&both, &n, []).unwrap().reason, "OutOfcpu");
}
