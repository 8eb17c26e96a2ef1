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

/// How long to wait before retry number `failures` (1, 2, …) of a write: 1 s doubling to
/// `cap`, with ±20 % jitter so a burst of failures does not come back as one wave.
pub fn retry_after(failures: u32, cap: std::time::Duration) -> std::time::Duration {
    use rand::Rng;
    let base = std::time::Duration::from_secs(1).saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    base.min(cap).mul_f64(rand::rng().random_range(0.8..1.2))
}

/// The longest delay a timer wheel accepts is about two years; anything longer (a pod with a
/// grace period of years, a flag set absurdly high) waits a year and is looked at again.
pub fn timer_delay(d: std::time::Duration) -> std::time::Duration {
    d.min(std::time::Duration::from_secs(365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::retry_after;
    use std::time::Duration;

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_a_cap() {
        let cap = Duration::from_secs(10);
        for (failures, base) in [(1u32, 1.0f64), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (40, 10.0)] {
            let d = retry_after(failures, cap).as_secs_f64();
            assert!(d >= base * 0.8 && d <= base * 1.2, "failure {failures}: {d}s");
        }
        let spread: std::collections::HashSet<u128> = (0..20).map(|_| retry_after(3, cap).as_millis()).collect();
        assert!(spread.len() > 1, "jittered");
    }
}
