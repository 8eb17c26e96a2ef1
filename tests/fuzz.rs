//! Fuzzing with proptest, for a set time per target (`FUZZ_SECONDS`, 3 s by default; `make
//! fuzz` gives each a minute): the admission handler on raw and mutated AdmissionReview
//! bytes, manifest → validation → rendering for every kind, quantity and CIDR arithmetic —
//! none may panic; and properties of the planner (a plan reaches the goal, never removes a
//! live child below the count, never makes two children with one name) and of pod IPAM (never
//! two live pods with one address on a node, across restarts). A failure prints the smallest
//! input proptest found; it becomes a case in `tests/fixtures/fuzz-regressions/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use ipnet::IpNet;
use kwok_pools::admission::review::{self, Judge, Peers};
use kwok_pools::ipam::pods::{Allocation, PodIpam};
use kwok_pools::kinds::{Kind, Visitor};
use kwok_pools::pool::plan::{Observed, PlanInput, UpdateMode, plan};
use kwok_pools::pool::{PoolKind, child};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long each target runs.
fn budget() -> Duration {
    let secs = std::env::var("FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

/// Runs `test` on inputs from `strategy` until the budget is spent; prints how many ran.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let start = Instant::now();
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    let mut cases = 0u64;
    while start.elapsed() < budget() {
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{name}: {e}");
        }
        cases += 64;
    }
    eprintln!("{name}: {cases} inputs in {:.1}s, no failure", start.elapsed().as_secs_f64());
}

/// Any JSON value, small.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        quantityish().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z./-]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Strings shaped like quantities, CIDRs and counts, with the edges in them.
fn quantityish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[+-]?[0-9]{0,30}(\\.[0-9]{0,10})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[+-]?[0-9]{1,12}|E[0-9]{1,5})?",
        "([0-9]{1,3}\\.){3}[0-9]{1,3}/[0-9]{1,3}",
        "[0-9a-f:]{2,20}/[0-9]{1,3}",
        Just("1e27".to_string()),
        Just("9223372036854775808".to_string()),
        Just("-1".to_string()),
    ]
}

/// Valid manifests of every registered kind (each kind's example), the seeds mutations start
/// from: a kind added to the registry is fuzzed with no edit here.
fn seeds() -> Vec<Value> {
    kwok_pools::kinds::examples()
}

/// Every object key in `v`, at any depth.
fn keys_of(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, inner) in m {
                out.insert(k.clone());
                keys_of(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| keys_of(i, out)),
        _ => {}
    }
}

/// The keys the seeds use, where mutations go (and random ones near them).
fn seed_keys() -> Vec<String> {
    let mut keys = BTreeSet::new();
    for seed in seeds() {
        keys_of(&seed, &mut keys);
    }
    keys.into_iter().collect()
}

/// Sets `value` at the path given by `keys` (objects only; made as needed).
fn set_at(doc: &mut Value, keys: &[String], value: Value) {
    let mut at = doc;
    for key in &keys[..keys.len().saturating_sub(1)] {
        if !at.get(key).is_some_and(Value::is_object) {
            at[key.as_str()] = json!({});
        }
        at = &mut at[key.as_str()];
    }
    if let Some(last) = keys.last() {
        at[last.as_str()] = value;
    }
}

/// A seed manifest with a few values replaced at paths that exist or are near ones that do.
fn mutated_manifest() -> impl Strategy<Value = Value> {
    let known = prop::sample::select(seed_keys());
    let path = prop::collection::vec(prop_oneof![4 => known, 1 => "[a-zA-Z]{1,8}"], 1..6);
    (0..seeds().len(), prop::collection::vec((path, any_json()), 1..4)).prop_map(|(seed, edits)| {
        let mut doc = seeds()[seed].clone();
        for (keys, value) in edits {
            let keys = if keys[0] == "spec" || keys[0] == "metadata" {
                keys
            } else {
                [vec!["spec".to_string()], keys].concat()
            };
            set_at(&mut doc, &keys, value);
        }
        doc
    })
}

fn review_bytes(object: &Value, old: Option<&Value>) -> Vec<u8> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("Unknown");
    let resource = format!("{}s", kind.to_lowercase());
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "pools.kwok.x-k8s.io", "version": "v1alpha1", "resource": resource},
            "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "userInfo": {}, "object": object, "oldObject": old,
        }
    }))
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn admission_never_panics_on_raw_bytes() {
    let rt = runtime();
    let judge = Judge { peers: Peers::default(), client: None };
    fuzz("admission/raw bytes", prop::collection::vec(any::<u8>(), 0..512), |bytes| {
        let _ = rt.block_on(review::answer(&bytes, &judge));
        Ok(())
    });
}

