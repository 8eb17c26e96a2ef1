//! The operator process: starts the shared informers, the pool controllers, the simulator and
//! the HTTP servers, all from one [`OperatorConfig`]. Nothing global.

use crate::api::{NodePool, PodPool};
use crate::controllers::{self, nodepool::NodeEnv, podpool::PodEnv};
use crate::informer::pod::SlimPod;
use crate::informer::{Informer, trim_meta, trimmed};
use crate::pool::reconcile::PoolContext;
use crate::simulator::ipam::HostAllocator;
use crate::simulator::leases::LEASE_NAMESPACE;
use crate::simulator::lifecycle::{self, Lifecycles};
use crate::simulator::manage::Manage;
use crate::simulator::node_status::{self, NodeDefaults};
use crate::simulator::nodes::{NodeSimConfig, NodeSimulator};
use crate::simulator::pods::{PodSimConfig, PodSimulator};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server::{self, Health};
use ipnet::IpNet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Run the pool controllers.
    pub controllers: bool,
    /// Run the lifecycle simulator.
    pub simulate: bool,
    pub manage: Manage,
    pub lease_duration: Duration,
    pub status_frequency: Duration,
    pub node_defaults: NodeDefaults,
    pub node_ip_range: IpNet,
    /// Only pools matching this label selector are handled (sharding, tests).
    pub pool_selector: Option<String>,
    /// Writes in flight for the pool controllers (all pools together).
    pub max_writes_in_flight: usize,
    pub max_writes_per_pool: usize,
    /// Writes in flight for the simulator (leases, node and pod status). Kept apart from the
    /// controllers' budget so heartbeats of thousands of nodes never starve creation, and
    /// the other way round.
    pub max_simulator_writes_in_flight: usize,
    pub max_creates_per_round: usize,
    pub metrics_addr: SocketAddr,
    /// The instance name (`--instance`).
    pub instance: String,
    /// How long a deleted pod takes to exit where no pool says (else about a second; never
    /// longer than its grace period).
    pub pod_termination_delay: Option<Duration>,
    /// How long pods owned by a Job run before they complete.
    pub job_run_time: Duration,
    /// The admission webhook (with the controllers only).
    pub webhook: Option<crate::admission::WebhookConfig>,
}

fn trim_node(mut node: Node) -> Node {
    trim_meta(&mut node);
    if let Some(s) = node.status.as_mut() {
        s.images = None;
        s.volumes_attached = None;
        s.volumes_in_use = None;
    }
    node
}

/// Waits for a store to sync, printing progress every few seconds.
async fn wait_synced<K>(what: &str, store: &kube::runtime::reflector::Store<K>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let start = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready()).await {
            Ok(Ok(())) => {
                tracing::info!(what, objects = store.len(), took = ?start.elapsed(), "store synced");
                return Ok(());
            }
            Ok(Err(e)) => anyhow::bail!("the {what} store closed before syncing: {e}"),
            Err(_) => {
                tracing::info!(what, waited = ?start.elapsed(), "still waiting for the first list of {what} (is the API server reachable? are the CRDs installed?)")
            }
        }
    }
}

