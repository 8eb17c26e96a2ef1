//! The operator process: starts the shared informers, the pool controllers, the simulator and
//! the HTTP servers, all from one [`OperatorConfig`]. Nothing global.

use crate::admission::review::Peers;
use crate::informer::{Informers, SyncWait, sync_wait};
use crate::kinds::{self, Kind, KindFlags, Visitor};
use crate::kubelet::{self, Devices, Kubelet, KubeletFlags};
use crate::leader::{Leader, LeaderConfig};
use crate::pool::context::PoolContext;
use crate::pool::knobs::PoolStore;
use crate::pool::{Shared, controller};
use crate::shard::Shard;
use crate::shard::membership::{self, MembershipConfig};
use crate::simulator::lifecycle::Lifecycles;
use crate::simulator::machinery::WriteBudget;
use crate::simulator::manage::Manage;
use crate::simulator::pod_filter::{PodFilter, Wanted};
use crate::simulator::selector::Selector;
use crate::simulator::{SimContext, Simulation};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server::{self, Health};
use kube::{Client, ResourceExt};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Run the pool controllers.
    pub controllers: bool,
    /// Run the lifecycle simulator.
    pub simulate: bool,
    pub manage: Manage,
    /// Lease duration of simulated nodes; renewals come every quarter of it.
    pub lease_duration: Duration,
    /// Every kind's own flags.
    pub kinds: KindFlags,
    /// The simulated kubelet's flags.
    pub kubelet: KubeletFlags,
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
    /// How long a reconcile round may start writes (`--round-seconds`).
    pub round_time: std::time::Duration,
    pub metrics_addr: SocketAddr,
    /// The instance name (`--instance`).
    pub instance: String,
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

/// Work only the leader does, named for the supervisor, built afresh each time it leads.
type LeaderWork = crate::leader::MakeWork;

/// What the per-kind wiring needs from the process, and what it gathers.
struct Wiring<'a> {
    config: &'a OperatorConfig,
    shared: &'a Shared,
    metrics: Arc<Metrics>,
    writes: Arc<Semaphore>,
    /// Which pools this instance's controllers handle.
    pool_watch: Selector,
    /// The controllers, started once this replica leads.
    leader_work: Vec<LeaderWork>,
    /// The pools of every kind, for the webhook's cross-pool rules.
    peers: Peers,
    /// Stores the operator waits for before it says ready.
    syncs: Vec<SyncWait>,
    /// Each kind's environment (shared by its controller and its simulator), by kind.
    envs: std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    /// The pools of every kind, as sources of lifecycle knobs.
    lifecycles: Lifecycles,
    /// A kind's flags that do not make sense (the first one).
    error: Option<String>,
}

impl Visitor for Wiring<'_> {
    fn visit<K: Kind>(&mut self) {
        // The controllers and the webhook need the pools; the simulator reads the lifecycle
        // knobs of every kind (without the CRDs, nothing waits for these stores).
        let pools = crate::informer::shared::pools::<K>(&self.shared.informers);
        self.peers = std::mem::take(&mut self.peers).with(pools.store());
        self.lifecycles.sources.push(Arc::new(PoolStore(pools.store())));
        let env = match K::env(&self.config.kinds.get::<K>(), self.shared) {
            Ok(env) => env,
            Err(e) => {
                tracing::error!(kind = %K::kind(&()), category = e.category(), error = %e, "cannot set up the kind");
                self.error.get_or_insert(format!("{}: {e}", K::kind(&())));
                return;
            }
        };
        self.envs.insert(std::any::TypeId::of::<K>(), Arc::new(env.clone()));
        if self.config.controllers {
            self.wire_controller::<K>(pools, env);
        }
    }
}

/// The controllers of the registry's views ([`kinds::visit_views`]): the pools are the
/// registered kind's (its webhook, its knobs), only the children differ.
struct Views<'a, 'b>(&'a mut Wiring<'b>);

impl Visitor for Views<'_, '_> {
    fn visit<K: Kind>(&mut self) {
        let w = &mut *self.0;
        match K::env(&w.config.kinds.get::<K>(), w.shared) {
            Ok(env) => {
                // Only the view's own pools are kept (the kind's informer holds them all).
                let keep: crate::informer::Keep<K> = Arc::new(|p: &K| p.handled_here());
                w.wire_controller::<K>(crate::informer::shared::pools_kept::<K>(&w.shared.informers, keep), env);
            }
            Err(e) => {
                w.error.get_or_insert(format!("{}: {e}", K::kind(&())));
            }
        }
    }
}

