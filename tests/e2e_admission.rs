//! Validation in three layers, end to end with kubectl: the CRD schema and CEL, the garde
//! rules behind the admission webhook, and the reconciler's own check when the webhook is
//! down.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

fn np(scope: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: {name}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n{spec}"
    )
}

/// A StorageClass of the simulated CSI driver with `parameters` (a YAML flow map), in the scope.
fn sc(scope: &str, name: &str, parameters: &str) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {name}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nprovisioner: disk.csi.pools.kwok.x-k8s.io\nparameters: {parameters}\n"
    )
}

fn pp(scope: &str, ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n{spec}"
    )
}

fn vp(scope: &str, ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: VMIPool\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{SCOPE_LABEL}: {scope}}}\nspec:\n{spec}"
    )
}

/// A VMI template with `domain` lines (indented 8) and the rest of the spec (indented 6).
fn vmi(domain: &str, rest: &str) -> String {
    format!("  vmiTemplate:\n    spec:\n      domain:\n{domain}{rest}")
}

const MEMORY: &str = "        memory: {guest: 64Mi}\n";

/// A VMIPool of none whose template is one of KubeVirt's example VMIs, less its name.
fn kubevirt_example(scope: &str, ns: &str, name: &str, file: &str) -> String {
    let mut vmi: serde_yaml::Value =
        serde_yaml::from_str(&read_repo_file(&format!("tests/fixtures/kubevirt/{file}"))).unwrap();
    vmi["metadata"].as_mapping_mut().unwrap().remove("name");
    let template = serde_yaml::to_string(&vmi).unwrap().lines().map(|l| format!("    {l}\n")).collect::<String>();
    vp(scope, ns, name, &format!("  vmiCount: 0\n  vmiTemplate:\n{template}"))
}

/// A DNS subdomain of exactly `len` characters starting with `prefix` (labels of at most 60).
fn long_name(prefix: &str, len: usize) -> String {
    let mut name = prefix.to_string();
    while name.len() < len {
        let label = (len - name.len() - 1).min(60);
        name.push('.');
        name.push_str(&"x".repeat(label.max(1)));
    }
    name
}

const TEMPLATE: &str = "  nodeTemplate: {}\n";
const PODS: &str = "  podTemplate:\n    spec:\n      containers: [{name: app, image: nginx}]\n";

