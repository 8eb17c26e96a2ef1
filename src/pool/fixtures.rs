//! Test fixtures for the glue between the pool core and the API server: a mock API server
//! (a `tower` service behind a real `kube::Client`) that records every request and answers
//! from a scenario, and ready-made stores.

use http_body_util::BodyExt;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher::Event;
use kube::{Client, Resource};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// One request the mock API server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Seen {
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path == path
    }
}

/// What the mock answers: a status code and a body (JSON, or JSON lines for a watch).
pub struct Reply(pub u16, pub String);

impl Reply {
    pub fn json(code: u16, body: Value) -> Self {
        Reply(code, body.to_string())
    }
}

/// The requests seen so far.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// A client whose API server is `scenario`, and the log of what it was asked.
pub fn mock_api(scenario: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> (Client, Log) {
    let log: Log = Arc::default();
    let seen_log = log.clone();
    let scenario = Arc::new(scenario);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (log, scenario) = (seen_log.clone(), scenario.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let Reply(code, text) = scenario(&seen);
            log.lock().unwrap().push(seen);
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(code).body(kube::client::Body::from(text.into_bytes())).unwrap(),
            )
        }
    });
    (Client::new(service, "default"), log)
}

/// The usual answers: the object sent back for writes, the pool's metadata for a GET.
pub fn echo(seen: &Seen) -> Reply {
    match seen.method.as_str() {
        "PATCH" | "POST" | "PUT" if !seen.body.is_null() => {
            let mut body = seen.body.clone();
            if body.get("metadata").is_none() {
                body["metadata"] = json!({"name": seen.path.rsplit('/').next()});
            }
            Reply::json(200, body)
        }
        "DELETE" => Reply::json(200, json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
        _ => Reply::json(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "message": "not found"}),
        ),
    }
}

/// A synced store holding `objects`.
pub fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut w = Writer::<K>::default();
    w.apply_watcher_event(&Event::Init);
    for o in objects {
        w.apply_watcher_event(&Event::InitApply(o));
    }
    w.apply_watcher_event(&Event::InitDone);
    w.as_reader()
}
