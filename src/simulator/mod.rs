//! The lifecycle simulator: makes fake nodes (and the pods on them) behave as if a kubelet
//! ran them. It reads the shared stores and never lists in a loop.

pub mod ipam;
pub mod leases;
pub mod lifecycle;
pub mod manage;
pub mod node_status;
pub mod nodes;
pub mod pod_ipam;
pub mod pod_status;
pub mod pods;
pub mod selector;

/// The longest delay a timer wheel accepts is about two years; anything longer (a pod with a
/// grace period of years, a flag set absurdly high) waits a year and is looked at again.
pub fn timer_delay(d: std::time::Duration) -> std::time::Duration {
    d.min(std::time::Duration::from_secs(365 * 24 * 3600))
}
