//! The simulated kubelets' API on the local cluster, through the real API server, the real
//! metrics-server and the real HPA controller: `kubectl logs` (tail, follow, previous),
//! `kubectl exec` (the default shell, echo, reply, stdin), `kubectl port-forward`, node proxy paths, `kubectl top`,
//! an HPA driven up and down by a usage shape, and callers without identity or right refused.
//!
//! Needs the cluster of `make e2e` (`cluster create --metrics-server`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::pools::*;
use common::*;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);

/// A NodePool whose pods have the given `pods:` lifecycle lines (indented four).
fn pool_with(scope: &str, count: u32, pods: &str) -> String {
    nodepool_yaml(scope, scope, count, &format!("  lifecycle:\n    seed: 7\n    pods:\n{pods}"))
}

/// A running pod named `name` in `ns` on the scope's nodes; `requests` of CPU.
async fn running_pod(client: &kube::Client, name: &str, ns: &str, scope: &str, extra: &str) -> Pod {
    apply(&scoped_pod(name, ns, scope, extra));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("pod {name} Running"), T, || async {
        let p = pods.get(name).await.map_err(|e| e.to_string())?;
        if pod_ready(&p) { Ok(p) } else { Err(format!("{:?}", p.status.and_then(|s| s.phase))) }
    })
    .await
}

fn out(args: &[&str]) -> (bool, String, String) {
    let o = kubectl(args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test]
async fn logs_exec_and_port_forward_answer_for_a_pod_on_a_simulated_node() {
    let client = client().await;
    let scope = unique("kl-logs");
    let ns = TestNamespace::new(&client, "kl-logs").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&pool_with(
        &scope,
        1,
        "      logs: {lines: [starting, ready], line: \"{pod} tick {n}\", every: 1s}\n      exec: {mode: Echo}\n",
    ));
    wait_ready_nodes(&client, &scope, 1, T).await;
    running_pod(&client, "web", &ns.name, &scope, "").await;

    // Logs: the static lines, then a tick a second; tail and timestamps.
    let all = wait_for("three ticks", T, || async {
        let (ok, stdout, stderr) = out(&["logs", "-n", &ns.name, "web"]);
        if ok && stdout.contains("web tick 3") { Ok(stdout) } else { Err(format!("{stdout}{stderr}")) }
    })
    .await;
    assert!(all.starts_with("starting\nready\nweb tick 1\n"), "{all}");
    let (ok, tail, _) = out(&["logs", "-n", &ns.name, "web", "--tail=2"]);
    assert!(ok && tail.lines().count() == 2 && tail.lines().all(|l| l.contains("tick")), "{tail}");
    let (_, stamped, _) = out(&["logs", "-n", &ns.name, "web", "--tail=1", "--timestamps"]);
    assert!(stamped.starts_with("20") && stamped.contains("Z web tick"), "{stamped}");
    let (ok, _, err) = out(&["logs", "-n", &ns.name, "web", "--previous"]);
    assert!(!ok && err.contains("previous terminated container"), "{err}");
    let (ok, _, err) = out(&["logs", "-n", &ns.name, "web", "-c", "nope"]);
    assert!(!ok && err.contains("nope"), "{err}");

    // Follow: new lines arrive while the command runs.
    let mut follow = Command::new(kubectl_bin())
        .args(["logs", "-f", "--tail=1", "-n", &ns.name, "web"])
        .env("KUBECONFIG", kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let n = |l: &str| l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).unwrap();
    let later = lines.next().unwrap().unwrap();
    let last = lines.next().unwrap().unwrap();
    assert!(n(&later) == n(&first) + 1 && n(&last) == n(&later) + 1, "{first} {later} {last}");
    let _ = follow.kill();
    let _ = follow.wait();

    // Since: only the last seconds' lines.
    let (_, recent, _) = out(&["logs", "-n", &ns.name, "web", "--since=3s"]);
    assert!(!recent.contains("starting") && (1..=4).contains(&recent.lines().count()), "{recent}");
    // A pod's annotation sets its own lines.
    running_pod(&client, "noted", &ns.name, &scope, "").await;
    kubectl_ok(&["annotate", "pod", "-n", &ns.name, "noted", "pools.kwok.x-k8s.io/logs=one\ntwo"]);
    let (_, noted, _) = out(&["logs", "-n", &ns.name, "noted", "--tail=-1"]);
    assert!(noted.starts_with("one\ntwo\n"), "{noted}");

    // Attach: what it is, then the container's new lines.
    let mut attach = Command::new(kubectl_bin())
        .args(["attach", "-n", &ns.name, "web"])
        .env("KUBECONFIG", kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut attached = BufReader::new(attach.stdout.take().unwrap()).lines();
    let said = attached.next().unwrap().unwrap();
    assert!(said.contains("attached to container c of pod web"), "{said}");
    let next = attached.next().unwrap().unwrap();
    assert!(next.starts_with("web tick "), "{next}");
    let _ = attach.kill();
    let _ = attach.wait();

    // Exec: the command echoed; stdin echoed back.
    let (ok, stdout, stderr) = out(&["exec", "-n", &ns.name, "web", "--", "echo", "hello", "world"]);
    assert!(ok && stdout == "echo hello world\n", "{stdout}{stderr}");
    let o = kubectl_stdin(&["exec", "-i", "-n", &ns.name, "web", "--", "cat"], Some("typed in\n"));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "cat\ntyped in\n");

    // Port-forward: a local port that answers HTTP with the pod's identity.
    let mut pf = Command::new(kubectl_bin())
        .args(["port-forward", "-n", &ns.name, "pod/web", ":8080"])
        .env("KUBECONFIG", kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(pf.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let port: u16 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("port-forward said {line:?}"));
    let body = reqwest::get(format!("http://127.0.0.1:{port}/")).await.unwrap();
    assert_eq!(body.status(), 200);
    let text = body.text().await.unwrap();
    assert!(text.contains(&format!("{}/web port 8080", ns.name)), "{text}");
    let _ = pf.kill();
    let _ = pf.wait();
    let mut rest = String::new();
    let _ = pf.stderr.take().unwrap().read_to_string(&mut rest);
    op.stop();
}

#[tokio::test]
async fn exec_answers_from_a_minimal_shell_by_default() {
    let client = client().await;
    let scope = unique("kl-shell");
    let ns = TestNamespace::new(&client, "kl-shell").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    wait_ready_nodes(&client, &scope, 1, T).await;
    apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: {ns}}}
