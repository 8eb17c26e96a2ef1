//! Every command on the README's front page, run as a reader runs it: the install commands
//! (a local cluster of its own with `kwok-pools run`; the three in-cluster paths as server-side
//! dry runs), then the five-minute tour against the default instance, as `make run` leaves it.
//! A command this test does not know fails it: a new command on the page comes with its run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support::*;
use std::process::{Command, Output};
use std::time::Duration;

/// The commands of the README's `sh` blocks, by section, comments dropped and continued lines
/// joined.
fn readme_commands() -> Vec<(String, String)> {
    let text = read_repo_file("README.md");
    let (mut out, mut section, mut in_sh, mut pending) = (Vec::new(), String::new(), false, String::new());
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            if let Some(title) = line.strip_prefix("## ") {
                section = title.to_string();
            }
            continue;
        }
        let code = line.split(" #").next().unwrap_or_default().trim();
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head.trim());
            pending.push(' ');
            continue;
        }
        out.push((section.clone(), format!("{pending}{code}")));
        pending.clear();
    }
    out
}

fn words(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_string).collect()
}

fn shown(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `kwok-pools …` as installed (the build under test), against `kubeconfig`.
fn kwok_pools(args: &[String], kubeconfig: &std::path::Path, home: &std::path::Path) -> Output {
    Command::new(kwok_pools_bin())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KWOK_POOLS_HOME", home)
        .env("KWOK_POOLS_BIN_DIR", repo().join("bin"))
        .output()
        .unwrap()
}

fn helm(args: &[String], kubeconfig: &std::path::Path) -> Output {
    Command::new(repo().join("bin/helm")).args(args).env("KUBECONFIG", kubeconfig).output().unwrap()
}

/// kubectl against `kubeconfig`, with `stdin`.
fn kubectl_at(kubeconfig: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(kubectl_bin())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Runs `command` until it succeeds (a reader waits for pods and metrics too) and returns
/// its output.
async fn eventually(command: &str, run: impl Fn() -> Output) -> String {
    wait_for(command, Duration::from_secs(120), || async {
        let o = run();
        if o.status.success() { Ok(shown(&o)) } else { Err(shown(&o)) }
    })
    .await
}

/// The install commands on a cluster of their own, as a reader with a new cluster runs them:
/// the local path for real; then (its operator stopped: the paths are alternatives) the three
/// in-cluster paths as server-side dry runs.
/// Runs the README's install commands (on a local cluster of their own; the in-cluster paths
/// as server-side dry runs), and its uninstall commands where a user would: `kwok-pools
/// uninstall` once `kwok-pools run` has registered its webhook and policy, before the
/// in-cluster paths.
async fn install(commands: &[String], uninstall: &[String]) {
    let home = tempfile::tempdir().unwrap();
    let mut demo_kubeconfig = None;
    let mut demo_operator: Option<std::process::Child> = None;
    for command in commands {
        let w = words(command);
        let ok = |o: Output| assert!(o.status.success(), "{command}: {}", shown(&o));
        match w[0].as_str() {
            "make" if w[1] == "install" => {} // cargo install: run by hand, see the issue note
            "kwok-pools" if w[1] == "cluster" && w[2] == "create" => {
                let o = kwok_pools(&w[1..], &kubeconfig(), home.path());
                ok(o);
            }
            "export" => {
                // export KUBECONFIG=$(kwok-pools cluster kubeconfig --name demo)
                let inner = command.split("$(").nth(1).unwrap().trim_end_matches(')');
                let o = kwok_pools(&words(inner)[1..], &kubeconfig(), home.path());
                assert!(o.status.success(), "{command}: {}", shown(&o));
                let path = String::from_utf8(o.stdout).unwrap().trim().to_string();
                assert!(std::path::Path::new(&path).exists(), "{command}: {path}");
                // The one-file install is accepted by a cluster fresh from `cluster create`.
                let dist = repo().join("dist/install.yaml");
                let o = Command::new(kubectl_bin())
                    .args(["apply", "--server-side", "--dry-run=server", "-f", dist.to_str().unwrap()])
                    .env("KUBECONFIG", &path)
                    .output()
                    .unwrap();
                assert!(o.status.success(), "dist/install.yaml on a new local cluster: {}", shown(&o));
                demo_kubeconfig = Some(std::path::PathBuf::from(path));
            }
            "kwok-pools" if w[1] == "run" => {
                let kc = demo_kubeconfig.clone().expect("the README exports KUBECONFIG before `kwok-pools run`");
                let log = std::fs::File::create(home.path().join("run.log")).unwrap();
                let child = Command::new(kwok_pools_bin())
                    .args(&w[1..])
                    .env("KUBECONFIG", &kc)
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap();
                demo_operator = Some(child);
                // Ready: its webhook registered on the demo cluster, its simulator running.
                wait_for("kwok-pools run to be ready", Duration::from_secs(90), || async {
                    match reqwest::get("http://127.0.0.1:8080/readyz").await {
                        Ok(r) if r.status().is_success() => Ok(()),
                        Ok(r) => Err(r.status().to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                })
                .await;
                // The in-cluster installs are another path: the operator stopped, then
                // uninstalled as the README says (its webhook and policy would stand in Helm's way).
                if let Some(mut child) = demo_operator.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                ok(kubectl_at(&kc, &["get", "validatingadmissionpolicy", "kwok-pools-pool-creators"], None));
                for command in uninstall.iter().filter(|c| c.starts_with("kwok-pools uninstall")) {
                    let o = kwok_pools(&words(command)[1..], &kc, home.path());
                    assert!(o.status.success(), "{command}: {}", shown(&o));
                    assert!(
                        String::from_utf8_lossy(&o.stdout)
                            .contains("removed ValidatingAdmissionPolicy kwok-pools-pool-creators"),
                        "{command}: {}",
                        shown(&o)
                    );
                }
                for kind in
                    ["validatingwebhookconfiguration", "mutatingwebhookconfiguration", "validatingadmissionpolicy"]
                {
                    let o = kubectl_at(&kc, &["get", kind, "-o", "name"], None);
                    let left = String::from_utf8_lossy(&o.stdout).into_owned();
                    assert!(!left.contains("/kwok-pools"), "`kwok-pools uninstall` left {left}");
                }
            }
            "kubectl" if w[1] == "create" && w[2] == "namespace" => {
                let kc = demo_kubeconfig.clone().expect("KUBECONFIG exported");
                let o = kubectl_at(&kc, &["create", "namespace", &w[3], "--dry-run=client", "-o", "yaml"], None);
                let yaml = String::from_utf8_lossy(&o.stdout).into_owned();
                ok(kubectl_at(&kc, &["apply", "--dry-run=server", "-f", "-"], Some(&yaml)));
            }
            "kubectl" => {
                let kc = demo_kubeconfig.clone().expect("KUBECONFIG exported");
                let mut args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
                args.push("--dry-run=server");
                ok(kubectl_at(&kc, &args, None));
            }
            "helm" => {
                let kc = demo_kubeconfig.clone().expect("KUBECONFIG exported");
                let mut args = w[1..].to_vec();
                args.push("--dry-run=server".into());
                ok(helm(&args, &kc));
            }
            "kwok-pools" if w[1] == "webhook-cert" => {
                // kwok-pools webhook-cert … | kubectl apply -f -
                let kc = demo_kubeconfig.clone().expect("KUBECONFIG exported");
                let (left, right) = command.split_once('|').unwrap();
                let o = kwok_pools(&words(left)[1..], &kc, home.path());
                assert!(o.status.success(), "{left}: {}", shown(&o));
                let mut apply: Vec<String> = words(right)[1..].to_vec();
                apply.push("--dry-run=server".into());
                let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
                ok(kubectl_at(&kc, &apply, Some(&String::from_utf8_lossy(&o.stdout))));
            }
            _ => panic!("the README's install section has a command this test does not run: {command}"),
        }
    }
    // The rest of the uninstall section: the installs' own removal (dry runs here), and the
    // chart's hook, which runs `kwok-pools uninstall` (a Job no local cluster can run).
    let kc = demo_kubeconfig.clone().expect("KUBECONFIG exported");
    for command in uninstall.iter().filter(|c| !c.starts_with("kwok-pools uninstall")) {
        let w = words(command);
        match w[0].as_str() {
            "kubectl" => {
                let mut args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
                args.push("--dry-run=server");
                let o = kubectl_at(&kc, &args, None);
                assert!(o.status.success(), "{command}: {}", shown(&o));
            }
            "helm" if w[1] == "uninstall" => {
                let args: Vec<String> = ["template", &w[2], "charts/kwok-pools"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(w[3..].iter().cloned())
                    .collect();
                let o = Command::new(repo().join("bin/helm")).args(&args).current_dir(repo()).output().unwrap();
                assert!(o.status.success(), "helm {args:?}: {}", shown(&o));
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let job = text.split("\n---").find(|d| d.contains("kind: Job") && d.contains("pre-delete"));
                let job = job.unwrap_or_else(|| panic!("{command}: the chart has no pre-delete Job"));
                assert!(job.contains("- uninstall") && job.contains("- --instance=kwok-pools"), "{job}");
            }
            _ => panic!("the README's uninstall section has a command this test does not run: {command}"),
        }
    }
    if let Some(mut child) = demo_operator {
        let _ = child.kill();
        let _ = child.wait();
    }
    let o = kwok_pools(&words("kwok-pools cluster delete --name demo")[1..], &kubeconfig(), home.path());
    assert!(o.status.success(), "{}", shown(&o));
}

#[tokio::test]
async fn every_command_on_the_front_page_runs() {
    let commands = readme_commands();
    let by = |section: &str| -> Vec<String> {
        commands.iter().filter(|(s, _)| s == section).map(|(_, c)| c.clone()).collect()
    };
    // The two at the top are what CI runs (`make test`) and what the tour starts from.
    let top = by("");
    assert_eq!(top, vec!["make run".to_string(), "make test".to_string()], "the README starts with the two commands");
    // The install paths, before anything of the default instance exists here (Helm refuses to
    // dry-run over webhook configurations it does not own).
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        delete_quietly(kind, "kwok-pools");
    }
    // (`kwok-pools cluster create` made the operator's namespace: a dry run creates none.)
    install(&by("Install"), &by("Uninstall")).await;

    // The tour, after what `make run` does: the sample NodePool and the default instance.
    let tour = by("A five-minute tour");
    assert!(tour.len() >= 5, "{tour:?}");
    let client = client().await;
    kubectl_ok(&["apply", "--server-side", "-f", repo().join("samples/nodepool.yaml").to_str().unwrap()]);
    let scope = unique("readme");
    let mut op = Operator::start(
        &scope,
        &[
            "--instance",
            "kwok-pools",
            "--no-pool-selector",
            "--manage-nodes-with-label-selector",
            "pools.kwok.x-k8s.io/pool=nodepool-sample",
        ],
    );
    op.wait_ready().await;
    wait_ready_nodes_named(&client, "nodepool-sample", 3).await;
    for command in &tour {
        let w = words(command);
        let said = match w[0].as_str() {
            "kubectl" => {
                let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
                eventually(command, || kubectl(&args)).await
            }
            "kwok-pools" => {
                let o = kwok_pools(&w[1..], &kubeconfig(), std::path::Path::new("/nonexistent"));
                assert!(o.status.success(), "{command}: {}", shown(&o));
                shown(&o)
            }
            _ => panic!("the README's tour has a command this test does not run: {command}"),
        };
        // What a reader is told to expect.
        let expect: &[&str] = match command.as_str() {
            c if c.starts_with("kubectl get nodes") => &["nodepool-sample-0", "Ready"],
            c if c.starts_with("kubectl scale") => &["scaled"],
            c if c.starts_with("kubectl get pools") => &["nodepool-sample", "podpool-sample"],
            c if c.starts_with("kubectl logs") => &["podpool-sample-0"],
            c if c.starts_with("kubectl exec") => {
                // The container's shell answers: `hello`, not the command's words.
                assert!(said.lines().any(|l| l.trim() == "hello"), "{command}: {said}");
                &["hello"]
            }
            c if c.starts_with("kubectl top nodes") => &["nodepool-sample-"],
            c if c.starts_with("kwok-pools status") => &["nodepool-sample", "podpool-sample"],
            _ => &[],
        };
        for e in expect {
            assert!(said.contains(e), "{command}: {said}");
        }
    }
    wait_ready_nodes_named(&client, "nodepool-sample", 5).await;
    op.stop();
    for (kind, name, ns) in [("podpool", "podpool-sample", "default"), ("nodepool", "nodepool-sample", "")] {
        let mut args = vec!["delete", kind, name, "--wait=false", "--ignore-not-found"];
        if !ns.is_empty() {
            args.extend(["-n", ns]);
        }
        let _ = kubectl(&args);
    }
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        delete_quietly(kind, "kwok-pools");
    }
}

/// Waits until `count` nodes of the pool are Ready.
async fn wait_ready_nodes_named(client: &kube::Client, pool: &str, count: usize) {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    wait_for(&format!("{count} Ready nodes of {pool}"), Duration::from_secs(120), || async {
        let lp = kube::api::ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={pool}"));
        let ready = nodes
            .list(&lp)
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|n| kwok_pools_test_support::pools::is_ready(n))
            .count();
        if ready == count { Ok(()) } else { Err(format!("{ready} Ready")) }
    })
    .await;
}
