//! README.md's side-by-side table is the rendering of the committed bench-compare results
//! (`bench/results/<regime>/runs.csv`): edited by hand or left stale after new results, it
//! fails here. `cargo bench --bench compare -- --readme` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench/compare/summary.rs"]
mod summary;

const HEADER: &str = "workload,tool,run,objects,seconds,tool_cpu_s,tool_peak_rss_mib,apiserver_cpu_s,leases_on_time,leases_late,leases_missed,nodes_not_ready,concurrency";

fn regime(csv: &str) -> summary::Regime {
    summary::Regime {
        slug: "kubelet".into(),
        meaning: "test".into(),
        machine: "2 cores".into(),
        command: None,
        bare_delete_writes: 2,
        runs: summary::parse(&format!("{HEADER}\n{csv}")).unwrap(),
    }
}

/// The row of `workload` on the preset path (results without a path suffix preset it).
fn row<'a>(md: &'a str, workload: &str) -> &'a str {
    row_of(md, workload, "preset")
}

fn row_of<'a>(md: &'a str, workload: &str, path: &str) -> &'a str {
    md.lines()
        .find(|l| l.starts_with(&format!("| {workload} | {path}")))
        .unwrap_or_else(|| panic!("no row {workload} ({path}) in\n{md}"))
}

#[test]
fn the_readme_shows_the_committed_results() {
    let repo = kwok_pools_test_support::repo();
    let regimes = summary::read(&repo.join("bench/results")).unwrap();
    assert!(!regimes.is_empty(), "no bench/results/<regime>/runs.csv committed");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let expected = summary::splice(&readme, &summary::render(&regimes)).unwrap();
    assert!(
        readme == expected,
        "README.md's side-by-side table differs from bench/results/: run `cargo bench --bench compare -- --readme` and commit README.md"
    );
}

#[test]
fn cells_are_medians_with_their_range_and_ratios_of_median_rates() {
    let md = summary::render(&[regime(
        "nodes-5000,kwok,1,5000,100.0,,,1,0,0,0,0\n\
         nodes-5000,kwok,2,5000,120.0,,,1,0,0,0,0\n\
         nodes-5000,kwok,3,5000,90.0,,,1,0,0,0,0\n\
         nodes-5000,kwok-pools,1,5000,50.0,,,1,0,0,0,0\n\
         nodes-5000,kwok-pools,2,5000,40.0,,,1,0,0,0,0\n\
         nodes-5000,kwok-pools,3,5000,45.0,,,1,0,0,0,0\n\
         nodes-5000,bare,1,5000,40.5,,,1,0,0,0,0\n",
    )]);
    let r = row(&md, "nodes-5000");
    // Each with the API server's CPU per object: 1 s over 5,000 nodes.
    assert!(r.contains("| 100.0 s (90.0–120.0) · 0.20 ms |"), "{r}");
    assert!(r.contains("| 45.0 s (40.0–50.0) · 0.20 ms |"), "{r}");
    assert!(r.contains("| 40.5 s · 0.20 ms |"), "{r}");
    // ÷ 5000/40.5 first (the headline), then 5000/45 ÷ 5000/100.
    assert!(r.contains("| 0.90 | 40.5 s"), "{r}");
    assert!(r.ends_with("| 2.22 |"), "{r}");
    assert!(md.contains("median of 3 runs per cell"), "{md}");
}

#[test]
fn a_run_with_nodes_not_ready_is_marked_and_so_are_its_ratios() {
    let md = summary::render(&[regime(
        "pods-10000,kwok,1,10000,190.5,,,1,0,1742,11927,3978\n\
         pods-10000,kwok-pools,1,10000,36.5,,,1,2563,8249,0,0\n\
         pods-10000,bare,1,10000,59.2,,,1,22590,1360,0,0\n",
    )]);
    let r = row(&md, "pods-10000");
    assert!(r.contains("| 190.5 s † (3978 NotReady) · 0.10 ms |"), "{r}");
    assert!(r.contains("| 36.5 s · 0.10 ms |"), "{r}");
    assert!(r.contains("| 1.62 | 59.2 s"), "{r}");
    assert!(r.ends_with("| 5.22 † |"), "{r}");
}

