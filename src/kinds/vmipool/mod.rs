//! VMIPool: a namespaced pool of KubeVirt VirtualMachineInstances ([`api`], with the VMI types
//! no crate has in [`kubevirt`] and KubeVirt's CRD for clusters without it in
//! [`kubevirt_crd`]), its rules ([`rules`]), its place on the pool core ([`kind`]; pools that
//! keep VirtualMachines through the view [`vm_pool`]) and the
//! part of KubeVirt the simulator plays ([`simulator`]).

pub mod api;
pub mod eviction;
pub mod kind;
pub mod kubevirt;
pub mod kubevirt_crd;
pub mod metrics;
pub mod migration;
pub mod rules;
pub mod simulator;
pub mod vm;
pub mod vm_pool;

#[cfg(test)]
mod cel_tests;

pub use api::{RunStrategy, VMIPool, VMIPoolSpec, VirtualMachineChoice, VmiLifecycle, VmiPoolLifecycle, VmiTemplate};
pub use kind::VmiEnv;
pub use simulator::VmiFlags;
pub use vm_pool::VmPool;
