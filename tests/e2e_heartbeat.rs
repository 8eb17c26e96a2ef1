//! A NodePool's own heartbeat (`spec.lifecycle.nodes.heartbeat`), end to end: its nodes'
//! Leases carry its lease duration and are renewed on its cadence, its status reports come at
//! its interval, a change reaches the existing Leases on their next renewal, the nodes stay
//! Ready throughout, and a value outside the range is refused with the field named. Under an
//! API server slowed on purpose the simulator's writes yield to the workload: renewals stretch,
//! and a deleted pod nothing keeps goes in two writes instead of three.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kwok_pools_test_support::pools::{
    is_ready, pool_nodes, scoped_nodepool, scoped_pod, scoped_podpool, wait_ready_nodes,
};
use kwok_pools_test_support::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

fn heartbeat(lease: u32, status: &str) -> String {
    format!(
        "  lifecycle:\n    nodes:\n      heartbeat: {{leaseDurationSeconds: {lease}, statusReportInterval: {status}}}\n"
    )
}

/// The leaseDurationSeconds of each of the pool's node Leases.
async fn durations(client: &kube::Client, pool: &str, n: usize) -> Vec<i32> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut out = Vec::new();
    for i in 0..n {
        let lease = api.get_opt(&format!("{pool}-{i}")).await.ok().flatten();
        out.push(lease.and_then(|l| l.spec).and_then(|s| s.lease_duration_seconds).unwrap_or(0));
    }
    out
}

/// The Ready condition's lastHeartbeatTime of node `name`.
async fn heartbeat_time(client: &kube::Client, name: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(name).await.ok()?;
    let ready = node.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
    ready.last_heartbeat_time.map(|t| t.0.to_string())
}

