//! The DRA drivers of simulated nodes: each managed node of this replica's shard whose NodePool
//! has `spec.devices` publishes its ResourceSlices (what [`crate::kinds::nodepool::devices`]
//! builds), applied server-side and owned by the node so they go with it; a pool's change
//! republishes them with the pool's generation, and slices of drivers the pool no longer
//! lists are deleted.

use super::super::NodePool;
use super::{self as devices, POOL_LABEL};
use crate::informer::Change;
use crate::shard::Shard;
use crate::simulator::lifecycle::{Knobs, Lifecycles};
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, ListParams, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

pub struct SlicePublisher {
    pub client: Client,
    pub nodes: Store<Node>,
    pub pools: Store<NodePool>,
    pub manage: Manage,
    pub shard: Shard,
    pub metrics: Arc<Metrics>,
    /// The lifecycle engine: the devices a node policy gives nodes no pool made.
    pub lifecycles: Lifecycles,
}

/// What a node shows: the pool generation and the slice names last published.
type Shown = (i64, BTreeSet<String>);

struct Published {
    node: String,
    /// What was published, or `None` when a write failed (tried again later).
    shown: Option<Shown>,
}

/// How many nodes publish at once.
const PARALLEL: usize = 8;
/// How often every node is looked at again.
const RESYNC: Duration = Duration::from_secs(60);

impl SlicePublisher {
    pub async fn run(self, mut nodes: UnboundedReceiver<Change<Node>>, mut pools: UnboundedReceiver<Change<NodePool>>) {
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.pools.wait_until_ready().await;
        let sim = Arc::new(self);
        let mut shown: HashMap<String, Shown> = sim.existing().await;
        let mut busy: HashSet<String> = HashSet::new();
        let mut again: HashSet<String> = HashSet::new();
        let (done_tx, mut done_rx) = unbounded_channel::<Published>();
        let room = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
        let mut resync = tokio::time::interval(RESYNC);
        let mut shard = sim.shard.clone();
        let mut knobs = sim.lifecycles.changes();
        let look =
            |node: &Node, shown: &HashMap<String, Shown>, busy: &mut HashSet<String>, again: &mut HashSet<String>| {
                let name = node.name_any();
                let Some(want) = sim.wanted(node) else { return };
                if want.1.is_empty() && !shown.contains_key(&name) {
                    return; // no devices, none shown
                }
                if shown
                    .get(&name)
                    .is_some_and(|s| *s == (want.0, want.1.iter().filter_map(|s| s.metadata.name.clone()).collect()))
                {
                    return;
                }
                if !busy.insert(name.clone()) {
                    again.insert(name);
                    return;
                }
                let (sim, tx, room) = (sim.clone(), done_tx.clone(), room.clone());
                let before = shown.get(&name).map(|s| s.1.clone()).unwrap_or_default();
                tokio::spawn(async move {
                    let _permit = room.acquire().await;
                    let shown = sim.publish(&name, want, before).await;
                    let _ = tx.send(Published { node: name, shown });
                });
            };
        loop {
            tokio::select! {
                () = shard.changed() => for n in sim.nodes.state() { look(&n, &shown, &mut busy, &mut again) },
                Ok(()) = knobs.changed() => for n in sim.nodes.state() { look(&n, &shown, &mut busy, &mut again) },
                _ = resync.tick() => for n in sim.nodes.state() { look(&n, &shown, &mut busy, &mut again) },
                change = nodes.recv() => match change {
                    Some(Change::Applied(n)) => look(&n, &shown, &mut busy, &mut again),
                    Some(Change::Deleted(n)) => { shown.remove(&n.name_any()); }
                    Some(Change::Synced) => {}
                    None => return,
                },
                change = pools.recv() => match change {
                    Some(Change::Applied(pool)) => {
                        let uid = pool.metadata.uid.clone();
                        for n in sim.nodes.state().iter().filter(|n| n.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref())) {
                            look(n, &shown, &mut busy, &mut again);
                        }
                    }
                    Some(_) => {}
                    None => return,
                },
                Some(done) = done_rx.recv() => {
                    busy.remove(&done.node);
                    match done.shown {
                        Some(s) => { shown.insert(done.node.clone(), s); }
                        None => { shown.remove(&done.node); }
                    }
                    if again.remove(&done.node)
                        && let Some(n) = sim.nodes.get(&ObjectRef::new(&done.node))
                    {
                        look(&n, &shown, &mut busy, &mut again);
                    }
                }
            }
        }
    }
}

