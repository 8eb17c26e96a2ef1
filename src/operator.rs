//! The operator process: starts the shared informers, the pool controllers, the simulator and
//! the HTTP servers, all from one [`OperatorConfig`]. Nothing global.

use crate::admission::review::Peers;
use crate::api::{NodePool, PodPool};
use crate::controllers;
use crate::informer::pod::SlimPod;
use crate::informer::{Change, Informers};
use crate::ipam::HostAllocator;
use crate::kinds::{self, Visitor};
use crate::kubelet::node::{self as node_status, NodeDefaults};
use crate::leader::{Leader, LeaderConfig};
use crate::pool::reconcile::PoolContext;
use crate::pool::{PoolKind, Shared};
use crate::shard::Shard;
use crate::shard::membership::{self, MembershipConfig};
use crate::simulator::lifecycle::{self, Lifecycles};
use crate::simulator::machinery::WriteBudget;
use crate::simulator::manage::Manage;
use crate::simulator::nodes::{NodeSimConfig, NodeSimulator};
use crate::simulator::pods::{PodSimConfig, PodSimulator};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server::{self, Health};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;

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
    /// Which part of KubeVirt to play for VMIs (`None`: decide from what is installed).
    pub kubevirt_role: Option<crate::simulator::vmis::KubevirtRole>,
    /// The account VMI writes impersonate beside a real KubeVirt.
    pub kubevirt_handler_user: String,
    /// Which VMIs are simulated (by label; empty: all).
    pub vmi_selector: crate::simulator::selector::Selector,
    /// The admission webhook (with the controllers only).
    pub webhook: Option<crate::admission::WebhookConfig>,
    /// This replica's name in the leader election and the simulator shard.
    pub identity: String,
    /// Where the leader and membership Leases live.
    pub lease_namespace: String,
    /// Elect one leader among the replicas of this instance to run the pool controllers
    /// (`None`: this process runs them unconditionally).
    pub leader_lease_duration: Option<Duration>,
    /// Shard the simulator among the replicas of this instance (`None`: simulate every managed
    /// node).
    pub shard: Option<ShardSettings>,
}

#[derive(Clone, Debug)]
pub struct ShardSettings {
    pub lease_duration: Duration,
    pub handover: Duration,
}

/// Work only the leader does, named for the supervisor.
type LeaderWork = crate::leader::Work;

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

/// A wait for one store's first list.
type SyncWait = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

fn sync_wait<K>(what: String, store: Store<K>) -> SyncWait
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(async move { wait_synced(&what, &store).await })
}

/// What the per-kind wiring needs from the process.
struct Wiring<'a> {
    config: &'a OperatorConfig,
    shared: &'a Shared,
    metrics: Arc<Metrics>,
    writes: Arc<Semaphore>,
    pool_watch: watcher::Config,
    /// The controllers, started once this replica leads.
    leader_work: Vec<LeaderWork>,
    /// The pools of every kind, for the webhook's cross-pool rules.
    peers: Peers,
    /// Stores the operator waits for before it says ready.
    syncs: Vec<SyncWait>,
}

