//! NodePool's own simulation: the DRA drivers of its nodes (the ResourceSlices each node
//! publishes for the pool's `spec.devices`, the pool's device counts) and what the kubelet
//! asks of them (the prepare step of a pod's claims, the GPUs of `/metrics/dcgm`). The
//! kubelet of its nodes is the shared one (`kubelet/`), which simulates every managed node
//! whoever made it.

use super::devices::{self, counter::DeviceCounter, publisher::SlicePublisher, slices::NodeRef};
use super::{NodePool, NodePoolMetrics};
use crate::deploy::rule::Rule;
use crate::informer::pod::SlimPod;
use crate::informer::{Informer, shared};
use crate::kubelet::{self, Devices, Gpu, Prepare};
use crate::pool::{NoFlags, Simulate};
use crate::simulator::{SimContext, Simulation};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, ResourceClaim, ResourceSlice};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use std::sync::Arc;

/// The stores the simulated DRA drivers read: pools, nodes, their published slices, claims.
struct DeviceInformers {
    nodes: Arc<Informer<Node>>,
    pools: Arc<Informer<NodePool>>,
    slices: Arc<Informer<ResourceSlice>>,
    claims: Arc<Informer<ResourceClaim>>,
}

impl DeviceInformers {
    /// The shared informers (the same ones however often this is called).
    fn new(sim: &SimContext) -> Self {
        let slices = sim.informers.shared(|i: &Arc<Informer<ResourceSlice>>, client| {
            let config = watcher::Config::default().labels(devices::POOL_LABEL);
            i.start(Api::<ResourceSlice>::all(client), config, crate::informer::trimmed);
        });
        let claims = sim.informers.shared(|i: &Arc<Informer<ResourceClaim>>, client| {
            i.start(Api::<ResourceClaim>::all(client), watcher::Config::default(), devices::status::slim_claim);
        });
        Self { nodes: shared::nodes(&sim.informers), pools: shared::pools::<NodePool>(&sim.informers), slices, claims }
    }
}

/// What the kubelet asks of a NodePool's devices, answered from the pools and claims.
struct PoolDevices {
    pools: Store<NodePool>,
    claims: Store<ResourceClaim>,
}

impl PoolDevices {
    /// The NodePool that owns `node`, if one does.
    fn pool_of(&self, node: &Node) -> Option<Arc<NodePool>> {
        let owner = node.owner_references().iter().find(|o| o.controller == Some(true) && o.kind == "NodePool")?;
        self.pools.get(&ObjectRef::new(&owner.name)).filter(|p| p.metadata.uid.as_deref() == Some(owner.uid.as_str()))
    }
}

fn string<'a>(d: &'a Device, name: &str) -> Option<&'a str> {
    d.attributes.as_ref()?.get(name)?.string.as_deref()
}

/// The pod holding `device` of `driver` on `node`, from the claims reserved for it.
fn holder(claims: &[Arc<ResourceClaim>], driver: &str, node: &str, device: &str) -> Option<(String, String)> {
    claims.iter().find_map(|c| {
        let status = c.status.as_ref()?;
        let results = status.allocation.as_ref()?.devices.as_ref()?.results.as_ref()?;
        results.iter().find(|r| r.driver == driver && r.pool == node && r.device == device)?;
        let pod = status.reserved_for.as_ref()?.iter().find(|r| r.resource == "pods")?;
        Some((c.namespace().unwrap_or_default(), pod.name.clone()))
    })
}

