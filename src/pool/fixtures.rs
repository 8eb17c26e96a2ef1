//! Test fixtures for the glue between the pool core and the API server: mock API servers (a
//! `tower` service behind a real `kube::Client`) — a strict one that answers only the calls a
//! test expects and fails it on any other or on one that never came (as kube-rs's
//! controller-rs `ApiServerVerifier`), and a scripted one for watches — and ready-made stores.

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

/// An answer made from the request.
pub type Answer = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A call the strict mock expects: its method and path, how often, and the answer.
pub struct Call {
    method: &'static str,
    path: String,
    /// `None`: any number of times (a poll).
    times: Option<usize>,
    answer: Answer,
}

impl Call {
    /// `method path`, exactly `times` times, answered by `answer`.
    pub fn new(
        method: &'static str,
        path: &str,
        times: usize,
        answer: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self { method, path: path.into(), times: Some(times), answer: Arc::new(answer) }
    }

    /// `method path` as often as the code polls (never included).
    pub fn polled(method: &'static str, path: &str, answer: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        Self { method, path: path.into(), times: None, answer: Arc::new(answer) }
    }
}

#[derive(Default)]
struct Verdict {
    /// Each expected call and how often it came.
    calls: Vec<(Call, usize)>,
    unexpected: Vec<String>,
}

/// What the strict mock saw: [`Verifier::assert_done`] fails on a call nobody expected and on
/// an expected call that came too few or too many times.
#[derive(Clone)]
pub struct Verifier {
    verdict: Arc<Mutex<Verdict>>,
    pub log: Log,
}

impl Verifier {
    pub fn assert_done(&self) {
        let v = self.verdict.lock().unwrap();
        let mut wrong: Vec<String> = v.unexpected.iter().map(|u| format!("unexpected call: {u}")).collect();
        for (call, seen) in &v.calls {
            if call.times.is_some_and(|t| t != *seen) {
                wrong.push(format!(
                    "{} {}: expected {:?} calls, got {seen}",
                    call.method,
                    call.path,
                    call.times.unwrap_or(0)
                ));
            }
        }
        assert!(wrong.is_empty(), "the API server saw what the test did not expect:\n{}", wrong.join("\n"));
    }

    /// The requests seen, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }
}

/// A client whose API server answers only `calls`: anything else is answered 500 (so the code
/// under test sees an error) and fails [`Verifier::assert_done`].
pub fn strict_api(calls: Vec<Call>) -> (Client, Verifier) {
    let verdict =
        Arc::new(Mutex::new(Verdict { calls: calls.into_iter().map(|c| (c, 0)).collect(), unexpected: vec![] }));
    let v = verdict.clone();
    let (client, log) = mock_api(move |seen: &Seen| {
        let mut v = v.lock().unwrap();
        let found = v
            .calls
            .iter_mut()
            .find(|(c, n)| c.method == seen.method && c.path == seen.path && c.times.is_none_or(|t| *n < t));
        match found {
            Some((call, n)) => {
                *n += 1;
                (call.answer)(seen)
            }
            None => {
                v.unexpected.push(format!("{} {}?{}", seen.method, seen.path, seen.query));
                Reply::json(
                    500,
                    json!({"kind": "Status", "apiVersion": "v1", "code": 500, "message": "a call the test did not expect"}),
                )
            }
        }
    });
    (client, Verifier { verdict, log })
}

/// The object sent back, as the API server answers a write.
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
