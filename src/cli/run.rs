//! `kwok-pools run` and `kwok-pools simulate`: the operator's flags. Each registered kind adds
//! its own ([`crate::kinds::add_flags`]); these are the process's.

use crate::admission::WebhookConfig;
use crate::admission::register::Endpoint;
use crate::api::duration::parse_flag_duration as parse_duration;
use crate::kinds::KindFlags;
use crate::kubelet::KubeletFlags;
use crate::operator::{OperatorConfig, ShardSettings};
use crate::simulator::manage::Manage;
use crate::simulator::selector::Selector;
use clap::Args;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Do not run the lifecycle simulator (another simulator, such as kwok, owns node and
    /// pod status).
    #[arg(long)]
    pub no_simulator: bool,

    /// Manage every node in the cluster (kwok flag).
    #[arg(long)]
    pub manage_all_nodes: bool,
    /// Manage exactly this node (kwok flag).
    #[arg(long, value_name = "NAME")]
    pub manage_single_node: Option<String>,
    /// Manage nodes whose annotations match (kwok flag; default kwok.x-k8s.io/node=fake when
    /// no other manage flag is given).
    #[arg(long, value_name = "SELECTOR")]
    pub manage_nodes_with_annotation_selector: Option<String>,
    /// Manage nodes whose labels match (kwok flag; combines with the annotation selector).
    #[arg(long, value_name = "SELECTOR")]
    pub manage_nodes_with_label_selector: Option<String>,

    /// Lease duration of simulated nodes, in seconds; leases are renewed every quarter of it.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(4..=3600))]
    pub node_lease_duration_seconds: u64,

    /// Only handle pools whose labels match this selector (run several operators side by side).
    /// Without it, a named instance handles the pools labelled
    /// `pools.kwok.x-k8s.io/instance=<instance>` and the default instance those without the label.
    #[arg(long, value_name = "SELECTOR")]
    pub pool_selector: Option<String>,
    /// Writes in flight to the API server from the pool controllers, all pools together.
    #[arg(long, default_value_t = 96)]
    pub max_writes_in_flight: usize,
    /// Writes in flight from the simulator (node, pod and VMI status and node lease renewals):
    /// a quarter is reserved for lease renewals, so heartbeats never wait long behind status
    /// writes; a renewal whose lease is half expired takes the first free place of any.
    #[arg(long, default_value_t = 96)]
    pub max_simulator_writes_in_flight: usize,
    /// Writes in flight for one pool.
    #[arg(long, default_value_t = 64)]
    pub max_writes_per_pool: usize,
    /// Children created per reconcile round (status shows progress between rounds; a round
    /// also ends after --round-seconds, the writes not started then wait for the next).
    #[arg(long, default_value_t = 5000)]
    pub max_creates_per_round: usize,
    /// Seconds a reconcile round may start writes for (status shows progress between rounds).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub round_seconds: u64,

    /// Do not serve the validating admission webhook.
    #[arg(long)]
    pub no_webhook: bool,
    /// Where the admission webhook listens (TLS).
    #[arg(long, default_value = "127.0.0.1:9443")]
    pub webhook_addr: SocketAddr,
    /// The URL the API server calls (default https://<webhook-addr>/validate).
    #[arg(long, conflicts_with = "webhook_service")]
    pub webhook_url: Option<String>,
    /// In a cluster: the Service in front of the webhook, as NAMESPACE/NAME[:PORT].
    #[arg(long)]
    pub webhook_service: Option<String>,
    /// A directory with tls.crt, tls.key and ca.crt (e.g. a mounted Secret) instead of a
    /// certificate made at start.
    #[arg(long)]
    pub webhook_cert_dir: Option<std::path::PathBuf>,
    /// A Secret in the operator's namespace (--lease-namespace) where the operator keeps the
    /// webhook's certificate and CA itself: made by the first replica, shared, renewed before
    /// expiry; the leader gives its installed webhook configurations that CA. For installs
    /// without certificate tooling (dist/install.yaml).
    #[arg(long, value_name = "NAME", conflicts_with = "webhook_cert_dir")]
    pub webhook_cert_secret: Option<String>,
    /// Accept admission reviews only from clients with a certificate signed by this CA (PEM):
    /// the API server's admission client identity (the local cluster writes it to
    /// pki/webhook-client-ca.crt; in a cluster, the CA your API server's AdmissionConfiguration
    /// kubeconfig uses). Without it anyone who reaches the port is served.
    #[arg(long, value_name = "FILE", env = "KWOK_POOLS_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<std::path::PathBuf>,
    /// What the leader does with the webhook configurations: `apply` writes them (an operator
    /// outside the cluster, whose URL and CA only it knows), `check` only reads them and says
    /// what is wrong (installed with the operator, which may not write any), `inject` patches
    /// the installed ones with the CA of --webhook-cert-secret; `auto`: apply with --webhook-url
    /// or no endpoint, inject with --webhook-service and --webhook-cert-secret, else check.
    #[arg(long, default_value = "auto", value_parser = ["auto", "apply", "check", "inject"])]
    pub webhook_registration: String,
    /// The name of this operator instance: its webhook configuration is `kwok-pools-<instance>`
    /// (or `kwok-pools` for the default instance).
    #[arg(long, default_value = "kwok-pools")]
    pub instance: String,

    /// This replica's name in the leader election and the simulator shard (default: the pod
    /// name, else host name and process id).
    #[arg(long, env = "KWOK_POOLS_IDENTITY")]
    pub identity: Option<String>,
    /// The namespace of the leader and shard membership Leases (default: the pod's namespace,
    /// else kube-system).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Run the pool controllers without electing a leader (only when one operator of this
    /// instance runs).
    #[arg(long)]
    pub no_leader_elect: bool,
    /// How long the leader Lease holds without renewal: a standby takes over within it.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_lease_duration: Duration,
    /// Simulate every managed node in this process, without sharing the work with other
    /// replicas of this instance.
    #[arg(long)]
    pub no_shard: bool,
    /// How long a simulator's membership Lease holds without renewal: a dead replica's nodes
    /// are taken over within it (keep it well under the node lease duration).
    #[arg(long, default_value = "12s", value_parser = parse_duration)]
    pub shard_lease_duration: Duration,
    /// How long a replica waits before it takes nodes over, so their previous simulator has
    /// let go.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub shard_handover: Duration,

    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Log as JSON.
    #[arg(long)]
    pub log_json: bool,

    #[command(flatten)]
    pub kubelet: KubeletFlags,
}