impl Devices for PoolDevices {
    /// A pool's `prepareFailPercent` fails a seeded share of the pods whose claims its driver
    /// serves, for good, as a broken driver does.
    fn prepare(&self, node: &Node, pod: &SlimPod) -> Prepare {
        use devices::prepare;
        let Some(pool) = self.pool_of(node) else { return Prepare::Ready };
        if !prepare::may_fail(&pool.spec.devices) {
            return Prepare::Ready;
        }
        let claims = self.claims.state();
        let mine: Vec<_> = prepare::claims_of(pod.uid(), claims.iter().map(AsRef::as_ref)).collect();
        if mine.is_empty() {
            return Prepare::Later;
        }
        let seed = pool.spec.lifecycle.as_ref().and_then(|l| l.seed).unwrap_or(0);
        let ns = pod.namespace().unwrap_or_default();
        match prepare::failure(&pool.spec.devices, seed, &ns, pod.name(), mine) {
            Some(failure) => Prepare::Fails(prepare::note(&failure)),
            None => Prepare::Ready,
        }
    }

    /// The pool's devices of `type: gpu` on `node` (as the `nvidia-gpu` preset publishes them).
    fn gpus(&self, node: &Node) -> Vec<Gpu> {
        let Some(pool) = self.pool_of(node) else { return Vec::new() };
        let (name, uid) = (node.name_any(), node.metadata.uid.clone().unwrap_or_default());
        let seed = pool.spec.lifecycle.as_ref().and_then(|l| l.seed).unwrap_or(0);
        let at = NodeRef { pool: &pool.name_any(), generation: 0, seed, node: &name, uid: &uid };
        let claims = self.claims.state();
        let mut gpus = Vec::new();
        for slice in devices::slices(&pool.spec.devices, &at) {
            for d in slice.spec.devices.into_iter().flatten().filter(|d| string(d, "type") == Some("gpu")) {
                let holder = holder(&claims, &slice.spec.driver, &name, &d.name);
                gpus.push(Gpu { device: d, holder });
            }
        }
        gpus
    }
}

impl Simulate for NodePool {
    type Metrics = NodePoolMetrics;

    fn simulations(_env: &kubelet::Kubelet, _flags: &NoFlags, sim: &SimContext) -> Vec<Simulation> {
        let informers = DeviceInformers::new(sim);
        let publisher = SlicePublisher {
            client: sim.client.clone(),
            nodes: informers.nodes.store(),
            pools: informers.pools.store(),
            manage: sim.manage.clone(),
            shard: sim.shard.clone(),
            metrics: sim.metrics.clone(),
            lifecycles: sim.lifecycles.clone(),
        };
        let counter = DeviceCounter {
            client: sim.client.clone(),
            nodes: informers.nodes.store(),
            manage: sim.manage.clone(),
            pools: informers.pools.store(),
            slices: informers.slices.store(),
            claims: informers.claims.store(),
            shard: sim.shard.clone(),
            metrics: sim.metrics.clone(),
            devices: sim.metrics.kind::<NodePoolMetrics>(),
        };
        vec![
            Simulation {
                name: "device slice publisher".into(),
                ready: vec![],
                run: Box::pin(publisher.run(informers.nodes.subscribe(), informers.pools.subscribe())),
            },
            Simulation { name: "device counter".into(), ready: vec![], run: Box::pin(counter.run()) },
        ]
    }

    fn devices(_env: &kubelet::Kubelet, sim: &SimContext) -> Option<Arc<dyn Devices>> {
        let informers = DeviceInformers::new(sim);
        Some(Arc::new(PoolDevices { pools: informers.pools.store(), claims: informers.claims.store() }))
    }

    fn simulator_rules() -> Vec<Rule> {
        vec![
            Rule::cluster(
                "resource.k8s.io",
                &["resourceslices"],
                &["list", "watch", "create", "patch", "delete"],
                "the simulated nodes' DRA drivers: ResourceSlices per node and driver (NodePool spec.devices), watched to count them",
            ),
            Rule::cluster(
                "resource.k8s.io",
                &["resourceclaims"],
                &["list", "watch"],
                "counting the simulated devices ResourceClaims hold (NodePool status.devices)",
            ),
            Rule::cluster(
                crate::api::common::GROUP,
                &["nodepools/status"],
                &["patch"],
                "a NodePool's device counts (status.devices)",
            ),
        ]
    }
}
