//! `kwok-pools status`: the pools (ready/desired, problems), which replica leads, and which
//! simulator replica simulates how many nodes.

use crate::kinds::{self, Visitor};
use crate::pool::PoolKind;
use crate::shard::members::Member;
use crate::shard::membership::{NODES_ANNOTATION, SHARD_LABEL};
use clap::Args;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use std::fmt::Write;

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The operator instance (`--instance` of `kwok-pools run`).
    #[arg(long, default_value = "kwok-pools")]
    pub instance: String,
    /// Where its leader and shard Leases live (`--lease-namespace`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,
}

/// One pool's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRow {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub ready: i32,
    pub desired: i32,
    pub problem: String,
    /// The running instance that handles it (`None`: none does).
    pub instance: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// One simulator replica's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    pub identity: String,
    pub nodes: String,
    pub live: bool,
    pub renewed_secs_ago: i64,
}

struct ListPools<'a> {
    client: &'a Client,
    lists: Vec<BoxFuture<'static, anyhow::Result<Vec<PoolRow>>>>,
}

impl Visitor for ListPools<'_> {
    fn visit<P: PoolKind>(&mut self) {
        let api: Api<P> = Api::all(self.client.clone());
        self.lists.push(Box::pin(async move {
            let kind = kinds::kind_name::<P>().to_string();
            let pools = api.list(&ListParams::default()).await.map_err(|e| anyhow::anyhow!("listing {kind}s: {e}"))?;
            Ok(pools.items.iter().map(|p| row(&kind, p)).collect())
        }));
    }
}

fn row<P: PoolKind>(kind: &str, pool: &P) -> PoolRow {
    let status = pool.pool_status();
    let problem = status
        .and_then(|s| {
            s.conditions.iter().find(|c| c.type_ == crate::api::common::conditions::DEGRADED && c.status == "True")
        })
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    PoolRow {
        kind: kind.into(),
        namespace: pool.namespace().unwrap_or_default(),
        name: pool.name_any(),
        ready: status.map_or(0, |s| s.ready_replicas),
        desired: i32::try_from(pool.count()).unwrap_or(i32::MAX),
        problem,
        instance: None,
        labels: pool.labels().clone(),
    }
}

/// The simulator replicas, from their membership Leases.
pub fn members(leases: &[Lease], now: Timestamp) -> Vec<MemberRow> {
    let mut rows: Vec<MemberRow> = leases
        .iter()
        .filter_map(|l| {
            // A one-off report: the renew time against this machine's clock (the operator
            // itself judges members by what it has seen change, never so).
            let m = Member::from_lease(l, std::time::Instant::now())?;
            let ago = now.duration_since(m.renewed).as_secs();
            Some(MemberRow {
                identity: m.identity,
                nodes: l.annotations().get(NODES_ANNOTATION).cloned().unwrap_or_else(|| "?".into()),
                live: u64::try_from(ago).is_ok_and(|a| a < m.duration.as_secs()),
                renewed_secs_ago: ago,
            })
        })
        .collect();
    rows.sort_by(|a, b| a.identity.cmp(&b.identity));
    rows
}

