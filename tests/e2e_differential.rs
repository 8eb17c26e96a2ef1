//! A template accepts what the API server accepts for that kind. Every manifest of the corpus
//! in `tests/fixtures/differential/` is (a) created as the real object with a server-side dry
//! run and (b) used as a pool template with a server-side dry run (our webhook answering);
//! the verdicts must agree. The only exception is what the pool owns (the child's name,
//! generateName, namespace, ownerReferences, the labels the pool sets, a node's podCIDR): the
//! pool refuses those with its own message naming the field, and the rest of the manifest
//! must then agree. Generated cases drop each field of a full Node and a full Pod in turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use kwok_pools_test_support as common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const POOLS: &str = "pools.kwok.x-k8s.io/v1alpha1";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Node,
    Pod,
}

impl Kind {
    fn template_field(self) -> &'static str {
        match self {
            Kind::Node => "nodeTemplate",
            Kind::Pod => "podTemplate",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    Accepted,
    /// The message and the fields the API server named as causes.
    Refused(String, Vec<String>),
}

impl Verdict {
    fn accepted(&self) -> bool {
        matches!(self, Verdict::Accepted)
    }
    fn text(&self) -> String {
        match self {
            Verdict::Accepted => "accepted".into(),
            Verdict::Refused(m, _) => format!("refused: {}", m.chars().take(300).collect::<String>()),
        }
    }
}

/// A create with `dryRun=All` and strict field validation (kubectl's default).
async fn dry_run(client: &kube::Client, path: &str, body: &Value) -> Verdict {
    let request = http::Request::post(format!("{path}?dryRun=All&fieldValidation=Strict"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    match client.request_text(request).await {
        Ok(_) => Verdict::Accepted,
        Err(kube::Error::Api(s)) => {
            let fields = s.details.iter().flat_map(|d| d.causes.iter().map(|c| c.field.clone())).collect();
            Verdict::Refused(s.message, fields)
        }
        Err(e) => panic!("the dry run to {path} got no verdict: {e}"),
    }
}

struct Bench {
    client: kube::Client,
    scope: String,
    namespace: String,
}

impl Bench {
    /// The real object, as the corpus wrote it.
    async fn as_object(&self, kind: Kind, body: &Value) -> Verdict {
        let path = match kind {
            Kind::Node => "/api/v1/nodes".to_string(),
            Kind::Pod => format!("/api/v1/namespaces/{}/pods", self.namespace),
        };
        dry_run(&self.client, &path, body).await
    }

    /// The same body as the template of a pool named like the object (so invalid names stay
    /// invalid), with one child.
    async fn as_template(&self, kind: Kind, name: &str, template: &Value) -> Verdict {
        let mut metadata = json!({"name": name, "labels": {SCOPE_LABEL: self.scope}});
        let (path, pool_kind, count) = match kind {
            Kind::Node => ("/apis/pools.kwok.x-k8s.io/v1alpha1/nodepools".to_string(), "NodePool", "nodeCount"),
            Kind::Pod => {
                metadata["namespace"] = json!(self.namespace);
                (
                    format!("/apis/pools.kwok.x-k8s.io/v1alpha1/namespaces/{}/podpools", self.namespace),
                    "PodPool",
                    "podCount",
                )
            }
        };
        let pool = json!({
            "apiVersion": POOLS, "kind": pool_kind, "metadata": metadata,
            "spec": {count: 1, kind.template_field(): template},
        });
        dry_run(&self.client, &path, &pool).await
    }
}

/// The manifest paths (below the template) of what the pool owns, present in `template`.
fn pool_owned(kind: Kind, template: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let meta = &template["metadata"];
    for field in ["name", "generateName", "namespace"] {
        if meta[field].as_str().is_some_and(|v| !v.is_empty()) {
            out.push(format!("metadata.{field}"));
        }
    }
    if meta["ownerReferences"].as_array().is_some_and(|a| !a.is_empty()) {
        out.push("metadata.ownerReferences".into());
    }
    for key in meta["labels"].as_object().into_iter().flat_map(|m| m.keys()) {
        if key.starts_with("pools.kwok.x-k8s.io/") || (kind == Kind::Node && key == "kubernetes.io/hostname") {
            out.push(format!("metadata.labels.{key}"));
        }
    }
    if kind == Kind::Node {
        let spec = &template["spec"];
        if spec["podCIDR"].as_str().is_some_and(|v| !v.is_empty())
            || spec["podCIDRs"].as_array().is_some_and(|a| !a.is_empty())
        {
            out.push("spec.podCIDR".into());
        }
    }
    out
}

/// `body` without the fields the pool owns (the object keeps its name).
fn without_pool_owned(kind: Kind, body: &Value) -> Value {
    let mut body = body.clone();
    let meta = &mut body["metadata"];
    if let Some(m) = meta.as_object_mut() {
        for field in ["generateName", "namespace", "ownerReferences"] {
            m.remove(field);
        }
        if let Some(labels) = m.get_mut("labels").and_then(Value::as_object_mut) {
            labels.retain(|k, _| {
                !(k.starts_with("pools.kwok.x-k8s.io/") || (kind == Kind::Node && k == "kubernetes.io/hostname"))
            });
        }
    }
    if kind == Kind::Node
        && let Some(spec) = body["spec"].as_object_mut()
    {
        spec.remove("podCIDR");
        spec.remove("podCIDRs");
    }
    body
}

/// Where a field the API server names for the object sits in the pool manifest (`None` for
/// the object's name, which the pool makes itself).
fn template_path(kind: Kind, field: &str) -> Option<String> {
    if field.is_empty() || field.starts_with("metadata.name") {
        return None;
    }
    // The API server reports a Node's taints under `metadata` (a quirk of its validation).
    let field = match field.strip_prefix("metadata.taints") {
        Some(rest) => format!("spec.taints{rest}"),
        None => field.to_string(),
    };
    // Quote-free prefix: messages may quote label keys (`metadata.labels[key]`).
    let cut = field.find('[').map_or(field.as_str(), |i| &field[..i]);
    Some(format!("spec.{}.{cut}", kind.template_field()))
}

fn template_of(body: &Value) -> Value {
    let mut t = body.clone();
    if let Some(m) = t["metadata"].as_object_mut() {
        m.remove("name");
    }
    t
}

/// One comparison; `None` when the two agree, else what went wrong.
async fn compare(bench: &Bench, kind: Kind, case: &str, body: &Value) -> (Option<String>, String) {
    let name = body["metadata"]["name"].as_str().unwrap_or("diff-object").to_string();
    let template = template_of(body);
    let mut problems = Vec::new();
    let owned = pool_owned(kind, &template);
    if !owned.is_empty() {
        // What the pool owns is refused with the pool's own message, naming the field.
        let verdict = bench.as_template(kind, &name, &template).await;
        let prefix = format!("spec.{}.", kind.template_field());
        match &verdict {
            Verdict::Refused(m, _) if owned.iter().any(|o| m.contains(&format!("{prefix}{o}"))) => {}
            other => {
                problems.push(format!("pool-owned {owned:?}: the pool should refuse naming them; {}", other.text()))
            }
        }
    }
    let body = without_pool_owned(kind, body);
    let object = bench.as_object(kind, &body).await;
    let pool = bench.as_template(kind, &name, &template_of(&body)).await;
    let row = format!(
        "| {case} | {} | {} | {} |",
        if object.accepted() { "accepted" } else { "refused" },
        if pool.accepted() { "accepted" } else { "refused" },
        if owned.is_empty() { String::new() } else { owned.join(", ") }
    );
    if object.accepted() != pool.accepted() {
        problems.push(format!("as a {kind:?}: {}\n    as a template: {}", object.text(), pool.text()));
    } else if let (Verdict::Refused(_, fields), Verdict::Refused(message, _)) = (&object, &pool) {
        // Refused by both for the same reason: the pool names a field the object's refusal
        // named, at its place in the template.
        let expected: Vec<String> = fields.iter().filter_map(|f| template_path(kind, f)).collect();
        if !expected.is_empty() && !expected.iter().any(|p| message.contains(p.as_str())) {
            problems.push(format!("refused by both, but the pool names none of {expected:?}: {}", pool.text()));
        }
    }
    let problem = (!problems.is_empty()).then(|| format!("{case}:\n    {}", problems.join("\n    ")));
    (problem, row)
}

fn load(dir: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let value: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), value)
        })
        .collect()
}

