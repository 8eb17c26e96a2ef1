//! The local control plane: `kwok-pools cluster create|delete|list|kubeconfig` against real
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `kwok-pools cluster <args>` with its own state home.
fn cluster_cmd(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(kwok_pools_bin())
        .arg("cluster")
        .args(args)
        .env("KWOK_POOLS_HOME", home)
        .env("KWOK_POOLS_BIN_DIR", repo().join("bin"))
        .output()
        .expect("running kwok-pools cluster")
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn pids(dir: &Path) -> Vec<i32> {
    let run = dir.join("run");
    std::fs::read_dir(&run)
        .map(|it| {
            it.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter_map(|s| s.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn alive(pid: i32) -> bool {
    kwok_pools::cluster::process::is_alive(pid)
}

fn kubectl_for(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(kubectl_bin()).args(args).env("KUBECONFIG", kubeconfig).output().unwrap()
}

struct Home(tempfile::TempDir);

impl Home {
    fn new() -> Self {
        Home(tempfile::tempdir().unwrap())
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn cluster_dir(&self, name: &str) -> PathBuf {
        self.path().join("clusters").join(name)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // Never leave processes behind, whatever the test did.
        if let Ok(entries) = std::fs::read_dir(self.path().join("clusters")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let _ = cluster_cmd(self.path(), &["delete", "--name", &name]);
            }
        }
    }
}

#[tokio::test]
async fn create_use_and_delete_a_cluster() {
    let home = Home::new();
    let out = cluster_cmd(home.path(), &["create", "--name", "one"]);
    assert!(out.status.success(), "create failed:\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kubeconfig = home.cluster_dir("one").join("kubeconfig");
    assert!(stdout.contains(&format!("export KUBECONFIG={}", kubeconfig.display())), "{stdout}");

    // `cluster kubeconfig` prints the same path.
    let out = cluster_cmd(home.path(), &["kubeconfig", "--name", "one"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), kubeconfig.display().to_string());

    let ready = kubectl_for(&kubeconfig, &["get", "--raw", "/readyz"]);
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok", "{}", text(&ready));
    let version = kubectl_for(&kubeconfig, &["version", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&version.stdout).unwrap();
    assert!(v["serverVersion"]["gitVersion"].as_str().unwrap().starts_with("v1.37."), "{v}");

    // kube-rs writes, kubectl reads.
    kwok_pools::telemetry::init_crypto();
    let client = kwok_pools::cluster::crds::client(&kubeconfig).await.unwrap();
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &Namespace { metadata: ObjectMeta { name: Some("e2e".into()), ..Default::default() }, ..Default::default() },
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "e2e");
    let cm = ConfigMap {
        metadata: ObjectMeta { name: Some("greeting".into()), ..Default::default() },
        data: Some([("hello".to_string(), "world".to_string())].into()),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let got = kubectl_for(&kubeconfig, &["get", "configmap", "greeting", "-n", "e2e", "-o", "jsonpath={.data.hello}"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout), "world", "{}", text(&got));

    // The CRDs were installed.
    let crds =
        kubectl_for(&kubeconfig, &["get", "crd", "nodepools.pools.kwok.x-k8s.io", "podpools.pools.kwok.x-k8s.io"]);
    assert!(crds.status.success(), "{}", text(&crds));

    let dir = home.cluster_dir("one");
    let started = pids(&dir);
    assert_eq!(started.len(), 4, "one pid per component");
    assert!(started.iter().all(|p| alive(*p)));
    let out = cluster_cmd(home.path(), &["delete", "--name", "one"]);
    assert!(out.status.success(), "delete failed:\n{}", text(&out));
    for pid in started {
        assert!(!alive(pid), "pid {pid} still runs after delete");
    }
    assert!(!dir.exists(), "state directory left behind");
}

#[tokio::test]
async fn two_clusters_run_side_by_side() {
    let home = Home::new();
    for name in ["left", "right"] {
        let out = cluster_cmd(home.path(), &["create", "--name", name, "--no-crds"]);
        assert!(out.status.success(), "create {name} failed:\n{}", text(&out));
    }
    let list = cluster_cmd(home.path(), &["list"]);
    let listing = String::from_utf8_lossy(&list.stdout).to_string();
    for name in ["left", "right"] {
        let line =
            listing.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} not listed:\n{listing}"));
        assert!(line.contains("running"), "{line}");
        let kc = home.cluster_dir(name).join("kubeconfig");
        let ready = kubectl_for(&kc, &["get", "--raw", "/readyz"]);
        assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok");
    }
    // Each cluster has its own data: a namespace made in one is absent in the other.
    let left = home.cluster_dir("left").join("kubeconfig");
    let right = home.cluster_dir("right").join("kubeconfig");
    assert!(kubectl_for(&left, &["create", "namespace", "only-left"]).status.success());
    assert!(!kubectl_for(&right, &["get", "namespace", "only-left"]).status.success());

    let left_pids = pids(&home.cluster_dir("left"));
    assert!(cluster_cmd(home.path(), &["delete", "--name", "left"]).status.success());
    assert!(left_pids.iter().all(|p| !alive(*p)));
    // Deleting one leaves the other running.
    let ready = kubectl_for(&right, &["get", "--raw", "/readyz"]);
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok");
    let listing = String::from_utf8_lossy(&cluster_cmd(home.path(), &["list"]).stdout).to_string();
    assert!(!listing.contains("left"), "{listing}");
}

#[test]
fn missing_binaries_say_to_run_make_controlplane() {
    let home = Home::new();
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(kwok_pools_bin())
        .args(["cluster", "create", "--name", "nobin"])
        .env("KWOK_POOLS_HOME", home.path())
        .env("KWOK_POOLS_BIN_DIR", empty.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("etcd not found"), "{msg}");
    assert!(msg.contains("make controlplane"), "{msg}");
    assert!(!home.cluster_dir("nobin").exists(), "no state is made when binaries are missing");
}

#[test]
fn a_name_in_use_is_refused() {
    let home = Home::new();
    let out = cluster_cmd(home.path(), &["create", "--name", "twice", "--no-crds"]);
    assert!(out.status.success(), "{}", text(&out));
    let pids_before = pids(&home.cluster_dir("twice"));
    let out = cluster_cmd(home.path(), &["create", "--name", "twice", "--no-crds"]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("already exists") && msg.contains("running"), "{msg}");
    assert!(msg.contains("cluster delete --name twice"), "{msg}");
    // The running cluster is untouched.
    assert!(pids_before.iter().all(|p| alive(*p)));
    let bad = cluster_cmd(home.path(), &["create", "--name", "Bad_Name"]);
    assert!(text(&bad).contains("invalid cluster name"), "{}", text(&bad));
}

#[test]
fn a_component_that_exits_at_start_is_named_with_its_log() {
    let home = Home::new();
    let out = cluster_cmd(
        home.path(),
        &["create", "--name", "broken", "--no-crds", "--extra-arg", "kube-scheduler=--no-such-flag"],
    );
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("kube-scheduler exited at start"), "{msg}");
    assert!(msg.contains("no-such-flag"), "the log tail is shown: {msg}");
    // What was started is stopped again.
    let left: Vec<i32> = pids(&home.cluster_dir("broken")).into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
}

#[test]
fn a_timeout_names_the_component_that_was_not_ready() {
    let home = Home::new();
    let out = cluster_cmd(home.path(), &["create", "--name", "slow", "--no-crds", "--timeout", "300ms"]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("was not ready after"), "{msg}");
    assert!(msg.contains("etcd") || msg.contains("kube-apiserver"), "{msg}");
    assert!(msg.contains("--timeout"), "says what to do: {msg}");
    let left: Vec<i32> = pids(&home.cluster_dir("slow")).into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "processes left running: {left:?}");
}

#[tokio::test]
async fn the_operator_rides_out_an_api_server_that_goes_away() {
    let home = Home::new();
    let out = cluster_cmd(home.path(), &["create", "--name", "bumpy"]);
    assert!(out.status.success(), "create failed:\n{}", text(&out));
    let kubeconfig = home.cluster_dir("bumpy").join("kubeconfig");
    let scope = unique("bumpy");
    let mut op = Operator::start_as(&scope, &[], kubeconfig.clone());
    op.wait_ready().await;
    let pool = format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {{name: bumpy, labels: {{{SCOPE_LABEL}: {scope}}}}}\nspec:\n  nodeCount: 2\n  nodeTemplate:\n    metadata: {{labels: {{{SCOPE_LABEL}: {scope}}}}}\n"
    );
    let path = home.path().join("pool.yaml");
    std::fs::write(&path, pool).unwrap();
    assert!(kubectl_for(&kubeconfig, &["apply", "-f", path.to_str().unwrap()]).status.success());
    let ready = |n: usize| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let what = format!("{n} Ready nodes");
            wait_for(&what, std::time::Duration::from_secs(90), || {
                let kubeconfig = kubeconfig.clone();
                async move {
                    let out = kubectl_for(
                        &kubeconfig,
                        &[
                            "get",
                            "nodes",
                            "-l",
                            "pools.kwok.x-k8s.io/pool=bumpy",
                            "-o",
                            "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
                        ],
                    );
                    let text = String::from_utf8_lossy(&out.stdout).to_string();
                    let ready = text.lines().filter(|l| *l == "True").count();
                    if ready == n && text.lines().count() == n {
                        Ok(())
                    } else {
                        Err(format!("{ready} Ready: {}", text.trim()))
                    }
                }
            })
            .await
        }
    };
    ready(2).await;

    // The API server dies; the operator keeps running and waits for it.
    let pid =
        kwok_pools::cluster::process::read_pid(&home.cluster_dir("bumpy").join("run/kube-apiserver.pid")).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert!(op.is_running(), "the operator exited when the API server went away:\n{}", op.log_tail());
    let listing = String::from_utf8_lossy(&cluster_cmd(home.path(), &["list"]).stdout).to_string();
    assert!(listing.contains("partial(3/4)"), "{listing}");

    // Back again (same ports, data and certificates): the operator carries on.
    let out = cluster_cmd(home.path(), &["start", "--name", "bumpy"]);
    assert!(out.status.success(), "start failed:\n{}", text(&out));
    assert!(text(&out).contains("etcd already runs"), "only the missing component is started: {}", text(&out));
    assert!(kubectl_for(&kubeconfig, &["scale", "nodepool", "bumpy", "--replicas", "3"]).status.success());
    ready(3).await;
    assert!(op.is_running());
    assert!(!std::fs::read_to_string(&op.log).unwrap_or_default().contains("panicked"));
    op.stop();
}