spec:
  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers:
  - name: c
    image: nginx
    env:
    - {{name: GREETING, value: hello}}
    - {{name: MY_NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
",
        ns = ns.name
    ));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = wait_for("pod web Running", T, || async {
        let p = pods.get("web").await.map_err(|e| e.to_string())?;
        if pod_ready(&p) { Ok(p) } else { Err(format!("{:?}", p.status.and_then(|s| s.phase))) }
    })
    .await;
    let node = pod.spec.unwrap().node_name.unwrap();

    let (ok, stdout, stderr) = out(&["exec", "-n", &ns.name, "web", "--", "echo", "hello", "world"]);
    assert!(ok && stdout == "hello world\n", "{stdout}{stderr}");
    let (ok, stdout, _) = out(&["exec", "-n", &ns.name, "web", "--", "sh", "-c", "echo $GREETING from $(hostname)"]);
    assert!(ok, "{stdout}");
    // `$(...)` is not substituted by the simulated shell: it is text after `$`.
    assert!(stdout.starts_with("hello from "), "{stdout}");
    let (ok, stdout, _) = out(&["exec", "-n", &ns.name, "web", "--", "printenv", "MY_NODE", "HOSTNAME"]);
    assert!(ok && stdout == format!("{node}\nweb\n"), "{stdout}");
    let (ok, stdout, _) = out(&["exec", "-n", &ns.name, "web", "--", "cat", "/etc/hostname"]);
    assert!(ok && stdout == "web\n", "{stdout}");

    // An unknown command: not found, exit 127, as a container without that binary answers.
    let o = kubectl(&["exec", "-n", &ns.name, "web", "--", "nginx", "-t"]);
    assert_eq!(o.status.code(), Some(127), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("executable file not found"));
    let o = kubectl(&["exec", "-n", &ns.name, "web", "--", "sh", "-c", "false || exit 9"]);
    assert_eq!(o.status.code(), Some(9));

    // An interactive shell fed on stdin: each line runs, `exit` ends it with its code.
    let o = kubectl_stdin(
        &["exec", "-i", "-n", &ns.name, "web", "--", "sh"],
        Some("echo first\nprintenv GREETING\ncurl localhost\nexit 5\necho never\n"),
    );
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "first\nhello\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("sh: curl: not found"));
    // `cat` with no file reads stdin.
    let o = kubectl_stdin(&["exec", "-i", "-n", &ns.name, "web", "--", "cat"], Some("typed in\n"));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "typed in\n");
    // `sleep` lasts.
    let t0 = Instant::now();
    assert!(out(&["exec", "-n", &ns.name, "web", "--", "sleep", "2"]).0);
    assert!(t0.elapsed() >= Duration::from_secs(2), "sleep 2 returned after {:?}", t0.elapsed());
    op.stop();
}

