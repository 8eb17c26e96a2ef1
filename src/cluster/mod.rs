//! The local control plane: `kwok-pools cluster create|delete|list|kubeconfig`.
//!
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as detached child
//! processes bound to 127.0.0.1, with state (PKI, kubeconfig, data, logs, pid files) in one
//! directory per cluster. Several clusters can run side by side on different ports.

// Errors carry log tails for the person reading them; they are rare, so their size is fine.
#![allow(clippy::result_large_err)]

pub mod binaries;
pub mod component;
pub mod crds;
pub mod error;
pub mod layout;
pub mod metrics_server;
pub mod pki;
pub mod probe;
pub mod process;

pub use component::Component;
pub use error::ClusterError;
pub use layout::{Layout, cluster_dir, default_home};

use error::IoContext;
use layout::{ClusterRecord, Ports};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `cluster create` needs.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub name: String,
    pub home: PathBuf,
    pub bin_dir: PathBuf,
    /// How long to wait for the whole control plane to become ready.
    pub timeout: Duration,
    /// Extra flags per component, appended after ours (so they win).
    pub extra_args: Vec<(Component, String)>,
    /// Install the project's CRDs once the API server is up.
    pub install_crds: bool,
    /// Install the stand-ins for child CRDs other projects define (KubeVirt's VMI) too.
    pub child_crds: bool,
    /// Run the real metrics-server too, registered as the metrics.k8s.io APIService.
    pub metrics_server: bool,
    /// Install the simulated CSI driver's StorageClass (`simulated-disk`) as the default.
    pub storage_class: bool,
}

/// A created cluster.
#[derive(Clone, Debug)]
pub struct Created {
    pub kubeconfig: PathBuf,
    pub ports: Ports,
    pub elapsed: Duration,
}

/// One line of `cluster list`.
#[derive(Clone, Debug)]
pub struct Listed {
    pub name: String,
    pub dir: PathBuf,
    pub running: usize,
    /// How many components the cluster has (4, or 5 with metrics-server).
    pub components: usize,
    pub apiserver_port: Option<u16>,
}

/// How many of the cluster's components run (checked by pid and command line).
fn running_components(layout: &Layout) -> usize {
    component::ALL
        .into_iter()
        .chain(component::OPTIONAL)
        .filter(|c| {
            process::read_pid(&layout.pid(*c)).is_some_and(|pid| process::is_ours(pid, c.binary(), &layout.dir))
        })
        .count()
}

fn pick_ports() -> Result<Ports, ClusterError> {
    let [etcd_client, etcd_peer, apiserver, controller_manager, scheduler, metrics_server] = process::free_ports()?;
    Ok(Ports { etcd_client, etcd_peer, apiserver, controller_manager, scheduler, metrics_server })
}

/// Creates and starts a cluster, waiting until it is ready. On failure the components that
/// were started are stopped again and the state (with the logs) is kept for inspection.
pub async fn create(opts: &CreateOptions) -> Result<Created, ClusterError> {
    layout::validate_name(&opts.name).map_err(ClusterError::InvalidName)?;
    let bin_dir = binaries::check(&opts.bin_dir)?;
    if opts.metrics_server {
        binaries::check_optional(&bin_dir, Component::MetricsServer)?;
    }
    let layout = Layout::new(cluster_dir(&opts.home, &opts.name));
    if layout.dir.exists() {
        return Err(ClusterError::NameInUse {
            name: opts.name.clone(),
            dir: layout.dir.clone(),
            running: running_components(&layout) > 0,
        });
    }
    let started = Instant::now();
    let deadline = started + opts.timeout;
    std::fs::create_dir_all(&layout.dir).ctx(|| format!("creating {}", layout.dir.display()))?;
    eprintln!("creating cluster {:?} in {}", opts.name, layout.dir.display());

    pki::write_pki(&layout)?;
    std::fs::write(layout.scheduler_config(), component::scheduler_config(&layout))
        .ctx(|| "writing the scheduler configuration".into())?;
    // Ports are free when chosen, but another process may bind one before the component does:
    // then the cluster comes up again on other ports (a few times).
    let mut attempt = 1;
    loop {
        let ports = pick_ports()?;
        pki::write_kubeconfig(&layout, &opts.name, ports.apiserver)?;
        let record = ClusterRecord {
            name: opts.name.clone(),
            ports: ports.clone(),
            bin_dir: bin_dir.clone(),
            created: chrono::Utc::now().to_rfc3339(),
            extra_args: opts.extra_args.iter().map(|(c, a)| (c.name().to_string(), a.clone())).collect(),
            metrics_server: opts.metrics_server,
        };
        std::fs::write(layout.record(), serde_json::to_string_pretty(&record).unwrap_or_default())
            .ctx(|| "writing cluster.json".into())?;
        match start_all(opts, &layout, &ports, &bin_dir, deadline).await {
            Ok(()) => return Ok(Created { kubeconfig: layout.kubeconfig(), ports, elapsed: started.elapsed() }),
            Err(e) if attempt < 3 && port_taken(&e) => {
                eprintln!("  a port was taken by another process meanwhile; starting again on other ports");
                stop_all(&layout);
                // A fresh etcd: its data would remember the ports of the attempt that failed.
                let _ = std::fs::remove_dir_all(layout.etcd_data());
                attempt += 1;
            }
            Err(e) => {
                eprintln!(
                    "cluster {:?} did not come up; stopping what was started (logs kept in {})",
                    opts.name,
                    layout.logs().display()
                );
                stop_all(&layout);
                return Err(e);
            }
        }
    }
}

