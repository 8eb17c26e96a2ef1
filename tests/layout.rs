//! The source tree's shape: no two files of `src/` import each other, directly or round a
//! longer loop (issue 23: a reader follows imports one way, from a kind to the shared rooms and
//! from the rooms to the leaves). An edge is any `crate::`, `super::` or `self::` path in a
//! file's code, resolved to the file that defines the module it names; a `mod.rs` pointing into
//! its own directory (declaring or re-exporting its children) is the room's map, not an import.
//! Test modules (`#[cfg(test)]` to the end of a file, `*_tests.rs`, fixtures) are left out.
//!
//! Beside the loops, the rooms' layering ([`MAY_IMPORT`]): each room (a directory or file of
//! `src/`, a kind's directory, the registry) names the rooms it may import; everything points
//! one way, downward, and the shared rooms name no kind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs` are `["a", "b"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The file that defines the deepest existing module along `path` (segments from the crate root).
fn resolve(src: &Path, path: &[String]) -> PathBuf {
    let (mut dir, mut file) = (src.to_path_buf(), src.join("lib.rs"));
    for seg in path {
        let (flat, nested) = (dir.join(format!("{seg}.rs")), dir.join(seg).join("mod.rs"));
        if flat.is_file() {
            file = flat;
        } else if nested.is_file() {
            file = nested;
        } else {
            break;
        }
        dir = dir.join(seg);
    }
    file
}

/// The code of a file without its comments and its trailing test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or("");
            if next.starts_with("mod ") || next.starts_with("#[path") {
                break;
            }
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" // ").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Every path a use tree or an expression names, expanded: `crate::a::{b, c::d}` gives
/// `crate::a::b` and `crate::a::c::d`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let boundary = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        let rest: String = chars[i..chars.len().min(i + 7)].iter().collect();
        let root = ["crate::", "super::", "self::"].into_iter().find(|r| rest.starts_with(r));
        if let (true, Some(root)) = (boundary, root) {
            let mut prefix = vec![root.trim_end_matches("::").to_string()];
            i += root.len();
            i = tree(&chars, i, &mut prefix, &mut found);
        } else {
            i += 1;
        }
    }
    found
}

/// Parses a path (or a `{…}` group of them) at `i` after `prefix`; returns where it ended.
fn tree(chars: &[char], mut i: usize, prefix: &mut Vec<String>, found: &mut Vec<Vec<String>>) -> usize {
    let depth = prefix.len();
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i < chars.len() && chars[i] == '{' {
            i += 1;
            loop {
                i = tree(chars, i, prefix, found);
                while i < chars.len() && chars[i].is_whitespace() {
                    i += 1;
                }
                match chars.get(i) {
                    Some(',') => i += 1,
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    _ => break,
                }
                while i < chars.len() && chars[i].is_whitespace() {
                    i += 1;
                }
                if chars.get(i) == Some(&'}') {
                    i += 1;
                    break;
                }
            }
            prefix.truncate(depth);
            return i;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if i == start {
            break;
        }
        prefix.push(chars[start..i].iter().collect());
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            break;
        }
    }
    found.push(prefix.clone());
    prefix.truncate(depth);
    i
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !(name.ends_with("_tests") || name == "tests" || name == "fixtures" || name == "main") {
                out.push(path);
            }
        }
    }
}

/// The import graph of `src/`: file → the files it names.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges = BTreeMap::new();
    for file in files {
        let module = module_of(src, &file);
        let is_map = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let text = std::fs::read_to_string(&file).unwrap();
        let mut targets = BTreeSet::new();
        for path in paths(&code(&text)) {
            let absolute: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "self" => module.iter().chain(&path[1..]).cloned().collect(),
                _ => {
                    // `super::super::x`: up one module per `super` (a mod.rs file is its directory).
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    let mut base = module.clone();
                    base.truncate(base.len().saturating_sub(ups));
                    base.into_iter().chain(path[ups..].iter().cloned()).collect()
                }
            };
            let target = resolve(src, &absolute);
            let into_own_room = is_map && target.starts_with(file.parent().unwrap());
            if target != file && !into_own_room {
                targets.insert(target);
            }
        }
        edges.insert(file, targets);
    }
    edges
}

/// The strongly connected sets of more than one file (Tarjan).
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, (usize, usize)>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, (s.next, s.next));
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.edges.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.index[w].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.on_stack.contains(w) {
                let low = s.index[w].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.clone());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// The rooms each room may import besides itself: the layering, bottom up. A room is a