#[tokio::test]
async fn exec_replies_or_refuses_as_the_pool_says_and_node_proxy_paths_answer() {
    let client = client().await;
    let scope = unique("kl-exec");
    let ns = TestNamespace::new(&client, "kl-exec").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&pool_with(&scope, 1, "      exec: {mode: Reply, output: \"ok from the pool\\n\", exitCode: 3}\n"));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0);
    running_pod(&client, "web", &ns.name, &scope, "").await;
    let o = kubectl(&["exec", "-n", &ns.name, "web", "--", "anything"]);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok from the pool\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("exit code 3"));

    // The node reports where its kubelet answers, and keeps its InternalIP.
    let name = node.metadata.name.clone().unwrap();
    let status = node.status.clone().unwrap();
    let addresses = status.addresses.unwrap();
    let host = addresses.iter().find(|a| a.type_ == "Hostname").unwrap();
    assert!(host.address.starts_with("127."), "{host:?}");
    assert!(addresses.iter().any(|a| a.type_ == "InternalIP" && !a.address.starts_with("127.")));
    assert_eq!(status.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port, i32::from(op.kubelet_port));
    // Its node paths, called as the API server and metrics-server call them (the API server's
    // node proxy refuses loopback addresses, so not through it).
    let admin = admin_client();
    let base = format!("https://{}:{}", host.address, op.kubelet_port);
    let get = |path: &str| {
        let (admin, url) = (admin.clone(), format!("{base}{path}"));
        async move {
            let r = admin.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };
    let summary: serde_json::Value = serde_json::from_str(&get("/stats/summary").await).unwrap();
    assert_eq!(summary["node"]["nodeName"], name.as_str());
    assert!(summary["pods"].as_array().unwrap().iter().any(|p| p["podRef"]["name"] == "web"));
    let metrics = get("/metrics/resource").await;
    assert!(metrics.contains("node_cpu_usage_seconds_total ") && metrics.contains("pod=\"web\""), "{metrics}");
    // The same under the path the node's annotation gives metrics-server.
    let annotated = node.metadata.annotations.as_ref().unwrap()["metrics.k8s.io/resource-metrics-path"].clone();
    assert!(get(&annotated).await.contains("node_memory_working_set_bytes"));
    let pods = get("/pods").await;
    assert!(pods.contains("\"PodList\"") && pods.contains("\"web\""), "{pods}");
    op.stop();
}