/// One step into a JSON value: an object key (which may contain dots) or an array index.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

fn show(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Every path that ends at an object key in `value`, parents first.
fn key_paths(value: &Value, prefix: &[Step], out: &mut Vec<Vec<Step>>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let mut path = prefix.to_vec();
                path.push(Step::Key(k.clone()));
                out.push(path.clone());
                key_paths(v, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let mut path = prefix.to_vec();
                path.push(Step::Index(i));
                key_paths(v, &path, out);
            }
        }
        _ => {}
    }
}

/// `value` without the key `path` ends at.
fn drop_path(value: &Value, path: &[Step]) -> Value {
    let mut out = value.clone();
    let Some((Step::Key(last), parents)) = path.split_last() else { return out };
    let mut cursor = Some(&mut out);
    for step in parents {
        cursor = match (cursor, step) {
            (Some(v), Step::Key(k)) => v.get_mut(k.as_str()),
            (Some(v), Step::Index(i)) => v.get_mut(*i),
            (None, _) => None,
        };
    }
    if let Some(map) = cursor.and_then(Value::as_object_mut) {
        map.remove(last.as_str());
    }
    out
}

async fn bench() -> (Bench, Operator, TestNamespace) {
    let client = client().await;
    let scope = unique("diff");
    let ns = TestNamespace::new(&client, "diff").await;
    let mut op = Operator::start(&scope, &[]);
    op.wait_ready().await;
    // The API server calls a new webhook configuration within a second or two.
    let probe = json!({"metadata": {"labels": {"pools.kwok.x-k8s.io/index": "1"}}});
    let b = Bench { client, scope, namespace: ns.name.clone() };
    wait_for("the webhook to answer", Duration::from_secs(60), || async {
        match b.as_template(Kind::Node, "diff-probe", &probe).await {
            Verdict::Refused(m, _) if m.contains("denied the request") => Ok(()),
            other => Err(other.text()),
        }
    })
    .await;
    (b, op, ns)
}