#[test]
fn the_bare_writers_delete_says_how_many_writes_it_made() {
    let md = summary::render(&[regime(
        "delete-10000,kwok-pools,1,10000,106.2,,,1,52,27311,0,0\n\
         delete-10000,bare,1,10000,100.4,,,1,45923,0,0,0\n",
    )]);
    let r = row(&md, "delete-10000");
    assert!(r.contains("| 100.4 s · 0.10 ms (2 writes per pod) |"), "{r}");
    assert!(r.contains("| 0.95 | 100.4 s"), "{r}");
    assert!(r.ends_with("| — |"), "{r}");
}

#[test]
fn runs_that_timed_out_are_said_and_hold_windows_are_not_rows() {
    let md = summary::render(&[regime(
        "nodes-10000,kwok,1,10000,,,,1,0,0,0,0\n\
         nodes-10000,kwok-pools,1,10000,100.0,,,1,0,0,0,0\n\
         nodes-10000,kwok-pools,2,10000,,,,1,0,0,0,0\n\
         hold-10000,kwok-pools,1,10000,600.0,,,1,0,0,0,0\n",
    )]);
    let r = row(&md, "nodes-10000");
    assert!(r.contains("| not done · 0.10 ms |"), "{r}");
    assert!(r.contains("| 100.0 s, 1 of 2 not done · 0.10 ms |"), "{r}");
    assert!(r.contains("| — | — |"), "no bare runs: {r}");
    assert!(r.ends_with("| — |"), "no kwok rate: {r}");
    assert!(!md.contains("| hold-10000 |"), "{md}");
}

#[test]
fn each_podcidr_path_is_a_row_of_its_own_and_the_client_is_named() {
    let md = summary::render(&[regime(&format!(
        "{}\n{}\n{}\n{}\n",
        "nodes-5000-assigned,kwok-pools,1,5000,20.0,,,25,0,0,0,0,128",
        "nodes-5000-assigned,bare,1,5000,10.0,,,10,0,0,0,0,128",
        "nodes-5000-preset,kwok-pools,1,5000,10.0,,,12.5,0,0,0,0,128",
        "nodes-5000-preset,bare,1,5000,10.0,,,12.5,0,0,0,0,128",
    ))]);
    let assigned = row_of(&md, "nodes-5000", "controller manager");
    assert!(assigned.contains("| 0.50 | 10.0 s · 2.00 ms | 20.0 s · 5.00 ms |"), "{assigned}");
    let preset = row_of(&md, "nodes-5000", "preset");
    assert!(preset.contains("| 1.00 | 10.0 s · 2.50 ms | 10.0 s · 2.50 ms |"), "{preset}");
    assert!(md.contains("128 requests in flight"), "{md}");
    assert!(!md.contains("nodes-5000-assigned"), "the path is a column, not part of the name: {md}");
}

#[test]
fn a_malformed_results_file_names_the_line_and_column() {
    let err = summary::parse(&format!("{HEADER}\nnodes-5000,kwok,1,5000,fast,,,1,0,0,0,0,64\n")).unwrap_err();
    assert!(err.contains("line 2") && err.contains("seconds"), "{err}");
    let err = summary::parse(&format!("{HEADER}\nnodes-5000,kwok,1,5000,1.0,,,1,0,0,0,0,many\n")).unwrap_err();
    assert!(err.contains("line 2") && err.contains("concurrency"), "{err}");
    let err = summary::parse("workload,tool\nx,y\n").unwrap_err();
    assert!(err.contains("no column"), "{err}");
}

#[test]
fn splicing_keeps_the_rest_of_the_readme_and_needs_both_fences() {
    let readme = format!("# t\n\nbefore\n{}\n\nold table\n{}\nafter\n", summary::BEGIN, summary::END);
    let out = summary::splice(&readme, "NEW\n").unwrap();
    assert!(out.starts_with("# t\n\nbefore\n"), "{out}");
    assert!(out.contains("NEW\n") && !out.contains("old table"), "{out}");
    assert!(out.ends_with(&format!("{}\nafter\n", summary::END)), "{out}");
    assert_eq!(summary::splice(&out, "NEW\n").unwrap(), out, "splicing is stable");
    assert!(summary::splice("# no fences\n", "x").is_err());
}
