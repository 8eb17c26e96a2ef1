//! Renewing this replica's membership Lease, on a cadence of its own: a slow renewal never
//! waits for the view loop (reads of other members, hand-overs), and the view loop never waits
//! for a slow renewal. The time of the last renewal that went through is published for the
//! view loop (which fences this replica when it gets old).

use super::config::{MembershipConfig, NODES_ANNOTATION, SHARD_LABEL};
use crate::api::conventions::FIELD_MANAGER;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PostParams};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub struct Renewer {
    api: Api<Lease>,
    config: MembershipConfig,
    metrics: Arc<Metrics>,
    /// When the last renewal that went through was sent.
    renewed: watch::Sender<Option<Instant>>,
    joined: bool,
}

impl Renewer {
    pub fn new(
        api: Api<Lease>,
        config: MembershipConfig,
        metrics: Arc<Metrics>,
    ) -> (Self, watch::Receiver<Option<Instant>>) {
        let (renewed, rx) = watch::channel(None);
        (Renewer { api, config, metrics, renewed, joined: false }, rx)
    }

    /// Renews every third of the lease duration (every second while renewals fail), until the
    /// view loop goes away.
    pub async fn run(mut self) {
        while !self.renewed.is_closed() {
            let ok = self.renew().await;
            tokio::time::sleep(if ok { self.config.duration / 3 } else { Duration::from_secs(1) }).await;
        }
    }

    async fn renew(&mut self) -> bool {
        // A renewal that lands late still counts from when it was sent; past two thirds of
        // the lease a fresh one (with a fresh time) is worth more than waiting on.
        let limit = self.config.duration * 2 / 3;
        match tokio::time::timeout(limit, self.try_renew()).await {
            Ok(ok) => ok,
            Err(_) => {
                tracing::warn!(lease = %self.config.lease_name(), waited = ?limit, "renewing the membership Lease timed out (the API server is slow or unreachable); retrying in 1s");
                false
            }
        }
    }

    async fn try_renew(&mut self) -> bool {
        let sent = Instant::now();
        let now = MicroTime(Timestamp::now());
        let name = self.config.lease_name();
        let nodes = self.metrics.managed_nodes.get().to_string();
        let mut patch = serde_json::json!({
            "metadata": {
                "labels": {SHARD_LABEL: self.config.instance},
                "annotations": {NODES_ANNOTATION: nodes},
            },
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": self.config.duration.as_secs().max(1),
                "renewTime": now,
            }
        });
        if !self.joined {
            // (Re)joining: when this membership began.
            patch["spec"]["acquireTime"] = serde_json::json!(now);
        }
        let pp = crate::api::conventions::patch_params();
        let result = match self.api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some([(SHARD_LABEL.to_string(), self.config.instance.clone())].into()),
                        annotations: Some([(NODES_ANNOTATION.to_string(), nodes)].into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config.identity.clone()),
                        lease_duration_seconds: i32::try_from(self.config.duration.as_secs().max(1)).ok(),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                self.api.create(&pp, &lease).await.map(|_| ())
            }
            other => other.map(|_| ()),
        };
        self.metrics.write("leases", "shard-renew", result.is_ok());
        match result {
            Ok(()) => {
                self.joined = true;
                self.renewed.send_replace(Some(sent));
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %name, namespace = %self.config.namespace, "renewing the membership Lease failed (the operator needs create/patch on leases there); retrying in 1s");
                false
            }
        }
    }
}
