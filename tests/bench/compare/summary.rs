//! The README's side-by-side table, generated from the committed results of every regime
//! (`bench/results/<regime>/runs.csv` and `machine.json`, written by `make bench-compare`):
//! per workload and podCIDR path the median seconds (min–max) of the bare writer, kwok-pools
//! and kwok with the API server's CPU per object beside each, liveness, and the ratios the
//! targets are stated in (÷ the bare writer first: the limit). Self-contained (no other bench
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

/// kwok's stage set in these results (what `make kwok` installs: kwokctl's default).
pub const KWOK_STAGES: &str = "kwokctl's default stages: node/fast, node/heartbeat-with-lease, pod/fast";

/// Who gave the nodes their podCIDRs, by the workload name's suffix (results from before the
/// suffix preset them).
pub const POD_CIDRS: [(&str, &str); 2] =
    [("assigned", "controller manager (default path)"), ("preset", "preset at creation")];

/// One line of runs.csv.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub workload: String,
    pub tool: String,
    pub run: u32,
    pub objects: u32,
    /// None: not done within the run's timeout.
    pub seconds: Option<f64>,
    /// The API server's CPU seconds over the workload (None: not recorded).
    pub apiserver_cpu: Option<f64>,
    pub not_ready: u64,
    /// The neutral client's requests in flight (None: not recorded).
    pub concurrency: Option<u32>,
}

impl Run {
    /// The workload without its podCIDR suffix, and the podCIDR path.
    pub fn workload_and_path(&self) -> (&str, &str) {
        for (slug, _) in POD_CIDRS {
            if let Some(base) = self.workload.strip_suffix(slug).and_then(|b| b.strip_suffix('-')) {
                return (base, slug);
            }
        }
        (&self.workload, "preset")
    }
}

/// Parses runs.csv (its header names the columns); an error names the line and the column.
pub fn parse(csv: &str) -> Result<Vec<Run>, String> {
    let mut lines = csv.lines().enumerate();
    let header: Vec<&str> = lines.next().map(|(_, h)| h.split(',').collect()).unwrap_or_default();
    let col =
        |name: &str| header.iter().position(|h| *h == name).ok_or_else(|| format!("runs.csv has no column {name:?}"));
    let (w, t, r, o, s, nr) =
        (col("workload")?, col("tool")?, col("run")?, col("objects")?, col("seconds")?, col("nodes_not_ready")?);
    let (api, conc) = (col("apiserver_cpu_s").ok(), col("concurrency").ok());
    let mut runs = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let get = |c: usize| f.get(c).copied().ok_or_else(|| format!("runs.csv line {}: too few columns", i + 1));
        let num = |c: usize, name: &str| -> Result<u64, String> {
            get(c)?.parse().map_err(|_| format!("runs.csv line {}: {name} {:?} is not a count", i + 1, f[c]))
        };
        let number = |c: Option<usize>, name: &str| -> Result<Option<f64>, String> {
            match c.map(get).transpose()? {
                None | Some("") => Ok(None),
                Some(v) => {
                    v.parse().map(Some).map_err(|_| format!("runs.csv line {}: {name} {v:?} is not a number", i + 1))
                }
            }
        };
        let seconds = number(Some(s), "seconds")?;
        runs.push(Run {
            workload: get(w)?.to_string(),
            tool: get(t)?.to_string(),
            run: num(r, "run")? as u32,
            objects: num(o, "objects")? as u32,
            seconds,
            apiserver_cpu: number(api, "apiserver_cpu_s")?,
            not_ready: num(nr, "nodes_not_ready")?,
            // A column added later: rows written before it may end short.
            concurrency: conc.filter(|&c| c < f.len()).map(|c| num(c, "concurrency")).transpose()?.map(|c| c as u32),
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
    let per_object = runs.iter().filter_map(|r| r.apiserver_cpu.map(|c| 1000.0 * c / f64::from(r.objects.max(1))));
    if let Some((m, _, _)) = median_min_max(per_object.collect()) {
        let _ = write!(text, " · {m:.2} ms");
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

/// The workloads (without their podCIDR path) in the order they first appear.
fn workloads(runs: &[Run]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        let (w, _) = r.workload_and_path();
        if !names.contains(&w) && !w.starts_with("hold") {
            names.push(w);
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
        let mut concurrency: Vec<u32> = g.runs.iter().filter_map(|r| r.concurrency).collect();
        concurrency.sort_unstable();
        concurrency.dedup();
        let in_flight = match concurrency.as_slice() {
            [] => String::new(),
            [c] => format!("; the neutral client {c} requests in flight"),
            many => format!(
                "; the neutral client {} requests in flight",
                many.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
            ),
        };
        let _ = writeln!(
            md,
            "**{}** — {} ({}; {}{in_flight}; `bench/results/{}/`{}):\n",
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
            "| workload | podCIDRs | kwok-pools ÷ bare | bare writer | kwok-pools | kwok v0.8.0 | kwok-pools ÷ kwok |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        for w in workloads(&g.runs) {
            for (path, said) in POD_CIDRS {
                let of = |tool: &str| {
                    g.runs.iter().filter(|r| r.workload_and_path() == (w, path) && r.tool == tool).collect::<Vec<_>>()
                };
                let (kwok, pools, bare) = (of("kwok"), of("kwok-pools"), of("bare"));
                if kwok.is_empty() && pools.is_empty() && bare.is_empty() {
                    continue;
                }
                let _ = writeln!(
                    md,
                    "| {w} | {said} | {} | {}{} | {} | {} | {} |",
                    ratio(&pools, &bare),
                    cell(&bare),
                    if w.starts_with("delete") && !bare.is_empty() {
                        let n = g.bare_delete_writes;
                        format!(" ({n} write{} per pod)", if n == 1 { "" } else { "s" })
                    } else {
                        String::new()
                    },
                    cell(&pools),
                    cell(&kwok),
                    ratio(&pools, &kwok),
                );
            }
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "A cell is the median seconds, then (after ·) the API server's CPU milliseconds per object. † a node went \
         NotReady while the workload ran (the most in one run in brackets); a ratio is of median rates (objects per \
         second). The bare writer writes every object in its final state with the same lease work; for deletes, the \
         user's graceful delete and (where it says two writes) the kubelet's final one. kwok ran with {KWOK_STAGES}."
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