pub async fn run(config: OperatorConfig) -> anyhow::Result<()> {
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("cannot build a Kubernetes client: {e}; set KUBECONFIG (e.g. `export KUBECONFIG=$(kwok-pools cluster kubeconfig)`) or run in a cluster")
    })?;
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let bound = server::serve(config.metrics_addr, Health { metrics: metrics.clone(), ready: ready.clone() }).await?;
    tracing::info!(%bound, "serving /metrics, /healthz and /readyz");

    let writes = Arc::new(Semaphore::new(config.max_writes_in_flight));
    let sim_writes = Arc::new(Semaphore::new(config.max_simulator_writes_in_flight));
    // The default instance counts from the start of the range; others from a point of their own.
    let addresses = Arc::new(Mutex::new(if config.instance == "kwok-pools" {
        HostAllocator::new(config.node_ip_range)
    } else {
        HostAllocator::seeded(config.node_ip_range, &config.instance)
    }));

    // One watch per kind, shared by controllers and simulator.
    let nodes = Informer::<Node>::new();
    let node_changes_for_pools = config.controllers.then(|| nodes.subscribe());
    let node_changes_for_sim = config.simulate.then(|| nodes.subscribe());
    let node_changes_for_pods = config.simulate.then(|| nodes.subscribe());
    let pods = Informer::<SlimPod>::new();
    let pod_changes_for_pools = config.controllers.then(|| pods.subscribe());
    let pod_changes_for_sim = config.simulate.then(|| pods.subscribe());
    pods.start(Api::<Pod>::all(client.clone()), watcher::Config::default(), SlimPod::from);
    nodes.start(Api::<Node>::all(client.clone()), watcher::Config::default(), trim_node);
    let leases = Informer::<Lease>::new();
    if config.simulate {
        leases.start(Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE), watcher::Config::default(), trimmed);
    }
    let node_pools = Informer::<NodePool>::new();
    let pod_pools = Informer::<PodPool>::new();
    if config.controllers || config.simulate {
        // The controllers and the webhook need the NodePools; the simulator reads the
        // lifecycle knobs of both kinds. `simulate` runs without the CRDs too: then nothing
        // waits for these stores, and every child gets the defaults.
        node_pools.start(Api::<NodePool>::all(client.clone()), watcher::Config::default(), trimmed);
    }
    if config.simulate {
        pod_pools.start(Api::<PodPool>::all(client.clone()), watcher::Config::default(), trimmed);
    }
    let lifecycles = Lifecycles {
        node_pools: Some(node_pools.store()),
        pod_pools: Some(pod_pools.store()),
        defaults: lifecycle::Defaults { exit_delay: config.pod_termination_delay, job_run_time: config.job_run_time },
    };

    wait_synced("nodes", &nodes.store()).await?;
    if config.simulate {
        wait_synced("leases", &leases.store()).await?;
    }
    if config.controllers {
        wait_synced("nodepools", &node_pools.store()).await?;
    }
    wait_synced("pods", &pods.store()).await?;
    {
        // Rebuild the default address allocator from the nodes that exist.
        let mut a = addresses.lock().expect("address allocator lock");
        for node in nodes.store().state() {
            for ip in node_status::internal_ips(&node) {
                a.observe(&node.name_any(), ip);
            }
        }
    }
    if let (true, Some(webhook)) = (config.controllers, config.webhook.clone()) {
        crate::admission::start(client.clone(), webhook, node_pools.store(), metrics.clone()).await?;
    }
    ready.store(true, Ordering::Relaxed);

    let mut tasks = tokio::task::JoinSet::new();
    if let Some(changes) = node_changes_for_sim {
        let sim = NodeSimulator {
            client: client.clone(),
            config: NodeSimConfig {
                manage: config.manage.clone(),
                lease_duration: config.lease_duration,
                status_frequency: config.status_frequency,
                defaults: config.node_defaults.clone(),
            },
            nodes: nodes.store(),
            leases: leases.store(),
            addresses: addresses.clone(),
            metrics: metrics.clone(),
            writes: sim_writes.clone(),
            lifecycles: lifecycles.clone(),
        };
        tasks.spawn(async move {
            sim.run(changes).await;
            "node simulator"
        });
    }
    if let (Some(pod_changes), Some(node_changes)) = (pod_changes_for_sim, node_changes_for_pods) {
        let sim = PodSimulator {
            client: client.clone(),
            config: PodSimConfig { manage: config.manage.clone(), lifecycles: lifecycles.clone() },
            nodes: nodes.store(),
            pods: pods.store(),
            metrics: metrics.clone(),
            writes: sim_writes.clone(),
        };
        tasks.spawn(async move {
            sim.run(pod_changes, node_changes).await;
            "pod simulator"
        });
    }
    let pool_watch = match &config.pool_selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    if let Some(changes) = pod_changes_for_pools {
        let ctx = Arc::new(PoolContext::<PodPool> {
            client: client.clone(),
            children: pods.store(),
            env: PodEnv,
            metrics: metrics.clone(),
            writes: writes.clone(),
            max_in_flight_per_pool: config.max_writes_per_pool,
            max_creates: config.max_creates_per_round,
            expectations: Default::default(),
        });
        let api: Api<PodPool> = Api::all(client.clone());
        let watch = pool_watch.clone();
        tasks.spawn(async move {
            controllers::run(api, watch, changes, ctx).await;
            "podpool controller"
        });
    }
    if let Some(changes) = node_changes_for_pools {
        let ctx = Arc::new(PoolContext::<NodePool> {
            client: client.clone(),
            children: nodes.store(),
            env: NodeEnv {
                simulate: config.simulate,
                defaults: config.node_defaults.clone(),
                addresses: addresses.clone(),
                pools: Some(node_pools.store()),
            },
            metrics: metrics.clone(),
            writes: writes.clone(),
            max_in_flight_per_pool: config.max_writes_per_pool,
            max_creates: config.max_creates_per_round,
            expectations: Default::default(),
        });
        let api: Api<NodePool> = Api::all(client.clone());
        tasks.spawn(async move {
            controllers::run(api, pool_watch, changes, ctx).await;
            "nodepool controller"
        });
    }
    tracing::info!(controllers = config.controllers, simulate = config.simulate, "kwok-pools running");
    let shutdown = tokio::signal::ctrl_c();
    tokio::pin!(shutdown);
    tokio::select! {
        _ = &mut shutdown => tracing::info!("shutting down"),
        Some(done) = tasks.join_next() => {
            match done {
                Ok(name) => tracing::info!(task = name, "stopped"),
                Err(e) => anyhow::bail!("a task failed: {e}"),
            }
        }
    }
    Ok(())
}
