//! Editor schemas: committed and fresh, and every pool sample passes a real, widely used
//! validator (check-jsonschema, installed by `make schema-tools`), which also reports a bad
//! manifest with its field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    kwok_pools_test_support::repo()
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
        let schema = format!("crds/schemas/pools.kwok.x-k8s.io/{}_v1alpha1.json", kind.trim().to_lowercase());
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
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata: {name: Not_A_Name, labels: {a: 1}}\nspec:\n  nodeCount: -2\n  nodeTemplate:\n    status:\n      capacity: {cpu: lots}\n  extra: 1\n",
    )
    .unwrap();
    let (ok, out) = check("crds/schemas/pools.kwok.x-k8s.io/nodepool_v1alpha1.json", &bad);
    assert!(!ok);
    assert!(out.contains("$.spec.nodeCount"), "{out}");
    assert!(out.contains("'extra' was unexpected"), "{out}");
    assert!(out.contains("$.spec.nodeTemplate.status.capacity.cpu"), "{out}");
    assert!(out.contains("$.metadata.name") && out.contains("$.metadata.labels.a"), "metadata is typed: {out}");
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: PodPool\nmetadata: {name: x}\nspec:\n  podCount: 1\n  maxUnavailable: lots\n  podTemplate:\n    spec:\n      containers: [{name: [a], image: x}]\n",
    )
    .unwrap();
    let (ok, out) = check("crds/schemas/pools.kwok.x-k8s.io/podpool_v1alpha1.json", &pod);
    assert!(!ok);
    assert!(
        out.contains("$.spec.podTemplate.spec.containers[0].name") && out.contains("is not of type 'string'"),
        "{out}"
    );
    assert!(out.contains("$.spec.maxUnavailable"), "{out}");
}

/// kubeconform (`make kubeconform`) with the schemas in the CRDs catalog layout, as a user
/// points it at them.
fn kubeconform(paths: &[&str]) -> (bool, String) {
    let bin = repo().join("bin/kubeconform");
    assert!(bin.exists(), "bin/kubeconform is not installed: run `make kubeconform`");
    let out = Command::new(bin)
        .args(["-strict", "-summary", "-ignore-missing-schemas", "-schema-location"])
        .arg("crds/schemas/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json")
        .args(paths)
        .current_dir(repo())
        .output()
        .expect("running kubeconform");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn kubeconform_passes_every_sample_and_names_the_fields_of_a_bad_manifest() {
    let (ok, out) = kubeconform(&["samples"]);
    assert!(ok, "{out}");
    // Every pool sample was checked against its schema (the core kinds are left to the API
    // server's dry runs in the end-to-end tests).
    let pools = std::fs::read_dir(repo().join("samples"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .filter(|t| t.contains("apiVersion: pools.kwok.x-k8s.io/"))
        .count();
    assert!(pools >= 3 && out.contains(&format!("Valid: {pools},")), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: VMIPool\nmetadata: {name: Bad_Name}\nspec:\n  vmiCount: -1\n  surprise: 1\n",
    )
    .unwrap();
    let (ok, out) = kubeconform(&[bad.to_str().unwrap()]);
    assert!(!ok, "{out}");
    for field in ["/metadata/name", "/spec/vmiCount", "'surprise' not allowed"] {
        assert!(out.contains(field), "{field}: {out}");
    }
}
