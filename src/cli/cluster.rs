//! `kwok-pools cluster …`

use crate::api::duration::parse_flag_duration as parse_duration;
use crate::cluster::{self, Component, CreateOptions, binaries, layout::HOME_ENV};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Cluster name.
    #[arg(long, default_value = "kwok-pools")]
    pub name: String,
    /// Where cluster state lives (default ~/.kwok-pools).
    #[arg(long, env = HOME_ENV)]
    pub home: Option<PathBuf>,
}

impl Common {
    pub fn home(&self) -> anyhow::Result<PathBuf> {
        match &self.home {
            Some(h) => Ok(h.clone()),
            None => cluster::default_home().map_err(|e| anyhow::anyhow!(e)),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a new local control plane and install the CRDs.
    Create {
        #[command(flatten)]
        common: Common,
        /// Directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler.
        #[arg(long, env = binaries::BIN_DIR_ENV)]
        bin_dir: Option<PathBuf>,
        /// How long to wait for the control plane to be ready, e.g. 120s or 3m.
        #[arg(long, default_value = "180s", value_parser = parse_duration)]
        timeout: Duration,
        /// An extra flag for one component, e.g.
        /// `kube-controller-manager=--node-monitor-grace-period=20s` (repeatable).
        #[arg(long = "extra-arg", value_parser = parse_extra_arg)]
        extra_args: Vec<(Component, String)>,
        /// kwokctl's `heartbeatFactor`: the controller manager checks nodes every 5s × N and
        /// marks them NotReady after 40s × N without a heartbeat (kwokctl's default 5 gives
        /// 25s and 3m20s). 1 keeps Kubernetes' defaults. Give the nodes leases to match
        /// (`kwok-pools run --node-lease-duration-seconds`, or a NodePool's
        /// `spec.lifecycle.nodes.heartbeat.leaseDurationSeconds`, e.g. 40 × N).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        heartbeat_factor: u32,
        /// Do not install the kwok-pools CRDs.
        #[arg(long)]
        no_crds: bool,
        /// Also install stand-ins for the CRDs of children another project defines (KubeVirt's
        /// VirtualMachineInstance and VirtualMachine, for VMIPools and VMs without KubeVirt).
        #[arg(long, visible_alias = "kubevirt")]
        child_crds: bool,
        /// Also run the real metrics-server (bin/metrics-server, `make metrics-server`),
        /// registered as the metrics.k8s.io APIService: `kubectl top` and the HPA then work on
        /// simulated nodes.
        #[arg(long)]
        metrics_server: bool,
        /// Also install the StorageClass `simulated-disk` of kwok-pools' simulated CSI driver
        /// as the cluster's default: claims bind (when their pod is scheduled), StatefulSets
        /// with volumeClaimTemplates start on simulated nodes (docs/storage.md).
        #[arg(long)]
        storage_class: bool,
    },
    /// Start the components of an existing cluster that do not run (keeps its data).
    Start {
        #[command(flatten)]
        common: Common,
        /// How long to wait for the control plane to be ready.
        #[arg(long, default_value = "180s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Stop a cluster's processes and remove its state.
    Delete {
        #[command(flatten)]
        common: Common,
    },
    /// List clusters and whether they run.
    List {
        #[arg(long, env = HOME_ENV)]
        home: Option<PathBuf>,
    },
    /// Print the path of a cluster's kubeconfig.
    Kubeconfig {
        #[command(flatten)]
        common: Common,
    },
}

/// The controller manager's flags for kwokctl's heartbeat factor `n` (none for 1).
fn heartbeat_args(n: u32) -> Vec<(Component, String)> {
    if n <= 1 {
        return vec![];
    }
    vec![
        (Component::KubeControllerManager, format!("--node-monitor-period={}s", 5 * n)),
        (Component::KubeControllerManager, format!("--node-monitor-grace-period={}s", 40 * n)),
    ]
}

fn parse_extra_arg(s: &str) -> Result<(Component, String), String> {
    let (name, flag) = s.split_once('=').ok_or_else(|| format!("expected COMPONENT=--flag, got {s:?}"))?;
    let c = Component::parse(name).ok_or_else(|| {
        format!("unknown component {name:?}: use etcd, kube-apiserver, kube-controller-manager, kube-scheduler or metrics-server")
    })?;
    Ok((c, flag.to_string()))
}

pub async fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    match cmd {
        ClusterCommand::Create {
            common,
            bin_dir,
            timeout,
            extra_args,
            heartbeat_factor,
            no_crds,
            child_crds,
            metrics_server,
            storage_class,
        } => {
            // The factor's flags first: an --extra-arg of the same flag comes later and wins.
            let extra_args = heartbeat_args(heartbeat_factor).into_iter().chain(extra_args).collect();
            if heartbeat_factor > 1 {
                eprintln!(
                    "heartbeat factor {heartbeat_factor}: nodes NotReady after {}s without a heartbeat; run the simulator with --node-lease-duration-seconds={} (or set it per NodePool)",
                    40 * heartbeat_factor,
                    40 * heartbeat_factor
                );
            }
            let opts = CreateOptions {
                name: common.name.clone(),
                home: common.home()?,
                bin_dir: binaries::resolve_bin_dir(bin_dir.as_deref()),
                timeout,
                extra_args,
                install_crds: !no_crds,
                child_crds,
                metrics_server,
                storage_class,
            };
            let created = cluster::create(&opts).await?;
            eprintln!("cluster {:?} ready in {:.1}s", common.name, created.elapsed.as_secs_f64());
            println!("kubeconfig: {}", created.kubeconfig.display());
            println!("export KUBECONFIG={}", created.kubeconfig.display());
        }
        ClusterCommand::Start { common, timeout } => {
            let took = cluster::start(&common.home()?, &common.name, timeout).await?;
            let kubeconfig = cluster::kubeconfig(&common.home()?, &common.name)?;
            eprintln!("cluster {:?} running ({:.1}s)", common.name, took.as_secs_f64());
            println!("export KUBECONFIG={}", kubeconfig.display());
        }
        ClusterCommand::Delete { common } => {
            for note in cluster::delete(&common.home()?, &common.name)? {
                eprintln!("  {note}");
            }
            eprintln!("cluster {:?} deleted", common.name);
        }
        ClusterCommand::List { home } => {
            let home = match home {
                Some(h) => h,
                None => cluster::default_home().map_err(|e| anyhow::anyhow!(e))?,
            };
            let clusters = cluster::list(&home)?;
            println!("{:<24} {:<12} {:<8} STATE", "NAME", "STATUS", "PORT");
            for c in clusters {
                let status = match c.running {
                    n if n >= c.components => "running".to_string(),
                    0 => "stopped".to_string(),
                    n => format!("partial({n}/{})", c.components),
                };
                let port = c.apiserver_port.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
                println!("{:<24} {:<12} {:<8} {}", c.name, status, port, c.dir.display());
            }
        }
        ClusterCommand::Kubeconfig { common } => {
            println!("{}", cluster::kubeconfig(&common.home()?, &common.name)?.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn the_heartbeat_factor_sets_the_controller_managers_periods_as_kwokctl_does() {
        assert!(heartbeat_args(1).is_empty());
        let five: Vec<String> = heartbeat_args(5).into_iter().map(|(c, a)| format!("{}={a}", c.name())).collect();
        assert_eq!(
            five,
            [
                "kube-controller-manager=--node-monitor-period=25s",
                "kube-controller-manager=--node-monitor-grace-period=200s"
            ]
        );
    }

    #[test]
    fn extra_args() {
        let (c, f) = parse_extra_arg("kube-scheduler=--v=4").unwrap();
        assert_eq!(c, Component::KubeScheduler);
        assert_eq!(f, "--v=4");
        assert!(parse_extra_arg("kubelet=--x").is_err());
        assert!(parse_extra_arg("nope").is_err());
    }
}
