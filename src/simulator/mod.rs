//! The lifecycle simulator: makes fake nodes (and the pods on them) behave as if a kubelet
//! ran them. It reads the shared stores and never lists in a loop.

pub mod leases;
pub mod lifecycle;
pub mod machinery;
pub mod manage;
pub mod nodes;
pub mod pod_filter;
pub mod pod_ipam;
pub mod pod_status;
pub mod pods;
pub mod selector;
pub mod vmi_status;
pub mod vmis;

pub use crate::backoff::{retry_after, timer_delay};
