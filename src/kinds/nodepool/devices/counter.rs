//! The devices line of a NodePool's status and the `kwok_pools_pool_devices` metric: every few
//! seconds, counts each pool's published devices and the ones ResourceClaims hold (what
//! [`crate::kinds::nodepool::devices::status::count`] computes) and writes `status.devices`
//! when it changed. A pool is counted by the instance that simulates its nodes (several
//! instances share a cluster) and there by one replica, the one the shard gives the pool's
//! name to; the status is the simulator's field, the controller's writes leave it alone.

use super::super::NodePool;
use super::super::metrics::{DeviceLabels, NodePoolMetrics};
use super::status::{DeviceCount, count};
use crate::shard::Shard;
use crate::simulator::manage::Manage;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::Patch;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often the counts are taken.
const EVERY: Duration = Duration::from_secs(3);

pub struct DeviceCounter {
    pub client: Client,
    pub nodes: Store<Node>,
    pub manage: Manage,
    pub pools: Store<NodePool>,
    pub slices: Store<ResourceSlice>,
    pub claims: Store<ResourceClaim>,
    pub shard: Shard,
    pub metrics: Arc<Metrics>,
    /// NodePool's own metrics (`kwok_pools_pool_devices`).
    pub devices: Arc<NodePoolMetrics>,
}

impl DeviceCounter {
    pub async fn run(self) {
        let _ = self.pools.wait_until_ready().await;
        let _ = self.slices.wait_until_ready().await;
        let _ = self.claims.wait_until_ready().await;
        let mut shown: HashSet<DeviceLabels> = HashSet::new();
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            let slices = self.slices.state();
            let claims = self.claims.state();
            let counts = count(slices.iter().map(AsRef::as_ref), claims.iter().map(AsRef::as_ref));
            let mut now: HashSet<DeviceLabels> = HashSet::new();
            let ours = self.simulated_pools();
            for pool in self.pools.state() {
                let name = pool.name_any();
                let uid = pool.metadata.uid.as_deref().unwrap_or_default();
                if !ours.contains(uid) || !self.shard.owns(&name) || pool.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let want = if pool.spec.devices.is_empty() {
                    Vec::new()
                } else {
                    counts.get(&name).cloned().unwrap_or_default()
                };
                self.export(&name, &want, &mut now);
                let have = pool.status.as_ref().map(|s| s.devices.as_slice()).unwrap_or_default();
                if have != want.as_slice() {
                    self.write(&name, &want).await;
                }
            }
            for gone in shown.difference(&now) {
                self.devices.devices.remove(gone);
            }
            shown = now;
        }
    }

    /// The UIDs of the NodePools with a node this instance simulates.
    fn simulated_pools(&self) -> HashSet<String> {
        let nodes = self.nodes.state();
        let owners = nodes.iter().filter(|n| self.manage.manages(n)).filter_map(|n| {
            n.owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "NodePool")
                .map(|o| o.uid.clone())
        });
        owners.collect()
    }

    fn export(&self, pool: &str, counts: &[DeviceCount], now: &mut HashSet<DeviceLabels>) {
        for c in counts {
            for (state, value) in [("total", c.total), ("allocated", c.allocated), ("unhealthy", c.unhealthy)] {
                let labels = DeviceLabels { pool: pool.into(), driver: c.driver.clone(), state: state.into() };
                self.devices.devices.get_or_create(&labels).set(i64::from(value));
                now.insert(labels);
            }
        }
    }

    async fn write(&self, pool: &str, counts: &[DeviceCount]) {
        let api: Api<NodePool> = Api::all(self.client.clone());
        let value = if counts.is_empty() { serde_json::Value::Null } else { serde_json::json!(counts) };
        let patch = serde_json::json!({ "status": { "devices": value } });
        let pp = crate::api::conventions::patch_params();
        let result = api.patch_status(pool, &pp, &Patch::Merge(&patch)).await;
        self.metrics.write("nodepools", "patch-status", result.is_ok());
        if let Err(e) = result {
            tracing::warn!(pool, error = %e, "writing the NodePool's device counts failed; trying again in a few seconds");
        }
    }
}