impl Wiring<'_> {
    fn wire_controller<K: Kind>(&mut self, pools: Arc<crate::informer::Informer<K>>, env: K::Env) {
        self.syncs.push(sync_wait(K::plural(&()).into_owned(), pools.store()));
        let (shared, metrics, writes, handles) =
            (self.shared, self.metrics.clone(), self.writes.clone(), self.pool_watch.clone());
        let client = shared.client.clone();
        let informers = shared.informers.clone();
        let config = self.config.clone();
        let kind = K::kind(&()).into_owned();
        let events = Arc::new(crate::pool::events::Events::new(shared.client.clone(), &config.identity));
        let pools_store = pools.store();
        // Built afresh each time this replica leads (a term's controller is dropped with it).
        let start = Arc::new(move |children: Arc<crate::informer::Informer<K::Stored>>| {
            let changes = children.subscribe();
            let mut ctx =
                PoolContext::<K>::new(client.clone(), children.store(), pools.store(), env.clone(), metrics.clone());
            ctx.owners = Some(children.index_owners(&K::kind(&())));
            ctx.writes = writes.clone();
            ctx.max_in_flight_per_pool = config.max_writes_per_pool;
            ctx.max_creates = config.max_creates_per_round;
            ctx.round_time = config.round_time;
            ctx.events = Some(events.clone());
            controller::run(pools.clone(), handles.clone(), changes, Arc::new(ctx))
        });
        match K::CHILD_CRD {
            None => {
                let children = K::children(&informers);
                self.syncs.push(sync_wait(K::NOUN.to_string() + "s", children.store()));
                self.leader_work.push(Arc::new(move || {
                    let (start, children, kind) = (start.clone(), children.clone(), kind.clone());
                    Box::pin(async move {
                        start(children).await;
                        format!("{kind} controller")
                    })
                }));
            }
            // A child kind that may not be installed: never holds up readiness or the other
            // kinds; the controller starts when the CRD appears.
            Some(crd) => {
                let client = shared.client.clone();
                self.leader_work.push(Arc::new(move || {
                    let (start, client, kind) = (start.clone(), client.clone(), kind.clone());
                    let (pools_store, informers) = (pools_store.clone(), informers.clone());
                    Box::pin(async move {
                        controller::await_child_crd::<K>(&client, crd, &pools_store, Duration::from_secs(10)).await;
                        tracing::info!(kind, crd = crd.name, "child CRD installed; starting the controller");
                        start(K::children(&informers)).await;
                        format!("{kind} controller")
                    })
                }));
            }
        }
    }
}

/// Every registered kind's simulations and what each adds to the kubelet's nodes, wired before
/// the informers start.
struct Simulations<'a> {
    context: SimContext,
    config: &'a OperatorConfig,
    envs: &'a std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    out: Vec<Simulation>,
    devices: Vec<Arc<dyn Devices>>,
}

impl Visitor for Simulations<'_> {
    fn visit<K: Kind>(&mut self) {
        let Some(env) = self.envs.get(&std::any::TypeId::of::<K>()).and_then(|e| e.downcast_ref::<K::Env>()) else {
            return;
        };
        self.out.extend(K::simulations(env, &self.config.kinds.get::<K>(), &self.context));
        self.devices.extend(K::devices(env, &self.context));
    }
}

