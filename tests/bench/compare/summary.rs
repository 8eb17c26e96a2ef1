//! The README's side-by-side table, generated from the committed results of every regime
//! (`bench/results/<regime>/runs.csv` and `machine.json`, written by `make bench-compare`):
//! per workload the median seconds (min–max) of kwok, kwok-pools and the bare writer, liveness
//! beside them, and the ratios the targets are stated in. Self-contained (no other bench
//! module) so that `tests/readme_results.rs` checks the README against the same rendering.

use std::fmt::Write as _;
use std::path::Path;

/// The lines that fence the generated block in README.md.
pub const BEGIN: &str = "<!-- bench-compare results: generated from bench/results/<regime>/ by `cargo bench --bench compare -- --readme` (make bench-compare runs it); do not edit by hand -->";
pub const END: &str = "<!-- end of bench-compare results -->";

/// The regimes, in the order the README shows them, and what each means.
pub const REGIMES: [(&str, &str); 2] = [
    ("kubelet", "the kubelet's heartbeat: 40 s leases renewed every 10 s, node grace 40 s, monitor period 5 s"),
    ("kwokctl", "kwokctl's default heartbeat (factor 5): 200 s leases, node grace 200 s, monitor period 25 s"),
];

const TOOLS: [(&str, &str); 3] = [("kwok", "kwok v0.8.0"), ("kwok-pools", "kwok-pools"), ("bare", "bare writer")];

/// One line of runs.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub workload: String,
    pub tool: String,
    pub run: u32,
    pub objects: u32,
    /// None: not done within the run's timeout.
    pub seconds: Option<f64>,
    pub not_ready: u64,
}

/// Parses runs.csv (its header names the columns); an error names the line and the column.
pub fn parse(csv: &str) -> Result<Vec<Run>, String> {
    let mut lines = csv.lines().enumerate();
    let header: Vec<&str> = lines.next().map(|(_, h)| h.split(',').collect()).unwrap_or_default();
    let col =
        |name: &str| header.iter().position(|h| *h == name).ok_or_else(|| format!("runs.csv has no column {name:?}"));
    let (w, t, r, o, s, nr) =
        (col("workload")?, col("tool")?, col("run")?, col("objects")?, col("seconds")?, col("nodes_not_ready")?);
    let mut runs = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let get = |c: usize| f.get(c).copied().ok_or_else(|| format!("runs.csv line {}: too few columns", i + 1));
        let num = |c: usize, name: &str| -> Result<u64, String> {
            get(c)?.parse().map_err(|_| format!("runs.csv line {}: {name} {:?} is not a count", i + 1, f[c]))
        };
        let seconds = match get(s)? {
            "" => None,
            v => Some(v.parse().map_err(|_| format!("runs.csv line {}: seconds {v:?} is not a number", i + 1))?),
        };
        runs.push(Run {
            workload: get(w)?.to_string(),
            tool: get(t)?.to_string(),
            run: num(r, "run")? as u32,
            objects: num(o, "objects")? as u32,
            seconds,
            not_ready: num(nr, "nodes_not_ready")?,
        });
    }
    Ok(runs)
}

/// The median, min and max of `v` (None when empty).
pub fn median_min_max(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mid = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some((mid, v[0], v[n - 1]))
}

/// The cell of one tool: median seconds (min–max), † and the most nodes NotReady when any
/// run had some, "k of n not done" when runs timed out.
fn cell(runs: &[&Run]) -> String {
    if runs.is_empty() {
        return "—".into();
    }
    let done: Vec<f64> = runs.iter().filter_map(|r| r.seconds).collect();
    let mut text = match median_min_max(done.clone()) {
        None => "not done".into(),
        Some((m, lo, hi)) if runs.len() == 1 || (hi - lo).abs() < 0.05 => format!("{m:.1} s"),
        Some((m, lo, hi)) => format!("{m:.1} s ({lo:.1}–{hi:.1})"),
    };
    if done.len() < runs.len() && !done.is_empty() {
        let _ = write!(text, ", {} of {} not done", runs.len() - done.len(), runs.len());
    }
    let worst = runs.iter().map(|r| r.not_ready).max().unwrap_or(0);
    if worst > 0 {
        let _ = write!(text, " † ({worst} NotReady)");
    }
    text
}

