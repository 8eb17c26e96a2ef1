//! kwok's stages and the policies imported from them, side by side on one cluster of this
//! test's own: kwok v0.8.0 (built by `make kwok`) runs its general pod stages and its fast
//! node stages on the nodes labelled `tool: kwok`; kwok-pools runs the policies `kwok-pools
//! stage import` writes from the same files on the nodes labelled `tool: pools`. The same
//! workload lands on each (a Deployment, a Job), and both must show the same phases and
//! conditions, with delays inside kwok's windows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kwok_pools_test_support::*;
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

/// Kills kwok when dropped.
struct Kwok(std::process::Child);

impl Drop for Kwok {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node(name: &str, tool: &str, scope: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  annotations: {{kwok.x-k8s.io/node: fake}}\n  labels: {{tool: {tool}, {SCOPE_LABEL}: {scope}-{tool}, type: kwok}}\nspec:\n  taints: [{{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}}]\nstatus:\n  allocatable: {{cpu: '32', memory: 256Gi, pods: '110'}}\n  capacity: {{cpu: '32', memory: 256Gi, pods: '110'}}\n"
    )
}

fn workload(tool: &str) -> String {
    let placement = format!(
        "      nodeSelector: {{tool: {tool}}}\n      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n      containers: [{{name: app, image: nginx}}]\n"
    );
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web-{tool}, namespace: default}}\nspec:\n  replicas: 4\n  selector: {{matchLabels: {{app: web-{tool}}}}}\n  template:\n    metadata: {{labels: {{app: web-{tool}}}}}\n    spec:\n{placement}---\napiVersion: batch/v1\nkind: Job\nmetadata: {{name: job-{tool}, namespace: default}}\nspec:\n  completions: 3\n  parallelism: 3\n  template:\n    metadata: {{labels: {{app: job-{tool}}}}}\n    spec:\n      restartPolicy: Never\n{placement}"
    )
}

fn condition_time(p: &Pod, type_: &str) -> Option<Timestamp> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_ && c.status == "True")?;
    c.last_transition_time.as_ref().map(|t| t.0)
}

fn secs(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()) as f64 / 1000.0
}

/// What one tool's pods showed: (start delays, run times of the Job's pods, condition types
/// of a running pod).
struct Seen {
    starts: Vec<f64>,
    runs: Vec<f64>,
    conditions: Vec<String>,
}

async fn observe(client: &kube::Client, tool: &str) -> Seen {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = wait_for(&format!("{tool}: the Deployment's pods Ready"), T, || async {
        let list =
            pods.list(&ListParams::default().labels(&format!("app=web-{tool}"))).await.map_err(|e| e.to_string())?;
        let ready: Vec<Pod> = list.items.into_iter().filter(|p| condition_time(p, "Ready").is_some()).collect();
        if ready.len() == 4 { Ok(ready) } else { Err(format!("{} Ready", ready.len())) }
    })
    .await;
    let jobs = wait_for(&format!("{tool}: the Job's pods Succeeded"), T, || async {
        let list =
            pods.list(&ListParams::default().labels(&format!("app=job-{tool}"))).await.map_err(|e| e.to_string())?;
        let done: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
            .collect();
        if done.len() >= 3 { Ok(done) } else { Err(format!("{} Succeeded", done.len())) }
    })
    .await;
    let starts = web
        .iter()
        .map(|p| secs(condition_time(p, "PodScheduled").unwrap(), condition_time(p, "Ready").unwrap()))
        .collect();
    let runs = jobs
        .iter()
        .filter_map(|p| {
            let s = p.status.as_ref()?;
            let end =
                s.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0;
            Some(secs(s.start_time.as_ref()?.0, end))
        })
        .collect();
    let mut conditions: Vec<String> = web[0]
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_.clone())
        .filter(|t| t != "PodReadyToStartContainers")
        .collect();
    conditions.sort();
    Seen { starts, runs, conditions }
}