#[tokio::test]
async fn anonymous_and_unauthorized_callers_are_refused_by_the_kubelet() {
    let client = client().await;
    let scope = unique("kl-auth");
    let ns = TestNamespace::new(&client, "kl-auth").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0);
    let status = node.status.unwrap();
    let host = status.addresses.unwrap().into_iter().find(|a| a.type_ == "Hostname").unwrap().address;
    let base = format!("https://{host}:{}", op.kubelet_port);
    // Its serving certificate is for the node's address, from the cluster CA.
    let pki = kubeconfig().parent().unwrap().join("pki");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.join("ca.crt")).unwrap()).unwrap();
    let https = || reqwest::Client::builder().use_rustls_tls().add_root_certificate(ca.clone());
    let anonymous = https().build().unwrap();
    let r = anonymous.get(format!("{base}/pods")).send().await.unwrap();
    assert_eq!(r.status(), 401, "no identity");
    // A ServiceAccount without rights on nodes: 403, naming what it lacks.
    kubectl_ok(&["create", "serviceaccount", "nobody", "-n", &ns.name]);
    let token = kubectl(&["create", "token", "nobody", "-n", &ns.name]);
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    let r = anonymous.get(format!("{base}/pods")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let why = r.text().await.unwrap();
    assert!(why.contains("subresource(s)=[pods proxy]") && why.contains("nobody"), "{why}");
    // No existence oracle: to a caller without rights on the node, a pod that is not there and
    // one that is look alike (403); only a caller allowed there learns that one is missing.
    let pinned = format!(r#"{{"spec":{{"nodeName":"{}"}}}}"#, node.metadata.name.clone().unwrap());
    kubectl_ok(&["run", "present", "-n", &ns.name, "--image=nginx", &format!("--overrides={pinned}")]);
    let (missing, present) = (
        format!("{base}/containerLogs/{}/absent/c", ns.name),
        format!("{base}/containerLogs/{}/present/present", ns.name),
    );
    for url in [&missing, &present] {
        let r = anonymous.get(url).bearer_auth(&token).send().await.unwrap();
        assert_eq!(r.status(), 403, "{url}: {}", r.text().await.unwrap_or_default());
    }
    let r = admin_client().get(&missing).send().await.unwrap();
    assert_eq!(r.status(), 404, "a caller allowed on the node is told the pod is not there");
    // The admin's client certificate: allowed.
    let r = admin_client().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // A token whose account may read node metrics gets them, and only them.
    kubectl_ok(&["create", "clusterrole", &format!("{scope}-metrics"), "--verb=get", "--resource=nodes/metrics"]);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{scope}-metrics"),
        &format!("--clusterrole={scope}-metrics"),
        &format!("--serviceaccount={}:nobody", ns.name),
    ]);
    let metrics = wait_for("the binding to count (denials are cached 30 s)", Duration::from_secs(60), || async {
        let r = anonymous
            .get(format!("{base}/metrics/resource"))
            .bearer_auth(&token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if r.status() == 200 { Ok(r.text().await.unwrap_or_default()) } else { Err(r.status().to_string()) }
    })
    .await;
    assert!(metrics.contains("node_memory_working_set_bytes"));
    let r = anonymous.get(format!("{base}/pods")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(r.status(), 403, "metrics only");
    delete_quietly("clusterrole", &format!("{scope}-metrics"));
    delete_quietly("clusterrolebinding", &format!("{scope}-metrics"));
    op.stop();
}

/// `kubectl top` lines as (name, cpu millicores, memory MiB).
fn top(args: &[&str]) -> Result<Vec<(String, u64, u64)>, String> {
    let (ok, stdout, stderr) = out(args);
    if !ok {
        return Err(stderr);
    }
    let num = |s: &str, unit: &str| s.strip_suffix(unit).and_then(|n| n.parse::<u64>().ok());
    Ok(stdout
        .lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let cpu = num(w.get(1)?, "m")?;
            let mem = w.iter().skip(2).find_map(|x| num(x, "Mi"))?;
            Some((w[0].to_string(), cpu, mem))
        })
        .collect())
}

#[tokio::test]
async fn kwok_pools_run_by_hand_against_a_local_cluster_gets_a_working_kubectl_top() {
    // The README's Install path: `kwok-pools run` with no CA flag. It finds the local
    // cluster's PKI from the kubeconfig, so metrics-server verifies its kubelets.
    let client = client().await;
    let scope = unique("kl-pki");
    let mut op = Operator::start(&scope, &["--harness-no-pki"]);
    op.wait_ready().await;
    let said = op.log_text();
    assert!(said.contains("using local cluster") && said.contains("the kubelet serving CA"), "{said}");
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0).metadata.name.unwrap();
    let rows = wait_for("kubectl top node (metrics-server scrapes every 15 s)", Duration::from_secs(120), || async {
        let rows = top(&["top", "nodes", &node])?;
        if rows.len() == 1 { Ok(rows) } else { Err(format!("{rows:?}")) }
    })
    .await;
    assert_eq!(rows[0].0, node);
    op.stop();
}