impl Visitor for Wiring<'_> {
    fn visit<P: PoolKind>(&mut self) {
        // The controllers and the webhook need the pools; the simulator reads the lifecycle
        // knobs of every kind (without the CRDs, nothing waits for these stores).
        let pools = crate::informer::shared::pools::<P>(&self.shared.informers);
        self.peers = std::mem::take(&mut self.peers).with(pools.store());
        if !self.config.controllers {
            return;
        }
        self.syncs.push(sync_wait(P::plural(&()).into_owned(), pools.store()));
        let (shared, metrics, writes, watch) =
            (self.shared, self.metrics.clone(), self.writes.clone(), self.pool_watch.clone());
        let client = shared.client.clone();
        let informers = shared.informers.clone();
        let env = P::env(shared);
        let config = self.config.clone();
        let kind = P::kind(&()).into_owned();
        let events = Arc::new(crate::pool::events::Events::new(shared.client.clone(), &config.identity));
        let start = move |children: Arc<crate::informer::Informer<P::Stored>>| {
            let changes = children.subscribe();
            let mut ctx = PoolContext::<P>::new(client.clone(), children.store(), pools.store(), env, metrics);
            ctx.writes = writes;
            ctx.max_in_flight_per_pool = config.max_writes_per_pool;
            ctx.max_creates = config.max_creates_per_round;
            ctx.events = Some(events.clone());
            controllers::run(Api::<P>::all(client), watch, changes, Arc::new(ctx))
        };
        match P::CHILD_CRD {
            None => {
                let children = P::children(&informers);
                self.syncs.push(sync_wait(P::NOUN.to_string() + "s", children.store()));
                self.leader_work.push(Box::pin(async move {
                    start(children).await;
                    format!("{kind} controller")
                }));
            }
            // A child kind that may not be installed: never holds up readiness or the other
            // kinds; the controller starts when the CRD appears.
            Some(crd) => {
                let pools_store = crate::informer::shared::pools::<P>(&informers).store();
                let client = shared.client.clone();
                self.leader_work.push(Box::pin(async move {
                    controllers::await_child_crd::<P>(&client, crd, &pools_store, Duration::from_secs(10)).await;
                    tracing::info!(kind, crd = crd.name, "child CRD installed; starting the controller");
                    start(P::children(&informers)).await;
                    format!("{kind} controller")
                }));
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
    let informers = Informers::new(client.clone());
    let watched = informers.clone();
    let problems: server::Problems = Arc::new(move || watched.problems());
    let watched = informers.clone();
    let dead: server::Problems = Arc::new(move || watched.dead());
    let watched = informers.clone();
    let cached: server::Cached =
        Arc::new(move || watched.watched().iter().map(|w| (w.watched(), w.cached())).collect());
    let health = Health { metrics: metrics.clone(), ready: ready.clone(), problems, dead, cached };
    let bound = server::serve(config.metrics_addr, health).await?;
    tracing::info!(%bound, "serving /metrics, /healthz and /readyz");

    let shared = Shared {
        client: client.clone(),
        informers,
        simulate: config.simulate,
        node_defaults: config.node_defaults.clone(),
        // The default instance counts from the start of the range; others from a point of their own.
        addresses: Arc::new(Mutex::new(if config.instance == "kwok-pools" {
            HostAllocator::new(config.node_ip_range)
        } else {
            HostAllocator::seeded(config.node_ip_range, &config.instance)
        })),
    };
    let mut tasks = JoinSet::new();
    let mut cleanup: Vec<Cleanup> = Vec::new();
    filter_pods(&config, &shared.informers, &mut tasks);
    let (peers, syncs, leader_work) = wire_kinds(&config, &shared, &metrics);
    let shard = join_shard(&config, &client, &metrics, &mut tasks, &mut cleanup)?;
    let simulator = config.simulate.then(|| wire_simulator(&config, &shared, &metrics, &shard));
    shared.informers.start_all();
    for wait in syncs {
        wait.await?;
    }
    if let Some(start) = simulator {
        let sim = start.await?;
        let writes = sim.writes.clone();
        sim.spawn_into(&mut tasks);
        let (config, informers, metrics, shard) =
            (config.clone(), shared.informers.clone(), metrics.clone(), shard.clone());
        tasks.spawn(async move {
            run_vmi_simulator(&config, &informers, metrics, writes, shard).await;
            "VMI simulator".to_string()
        });
    }
    if config.controllers {
        let registration = match config.webhook.clone() {
            Some(webhook) => Some(crate::admission::start(client.clone(), webhook, peers, metrics.clone()).await?.1),
            None => None,
        };
        let registered = Arc::new(AtomicBool::new(false));
        let election = leader_config(&config);
        let leader = match &election {
            Some(c) => Some(Leader::join(client.clone(), c.clone()).await?),
            None => None,
        };
        if let Some(l) = &leader {
            let handle = l.release_handle();
            cleanup.push(Box::pin(async move { handle.release().await }));
        }
        tasks.spawn(crate::leader::lead(leader, registration, leader_work, metrics.clone(), registered.clone()));
        await_leader_known(&client, election.as_ref(), &registered).await;
    }
    ready.store(true, Ordering::Relaxed);
    tracing::info!(controllers = config.controllers, simulate = config.simulate, identity = %config.identity, "kwok-pools running");
    supervise(tasks, cleanup).await
}

/// Pods are kept only when the operator needs them ([`PodFilter`]); a node that becomes
/// managed has its pods listed again.
fn filter_pods(config: &OperatorConfig, informers: &Arc<Informers>, tasks: &mut JoinSet<String>) {
    use crate::simulator::pod_filter::PodFilter;
    let nodes = crate::informer::shared::nodes(informers);
    let filter = Arc::new(PodFilter::new(nodes.store(), config.simulate.then(|| config.manage.clone())));
    let keep = filter.clone();
    informers.keep::<crate::informer::pod::SlimPod>(Arc::new(move |p| keep.keep(p)));
    let pods = crate::informer::shared::pods(informers);
    let mut changes = nodes.subscribe();
    tasks.spawn(async move {
        while let Some(change) = changes.recv().await {
            if let crate::informer::Change::Applied(node) = change
                && filter.now_managed(&node)
            {
                tracing::info!(node = %node.name_any(), "a node became managed: listing pods again for the pods on it");
                pods.relist();
            }
        }
        "pod filter".to_string()
    });
}

/// Something to do on a clean shutdown (give the lead up, leave the shard).
type Cleanup = Pin<Box<dyn Future<Output = ()> + Send>>;

fn leader_config(config: &OperatorConfig) -> Option<LeaderConfig> {
    config.leader_lease_duration.map(|duration| LeaderConfig {
        namespace: config.lease_namespace.clone(),
        lease: format!("{}-leader", config.instance),
        identity: config.identity.clone(),
        duration,
    })
}

/// Joins the simulator shard (membership Lease and loop), or simulates everything. The
/// membership runs on a thread of its own with a client of its own (`dedicated`).
fn join_shard(
    config: &OperatorConfig,
    client: &Client,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<String>,
    cleanup: &mut Vec<Cleanup>,
) -> anyhow::Result<Shard> {
    let (true, Some(settings)) = (config.simulate, &config.shard) else { return Ok(Shard::whole()) };
    let mc = MembershipConfig {
        namespace: config.lease_namespace.clone(),
        instance: config.instance.clone(),
        identity: config.identity.clone(),
        duration: settings.lease_duration,
        handover: settings.handover,
    };
    let (shard, member) = membership::membership(mc.clone(), metrics.clone());
    let ended = crate::dedicated::spawn("shard-membership", move || async move {
        match Client::try_default().await {
            Ok(own) => member.run(own).await,
            Err(e) => tracing::error!(error = %e, "cannot build the membership's Kubernetes client"),
        }
    })
    .map_err(|e| anyhow::anyhow!("cannot start the shard membership thread: {e}"))?;
    tasks.spawn(async move {
        let _ = ended.await;
        "simulator shard membership".to_string()
    });
    let client = client.clone();
    cleanup.push(Box::pin(async move { membership::leave(client, &mc).await }));
    Ok(shard)
}

/// Ready once the webhook is registered by this replica as leader, or another replica is
/// known to lead (this one stands by).
async fn await_leader_known(client: &Client, election: Option<&LeaderConfig>, registered: &AtomicBool) {
    let start = Instant::now();
    let mut told = Instant::now();
    loop {
        if registered.load(Ordering::Relaxed) {
            return;
        }
        if let Some(c) = election
            && crate::leader::held_by_other(client, c).await
        {
            return;
        }
        if told.elapsed() > Duration::from_secs(5) {
            told = Instant::now();
            tracing::info!(waited = ?start.elapsed(), "waiting to learn who leads (the leader Lease expires if its holder died)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wires every registered kind: its pools informer, and (with the controllers) its
/// controller on its child informer, to start once this replica leads.
fn wire_kinds(
    config: &OperatorConfig,
    shared: &Shared,
    metrics: &Arc<Metrics>,
) -> (Peers, Vec<SyncWait>, Vec<LeaderWork>) {
    let pool_watch = match &config.pool_selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let mut wiring = Wiring {
        config,
        shared,
        metrics: metrics.clone(),
        writes: Arc::new(Semaphore::new(config.max_writes_in_flight)),
        pool_watch,
        leader_work: Vec::new(),
        peers: Peers::default(),
        syncs: Vec::new(),
    };
    if config.controllers || config.simulate {
        kinds::visit_all(&mut wiring);
    }
    (wiring.peers, wiring.syncs, wiring.leader_work)
}

/// The simulator, wired before the informers start (so it sees their first lists) and
/// started once its stores have synced.
struct Simulator {
    nodes: NodeSimulator,
    node_changes: UnboundedReceiver<Change<Node>>,
    pods: PodSimulator,
    pod_changes: UnboundedReceiver<Change<SlimPod>>,
    node_changes_for_pods: UnboundedReceiver<Change<Node>>,
    /// The simulator's write budget, shared by every simulated kind.
    writes: WriteBudget,
}

impl Simulator {
    fn spawn_into(self, tasks: &mut JoinSet<String>) {
        let Simulator { nodes, node_changes, pods, pod_changes, node_changes_for_pods, .. } = self;
        tasks.spawn(async move {
            nodes.run(node_changes).await;
            "node simulator".to_string()
        });
        tasks.spawn(async move {
            pods.run(pod_changes, node_changes_for_pods).await;
            "pod simulator".to_string()
        });
    }
}

fn wire_simulator(
    config: &OperatorConfig,
    shared: &Shared,
    metrics: &Arc<Metrics>,
    shard: &Shard,
) -> impl Future<Output = anyhow::Result<Simulator>> + use<> {
    use crate::informer::shared::{nodes, pods, pools};
    let informers = &shared.informers;
    let (nodes, pods) = (nodes(informers), pods(informers));
    let node_changes = nodes.subscribe();
    let node_changes_for_pods = nodes.subscribe();
    let pod_changes = pods.subscribe();
    let lifecycles = Lifecycles {
        node_pools: Some(pools::<NodePool>(informers).store()),
        pod_pools: Some(pools::<PodPool>(informers).store()),
        defaults: lifecycle::Defaults { exit_delay: config.pod_termination_delay, job_run_time: config.job_run_time },
    };
    let writes = WriteBudget::new(config.max_simulator_writes_in_flight);
    let budget = writes.clone();
    let node_sim = NodeSimulator {
        client: shared.client.clone(),
        config: NodeSimConfig {
            manage: config.manage.clone(),
            lease_duration: config.lease_duration,
            status_frequency: config.status_frequency,
            defaults: config.node_defaults.clone(),
        },
        nodes: nodes.store(),
        addresses: shared.addresses.clone(),
        metrics: metrics.clone(),
        writes: writes.clone(),
        lifecycles: lifecycles.clone(),
        shard: shard.clone(),
        identity: config.shard.as_ref().map(|_| config.identity.clone()),
    };
    let pod_sim = PodSimulator {
        client: shared.client.clone(),
        config: PodSimConfig { manage: config.manage.clone(), lifecycles },
        nodes: nodes.store(),
        pods: pods.store(),
        metrics: metrics.clone(),
        writes,
        shard: shard.clone(),
    };
    let addresses = shared.addresses.clone();
    async move {
        wait_synced("nodes", &nodes.store()).await?;
        wait_synced("pods", &pods.store()).await?;
        // Rebuild the default address allocator from the nodes that exist.
        let mut a = addresses.lock().unwrap_or_else(|e| e.into_inner());
        for node in nodes.store().state() {
            for ip in node_status::internal_ips(&node) {
                a.observe(&node.name_any(), ip);
            }
        }
        drop(a);
        Ok(Simulator {
            nodes: node_sim,
            node_changes,
            pods: pod_sim,
            pod_changes,
            node_changes_for_pods,
            writes: budget,
        })
    }
}

/// The VMI simulator: waits (without holding anything up) until KubeVirt's VMI CRD is
/// installed, decides which part of KubeVirt to play, and runs.
async fn run_vmi_simulator(
    config: &OperatorConfig,
    informers: &Arc<Informers>,
    metrics: Arc<Metrics>,
    sim_writes: WriteBudget,
    shard: Shard,
) {
    use crate::simulator::vmis::{KubevirtRole, VmiSimulator};
    let client = informers.client().clone();
    let mut told = false;
    while !controllers::crd_established(&client, crate::api::kubevirt_crd::NAME).await.unwrap_or(false) {
        if !std::mem::replace(&mut told, true) {
            tracing::info!(
                "no VirtualMachineInstance CRD yet: VMIs are simulated once KubeVirt or `kwok-pools crd --kubevirt` is installed"
            );
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let kubevirt_installed = loop {
        // A definite answer: guessing wrong would play virt-controller beside a real one.
        match controllers::crd_established(&client, "kubevirts.kubevirt.io").await {
            Ok(installed) => break installed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether KubeVirt is installed (the operator needs get on customresourcedefinitions); asking again in 5s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    let role = config.kubevirt_role.unwrap_or(if kubevirt_installed {
        KubevirtRole::Handler
    } else {
        KubevirtRole::Controller
    });
    let vmi_client = match role {
        KubevirtRole::Controller => client.clone(),
        KubevirtRole::Handler => match impersonating(&config.kubevirt_handler_user).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, user = %config.kubevirt_handler_user, "cannot build a client that impersonates KubeVirt's handler; VMIs are not simulated");
                return std::future::pending().await;
            }
        },
    };
    tracing::info!(?role, "simulating VMIs");
    let (vmis, pods, nodes) = (
        crate::informer::shared::vmis(informers),
        crate::informer::shared::pods(informers),
        crate::informer::shared::nodes(informers),
    );
    let (vmi_changes, pod_changes) = (vmis.subscribe(), pods.subscribe());
    if let Err(e) = wait_synced("virtualmachineinstances", &vmis.store()).await {
        tracing::error!(error = %e, "the VMI store did not sync; VMIs are not simulated");
        return std::future::pending().await;
    }
    let sim = VmiSimulator {
        client: vmi_client,
        pod_client: client,
        role,
        manage: config.manage.clone(),
        selector: config.vmi_selector.clone(),
        nodes: nodes.store(),
        pods: pods.store(),
        vmis: vmis.store(),
        metrics,
        writes: sim_writes,
        shard,
    };
    sim.run(vmi_changes, pod_changes).await;
}

/// A client for the same cluster that acts as `user`.
async fn impersonating(user: &str) -> anyhow::Result<Client> {
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(user.to_string());
    Ok(Client::try_from(config)?)
}

/// Runs until a signal, or until a long-running task ends: a task that stops or dies is
/// logged and the process exits non-zero rather than looking healthy. On a signal the lead is
/// given up and the shard left, so the other replicas take over at once.
async fn supervise(mut tasks: JoinSet<String>, cleanup: Vec<Cleanup>) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted; shutting down");
            Ok(())
        }
        _ = term.recv() => {
            tracing::info!("terminated; shutting down");
            Ok(())
        }
        Some(done) = tasks.join_next() => match done {
            Ok(name) => Err(anyhow::anyhow!("the {name} stopped; exiting so that a supervisor restarts the operator")),
            Err(e) => Err(anyhow::anyhow!("a task failed: {e}; exiting so that a supervisor restarts the operator")),
        },
    };
    // Stop simulating and reconciling before handing over.
    tasks.abort_all();
    let _ = tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(cleanup)).await;
    outcome
}