#[test]
fn admission_answers_every_mutated_review_with_a_verdict() {
    let rt = runtime();
    let judge = Judge { peers: Peers::default(), client: None };
    fuzz("admission/mutated reviews", (mutated_manifest(), prop::option::of(mutated_manifest())), |(new, old)| {
        let body = review_bytes(&new, old.as_ref());
        let objects_decode = [Some(&new), old.as_ref()]
            .into_iter()
            .flatten()
            .all(|o| serde_json::from_value::<kube::core::DynamicObject>(o.clone()).is_ok());
        let (_, allowed, review) = match rt.block_on(review::answer(&body, &judge)) {
            Ok(answer) => answer,
            // Only a body that is no AdmissionReview (an object that is no Kubernetes object,
            // which the API server never sends) may get an HTTP error instead of a verdict.
            Err(e) => {
                prop_assert!(!objects_decode, "a well-formed review must get a verdict, not an error: {}", e);
                return Ok(());
            }
        };
        let response = review.response.expect("a response");
        if !allowed {
            let message = response.result.message;
            prop_assert!(!message.is_empty(), "a refusal says why");
        }
        Ok(())
    });
}

/// Decodes, validates and (when valid) renders a few children; none of it may panic.
fn validate_and_render<P: PoolKind + serde::de::DeserializeOwned>(doc: &Value) -> Result<(), TestCaseError> {
    let Ok(pool) = serde_json::from_value::<P>(doc.clone()) else { return Ok(()) };
    let problems = pool.problems(None, &[]);
    if problems.is_empty() {
        let env = P::validation_env();
        let count = pool.count();
        for i in [0, 1, count.saturating_sub(1), count, u32::MAX] {
            let _ = child(&pool, i, "hash", &env);
        }
    } else {
        prop_assert!(problems.iter().all(|p| !p.is_empty()));
    }
    let _ = pool.warnings();
    let _ = pool.template_hash();
    Ok(())
}

/// Runs [`validate_and_render`] as the registered kind the document names.
struct ByKind<'a> {
    doc: &'a Value,
    result: Option<Result<(), TestCaseError>>,
}

impl Visitor for ByKind<'_> {
    fn visit<K: Kind>(&mut self) {
        if self.result.is_none() && self.doc["kind"].as_str() == Some(&*K::kind(&())) {
            self.result = Some(validate_and_render::<K>(self.doc));
        }
    }
}

#[test]
fn manifests_validate_and_render_without_panicking() {
    // Every kind is a seed, so every kind is fuzzed; a mutated `kind` names no kind.
    let kinds: BTreeSet<String> = seeds().iter().filter_map(|s| s["kind"].as_str().map(String::from)).collect();
    assert_eq!(kinds.len(), kwok_pools::kinds::names().len(), "one seed per registered kind");
    fuzz("manifest → validation → rendering", mutated_manifest(), |doc| {
        let mut by_kind = ByKind { doc: &doc, result: None };
        kwok_pools::kinds::visit_all(&mut by_kind);
        by_kind.result.unwrap_or(Ok(()))
    });
}

#[test]
fn quantities_and_ranges_never_panic() {
    use kwok_pools::api::ranges;
    use kwok_pools::api::validation::quantity::approximate;
    fuzz("quantities", prop_oneof![quantityish(), ".{0,40}"], |text| {
        if let Some(v) = approximate(&text) {
            prop_assert!(!v.is_nan(), "{text} gives NaN");
        }
        Ok(())
    });
    let net = prop_oneof![
        (any::<u32>(), 0u8..=32).prop_map(|(a, p)| IpNet::new(IpAddr::from(a.to_be_bytes()), p).unwrap().trunc()),
        (any::<u128>(), 0u8..=128).prop_map(|(a, p)| IpNet::new(IpAddr::from(a.to_be_bytes()), p).unwrap().trunc()),
    ];
    fuzz("CIDR arithmetic", (net, 0u8..=130, any::<u32>()), |(net, mask, index)| {
        if let Some(sub) = ranges::nth_subnet(&net, mask, index) {
            prop_assert!(net.contains(&sub.network()) && sub.prefix_len() == mask, "{sub} outside {net}");
        }
        let count = ranges::host_count(&net);
        if let Some(ip) = ranges::nth_host(&net, index) {
            prop_assert!(net.contains(&ip) && u128::from(index) < count, "{ip} (#{index}) outside {net}");
        }
        Ok(())
    });
}

/// A child in the planner's view.
fn observed() -> impl Strategy<Value = Observed> {
    (
        0u32..12,
        prop::bool::weighted(0.7),
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        (prop::bool::weighted(0.1), -2i32..3),
    )
        .prop_map(|(i, fresh, ready, terminating, finished, foreign_name, (delete_first, deletion_cost))| {
            Observed {
                name: if foreign_name { format!("other-{i}") } else { format!("p-{i}") },
                index: (!foreign_name).then_some(i),
                hash: Some(if fresh { "h2" } else { "h1" }.to_string()),
                ready,
                terminating,
                finished,
                failing: finished,
                conflict: None,
                delete_first,
                deletion_cost,
            }
        })
}

