//! VMIPool's own metrics, registered with the process's (its `Simulate::Metrics`).

use crate::telemetry::metrics::{KindMetrics, ResultLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub struct VmiPoolMetrics {
    /// The simulated KubeVirt's steps, by step.
    pub transitions: Family<ResultLabels, Counter>,
}

impl KindMetrics for VmiPoolMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("simulator_vmi_transitions", "VMI lifecycle steps by kind of step", self.transitions.clone());
    }
}
