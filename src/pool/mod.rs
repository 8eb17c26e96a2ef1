//! The generic replica-set core, written once for every pool kind: a small trait each kind
//! implements, the pure planner and status builder, and the apply step.

pub mod apply;
pub mod context;
pub mod controller;
pub mod dry_run;
pub mod events;
pub mod expectations;
#[cfg(test)]
pub mod fixtures;
pub mod hash;
pub mod knobs;
pub mod placement;
pub mod plan;
pub mod reconcile;
pub mod refusal;
pub mod simulate;
pub mod stamp;
pub mod status;
pub mod wake;

use crate::api::PoolStatus;
use crate::api::lifecycle::LifecycleSpec;
use crate::informer::{Informer, Informers};
use kube::{Api, Client, CustomResourceExt, Resource};
use plan::UpdateMode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use status::Problem;
use std::fmt::Debug;
use std::sync::Arc;

pub use simulate::Simulate;
pub use stamp::{ChildId, child};

/// One write that brings an existing child to its rendered form.
#[derive(Clone, Debug)]
pub enum Write<C> {
    /// Server-side apply of the object (spec and metadata).
    Apply(C),
    /// A JSON merge patch of the status subresource.
    MergeStatus(serde_json::Value),
}

/// What every kind's environment is built from: the services the whole process shares. A
/// kind's own settings come from its [`PoolKind::Flags`].
pub struct Shared {
    pub client: Client,
    pub informers: Arc<Informers>,
    /// This process simulates the children's kubelet (render them born in their final state).
    pub simulate: bool,
    /// The operator instance (`--instance`): kinds that hand out identities (addresses) start
    /// other instances at points of their own.
    pub instance: String,
    /// The simulated kubelet of this process: nodes rendered in its care are born with the
    /// status, address and endpoint it then keeps.
    pub kubelet: crate::kubelet::Kubelet,
}

/// The flags of a kind that has none of its own.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct NoFlags {}

/// A child kind that is not built into Kubernetes: its CRD must be installed before pools of
/// the kind can do anything.
#[derive(Clone, Copy, Debug)]
pub struct ChildCrd {
    /// The CRD's name (`<plural>.<group>`).
    pub name: &'static str,
    /// What to run to install it (shown in the pools' Degraded condition).
    pub install: &'static str,
    /// A stand-in for it, for clusters without the project that defines it (`kwok-pools crd
    /// --child-crds`, `cluster create --child-crds`).
    pub stand_in: fn() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    /// Stand-ins for that project's other CRDs the simulator plays (KubeVirt's
    /// VirtualMachine), installed beside it.
    pub companions:
        fn() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
}

/// Objects of another kind a pool creates when `spec.<field>` is set ([`PoolKind::ALSO_CREATES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlsoCreates {
    pub field: &'static str,
    pub group: &'static str,
    pub plural: &'static str,
}

