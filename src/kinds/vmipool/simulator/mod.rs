//! KubeVirt, played by the simulator for VMIs on simulated nodes: virt-controller's part
//! (admission defaults, the launcher pod, phases, deletion) and virt-handler's (Running), or
//! beside a real KubeVirt only virt-handler's ([`vmis`], [`status`]). It waits, holding
//! nothing up, until KubeVirt's VMI CRD is installed.

pub mod migration_plan;
pub mod migrations;
pub mod plan;
pub mod status;
pub mod vm_plan;
pub mod vmis;
pub mod vms;

use super::kubevirt::VirtualMachineInstance;
use super::{VMIPool, VmiEnv};
use crate::api::conventions::{IMPERSONATOR_EXTRA, IMPERSONATOR_VALUE};
use crate::deploy::rule::Rule;
use crate::informer::pod::SlimPod;
use crate::informer::{shared, wait_synced};
use crate::pool::Simulate;
use crate::pool::controller::crd_established;
use crate::simulator::selector::Selector;
use crate::simulator::{SimContext, Simulation};
use kube::Client;
use std::time::Duration;
use vmis::{KubevirtRole, VmiSimulator};

/// The flags of the KubeVirt the simulator plays (on `run` and `simulate`).
#[derive(clap::Args, Clone, Debug)]
pub struct VmiFlags {
    /// Which part of KubeVirt the simulator plays for VMIs: `auto` (virt-handler's part when
    /// a KubeVirt is installed, i.e. the kubevirts.kubevirt.io CRD exists; else also
    /// virt-controller's), `controller` or `handler`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "controller", "handler"])]
    pub kubevirt_role: String,
    /// Only VMIs whose labels match are simulated (default: every VMI; beside a real KubeVirt
    /// only VMIs on managed nodes are touched anyway).
    #[arg(long, value_name = "SELECTOR", value_parser = Selector::parse)]
    pub vmi_selector: Option<Selector>,
    /// Beside a real KubeVirt, the account VMI status writes impersonate (KubeVirt's webhook
    /// puts back status written by anyone else).
    #[arg(long, default_value = "system:serviceaccount:kubevirt:kubevirt-handler")]
    pub kubevirt_handler_user: String,
    /// Without KubeVirt, how many live migrations run at once in the cluster (KubeVirt's
    /// `migrations.parallelMigrationsPerCluster`); more wait Pending.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub parallel_migrations_per_cluster: u32,
    /// Without KubeVirt, how many live migrations run at once out of one node (KubeVirt's
    /// `migrations.parallelOutboundMigrationsPerNode`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub parallel_outbound_migrations_per_node: u32,
}

impl VmiFlags {
    /// The role asked for (`None`: decide from what is installed).
    fn role(&self) -> Option<KubevirtRole> {
        match self.kubevirt_role.as_str() {
            "controller" => Some(KubevirtRole::Controller),
            "handler" => Some(KubevirtRole::Handler),
            _ => None,
        }
    }
}

impl Simulate for VMIPool {
    type Metrics = super::metrics::VmiPoolMetrics;