fn apply_result(yaml: &str) -> (bool, String) {
    let out = kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Waits until the API server calls our webhook (it picks new configurations up within a
/// second or two).
async fn wait_webhook(scope: &str) {
    let probe = np(
        scope,
        &format!("{scope}-probe"),
        "  nodeCount: 1\n  nodeTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/index: '1'}}\n",
    );
    wait_for("the webhook to refuse a garde-only fault", T, || async {
        let (ok, out) = apply_result(&probe);
        if ok {
            delete_quietly("nodepool", &format!("{scope}-probe"));
            Err("accepted".into())
        } else if out.contains("denied the request") {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await;
}

#[tokio::test]
async fn bad_pools_are_refused_with_the_field_and_good_ones_accepted() {
    let client = client().await;
    let s = unique("adm");
    let ns = TestNamespace::new(&client, "adm").await;
    let mut op = Operator::start(&s, &[]);
    op.wait_ready().await;
    wait_webhook(&s).await;
    // An existing pool, for the overlap rule.
    apply(&np(
        &s,
        &format!("{s}-base"),
        "  nodeCount: 1\n  podCIDR: {cidr: 10.250.0.0/16, maskSize: 24}\n  internalIPs: 10.251.0.0/24\n  nodeTemplate: {}\n",
    ));
    let n = |name: &str| format!("{s}-{name}");
    let huge = "v".repeat(1024 * 1024);

    let bad: Vec<(&str, String, &str)> = vec![
        // --- NodePool, schema layer
        ("negative count", np(&s, &n("b1"), &format!("  nodeCount: -1\n{TEMPLATE}")), "spec.nodeCount"),
        ("huge count", np(&s, &n("b2"), &format!("  nodeCount: 1000000\n{TEMPLATE}")), "spec.nodeCount"),
        ("count of the wrong type", np(&s, &n("b3"), &format!("  nodeCount: three\n{TEMPLATE}")), "spec.nodeCount"),
        (
            "unknown spec field",
            np(&s, &n("b4"), &format!("  nodeCount: 1\n  nodeCont: 2\n{TEMPLATE}")),
            "spec.nodeCont",
        ),
        (
            "unknown template field",
            np(&s, &n("b5"), "  nodeCount: 1\n  nodeTemplate:\n    spec: {taintz: []}\n"),
            "spec.nodeTemplate.spec.taintz",
        ),
        (
            "no template, and a count out of range: the count's message is not hidden",
            np(&s, &n("b6"), "  nodeCount: 100001\n"),
            "spec.nodeCount",
        ),
        (
            "a 1 MB label value",
            np(
                &s,
                &n("b7"),
                &format!("  nodeCount: 1\n  nodeTemplate:\n    metadata:\n      labels: {{big: {huge}}}\n"),
            ),
            "spec.nodeTemplate.metadata.labels",
        ),
        (
            "a quantity that is not one",
            np(&s, &n("b8"), "  nodeCount: 1\n  nodeTemplate:\n    status: {capacity: {cpu: lots}}\n"),
            "spec.nodeTemplate.status.capacity.cpu",
        ),
        (
            "maskSize of the wrong type",
            np(&s, &n("b9"), &format!("  nodeCount: 1\n  podCIDR: {{cidr: 10.9.0.0/16, maskSize: big}}\n{TEMPLATE}")),
            "spec.podCIDR.maskSize",
        ),
        // --- NodePool, CEL layer
        (
            "a template name",
            np(&s, &n("c1"), "  nodeCount: 1\n  nodeTemplate:\n    metadata: {name: fixed}\n"),
            "spec.nodeTemplate.metadata.name",
        ),
        (
            "a template of another kind",
            np(&s, &n("c2"), "  nodeCount: 1\n  nodeTemplate: {kind: Pod}\n"),
            "spec.nodeTemplate.kind",
        ),
        (
            "a podCIDR that is not a CIDR",
            np(&s, &n("c3"), &format!("  nodeCount: 1\n  podCIDR: {{cidr: 10.0.0.300/16, maskSize: 24}}\n{TEMPLATE}")),
            "spec.podCIDR.cidr",
        ),
        (
            "a maskSize shorter than the prefix",
            np(&s, &n("c4"), &format!("  nodeCount: 1\n  podCIDR: {{cidr: 10.8.0.0/16, maskSize: 8}}\n{TEMPLATE}")),
            "spec.podCIDR.maskSize",
        ),
        (
            "a podCIDR too small for the count",
            np(&s, &n("c5"), &format!("  nodeCount: 9\n  podCIDR: {{cidr: 10.7.0.0/22, maskSize: 24}}\n{TEMPLATE}")),
            "spec.podCIDR",
        ),
        (
            "internalIPs that are not a CIDR",
            np(&s, &n("c6"), &format!("  nodeCount: 1\n  internalIPs: nowhere\n{TEMPLATE}")),
            "spec.internalIPs",
        ),
        (
            "internalIPs too small for the count",
            np(&s, &n("c7"), &format!("  nodeCount: 5\n  internalIPs: 10.6.0.0/30\n{TEMPLATE}")),
            "spec.internalIPs",
        ),
        (
            "a label key that is not a name",
            np(&s, &n("c8"), "  nodeCount: 1\n  nodeTemplate:\n    metadata:\n      labels: {'bad key!': x}\n"),
            "spec.nodeTemplate.metadata.labels",
        ),
        // --- NodePool, webhook layer: garde rules, then the API server's own verdict on the
        // rendered node (a server-side dry run), told at the template's paths
        (
            "a template owner reference",
            np(
                &s,
                &n("g1"),
                "  nodeCount: 1\n  nodeTemplate:\n    metadata: {ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: c, uid: 0a1b}]}\n",
            ),
            "spec.nodeTemplate.metadata.ownerReferences",
        ),
        (
            "interruptions that never wait",
            np(
                &s,
                &n("g9"),
                &format!("  nodeCount: 1\n  lifecycle:\n    nodes:\n      interruptions: {{every: 0s}}\n{TEMPLATE}"),
            ),
            "spec.lifecycle.nodes.interruptions.every",
        ),
        (
            "a boot whose min is over its max",
            np(
                &s,
                &n("g10"),
                &format!(
                    "  nodeCount: 1\n  lifecycle:\n    nodes:\n      boot: {{after: {{min: 60s, max: 30s}}}}\n{TEMPLATE}"
                ),
            ),
            "spec.lifecycle.nodes.boot.after.min",
        ),
        (
            "a launch failure share over 100",
            np(
                &s,
                &n("c9"),
                &format!(
                    "  nodeCount: 1\n  lifecycle:\n    nodes:\n      launchFailures: {{percent: 120}}\n{TEMPLATE}"
                ),
            ),
            "spec.lifecycle.nodes.launchFailures.percent",
        ),
        (
            "a price that is not a decimal",
            np(&s, &n("c10"), &format!("  nodeCount: 1\n  capacity: {{spotPrice: cheap}}\n{TEMPLATE}")),
            "spec.capacity.spotPrice",
        ),
        (
            "an attach limit above 4096",
            np(&s, &n("c11"), &format!("  nodeCount: 1\n  storage: {{attachLimit: 5000}}\n{TEMPLATE}")),
            "spec.storage.attachLimit",
        ),
        // --- StorageClass of the simulated CSI driver (webhook)
        ("a storage delay that does not read", sc(&s, &n("sc1"), "{attachDelay: soon}"), "parameters.attachDelay"),
        (
            "a failure share above 100",
            sc(&s, &n("sc2"), "{provisionFailurePercent: '150'}"),
            "parameters.provisionFailurePercent",
        ),
        ("a parameter the driver does not read", sc(&s, &n("sc3"), "{type: gp3}"), "parameters.type"),
        (
            "an access mode that does not exist",
            sc(&s, &n("sc4"), "{accessModes: ReadWriteSometimes}"),
            "parameters.accessModes",
        ),
        (
            "a negative capacity (the API server's rule)",
            np(&s, &n("g8"), "  nodeCount: 1\n  nodeTemplate:\n    status: {capacity: {cpu: '-1'}}\n"),
            "spec.nodeTemplate.status.capacity",
        ),
        (
            "pool and index too long for a node name",
            // 250 characters: a valid pool name, but `<name>-9999` is longer than a node name may be.
            np(&s, &long_name(&n("g9"), 250), "  nodeCount: 10000\n"),
            "child name",
        ),
        (
            "duplicate taints",
            np(
                &s,
                &n("g2"),
                "  nodeCount: 1\n  nodeTemplate:\n    spec: {taints: [{key: a, effect: NoSchedule}, {key: a, effect: NoSchedule}]}\n",
            ),
            "spec.nodeTemplate.spec.taints[1]",
        ),
        (
            "a taint effect that does not exist",
            np(&s, &n("g3"), "  nodeCount: 1\n  nodeTemplate:\n    spec: {taints: [{key: a, effect: Sometimes}]}\n"),
            "spec.nodeTemplate.spec.taints[0].effect",
        ),
        (
            "a label the pool sets itself",
            np(
                &s,
                &n("g4"),
                "  nodeCount: 1\n  nodeTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/index: '3'}}\n",
            ),
            "spec.nodeTemplate.metadata.labels.pools.kwok.x-k8s.io/index",
        ),
        (
            "a podCIDR overlapping another pool",
            np(
                &s,
                &n("g5"),
                &format!("  nodeCount: 1\n  podCIDR: {{cidr: 10.250.128.0/17, maskSize: 24}}\n{TEMPLATE}"),
            ),
            "spec.podCIDR.cidr",
        ),
        (
            "internalIPs overlapping another pool",
            np(&s, &n("g6"), &format!("  nodeCount: 1\n  internalIPs: 10.251.0.0/16\n{TEMPLATE}")),
            "spec.internalIPs",
        ),
        (
            "a podCIDR in the node template",
            np(&s, &n("g7"), "  nodeCount: 2\n  nodeTemplate:\n    spec: {podCIDR: 10.5.0.0/24}\n"),
            "spec.nodeTemplate.spec.podCIDR",
        ),
        // --- PodPool
        ("negative pod count", pp(&s, &ns.name, &n("p1"), &format!("  podCount: -5\n{PODS}")), "spec.podCount"),
        (
            "a pod template without containers",
            pp(&s, &ns.name, &n("p2"), "  podCount: 1\n  podTemplate:\n    spec: {}\n"),
            "spec.podTemplate.spec.containers",
        ),
        (
            "an empty container list",
            pp(&s, &ns.name, &n("p3"), "  podCount: 1\n  podTemplate:\n    spec: {containers: []}\n"),
            "spec.podTemplate.spec.containers",
        ),
        (
            "a container without an image",
            pp(&s, &ns.name, &n("p4"), "  podCount: 1\n  podTemplate:\n    spec: {containers: [{name: a}]}\n"),
            "spec.podTemplate.spec.containers[0].image",
        ),
        (
            "a container without a name",
            pp(&s, &ns.name, &n("p5"), "  podCount: 1\n  podTemplate:\n    spec: {containers: [{image: a}]}\n"),
            "spec.podTemplate.spec.containers[0].name",
        ),
        (
            "duplicate container names",
            pp(
                &s,
                &ns.name,
                &n("p6"),
                "  podCount: 1\n  podTemplate:\n    spec: {containers: [{name: a, image: img1}, {name: a, image: img2}]}\n",
            ),
            "spec.podTemplate.spec.containers[1].name",
        ),
        (
            "a maxUnavailable that is neither",
            pp(&s, &ns.name, &n("p7"), &format!("  podCount: 1\n  maxUnavailable: lots\n{PODS}")),
            "spec.maxUnavailable",
        ),
        (
            "a template namespace",
            pp(
                &s,
                &ns.name,
                &n("p8"),
                "  podCount: 1\n  podTemplate:\n    metadata: {namespace: elsewhere}\n    spec: {containers: [{name: a, image: b}]}\n",
            ),
            "spec.podTemplate.metadata.namespace",
        ),
        (
            "a nodeName under Simulated placement",
            pp(
                &s,
                &ns.name,
                &n("p8b"),
                "  podCount: 1\n  podTemplate:\n    spec: {nodeName: worker-1, containers: [{name: a, image: b}]}\n",
            ),
            "spec.podTemplate.spec.nodeName",
        ),
        (
            "a replicas field",
            pp(&s, &ns.name, &n("p9"), &format!("  podCount: 1\n  replicas: 3\n{PODS}")),
            "spec.replicas",
        ),
        (
            "a label the pool sets on pods",
            pp(
                &s,
                &ns.name,
                &n("p10"),
                "  podCount: 1\n  podTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/pool: other}}\n    spec: {containers: [{name: a, image: b}]}\n",
            ),
            "spec.podTemplate.metadata.labels.pools.kwok.x-k8s.io/pool",
        ),
        // --- lifecycle knobs, at every layer
        (
            "a percentage above 100 (schema)",
            np(&s, &n("l1"), "  nodeCount: 1\n  lifecycle: {pods: {crashLoopPercent: 150}}\n"),
            "spec.lifecycle.pods.crashLoopPercent",
        ),
        (
            "a duration that is not one (schema)",
            np(&s, &n("l2"), "  nodeCount: 1\n  lifecycle: {pods: {startDelay: {fixed: soon}}}\n"),
            "spec.lifecycle.pods.startDelay.fixed",
        ),
        (
            "min without max (CEL)",
            np(&s, &n("l3"), "  nodeCount: 1\n  lifecycle: {pods: {exitDelay: {min: 1s}}}\n"),
            "spec.lifecycle.pods.exitDelay",
        ),
        (
            "min above max (webhook)",
            np(&s, &n("l4"), "  nodeCount: 1\n  lifecycle: {pods: {startDelay: {min: 3s, max: 1s}}}\n"),
            "spec.lifecycle.pods.startDelay.min",
        ),
        (
            "failing and crashing more than all pods (webhook)",
            np(&s, &n("l5"), "  nodeCount: 1\n  lifecycle: {pods: {failPercent: 60, crashLoopPercent: 60}}\n"),
            "spec.lifecycle.pods",
        ),
        (
            "nodes that come back after they go again (webhook)",
            np(
                &s,
                &n("l6"),
                "  nodeCount: 1\n  lifecycle: {nodes: {notReadyPercent: 5, notReadyFor: {fixed: 5m}, every: 1m}}\n",
            ),
            "spec.lifecycle.nodes.every",
        ),
        (
            "node knobs on a PodPool (CEL)",
            pp(
                &s,
                &ns.name,
                &n("l7"),
                &format!("  podCount: 1\n  lifecycle: {{nodes: {{notReadyPercent: 5}}}}\n{PODS}"),
            ),
            "spec.lifecycle",
        ),
        // --- VMIPool: schema, garde (what KubeVirt would refuse), the API server
        (
            "a negative vmiCount",
            vp(&s, &ns.name, &n("v1"), &format!("  vmiCount: -1\n{}", vmi(MEMORY, ""))),
            "spec.vmiCount",
        ),
        (
            "a VMI without memory",
            vp(&s, &ns.name, &n("v2"), &format!("  vmiCount: 1\n{}", vmi("        cpu: {cores: 2}\n", ""))),
            "spec.vmiTemplate.spec.domain",
        ),
        (
            "an interface without its network",
            vp(
                &s,
                &ns.name,
                &n("v3"),
                &format!(
                    "  vmiCount: 1\n{}",
                    vmi(&format!("{MEMORY}        devices: {{interfaces: [{{name: nic, masquerade: {{}}}}]}}\n"), "")
                ),
            ),
            "spec.vmiTemplate.spec.domain.devices.interfaces[0].name",
        ),
        (
            "a disk without its volume",
            vp(
                &s,
                &ns.name,
                &n("v4"),
                &format!(
                    "  vmiCount: 1\n{}",
                    vmi(&format!("{MEMORY}        devices: {{disks: [{{name: root, disk: {{bus: virtio}}}}]}}\n"), "")
                ),
            ),
            "spec.vmiTemplate.spec.domain.devices.disks[0].name",
        ),
        (
            "zero CPU cores",
            vp(
                &s,
                &ns.name,
                &n("v5"),
                &format!("  vmiCount: 1\n{}", vmi(&format!("{MEMORY}        cpu: {{cores: 0}}\n"), "")),
            ),
            "spec.vmiTemplate.spec.domain.cpu.cores",
        ),
        (
            "a VMI template of another API",
            vp(
                &s,
                &ns.name,
                &n("v6"),
                "  vmiCount: 1\n  vmiTemplate:\n    apiVersion: v1\n    spec: {domain: {memory: {guest: 64Mi}}}\n",
            ),
            "spec.vmiTemplate.apiVersion",
        ),
        (
            "a reserved label on the VMIs",
            vp(
                &s,
                &ns.name,
                &n("v7"),
                "  vmiCount: 1\n  vmiTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/pool: x}}\n    spec: {domain: {memory: {guest: 64Mi}}}\n",
            ),
            "spec.vmiTemplate.metadata.labels",
        ),
        (
            "a bad maxUnavailable",
            vp(&s, &ns.name, &n("v8"), &format!("  vmiCount: 1\n  maxUnavailable: 150%\n{}", vmi(MEMORY, ""))),
            "spec.maxUnavailable",
        ),
        // --- not a pool at all
        ("a YAML that is not an object", "hello: world\n".to_string(), "kind not set"),
        ("malformed YAML", "kind: NodePool\nspec: [unclosed\n".to_string(), "yaml"),
        (
            "a kind that does not exist",
            np(&s, &n("x1"), "  nodeCount: 1\n").replace("kind: NodePool", "kind: NodePoool"),
            "NodePoool",
        ),
    ];
    let mut failures = Vec::new();
    for (what, yaml, field) in &bad {
        let (ok, out) = apply_result(yaml);
        let shown: String = out.chars().take(400).collect();
        if ok {
            failures.push(format!("{what}: accepted\n{shown}"));
        } else if !out.to_lowercase().contains(&field.to_lowercase()) {
            failures.push(format!("{what}: refused, but the message does not name {field}:\n{shown}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad manifests were not refused well:\n{}",
        failures.len(),
        bad.len(),
        failures.join("\n\n")
    );

    let good: Vec<(&str, String)> = vec![
        ("no template at all: kwok's default node", np(&s, &n("ok0"), "  nodeCount: 1\n")),
        (
            "every storage knob",
            sc(
                &s,
                &n("oksc"),
                "{provisionDelay: 1s..2s, attachFailurePercent: '5', usedPercent: '10..80', accessModes: 'ReadWriteOnce,ReadWriteMany', csi.storage.k8s.io/fstype: xfs}",
            ),
        ),
        (
            "every lifecycle knob",
            np(
                &s,
                &n("ok13"),
                "  nodeCount: 0\n  lifecycle:\n    seed: 42\n    pods: {startDelay: {min: 1s, max: 3s}, exitDelay: {mean: 1s, stddev: 200ms}, ignoreSIGTERM: false, failPercent: 5, crashLoopPercent: 10, crashAfter: {fixed: 30s}, jobRunTime: {fixed: 1m30s}}\n    nodes: {notReadyPercent: 10, notReadyFor: {fixed: 1m}, every: 10m}\n",
            ),
        ),
        (
            "quantities written as floats",
            np(&s, &n("ok14"), "  nodeCount: 0\n  nodeTemplate:\n    status: {capacity: {cpu: 1.5, pods: 110}}\n"),
        ),
        (
            "a nodeInfo with two fields, as kwok users write it",
            np(
                &s,
                &n("ok10"),
                "  nodeCount: 1\n  nodeTemplate:\n    status: {nodeInfo: {architecture: arm64, operatingSystem: linux}}\n",
            ),
        ),
        (
            "a pasted node's server-set metadata",
            np(
                &s,
                &n("ok11"),
                "  nodeCount: 1\n  nodeTemplate:\n    metadata: {creationTimestamp: null, uid: 5f1e, resourceVersion: '42', annotations: {Example.COM/Note: x}}\n",
            ),
        ),
        (
            "a whole Pod as the template",
            pp(
                &s,
                &ns.name,
                &n("ok12"),
                "  podCount: 1\n  podTemplate:\n    apiVersion: v1\n    kind: Pod\n    metadata: {creationTimestamp: null, labels: {app: a}}\n    spec: {containers: [{name: app, image: nginx, resources: {}}]}\n    status: {}\n",
            ),
        ),
        (
            "the NodePool sample",
            scoped_sample(&read_repo_file("samples/nodepool.yaml"), &s)
                .replace("nodepool-sample", &n("sample"))
                .replace("nodeCount: 3", "nodeCount: 0"),
        ),
        ("an empty pool", np(&s, &n("ok1"), &format!("  nodeCount: 0\n{TEMPLATE}"))),
        (
            "ranges",
            np(
                &s,
                &n("ok2"),
                &format!(
                    "  nodeCount: 2\n  podCIDR: {{cidr: 10.252.0.0/16, maskSize: 24}}\n  internalIPs: 10.253.0.0/24\n{TEMPLATE}"
                ),
            ),
        ),
        (
            "IPv6 ranges",
            np(
                &s,
                &n("ok3"),
                &format!(
                    "  nodeCount: 2\n  podCIDR: {{cidr: 'fd00:10::/56', maskSize: 64}}\n  internalIPs: 'fd00:11::/64'\n{TEMPLATE}"
                ),
            ),
        ),
        (
            "taints and resources",
            np(
                &s,
                &n("ok4"),
                "  nodeCount: 1\n  nodeTemplate:\n    spec: {taints: [{key: a, value: b, effect: NoSchedule}, {key: a, effect: NoExecute}]}\n    status: {capacity: {cpu: 8, memory: 16Gi}, allocatable: {cpu: 7500m, memory: 15Gi}}\n",
            ),
        ),
        (
            "apiVersion and kind in the template",
            np(&s, &n("ok5"), "  nodeCount: 1\n  nodeTemplate: {apiVersion: v1, kind: Node}\n"),
        ),
        (
            "the VMIPool sample",
            read_repo_file("samples/vmipool.yaml")
                .replace("namespace: default", &format!("namespace: {}\n  labels: {{{SCOPE_LABEL}: {s}}}", ns.name))
                .replace("vmiCount: 10", "vmiCount: 0"),
        ),
        (
            "KubeVirt's Fedora example VMI (masquerade on the pod network) as a template",
            kubevirt_example(&s, &ns.name, &n("okv1"), "vmi-fedora.yaml"),
        ),
        (
            "KubeVirt's multus bridge example VMI as a template",
            kubevirt_example(&s, &ns.name, &n("okv2"), "vmi-multus-ptp.yaml"),
        ),
        (
            "KubeVirt's cirros example VMI as a template",
            kubevirt_example(&s, &ns.name, &n("okv3"), "vmi-ephemeral.yaml"),
        ),
        (
            "the PodPool sample",
            read_repo_file("samples/podpool.yaml")
                .replace("namespace: default", &format!("namespace: {}\n  labels: {{{SCOPE_LABEL}: {s}}}", ns.name))
                .replace("podCount: 20", "podCount: 1"),
        ),
        (
            "maxUnavailable as a number",
            pp(&s, &ns.name, &n("ok6"), &format!("  podCount: 1\n  maxUnavailable: 2\n{PODS}")),
        ),
        (
            "maxUnavailable as a percentage",
            pp(&s, &ns.name, &n("ok7"), &format!("  podCount: 1\n  maxUnavailable: 50%\n{PODS}")),
        ),
        (
            "init containers and a sidecar",
            pp(
                &s,
                &ns.name,
                &n("ok8"),
                "  podCount: 1\n  podTemplate:\n    spec:\n      initContainers: [{name: init, image: busybox}, {name: proxy, image: envoy, restartPolicy: Always}]\n      containers: [{name: app, image: nginx}]\n",
            ),
        ),
        (
            "readiness gates and placement",
            pp(
                &s,
                &ns.name,
                &n("ok9"),
                "  podCount: 1\n  podTemplate:\n    metadata: {labels: {app: web}}\n    spec:\n      nodeSelector: {type: kwok}\n      readinessGates: [{conditionType: example.com/ready}]\n      containers: [{name: app, image: nginx}]\n",
            ),
        ),
    ];
    for (what, yaml) in &good {
        let (ok, out) = apply_result(yaml);
        assert!(ok, "{what} was refused:\n{out}");
    }
    delete_quietly("storageclass", &n("oksc"));
    // A float quantity is kept as the string it reads as (the mutating webhook's work).
    let cpu = kubectl_ok(&["get", "nodepool", &n("ok14"), "-o", "jsonpath={.spec.nodeTemplate.status.capacity.cpu}"]);
    assert_eq!(cpu, "1.5");
    // The API server takes a Node whose allocatable exceeds its capacity, so the pool does
    // too, with a warning kubectl shows.
    let (ok, out) = apply_result(&np(
        &s,
        &n("warn"),
        "  nodeCount: 0\n  nodeTemplate:\n    status: {capacity: {cpu: 4, memory: 8Gi}, allocatable: {cpu: 8, memory: 4Gi}}\n",
    ));
    assert!(ok, "{out}");
    assert!(out.contains("Warning: spec.nodeTemplate.status.allocatable.cpu: 8 is more than"), "{out}");
    assert!(!out.contains("allocatable.memory"), "{out}");
    // Updates are validated too: scaling is fine, moving a live pool's nodes is not.
    kubectl_ok(&["scale", "nodepool", &n("ok2"), "--replicas", "3"]);
    wait_ready_nodes(&client, &n("ok2"), 3, T).await;
    let moved = np(
        &s,
        &n("ok2"),
        &format!(
            "  nodeCount: 3\n  podCIDR: {{cidr: 10.252.0.0/16, maskSize: 25}}\n  internalIPs: 10.253.0.0/24\n{TEMPLATE}"
        ),
    );
    let (ok, out) = apply_result(&moved);
    assert!(!ok && out.contains("spec.podCIDR") && out.contains("would move node 0"), "{out}");
    let grown = np(
        &s,
        &n("ok2"),
        &format!(
            "  nodeCount: 3\n  podCIDR: {{cidr: 10.252.0.0/15, maskSize: 24}}\n  internalIPs: 10.253.0.0/23\n{TEMPLATE}"
        ),
    );
    let (ok, out) = apply_result(&grown);
    assert!(ok, "growing a live pool's ranges is fine: {out}");

    let selector = format!("{SCOPE_LABEL}={s}");
    let _ = kubectl(&["delete", "nodepools", "-l", &selector, "--wait=false"]);
}

#[tokio::test]
async fn with_the_webhook_down_the_reconciler_refuses_to_act() {
    let client = client().await;
    let s = unique("down");
    let mut op = Operator::start(&s, &[]);
    op.wait_ready().await;
    wait_webhook(&s).await;
    let live = format!("{s}-live");
    apply(&np(&s, &live, "  nodeCount: 2\n  nodeTemplate:\n    metadata:\n      labels: {tier: a}\n"));
    let before = wait_ready_nodes(&client, &live, 2, T).await;
    op.stop();

    // The schema and CEL still refuse what they cover.
    let (ok, out) =
        apply_result(&np(&s, &format!("{s}-cel"), "  nodeCount: 1\n  nodeTemplate:\n    metadata: {name: x}\n"));
    assert!(!ok && out.contains("spec.nodeTemplate.metadata.name"), "{out}");
    let (ok, out) = apply_result(&np(&s, &format!("{s}-schema"), &format!("  nodeCount: -4\n{TEMPLATE}")));
    assert!(!ok && out.contains("spec.nodeCount"), "{out}");

    // Webhook-only faults get through while nobody answers the webhook (failurePolicy
    // Ignore): a garde rule (a label the pool sets) and an API server rule (duplicate taints).
    let fresh = format!("{s}-fresh");
    let (ok, out) = apply_result(&np(
        &s,
        &fresh,
        "  nodeCount: 2\n  nodeTemplate:\n    metadata: {labels: {pools.kwok.x-k8s.io/index: '9'}}\n",
    ));
    assert!(ok, "{out}");
    let (ok, out) = apply_result(&np(
        &s,
        &live,
        "  nodeCount: 2\n  nodeTemplate:\n    metadata:\n      labels: {tier: b}\n    spec: {taints: [{key: t, effect: NoSchedule}, {key: t, effect: NoSchedule}]}\n",
    ));
    assert!(ok, "{out}");

    op.restart();
    for (pool, reason, field) in [
        (&fresh, "InvalidSpec", "spec.nodeTemplate.metadata.labels.pools.kwok.x-k8s.io/index"),
        (&live, "InvalidTemplate", "spec.nodeTemplate.spec.taints[1]"),
    ] {
        let what = format!("{pool} to be Degraded with {reason}");
        let msg = wait_for(&what, T, || async {
            let p = get_pool(&client, pool).await;
            let d = p.status.as_ref().and_then(|s| s.condition("Degraded")).cloned();
            match d {
                Some(c)
                    if c.status == "True"
                        && c.reason == reason
                        && p.status.as_ref().unwrap().observed_generation == p.metadata.generation =>
                {
                    Ok(c.message)
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(msg.contains(field), "{msg}");
    }
    // Nothing was done to the children: no nodes for the new pool, the live pool's untouched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pool_nodes(&client, &fresh).await.is_empty(), "an invalid pool got nodes");
    let after = pool_nodes(&client, &live).await;
    assert_eq!(after.len(), 2);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b.metadata.uid, a.metadata.uid);
        assert_eq!(a.metadata.labels.as_ref().unwrap()["tier"], "a", "the invalid template was not rolled out");
        assert_eq!(
            b.metadata.labels.as_ref().unwrap()["pools.kwok.x-k8s.io/template-hash"],
            a.metadata.labels.as_ref().unwrap()["pools.kwok.x-k8s.io/template-hash"]
        );
    }
    // Fixed, it resumes.
    // (kubectl apply as before: the label it set is removed, not merged.)
    let (ok, out) =
        apply_result(&np(&s, &fresh, "  nodeCount: 2\n  nodeTemplate:\n    metadata: {labels: {tier: c}}\n"));
    assert!(ok, "{out}");
    wait_ready_nodes(&client, &fresh, 2, T).await;
    let p = wait_pool_status(&client, &fresh, 2, T).await;
    assert_eq!(p.status.unwrap().condition("Degraded").unwrap().status, "False");
    let selector = format!("{SCOPE_LABEL}={s}");
    let _ = kubectl(&["delete", "nodepools", "-l", &selector, "--wait=false"]);
}

#[tokio::test]
async fn a_malformed_review_gets_a_400_and_the_webhook_keeps_answering() {
    let s = unique("malformed");
    let mut op = Operator::start(&s, &[]);
    op.wait_ready().await;
    kwok_pools::telemetry::init_crypto();
    let url = format!("https://127.0.0.1:{}/validate", op.webhook_port);
    // Anyone but the API server is refused at the handshake: a forged review never reaches
    // the judge (nor its dry runs).
    let stranger = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    assert!(stranger.post(&url).body("{}").send().await.is_err(), "a caller without the API server's certificate");
    // As the API server: its webhook client identity from the cluster's PKI.
    let pki = kubeconfig().parent().unwrap().join("pki");
    let mut identity = std::fs::read(pki.join("apiserver-webhook-client.crt")).unwrap();
    identity.extend(std::fs::read(pki.join("apiserver-webhook-client.key")).unwrap());
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap();
    for body in [&b"not json at all"[..], br#"{"kind":"AdmissionReview"}"#, br#"{"request": []}"#] {
        let r = http.post(&url).body(body.to_vec()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{}", String::from_utf8_lossy(body));
        assert!(r.text().await.unwrap().contains("AdmissionReview"));
    }
    assert!(op.is_running(), "the operator survives malformed reviews");
    wait_webhook(&s).await;
}

#[tokio::test]
async fn a_huge_vmipool_is_refused_fast_and_heartbeats_stay_on_time() {
    let client = client().await;
    let s = unique("huge");
    let ns = TestNamespace::new(&client, "huge").await;
    let mut op = Operator::start(&s, &[]);
    op.wait_ready().await;
    wait_webhook(&s).await;
    apply(&nodepool_yaml(&s, &s, 20, ""));
    wait_ready_nodes(&client, &s, 20, Duration::from_secs(90)).await;
    let late_before = op.metric("kwok_pools_simulator_late_lease_renewals").await;

    // 20,000 interfaces and networks (about 1.4 MiB), through kubectl: the schema's bound
    // refuses it at once.
    let mut interfaces = String::new();
    let mut networks = String::new();
    for i in 0..20_000 {
        interfaces.push_str(&format!("{{name: n{i}, masquerade: {{}}}},"));
        networks.push_str(&format!("{{name: n{i}, pod: {{}}}},"));
    }
    let huge = vp(
        &s,
        &ns.name,
        "huge",
        &format!(
            "  vmiCount: 1\n  vmiTemplate:\n    spec:\n      domain: {{devices: {{interfaces: [{interfaces}]}}, resources: {{requests: {{memory: 1Gi}}}}}}\n      networks: [{networks}]\n"
        ),
    );
    assert!(huge.len() > 1_000_000, "{} bytes", huge.len());
    let started = std::time::Instant::now();
    let (ok, out) = apply_result(&huge);
    assert!(!ok && out.contains("256"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(10), "refused in {:?}", started.elapsed());

    // The same pool as a review straight to the webhook (past the schema), as the API server:
    // judged fast, refused at its path, and the heartbeats go on meanwhile.
    let pool: serde_json::Value = serde_yaml::from_str(&huge).unwrap();
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": "VMIPool"},
                    "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": "vmipools"},
                    "operation": "CREATE", "userInfo": {"username": "admin"}, "object": pool}
    });
    let pki = kubeconfig().parent().unwrap().join("pki");
    let mut identity = std::fs::read(pki.join("apiserver-webhook-client.crt")).unwrap();
    identity.extend(std::fs::read(pki.join("apiserver-webhook-client.key")).unwrap());
    kwok_pools::telemetry::init_crypto();
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{}/validate", op.webhook_port);
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let answer: serde_json::Value = http.post(&url).json(&review).send().await.unwrap().json().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(3), "judged in {:?}", started.elapsed());
        let message = answer["response"]["result"]["message"].as_str().unwrap_or_default().to_string();
        let message = if message.is_empty() { answer.to_string().chars().take(600).collect() } else { message };
        assert_eq!(answer["response"]["allowed"], false);
        assert!(message.contains("a VMI takes at most 256"), "{message}");
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(op.metric("kwok_pools_simulator_late_lease_renewals").await, late_before, "no heartbeat went late");
    let not_ready = pool_nodes(&client, &s).await.iter().filter(|n| !is_ready(n)).count();
    assert_eq!(not_ready, 0);
    op.stop();
}
