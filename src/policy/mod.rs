//! Lifecycle policies: behaviour by selector for any simulated pod or node, not only a pool's
//! children ([`api`]). Pure rooms beside the I/O: the selection and ranking ([`matching`]),
//! the rules ([`rules`]), the status ([`status`]); the engine's view of them ([`source`]), and
//! the loops that follow them and write their status ([`controller`]). One engine: the
//! lifecycle engine layers the policy that governs an object over its pool's knobs
//! ([`crate::simulator::lifecycle::Lifecycles`]).

pub mod api;
pub mod controller;
pub mod matching;
pub mod rules;
pub mod source;
pub mod status;

pub use api::LifecyclePolicy;

use crate::deploy::rule::Rule;

/// The rights the policies need: watch them, write their status.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule::cluster(
            crate::api::common::GROUP,
            &["lifecyclepolicies"],
            &["get", "list", "watch"],
            "lifecycle policies: behaviour for the simulated pods and nodes they select",
        ),
        Rule::cluster(
            crate::api::common::GROUP,
            &["lifecyclepolicies/status"],
            &["patch"],
            "lifecycle policies: what each governs, written to its status",
        ),
    ]
}

/// The policy CRD.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    LifecyclePolicy::crd()
}
