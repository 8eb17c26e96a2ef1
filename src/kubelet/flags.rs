//! The simulated kubelet's flags (on `run` and `simulate`) and what the process builds from
//! them once: the node address allocator, the defaults of a node's status and the kubelet
//! API's listener and CAs. Shared with whoever renders nodes born in the kubelet's care
//! (NodePool), so a node is created with the status and endpoint the kubelet then keeps.

use super::node::renewal::DEFAULT_FRACTION;
use super::server::{ServerEnv, ServerFlags};
use super::status::fate::Defaults;
use super::status::node::NodeDefaults;
use crate::api::duration::parse_flag_duration as parse_duration;
use crate::ipam::HostAllocator;
use crate::ipam::fallback::FallbackRange;
use crate::setup::SetupError;
use crate::sync::lock;
use ipnet::IpNet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The flags of the nodes' kubelet.
#[derive(clap::Args, Clone, Debug)]
pub struct KubeletFlags {
    /// How often node conditions get a fresh heartbeat time (e.g. 60s, 5m).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub node_status_frequency: Duration,
    /// How many images each node lists in `status.images` (the kubelet's
    /// `nodeStatusMaxImages`): the largest of those its pods pulled; 0 lists none and saves
    /// the node status write each node makes when its pods bring an image it lacks.
    #[arg(long, default_value_t = crate::kubelet::status::images::DEFAULT_MAX_IMAGES)]
    pub node_status_max_images: usize,
    /// The range InternalIPs come from for nodes whose pool sets no spec.internalIPs. The
    /// default is RFC 2544's benchmarking range, which no real network routes (100.64.0.0/10,
    /// the shared address space, is many clouds' pod network).
    #[arg(long, default_value = "198.18.0.0/15")]
    pub node_ip_range: IpNet,
    /// nodeInfo.kubeletVersion for nodes whose template sets none (default: the API server's
    /// own version, read at start, as a kubelet of the same release reports).
    #[arg(long, default_value = "")]
    pub node_kubelet_version: String,
    /// How long a deleted pod takes to exit, for pods whose pools say nothing
    /// (`spec.lifecycle.pods.exitDelay`); never longer than its grace period. Default 1s, as a
    /// process that honours SIGTERM; set it to the grace period's length (or use
    /// `ignoreSIGTERM` on a pool) for pods that hold on until they are killed.
    #[arg(long, value_parser = parse_duration)]
    pub pod_termination_delay: Option<Duration>,
    /// How long pods owned by a Job run before they complete successfully, for pods whose
    /// pools say nothing (`spec.lifecycle.pods.jobRunTime`).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub job_run_time: Duration,
    /// The kubelet's Normal pod events (Pulled, Created, Started, Killing) for pods whose pools
    /// say nothing (`spec.lifecycle.pods.normalEvents`); Warnings (BackOff, Unhealthy,
    /// Failed…) are always sent. Each Normal event is one more write per container start.
    #[arg(long)]
    pub pod_normal_events: bool,
    /// Pods on a node without a podCIDR (a cluster whose controller manager does not allocate
    /// node CIDRs) get addresses from a block of this range, one block per node, claimed
    /// cluster-wide by a Lease in kube-node-lease that the node owns. `none`: such pods wait
    /// without an address. The default holds kwok's default `--cidr` (10.0.0.1/24).
    // (Spelled out so clap takes the parser's `Option` as the value, not as "may be absent".)
    #[arg(long, default_value = "10.0.0.0/12", value_parser = parse_fallback)]
    pub pod_cidr_fallback: std::option::Option<IpNet>,
    /// The size of each node's block of `--pod-cidr-fallback` (as the controller manager's
    /// `--node-cidr-mask-size`).
    #[arg(long, default_value_t = 24)]
    pub pod_cidr_fallback_mask: u8,
    /// How long a node goes without a podCIDR before its pods fall back (a controller manager
    /// that allocates node CIDRs gives one within moments).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub pod_cidr_fallback_after: Duration,
    /// The longest wait between a node's lease renewals while the simulator's writes queue
    /// behind a saturated API server, as a share of the lease duration (0.25 to 0.875). With
    /// room, renewals come every quarter of it, as the kubelet's; under load they stretch
    /// toward this share so the API server goes to the workload, keeping the rest of the lease
    /// for the controller manager's monitor period and the measured queueing. 0.25: never
    /// stretch.
    #[arg(long, default_value_t = DEFAULT_FRACTION, value_parser = parse_stretch)]
    pub lease_stretch: f64,
    #[command(flatten)]
    pub server: ServerFlags,
}

