//! Per-pod behaviour and outcomes, end to end: kwok's stage annotations on a pod set its own
//! start, run time and failures; any pod that may finish finishes; OOM kills, image pulls that
//! back off and failing init containers look as a kubelet shows them; the real Job controller
//! applies its failure policies to what the simulator reports; readiness flaps in and out of
//! a Service's endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kwok_pools::api::lifecycle::PodLifecycle;
use kwok_pools::informer::pod::SlimPod;
use kwok_pools::kubelet::status::fate::{COMPLETION_INDEX_LABEL, Defaults, plan_pod};
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(90);

/// A pod on the scope's nodes with these annotations, restart policy and extra spec.
fn pod(name: &str, ns: &str, scope: &str, annotations: &[(&str, &str)], restart: &str, extra: &str) -> String {
    let annotations: Vec<String> = annotations.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, annotations: {{{}}}}}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
{extra}  containers: [{{name: app, image: nginx}}]
",
        annotations.join(", ")
    )
}

fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

fn statuses(p: &Pod) -> Vec<ContainerStatus> {
    p.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default()
}

fn init_statuses(p: &Pod) -> Vec<ContainerStatus> {
    p.status.as_ref().and_then(|s| s.init_container_statuses.clone()).unwrap_or_default()
}

fn waiting(c: &ContainerStatus) -> Option<String> {
    c.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

/// How long the pod's first container ran before it exited (its start time to its finish).
fn ran(p: &Pod) -> f64 {
    let started = p.status.as_ref().unwrap().start_time.clone().unwrap().0;
    let ended = statuses(p)[0].state.clone().unwrap().terminated.unwrap().finished_at.unwrap().0;
    (ended - started).total(k8s_openapi::jiff::Unit::Second).unwrap()
}

async fn get(client: &kube::Client, ns: &str, name: &str) -> Pod {
    Api::<Pod>::namespaced(client.clone(), ns).get(name).await.unwrap()
}

/// Waits until `name` satisfies `ok`, saying what it shows meanwhile.
async fn wait_pod(client: &kube::Client, ns: &str, name: &str, what: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    wait_for(&format!("{name}: {what}"), T, || async {
        let p = get(client, ns, name).await;
        if ok(&p) {
            Ok(p)
        } else {
            let shown: Vec<String> = statuses(&p)
                .iter()
                .chain(init_statuses(&p).iter())
                .map(|c| format!("{}: {:?}", c.name, c.state))
                .collect();
            Err(format!("{} {shown:?}", phase(&p)))
        }
    })
    .await
}

/// What `kubectl get pod` shows in its STATUS column.
fn kubectl_status(ns: &str, name: &str) -> String {
    let line = kubectl_ok(&["get", "pod", name, "-n", ns, "--no-headers"]);
    line.split_whitespace().nth(2).unwrap_or_default().to_string()
}

#[tokio::test]
async fn kwoks_annotations_set_a_pods_own_start_run_time_and_failures() {
    let client = client().await;
    let scope = unique("annot");
    let ns = TestNamespace::new(&client, "annot").await;
    let _op = Operator::start(&scope, &[]);
    // The pool's run time finishes any pod that may finish; a pod's own annotation wins.
    let knobs = "  lifecycle:\n    pods: {runTime: {fixed: 6s}}\n";
    apply(&scoped_nodepool(&scope, &scope, 1, "10.217.0.0/16", 24, 110, knobs));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let complete = [("pod-complete.stage.kwok.x-k8s.io/delay", "1s")];
    apply(&pod("own-run-time", n, &scope, &complete, "Never", ""));
    apply(&pod("pool-run-time", n, &scope, &[], "OnFailure", ""));
    apply(&pod("always", n, &scope, &complete, "Always", ""));
    apply(&pod("slow-start", n, &scope, &[("pod-ready.stage.kwok.x-k8s.io/delay", "4s")], "Always", ""));
    let oom = [
        ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
        ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "137"),
        ("pod-container-failed.stage.kwok.x-k8s.io/reason", "OOMKilled"),
        ("pod-container-failed.stage.kwok.x-k8s.io/delay", "1s"),
    ];
    apply(&pod("oom", n, &scope, &oom, "Always", ""));
    let fails_once = [
        ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
        ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "42"),
        ("pod-container-failed.stage.kwok.x-k8s.io/message", "simulated failure"),
    ];
    apply(&pod("exits-42", n, &scope, &fails_once, "Never", ""));
    let init = "  initContainers: [{name: setup, image: busybox}]\n";
    let init_fails = [
        ("pod-init-container-failed.stage.kwok.x-k8s.io/name", "setup"),
        ("pod-init-container-failed.stage.kwok.x-k8s.io/exit-code", "3"),
    ];
    apply(&pod("init-fails", n, &scope, &init_fails, "Always", init));
    apply(&pod("init-fails-never", n, &scope, &init_fails, "Never", init));
    apply(&pod("no-pull", n, &scope, &[("pools.kwok.x-k8s.io/image-pull", "fail")], "Always", ""));
    apply(&pod("bad", n, &scope, &[("pod-complete.stage.kwok.x-k8s.io/delay", "soon")], "Always", ""));

    // The pod's own run time (1s), then the pool's (6s); restartPolicy Always never finishes.
    let own = wait_pod(&client, n, "own-run-time", "Succeeded", |p| phase(p) == "Succeeded").await;
    let pool = wait_pod(&client, n, "pool-run-time", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert!(ran(&own) < 4.0, "the annotation's 1s, not the pool's 6s: ran {:.1}s", ran(&own));
    assert!((4.0..12.0).contains(&ran(&pool)), "the pool's 6s: ran {:.1}s", ran(&pool));
    let exit = statuses(&own)[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((exit.exit_code, exit.reason.as_deref()), (0, Some("Completed")));

    // A start delay: Pending while it runs (the kubelet took the pod), Running after.
    let slow = get(&client, n, "slow-start").await;
    let started = slow.status.as_ref().unwrap().start_time.clone().unwrap().0;
    let slow = wait_pod(&client, n, "slow-start", "Running", |p| phase(p) == "Running").await;
    let running_at = statuses(&slow)[0].state.clone().unwrap().running.unwrap().started_at.unwrap().0;
    let delay = (running_at - started).total(k8s_openapi::jiff::Unit::Second).unwrap();
    assert!((2.5..10.0).contains(&delay), "pod-ready delay 4s: it took {delay:.1}s");

    // OOMKilled, restarted with back-off, as the annotation says.
    let oom = wait_pod(&client, n, "oom", "an OOM kill", |p| {
        statuses(p).first().is_some_and(|c| {
            c.restart_count >= 1 && c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).is_some()
        })
    })
    .await;
    let last = statuses(&oom)[0].last_state.clone().unwrap().terminated.unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (137, Some("OOMKilled")));
    assert_eq!(phase(&oom), "Running", "restartPolicy Always: it is restarted, not failed");

    // restartPolicy Never: Failed with the chosen exit code and message.
    let failed = wait_pod(&client, n, "exits-42", "Failed", |p| phase(p) == "Failed").await;
    let t = statuses(&failed)[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, t.message.as_deref()), (42, Some("simulated failure")));

    // A failing init container: Init:Error / Init:CrashLoopBackOff, or Failed when never restarted.
    let stuck = wait_pod(&client, n, "init-fails", "the init container failed", |p| {
        init_statuses(p).first().is_some_and(|c| {
            c.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 3)
                || c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 3)
        })
    })
    .await;
    assert_eq!(phase(&stuck), "Pending");
    assert_eq!(waiting(&statuses(&stuck)[0]).as_deref(), Some("PodInitializing"));
    let shown = kubectl_status(n, "init-fails");
    assert!(shown == "Init:Error" || shown == "Init:CrashLoopBackOff", "kubectl shows {shown}");
    wait_pod(&client, n, "init-fails", "Init:CrashLoopBackOff after the back-off", |p| {
        init_statuses(p)
            .first()
            .is_some_and(|c| c.restart_count >= 1 && waiting(c).as_deref() == Some("CrashLoopBackOff"))
    })
    .await;
    wait_pod(&client, n, "init-fails-never", "Failed", |p| phase(p) == "Failed").await;

    // An image that never pulls: ErrImagePull, then ImagePullBackOff; Pending for good.
    wait_pod(&client, n, "no-pull", "ImagePullBackOff", |p| {
        statuses(p).first().and_then(waiting).as_deref() == Some("ImagePullBackOff")
    })
    .await;
    assert_eq!(kubectl_status(n, "no-pull"), "ImagePullBackOff");
    assert_eq!(phase(&get(&client, n, "no-pull").await), "Pending");

    // A bad value: an event names the annotation; the pod runs as if it were not there.
    wait_pod(&client, n, "bad", "Running", |p| phase(p) == "Running").await;
    wait_for("the BadAnnotation event", T, || async {
        let events = kubectl_ok(&[
            "get",
            "events",
            "-n",
            n,
            "--field-selector",
            "involvedObject.name=bad,reason=BadAnnotation",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        if events.contains("pod-complete.stage.kwok.x-k8s.io/delay") && events.contains("\"soon\"") {
            Ok(())
        } else {
            Err(events)
        }
    })
    .await;
    assert_eq!(phase(&get(&client, n, "always").await), "Running", "restartPolicy Always never completes");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

/// The plan of an indexed Job's pod at `index`, as the simulator makes it.
fn index_run_time(settings: &PodLifecycle, seed: i64, ns: &str, job: &str, index: usize) -> Duration {
    let mut p = SlimPod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(format!("{job}-{index}-x"));
    p.restart_policy = Some("Never".into());
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.into(),
        controller: Some(true),
        ..Default::default()
    }]);
    p.set_label(COMPLETION_INDEX_LABEL, &index.to_string());
    plan_pod(Some(settings), Some(seed), &p, &Defaults::default()).run_time.unwrap()
}

