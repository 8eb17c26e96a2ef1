//! The report: per workload a markdown table of medians (min–max) per tool, the ratios the
//! targets are stated in, the API requests by verb and resource, one CSV row per outcome and
//! the median run's time series as CSV, plotted to PNG by `hack/plot-compare.py`.

use super::Args;
use super::tools::Tool;
use super::workloads::Outcome;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The median, min and max of the finite values of `v`.
fn median_min_max(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    v.retain(|x| x.is_finite());
    super::summary::median_min_max(v)
}

fn cell(v: Vec<f64>, digits: usize) -> String {
    match median_min_max(v) {
        None => "—".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < f64::EPSILON => format!("{m:.digits$}"),
        Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

fn median(v: Vec<f64>) -> Option<f64> {
    median_min_max(v).map(|(m, _, _)| m)
}

fn workloads(outcomes: &[Outcome]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for o in outcomes {
        if !names.contains(&o.workload) {
            names.push(o.workload.clone());
        }
    }
    names
}

fn of<'a>(outcomes: &'a [Outcome], workload: &str, tool: Tool) -> Vec<&'a Outcome> {
    outcomes.iter().filter(|o| o.workload == workload && o.tool == tool).collect()
}

fn rate(o: &Outcome) -> f64 {
    o.seconds.map_or(f64::NAN, |s| f64::from(o.objects) / s)
}

/// Why kwok's nodes may go NotReady here (printed under its command line).
pub const KWOK_LIVENESS: &str = "kwok's liveness: kwok v0.8.0 renews node leases with 4 workers (`nodeLeaseParallelism`, \
its default; kwokctl sets no other), each node's next renewal a quarter of the lease after its last one finished. \
Its renewals fall behind once 4 ÷ the API server's latency is less than the renewals the nodes need (5,000 nodes \
with 40 s leases: 500/s, 8 ms each), which is what pods flowing beside them do. kwokctl at heartbeat factor 1 sets \
the controller manager's grace to the lease itself (40 s), so a renewal 40 s late marks the node NotReady; the \
measurement quoted in issue 29 ran under the control plane's default grace (50 s in 1.37), 10 s more slack, and \
saw no node NotReady. `--grace 50` runs this bench that way (a diagnostic; its results belong outside \
bench/results).\n\n";

/// Writes compare.md, runs.csv and the median runs' series.
pub fn write(out: &Path, args: &Args, outcomes: &[Outcome]) {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# kwok-pools vs kwok {} vs bare writer — {} heartbeat\n",
        super::tools::KWOK_VERSION,
        args.regime.slug()
    );
    let lease = args.regime.lease_seconds();
    let _ = writeln!(
        md,
        "Machine: {}. {}. Control plane built by `make controlplane`; each tool in a fresh local cluster per workload \
         group; objects created by one neutral parallel client ({} requests in flight, no rate limit). Cells: median \
         (min–max) over {} run(s). Lease renewals: on time within 1.5× the kubelet's renewal interval (a quarter of the \
         {lease} s lease), late within the lease, missed after it expired. A rate reached while nodes went NotReady is \
         marked †, in the tables and in the ratios.\n",
        super::harness::machine(),
        args.regime.describe(args.grace),
        args.concurrency,
        args.runs
    );
    if let Ok(kwok) = std::fs::read_to_string(out.join("kwok-command.txt")) {
        let _ = writeln!(md, "kwok ran as:\n\n```\n{}\n```\n", kwok.trim());
        md.push_str(KWOK_LIVENESS);
    }
    for w in workloads(outcomes) {
        let _ = writeln!(md, "## {w}\n");
        let _ = writeln!(
            md,
            "| tool | runs | seconds | objects/s | tool CPU s | tool peak RSS MiB | API server CPU s | API server CPU ms/object | leases on time / late / missed | nodes NotReady |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
        for &tool in &args.tools {
            let os = of(outcomes, &w, tool);
            if os.is_empty() {
                continue;
            }
            let done = os.iter().filter(|o| o.seconds.is_some()).count();
            let leases = if os.iter().any(|o| o.leases.is_some()) {
                let l = |f: fn(&super::observe::LeaseStats) -> u64| {
                    cell(os.iter().filter_map(|o| o.leases.as_ref().map(|s| f(s) as f64)).collect(), 0)
                };
                format!("{} / {} / {}", l(|s| s.on_time), l(|s| s.late), l(|s| s.missed))
            } else {
                "—".into()
            };
            let _ = writeln!(
                md,
                "| {} | {done}/{} done | {} | {} | {} | {} | {} | {} | {leases} | {} |",
                tool.label(),
                os.len(),
                cell(os.iter().map(|o| o.seconds.unwrap_or(f64::NAN)).collect(), 1) + dagger(&os),
                cell(os.iter().map(|o| rate(o)).collect(), 0) + dagger(&os),
                cell(os.iter().filter_map(|o| o.tool_cpu).collect(), 1),
                cell(os.iter().filter_map(|o| o.tool_rss).collect(), 0),
                cell(os.iter().map(|o| o.apiserver_cpu).collect(), 1),
                cell(os.iter().map(|o| 1000.0 * o.apiserver_cpu / f64::from(o.objects.max(1))).collect(), 2),
                if os.iter().any(|o| o.leases.is_some()) {
                    cell(os.iter().map(|o| o.not_ready as f64).collect(), 0)
                } else {
                    "—".into()
                },
            );
        }
        md.push('\n');
    }
    ratios(&mut md, outcomes);
    request_tables(&mut md, args, outcomes);
    let _ = std::fs::write(out.join("compare.md"), md);
    let _ = std::fs::write(out.join("runs.csv"), runs_csv(args, outcomes));
    write_series(out, args, outcomes);
}