impl Default for KubeletFlags {
    /// The flags' own defaults, as `run` with none given.
    fn default() -> Self {
        let cmd = <Self as clap::Args>::augment_args(clap::Command::new("defaults"));
        let parsed =
            cmd.try_get_matches_from(["defaults"]).map(|m| <Self as clap::FromArgMatches>::from_arg_matches(&m));
        match parsed {
            Ok(Ok(flags)) => flags,
            // Every flag has a default (a unit test keeps it so): nothing to parse cannot fail.
            _ => unreachable!("the kubelet's flags have defaults"),
        }
    }
}

fn parse_stretch(s: &str) -> Result<f64, String> {
    let v: f64 =
        s.parse().map_err(|_| format!("{s:?} is not a number: give a share of the lease duration such as 0.6"))?;
    if (0.25..=0.875).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} is outside 0.25 (the kubelet's cadence, never stretch) to 0.875 (all but the monitor period's share)"
        ))
    }
}

/// `--pod-cidr-fallback`: a CIDR, or `none`.
fn parse_fallback(text: &str) -> Result<Option<IpNet>, String> {
    if text.eq_ignore_ascii_case("none") || text.is_empty() {
        return Ok(None);
    }
    text.parse::<IpNet>()
        .map(|n| Some(n.trunc()))
        .map_err(|e| format!("{text:?} is not a CIDR such as 10.0.0.0/12 ({e}); or none to turn the fallback off"))
}

impl KubeletFlags {
    /// The fallback range as the pod worker takes it (`None`: off).
    pub fn fallback(&self) -> Result<Option<(FallbackRange, Duration)>, SetupError> {
        let Some(net) = self.pod_cidr_fallback else { return Ok(None) };
        let range = FallbackRange::new(net, self.pod_cidr_fallback_mask)
            .map_err(|problem| SetupError::Flag { flag: "--pod-cidr-fallback-mask", problem })?;
        Ok(Some((range, self.pod_cidr_fallback_after)))
    }