/// Whether a component could not start because its port was taken.
fn port_taken(e: &ClusterError) -> bool {
    matches!(e, ClusterError::ComponentExited { tail, .. } if tail.contains("address already in use"))
}

/// Starts every component that does not run (all of them for a new cluster), etcd and the
/// API server first, and waits until each is healthy.
async fn start_components(
    name: &str,
    extra_args: &[(Component, String)],
    components: &[Component],
    layout: &Layout,
    ports: &Ports,
    bin_dir: &Path,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let mut later = Vec::new();
    for &c in components {
        let running =
            process::read_pid(&layout.pid(c)).is_some_and(|pid| process::is_ours(pid, c.binary(), &layout.dir));
        if running {
            eprintln!("  {c} already runs");
            continue;
        }
        let mut args = c.args(layout, ports);
        args.extend(extra_args.iter().filter(|(k, _)| *k == c).map(|(_, a)| a.clone()));
        let mut child = process::spawn(&bin_dir.join(c.binary()), &args, &layout.log(c), &layout.pid(c))?;
        eprintln!("  started {c} (pid {}, log {})", child.id(), layout.log(c).display());
        // etcd and the API server must be up before the others can do anything useful.
        if matches!(c, Component::Etcd | Component::KubeApiserver) {
            let took = probe::wait_healthy(name, c, &mut child, layout, ports, deadline).await?;
            eprintln!("  ✓ {c} ready ({:.1}s)", took.as_secs_f64());
        } else {
            later.push((c, child));
        }
    }
    for (c, child) in later.iter_mut() {
        let took = probe::wait_healthy(name, *c, child, layout, ports, deadline).await?;
        eprintln!("  ✓ {c} healthy ({:.1}s)", took.as_secs_f64());
    }
    Ok(())
}

async fn start_all(
    opts: &CreateOptions,
    layout: &Layout,
    ports: &Ports,
    bin_dir: &Path,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let components = component::of_cluster(opts.metrics_server);
    start_components(&opts.name, &opts.extra_args, &components, layout, ports, bin_dir, deadline).await?;
    let client = crds::client(&layout.kubeconfig()).await?;
    crds::wait_default_service_account(&opts.name, &client, layout, deadline).await?;
    eprintln!("  ✓ default ServiceAccount exists");
    // The operator's namespace, as an install makes it: `kubectl apply --dry-run=server -f
    // dist/install.yaml` works at once (a dry run creates no namespace for what follows).
    operator_namespace(&client).await?;
    eprintln!("  ✓ namespace kwok-pools exists");
    if opts.install_crds {
        crds::install(&client, deadline).await?;
        eprintln!("  ✓ CRDs installed and established");
    }
    if opts.child_crds {
        let stand_ins = crate::kinds::stand_in_crds();
        let names: Vec<String> = stand_ins.iter().filter_map(|c| c.metadata.name.clone()).collect();
        crds::install_crds(&client, stand_ins, deadline).await?;
        eprintln!("  ✓ child CRDs installed: {}", names.join(", "));
    }
    if opts.storage_class {
        install_storage_class(&client).await?;
        eprintln!("  ✓ StorageClass {} installed (the default)", crate::api::storage::PRESET_CLASS);
    }
    if opts.metrics_server {
        metrics_server::register(&client, layout, ports.metrics_server, deadline).await?;
        eprintln!("  ✓ metrics-server registered as the metrics.k8s.io APIService");
    }
    // The children were started detached; dropping the handles does not stop them.
    Ok(())
}