pub async fn run(config: OperatorConfig) -> anyhow::Result<()> {
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("cannot build a Kubernetes client: {e}; set KUBECONFIG (e.g. `export KUBECONFIG=$(kwok-pools cluster kubeconfig)`) or run in a cluster")
    })?;
    let metrics = Arc::new(Metrics::new(kinds::register_metrics));
    let ready = Arc::new(AtomicBool::new(false));
    let informers = Informers::new(client.clone());
    // Why the webhook is not registered (the leader retries meanwhile).
    let webhook_problem: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    // The leader election's contact with the API server, once it runs.
    let contact: Arc<std::sync::Mutex<Option<crate::leader::Contact>>> = Arc::default();
    let health = health(&metrics, &ready, &informers, &webhook_problem, &contact);
    let bound = server::serve(config.metrics_addr, health).await?;
    tracing::info!(%bound, "serving /metrics, /healthz and /readyz");

    let mut shared = shared(&config, &client, informers)?;
    if shared.kubelet.defaults.kubelet_version.is_empty() {
        shared.kubelet.defaults.kubelet_version = server_version(&client).await;
    }
    let mut tasks = JoinSet::new();
    let mut cleanup: Vec<Cleanup> = Vec::new();
    filter_pods(&config, &shared.informers, &mut tasks);
    let mut wiring = wire_kinds(&config, &shared, &metrics)?;
    wire_policies(&config, &client, &shared, &mut wiring, &mut tasks);
    let shard = join_shard(&config, &client, &metrics, &mut tasks, &mut cleanup)?;
    let simulations = simulations(&config, &shared, &metrics, &shard, &wiring);
    let Wiring { peers, syncs, mut leader_work, .. } = wiring;
    if config.controllers {
        leader_work.push(presence_work(&config, &client));
    }
    shared.informers.start_all();
    for wait in syncs {
        wait.await?;
    }
    for simulation in simulations {
        for wait in simulation.ready {
            wait.await?;
        }
        let (name, run) = (simulation.name, simulation.run);
        tasks.spawn(async move {
            run.await;
            name
        });
    }
    if config.controllers {
        let registration = match config.webhook.clone() {
            Some(webhook) => Some(crate::admission::start(client.clone(), webhook, peers, metrics.clone()).await?.1),
            None => None,
        };
        let leading = Arc::new(AtomicBool::new(false));
        let election = leader_config(&config);
        let leader = match &election {
            Some(c) => Some(Leader::join(c.clone())?),
            None => None,
        };
        let election_state = leader.as_ref().map(Leader::watch);
        if let Some(l) = &leader {
            *crate::sync::lock(&contact) = Some(l.contact());
            let handle = l.release_handle();
            cleanup.push(Box::pin(async move { handle.release().await }));
        }
        tasks.spawn(crate::leader::lead(
            leader,
            registration,
            leader_work,
            metrics.clone(),
            leading.clone(),
            webhook_problem.clone(),
        ));
        await_leader_known(election_state, &leading).await;
    }
    ready.store(true, Ordering::Relaxed);
    tracing::info!(controllers = config.controllers, simulate = config.simulate, identity = %config.identity, "kwok-pools running");
    supervise(tasks, cleanup).await
}

/// Lifecycle policies: the engine asks them (every simulating replica follows them); the leader
/// writes their status.
fn wire_policies(
    config: &OperatorConfig,
    client: &Client,
    shared: &Shared,
    wiring: &mut Wiring<'_>,
    tasks: &mut JoinSet<String>,
) {
    let policies = Arc::new(crate::policy::source::Policies::default());
    wiring.lifecycles.policies = Some(policies.clone());
    if config.simulate {
        let (client, informers, policies) = (client.clone(), shared.informers.clone(), policies.clone());
        let engine = wiring.lifecycles.clone();
        tasks.spawn(async move {
            crate::policy::controller::follow(client, informers, policies, engine).await;
            "lifecycle policy follower".to_string()
        });
    }
    if config.controllers {
        let (client, informers, manage) = (client.clone(), shared.informers.clone(), config.manage.clone());
        wiring.leader_work.push(Arc::new(move || {
            let (client, informers, policies, manage) =
                (client.clone(), informers.clone(), policies.clone(), manage.clone());
            Box::pin(async move {
                crate::policy::controller::write_status(client, informers, policies, manage).await;
                "lifecycle policy status".to_string()
            })
        }));
    }
}

/// What `/readyz` and `/healthz` read: the informers' problems, the webhook registration's,
/// and the leader election's contact with the API server.
fn health(
    metrics: &Arc<Metrics>,
    ready: &Arc<AtomicBool>,
    informers: &Arc<Informers>,
    webhook_problem: &Arc<std::sync::Mutex<Option<String>>>,
    contact: &Arc<std::sync::Mutex<Option<crate::leader::Contact>>>,
) -> Health {
    let (watched, webhook_seen, contact_seen) = (informers.clone(), webhook_problem.clone(), contact.clone());
    let problems: server::Problems = Arc::new(move || {
        let mut all = watched.problems();
        all.extend(crate::sync::lock(&webhook_seen).clone());
        all.extend(crate::sync::lock(&contact_seen).as_ref().and_then(crate::leader::Contact::problem));
        all
    });
    let watched = informers.clone();
    let dead: server::Problems = Arc::new(move || watched.dead());
    let watched = informers.clone();
    let cached: server::Cached =
        Arc::new(move || watched.watched().iter().map(|w| (w.watched(), w.cached())).collect());
    Health { metrics: metrics.clone(), ready: ready.clone(), problems, dead, cached }
}