#[tokio::test]
async fn kubectl_top_shows_the_configured_usage_within_its_distribution() {
    let client = client().await;
    let scope = unique("kl-top");
    let ns = TestNamespace::new(&client, "kl-top").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&format!(
        "{}  lifecycle:\n    seed: 3\n    nodes: {{usage: {{cpu: 200m, memory: 1Gi}}}}\n    pods:\n      usage: {{cpu: {{min: 100m, max: 300m}}, memory: {{fixed: 64Mi}}}}\n",
        nodepool_yaml(&scope, &scope, 1, "")
    ));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0);
    let node_name = node.metadata.name.clone().unwrap();
    for i in 0..4 {
        running_pod(&client, &format!("p{i}"), &ns.name, &scope, "").await;
    }
    // One annotated pod: its own level.
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: fixed, namespace: {}, annotations: {{kwok.x-k8s.io/usage-cpu: 750m, kwok.x-k8s.io/usage-memory: 200Mi}}}}\nspec:\n  nodeSelector: {{{SCOPE_LABEL}: {scope}}}\n  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]\n  containers: [{{name: c, image: nginx}}]\n",
        ns.name
    ));
    let pods = wait_for("kubectl top pods (metrics-server scrapes every 15 s)", Duration::from_secs(120), || async {
        let rows = top(&["top", "pods", "-n", &ns.name])?;
        if rows.len() == 5 { Ok(rows) } else { Err(format!("{rows:?}")) }
    })
    .await;
    for (name, cpu, mem) in &pods {
        if name == "fixed" {
            assert!((740..=760).contains(cpu) && *mem == 200, "{name}: {cpu}m {mem}Mi");
        } else {
            assert!((100..=300).contains(cpu) && *mem == 64, "{name}: {cpu}m {mem}Mi");
        }
    }
    let distinct: std::collections::BTreeSet<u64> = pods.iter().map(|p| p.1).collect();
    assert!(distinct.len() >= 3, "levels drawn per container: {pods:?}");
    // The node: its base plus its pods. Over a scrape window in which a pod started, a node
    // (like a kubelet's) counts only the part the pod ran; from the next window on, all of it.
    let sum_cpu: u64 = pods.iter().map(|p| p.1).sum();
    let nodes = wait_for("kubectl top nodes to count every pod (one more scrape)", Duration::from_secs(60), || async {
        let rows = top(&["top", "nodes", &node_name])?;
        match rows.first() {
            Some((_, cpu, _)) if rows.len() == 1 && cpu.abs_diff(200 + sum_cpu) <= 10 => Ok(rows),
            _ => Err(format!("{rows:?} vs 200m + {sum_cpu}m")),
        }
    })
    .await;
    let (_, cpu, mem) = &nodes[0];
    assert!(cpu.abs_diff(200 + sum_cpu) <= 10, "node {cpu}m vs 200m + {sum_cpu}m");
    assert!(mem.abs_diff(1024 + 4 * 64 + 200) <= 2, "node {mem}Mi");
    op.stop();
}