fn median_rate(runs: &[&Run]) -> Option<f64> {
    median_min_max(runs.iter().filter_map(|r| r.seconds.map(|s| f64::from(r.objects) / s)).collect()).map(|m| m.0)
}

fn ratio(a: &[&Run], b: &[&Run]) -> String {
    match (median_rate(a), median_rate(b)) {
        (Some(x), Some(y)) if y > 0.0 => {
            let dagger = if a.iter().chain(b).any(|r| r.not_ready > 0) { " †" } else { "" };
            format!("{:.2}{dagger}", x / y)
        }
        _ => "—".into(),
    }
}

/// The workloads in the order they first appear.
fn workloads(runs: &[Run]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if !names.contains(&r.workload.as_str()) && !r.workload.starts_with("hold") {
            names.push(&r.workload);
        }
    }
    names
}

/// One regime's results as read from its directory.
pub struct Regime {
    pub slug: String,
    pub meaning: String,
    pub machine: String,
    pub command: Option<String>,
    /// Writes per pod of the bare writer's deletes in these results.
    pub bare_delete_writes: u32,
    pub runs: Vec<Run>,
}

/// The markdown block (without the fences).
pub fn render(regimes: &[Regime]) -> String {
    let mut md = String::new();
    for g in regimes {
        let most = g.runs.iter().map(|r| r.run).max().unwrap_or(0);
        let _ = writeln!(
            md,
            "**{}** — {} ({}; {}; `bench/results/{}/`{}):\n",
            g.slug,
            g.meaning,
            if most == 1 {
                "one run per cell".to_string()
            } else {
                format!("median of {most} runs per cell, min–max in brackets")
            },
            g.machine,
            g.slug,
            g.command.as_ref().map_or(String::new(), |c| format!("; `{c}`")),
        );
        let _ = writeln!(
            md,
            "| workload | kwok v0.8.0 | kwok-pools | bare writer | kwok-pools ÷ kwok | kwok-pools ÷ bare |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for w in workloads(&g.runs) {
            let of = |tool: &str| g.runs.iter().filter(|r| r.workload == w && r.tool == tool).collect::<Vec<_>>();
            let [kwok, pools, bare] = TOOLS.map(|(t, _)| of(t));
            let _ = writeln!(
                md,
                "| {w} | {} | {} | {}{} | {} | {} |",
                cell(&kwok),
                cell(&pools),
                cell(&bare),
                if w.starts_with("delete") && !bare.is_empty() {
                    let n = g.bare_delete_writes;
                    format!(" ({n} write{} per pod)", if n == 1 { "" } else { "s" })
                } else {
                    String::new()
                },
                ratio(&pools, &kwok),
                ratio(&pools, &bare)
            );
        }
        md.push('\n');
    }
    md.push_str(
        "† a node went NotReady while the workload ran (the most in one run in brackets); a ratio is of median \
         rates (objects per second). The bare writer writes every object in its final state with the same lease \
         work; for deletes, the user's graceful delete and (where it says two writes) the kubelet's final one.\n",
    );
    md
}

/// Reads every regime directory under `results` that has a runs.csv.
pub fn read(results: &Path) -> Result<Vec<Regime>, String> {
    let mut out = Vec::new();
    for (slug, meaning) in REGIMES {
        let dir = results.join(slug);
        let Ok(csv) = std::fs::read_to_string(dir.join("runs.csv")) else { continue };
        let runs = parse(&csv).map_err(|e| format!("{}: {e}", dir.display()))?;
        let meta: serde_json::Value = std::fs::read_to_string(dir.join("machine.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        out.push(Regime {
            slug: slug.into(),
            meaning: meaning.into(),
            machine: meta["machine"].as_str().unwrap_or("machine not recorded").into(),
            command: meta["command"].as_str().map(str::to_string),
            bare_delete_writes: meta["bare_delete_writes"].as_str().and_then(|w| w.parse().ok()).unwrap_or(1),
            runs,
        });
    }
    Ok(out)
}

/// `readme` with the fenced block replaced by `block`; an error when the fences are missing.
pub fn splice(readme: &str, block: &str) -> Result<String, String> {
    let start = readme.find(BEGIN).ok_or("README.md has no bench-compare begin marker")?;
    let end = readme[start..].find(END).map(|e| start + e).ok_or("README.md has no bench-compare end marker")?;
    Ok(format!("{}{BEGIN}\n\n{block}\n{}", &readme[..start], &readme[end..]))
}