/// The version nodes report as their kubelet's when their template and `--node-kubelet-version`
/// say nothing: the API server's (a kubelet of the same release), else the release this build
/// speaks.
async fn server_version(client: &Client) -> String {
    match tokio::time::timeout(std::time::Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(v)) if !v.git_version.is_empty() => v.git_version,
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "no answer in 10s".to_string(),
            };
            let fallback = crate::kubelet::status::node::BUILT_FOR.to_string();
            tracing::warn!(%why, %fallback, "cannot read the API server's version; nodes report {fallback} as their kubelet's (set --node-kubelet-version to choose)");
            fallback
        }
    }
}

/// What every kind's environment is built from, the simulated kubelet among it.
fn shared(config: &OperatorConfig, client: &Client, informers: Arc<Informers>) -> anyhow::Result<Shared> {
    let kubelet = Kubelet::new(&config.kubelet, &config.instance, config.simulate)
        .map_err(|e| anyhow::anyhow!("the simulated kubelet cannot start ({} problem): {e}", e.category()))?;
    Ok(Shared {
        client: client.clone(),
        informers,
        simulate: config.simulate,
        instance: config.instance.clone(),
        kubelet,
    })
}

/// Every registered kind's simulations, built before the informers start (none without the
/// simulator).
fn simulations(
    config: &OperatorConfig,
    shared: &Shared,
    metrics: &Arc<Metrics>,
    shard: &Shard,
    wiring: &Wiring<'_>,
) -> Vec<Simulation> {
    if !config.simulate {
        return Vec::new();
    }
    let context = SimContext {
        client: shared.client.clone(),
        informers: shared.informers.clone(),
        metrics: metrics.clone(),
        writes: WriteBudget::new(config.max_simulator_writes_in_flight),
        shard: shard.clone(),
        manage: config.manage.clone(),
        lifecycles: wiring.lifecycles.clone(),
        node_lease_duration: config.lease_duration,
        shard_takeover: config.shard.as_ref().map_or(Duration::ZERO, |s| s.lease_duration + s.handover),
        identity: config.shard.as_ref().map(|_| config.identity.clone()),
        clock: crate::simulator::clock::Clock::System,
    };
    let mut s = Simulations { context, config, envs: &wiring.envs, out: Vec::new(), devices: Vec::new() };
    kinds::visit_all(&mut s);
    // The kubelet simulates every managed node whoever made it, whichever kinds are registered.
    // Storage: the simulated CSI driver, and the volume view the kubelet starts pods by.
    let (storage, mounts) = crate::storage::simulations(&s.context);
    let mut all = kubelet::simulations(&shared.kubelet, &s.context, s.devices, mounts);
    all.extend(storage);
    all.extend(s.out);
    all
}

