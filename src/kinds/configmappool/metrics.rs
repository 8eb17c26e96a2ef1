//! ConfigMapPool's own metrics, registered with the process's (its `Simulate::Metrics`).

use crate::telemetry::metrics::KindMetrics;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub struct ConfigMapPoolMetrics {
    /// ConfigMaps stamped after their pool's `stampAfter`.
    pub stamps: Counter,
}

impl KindMetrics for ConfigMapPoolMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "configmappool_stamps",
            "ConfigMaps stamped after their pool's stampAfter",
            self.stamps.clone(),
        );
    }
}
