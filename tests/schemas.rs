//! Editor schemas: committed and fresh, and every pool sample passes a real, widely used
//! validator (check-jsonschema, installed by `make schema-tools`), which also reports a bad
//! manifest with its field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn validator() -> PathBuf {
    if let Some(p) = std::env::var_os("CHECK_JSONSCHEMA") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"));
    let p = cache.join("kwok-pools/venv/bin/check-jsonschema");
    assert!(p.exists(), "check-jsonschema is not installed at {}: run `make schema-tools`", p.display());
    p
}

fn check(schema: &str, file: &std::path::Path) -> (bool, String) {
    let out = Command::new(validator())
        .args(["--schemafile", schema])
        .arg(file)
        .current_dir(repo())
        .output()
        .expect("running check-jsonschema");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn committed_schemas_are_up_to_date() {
    for (name, text) in kwok_pools::kinds::editor_schemas() {
        let path = repo().join("crds/schemas").join(&name);
        let committed =
            std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} missing: run `make crds`", path.display()));
        assert!(committed == text, "{} is stale: run `make crds` and commit the result", path.display());
    }
}

#[test]
fn every_pool_sample_names_and_passes_its_schema() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("samples")).unwrap().flatten() {
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap_or_default();
        assert!(first.starts_with("# yaml-language-server: $schema="), "{} lacks the schema line", path.display());
        let Some(kind) = text.lines().find_map(|l| l.strip_prefix("kind: ")) else { continue };
        let schema = format!("crds/schemas/{}_v1alpha1.json", kind.trim().to_lowercase());
        if !repo().join(&schema).exists() {
            continue; // a core kind: the API server checks it in the end-to-end tests
        }
        assert!(first.ends_with(&format!("../{schema}")), "{} should point at {schema}", path.display());
        let (ok, out) = check(&schema, &path);
        assert!(ok, "{} fails its schema:\n{out}", path.display());
        checked += 1;
    }
    assert!(checked >= 2, "the NodePool and PodPool samples are checked");
}

#[test]
fn a_bad_manifest_is_reported_with_its_fields() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {name: x}\nspec:\n  nodeCount: -2\n  nodeTemplate:\n    status:\n      capacity: {cpu: lots}\n  extra: 1\n",
    )
    .unwrap();
    let (ok, out) = check("crds/schemas/nodepool_v1alpha1.json", &bad);
    assert!(!ok);
    assert!(out.contains("$.spec.nodeCount"), "{out}");
    assert!(out.contains("'extra' was unexpected"), "{out}");
    assert!(out.contains("$.spec.nodeTemplate.status.capacity.cpu"), "{out}");
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {name: x}\nspec:\n  podCount: 1\n  maxUnavailable: lots\n  podTemplate:\n    spec:\n      containers: [{name: [a], image: x}]\n",
    )
    .unwrap();
    let (ok, out) = check("crds/schemas/podpool_v1alpha1.json", &pod);
    assert!(!ok);
    assert!(
        out.contains("$.spec.podTemplate.spec.containers[0].name") && out.contains("is not of type 'string'"),
        "{out}"
    );
    assert!(out.contains("$.spec.maxUnavailable"), "{out}");
}