impl RunArgs {
    /// Against a local cluster (`kwok-pools cluster create`; the kubeconfig in use is its own),
    /// the CAs its components trust, where no flag chooses: the kubelets' serving certificates
    /// from the cluster CA (metrics-server verifies them), the kubelet API's client CA and the
    /// webhook's. What was taken, to say so.
    pub fn with_local_cluster_pki(&mut self, kubeconfig: Option<&std::path::Path>) -> Option<String> {
        let pki = crate::cluster::layout::local_pki(kubeconfig?)?;
        let mut taken = Vec::new();
        let server = &mut self.kubelet.server;
        if server.kubelet_serving_ca_cert.is_none() {
            server.kubelet_serving_ca_cert = Some(pki.ca_cert.clone());
            server.kubelet_serving_ca_key = Some(pki.ca_key.clone());
            taken.push("the kubelet serving CA");
        }
        if server.kubelet_client_ca.is_none() {
            server.kubelet_client_ca = Some(pki.ca_cert.clone());
            taken.push("the kubelet client CA");
        }
        if self.webhook_client_ca.is_none()
            && self.webhook_cert_dir.is_none()
            && let Some(ca) = pki.webhook_client_ca
        {
            self.webhook_client_ca = Some(ca);
            taken.push("the webhook client CA");
        }
        (!taken.is_empty()).then(|| {
            format!(
                "using local cluster {:?}'s PKI ({}) for {} (flags override it)",
                pki.cluster,
                pki.ca_cert.parent().map(|p| p.display().to_string()).unwrap_or_default(),
                taken.join(", ")
            )
        })
    }

