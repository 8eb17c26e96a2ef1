//! What the kubelet API's handlers share: the state they read, and the plain-text answer every
//! refusal is written as.

use super::auth::Authorizer;
use super::index::PodsByNode;
use super::stats::Counters;
use crate::informer::pod::SlimPod;
use crate::kubelet::status::endpoint::Endpoints;
use crate::simulator::lifecycle::Lifecycles;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::reflector::Store;
use std::sync::{Arc, Mutex};

/// Everything the handler reads.
pub struct KubeletApi {
    pub client: Client,
    pub nodes: Store<Node>,
    pub pods: Store<SlimPod>,
    pub index: Arc<PodsByNode>,
    pub endpoints: Arc<Mutex<Endpoints>>,
    pub lifecycles: Lifecycles,
    pub counters: Counters,
    pub auth: Authorizer,
    /// What the kinds add to their nodes: the GPUs of `/metrics/dcgm` and who holds them.
    pub devices: crate::kubelet::AllDevices,
    /// The volumes pods mount: what `/stats/summary` and `kubelet_volume_stats_*` report.
    pub volumes: Arc<dyn crate::kubelet::Volumes>,
    /// `/pods` answers, kept briefly, lists bounded.
    pub pod_lists: super::pod_list::PodLists,
    /// Whether this replica simulates a node (managed, and in its shard).
    pub serves: Box<dyn Fn(&Node) -> bool + Send + Sync>,
}

/// A plain-text answer (what a kubelet writes for its errors).
pub fn text(status: StatusCode, body: impl Into<String>) -> Response {
    let mut r = (status, body.into()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