/// † when a node went NotReady in any of the runs.
fn dagger(os: &[&Outcome]) -> &'static str {
    if os.iter().any(|o| o.not_ready > 0) { " †" } else { "" }
}

fn ratios(md: &mut String, outcomes: &[Outcome]) {
    let _ = writeln!(md, "## Ratios (medians)\n");
    let _ = writeln!(
        md,
        "| workload | rate ÷ kwok | rate ÷ bare writer | tool CPU ÷ kwok | tool RSS ÷ kwok | API server CPU per object ÷ kwok |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let m = |w: &str, t: Tool, f: &dyn Fn(&Outcome) -> Option<f64>| {
        median(of(outcomes, w, t).into_iter().filter_map(f).collect())
    };
    let show = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    };
    for w in workloads(outcomes).iter().filter(|w| !w.starts_with("hold")) {
        let r = |t| m(w, t, &|o| o.seconds.map(|_| rate(o)));
        let cpu = |t| m(w, t, &|o| o.tool_cpu);
        let rss = |t| m(w, t, &|o| o.tool_rss);
        let api = |t| m(w, t, &|o| Some(o.apiserver_cpu / f64::from(o.objects.max(1))));
        let mark = |a: Tool, b: Tool| {
            let both: Vec<&Outcome> = of(outcomes, w, a).into_iter().chain(of(outcomes, w, b)).collect();
            dagger(&both)
        };
        let _ = writeln!(
            md,
            "| {w} | {}{} | {}{} | {} | {} | {} |",
            show(r(Tool::KwokPools), r(Tool::Kwok)),
            mark(Tool::KwokPools, Tool::Kwok),
            show(r(Tool::KwokPools), r(Tool::Bare)),
            mark(Tool::KwokPools, Tool::Bare),
            show(cpu(Tool::KwokPools), cpu(Tool::Kwok)),
            show(rss(Tool::KwokPools), rss(Tool::Kwok)),
            show(api(Tool::KwokPools), api(Tool::Kwok)),
        );
    }
    md.push('\n');
}

/// Run 1 of every workload and tool, in workload then tool order (the per-request lists).
fn first_runs<'a>(args: &'a Args, outcomes: &'a [Outcome]) -> impl Iterator<Item = (String, Tool, &'a Outcome)> + 'a {
    workloads(outcomes).into_iter().flat_map(move |w| {
        args.tools.iter().filter_map(move |&tool| {
            let o = outcomes.iter().find(|o| o.workload == w && o.tool == tool && o.run == 1)?;
            Some((w.clone(), tool, o))
        })
    })
}