    fn webhook(&self) -> Result<Option<WebhookConfig>, String> {
        if self.no_webhook {
            return Ok(None);
        }
        let (endpoint, hosts) = match (&self.webhook_url, &self.webhook_service) {
            (Some(url), _) => (Some(Endpoint::Url(url.clone())), vec![]),
            (None, Some(svc)) => {
                let (ns, rest) = svc
                    .split_once('/')
                    .ok_or_else(|| format!("--webhook-service {svc:?}: use NAMESPACE/NAME[:PORT]"))?;
                let (name, port) = match rest.split_once(':') {
                    Some((n, p)) => (
                        n,
                        p.parse::<i32>()
                            .map_err(|_| format!("--webhook-service {svc:?}: the port must be a number"))?,
                    ),
                    None => (rest, 443),
                };
                let hosts = vec![format!("{name}.{ns}.svc"), format!("{name}.{ns}.svc.cluster.local")];
                (Some(Endpoint::Service { namespace: ns.into(), name: name.into(), port }), hosts)
            }
            (None, None) => (None, vec![]),
        };
        let handled = self.pools_handled();
        let object_selector =
            Some(Selector::parse(&handled).map_err(|e| format!("--pool-selector: {e}"))?.to_label_selector());
        let configuration_name = if self.instance == "kwok-pools" {
            "kwok-pools".to_string()
        } else {
            format!("kwok-pools-{}", self.instance)
        };
        Ok(Some(WebhookConfig {
            addr: self.webhook_addr,
            configuration_name,
            endpoint,
            hosts,
            cert_dir: self.webhook_cert_dir.clone(),
            cert_secret: self
                .webhook_cert_secret
                .clone()
                .map(|name| (self.lease_namespace.clone().unwrap_or_else(|| "kube-system".into()), name)),
            object_selector,
            limits: crate::admission::serve::Limits::default(),
            clients: crate::admission::serve::ClientAuth { ca_file: self.webhook_client_ca.clone() },
            registration: match (self.webhook_registration.as_str(), &self.webhook_service, &self.webhook_cert_secret) {
                ("apply", _, _) | ("auto", None, _) => crate::admission::RegistrationMode::Apply,
                ("inject", _, _) | ("auto", Some(_), Some(_)) => crate::admission::RegistrationMode::Inject,
                _ => crate::admission::RegistrationMode::Check,
            },
        }))
    }

    /// The operator's configuration, with every kind's flags (`kinds`).
    pub fn config(&self, controllers: bool, kinds: KindFlags) -> Result<OperatorConfig, String> {
        // No --manage-* flag: kwok's default annotation, and this instance's nodes only.
        let no_manage_flag = !self.manage_all_nodes
            && self.manage_single_node.is_none()
            && self.manage_nodes_with_annotation_selector.is_none()
            && self.manage_nodes_with_label_selector.is_none();
        let instance_nodes = no_manage_flag.then(|| self.nodes_handled());
        let manage = Manage::from_flags(
            self.manage_all_nodes,
            self.manage_single_node.as_deref(),
            self.manage_nodes_with_annotation_selector.as_deref(),
            self.manage_nodes_with_label_selector.as_deref().or(instance_nodes.as_deref()),
        )?;
        if !controllers && self.no_simulator {
            return Err("`simulate` with --no-simulator would do nothing".into());
        }
        Ok(OperatorConfig {
            controllers,
            simulate: !self.no_simulator,
            manage,
            lease_duration: Duration::from_secs(self.node_lease_duration_seconds),
            kinds,
            kubelet: self.kubelet.clone(),
            pool_selector: Some(self.pools_handled()),
            max_writes_in_flight: self.max_writes_in_flight.max(1),
            max_writes_per_pool: self.max_writes_per_pool.max(1),
            max_simulator_writes_in_flight: self.max_simulator_writes_in_flight.max(1),
            max_creates_per_round: self.max_creates_per_round.max(1),
            round_time: std::time::Duration::from_secs(self.round_seconds),
            metrics_addr: self.metrics_addr,
            instance: self.instance.clone(),
            webhook: self.webhook()?,
            identity: self.identity.clone().unwrap_or_else(default_identity),
            lease_namespace: self.lease_namespace.clone().unwrap_or_else(|| "kube-system".into()),
            leader_lease_duration: (!self.no_leader_elect)
                .then_some(self.leader_lease_duration.max(Duration::from_secs(3))),
            shard: self.shard()?,
        })
    }

    fn shard(&self) -> Result<Option<ShardSettings>, String> {
        if self.no_shard {
            return Ok(None);
        }
        let node_lease = Duration::from_secs(self.node_lease_duration_seconds);
        if self.shard_lease_duration + self.shard_handover >= node_lease {
            return Err(format!(
                "--shard-lease-duration ({:?}) plus --shard-handover ({:?}) must stay under the node lease duration ({node_lease:?}): a dead replica's nodes would go NotReady before they are taken over",
                self.shard_lease_duration, self.shard_handover
            ));
        }
        Ok(Some(ShardSettings {
            lease_duration: self.shard_lease_duration.max(Duration::from_secs(3)),
            handover: self.shard_handover,
        }))
    }
}

