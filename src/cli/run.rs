//! `kwok-pools run` and `kwok-pools simulate`: the operator's flags.

use super::cluster::parse_duration;
use crate::operator::OperatorConfig;
use crate::simulator::manage::Manage;
use crate::simulator::node_status::NodeDefaults;
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
    /// How often node conditions get a fresh heartbeat time (e.g. 60s, 5m).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub node_status_frequency: Duration,
    /// The range InternalIPs come from for nodes whose pool sets no spec.internalIPs.
    #[arg(long, default_value = "100.64.0.0/10")]
    pub node_ip_range: ipnet::IpNet,
    /// nodeInfo.kubeletVersion for nodes whose template sets none.
    #[arg(long, default_value = "fake")]
    pub node_kubelet_version: String,

    /// Only handle pools whose labels match this selector (run several operators side by side).
    #[arg(long, value_name = "SELECTOR")]
    pub pool_selector: Option<String>,
    /// Writes in flight to the API server from the pool controllers, all pools together.
    #[arg(long, default_value_t = 96)]
    pub max_writes_in_flight: usize,
    /// Writes in flight from the simulator (leases, node and pod status).
    #[arg(long, default_value_t = 96)]
    pub max_simulator_writes_in_flight: usize,
    /// Writes in flight for one pool.
    #[arg(long, default_value_t = 64)]
    pub max_writes_per_pool: usize,
    /// Children created per reconcile round (status shows progress between rounds).
    #[arg(long, default_value_t = 1000)]
    pub max_creates_per_round: usize,

    /// Remove deleted pods after this long (e.g. 1s) instead of waiting for their whole
    /// termination grace period, as a kubelet does when containers exit at once.
    #[arg(long, value_parser = parse_duration)]
    pub pod_termination_delay: Option<Duration>,
    /// How long pods owned by a Job run before they complete successfully.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub job_run_time: Duration,

    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Log as JSON.
    #[arg(long)]
    pub log_json: bool,
}

impl RunArgs {
    pub fn config(&self, controllers: bool) -> Result<OperatorConfig, String> {
        let manage = Manage::from_flags(
            self.manage_all_nodes,
            self.manage_single_node.as_deref(),
            self.manage_nodes_with_annotation_selector.as_deref(),
            self.manage_nodes_with_label_selector.as_deref(),
        )?;
        if !controllers && self.no_simulator {
            return Err("`simulate` with --no-simulator would do nothing".into());
        }
        Ok(OperatorConfig {
            controllers,
            simulate: !self.no_simulator,
            manage,
            lease_duration: Duration::from_secs(self.node_lease_duration_seconds),
            status_frequency: self.node_status_frequency.max(Duration::from_secs(1)),
            node_defaults: NodeDefaults { kubelet_version: self.node_kubelet_version.clone() },
            node_ip_range: self.node_ip_range.trunc(),
            pool_selector: self.pool_selector.clone(),
            max_writes_in_flight: self.max_writes_in_flight.max(1),
            max_writes_per_pool: self.max_writes_per_pool.max(1),
            max_simulator_writes_in_flight: self.max_simulator_writes_in_flight.max(1),
            max_creates_per_round: self.max_creates_per_round.max(1),
            metrics_addr: self.metrics_addr,
            pod_termination_delay: self.pod_termination_delay,
            job_run_time: self.job_run_time,
        })
    }
}