fn job(name: &str, ns: &str, scope: &str, spec: &str, annotations: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {ns}}}
spec:
{spec}  template:
    metadata: {{annotations: {{{annotations}}}}}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: work, image: busybox}}]
"
    )
}

/// The Job's condition of `type_` that is True: its reason.
fn job_condition(ns: &str, name: &str, type_: &str) -> Option<String> {
    let path = format!(
        "jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}/{{.status.conditions[?(@.type==\"{type_}\")].reason}}"
    );
    let out = kubectl_ok(&["get", "job", name, "-n", ns, "-o", &path]);
    out.strip_prefix("True/").map(str::to_string)
}

#[tokio::test]
async fn the_job_controller_applies_its_policies_to_what_simulated_pods_report() {
    let client = client().await;
    let scope = unique("jobpol");
    let ns = TestNamespace::new(&client, "jobpol").await;
    let _op = Operator::start(&scope, &[]);
    let knobs = "  lifecycle:\n    seed: 11\n    pods: {jobRunTime: {min: 2s, max: 14s}}\n";
    apply(&scoped_nodepool(&scope, &scope, 2, "10.218.0.0/16", 24, 110, knobs));
    wait_ready_nodes(&client, &scope, 2, T).await;
    let n = &ns.name;
    let fails = |code: &str| {
        format!(
            "pod-container-failed.stage.kwok.x-k8s.io/name: work, pod-container-failed.stage.kwok.x-k8s.io/exit-code: \"{code}\", pod-container-failed.stage.kwok.x-k8s.io/delay: 1s"
        )
    };
    // podFailurePolicy: exit code 42 fails the Job at once, whatever its backoffLimit.
    let policy = "  backoffLimit: 6\n  podFailurePolicy:\n    rules: [{action: FailJob, onExitCodes: {operator: In, values: [42]}}]\n";
    apply(&job("policy", n, &scope, policy, &fails("42")));
    // backoffLimit: exit 1 twice, and the Job is done trying.
    apply(&job("backoff", n, &scope, "  backoffLimit: 1\n", &fails("1")));
    // An indexed Job: each index runs the time the seed gives it.
    apply(&job("indexed", n, &scope, "  completionMode: Indexed\n  completions: 4\n  parallelism: 4\n", ""));

    let reason = wait_for("the policy Job to fail", T, || async {
        job_condition(n, "policy", "Failed")
            .ok_or_else(|| kubectl_ok(&["get", "job", "policy", "-n", n, "-o", "jsonpath={.status}"]))
    })
    .await;
    assert_eq!(reason, "PodFailurePolicy");
    let reason = wait_for("the backoff Job to fail", T, || async {
        job_condition(n, "backoff", "Failed")
            .ok_or_else(|| kubectl_ok(&["get", "job", "backoff", "-n", n, "-o", "jsonpath={.status}"]))
    })
    .await;
    assert_eq!(reason, "BackoffLimitExceeded");
    assert_eq!(kubectl_ok(&["get", "job", "backoff", "-n", n, "-o", "jsonpath={.status.failed}"]), "2");

    wait_for("the indexed Job to complete", T, || async {
        job_condition(n, "indexed", "Complete")
            .ok_or_else(|| kubectl_ok(&["get", "job", "indexed", "-n", n, "-o", "jsonpath={.status.succeeded}"]))
    })
    .await;
    let settings: PodLifecycle = serde_yaml::from_str("{jobRunTime: {min: 2s, max: 14s}}").unwrap();
    let pods = list_pods(&client, n, "batch.kubernetes.io/job-name=indexed").await;
    let mut by_index: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for p in &pods {
        let index: usize = p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX_LABEL].parse().unwrap();
        let want = index_run_time(&settings, 11, n, "indexed", index).as_secs_f64();
        by_index.insert(index, (ran(p), want));
    }
    assert_eq!(by_index.len(), 4, "{by_index:?}");
    for (index, (ran, want)) in &by_index {
        assert!(
            (ran - want).abs() <= 2.5,
            "index {index} ran {ran:.1}s; its seeded run time is {want:.1}s ({by_index:?})"
        );
    }
    let distinct: std::collections::BTreeSet<u64> = by_index.values().map(|(_, w)| (*w * 10.0) as u64).collect();
    assert!(distinct.len() >= 3, "indexes differ: {by_index:?}");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn flapping_readiness_takes_a_pod_out_of_its_services_endpoints_and_back() {
    let client = client().await;
    let scope = unique("probe");
    let ns = TestNamespace::new(&client, "probe").await;
    let _op = Operator::start(&scope, &[]);
    let knobs = "  lifecycle:\n    pods: {readiness: {every: 20s, notReadyFor: {fixed: 8s}}}\n";
    apply(&scoped_nodepool(&scope, &scope, 1, "10.219.0.0/16", 24, 110, knobs));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    // Labelled for the Service.
    let flappy = pod("flappy", n, &scope, &[("pools.kwok.x-k8s.io/readiness", "flap")], "Always", "")
        .replace("metadata: {name: flappy,", "metadata: {labels: {app: flappy}, name: flappy,");
    apply(&flappy);
    apply(&pod("steady", n, &scope, &[], "Always", ""));
    apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: flappy, namespace: {n}}}\nspec:\n  selector: {{app: flappy}}\n  ports: [{{port: 80}}]\n"
    ));
    wait_pod(&client, n, "flappy", "Running", |p| phase(p) == "Running").await;
    // Over two cycles: Ready goes False (and the endpoint with it) and comes back.
    let (mut went, mut back, mut endpoint_unready, mut endpoint_ready) = (false, false, false, false);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(50) && !(went && back && endpoint_unready && endpoint_ready) {
        let ready = pod_ready(&get(&client, n, "flappy").await);
        went |= !ready;
        back |= went && ready;
        let endpoints = kubectl_ok(&[
            "get",
            "endpointslices",
            "-n",
            n,
            "-l",
            "kubernetes.io/service-name=flappy",
            "-o",
            "jsonpath={.items[*].endpoints[*].conditions.ready}",
        ]);
        endpoint_unready |= endpoints.contains("false");
        endpoint_ready |= endpoint_unready && endpoints.contains("true");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(went && back, "Ready went False ({went}) and came back ({back})");
    assert!(
        endpoint_unready && endpoint_ready,
        "the endpoint went unready ({endpoint_unready}) and back ({endpoint_ready})"
    );
    let steady = get(&client, n, "steady").await;
    assert!(pod_ready(&steady), "a pod without the annotation (and no flapPercent) stays Ready");
    let restarts: i32 = statuses(&steady).iter().map(|c| c.restart_count).sum();
    assert_eq!(restarts, 0);
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn kubectl_debug_gets_a_running_ephemeral_container() {
    let client = client().await;
    let scope = unique("debug");
    let ns = TestNamespace::new(&client, "debug").await;
    let _op = Operator::start(&scope, &[]);
    apply(&scoped_nodepool(&scope, &scope, 1, "10.219.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    apply(&pod("target", n, &scope, &[], "Always", ""));
    wait_pod(&client, n, "target", "Running", |p| phase(p) == "Running").await;
    let ephemeral =
        |p: &Pod| p.status.as_ref().and_then(|s| s.ephemeral_container_statuses.clone()).unwrap_or_default();
    let running_since = |p: &Pod, name: &str| {
        ephemeral(p).into_iter().find(|c| c.name == name)?.state?.running?.started_at.map(|t| t.0)
    };
    kubectl_ok(&["debug", "target", "-n", n, "--image=busybox", "--container=dbg", "--", "sleep", "1d"]);
    let p = wait_pod(&client, n, "target", "the debug container running", |p| running_since(p, "dbg").is_some()).await;
    let first = running_since(&p, "dbg").unwrap();
    let dbg = ephemeral(&p).into_iter().find(|c| c.name == "dbg").unwrap();
    assert!(!dbg.ready, "an ephemeral container is never ready");
    assert_eq!(dbg.image, "busybox");
    assert!(dbg.container_id.unwrap_or_default().starts_with("containerd://"));
    assert_eq!(phase(&p), "Running");
    assert!(statuses(&p)[0].ready, "the pod's own container stays ready");
    // A second one: both run, the first keeps its start.
    kubectl_ok(&["debug", "target", "-n", n, "--image=busybox", "--container=dbg2", "--", "sleep", "1d"]);
    let p =
        wait_pod(&client, n, "target", "both debug containers running", |p| running_since(p, "dbg2").is_some()).await;
    assert_eq!(running_since(&p, "dbg"), Some(first), "the first debug container keeps its start");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn an_in_place_resize_is_answered_as_the_kubelet_answers_it() {
    let client = client().await;
    let scope = unique("resize");
    let ns = TestNamespace::new(&client, "resize").await;
    let _op = Operator::start(&scope, &[]);
    // One node of 4 CPUs.
    apply(&format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: NodePool
metadata:
  name: {scope}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  nodeCount: 1
  podCIDR: {{cidr: 10.221.0.0/16, maskSize: 24}}
  nodeTemplate:
    metadata:
      labels: {{{SCOPE_LABEL}: {scope}}}
    status:
      capacity: {{cpu: 4, memory: 16Gi, pods: 110}}
"
    ));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let with_cpu = |name: &str, cpu: &str| {
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {n}}}
spec:
  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers:
  - name: app
    image: nginx
    resources: {{requests: {{cpu: {cpu}, memory: 64Mi}}}}
"
        )
    };
    apply(&with_cpu("grows", "1"));
    apply(&with_cpu("neighbour", "2"));
    for name in ["grows", "neighbour"] {
        wait_pod(&client, n, name, "Running", |p| phase(p) == "Running").await;
    }
    let resize = |cpu: &str| {
        let patch =
            format!(r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{cpu}"}}}}}}]}}}}"#);
        kubectl_ok(&["patch", "pod", "grows", "-n", n, "--subresource", "resize", "--patch", &patch]);
    };
    let given = |p: &Pod| -> Option<String> {
        let c = statuses(p).into_iter().next()?;
        let allocated = c.allocated_resources?.get("cpu")?.0.clone();
        let actual = c.resources?.requests?.get("cpu")?.0.clone();
        (allocated == actual).then_some(allocated)
    };
    let pending = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodResizePending")
    };
    let observed = |p: &Pod| p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation;

    // Room for it: done, and the status says so.
    resize("1500m");
    let p = wait_pod(&client, n, "grows", "the resize to 1500m done", |p| {
        given(p).as_deref() == Some("1500m") && observed(p)
    })
    .await;
    assert!(pending(&p).is_none());
    assert_eq!(phase(&p), "Running");
    assert!(statuses(&p)[0].ready, "still ready");

    // No room beside the neighbour's 2 CPUs: Deferred with the kubelet's message, nothing given.
    resize("3");
    let p = wait_pod(&client, n, "grows", "the resize to 3 Deferred", |p| pending(p).is_some() && observed(p)).await;
    let c = pending(&p).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("Deferred")));
    assert_eq!(
        c.message.as_deref(),
        Some("Node didn't have enough resource: cpu, requested: 3000, used: 2000, capacity: 4000")
    );
    assert_eq!(given(&p).as_deref(), Some("1500m"), "it keeps what it was given");
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        n,
        "--field-selector",
        "involvedObject.name=grows",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("ResizeDeferred") && events.contains("ResizeCompleted"), "{events}");

    // Room comes free: the deferred resize goes through.
    kubectl_ok(&["delete", "pod", "neighbour", "-n", n, "--wait=false"]);
    let p = wait_pod(&client, n, "grows", "the deferred resize done once the neighbour left", |p| {
        given(p).as_deref() == Some("3") && pending(p).is_none()
    })
    .await;
    assert_eq!(phase(&p), "Running");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn a_container_over_its_memory_limit_is_oom_killed_and_restarted() {
    let client = client().await;
    let scope = unique("oomuse");
    let ns = TestNamespace::new(&client, "oomuse").await;
    let _op = Operator::start(&scope, &[]);
    // The pool says each container uses 96Mi and is OOM-killed 2s after it starts running.
    let knobs = "  lifecycle:\n    pods: {usage: {memory: {fixed: 96Mi}}, crashAfter: {fixed: 2s}}\n";
    apply(&scoped_nodepool(&scope, &scope, 1, "10.223.0.0/16", 24, 110, knobs));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let limited = |limit: &str| {
        format!("  containers: [{{name: app, image: nginx, resources: {{limits: {{memory: {limit}}}}}}}]\n")
    };
    let with_limit = |name: &str, limit: &str, annotations: &[(&str, &str)]| {
        pod(name, n, &scope, annotations, "Always", "")
            .replace("  containers: [{name: app, image: nginx}]\n", &limited(limit))
    };
    apply(&with_limit("over", "64Mi", &[]));
    apply(&with_limit("under", "128Mi", &[]));
    // kwok's usage annotation on the pod counts as well.
    apply(&with_limit("own-use", "128Mi", &[("kwok.x-k8s.io/usage-memory", "200Mi")]));
    for name in ["over", "own-use"] {
        let p = wait_pod(&client, n, name, "OOM-killed and restarted", |p| {
            statuses(p).first().is_some_and(|c| {
                c.restart_count >= 1
                    && c.last_state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref())
                        .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"))
            })
        })
        .await;
        let last = statuses(&p)[0].last_state.clone().unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 137, "{name}");
    }
    let under = get(&client, n, "under").await;
    assert_eq!(phase(&under), "Running");
    assert_eq!(statuses(&under)[0].restart_count, 0, "under its limit it runs on");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn kubectl_describe_shows_the_kubelets_events() {
    let client = client().await;
    let scope = unique("kevents");
    let ns = TestNamespace::new(&client, "kevents").await;
    let _op = Operator::start(&scope, &[]);
    // One pool sends the kubelet's Normal events, the other only its Warnings (the default).
    let (loud, quiet) = (format!("{scope}-loud"), format!("{scope}-quiet"));
    apply(&scoped_nodepool(
        &loud,
        &scope,
        1,
        "10.223.0.0/16",
        24,
        110,
        "  lifecycle:\n    pods: {normalEvents: true}\n",
    ));
    apply(&scoped_nodepool(&quiet, &scope, 1, "10.224.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &loud, 1, T).await;
    wait_ready_nodes(&client, &quiet, 1, T).await;
    let n = &ns.name;
    let on = |node: &str| format!("  nodeName: {node}-0\n");
    let crash = [
        ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
        ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "2"),
        ("pod-container-failed.stage.kwok.x-k8s.io/delay", "1s"),
    ];
    apply(&pod("calm", n, &scope, &[], "Always", &on(&loud)));
    apply(&pod("crashing", n, &scope, &crash, "Always", &on(&loud)));
    apply(&pod("quiet-calm", n, &scope, &[], "Always", &on(&quiet)));
    apply(&pod("quiet-crashing", n, &scope, &crash, "Always", &on(&quiet)));
    let describe = |name: &str| kubectl_ok(&["describe", "pod", name, "-n", n]);
    let shows = |name: &'static str, wanted: &'static [&'static str]| {
        let describe = &describe;
        async move {
            wait_for(&format!("kubectl describe pod {name} to show {wanted:?}"), T, || async {
                let out = describe(name);
                if wanted.iter().all(|w| out.contains(w)) {
                    Ok(out)
                } else {
                    Err(out.lines().rev().take(6).collect::<Vec<_>>().join(" | "))
                }
            })
            .await
        }
    };
    let calm =
        shows("calm", &["Pulled", "Created", "Started", "Container image \"nginx\" already present on machine"]).await;
    assert!(!calm.contains("Warning"), "a calm pod has no Warning: {calm}");
    let crashing =
        shows("crashing", &["Started", "BackOff", "Back-off restarting failed container app in pod crashing_"]).await;
    assert!(crashing.contains("Warning"), "{crashing}");
    // Without normalEvents: the BackOff Warning, no Normal event.
    let quiet = shows("quiet-crashing", &["BackOff"]).await;
    assert!(!quiet.contains("Container started"), "no Normal events by default: {quiet}");
    wait_pod(&client, n, "quiet-calm", "Running", |p| phase(p) == "Running").await;
    let quiet_calm = describe("quiet-calm");
    assert!(!quiet_calm.contains("already present") && !quiet_calm.contains("Container started"), "{quiet_calm}");
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container_with_the_kubelets_events() {
    let client = client().await;
    let scope = unique("liveness");
    let ns = TestNamespace::new(&client, "liveness").await;
    let _op = Operator::start(&scope, &[]);
    // Every probed pod's liveness probe fails a second after each start.
    apply(&scoped_nodepool(
        &scope,
        &scope,
        1,
        "10.227.0.0/16",
        24,
        110,
        "  lifecycle:\n    pods: {livenessFailPercent: 100, crashAfter: {fixed: 1s}}\n",
    ));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let probe = "livenessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2, failureThreshold: 2}";
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: probed, namespace: {n}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n  containers: [{{name: sidecar, image: envoy}}, {{name: web, image: nginx, {probe}}}]\n"
    ));
    apply(&pod("unprobed", n, &scope, &[], "Always", ""));
    let t0 = std::time::Instant::now();
    let p = wait_pod(&client, n, "probed", "its probed container restarted", |p| {
        statuses(p).iter().any(|c| c.name == "web" && c.restart_count >= 1)
    })
    .await;
    // Failing from 1s, killed after 2 failed probes 2s apart: not before about 4s.
    assert!(t0.elapsed() >= Duration::from_secs(4), "killed after {:?}", t0.elapsed());
    let web = statuses(&p).into_iter().find(|c| c.name == "web").unwrap();
    let last = web.last_state.and_then(|s| s.terminated).expect("the killed container's last state");
    assert_eq!((last.exit_code, last.reason.as_deref()), (143, Some("Error")));
    let sidecar = statuses(&p).into_iter().find(|c| c.name == "sidecar").unwrap();
    assert_eq!(sidecar.restart_count, 0, "only the probed container is killed");
    let described = wait_for("kubectl describe pod probed to show the liveness events", T, || async {
        let out = kubectl_ok(&["describe", "pod", "probed", "-n", n]);
        let wanted = ["Liveness probe failed:", "Container web failed liveness probe, will be restarted"];
        if wanted.iter().all(|w| out.contains(w)) {
            Ok(out)
        } else {
            Err(out.lines().rev().take(6).collect::<Vec<_>>().join(" | "))
        }
    })
    .await;
    assert!(described.contains("Unhealthy") && described.contains("Killing"), "{described}");
    let unprobed = get(&client, n, "unprobed").await;
    assert_eq!((phase(&unprobed), statuses(&unprobed)[0].restart_count), ("Running".into(), 0), "no probe, no kill");
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}

