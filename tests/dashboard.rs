//! The Grafana dashboard in `config/grafana/` only queries metrics the operator exports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use kwok_pools::telemetry::metrics::Metrics;
use std::collections::BTreeSet;

fn dashboard() -> serde_json::Value {
    let text =
        std::fs::read_to_string(kwok_pools_test_support::repo().join("config/grafana/kwok-pools-dashboard.json"))
            .expect("config/grafana/kwok-pools-dashboard.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every PromQL expression of the dashboard (panel targets and template queries).
pub fn expressions(d: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            out.push(v["query"].as_str().unwrap().to_string());
        }
    }
    out
}

/// The metric names an expression reads (`kwok_pools_…`), as the exposition names them.
fn metric_names(expr: &str) -> Vec<String> {
    let re = regex::Regex::new(r"kwok_pools_[a-z0-9_]+").unwrap();
    re.find_iter(expr).map(|m| m.as_str().to_string()).collect()
}

/// Metric families the operator exports, with the sample names each gives. (Families with
/// labels show only once they have a series: one of each is made first.)
fn exported() -> BTreeSet<String> {
    use kwok_pools::telemetry::metrics::{AdmissionLabels, EventLabels, PoolLabels, ResultLabels};
    let m = Metrics::new(kwok_pools::kinds::register_metrics);
    let pool = PoolLabels { kind: "NodePool".into(), namespace: String::new(), name: "p".into() };
    m.write("nodes", "create", true);
    drop(m.reconcile_timer("NodePool"));
    m.reconcile_failed("NodePool", "child_write");
    m.child_write(&pool, "create", true);
    for family in [&m.pool_desired, &m.pool_ready, &m.pool_updated] {
        family.get_or_create(&pool).set(1);
    }
    let ok = ResultLabels { result: "ok".into() };
    for family in [&m.lease_renewals, &m.pod_transitions] {
        family.get_or_create(&ok).inc();
    }
    m.kind::<kwok_pools::kinds::vmipool::metrics::VmiPoolMetrics>().transitions.get_or_create(&ok).inc();
    m.admission_reviews.get_or_create(&AdmissionLabels { kind: "NodePool".into(), allowed: "true".into() }).inc();
    m.injected.get_or_create(&EventLabels { event: "pod_fail".into() }).inc();
    let text = m.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut parts = rest.split_whitespace();
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_count", "_sum"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_query_names_an_exported_metric() {
    let d = dashboard();
    let exported = exported();
    assert!(exported.contains("kwok_pools_pool_ready_replicas"), "{exported:?}");
    let exprs = expressions(&d);
    assert!(exprs.len() >= 10, "the dashboard has {} queries", exprs.len());
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "a query reads no kwok-pools metric: {expr}");
        for name in names {
            assert!(exported.contains(&name), "{name} (in `{expr}`) is not exported; exported: {exported:?}");
        }
    }
}

#[test]
fn the_dashboard_covers_pools_simulator_webhook_leader_and_shard() {
    let all = expressions(&dashboard()).join("\n");
    for family in [
        "kwok_pools_pool_ready_replicas",
        "kwok_pools_pool_child_writes_total",
        "kwok_pools_simulator_lease_lateness_seconds_bucket",
        "kwok_pools_simulator_managed_nodes",
        "kwok_pools_admission_reviews_total",
        "kwok_pools_leader",
        "kwok_pools_shard_members",
    ] {
        assert!(all.contains(family), "no panel shows {family}");
    }
}

#[test]
fn panels_have_titles_unique_ids_and_the_prometheus_datasource() {
    let d = dashboard();
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(!p["title"].as_str().unwrap().is_empty());
        assert!(ids.insert(p["id"].as_i64().unwrap()), "duplicate panel id {}", p["id"]);
        assert_eq!(p["datasource"]["type"], "prometheus");
    }
}