/// The label that gives a pool to an operator instance (see [`RunArgs::pools_handled`]).
pub use crate::api::conventions::INSTANCE_LABEL;

impl RunArgs {
    /// Which pools this instance reconciles, so that two instances never reconcile one pool:
    /// those `--pool-selector` selects when it is given (the user partitions the pools);
    /// else, for a named instance, the pools labelled `pools.kwok.x-k8s.io/instance=<name>`;
    /// else (the default instance) the pools without that label.
    /// The nodes this instance simulates when no --manage-* flag says otherwise: a named
    /// instance those of its own pools (their children carry `pools.kwok.x-k8s.io/instance=<name>`),
    /// the default instance the fake nodes of no named instance, so two instances never
    /// simulate one node.
    fn nodes_handled(&self) -> String {
        if self.instance == "kwok-pools" {
            format!("!{INSTANCE_LABEL}")
        } else {
            format!("{INSTANCE_LABEL}={}", self.instance)
        }
    }

    fn pools_handled(&self) -> String {
        match &self.pool_selector {
            Some(s) => s.clone(),
            None if self.instance != "kwok-pools" => format!("{INSTANCE_LABEL}={}", self.instance),
            None => format!("!{INSTANCE_LABEL}"),
        }
    }
}

/// The pod name in a cluster (POD_NAME, or the host name a pod gets), with the process id
/// outside one, so two processes on one machine never share a name.
fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host =
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "kwok-pools".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(flags: &[&str]) -> RunArgs {
        Cli::parse_from(std::iter::once("run").chain(flags.iter().copied())).run
    }

    #[test]
    fn two_instances_never_handle_one_pool() {
        let default = Selector::parse(&args(&[]).pools_handled()).unwrap();
        let named = Selector::parse(&args(&["--instance", "team-a"]).pools_handled()).unwrap();
        let other = Selector::parse(&args(&["--instance", "team-b"]).pools_handled()).unwrap();
        let unlabelled = std::collections::BTreeMap::new();
        let for_a: std::collections::BTreeMap<String, String> =
            [(INSTANCE_LABEL.to_string(), "team-a".to_string())].into();
        for pool in [&unlabelled, &for_a] {
            let takers = [&default, &named, &other].iter().filter(|s| s.matches(Some(pool))).count();
            assert_eq!(takers, 1, "{pool:?}");
        }
        assert!(default.matches(Some(&unlabelled)) && named.matches(Some(&for_a)));
        // An explicit selector is the user's partition.
        assert_eq!(args(&["--instance", "x", "--pool-selector", "tier=a"]).pools_handled(), "tier=a");
    }

    #[test]
    fn two_instances_never_simulate_one_node_and_explicit_flags_are_kept() {
        use crate::informer::fixtures::TestNode;
        use k8s_openapi::api::core::v1::Node;
        let manage = |flags: &[&str]| args(flags).config(true, KindFlags::default()).unwrap().manage;
        let fake = |instance: Option<&str>| {
            let n = Node::test("n").annotate("kwok.x-k8s.io/node", "fake");
            match instance {
                Some(i) => n.label(INSTANCE_LABEL, i),
                None => n,
            }
        };
        let instances = [manage(&[]), manage(&["--instance", "team-a"]), manage(&["--instance", "team-b"])];
        for node in [fake(None), fake(Some("team-a")), fake(Some("team-b"))] {
            assert_eq!(instances.iter().filter(|m| m.manages(&node)).count(), 1, "{:?}", node.metadata.labels);
        }
        assert!(instances[1].manages(&fake(Some("team-a"))) && instances[0].manages(&fake(None)));
        // A karpenter or kwok node (the annotation, no instance label) is the default instance's.
        assert!(!instances[1].manages(&fake(None)));
        // A flag the user gives is theirs: the instance adds nothing to it.
        assert!(manage(&["--instance", "team-a", "--manage-all-nodes"]).manages(&fake(None)));
        let labelled = manage(&["--instance", "team-a", "--manage-nodes-with-label-selector", "tier=x"]);
        assert!(labelled.manages(&fake(None).label("tier", "x")));
    }
}
