//! The kubelet model, shared by the pool controllers (children born in their final state) and
//! the simulator (which keeps them there): what a kubelet reports about its node and reads of
//! a pod's status. Pure; depends only on `api` and the stored forms of `informer`.

pub mod node;
pub mod pod;