    /// What would collide with the real (unsimulated) `nodes`: one line per node whose
    /// InternalIP lies in `--node-ip-range`, or whose podCIDR meets `--pod-cidr-fallback`, naming
    /// the flag to change.
    pub fn collisions<'a>(&self, real: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Node>) -> Vec<String> {
        use kube::ResourceExt;
        let range = self.node_ip_range.trunc();
        let mut out = Vec::new();
        for node in real {
            for ip in super::status::node::internal_ips(node) {
                if range.contains(&ip) {
                    out.push(format!(
                        "--node-ip-range {range} holds {ip}, the address of real node {}: simulated nodes could be given it (and the API server would send their logs and exec there); choose a range no real node uses",
                        node.name_any()
                    ));
                }
            }
            let Some(fallback) = self.pod_cidr_fallback else { continue };
            let spec = node.spec.clone().unwrap_or_default();
            let cidrs = spec.pod_cidrs.unwrap_or_default().into_iter().chain(spec.pod_cidr);
            for cidr in cidrs.filter_map(|c| c.parse::<IpNet>().ok()) {
                if fallback.contains(&cidr.network()) || cidr.contains(&fallback.network()) {
                    out.push(format!(
                        "--pod-cidr-fallback {fallback} meets {cidr}, the pod range of real node {}: simulated pods could take its pods' addresses; choose a range no real node uses, or none",
                        node.name_any()
                    ));
                    break;
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// What pods whose pools say nothing get.
    pub fn pod_defaults(&self) -> Defaults {
        Defaults {
            exit_delay: self.pod_termination_delay,
            job_run_time: self.job_run_time,
            normal_events: self.pod_normal_events,
        }
    }
}

/// The kubelet of this process, built once from its flags: shared by the node renderer (nodes
/// are born with their status, address and endpoint), the node worker (keeps them) and the
/// kubelet API.
#[derive(Clone)]
pub struct Kubelet {
    pub flags: KubeletFlags,
    /// This process simulates nodes (else nodes are rendered as their templates say).
    pub simulate: bool,
    pub defaults: NodeDefaults,
    /// InternalIPs for nodes whose pool sets no `internalIPs`.
    pub addresses: Arc<Mutex<HostAllocator>>,
    /// The kubelet API, when this process simulates nodes and serves it.
    pub server: Option<ServerEnv>,
}

impl Kubelet {
    /// The kubelet of instance `instance` (other instances than the default one take node
    /// addresses from points of their own); binds the kubelet API's port when `simulate`.
    pub fn new(flags: &KubeletFlags, instance: &str, simulate: bool) -> Result<Self, SetupError> {
        let range = flags.node_ip_range.trunc();
        let addresses =
            if instance == "kwok-pools" { HostAllocator::new(range) } else { HostAllocator::seeded(range, instance) };
        flags.fallback()?;
        let server = if simulate { ServerEnv::new(&flags.server)? } else { None };
        Ok(Self {
            flags: flags.clone(),
            simulate,
            defaults: NodeDefaults { kubelet_version: flags.node_kubelet_version.clone() },
            addresses: Arc::new(Mutex::new(addresses)),
            server,
        })
    }

    /// A kubelet that reserves nothing and simulates nothing: nodes rendered for validation
    /// carry their template's status and take no address.
    pub fn scratch() -> Self {
        let scratch = IpNet::V4(ipnet::Ipv4Net::new_assert(std::net::Ipv4Addr::new(198, 18, 0, 0), 15));
        Self {
            flags: KubeletFlags::default(),
            simulate: false,
            defaults: NodeDefaults::default(),
            addresses: Arc::new(Mutex::new(HostAllocator::new(scratch))),
            server: None,
        }
    }

    /// Where node `name`'s kubelet API answers, assigned now (`None`: not served here).
    pub fn endpoint(&self, name: &str) -> Option<super::status::endpoint::Endpoint> {
        self.server.as_ref().and_then(|s| lock(&s.endpoints).assign(name, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_has_a_default_and_bad_values_are_refused_with_advice() {
        let flags = KubeletFlags::default();
        assert_eq!((flags.job_run_time, flags.server.kubelet_port), (Duration::from_secs(5), 10250));
        assert!(parse_stretch("0.9").unwrap_err().contains("0.875"));
        assert!(parse_fallback("10.0.0.0/33").unwrap_err().contains("none to turn the fallback off"));
        assert_eq!(parse_fallback("none"), Ok(None));
        assert_eq!(flags.node_ip_range.to_string(), "198.18.0.0/15", "a range no real network routes");
    }

    #[test]
    fn ranges_holding_a_real_nodes_address_or_pod_range_are_named_with_their_flag() {
        let node = |name: &str, ip: &str, cidr: &str| -> k8s_openapi::api::core::v1::Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
            }))
            .unwrap()
        };
        let flags = KubeletFlags::default();
        let clear = [node("far", "10.200.0.5", "172.16.3.0/24")];
        assert!(flags.collisions(&clear).is_empty(), "{:?}", flags.collisions(&clear));
        let hit = [node("cloud-1", "198.18.4.7", "172.16.3.0/24"), node("cloud-2", "192.168.1.2", "10.2.0.0/16")];
        let found = flags.collisions(&hit);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found.iter().any(|l| l.starts_with("--node-ip-range") && l.contains("cloud-1") && l.contains("198.18.4.7"))
        );
        assert!(found.iter().any(|l| l.starts_with("--pod-cidr-fallback") && l.contains("cloud-2")));
        // A wider real range that holds the whole fallback meets it too.
        let wide = [node("big", "192.168.1.3", "10.0.0.0/8")];
        assert_eq!(flags.collisions(&wide).len(), 1);
    }
}
#[cfg(test)]
mod fallback_flag_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: KubeletFlags,
    }

    fn flags(args: &[&str]) -> Result<KubeletFlags, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|c| c.flags)
    }

    #[test]
    fn the_fallback_range_defaults_on_and_can_be_turned_off() {
        let (range, after) = flags(&[]).unwrap().fallback().unwrap().unwrap();
        assert_eq!((range.net.to_string(), range.mask, after), ("10.0.0.0/12".into(), 24, Duration::from_secs(10)));
        assert_eq!(flags(&["--pod-cidr-fallback", "none"]).unwrap().fallback().unwrap(), None);
        let kwok = flags(&["--pod-cidr-fallback", "10.0.0.1/16", "--pod-cidr-fallback-mask", "26"]).unwrap();
        assert_eq!(kwok.fallback().unwrap().unwrap().0.net.to_string(), "10.0.0.0/16");
        let bad = flags(&["--pod-cidr-fallback", "10.0.0/8"]).err().unwrap().to_string();
        assert!(bad.contains("not a CIDR") && bad.contains("none"), "{bad}");
        let e = flags(&["--pod-cidr-fallback-mask", "8"]).unwrap().fallback().unwrap_err().to_string();
        assert!(e.starts_with("--pod-cidr-fallback-mask:") && e.contains("from 12 to 30"), "{e}");
    }
}