#[tokio::test]
async fn kwoks_stages_and_their_imported_policies_behave_alike_side_by_side() {
    assert!(repo().join("bin/kwok").exists(), "bin/kwok: run `make kwok` (make test does)");
    let cluster = OwnCluster::create(&unique("parity"), &[]);
    let client = cluster.client().await;
    let kc = cluster.kubeconfig.clone();
    let stages = kwok_stages();
    let sets = [stages.join("pod/general"), stages.join("node/fast"), stages.join("node/heartbeat-with-lease")];

    // kwok with the stage files as its config, on the nodes labelled tool=kwok.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("stages.yaml");
    let mut text = String::new();
    for set in &sets {
        for f in std::fs::read_dir(set).unwrap().filter_map(Result::ok).map(|e| e.path()) {
            if f.extension().is_some_and(|e| e == "yaml") && f.file_name().is_some_and(|n| n != "kustomization.yaml") {
                text.push_str("---\n");
                text.push_str(&std::fs::read_to_string(&f).unwrap());
                text.push('\n');
            }
        }
    }
    std::fs::write(&config, text).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("kwok.log")).unwrap();
    let kwok = Kwok(
        Command::new(repo().join("bin/kwok"))
            .args([
                format!("--kubeconfig={}", kc.display()),
                format!("--config={}", config.display()),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-label-selector=tool=kwok".into(),
                "--node-lease-duration-seconds=40".into(),
                format!("--server-address=127.0.0.1:{port}"),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("bin/kwok"),
    );

    // kwok-pools with the policies imported from the same files, on the nodes labelled tool=pools.
    let scope = unique("parity");
    let mut op = Operator::start_as(&format!("{scope}-pools"), &[], kc.clone());
    op.wait_ready().await;
    let import = Command::new(kwok_pools_bin())
        .args(["stage", "import", "--allow-partial", "--prefix", "parity"])
        .args(&sets)
        .output()
        .unwrap();
    assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
    cluster.apply(&String::from_utf8(import.stdout).unwrap());

    for i in 0..2 {
        cluster.apply(&node(&format!("kwok-{i}"), "kwok", &scope));
        cluster.apply(&node(&format!("pools-{i}"), "pools", &scope));
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    wait_for("every node Ready, under either tool", T, || async {
        let list = nodes.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let ready = list.items.iter().filter(|n| kwok_pools::kubelet::status::node::is_ready(n)).count();
        if ready == 4 { Ok(()) } else { Err(format!("{ready} of 4 Ready")) }
    })
    .await;
    cluster.apply(&workload("kwok"));
    cluster.apply(&workload("pools"));
    let (kwok_seen, pools_seen) = (observe(&client, "kwok").await, observe(&client, "pools").await);
    eprintln!("  kwok:  starts {:?} runs {:?} conditions {:?}", kwok_seen.starts, kwok_seen.runs, kwok_seen.conditions);
    eprintln!(
        "  pools: starts {:?} runs {:?} conditions {:?}",
        pools_seen.starts, pools_seen.runs, pools_seen.conditions
    );
    assert_eq!(pools_seen.conditions, kwok_seen.conditions, "the same conditions True on a running pod");
    // kwok's general stages: created after 1–5 s, Ready 1–5 s later (pods without init
    // containers), a Job's pod Succeeded 1–5 s after it is Ready. A second of slack for the
    // watch and the timestamps' seconds.
    for (tool, seen) in [("kwok", &kwok_seen), ("pools", &pools_seen)] {
        for s in &seen.starts {
            assert!((1.0..=11.5).contains(s), "{tool}: a pod Ready {s}s after it was scheduled, outside kwok's 2–10 s");
        }
        for r in &seen.runs {
            assert!((0.0..=11.5).contains(r), "{tool}: a Job's pod ran {r}s, outside kwok's window");
        }
    }
    // Deleted pods go within the grace period under both (kwok: between 1 s and the deletion
    // timestamp; kwok-pools: 1 s).
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for tool in ["kwok", "pools"] {
        kubectl_env(&kc, &["delete", "deployment", &format!("web-{tool}"), "-n", "default", "--wait=false"]);
    }
    wait_for("the Deployments' pods gone under both tools", Duration::from_secs(60), || async {
        let left = pods
            .list(&ListParams::default().labels("app in (web-kwok, web-pools)"))
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() { Ok(()) } else { Err(format!("{} left", left.items.len())) }
    })
    .await;
    op.stop();
    drop(kwok);
}

fn kubectl_env(kubeconfig: &std::path::Path, args: &[&str]) {
    let out = Command::new(kubectl_bin()).args(args).env("KUBECONFIG", kubeconfig).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}