#[tokio::test]
async fn a_pools_heartbeat_sets_its_leases_and_status_reports_and_keeps_its_nodes_ready() {
    let client = client().await;
    let scope = unique("beat");
    let (own, plain) = (format!("{scope}-own"), format!("{scope}-plain"));
    let _op = Operator::start(&scope, &[]);
    apply(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(16, "2s")));
    apply(&scoped_nodepool(&plain, &scope, 2, "10.233.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &own, 2, T).await;
    wait_ready_nodes(&client, &plain, 2, T).await;

    // Its Leases carry its duration; the other pool's, the operator's (20 s in these tests).
    wait_for("the pools' lease durations", T, || async {
        let (a, b) = (durations(&client, &own, 2).await, durations(&client, &plain, 2).await);
        if a == [16, 16] && b == [20, 20] { Ok(()) } else { Err(format!("{a:?} {b:?}")) }
    })
    .await;

    // Its status reports every 2 s: the Ready condition's heartbeat time moves several times
    // in 10 s, with nothing else changing.
    let node = format!("{own}-0");
    let mut seen = HashSet::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(t) = heartbeat_time(&client, &node).await {
            seen.insert(t);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(seen.len() >= 3, "status reports in 10 s: {seen:?}");

    // A change reaches the existing Leases on their next renewal.
    apply(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(12, "30s")));
    wait_for("the new lease duration on the existing Leases", T, || async {
        let a = durations(&client, &own, 2).await;
        if a == [12, 12] { Ok(()) } else { Err(format!("{a:?}")) }
    })
    .await;
    // Ready all along, for a whole grace period: the controller manager never saw a lease lapse.
    let start = Instant::now();
    while start.elapsed() < node_grace_period() {
        for pool in [&own, &plain] {
            let nodes = pool_nodes(&client, pool).await;
            let ready = nodes.iter().filter(|n| is_ready(n)).count();
            assert_eq!(ready, 2, "{pool}: {ready} of 2 Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Out of range: refused, the field named.
    let out = kubectl_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&scoped_nodepool(&own, &scope, 2, "10.232.0.0/16", 24, 110, &heartbeat(5, "30s"))),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("leaseDurationSeconds"), "{err}");
    kubectl_ok(&["delete", "nodepool", &own, &plain, "--wait=false"]);
}

/// What the recorder saw: each node's distinct lease renew times (seconds since the epoch,
/// with when the test saw them), and every node seen NotReady after it was first Ready.
#[derive(Default)]
struct Seen {
    renewals: std::collections::HashMap<String, Vec<(f64, Instant)>>,
    not_ready: HashSet<String>,
}

/// Polls the pool's Leases and Nodes twice a second until aborted.
fn record(client: kube::Client, pool: String, n: usize) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        loop {
            for i in 0..n {
                let name = format!("{pool}-{i}");
                let renew = leases.get_opt(&name).await.ok().flatten().and_then(|l| l.spec?.renew_time);
                if let Some(t) = renew {
                    let secs = t.0.as_millisecond() as f64 / 1000.0;
                    let mut s = out.lock().unwrap();
                    let list = s.renewals.entry(name).or_default();
                    if list.last().is_none_or(|(last, _)| *last != secs) {
                        list.push((secs, Instant::now()));
                    }
                }
            }
            for node in pool_nodes(&client, &pool).await {
                if !is_ready(&node) {
                    out.lock().unwrap().not_ready.insert(node.metadata.name.clone().unwrap_or_default());
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    (seen, task)
}

/// The gaps between successive renewals whose later one the test saw within `from..to`.
fn gaps(seen: &Seen, from: Instant, to: Instant) -> Vec<f64> {
    let mut out = Vec::new();
    for list in seen.renewals.values() {
        for w in list.windows(2) {
            if w[1].1 >= from && w[1].1 <= to {
                out.push(w[1].0 - w[0].0);
            }
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

fn median(v: &[f64]) -> f64 {
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// An API server slowed on purpose (every request 300 ms longer, through a proxy) while a
/// PodPool's pods flood the simulator's writes: lease renewals stretch past the kubelet's
/// cadence (the workload gets the writes), no node goes NotReady, and once the API server
/// has room again renewals come back to the cadence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_yield_to_a_saturated_api_server_and_no_node_goes_not_ready() {
    let client = client().await;
    let scope = unique("yield");
    let (pool, app) = (format!("{scope}-np"), format!("{scope}-app"));
    let ns = TestNamespace::new(&client, "yield").await;
    let proxy =
        kwok_pools_test_support::proxy::Proxy::start(kwok_pools_test_support::proxy::api_server(&kubeconfig())).await;
    let dir = tempfile::tempdir().unwrap();
    let via_proxy = proxy.kubeconfig(&kubeconfig(), dir.path());
    // A small write budget (3 places for pod writes, 1 kept for heartbeats), one replica.
    let flags = ["--no-shard", "--max-simulator-writes-in-flight", "4", "--no-webhook"];
    let mut op = Operator::start_as(&scope, &flags, via_proxy);
    op.wait_ready().await;
    // Leases as long as the cluster's grace period: the kubelet renews every quarter of it.
    let lease_secs = node_grace_period().as_secs() as u32;
    let cadence = f64::from(lease_secs) / 4.0;
    let nodes = 8;
    apply(&scoped_nodepool(&pool, &scope, nodes, "10.234.0.0/16", 24, 110, &heartbeat(lease_secs, "5m")));
    wait_ready_nodes(&client, &pool, nodes as usize, T).await;
    let (seen, recorder) = record(client.clone(), pool.clone(), nodes as usize);

    // With room: the kubelet's cadence.
    let calm = Instant::now();
    tokio::time::sleep(Duration::from_secs(4 * lease_secs as u64 / 4 + 2)).await;
    let before = gaps(&seen.lock().unwrap(), calm, Instant::now());
    assert!(!before.is_empty() && median(&before) <= cadence * 1.15, "gaps with room: {before:?}");

    // Slowed, and 500 pods to run: the simulator's pod writes queue behind it.
    proxy.slow_down(Duration::from_millis(150));
    let busy = Instant::now();
    apply(&scoped_podpool(&app, &ns.name, &scope, 500, "", "      containers: [{name: c, image: nginx}]\n"));
    let running = wait_for("500 pods Running through the slowed API server", Duration::from_secs(300), || async {
        let pods = kwok_pools_test_support::pools::list_pods(&client, &ns.name, &format!("app={app}")).await;
        let n = pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
        if n >= 500 { Ok(Instant::now()) } else { Err(format!("{n}/500 Running")) }
    })
    .await;
    let during = gaps(&seen.lock().unwrap(), busy + Duration::from_secs(5), running);
    let deferred = op.metric("kwok_pools_simulator_deferred_lease_renewals_total").await;
    eprintln!(
        "  renewal gaps (cadence {cadence} s): with room median {:.1} s, under load median {:.1} s (longest {:.1} s), {deferred} renewals put off",
        median(&before),
        median(&during),
        during.last().copied().unwrap_or(0.0)
    );
    assert!(deferred > 0.0, "renewals put off: {deferred}");
    assert!(median(&during) >= cadence * 1.5, "stretched gaps under load: {during:?} (cadence {cadence} s)");
    // Never past the share the monitor period and the margin leave (a renewal the controller
    // manager would take for a lapse).
    let longest = during.last().copied().unwrap_or(0.0);
    assert!(longest < f64::from(lease_secs) * 0.8, "longest gap {longest} s of a {lease_secs} s lease");

    // Room again: back to the cadence.
    proxy.slow_down(Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(lease_secs as u64 / 2)).await;
    let calm_again = Instant::now();
    tokio::time::sleep(Duration::from_secs(lease_secs as u64 + 2)).await;
    let after = gaps(&seen.lock().unwrap(), calm_again, Instant::now());
    assert!(!after.is_empty() && median(&after) <= cadence * 1.15, "gaps with room again: {after:?}");

    recorder.abort();
    let not_ready = seen.lock().unwrap().not_ready.clone();
    assert!(not_ready.is_empty(), "nodes seen NotReady: {not_ready:?}");
    assert_eq!(pool_nodes(&client, &pool).await.iter().filter(|n| is_ready(n)).count(), nodes as usize);
    kubectl_ok(&["delete", "podpool", &app, "-n", &ns.name, "--wait=false"]);
    kubectl_ok(&["delete", "nodepool", &pool, "--wait=false"]);
}

/// Watches the namespace's pods: for each pod deleted, whether a version with phase Failed was
/// seen before it went.
type Endings = Arc<Mutex<Vec<(String, bool)>>>;

fn record_endings(client: kube::Client, ns: &str) -> (Endings, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::{self, Event};
    let ended = Arc::new(Mutex::new(Vec::new()));
    let out = ended.clone();
    let api: Api<Pod> = Api::namespaced(client, ns);
    let task = tokio::spawn(async move {
        let mut failed = HashSet::new();
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let failed_now = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
            match event {
                Ok(Event::Apply(p) | Event::InitApply(p)) if failed_now(&p) => {
                    failed.insert(p.metadata.name.clone().unwrap_or_default());
                }
                Ok(Event::Delete(p)) => {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let seen = failed.remove(&name) || failed_now(&p);
                    out.lock().unwrap().push((name, seen));
                }
                _ => {}
            }
        }
    });
    (ended, task)
}

/// The operator's count of deleted pods removed without their terminal status.
async fn skipped(op: &Operator) -> f64 {
    let series = "kwok_pools_simulator_pod_transitions_total{result=\"terminal-status-skipped\"}";
    let text = op.metrics().await;
    text.lines().filter_map(|l| l.strip_prefix(series)).filter_map(|v| v.trim().parse::<f64>().ok()).sum()
}

/// `count` bare pods labelled `group=<scope>` and a Job `kept` of one pod (its pod replaced
/// only once Failed) on the scope's nodes.
fn apply_pods_and_a_job(n: &str, scope: &str, count: usize) {
    let pods: Vec<String> = (0..count)
        .map(|i| {
            scoped_pod(&format!("p-{i}"), n, scope, "").replacen(
                &format!("namespace: {n}}}"),
                &format!("namespace: {n}, labels: {{group: {scope}}}}}"),
                1,
            )
        })
        .collect();
    apply(&pods.join("---\n"));
    apply(&format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: kept, namespace: {n}}}
spec:
  backoffLimit: 3
  podReplacementPolicy: Failed
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: work, image: busybox}}]
"
    ));
}

