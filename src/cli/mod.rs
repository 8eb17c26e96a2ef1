//! Command-line definitions (clap). `main.rs` only parses and dispatches.

pub mod cluster;
pub mod run;
pub mod stage;
pub mod status;
pub mod uninstall;
pub mod webhook_cert;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kwok-pools",
    version,
    about = "Typed pools of simulated Nodes, Pods and KubeVirt VMIs in a real Kubernetes cluster"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, delete and list local control planes (etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler) built by `make controlplane`.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Run the operator: pool controllers and the lifecycle simulator.
    Run(run::RunArgs),
    /// Run only the lifecycle simulator (no pool controllers).
    Simulate(run::RunArgs),
    /// Show the pools (ready/desired, problems), the leader and which simulator replica
    /// simulates how many nodes.
    Status(status::StatusArgs),
    /// Delete an instance's pools and wait until their children are gone (finishing what no
    /// simulator will finish any more), then remove its webhook configurations and admission
    /// policies (and, with --crds, the CRDs). Run it before removing the operator.
    Uninstall(uninstall::UninstallArgs),
    /// Print a Secret with a webhook serving certificate for a Service, shared by every
    /// replica (`kwok-pools webhook-cert | kubectl apply -f -`).
    WebhookCert(webhook_cert::WebhookCertArgs),
    /// Print every CRD as YAML.
    Crd {
        /// Print instead the stand-ins for the CRDs of children another project defines
        /// (KubeVirt's VirtualMachineInstance and VirtualMachine), for clusters without that project.
        #[arg(long, visible_alias = "kubevirt")]
        child_crds: bool,
    },
    /// Write the install's generated manifests (RBAC, webhook configurations, admission
    /// policies) for kustomize (config/) and the Helm chart, from the registered kinds.
    Generate {
        /// The repository root to write under.
        #[arg(long, default_value = ".")]
        root: std::path::PathBuf,
    },
    /// Print the whole install (CRDs, namespace, RBAC, admission policies, Deployment, Service,
    /// webhook configurations, PodDisruptionBudget, FlowSchema) as one manifest for `image`
    /// (`make dist` writes it to dist/install.yaml).
    Dist {
        /// The operator's image.
        #[arg(long, default_value_t = crate::deploy::dist::default_image())]
        image: String,
    },
    /// Write one JSON Schema per kind for editors and validators (`{group}/{kind}_{version}.json`).
    Schema {
        /// The directory to write into.
        #[arg(long, default_value = "crds/schemas")]
        out: std::path::PathBuf,
    },
    /// kwok Stage manifests imported into lifecycle policies (`stage import FILE|DIR…`).
    #[command(subcommand)]
    Stage(stage::StageCommand),
    /// Print the version.
    Version,
}
