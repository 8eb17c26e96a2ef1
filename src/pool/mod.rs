//! The generic replica-set core, written once for every pool kind: a small trait each kind
//! implements, the pure planner and status builder, and the apply step.

pub mod apply;
pub mod dry_run;
pub mod hash;
pub mod plan;
pub mod reconcile;
pub mod refusal;
pub mod status;

use crate::api::PoolStatus;
use kube::{Api, Client, Resource};
use plan::UpdateMode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use status::Problem;
use std::fmt::Debug;

/// The field manager of every write the operator makes to children and status.
pub const FIELD_MANAGER: &str = "kwok-pools";

/// One write that brings an existing child to its rendered form.
#[derive(Clone, Debug)]
pub enum Write<C> {
    /// Server-side apply of the object (spec and metadata).
    Apply(C),
    /// A JSON merge patch of the status subresource.
    MergeStatus(serde_json::Value),
}

/// What a pool kind tells the core.
pub trait PoolKind:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The child kind (Node, Pod).
    type Child: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the store keeps of a child: the child itself, or a compact form of it.
    type Stored: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static;
    /// Whatever rendering needs beyond the pool itself (address allocators, settings).
    type Env: Send + Sync + 'static;

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

    /// How many children the pool wants.
    fn count(&self) -> u32;
    /// A hash of everything a child is rendered from; a change rolls the children.
    fn template_hash(&self) -> String;
    fn pool_status(&self) -> Option<&PoolStatus>;
    fn update_mode(&self) -> UpdateMode;

    /// The same rules the admission webhook applies; the reconciler refuses to act on a pool
    /// that fails them. The message names the field by its manifest path.
    fn validate(&self, env: &Self::Env) -> Result<(), String>;

    /// An environment to render children for validation only: it reserves nothing (no
    /// address is allocated) and shares nothing with the controllers.
    fn validation_env() -> Self::Env;

    /// Advice on the spec that does not refuse it (admission warnings).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// The full child `index`, labelled with `hash`, with a controller owner reference.
    fn render(&self, index: u32, hash: &str, env: &Self::Env) -> Result<Self::Child, Problem>;

    fn is_ready(child: &Self::Stored) -> bool;

    /// Whether a child ran to an end and must be replaced (a pod that Succeeded or Failed).
    fn is_finished(child: &Self::Stored) -> bool {
        let _ = child;
        false
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