/// With room, a deleted pod gets its terminal status (phase Failed) before the final delete,
/// as the kubelet writes it. With the API server slowed and a burst of deletes queueing the
/// simulator's writes, pods that nothing keeps go straight to the final delete (the operator
/// counts each), while a Job's pod — its tracking finalizer keeps it — still ends Failed and
/// is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_pods_skip_their_terminal_status_only_under_pressure_and_never_a_jobs_pod() {
    let client = client().await;
    let scope = unique("ends");
    let ns = TestNamespace::new(&client, "ends").await;
    let proxy =
        kwok_pools_test_support::proxy::Proxy::start(kwok_pools_test_support::proxy::api_server(&kubeconfig())).await;
    let dir = tempfile::tempdir().unwrap();
    let via_proxy = proxy.kubeconfig(&kubeconfig(), dir.path());
    // Two places in the write budget: one for pod writes, one kept for heartbeats.
    let flags = ["--no-shard", "--max-simulator-writes-in-flight", "2", "--no-webhook", "--job-run-time", "10m"];
    let mut op = Operator::start_as(&scope, &flags, via_proxy);
    op.wait_ready().await;
    apply(&scoped_nodepool(&scope, &scope, 2, "10.235.0.0/16", 24, 110, ""));
    wait_ready_nodes(&client, &scope, 2, T).await;
    let n = &ns.name;
    let (count, plain) = (80, format!("group={scope}"));
    apply_pods_and_a_job(n, &scope, count);
    let running = |selector: String, want: usize| {
        let client = client.clone();
        async move {
            wait_for(&format!("{want} pods Running ({selector})"), T, || async {
                let ps = kwok_pools_test_support::pools::list_pods(&client, n, &selector).await;
                let live: Vec<_> = ps.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
                let up = live.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
                if up.count() == want { Ok(live) } else { Err(format!("{} pods", live.len())) }
            })
            .await
        }
    };
    running(plain.clone(), count).await;
    let job_pod = running("batch.kubernetes.io/job-name=kept".into(), 1).await.remove(0);
    let (endings, watch) = record_endings(client.clone(), n);
    tokio::time::sleep(Duration::from_millis(500)).await; // the watch is established

    // With room (one pod at a time: the budget has one place for pod writes): each Failed
    // before it goes, nothing skipped.
    for (i, name) in ["p-0", "p-1"].into_iter().enumerate() {
        kubectl_ok(&["delete", "pod", name, "-n", n, "--wait=false"]);
        wait_for(&format!("{name} gone"), T, || async {
            let e = endings.lock().unwrap().clone();
            if e.len() > i { Ok(()) } else { Err(format!("{e:?}")) }
        })
        .await;
    }
    assert!(endings.lock().unwrap().iter().all(|(_, failed)| *failed), "with room: {:?}", endings.lock().unwrap());
    assert_eq!(skipped(&op).await, 0.0, "nothing skipped with room");

    // Slowed, and the rest deleted at once with the Job's pod among them.
    proxy.slow_down(Duration::from_millis(200));
    let job_pod_name = job_pod.metadata.name.clone().unwrap();
    kubectl_ok(&["delete", "pod", &job_pod_name, "-n", n, "--wait=false"]);
    kubectl_ok(&["delete", "pods", "-l", &plain, "-n", n, "--wait=false"]);
    let all = count + 1;
    wait_for("every deleted pod gone through the slowed API server", Duration::from_secs(300), || async {
        let e = endings.lock().unwrap().len();
        if e >= all { Ok(()) } else { Err(format!("{e}/{all} gone")) }
    })
    .await;
    proxy.slow_down(Duration::ZERO);
    watch.abort();
    let e = endings.lock().unwrap().clone();
    let job_failed = e.iter().find(|(name, _)| *name == job_pod_name).map(|(_, f)| *f);
    assert_eq!(job_failed, Some(true), "a Job's pod ends Failed before it goes: {e:?}");
    let without: usize = e.iter().filter(|(name, failed)| !failed && name.starts_with("p-")).count();
    let counted = skipped(&op).await;
    eprintln!("  {count} pods deleted under pressure: {without} without a terminal status, {counted} counted");
    assert!(without > 0, "under pressure some pods go straight to the final delete: {e:?}");
    assert_eq!(without as f64, counted, "each pod without its terminal status is counted");
    // The Job replaces its pod: it counted the Failed one.
    wait_for("the Job to count the deleted pod as failed", T, || async {
        let failed = kubectl_ok(&["get", "job", "kept", "-n", n, "-o", "jsonpath={.status.failed}"]);
        if failed == "1" { Ok(()) } else { Err(format!("failed={failed:?}")) }
    })
    .await;
    kubectl_ok(&["delete", "nodepool", &scope, "--wait=false"]);
}