impl SlicePublisher {
    /// The slices `node` should show and its pool's generation; `None` when the node is not
    /// this replica's to publish for.
    fn wanted(&self, node: &Node) -> Option<(i64, Vec<ResourceSlice>)> {
        let name = node.name_any();
        if node.metadata.deletion_timestamp.is_some() || !self.manage.manages(node) || !self.shard.owns(&name) {
            return None;
        }
        let Some(owner) = node.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "NodePool")
        else {
            return self.policy_wanted(node);
        };
        let pool =
            self.pools.get(&ObjectRef::new(&owner.name)).filter(|p| p.metadata.uid.as_deref() == Some(&owner.uid))?;
        let generation = pool.metadata.generation.unwrap_or(1);
        let seed = pool.spec.lifecycle.as_ref().and_then(|l| l.seed).unwrap_or(0);
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let problems = devices::problems(&pool.spec.devices);
        if !problems.is_empty() {
            return None; // refused at admission; the pool's Degraded condition says why
        }
        let at = devices::slices::NodeRef { pool: &owner.name, generation, seed, node: &name, uid: &uid };
        Some((generation, devices::slices(&pool.spec.devices, &at)))
    }

    /// The slices of a node no pool made, from the node policy that governs it (none: an empty
    /// list, so slices published before are deleted).
    fn policy_wanted(&self, node: &Node) -> Option<(i64, Vec<ResourceSlice>)> {
        let (name, uid) = (node.name_any(), node.metadata.uid.clone().unwrap_or_default());
        let knobs = self.lifecycles.node_knobs(node);
        let Some(given) = knobs.as_deref().and_then(Knobs::devices) else { return Some((0, Vec::new())) };
        let sets = given.sets.downcast_ref::<Vec<devices::DeviceSet>>()?;
        if !devices::problems(sets).is_empty() {
            return None; // refused at admission; the policy's status says why
        }
        let at = devices::slices::NodeRef {
            pool: &given.by,
            generation: given.generation,
            seed: given.seed,
            node: &name,
            uid: &uid,
        };
        Some((given.generation, devices::slices(sets, &at)))
    }

    /// The slices published before this process started, by node.
    async fn existing(&self) -> HashMap<String, Shown> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        match api.list(&ListParams::default().labels(POOL_LABEL)).await {
            Ok(list) => {
                let mut out: HashMap<String, Shown> = HashMap::new();
                for s in list.items {
                    let Some(node) = s.spec.node_name.clone() else { continue };
                    let entry = out.entry(node).or_insert((-1, BTreeSet::new()));
                    entry.1.insert(s.name_any());
                }
                out
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list ResourceSlices (resource.k8s.io/v1): simulated devices are published without cleaning up old ones; check that the cluster serves DRA and the operator's RBAC");
                HashMap::new()
            }
        }
    }

    /// Applies `want` for `node` and deletes what it showed before and no longer does.
    async fn publish(
        &self,
        node: &str,
        (generation, want): (i64, Vec<ResourceSlice>),
        before: BTreeSet<String>,
    ) -> Option<Shown> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let pp = crate::api::conventions::apply_params();
        let mut names = BTreeSet::new();
        for slice in &want {
            let name = slice.name_any();
            let mut body = serde_json::to_value(slice).ok()?;
            body["apiVersion"] = "resource.k8s.io/v1".into();
            body["kind"] = "ResourceSlice".into();
            let r = api.patch(&name, &pp, &Patch::Apply(&body)).await;
            self.metrics.write("resourceslices", "apply", r.is_ok());
            if let Err(e) = r {
                tracing::warn!(node, slice = %name, error = %e, "publishing a ResourceSlice failed; retrying within a minute");
                return None;
            }
            names.insert(name);
        }
        for gone in before.difference(&names) {
            let r = api.delete(gone, &DeleteParams::default()).await;
            let ok = match &r {
                Ok(_) => true,
                Err(kube::Error::Api(s)) => s.code == 404,
                Err(_) => false,
            };
            self.metrics.write("resourceslices", "delete", ok);
            if !ok {
                tracing::warn!(node, slice = %gone, "deleting a ResourceSlice of a driver the pool no longer lists failed; retrying within a minute");
                return None;
            }
        }
        Some((generation, names))
    }
}
