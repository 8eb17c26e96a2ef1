//! `/pods`: the pods bound to one node, as the kubelet lists them. A kubelet answers from its
//! own memory; here the answer is a list from the API server (the simulator keeps only slim
//! pods), so it is kept two seconds per node and at most a few lists run at once: a caller
//! polling `/pods` of every node costs the API server a bounded trickle, and one beyond the
//! limit is told to come back (429 with Retry-After).

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one node's answer is served again.
pub const FRESH: Duration = Duration::from_secs(2);
/// Lists of the API server in flight at once.
pub const LISTS_IN_FLIGHT: usize = 4;
/// Nodes whose answers are kept.
const KEPT: NonZeroUsize = match NonZeroUsize::new(1024) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// Answers by node, and the room for lists.
pub struct PodLists {
    answers: Mutex<LruCache<String, (Instant, Bytes)>>,
    lists: tokio::sync::Semaphore,
}

impl Default for PodLists {
    fn default() -> Self {
        Self { answers: Mutex::new(LruCache::new(KEPT)), lists: tokio::sync::Semaphore::new(LISTS_IN_FLIGHT) }
    }
}

/// A plain-text refusal (as the kubelet writes them).
fn text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn json(body: Bytes) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

impl PodLists {
    /// A fresh answer for `node`, if one is kept.
    fn kept(&self, node: &str) -> Option<Bytes> {
        crate::sync::lock(&self.answers).get(node).filter(|(at, _)| at.elapsed() < FRESH).map(|(_, b)| b.clone())
    }

    /// The pods bound to `node` (the answer kept, else listed within the limit).
    pub async fn answer(&self, client: &kube::Client, node: &str) -> Response {
        if let Some(body) = self.kept(node) {
            return json(body);
        }
        let Ok(_room) = self.lists.try_acquire() else {
            let mut r = text(StatusCode::TOO_MANY_REQUESTS, "too many pod lists in flight; try again".into());
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        };
        // Another caller may have listed it while this one waited for room.
        if let Some(body) = self.kept(node) {
            return json(body);
        }
        let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
        match Api::<Pod>::all(client.clone()).list(&lp).await {
            Ok(list) => {
                let items = serde_json::to_value(&list.items).unwrap_or_default();
                let doc = serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
                let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
                crate::sync::lock(&self.answers).put(node.to_string(), (Instant::now(), body.clone()));
                json(body)
            }
            Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, format!("listing the pods of node {node}: {e}; try again")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::fixtures::{Reply, mock_api};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn list_reply() -> Reply {
        Reply(
            200,
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"p","namespace":"d"}}]}"#
                .into(),
        )
    }

    #[tokio::test]
    async fn a_node_answer_is_kept_two_seconds_and_lists_in_flight_are_bounded() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let (client, _) = mock_api(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            list_reply()
        });
        let lists = PodLists::default();
        for _ in 0..5 {
            let r = lists.answer(&client, "n1").await;
            assert_eq!(r.status(), StatusCode::OK);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one list for five answers within two seconds");
        let body = axum::body::to_bytes(lists.answer(&client, "n1").await.into_body(), 1 << 20).await.unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["items"][0]["metadata"]["name"], "p");
        lists.answer(&client, "n2").await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "another node is its own list");

        // Every room taken: the next caller is told to come back, not queued.
        let held: Vec<_> = (0..LISTS_IN_FLIGHT).map(|_| lists.lists.try_acquire().unwrap()).collect();
        let r = lists.answer(&client, "n3").await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        assert_eq!(lists.answer(&client, "n1").await.status(), StatusCode::OK, "a kept answer needs no room");
        drop(held);
        assert_eq!(lists.answer(&client, "n3").await.status(), StatusCode::OK);
    }
}
