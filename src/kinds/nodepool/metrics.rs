//! NodePool's own metrics, registered with the process's (its `Simulate::Metrics`).

use crate::telemetry::metrics::KindMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A NodePool's simulated devices of one driver in one state (`total`, `allocated`,
/// `unhealthy`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    pub pool: String,
    pub driver: String,
    pub state: String,
}

#[derive(Default)]
pub struct NodePoolMetrics {
    /// Simulated DRA devices per NodePool, driver and state.
    pub devices: Family<DeviceLabels, Gauge>,
}

impl KindMetrics for NodePoolMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "pool_devices",
            "A NodePool's simulated DRA devices by driver and state: total, allocated (held by a ResourceClaim), unhealthy (tainted)",
            self.devices.clone(),
        );
    }
}