#[test]
fn a_plan_keeps_names_unique_and_live_children_below_the_count_and_reaches_the_goal() {
    let mode =
        prop_oneof![Just(UpdateMode::InPlace), (0u32..4).prop_map(|m| UpdateMode::Replace { max_unavailable: m })];
    let input = (
        0u32..10,
        mode,
        prop::collection::vec(observed(), 0..12),
        prop::collection::btree_set(0u32..10, 0..3),
        1usize..5,
    );
    fuzz("planner", input, |(count, mode, owned, taken, max_creates)| {
        // One child per name, as a store shows them.
        let mut seen = HashSet::new();
        let mut children: Vec<Observed> = owned.into_iter().filter(|c| seen.insert(c.name.clone())).collect();
        let taken: BTreeSet<u32> =
            taken.into_iter().filter(|t| !children.iter().any(|c| c.index == Some(*t))).collect();
        for round in 0..40 {
            let p = plan(&PlanInput { count, hash: "h2", mode, owned: &children, taken: &taken, max_creates });
            let by_name: HashMap<&str, &Observed> = children.iter().map(|c| (c.name.as_str(), c)).collect();
            // Never a second child with one name.
            let creates: HashSet<u32> = p.create.iter().copied().collect();
            prop_assert_eq!(creates.len(), p.create.len(), "an index created twice: {:?}", p);
            for i in &p.create {
                prop_assert!(*i < count && !taken.contains(i), "create {} outside the goal", i);
                prop_assert!(!by_name.contains_key(format!("p-{i}").as_str()), "create p-{} while it exists", i);
            }
            // Never a live, current child removed while the pool has no more than its count.
            let live = children.iter().filter(|c| c.index.is_some() && !c.terminating).count();
            for name in &p.delete {
                let c = by_name[name.as_str()];
                let keepable = c.index.is_some() && !c.finished && c.hash.as_deref() == Some("h2");
                prop_assert!(
                    !keepable || live > count as usize,
                    "deleted {} with {} live of {}: {:?}",
                    name,
                    live,
                    count,
                    p
                );
            }
            let settled = p.create.is_empty() && p.update.is_empty() && p.delete.is_empty() && !p.pending;
            if settled {
                // The goal: `count` children (an index taken by another object reported), each
                // current, under its own name.
                prop_assert_eq!(
                    children.len() + p.conflicts.len(),
                    count as usize,
                    "settled without the goal after {} rounds: {:?}",
                    round,
                    children
                );
                prop_assert!(children.iter().all(|c| c.index.is_some()));
                prop_assert!(children.iter().all(|c| c.hash.as_deref() == Some("h2") && !c.finished && !c.terminating));
                return Ok(());
            }
            // The world carries the plan out; terminating children finish going.
            children.retain(|c| !c.terminating && !p.delete.contains(&c.name));
            for c in &mut children {
                if c.index.is_some_and(|i| p.update.contains(&i)) {
                    c.hash = Some("h2".into());
                }
                c.ready = true;
            }
            children
                .extend(p.create.iter().map(|&i| Observed::new(format!("p-{i}"), Some(i), Some("h2".into()), false)));
        }
        Err(TestCaseError::fail("no goal after 40 rounds"))
    });
}

#[test]
fn pod_addresses_are_never_shared_on_a_node_across_restarts() {
    // (node, pod, what happens): allocate, release, or restart (a new allocator rebuilt from
    // the live pods' addresses, as the simulator does from the pod store).
    let op = (0u8..3, 0u8..20, 0u8..10);
    fuzz("pod IPAM", prop::collection::vec(op, 1..200), |ops| {
        let cidrs: Vec<Vec<IpNet>> = vec![
            vec!["10.0.0.0/28".parse().unwrap()],
            vec!["10.0.1.0/29".parse().unwrap(), "fd00::/124".parse().unwrap()],
            vec![],
        ];
        let mut ipam = PodIpam::default();
        let mut live: HashMap<(usize, String), Vec<IpAddr>> = HashMap::new();
        for (node, pod, action) in ops {
            let (node, uid) = (node as usize % 3, format!("pod-{pod}"));
            let name = format!("node-{node}");
            match action {
                0..=5 => {
                    if let Allocation::Ips(ips) = ipam.allocate(&name, &cidrs[node], &uid) {
                        if let Some(before) = live.get(&(node, uid.clone())) {
                            prop_assert_eq!(before, &ips, "a pod keeps its addresses");
                        }
                        live.insert((node, uid), ips);
                    }
                }
                6..=8 => {
                    ipam.release(&name, &uid);
                    live.remove(&(node, uid));
                }
                _ => {
                    ipam = PodIpam::default();
                    for ((n, u), ips) in &live {
                        prop_assert!(
                            ipam.observe(&format!("node-{n}"), &cidrs[*n], u, ips),
                            "a live pod's addresses are taken back"
                        );
                    }
                }
            }
            let mut per_node: HashSet<(usize, IpAddr)> = HashSet::new();
            for ((n, _), ips) in &live {
                for ip in ips {
                    prop_assert!(per_node.insert((*n, *ip)), "{} shared on node-{}", ip, n);
                }
            }
        }
        Ok(())
    });
}