/// directory or file directly under `src/`; a kind's directory is `kinds/*`, the registry
/// (`src/kinds/mod.rs`) is `kinds`; `deploy::rule` is the leaf every room declares the rights it
/// needs with (the rest of `deploy/` generates the install from the registry).
const MAY_IMPORT: &[(&str, &[&str])] = &[
    // Leaves: API primitives and process-wide helpers.
    ("api", &[]),
    ("sync", &[]),
    ("backoff", &["sync"]),
    ("certs", &[]),
    ("dedicated", &[]),
    ("setup", &[]),
    ("sync", &[]),
    ("telemetry", &[]),
    ("netlimit", &[]),
    ("fdlimit", &[]),
    ("deploy::rule", &[]),
    // The shared machinery every simulation is built on.
    ("ipam", &["api", "sync"]),
    ("informer", &["api", "backoff", "sync", "telemetry"]),
    ("shard", &["api", "backoff", "sync", "telemetry"]),
    ("simulator", &["api", "backoff", "informer", "shard", "sync", "telemetry"]),
    // The simulated kubelet: names no pool and no kind.
    (
        "kubelet",
        &[
            "api",
            "backoff",
            "certs",
            "deploy::rule",
            "fdlimit",
            "informer",
            "ipam",
            "netlimit",
            "setup",
            "shard",
            "simulator",
            "sync",
            "telemetry",
        ],
    ),
    // Simulated storage: a CSI driver's controller and node sides, the kubelet's volume view.
    ("storage", &["api", "backoff", "deploy::rule", "informer", "kubelet", "shard", "simulator", "sync", "telemetry"]),
    // The pool core and the traits a kind implements.
    (
        "pool",
        &[
            "api",
            "backoff",
            "deploy::rule",
            "informer",
            "ipam",
            "kubelet",
            "setup",
            "shard",
            "simulator",
            "sync",
            "telemetry",
        ],
    ),
    // A kind: everything shared, never another kind, never the process above.
    (
        "kinds/*",
        &[
            "api",
            "backoff",
            "certs",
            "deploy::rule",
            "informer",
            "ipam",
            "kubelet",
            "pool",
            "setup",
            "shard",
            "simulator",
            "sync",
            "telemetry",
        ],
    ),
    // The registry: the kinds, and what a kind is.
    // Lifecycle policies: selection, status, their engine view (under the kinds' registry,
    // which lists every CRD, theirs too).
    ("policy", &["api", "backoff", "deploy::rule", "informer", "kinds/*", "pool", "simulator", "sync", "telemetry"]),
    ("kinds", &["kinds/*", "api", "policy", "pool", "telemetry"]),
    // kwok's Stage files read into policies (pure; the command does the I/O).
    ("stage", &["api", "policy"]),
    // What iterates the registry (never a kind directly).
    (
        "admission",
        &["api", "backoff", "certs", "informer", "kinds", "netlimit", "policy", "pool", "setup", "sync", "telemetry"],
    ),
    (
        "deploy",
        &["admission", "api", "deploy::rule", "informer", "kinds", "kubelet", "policy", "pool", "simulator", "storage"],
    ),
    ("cluster", &["api", "certs", "kinds", "setup", "sync"]),
    ("leader", &["admission", "api", "backoff", "dedicated", "simulator", "sync", "telemetry"]),
    // The process and its command line.
    (
        "operator",
        &[
            "admission",
            "api",
            "backoff",
            "dedicated",
            "informer",
            "kinds",
            "kubelet",
            "leader",
            "policy",
            "pool",
            "setup",
            "shard",
            "simulator",
            "storage",
            "sync",
            "telemetry",
        ],
    ),
    (
        "cli",
        &[
            "admission",
            "api",
            "certs",
            "cluster",
            "deploy",
            "deploy::rule",
            "informer",
            "kinds",
            "kubelet",
            "leader",
            "operator",
            "policy",
            "pool",
            "stage",
            "setup",
            "shard",
            "simulator",
            "sync",
            "telemetry",
        ],
    ),
];

/// The room of a file of `src/` (see [`MAY_IMPORT`]); `None` for the crate root.
fn room(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["lib.rs" | "main.rs"] => None,
        ["kinds", "mod.rs"] => Some("kinds".into()),
        ["kinds", _, ..] => Some("kinds/*".into()),
        ["deploy", "rule.rs"] => Some("deploy::rule".into()),
        [first, ..] => Some(first.trim_end_matches(".rs").to_string()),
        [] => None,
    }
}

