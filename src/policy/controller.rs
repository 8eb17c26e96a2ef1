//! The policies' I/O. On every replica that simulates: wait for the policy CRD (nothing holds up
//! meanwhile), then follow the policies — the engine's indexes rebuilt on each change, the pod
//! store told which label and annotation keys they read (pods listed again when a key is new).
//! On the leader: each policy's status written when what it governs changes.

use super::api::LifecyclePolicy;
use super::matching::Target;
use super::source::{Policies, pod_keys, seen_node, seen_pod};
use super::status;
use crate::informer::pod::{ReadKeys, SlimPod};
use crate::informer::{Informer, Informers, shared};
use crate::simulator::lifecycle::Lifecycles;
use crate::simulator::manage::Manage;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The policy CRD's name.
pub const CRD: &str = "lifecyclepolicies.pools.kwok.x-k8s.io";

/// How often the leader looks at what each policy governs.
const STATUS_EVERY: Duration = Duration::from_secs(15);

/// Waits until the policy CRD is installed (saying so once), then returns its informer.
pub async fn informer(client: &Client, informers: &Arc<Informers>) -> Arc<Informer<LifecyclePolicy>> {
    let mut told = false;
    loop {
        match crate::pool::controller::crd_established(client, CRD).await {
            Ok(true) => break,
            Ok(false) if !told => {
                tracing::info!(
                    crd = CRD,
                    "no LifecyclePolicy CRD yet: policies apply once it is installed (kubectl apply --server-side -f crds/kwok-pools.yaml)"
                );
                told = true;
            }
            Err(e) if !told => {
                tracing::warn!(error = %e, crd = CRD, "cannot tell whether the LifecyclePolicy CRD is installed (the operator needs get on customresourcedefinitions); asking again");
                told = true;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    shared::all::<LifecyclePolicy>(informers)
}

/// Follows the policies for the engine (see the module doc). Runs for the life of the process.
pub async fn follow(client: Client, informers: Arc<Informers>, policies: Arc<Policies>, engine: Lifecycles) {
    let informer = informer(&client, &informers).await;
    let mut changes = informer.subscribe();
    let (store, keys, pods) = (informer.store(), informers.pod_keys(), shared::pods(&informers));
    apply(&store, &policies, &keys, &pods, &engine);
    engine.changed();
    // The pools' delays may read annotations too: looked at now and then.
    let mut pools = tokio::time::interval(POOL_KEYS_EVERY);
    loop {
        tokio::select! {
            change = changes.recv() => {
                if change.is_none() {
                    return;
                }
                // A burst of changes (a file of policies applied) is one rebuild.
                tokio::time::sleep(SETTLE).await;
                while changes.try_recv().is_ok() {}
                if apply(&store, &policies, &keys, &pods, &engine) {
                    engine.changed();
                }
            }
            _ = pools.tick() => keep_keys(&keys, &pods, &[], &engine.pool_delay_annotations()),
        }
    }
}

/// How long a change waits for the ones that come with it.
const SETTLE: Duration = Duration::from_millis(250);

/// How often the pools' delay annotations are looked at.
const POOL_KEYS_EVERY: Duration = Duration::from_secs(10);

/// Tells the pod store to keep these keys, listing the pods again when one is new.
fn keep_keys(keys: &ReadKeys, pods: &Informer<SlimPod>, labels: &[String], annotations: &[String]) {
    match keys.add(labels, annotations) {
        Ok(true) => {
            tracing::info!(
                ?labels,
                ?annotations,
                "lifecycle knobs read pod keys the store did not keep: listing pods again"
            );
            pods.relist();
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "lifecycle knobs read a pod key the simulator does not keep"),
    }
}

/// Indexes the policies and keeps the pod keys they read; `true` when a spec changed (the
/// leader's status writes change none).
fn apply(
    store: &Store<LifecyclePolicy>,
    policies: &Policies,
    keys: &ReadKeys,
    pods: &Informer<SlimPod>,
    engine: &Lifecycles,
) -> bool {
    let all = store.state();
    if !policies.set(&all) {
        return false;
    }
    let (labels, mut annotations) = pod_keys(&all);
    annotations.extend(engine.pool_delay_annotations());
    keep_keys(keys, pods, &labels, &annotations);
    tracing::debug!(policies = all.len(), "lifecycle policies indexed");
    true
}

/// The leader's part: every policy's status, written when it changes.
pub async fn write_status(client: Client, informers: Arc<Informers>, policies: Arc<Policies>, manage: Manage) {
    let informer = informer(&client, &informers).await;
    let (store, nodes, pods) = (informer.store(), shared::nodes(&informers).store(), shared::pods(&informers).store());
    let api: Api<LifecyclePolicy> = Api::all(client);
    loop {
        tokio::time::sleep(STATUS_EVERY).await;
        // (A replica that only reconciles follows no policies for a simulator: index them here.)
        let _ = policies.set(&store.state());
        let tallies = tally(&policies, &nodes, &pods, &manage);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        for policy in store.state() {
            let name = policy.name_any();
            let new = status::status(&policy, tallies.get(&name).unwrap_or(&status::Tally::default()), &now);
            if policy.status.as_ref().is_some_and(|old| status::same(old, &new)) {
                continue;
            }
            let patch = serde_json::json!({"status": new});
            let pp = crate::api::conventions::patch_params();
            if let Err(e) = api.patch_status(&name, &pp, &kube::api::Patch::Merge(&patch)).await {
                tracing::warn!(policy = %name, error = %e, "cannot write a lifecycle policy's status; trying again next round");
            }
        }
    }
}

/// What each policy governs among the simulated nodes and the pods on them.
fn tally(
    policies: &Policies,
    nodes: &Store<Node>,
    pods: &Store<SlimPod>,
    manage: &Manage,
) -> BTreeMap<String, status::Tally> {
    let indexes = policies.indexes();
    let mut tallies = BTreeMap::new();
    let managed: Vec<Arc<Node>> = nodes.state().into_iter().filter(|n| manage.manages(n)).collect();
    status::count(&indexes, Target::Nodes, managed.iter().map(|n| seen_node(n)), &mut tallies);
    let all_pods = pods.state();
    let on_managed = all_pods.iter().filter_map(|p| {
        let node = nodes.get(&ObjectRef::new(p.node_name.as_deref()?))?;
        manage.manages(&node).then_some((p, node))
    });
    let bound: Vec<(&Arc<SlimPod>, Arc<Node>)> = on_managed.collect();
    status::count(&indexes, Target::Pods, bound.iter().map(|(p, n)| seen_pod(p, Some(n))), &mut tallies);
    tallies
}