#[tokio::test]
async fn an_hpa_scales_a_deployment_up_with_a_rising_shape_and_down_when_it_falls() {
    let client = client().await;
    let scope = unique("kl-hpa");
    let ns = TestNamespace::new(&client, "kl-hpa").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    // 500m a container against a request of 1 CPU: 10% utilisation, 80% from 75 s after the
    // pool's creation, 10% again from 180 s.
    let created = Instant::now();
    apply(&format!(
        "{}  lifecycle:\n    pods:\n      usage:\n        cpu: {{fixed: 500m}}\n        shape: {{steps: [{{after: 0s, factor: 0.2}}, {{after: 75s, factor: 1.6}}, {{after: 180s, factor: 0.2}}]}}\n",
        nodepool_yaml(&scope, &scope, 2, "")
    ));
    wait_ready_nodes(&client, &scope, 2, T).await;
    apply(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers: [{{name: app, image: nginx, resources: {{requests: {{cpu: '1'}}}}}}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: web, namespace: {ns}}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  minReplicas: 1
  maxReplicas: 4
  metrics: [{{type: Resource, resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}}}]
  behavior:
    scaleDown: {{stabilizationWindowSeconds: 0, policies: [{{type: Percent, value: 100, periodSeconds: 5}}]}}
",
        ns = ns.name
    ));
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns.name);
    let observed = |hpa: &HorizontalPodAutoscaler| {
        let s = hpa.status.clone().unwrap_or_default();
        let cpu = s.current_metrics.iter().flatten().find_map(|m| m.resource.as_ref()?.current.average_utilization);
        (s.desired_replicas, cpu)
    };
    // Low at first: the HPA reads it and stays at one replica.
    let (replicas, cpu) = wait_for("the HPA to read a utilisation", Duration::from_secs(120), || async {
        let h = hpas.get("web").await.map_err(|e| e.to_string())?;
        match observed(&h) {
            (n, Some(cpu)) if created.elapsed() < Duration::from_secs(75) => Ok((n, cpu)),
            (_, None) => Err("no metrics yet".into()),
            other => Err(format!("{other:?} (too late for the low phase)")),
        }
    })
    .await;
    assert!(replicas == 1 && (5..=15).contains(&cpu), "low phase: {replicas} replicas at {cpu}%");
    let high = wait_for("the HPA to scale up", Duration::from_secs(150), || async {
        let h = hpas.get("web").await.map_err(|e| e.to_string())?;
        match observed(&h) {
            (n, cpu) if n > 1 => Ok((n, cpu)),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(created.elapsed() < Duration::from_secs(180), "up while the shape is high: {high:?}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the new replicas to run", T, || async {
        let running = pods.list(&ListParams::default().labels("app=web")).await.map_err(|e| e.to_string())?.items;
        let n = running.iter().filter(|p| pod_ready(p)).count() as i32;
        if n >= high.0 { Ok(()) } else { Err(format!("{n} running")) }
    })
    .await;
    let low = wait_for("the HPA to scale down", Duration::from_secs(240), || async {
        let h = hpas.get("web").await.map_err(|e| e.to_string())?;
        match observed(&h) {
            (1, cpu) if created.elapsed() > Duration::from_secs(180) => Ok(cpu),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // metrics-server's rate spans a 15 s window: the reading that scaled it down may still
    // straddle the step; the one after it is the low level.
    let low = match low {
        Some(c) if c <= 15 => low,
        _ => {
            wait_for("the low phase's utilisation", Duration::from_secs(60), || async {
                let h = hpas.get("web").await.map_err(|e| e.to_string())?;
                match observed(&h) {
                    (1, Some(c)) if c <= 15 => Ok(Some(c)),
                    other => Err(format!("{other:?}")),
                }
            })
            .await
        }
    };
    assert!(low.is_some_and(|c| c <= 15), "down on the low phase: {low:?}");
    op.stop();
}

/// A TLS connection to a simulated kubelet with the cluster admin's certificate.
async fn admin_tls(host: &str, port: u16) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    kwok_pools::telemetry::init_crypto();
    let pki = kubeconfig().parent().unwrap().join("pki");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(pki.join("ca.crt")).unwrap()).unwrap();
    let chain = vec![CertificateDer::from_pem_file(pki.join("admin.crt")).unwrap()];
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).unwrap();
    let config =
        rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(chain, key).unwrap();
    let tcp = tokio::net::TcpStream::connect((host, port)).await.unwrap();
    let name = ServerName::try_from(host.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap()
}

#[tokio::test]
async fn exec_and_port_forward_speak_websocket_to_direct_callers() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let client = client().await;
    let scope = unique("kl-ws");
    let ns = TestNamespace::new(&client, "kl-ws").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    apply(&nodepool_yaml(&scope, &scope, 1, ""));
    let node = wait_ready_nodes(&client, &scope, 1, T).await.remove(0);
    running_pod(&client, "web", &ns.name, &scope, "").await;
    let host = node.status.unwrap().addresses.unwrap().into_iter().find(|a| a.type_ == "Hostname").unwrap().address;
    let ws = |path: String, protocol: &'static str| {
        let host = host.clone();
        let port = op.kubelet_port;
        async move {
            let mut req = format!("wss://{host}:{port}{path}").into_client_request().unwrap();
            req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
            let (socket, resp) = tokio_tungstenite::client_async(req, admin_tls(&host, port).await).await.unwrap();
            assert_eq!(resp.headers()["sec-websocket-protocol"], protocol);
            socket
        }
    };
    // Exec over v5.channel.k8s.io: stdout on channel 1, stdin echoed, the status on channel 3.
    let path = format!("/exec/{}/web/c?command=cat&command=-n&input=1&output=1&error=1", ns.name);
    let mut socket = ws(path, "v5.channel.k8s.io").await;
    socket.send(Message::Binary(b"\x00hello\n".to_vec().into())).await.unwrap();
    socket.send(Message::Binary(vec![255, 0].into())).await.unwrap();
    let (mut stdout, mut status) = (Vec::new(), None);
    while let Some(Ok(m)) = socket.next().await {
        match m {
            Message::Binary(b) if b.first() == Some(&1) => stdout.extend_from_slice(&b[1..]),
            Message::Binary(b) if b.first() == Some(&3) => {
                status = Some(serde_json::from_slice::<serde_json::Value>(&b[1..]).unwrap())
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "hello\n", "the default shell's cat copies stdin");
    assert_eq!(status.unwrap()["status"], "Success");
    // Port-forward: each channel opens with its port; data is answered on the data channel.
    let mut socket = ws(format!("/portForward/{}/web?port=9090", ns.name), "v4.channel.k8s.io").await;
    let mut opened = Vec::new();
    while opened.len() < 2 {
        if let Some(Ok(Message::Binary(b))) = socket.next().await {
            opened.push(b.to_vec());
        }
    }
    assert_eq!(opened, vec![vec![0, 0x82, 0x23], vec![1, 0x82, 0x23]], "port 9090 on channels 0 and 1");
    socket.send(Message::Binary(b"\x00GET / HTTP/1.1\r\n\r\n".to_vec().into())).await.unwrap();
    let answer = loop {
        if let Some(Ok(Message::Binary(b))) = socket.next().await
            && b[0] == 0
        {
            break String::from_utf8_lossy(&b[1..]).into_owned();
        }
    };
    assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.contains("web port 9090"), "{answer}");
    op.stop();
}

#[tokio::test]
async fn at_one_shared_address_as_in_a_cluster_node_paths_name_the_node() {
    let client = client().await;
    let scope = unique("kl-shared");
    let ns = TestNamespace::new(&client, "kl-shared").await;
    let address = host_address();
    let mut op = Operator::start(&scope, &["--kubelet-address", &address]);
    op.wait_ready().await;
    apply(&pool_with(&scope, 2, "      usage: {cpu: {fixed: 150m}, memory: {fixed: 32Mi}}\n"));
    let nodes = wait_ready_nodes(&client, &scope, 2, T).await;
    running_pod(&client, "web", &ns.name, &scope, "").await;
    // Every node at the replica's address, as they would be at its pod IP.
    for n in &nodes {
        let addresses = n.status.as_ref().unwrap().addresses.as_ref().unwrap();
        assert!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == address), "{addresses:?}");
    }
    // The API server reaches them (a proxyable address); logs and exec as before.
    let (ok, logs, err) = out(&["logs", "-n", &ns.name, "web"]);
    assert!(ok && logs.contains("simulated"), "{logs}{err}");
    let name = nodes[0].metadata.name.clone().unwrap();
    let (ok, summary, err) = out(&["get", "--raw", &format!("/api/v1/nodes/{name}/proxy/nodes/{name}/stats/summary")]);
    assert!(ok, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["node"]["nodeName"], name.as_str());
    // A path that does not name the node is refused (kubectl shows no body), and says how to
    // name it to a direct caller.
    let (ok, _, err) = out(&["get", "--raw", &format!("/api/v1/nodes/{name}/proxy/stats/summary")]);
    assert!(!ok && err.contains("NotFound"), "{err}");
    let r = admin_client().get(format!("https://{address}:{}/stats/summary", op.kubelet_port)).send().await.unwrap();
    let status = r.status();
    let said = r.text().await.unwrap();
    assert!(status == 404 && said.contains("/nodes/<node>/stats/summary"), "{status} {said}");
    // metrics-server follows the node's annotation: kubectl top sees the pod.
    let rows = wait_for("kubectl top pods", Duration::from_secs(120), || async {
        let rows = top(&["top", "pods", "-n", &ns.name])?;
        if rows.len() == 1 { Ok(rows) } else { Err(format!("{rows:?}")) }
    })
    .await;
    assert!((145..=155).contains(&rows[0].1) && rows[0].2 == 32, "{rows:?}");
    op.stop();
}