#[tokio::test]
async fn init_containers_run_one_by_one_as_kubectl_shows_them() {
    let client = client().await;
    let scope = unique("inits");
    let ns = TestNamespace::new(&client, "inits").await;
    let _op = Operator::start(&scope, &[]);
    apply(&scoped_nodepool(
        &scope,
        &scope,
        1,
        "10.228.0.0/16",
        24,
        110,
        "  lifecycle:\n    pods: {initRunTime: {fixed: 3s}}\n",
    ));
    wait_ready_nodes(&client, &scope, 1, T).await;
    let n = &ns.name;
    let inits = "  initContainers: [{name: migrate, image: flyway}, {name: warm, image: redis}]\n";
    let t0 = std::time::Instant::now();
    apply(&pod("staged", n, &scope, &[], "Always", inits));
    // kubectl's STATUS column as the pod goes: Init:0/2, Init:1/2, then Running.
    let mut seen: Vec<String> = Vec::new();
    wait_for("pod staged Running after its init containers", T, || {
        let status = kubectl_ok(&["get", "pod", "staged", "-n", n, "--no-headers"])
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string();
        if seen.last() != Some(&status) {
            seen.push(status.clone());
        }
        let s = seen.join(" → ");
        async move { if status == "Running" { Ok(()) } else { Err(s) } }
    })
    .await;
    assert!(t0.elapsed() >= Duration::from_secs(6), "two init containers of 3 s each: {:?}", t0.elapsed());
    let order: Vec<&str> =
        seen.iter().map(String::as_str).filter(|s| s.starts_with("Init:") || *s == "Running").collect();
    assert!(
        order.windows(2).any(|w| w == ["Init:0/2", "Init:1/2"]) && order.last() == Some(&"Running"),
        "kubectl showed {seen:?}"
    );
    let p = get(&client, n, "staged").await;
    let init = p.status.unwrap().init_container_statuses.unwrap();
    for c in &init {
        let t = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
        let ran = t.finished_at.as_ref().unwrap().0.as_second() - t.started_at.as_ref().unwrap().0.as_second();
        assert!((2..=4).contains(&ran), "{} ran {ran}s", c.name);
    }
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