/// What a pool kind tells the core: the one trait a kind implements (see
/// docs/adding-a-kind.md). Everything per kind hangs off it; [`crate::kinds`] lists the kinds.
pub trait PoolKind:
    Resource<DynamicType = ()> + CustomResourceExt + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The child kind (Node, Pod).
    type Child: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the store keeps of a child: the child itself, or a compact form of it.
    type Stored: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static;
    /// Whatever rendering needs beyond the pool itself (address allocators, settings); built
    /// once per process and shared with the kind's simulator.
    type Env: Clone + Send + Sync + 'static;
    /// The kind's own flags on `run` and `simulate` ([`NoFlags`] for none): the CLI gathers
    /// every registered kind's.
    type Flags: clap::Args + clap::FromArgMatches + Clone + Debug + Send + Sync + 'static;

    /// What one child is called in messages: "node", "pod".
    const NOUN: &'static str;

    /// Where the child template sits in the pool manifest (`spec.nodeTemplate`): the API
    /// server's complaints about a child are reported there.
    const TEMPLATE_PATH: &'static str;

    /// Create children with a plain POST rather than server-side apply. Cheaper for the API
    /// server, and it can never take over an object that appeared under the same name, but
    /// later applies could not remove fields the POST set: only for kinds that are replaced,
    /// never updated in place.
    const CREATE_WITH_POST: bool = false;

    /// The controller patches children (in-place updates): the RBAC it is granted says so.
    const PATCHES_CHILDREN: bool = false;

    /// Whether this kind's controller handles the pool. A kind whose objects come in two
    /// shapes with different children (a VMIPool of VMIs, or of VirtualMachines) has one view
    /// per shape, each handling its own pools and leaving the others alone.
    fn handled_here(&self) -> bool {
        true
    }

    /// Objects of other kinds a pool creates when its spec asks for them (a VMIPool's
    /// `virtualMachine`: VirtualMachines). Whoever sets the field must be allowed to create
    /// them too (the webhook and the creators' admission policy ask).
    const ALSO_CREATES: &'static [AlsoCreates] = &[];

    /// How many children the pool wants.
    fn count(&self) -> u32;
    /// A hash of everything a child is rendered from; a change rolls the children.
    fn template_hash(&self) -> String;
    fn pool_status(&self) -> Option<&PoolStatus>;
    fn update_mode(&self) -> UpdateMode;

    /// Where the children live when their CRD is not built in (checked at start; pools of
    /// the kind are Degraded until it is installed).
    const CHILD_CRD: Option<ChildCrd> = None;

    /// The kind's rules compare a pool with the other pools of the kind (NodePools' address
    /// ranges). Without such rules nobody gathers the peers: a reconcile or an admission
    /// review then costs the same with 10 pools or 10,000.
    const PEER_RULES: bool = false;

    /// Every problem with the pool, by manifest path: the one validation entry point, run by
    /// the webhook (with `old` on an update and every other pool of the kind as `peers`) and
    /// by the reconciler before it acts (with the older pools as `peers`).
    fn problems(&self, old: Option<&Self>, peers: &[Arc<Self>]) -> Vec<String>;

    /// What rendering needs beyond the pool, built once from the kind's flags and the shared
    /// services; an error says which flag is wrong.
    fn env(flags: &Self::Flags, shared: &Shared) -> Result<Self::Env, crate::setup::SetupError>;

    /// The shared informer of the child kind (the simulator reads the same one);
    /// [`crate::informer::shared::labelled`] watches only objects with the pool label.
    fn children(informers: &Informers) -> Arc<Informer<Self::Stored>>;

    /// A valid pool of this kind: the seed of the fuzzers, and what docs and tests start from.
    fn example() -> Self;

    /// How the pool's children (and what runs on them) behave, if the kind has lifecycle knobs:
    /// its own `spec.lifecycle` type, seen through the sections the shared simulator reads.
    fn lifecycle(&self) -> Option<&dyn LifecycleSpec> {
        None
    }

    /// Where a workload's children may run (`None`: the children are not workloads, e.g.
    /// the simulated nodes themselves). With [`Placement::Simulated`] the core confines every
    /// child to simulated nodes ([`PoolKind::confine`]) after `render`.
    fn placement(&self) -> Option<crate::api::Placement> {
        None
    }

    /// Confines a rendered child to simulated nodes (selects `type: kwok`, tolerates the
    /// fake-node taint): the kind says where in its child that goes.
    fn confine(child: &mut Self::Child) {
        let _ = child;
    }

    /// An environment to render children for validation only: it reserves nothing (no
    /// address is allocated) and shares nothing with the controllers.
    fn validation_env() -> Self::Env;

    /// Advice on the spec that does not refuse it (admission warnings).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// The child `id` as this kind renders it: only what is its own. The core then stamps
    /// what every child shares (name, namespace, pool/index/hash labels, controller owner
    /// reference; see [`stamp`]): use [`child`] for the whole object.
    fn render(&self, id: &ChildId, env: &Self::Env) -> Result<Self::Child, Problem>;

    fn is_ready(child: &Self::Stored) -> bool;

    /// The template hash a stored child was rendered from (its `HASH_LABEL`).
    fn child_hash(child: &Self::Stored) -> Option<String> {
        kube::ResourceExt::labels(child).get(crate::api::conventions::HASH_LABEL).cloned()
    }

    /// Whether a child ran to an end and must be replaced (a pod that Succeeded or Failed).
    fn is_finished(child: &Self::Stored) -> bool {
        let _ = child;
        false
    }

    /// Whether the child is marked to go first on a scale-down, and its deletion cost
    /// ([`crate::api::conventions::deletion_order`]).
    fn deletion_order(child: &Self::Stored) -> (bool, i32) {
        crate::api::conventions::deletion_order(|k| kube::ResourceExt::annotations(child).get(k).cloned())
    }

    /// Whether a child fails (a pod that Failed or crash-loops): counted in the status.
    fn is_failing(child: &Self::Stored) -> bool {
        let _ = child;
        false
    }

    /// The writes that update `child` in place to `desired` (only for [`UpdateMode::InPlace`]).
    fn in_place(child: &Self::Stored, desired: Self::Child) -> Vec<Write<Self::Child>> {
        let _ = child;
        vec![Write::Apply(desired)]
    }

    /// The API of the children of this pool.
    fn child_api(client: Client, pool: &Self) -> Api<Self::Child>;

    /// The API of the pool itself (for status writes).
    fn pool_api(client: Client, pool: &Self) -> Api<Self>;
}
