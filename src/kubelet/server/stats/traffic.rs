//! What a simulated container writes to disk and sends over the network: nothing is written or
//! sent, so these follow its CPU and memory model — bytes received grow with the CPU it has
//! used (1 MiB a core-second; half as much sent), its writable layer holds 4 MiB plus a quarter
//! of its working set, its log 64 KiB — so dashboards' network and filesystem panels move with
//! the usage shape and every scrape agrees. Pure.

use super::resource_metrics::{ContainerReading, NodeReading};

pub const MIB: f64 = 1024.0 * 1024.0;
pub const GIB: f64 = 1024.0 * MIB;
/// What the node's filesystem holds besides its pods' layers and logs (images, the system).
pub const NODE_BASE_BYTES: f64 = 10.0 * GIB;
/// Each container's log file.
pub const LOG_BYTES: f64 = 64.0 * 1024.0;

/// Bytes a container has received (a counter).
pub fn rx_bytes(c: &ContainerReading<'_>) -> f64 {
    (c.cpu_seconds * MIB).floor()
}

/// Bytes a container has sent (a counter).
pub fn tx_bytes(c: &ContainerReading<'_>) -> f64 {
    (c.cpu_seconds * MIB / 2.0).floor()
}

/// Bytes of a container's writable layer.
pub fn rootfs_bytes(c: &ContainerReading<'_>) -> f64 {
    (4.0 * MIB + c.memory_bytes / 4.0).floor()
}

/// Bytes used of the node's filesystem: its base and every container's layer and log.
pub fn node_fs_bytes(r: &NodeReading<'_>) -> f64 {
    NODE_BASE_BYTES + r.containers.iter().map(|c| rootfs_bytes(c) + LOG_BYTES).sum::<f64>()
}

/// The node's bytes received and sent: its containers' together.
pub fn node_network(r: &NodeReading<'_>) -> (f64, f64) {
    r.containers.iter().fold((0.0, 0.0), |(rx, tx), c| (rx + rx_bytes(c), tx + tx_bytes(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_follows_cpu_and_disk_follows_memory() {
        let c = ContainerReading { cpu_seconds: 10.0, memory_bytes: 8.0 * MIB, ..ContainerReading::test() };
        assert_eq!((rx_bytes(&c), tx_bytes(&c)), (10.0 * MIB, 5.0 * MIB));
        assert_eq!(rootfs_bytes(&c), 6.0 * MIB);
        let r = NodeReading { containers: vec![c.clone(), c], ..Default::default() };
        assert_eq!(node_fs_bytes(&r), NODE_BASE_BYTES + 2.0 * (6.0 * MIB + LOG_BYTES));
        assert_eq!(node_network(&r), (20.0 * MIB, 10.0 * MIB));
    }
}