/// The simulated CSI driver's StorageClass preset (the cluster's default).
async fn install_storage_class(client: &kube::Client) -> Result<(), ClusterError> {
    use k8s_openapi::api::storage::v1::StorageClass;
    let api: kube::Api<StorageClass> = kube::Api::all(client.clone());
    let class = crate::api::storage::preset_class();
    let params = crate::api::conventions::apply_params();
    api.patch(crate::api::storage::PRESET_CLASS, &params, &kube::api::Patch::Apply(&class)).await?;
    Ok(())
}

async fn operator_namespace(client: &kube::Client) -> Result<(), ClusterError> {
    use k8s_openapi::api::core::v1::Namespace;
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("kwok-pools".into()),
            labels: Some([("app.kubernetes.io/name".to_string(), "kwok-pools".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match kube::Api::<Namespace>::all(client.clone()).create(&Default::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn stop_all(layout: &Layout) -> Vec<String> {
    let mut notes = Vec::new();
    for c in component::ALL.into_iter().chain(component::OPTIONAL).rev() {
        let Some(pid) = process::read_pid(&layout.pid(c)) else { continue };
        if process::is_ours(pid, c.binary(), &layout.dir) {
            if process::stop(pid, Duration::from_secs(10)) {
                notes.push(format!("stopped {c} (pid {pid})"));
            } else {
                notes.push(format!("could not stop {c} (pid {pid})"));
            }
        } else if process::is_alive(pid) {
            notes.push(format!("pid {pid} is no longer {c}; left alone"));
        }
    }
    notes
}

/// Starts again whatever components of an existing cluster do not run (after a reboot, or a
/// component that died), with the ports, certificates and data it had.
pub async fn start(home: &Path, name: &str, timeout: Duration) -> Result<Duration, ClusterError> {
    layout::validate_name(name).map_err(ClusterError::InvalidName)?;
    let layout = Layout::new(cluster_dir(home, name));
    let record =
        layout.read_record().map_err(|_| ClusterError::NotFound { name: name.into(), dir: layout.dir.clone() })?;
    let bin_dir = binaries::check(&record.bin_dir)?;
    let extra: Vec<(Component, String)> =
        record.extra_args.iter().filter_map(|(c, a)| Component::parse(c).map(|c| (c, a.clone()))).collect();
    let started = Instant::now();
    eprintln!("starting cluster {name:?} from {}", layout.dir.display());
    if !layout.admission_config().exists() {
        // A cluster made before the API server had a webhook client identity.
        pki::write_webhook_client(&layout)?;
    }
    // Or before it had kubelet client and front-proxy identities.
    pki::ensure_aggregation(&layout)?;
    let components = component::of_cluster(record.metrics_server);
    start_components(name, &extra, &components, &layout, &record.ports, &bin_dir, started + timeout).await?;
    Ok(started.elapsed())
}

/// Stops exactly the processes the cluster started (by pid, after checking each still is
/// that component of that cluster) and removes its state directory.
pub fn delete(home: &Path, name: &str) -> Result<Vec<String>, ClusterError> {
    layout::validate_name(name).map_err(ClusterError::InvalidName)?;
    let layout = Layout::new(cluster_dir(home, name));
    if !layout.dir.exists() {
        return Err(ClusterError::NotFound { name: name.into(), dir: layout.dir.clone() });
    }
    let mut notes = stop_all(&layout);
    let still = running_components(&layout);
    if still > 0 {
        return Err(ClusterError::Other(format!(
            "{still} component(s) of cluster {name:?} would not stop; state kept in {}",
            layout.dir.display()
        )));
    }
    std::fs::remove_dir_all(&layout.dir).ctx(|| format!("removing {}", layout.dir.display()))?;
    notes.push(format!("removed {}", layout.dir.display()));
    Ok(notes)
}

/// Every cluster under `home` and how many of its components run.
pub fn list(home: &Path) -> Result<Vec<Listed>, ClusterError> {
    let root = home.join("clusters");
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(ClusterError::Io { context: format!("reading {}", root.display()), source: e }),
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let layout = Layout::new(dir.clone());
        let record = layout.read_record().ok();
        out.push(Listed {
            name: entry.file_name().to_string_lossy().into_owned(),
            running: running_components(&layout),
            components: component::of_cluster(record.as_ref().is_some_and(|r| r.metrics_server)).len(),
            apiserver_port: record.map(|r| r.ports.apiserver),
            dir,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The kubeconfig path of an existing cluster.
pub fn kubeconfig(home: &Path, name: &str) -> Result<PathBuf, ClusterError> {
    layout::validate_name(name).map_err(ClusterError::InvalidName)?;
    let layout = Layout::new(cluster_dir(home, name));
    if !layout.kubeconfig().exists() {
        return Err(ClusterError::NotFound { name: name.into(), dir: layout.dir });
    }
    Ok(layout.kubeconfig())
}