    const POD_LABELS: &'static [&'static str] =
        &[status::APP_LABEL, status::CREATED_BY_LABEL, super::migration::MIGRATION_JOB_LABEL];

    const FINALIZERS: &'static [&'static str] = &[status::FINALIZER];

    /// Launcher pods, wherever they run (their VMI's simulator reads them).
    fn keeps_pod(pod: &SlimPod) -> bool {
        pod.label(status::CREATED_BY_LABEL).is_some()
    }

    fn simulations(_env: &VmiEnv, flags: &VmiFlags, sim: &SimContext) -> Vec<Simulation> {
        let (flags, sim) = (flags.clone(), sim.clone());
        vec![Simulation { name: "VMI simulator".into(), ready: vec![], run: Box::pin(run(flags, sim)) }]
    }

    fn simulator_rules() -> Vec<Rule> {
        vec![
            Rule::cluster(
                "kubevirt.io",
                &["virtualmachines"],
                &["get", "list", "watch"],
                "VirtualMachines, without KubeVirt: their VMIs started and stopped (playing virt-controller)",
            ),
            Rule::cluster("kubevirt.io", &["virtualmachines/status"], &["patch"], "a VM's status: printableStatus, ready, requests"),
            Rule::pool_namespaces(
                "kubevirt.io",
                &["virtualmachines"],
                &["create", "patch"],
                "VirtualMachines of VMIPools that keep them (spec.virtualMachine): created, their run strategy changed",
            ),
            Rule::cluster(
                "kubevirt.io",
                &["virtualmachines"],
                &["delete"],
                "VirtualMachines of VMIPools that keep them: deleted on scale-down",
            ),
            Rule::cluster(
                "kubevirt.io",
                &["virtualmachineinstancemigrations"],
                &["get", "list", "watch", "create"],
                "live migrations, without KubeVirt: played through their phases; a drained node's VMIs get theirs (KubeVirt's evacuation)",
            ),
            Rule::cluster(
                "kubevirt.io",
                &["virtualmachineinstancemigrations/status"],
                &["patch"],
                "a migration's phase and migration state",
            ),
            Rule::cluster(
                "kubevirt.io",
                &["virtualmachineinstances"],
                &["get", "list", "watch", "patch", "delete"],
                "every VMI on a simulated node: defaults, phases, finalizers (playing virt-controller)",
            ),
            Rule::cluster("kubevirt.io", &["virtualmachineinstances/status"], &["patch"], "VMI status, for a KubeVirt whose CRD has the subresource"),
            Rule::pool_namespaces("", &["pods"], &["create"], "launcher pods of VMIs"),
            Rule::cluster("apiextensions.k8s.io", &["customresourcedefinitions"], &["get"], "whether KubeVirt (and its VMI CRD) is installed"),
            // Only for handler-only mode beside a real KubeVirt, only in KubeVirt's namespace.
            Rule::namespace(
                "kubevirt",
                "",
                &["serviceaccounts"],
                &["impersonate"],
                "beside a real KubeVirt, VMI status is written as its handler (KubeVirt's webhook puts back status written by anyone else)",
            )
            .named_only(&["kubevirt-handler"])
            .when("kubevirtHandler"),
            // The mark its impersonated writes carry, and only that value.
            Rule::cluster(
                "authentication.k8s.io",
                &[&format!("userextras/{IMPERSONATOR_EXTRA}")],
                &["impersonate"],
                "the mark on the writes it makes as KubeVirt's handler, so its admission policy confines them as its own",
            )
            .named_only(&[IMPERSONATOR_VALUE])
            .when("kubevirtHandler"),
        ]
    }
}

