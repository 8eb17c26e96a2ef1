//! PodPool: a namespaced pool of Pods that land on fake nodes by default ([`api`]), its rules
//! ([`rules`]) and its place on the pool core ([`kind`]). Its pods need no simulator of their
//! own: the kubelet of the simulated node they are bound to runs them (see NodePool's).

pub mod api;
pub mod kind;
pub mod rules;

#[cfg(test)]
mod cel_tests;

pub use api::{PodPool, PodPoolSpec, PodTemplate};
pub use kind::PodEnv;

impl crate::pool::Simulate for PodPool {
    type Metrics = ();
}