/// Pods are kept only when the operator needs them ([`PodFilter`]), with the labels someone
/// reads; a node that becomes managed has its pods listed again.
fn filter_pods(config: &OperatorConfig, informers: &Arc<Informers>, tasks: &mut JoinSet<String>) {
    struct Wants(Vec<Wanted>, Vec<&'static str>);
    impl Visitor for Wants {
        fn visit<K: Kind>(&mut self) {
            self.0.push(K::keeps_pod);
            self.1.extend_from_slice(K::POD_LABELS);
        }
    }
    let mut wants = Wants(Vec::new(), kubelet::POD_LABELS.to_vec());
    kinds::visit_all(&mut wants);
    informers.read_pod_labels(&wants.1);
    let nodes = crate::informer::shared::nodes(informers);
    let filter = Arc::new(PodFilter::new(nodes.store(), config.simulate.then(|| config.manage.clone()), wants.0));
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

/// The leader's presence (which pools this instance handles, for `kwok-pools status` and other
/// instances), and a warning for each pool no running instance handles: at start, then for
/// pools that appear later (once per pool).
fn presence_work(config: &OperatorConfig, client: &Client) -> LeaderWork {
    use crate::leader::presence::{self, Presence};
    let me = Presence {
        instance: config.instance.clone(),
        identity: config.identity.clone(),
        selector: config.pool_selector.clone().unwrap_or_default(),
    };
    let (client, namespace) = (client.clone(), config.lease_namespace.clone());
    Arc::new(move || {
        let (client, namespace, me) = (client.clone(), namespace.clone(), me.clone());
        Box::pin(async move {
            let mut keep = tokio::spawn(presence::keep(client.clone(), namespace.clone(), me));
            // Other instances' presences are renewed every 10 s: give them one round.
            tokio::time::sleep(presence::DURATION / 3 + Duration::from_secs(1)).await;
            let mut warned = std::collections::HashSet::new();
            // The presence stops with the term (this future is dropped with it).
            let _stop = AbortOnDrop(keep.abort_handle());
            loop {
                warn_unhandled(&client, &namespace, &mut warned).await;
                tokio::select! {
                    _ = &mut keep => break,
                    () = tokio::time::sleep(Duration::from_secs(60)) => {}
                }
            }
            "presence".to_string()
        })
    })
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Warns of each pool that no running instance handles (not of one in `warned` again).
async fn warn_unhandled(client: &Client, namespace: &str, warned: &mut std::collections::HashSet<String>) {
    use crate::leader::presence;
    let leases = match presence::list(client, namespace).await {
        Ok(l) => l,
        Err(e) => return tracing::debug!(error = %e, "cannot list the instances' presence Leases"),
    };
    let running = presence::running(&leases, k8s_openapi::jiff::Timestamp::now());
    let mut pools = PoolLabels { client, lists: Vec::new() };
    kinds::visit_all(&mut pools);
    for list in pools.lists {
        let Ok(found) = list.await else { continue };
        for (kind, namespace, name, labels) in found {
            if presence::handler(&running, &labels).is_none() && warned.insert(format!("{kind}/{namespace}/{name}")) {
                let advice = presence::unhandled_advice(&labels);
                tracing::warn!(kind, namespace, name, "a pool nothing simulates: {advice}");
            }
        }
    }
}

type Labelled = (String, String, String, std::collections::BTreeMap<String, String>);

/// Every pool's kind, namespace, name and labels.
struct PoolLabels<'a> {
    client: &'a Client,
    lists: Vec<futures::future::BoxFuture<'static, kube::Result<Vec<Labelled>>>>,
}

impl Visitor for PoolLabels<'_> {
    fn visit<K: Kind>(&mut self) {
        let api: kube::Api<K> = kube::Api::all(self.client.clone());
        self.lists.push(Box::pin(async move {
            let kind = K::kind(&()).into_owned();
            let list = api.list(&kube::api::ListParams::default()).await?;
            Ok(list
                .items
                .iter()
                .map(|p| (kind.clone(), p.namespace().unwrap_or_default(), p.name_any(), p.labels().clone()))
                .collect())
        }));
    }
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

/// Returns once this replica leads (its webhook registration then decides readiness), or
/// another replica is known to lead (this one stands by).
async fn await_leader_known(
    election: Option<tokio::sync::watch::Receiver<crate::leader::State>>,
    leading: &AtomicBool,
) {
    let start = Instant::now();
    let mut told = Instant::now();
    loop {
        if leading.load(Ordering::Relaxed) {
            return;
        }
        if election.as_ref().is_some_and(|e| e.borrow().holder.is_some()) {
            return;
        }
        if told.elapsed() > Duration::from_secs(5) {
            told = Instant::now();
            tracing::info!(waited = ?start.elapsed(), "waiting to learn who leads (the leader Lease expires if its holder died)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wires every registered kind: its pools informer, its environment, and (with the
/// controllers) its controller on its child informer, to start once this replica leads.
fn wire_kinds<'a>(
    config: &'a OperatorConfig,
    shared: &'a Shared,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Wiring<'a>> {
    let pool_watch = match &config.pool_selector {
        Some(s) => Selector::parse(s).map_err(|e| anyhow::anyhow!("--pool-selector: {e}"))?,
        None => Selector::default(),
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
        envs: std::collections::HashMap::new(),
        lifecycles: Lifecycles::default(),
        error: None,
    };
    if config.controllers || config.simulate {
        kinds::visit_all(&mut wiring);
    }
    if config.controllers {
        kinds::visit_views(&mut Views(&mut wiring));
    }
    match wiring.error.take() {
        Some(e) => Err(anyhow::anyhow!("{e}")),
        None => Ok(wiring),
    }
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