/// Waits until KubeVirt's VMI CRD is installed, decides which part of KubeVirt to play, and
/// simulates.
async fn run(flags: VmiFlags, sim: SimContext) {
    let client = sim.client.clone();
    let mut told = false;
    while !crd_established(&client, super::kubevirt_crd::NAME).await.unwrap_or(false) {
        if !std::mem::replace(&mut told, true) {
            tracing::info!(
                "no VirtualMachineInstance CRD yet: VMIs are simulated once KubeVirt or `kwok-pools crd --child-crds` is installed"
            );
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let kubevirt_installed = loop {
        // A definite answer: guessing wrong would play virt-controller beside a real one.
        match crd_established(&client, "kubevirts.kubevirt.io").await {
            Ok(installed) => break installed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell whether KubeVirt is installed (the operator needs get on customresourcedefinitions); asking again in 5s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    let role =
        flags.role().unwrap_or(if kubevirt_installed { KubevirtRole::Handler } else { KubevirtRole::Controller });
    let vmi_client = match role {
        KubevirtRole::Controller => client.clone(),
        KubevirtRole::Handler => match impersonating(&flags.kubevirt_handler_user).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, user = %flags.kubevirt_handler_user, "cannot build a client that impersonates KubeVirt's handler; VMIs are not simulated");
                return std::future::pending().await;
            }
        },
    };
    tracing::info!(?role, "simulating VMIs");
    let (vmis, pods, nodes) = (
        shared::all::<VirtualMachineInstance>(&sim.informers),
        shared::pods(&sim.informers),
        shared::nodes(&sim.informers),
    );
    let (vmi_changes, pod_changes) = (vmis.subscribe(), pods.subscribe());
    if let Err(e) = wait_synced("virtualmachineinstances", &vmis.store()).await {
        tracing::error!(error = %e, "the VMI store did not sync; VMIs are not simulated");
        return std::future::pending().await;
    }
    if role == KubevirtRole::Controller {
        let selector = flags.vmi_selector.clone().unwrap_or_default();
        tokio::spawn(run_vms(selector.clone(), sim.clone(), vmis.store(), vmis.subscribe()));
        let limits = migrations::Limits {
            per_cluster: flags.parallel_migrations_per_cluster as usize,
            per_node: flags.parallel_outbound_migrations_per_node as usize,
        };
        let migrating = Migrating {
            selector,
            limits,
            sim: sim.clone(),
            vmis: vmis.store(),
            pods: pods.store(),
            nodes: nodes.store(),
        };
        tokio::spawn(run_migrations(migrating, vmis.subscribe(), pods.subscribe()));
    }
    let simulator = VmiSimulator {
        client: vmi_client,
        pod_client: client,
        role,
        manage: sim.manage.clone(),
        selector: flags.vmi_selector.clone().unwrap_or_default(),
        nodes: nodes.store(),
        pods: pods.store(),
        vmis: vmis.store(),
        metrics: sim.metrics.clone(),
        vmi_metrics: sim.metrics.kind::<super::metrics::VmiPoolMetrics>(),
        writes: sim.writes.clone(),
        shard: sim.shard.clone(),
        lifecycles: sim.lifecycles.clone(),
    };
    simulator.run(vmi_changes, pod_changes).await;
}

/// KubeVirt's VM controller, once the VirtualMachine CRD is installed (KubeVirt's, or the
/// stand-in `--child-crds` installs).
async fn run_vms(
    selector: Selector,
    sim: SimContext,
    vmis: kube::runtime::reflector::Store<VirtualMachineInstance>,
    vmi_changes: tokio::sync::mpsc::UnboundedReceiver<crate::informer::Change<VirtualMachineInstance>>,
) {
    let mut told = false;
    while !crd_established(&sim.client, super::kubevirt_crd::VM_NAME).await.unwrap_or(false) {
        if !std::mem::replace(&mut told, true) {
            tracing::info!(
                "no VirtualMachine CRD yet: VMs are simulated once `kwok-pools crd --child-crds` is installed"
            );
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let vms = shared::all::<super::vm::VirtualMachine>(&sim.informers);
    let changes = vms.subscribe();
    if let Err(e) = wait_synced("virtualmachines", &vms.store()).await {
        tracing::error!(error = %e, "the VM store did not sync; VMs are not simulated");
        return;
    }
    tracing::info!("simulating VirtualMachines (KubeVirt's VM controller)");
    let vm = vms::VmController {
        client: sim.client.clone(),
        selector,
        shard: sim.shard.clone(),
        vms: vms.store(),
        vmis,
        metrics: sim.metrics.clone(),
    };
    vm.run(changes, vmi_changes).await;
}

/// What the migration controller reads besides migrations.
struct Migrating {
    selector: Selector,
    limits: migrations::Limits,
    sim: SimContext,
    vmis: kube::runtime::reflector::Store<VirtualMachineInstance>,
    pods: kube::runtime::reflector::Store<SlimPod>,
    nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
}

/// KubeVirt's migration and evacuation controllers, once the migration CRD is installed
/// (KubeVirt's, or the stand-in `--child-crds` installs).
async fn run_migrations(
    m: Migrating,
    vmi_changes: tokio::sync::mpsc::UnboundedReceiver<crate::informer::Change<VirtualMachineInstance>>,
    pod_changes: tokio::sync::mpsc::UnboundedReceiver<crate::informer::Change<SlimPod>>,
) {
    let mut told = false;
    while !crd_established(&m.sim.client, super::kubevirt_crd::MIGRATION_NAME).await.unwrap_or(false) {
        if !std::mem::replace(&mut told, true) {
            tracing::info!(
                "no VirtualMachineInstanceMigration CRD yet: migrations are simulated once `kwok-pools crd --child-crds` is installed"
            );
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let migrations = shared::all::<super::migration::VirtualMachineInstanceMigration>(&m.sim.informers);
    let changes = migrations.subscribe();
    if let Err(e) = wait_synced("virtualmachineinstancemigrations", &migrations.store()).await {
        tracing::error!(error = %e, "the migration store did not sync; migrations are not simulated");
        return;
    }
    tracing::info!("simulating live migrations (KubeVirt's migration and evacuation controllers)");
    let controller = migrations::MigrationController {
        client: m.sim.client.clone(),
        selector: m.selector,
        limits: m.limits,
        shard: m.sim.shard.clone(),
        manage: m.sim.manage.clone(),
        lifecycles: m.sim.lifecycles.clone(),
        migrations: migrations.store(),
        vmis: m.vmis,
        pods: m.pods,
        nodes: m.nodes,
        metrics: m.sim.metrics.clone(),
        recorder: crate::kubelet::recorder::KubeletRecorder::new(m.sim.client.clone(), "virt-handler"),
    };
    controller.run(changes, vmi_changes, pod_changes).await;
}

/// A client for the same cluster that acts as `user`, marking its requests with the extra
/// `kwok-pools-impersonator=simulator` (the operator's admission policy confines those writes
/// as its own; the right to send it is granted by name beside the impersonation).
async fn impersonating(user: &str) -> Result<Client, ImpersonateError> {
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(user.to_string());
    config.headers.push((
        axum::http::HeaderName::from_static(IMPERSONATE_EXTRA_HEADER),
        axum::http::HeaderValue::from_static(IMPERSONATOR_VALUE),
    ));
    Ok(Client::try_from(config)?)
}

/// `Impersonate-Extra-<key>` for [`IMPERSONATOR_EXTRA`] (header names are lower case on the wire).
const IMPERSONATE_EXTRA_HEADER: &str = "impersonate-extra-kwok-pools-impersonator";

/// Why a client acting as KubeVirt's handler cannot be built.
#[derive(Debug, thiserror::Error)]
enum ImpersonateError {
    #[error("no Kubernetes configuration: {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("{0}")]
    Client(#[from] kube::Error),
}