/// The whole report as text.
pub fn render(pools: &[PoolRow], leader: Option<&str>, members: &[MemberRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:<16} {:<28} {:>15}  {:<16} PROBLEM",
        "KIND", "NAMESPACE", "NAME", "READY/DESIRED", "INSTANCE"
    );
    for p in pools {
        let ns = if p.namespace.is_empty() { "-" } else { p.namespace.as_str() };
        let problem = match &p.instance {
            Some(_) => p.problem.clone(),
            None => format!("Unhandled: {}", crate::leader::presence::unhandled_advice(&p.labels)),
        };
        let _ = writeln!(
            out,
            "{:<9} {:<16} {:<28} {:>15}  {:<16} {}",
            p.kind,
            ns,
            p.name,
            format!("{}/{}", p.ready, p.desired),
            p.instance.as_deref().unwrap_or("-"),
            problem
        );
    }
    if pools.is_empty() {
        let _ = writeln!(out, "(no pools)");
    }
    let _ = writeln!(out, "\nleader: {}", leader.unwrap_or("none (no operator with leader election runs)"));
    let _ = writeln!(out, "\n{:<40} {:>6}  {:<8} RENEWED", "SIMULATOR", "NODES", "STATE");
    for m in members {
        let state = if m.live { "live" } else { "expired" };
        let _ = writeln!(out, "{:<40} {:>6}  {:<8} {}s ago", m.identity, m.nodes, state, m.renewed_secs_ago);
    }
    if members.is_empty() {
        let _ = writeln!(out, "(no sharded simulator)");
    }
    out
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}; set KUBECONFIG"))?;
    let mut visit = ListPools { client: &client, lists: Vec::new() };
    kinds::visit_all(&mut visit);
    let mut pools = Vec::new();
    for list in visit.lists {
        match list.await {
            Ok(rows) => pools.extend(rows),
            // A kind whose CRD is not installed: say so and carry on.
            Err(e) => eprintln!("warning: {e}"),
        }
    }
    let presences = crate::leader::presence::list(&client, &args.lease_namespace).await?;
    let running = crate::leader::presence::running(&presences, Timestamp::now());
    for p in &mut pools {
        p.instance = crate::leader::presence::handler(&running, &p.labels).map(str::to_string);
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
    let leader = leases
        .get_opt(&format!("{}-leader", args.instance))
        .await?
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty());
    let shard = leases.list(&ListParams::default().labels(&format!("{SHARD_LABEL}={}", args.instance))).await?;
    print!("{}", render(&pools, leader.as_deref(), &members(&shard.items, Timestamp::now())));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    fn lease(id: &str, renewed: Timestamp, nodes: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: Some([(NODES_ANNOTATION.to_string(), nodes.to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(id.into()),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn members_say_who_simulates_how_many_and_who_is_gone() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let ago = |s: i64| now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s)).unwrap();
        let rows = members(&[lease("b", ago(2), "2000"), lease("a", ago(30), "1990")], now);
        assert_eq!(
            rows[0],
            MemberRow { identity: "a".into(), nodes: "1990".into(), live: false, renewed_secs_ago: 30 }
        );
        assert_eq!(rows[1], MemberRow { identity: "b".into(), nodes: "2000".into(), live: true, renewed_secs_ago: 2 });
        let text = render(&[], Some("b"), &rows);
        assert!(text.contains("leader: b"), "{text}");
        assert!(text.lines().any(|l| l.starts_with('b') && l.contains("2000") && l.contains("live")), "{text}");
        assert!(text.lines().any(|l| l.starts_with('a') && l.contains("expired")), "{text}");
    }

    #[test]
    fn pools_show_ready_over_desired_and_their_problem() {
        let rows = [PoolRow {
            kind: "NodePool".into(),
            namespace: String::new(),
            name: "big".into(),
            ready: 3,
            desired: 5,
            problem: "NameConflict: node big-0 exists".into(),
            instance: Some("kwok-pools".into()),
            labels: Default::default(),
        }];
        let text = render(&rows, None, &[]);
        let line = text.lines().find(|l| l.starts_with("NodePool")).unwrap();
        assert!(line.contains("big") && line.contains("3/5") && line.contains("NameConflict"), "{text}");
        assert!(line.contains("kwok-pools"), "{text}");
        assert!(text.contains("leader: none"));
        let orphan = PoolRow { instance: None, problem: String::new(), ..rows[0].clone() };
        let text = render(&[orphan], None, &[]);
        let line = text.lines().find(|l| l.starts_with("NodePool")).unwrap();
        assert!(line.contains("Unhandled: no running operator instance handles it"), "{text}");
    }
}