/// Every import that breaks the layering: a room importing one it may not, a shared room
/// importing a kind, a kind importing another kind.
fn inversions(src: &Path, edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<String> {
    let rules: BTreeMap<&str, &[&str]> = MAY_IMPORT.iter().copied().collect();
    let kind_dir = |f: &Path| {
        let rel = f.strip_prefix(src).ok()?;
        let mut it = rel.iter();
        (it.next()? == "kinds").then(|| it.next().map(|d| d.to_string_lossy().into_owned())).flatten()
    };
    let mut found = Vec::new();
    for (file, targets) in edges {
        let Some(from) = room(src, file) else { continue };
        let Some(allowed) = rules.get(from.as_str()) else {
            found.push(format!("{}: room {from} has no rule in MAY_IMPORT", file.display()));
            continue;
        };
        for target in targets {
            let Some(to) = room(src, target) else { continue };
            let same_kind = from == "kinds/*" && to == "kinds/*" && kind_dir(file) == kind_dir(target);
            if to == from && (from != "kinds/*" || same_kind) {
                continue;
            }
            if !allowed.contains(&to.as_str()) || (from == "kinds/*" && !same_kind && to == "kinds/*") {
                let shown = |f: &Path| f.strip_prefix(src).unwrap_or(f).display().to_string();
                found.push(format!("{} ({from}) imports {} ({to})", shown(file), shown(target)));
            }
        }
    }
    found
}

#[test]
fn every_room_imports_only_the_rooms_below_it() {
    let src = kwok_pools_test_support::repo().join("src");
    let found = inversions(&src, &graph(&src));
    assert!(
        found.is_empty(),
        "imports against the layering (tests/layout.rs MAY_IMPORT; move what both need down a room):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_planted_inversion_is_caught() {
    let src = Path::new("/r/src");
    let edge = |a: &str, b: &[&str]| (src.join(a), b.iter().map(|t| src.join(t)).collect::<BTreeSet<_>>());
    let edges: BTreeMap<_, _> = [
        edge("api/common.rs", &["pool/mod.rs"]),
        edge("kubelet/pods/mod.rs", &["kinds/nodepool/api.rs", "simulator/mod.rs"]),
        edge("kinds/podpool/kind.rs", &["kinds/nodepool/api.rs", "kinds/podpool/api.rs", "kinds/mod.rs"]),
        edge("admission/review.rs", &["kinds/mod.rs", "cli/run.rs"]),
        edge("pool/mod.rs", &["kubelet/mod.rs", "deploy/rule.rs"]),
        edge("newroom/x.rs", &["api/common.rs"]),
    ]
    .into();
    let found = inversions(src, &edges);
    assert_eq!(
        found,
        [
            "admission/review.rs (admission) imports cli/run.rs (cli)",
            "api/common.rs (api) imports pool/mod.rs (pool)",
            "kinds/podpool/kind.rs (kinds/*) imports kinds/mod.rs (kinds)",
            "kinds/podpool/kind.rs (kinds/*) imports kinds/nodepool/api.rs (kinds/*)",
            "kubelet/pods/mod.rs (kubelet) imports kinds/nodepool/api.rs (kinds/*)",
            "/r/src/newroom/x.rs: room newroom has no rule in MAY_IMPORT",
        ]
    );
}

#[test]
fn use_trees_expand_to_every_path_they_name() {
    let found = paths("use crate::a::{b, c::{d, e}};\nlet x = super::super::f::g(1);\nfoo::crate_x::y;");
    let joined: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["crate::a::b", "crate::a::c::d", "crate::a::c::e", "super::super::f::g"]);
}

#[test]
fn a_loop_of_imports_is_found() {
    let edge = |a: &str, b: &[&str]| (PathBuf::from(a), b.iter().map(PathBuf::from).collect::<BTreeSet<_>>());
    let edges: BTreeMap<_, _> = [edge("a", &["b"]), edge("b", &["c"]), edge("c", &["a"]), edge("d", &["a"])].into();
    assert_eq!(cycles(&edges), vec![vec![PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c")]]);
}

#[test]
fn no_source_files_import_each_other() {
    let src = kwok_pools_test_support::repo().join("src");
    let edges = graph(&src);
    assert!(edges.len() > 50, "the graph covers the tree ({} files)", edges.len());
    let found = cycles(&edges);
    let shown: Vec<String> = found
        .iter()
        .map(|set| {
            let names: Vec<String> = set.iter().map(|f| f.strip_prefix(&src).unwrap().display().to_string()).collect();
            names.join(" ↔ ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "files of src/ that import each other (move what both need into a leaf module):\n  {}",
        shown.join("\n  ")
    );
}