async fn run_corpus(bench: &Bench, kind: Kind, cases: Vec<(String, Value)>) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for (case, body) in cases {
        let (problem, row) = compare(bench, kind, &case, &body).await;
        problems.extend(problem);
        rows.push(row);
    }
    (problems, rows)
}

fn report(what: &str, problems: &[String], rows: &[String]) {
    eprintln!(
        "\n{what}: {} cases\n| case | as the object | as a template | pool-owned |\n|---|---|---|---|",
        rows.len()
    );
    for r in rows {
        eprintln!("{r}");
    }
    assert!(problems.is_empty(), "{} of {} cases disagree:\n{}", problems.len(), rows.len(), problems.join("\n"));
}

#[tokio::test]
async fn the_corpus_gets_the_same_verdict_as_object_and_as_template() {
    let (bench, _op, _ns) = bench().await;
    let dir = repo().join("tests/fixtures/differential");
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for (kind, sub) in [(Kind::Node, "nodes"), (Kind::Pod, "pods")] {
        let cases = load(&dir.join(sub));
        assert!(!cases.is_empty(), "no corpus in {sub}");
        let (p, r) = run_corpus(&bench, kind, cases).await;
        problems.extend(p);
        rows.extend(r);
    }
    // Both verdicts occur, or the comparison proves nothing.
    let accepted = rows.iter().filter(|r| r.contains("| accepted | accepted |")).count();
    let refused = rows.iter().filter(|r| r.contains("| refused | refused |")).count();
    report("corpus", &problems, &rows);
    assert!(accepted > 10 && refused > 10, "accepted by both: {accepted}, refused by both: {refused}");
}

#[tokio::test]
async fn dropping_any_field_of_a_full_node_or_pod_gets_the_same_verdict() {
    let (bench, _op, _ns) = bench().await;
    let dir = repo().join("tests/fixtures/differential/full");
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for (kind, file) in [(Kind::Node, "node.yaml"), (Kind::Pod, "pod.yaml")] {
        let (_, full) = load(&dir).into_iter().find(|(f, _)| f == file).expect("the full manifest");
        let mut paths = Vec::new();
        key_paths(&full, &[], &mut paths);
        // The object needs its name and kind to be sent at all.
        paths.retain(|p| !matches!(show(p).as_str(), "apiVersion" | "kind" | "metadata" | "metadata.name"));
        let cases: Vec<(String, Value)> =
            paths.iter().map(|p| (format!("{file} without {}", show(p)), drop_path(&full, p))).collect();
        let (p, r) = run_corpus(&bench, kind, vec![(file.to_string(), full.clone())]).await;
        problems.extend(p);
        rows.extend(r);
        let (p, r) = run_corpus(&bench, kind, cases).await;
        problems.extend(p);
        rows.extend(r);
    }
    let refused = rows.iter().filter(|r| r.contains("| refused | refused |")).count();
    report("generated", &problems, &rows);
    assert!(refused > 0, "dropping a required field (a container's image) must be refused by both");
}

#[test]
fn paths_are_dropped_where_they_point() {
    let v =
        json!({"metadata": {"labels": {"example.com/a": "x"}}, "spec": {"containers": [{"name": "a", "image": "b"}]}});
    let mut paths = Vec::new();
    key_paths(&v, &[], &mut paths);
    let mut shown: Vec<String> = paths.iter().map(|p| show(p)).collect();
    shown.sort();
    assert_eq!(
        shown,
        [
            "metadata",
            "metadata.labels",
            "metadata.labels.example.com/a",
            "spec",
            "spec.containers",
            "spec.containers[0].image",
            "spec.containers[0].name"
        ]
    );
    let image = paths.iter().find(|p| show(p) == "spec.containers[0].image").unwrap();
    assert_eq!(
        drop_path(&v, image),
        json!({"metadata": {"labels": {"example.com/a": "x"}}, "spec": {"containers": [{"name": "a"}]}})
    );
    // A key with dots is one key.
    let label = paths.iter().find(|p| show(p) == "metadata.labels.example.com/a").unwrap();
    assert_eq!(drop_path(&v, label)["metadata"], json!({"labels": {}}));
}
