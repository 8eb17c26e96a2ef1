//! The kubelet model, shared by the pool controllers (children born in their final state) and
//! the simulator (which keeps them there): what a kubelet reports about its node, reads of a
//! pod's status, the pod status it writes, its answer to an in-place resize, and what its API answers (endpoint, usage, logs,
//! exec, resource metrics, stats summary, the SPDY framing of its streams). Pure but for
//! `spdy::session`, which runs a connection; depends only on `api` and the stored forms of
//! `informer`.

pub mod dcgm;
pub mod endpoint;
pub mod exec;
pub mod logs;
pub mod node;
pub mod pod;
pub mod pod_status;
pub mod resize;
pub mod resource_metrics;
pub mod spdy;
pub mod summary;
pub mod usage;
