//! The kubelet model, shared by the pool controllers (children born in their final state) and
//! the simulator (which keeps them there): what a kubelet reports about its node, reads of a
//! pod's status, and the pod status it writes. Pure; depends only on `api` and the stored
//! forms of `informer`.

pub mod node;
pub mod pod;
pub mod pod_status;
