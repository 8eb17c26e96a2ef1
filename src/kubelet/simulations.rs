//! The kubelet of every simulated node, played by the simulator: node status and lease
//! heartbeats ([`nodes`], [`leases`]) and the pods bound to the node ([`pods`]). Registered
//! with NodePool, it simulates every managed node whoever made it, and every pod on one.

pub mod device_status;
pub mod kubelet_api;
pub mod leases;
pub mod nodes;
pub mod pods;
pub mod renewal;
pub mod slices;

use super::{NodeEnv, NodeFlags, NodePool, devices};
use crate::deploy::rule::Rule;
use crate::informer::{Informer, SyncWait, shared, wait_synced};
use crate::kubelet::node as node_status;
use crate::simulator::lifecycle::Defaults;
use crate::simulator::{SimContext, Simulate, Simulation};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Api;
use kube::ResourceExt;
use kube::runtime::watcher;
use nodes::{NodeSimConfig, NodeSimulator};
use pods::{PodSimConfig, PodSimulator};
use std::sync::Arc;
use std::time::Duration;

/// The stores the simulated DRA drivers read: pools, nodes, their published slices, claims.
struct DeviceInformers {
    nodes: Arc<Informer<Node>>,
    pools: Arc<Informer<NodePool>>,
    slices: Arc<Informer<ResourceSlice>>,
    claims: Arc<Informer<ResourceClaim>>,
}

impl DeviceInformers {
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

    fn stores(&self) -> pods::DeviceStores {
        pods::DeviceStores { pools: self.pools.store(), claims: self.claims.store() }
    }

    /// The slice publisher and the device counter.
    fn simulations(self, sim: &SimContext) -> [Simulation; 2] {
        let publisher = slices::SlicePublisher {
            client: sim.client.clone(),
            nodes: self.nodes.store(),
            pools: self.pools.store(),
            manage: sim.manage.clone(),
            shard: sim.shard.clone(),
            metrics: sim.metrics.clone(),
        };
        let counter = device_status::DeviceStatus {
            client: sim.client.clone(),
            nodes: self.nodes.store(),
            manage: sim.manage.clone(),
            pools: self.pools.store(),
            slices: self.slices.store(),
            claims: self.claims.store(),
            shard: sim.shard.clone(),
            metrics: sim.metrics.clone(),
        };
        [
            Simulation {
                name: "device slice publisher".into(),
                ready: vec![],
                run: Box::pin(publisher.run(self.nodes.subscribe(), self.pools.subscribe())),
            },
            Simulation { name: "device counter".into(), ready: vec![], run: Box::pin(counter.run()) },
        ]
    }
}

impl Simulate for NodePool {
    /// An indexed Job's pods are planned by their index (a retry repeats its run time).
    const POD_LABELS: &'static [&'static str] = &[crate::simulator::lifecycle::COMPLETION_INDEX_LABEL];

    fn simulations(env: &NodeEnv, flags: &NodeFlags, sim: &SimContext) -> Vec<Simulation> {
        let (nodes, pods) = (shared::nodes(&sim.informers), shared::pods(&sim.informers));
        let (node_changes, node_changes_for_pods, pod_changes) =
            (nodes.subscribe(), nodes.subscribe(), pods.subscribe());
        let mut lifecycles = sim.lifecycles.clone();
        lifecycles.defaults = Defaults { exit_delay: flags.pod_termination_delay, job_run_time: flags.job_run_time };
        let node_sim = NodeSimulator {
            client: sim.client.clone(),
            config: NodeSimConfig {
                manage: sim.manage.clone(),
                lease_duration: sim.node_lease_duration,
                status_frequency: flags.node_status_frequency.max(Duration::from_secs(1)),
                defaults: env.defaults.clone(),
            },
            nodes: nodes.store(),
            addresses: env.addresses.clone(),
            metrics: sim.metrics.clone(),
            writes: sim.writes.clone(),
            lifecycles: lifecycles.clone(),
            shard: sim.shard.clone(),
            identity: sim.identity.clone(),
            kubelet: env.kubelet.as_ref().map(|k| k.endpoints.clone()),
            stretch: renewal::Stretch { fraction: flags.lease_stretch, reserve: sim.shard_takeover },
        };
        let device_stores = DeviceInformers::new(sim);
        let pod_sim = PodSimulator {
            client: sim.client.clone(),
            // Checked when the operator set up (env): a bad mask never gets here.
            config: PodSimConfig { manage: sim.manage.clone(), lifecycles, fallback: flags.fallback().ok().flatten() },
            nodes: nodes.store(),
            pods: pods.store(),
            metrics: sim.metrics.clone(),
            writes: sim.writes.clone(),
            shard: sim.shard.clone(),
            devices: Some(device_stores.stores()),
        };
        // Before anything renders or simulates a node: the default address allocator learns
        // the addresses the nodes have.
        let (store, addresses) = (nodes.store(), env.addresses.clone());
        let nodes_ready: SyncWait = Box::pin(async move {
            wait_synced("nodes", &store).await?;
            let mut a = addresses.lock().unwrap_or_else(|e| e.into_inner());
            for node in store.state() {
                for ip in node_status::internal_ips(&node) {
                    a.observe(&node.name_any(), ip);
                }
            }
            Ok(())
        });
        let (manage, shard) = (sim.manage.clone(), sim.shard.clone());
        let serves = Box::new(move |node: &k8s_openapi::api::core::v1::Node| {
            node.metadata.deletion_timestamp.is_none() && manage.manages(node) && shard.owns(&node.name_any())
        });
        let kubelet_api =
            env.kubelet.as_ref().and_then(|k| kubelet_api::simulation(k, sim, serves, device_stores.stores()));
        let mut simulations = vec![
            Simulation {
                name: "node simulator".into(),
                ready: vec![nodes_ready],
                run: Box::pin(node_sim.run(node_changes)),
            },
            Simulation {
                name: "pod simulator".into(),
                ready: vec![crate::informer::sync_wait("pods".into(), pods.store())],
                run: Box::pin(pod_sim.run(pod_changes, node_changes_for_pods)),
            },
        ];
        simulations.extend(kubelet_api);
        simulations.extend(device_stores.simulations(sim));
        simulations
    }

    fn simulator_rules() -> Vec<Rule> {
        vec![
            Rule::cluster("", &["nodes/status"], &["patch"], "node status heartbeats and conditions"),
            Rule::cluster(
                "",
                &["pods"],
                &["get", "list", "watch", "delete"],
                "every pod on a simulated node: watched, removed once it has exited",
            ),
            Rule::cluster("", &["pods/status"], &["patch"], "pod status: Running, addresses, exits"),
            Rule::namespace(
                crate::informer::shared::LEASE_NAMESPACE,
                "coordination.k8s.io",
                &["leases"],
                &["get", "list", "create", "patch"],
                "node heartbeats (one Lease per simulated node) and claims of fallback pod ranges (one per block, owned by its node)",
            ),
            Rule::cluster(
                "events.k8s.io",
                &["events"],
                &["create", "patch"],
                "events about pods and nodes (an exhausted pod range)",
            ),
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
            Rule::cluster(
                "authentication.k8s.io",
                &["tokenreviews"],
                &["create"],
                "the simulated kubelets' API: whose bearer token a caller presents (the kubelet's webhook authentication)",
            ),
            Rule::namespace(
                "kube-system",
                "",
                &["configmaps"],
                &["get"],
                "the simulated kubelets' API: the API server's client CA, to accept its client certificates",
            )
            .named_only(&["extension-apiserver-authentication"]),
        ]
    }
}