fn request_tables(md: &mut String, args: &Args, outcomes: &[Outcome]) {
    let _ = writeln!(md, "## API requests by verb and resource (run 1, all clients, the ten most frequent)\n");
    for (w, tool, o) in first_runs(args, outcomes) {
        let mut top: Vec<(&String, &f64)> = o.requests.iter().filter(|(k, _)| !k.starts_with("WATCH")).collect();
        top.sort_by(|a, b| b.1.total_cmp(a.1));
        let total: f64 = o.requests.values().sum();
        let list: Vec<String> = top.iter().take(10).map(|(k, v)| format!("{k} {v:.0}")).collect();
        let _ = writeln!(md, "- {w}, {}: {total:.0} in all — {}", tool.label(), list.join(", "));
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "## Watch events sent and request bodies (run 1): the API server's work beyond the request count\n\n\
         Watch events: what the API server sent to every watcher (one object change seen by four watchers is four), \
         the five largest. Bodies: the mean size of the requests that carry one (creates, patches), the five most \
         frequent.\n"
    );
    for (w, tool, o) in first_runs(args, outcomes) {
        let mut events: Vec<(&String, &f64)> = o.watch_events.iter().collect();
        events.sort_by(|a, b| b.1.total_cmp(a.1));
        let events: Vec<String> = events.iter().take(5).map(|(k, v)| format!("{k} {v:.0}")).collect();
        let mut bodies: Vec<(&String, &(f64, f64))> = o.bodies.iter().collect();
        bodies.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
        let bodies: Vec<String> =
            bodies.iter().take(5).map(|(k, (bytes, n))| format!("{k} {n:.0} × {:.0} B", bytes / n.max(1.0))).collect();
        let _ = writeln!(
            md,
            "- {w}, {}: watch events {} — bodies {}",
            tool.label(),
            if events.is_empty() { "not recorded".into() } else { events.join(", ") },
            if bodies.is_empty() { "not recorded".into() } else { bodies.join(", ") }
        );
    }
    md.push('\n');
}

fn runs_csv(args: &Args, outcomes: &[Outcome]) -> String {
    let mut s = String::from(
        "workload,tool,run,objects,seconds,tool_cpu_s,tool_peak_rss_mib,apiserver_cpu_s,leases_on_time,leases_late,leases_missed,nodes_not_ready,concurrency\n",
    );
    for o in outcomes {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let l = o.leases.unwrap_or_default();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.3},{},{},{},{},{}",
            o.workload,
            o.tool.slug(),
            o.run,
            o.objects,
            opt(o.seconds),
            opt(o.tool_cpu),
            opt(o.tool_rss),
            o.apiserver_cpu,
            l.on_time,
            l.late,
            l.missed,
            o.not_ready,
            args.concurrency
        );
    }
    s
}

/// The series of the median run (by seconds) of every workload and tool.
fn write_series(out: &Path, args: &Args, outcomes: &[Outcome]) {
    for w in workloads(outcomes) {
        for &tool in &args.tools {
            let mut os = of(outcomes, &w, tool);
            if os.is_empty() {
                continue;
            }
            os.sort_by(|a, b| a.seconds.unwrap_or(f64::MAX).total_cmp(&b.seconds.unwrap_or(f64::MAX)));
            let o = os[os.len() / 2];
            let mut s = String::from("t,done,tool_cpu_s,tool_rss_mib,apiserver_cpu_s\n");
            for x in &o.series {
                let _ = writeln!(s, "{:.2},{},{:.3},{:.1},{:.3}", x.t, x.done, x.tool_cpu, x.tool_rss, x.apiserver_cpu);
            }
            let _ = std::fs::write(out.join(format!("series-{w}-{}.csv", tool.slug())), s);
        }
    }
    let mut meta: BTreeMap<&str, String> = BTreeMap::new();
    meta.insert("machine", super::harness::machine());
    meta.insert("runs", args.runs.to_string());
    meta.insert("concurrency", args.concurrency.to_string());
    meta.insert("bare_delete_writes", super::writer::BARE_DELETE_WRITES.to_string());
    let argv: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    meta.insert("command", format!("cargo bench --bench compare -- {}", argv.join(" ")).trim_end().to_string());
    let _ = std::fs::write(out.join("machine.json"), serde_json::to_string_pretty(&meta).unwrap_or_default());
}

/// Draws the PNG plots with matplotlib (`make plot-tools` installs it into the cached venv).
pub fn plot(out: &Path) {
    let python = dirs::home_dir().unwrap_or_default().join(".cache/kwok-pools/venv/bin/python");
    let script = super::harness::repo().join("hack/plot-compare.py");
    match std::process::Command::new(&python).arg(&script).arg(out).status() {
        Ok(s) if s.success() => {}
        _ => eprintln!(
            "  ! no plots: run `make plot-tools` (matplotlib in {}) and `{} {} {}`",
            python.display(),
            python.display(),
            script.display(),
            out.display()
        ),
    }
}
