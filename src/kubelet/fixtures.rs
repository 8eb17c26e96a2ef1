//! Test fixtures for the kubelet's workers: a small world that plays the API server and the
//! watches a worker reads — it keeps pods, nodes and leases, answers the worker's writes
//! (status patches merged as a strategic merge merges the kubelet's lists, deletes, lease
//! creates and renewals), records every write with the time it came, and feeds each change
//! back to the worker's store and change channel as a watch would. Behind a real
//! `kube::Client` ([`crate::pool::fixtures::mock_api`]); time is tokio's (paused in tests).

use crate::informer::Change;
use crate::informer::pod::SlimPod;
use crate::pool::fixtures::{Reply, Seen, mock_api};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;

/// One write the world received.
#[derive(Clone, Debug)]
pub struct Write {
    /// Time since the world was made.
    pub at: Duration,
    pub method: String,
    pub path: String,
    pub body: Value,
}

impl Write {
    /// A pod status patch's phase, if it sets one.
    pub fn phase(&self) -> Option<&str> {
        self.body["status"]["phase"].as_str()
    }

    /// Whether it writes the status of pod `name`.
    pub fn is_pod_status(&self, name: &str) -> bool {
        self.method == "PATCH" && self.path.ends_with(&format!("/pods/{name}/status"))
    }

    /// The `reason` of the first container's waiting or terminated state, if any.
    pub fn container_reason(&self) -> Option<&str> {
        let state = &self.body["status"]["containerStatuses"][0]["state"];
        state["waiting"]["reason"].as_str().or(state["terminated"]["reason"].as_str())
    }
}

struct Inner {
    start: Instant,
    pods: BTreeMap<(String, String), Value>,
    leases: BTreeMap<String, Value>,
    writes: Vec<Write>,
    version: u64,
    pod_writer: Writer<SlimPod>,
    node_writer: Writer<Node>,
}

/// The world: a fake API server with its watches.
#[derive(Clone)]
pub struct World {
    inner: Arc<Mutex<Inner>>,
    /// The wall clock the world and its workers share (it follows tokio's paused clock).
    pub clock: crate::simulator::clock::Clock,
    pod_changes: UnboundedSender<Change<SlimPod>>,
    node_changes: UnboundedSender<Change<Node>>,
    pub pods: Store<SlimPod>,
    pub nodes: Store<Node>,
}

/// A world, a client that talks to it, and the change streams a worker reads.
pub fn world() -> (World, Client, UnboundedReceiver<Change<SlimPod>>, UnboundedReceiver<Change<Node>>) {
    let (mut pod_writer, mut node_writer) = (Writer::<SlimPod>::default(), Writer::<Node>::default());
    for_each_init(&mut pod_writer);
    for_each_init(&mut node_writer);
    let (pods, nodes) = (pod_writer.as_reader(), node_writer.as_reader());
    let inner = Inner {
        start: Instant::now(),
        pods: BTreeMap::new(),
        leases: BTreeMap::new(),
        writes: Vec::new(),
        version: 1,
        pod_writer,
        node_writer,
    };
    let (pod_changes, pod_rx) = unbounded_channel();
    let (node_changes, node_rx) = unbounded_channel();
    let clock = crate::simulator::clock::Clock::following();
    let world = World { inner: Arc::new(Mutex::new(inner)), clock, pod_changes, node_changes, pods, nodes };
    let answering = world.clone();
    let (client, _log) = mock_api(move |seen| answering.answer(seen));
    (world, client, pod_rx, node_rx)
}

fn for_each_init<K: kube::Resource<DynamicType = ()> + Clone>(w: &mut Writer<K>) {
    w.apply_watcher_event(&Event::Init);
    w.apply_watcher_event(&Event::InitDone);
}

/// A node the default rules manage (kwok's annotation), with an InternalIP and a podCIDR.
pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.7"}]}
    }))
    .unwrap_or_else(|e| unreachable!("the test node decodes: {e}"))
}

/// A pod bound to `node`, not yet started.
pub fn pod(name: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"nodeName": node, "restartPolicy": "Always", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Pending"}
    })
}

impl World {
    /// Adds (or changes) a node, as the watch delivers it.
    pub fn put_node(&self, node: Node) {
        let mut inner = self.lock();
        inner.node_writer.apply_watcher_event(&Event::Apply(node.clone()));
        let _ = self.node_changes.send(Change::Applied(Arc::new(node)));
    }

    /// Adds (or changes) a pod, as the watch delivers it.
    pub fn put_pod(&self, pod: Value) {
        let mut inner = self.lock();
        self.store_pod(&mut inner, pod);
    }

    /// Changes the stored pod `name` (namespace `d`) with `change`, as its watch delivers it.
    pub fn edit_pod(&self, name: &str, change: impl FnOnce(&mut Value)) {
        let mut inner = self.lock();
        let Some(mut pod) = inner.pods.get(&("d".to_string(), name.to_string())).cloned() else { return };
        change(&mut pod);
        self.store_pod(&mut inner, pod);
    }

    /// The stored pod `name` (namespace `d`).
    pub fn pod(&self, name: &str) -> Option<Value> {
        self.lock().pods.get(&("d".to_string(), name.to_string())).cloned()
    }

    /// Every write so far.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// The writes to the status of pod `name`.
    pub fn pod_status_writes(&self, name: &str) -> Vec<Write> {
        self.writes().into_iter().filter(|w| w.is_pod_status(name)).collect()
    }

    /// The writes of node `name`'s Lease (creates and renewals).
    pub fn lease_writes(&self, name: &str) -> Vec<Write> {
        let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
        let own = format!("{path}/{name}");
        self.writes()
            .into_iter()
            .filter(|w| w.path == own || (w.method == "POST" && w.path == path && w.body["metadata"]["name"] == name))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    fn store_pod(&self, inner: &mut Inner, mut pod: Value) {
        inner.version += 1;
        pod["metadata"]["resourceVersion"] = inner.version.to_string().into();
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
        inner.pods.insert((ns, name), pod.clone());
        let Ok(typed) = serde_json::from_value::<Pod>(pod) else { return };
        let slim = SlimPod::from(typed);
        inner.pod_writer.apply_watcher_event(&Event::Apply(slim.clone()));
        let _ = self.pod_changes.send(Change::Applied(Arc::new(slim)));
    }

    fn remove_pod(&self, inner: &mut Inner, ns: &str, name: &str) -> Option<Value> {
        let pod = inner.pods.remove(&(ns.to_string(), name.to_string()))?;
        let typed = serde_json::from_value::<Pod>(pod.clone()).ok()?;
        let slim = SlimPod::from(typed);
        inner.pod_writer.apply_watcher_event(&Event::Delete(slim.clone()));
        let _ = self.pod_changes.send(Change::Deleted(Arc::new(slim)));
        Some(pod)
    }

    /// What the API server answers.
    fn answer(&self, seen: &Seen) -> Reply {
        let mut inner = self.lock();
        if seen.method != "GET" {
            let at = Instant::now().duration_since(inner.start);
            let write = Write { at, method: seen.method.clone(), path: seen.path.clone(), body: seen.body.clone() };
            inner.writes.push(write);
        }
        let parts: Vec<&str> = seen.path.trim_start_matches('/').split('/').collect();
        match (seen.method.as_str(), parts.as_slice()) {
            ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
                self.patch_pod(&mut inner, ns, name, seen)
            }
            ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
                match inner.pods.get(&(ns.to_string(), name.to_string())) {
                    Some(p) => Reply::json(200, p.clone()),
                    None => not_found(),
                }
            }
            ("GET", ["api", "v1", "pods"]) => {
                let node =
                    seen.query.split("spec.nodeName%3D").nth(1).unwrap_or_default().split('&').next().unwrap_or("");
                let items: Vec<Value> =
                    inner.pods.values().filter(|p| node.is_empty() || p["spec"]["nodeName"] == node).cloned().collect();
                Reply::json(200, json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}))
            }
            ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => match self.remove_pod(&mut inner, ns, name) {
                Some(pod) => Reply::json(200, pod),
                None => not_found(),
            },
            ("POST", ["apis", "coordination.k8s.io", "v1", "namespaces", "kube-node-lease", "leases"]) => {
                let name = seen.body["metadata"]["name"].as_str().unwrap_or_default().to_string();
                if inner.leases.contains_key(&name) {
                    return Reply::json(
                        409,
                        json!({"kind": "Status", "apiVersion": "v1", "code": 409, "reason": "AlreadyExists"}),
                    );
                }
                self.put_lease(&mut inner, name, seen.body.clone(), 201)
            }
            ("PATCH", ["apis", "coordination.k8s.io", "v1", "namespaces", "kube-node-lease", "leases", name]) => {
                let Some(mut lease) = inner.leases.get(*name).cloned() else { return not_found() };
                merge(&mut lease, &seen.body);
                self.put_lease(&mut inner, name.to_string(), lease, 200)
            }
            ("PATCH", ["api", "v1", "nodes", name, "status"]) => {
                let node = inner.node_writer.as_reader().get(&ObjectRef::new(name));
                match node {
                    Some(n) => Reply::json(200, serde_json::to_value(n.as_ref()).unwrap_or_default()),
                    None => not_found(),
                }
            }
            // Events and anything else: taken as written.
            (_, _) => {
                let mut body = seen.body.clone();
                if body.get("metadata").is_none() {
                    body["metadata"] = json!({"name": "x"});
                }
                Reply::json(201, body)
            }
        }
    }

    fn patch_pod(&self, inner: &mut Inner, ns: &str, name: &str, seen: &Seen) -> Reply {
        let Some(mut pod) = inner.pods.get(&(ns.to_string(), name.to_string())).cloned() else { return not_found() };
        let uid = seen.body["metadata"]["uid"].as_str();
        if uid.is_some_and(|u| pod["metadata"]["uid"] != u) {
            return Reply::json(
                422,
                json!({"kind": "Status", "apiVersion": "v1", "code": 422, "message": "Precondition failed: UID in precondition: metadata.uid"}),
            );
        }
        merge(&mut pod["status"], &seen.body["status"]);
        self.store_pod(inner, pod.clone());
        Reply::json(200, pod)
    }

    fn put_lease(&self, inner: &mut Inner, name: String, mut lease: Value, code: u16) -> Reply {
        inner.version += 1;
        lease["metadata"]["resourceVersion"] = inner.version.to_string().into();
        inner.leases.insert(name, lease.clone());
        Reply::json(code, lease)
    }
}

fn not_found() -> Reply {
    Reply::json(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "message": "not found"}),
    )
}

/// Merges `patch` into `target` as a strategic merge does for the kubelet's writes: objects
/// key by key, `null` removes, the lists of conditions by `type` and of container statuses by
/// `name`; a container's `state` and `lastState` and other lists are replaced (as the API
/// server does: a patch from waiting to running leaves no waiting behind).
pub fn merge(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in fields {
        if key.starts_with('$') {
            continue;
        }
        let keyed = match key.as_str() {
            "conditions" => Some("type"),
            "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => Some("name"),
            _ => None,
        };
        match (value, keyed) {
            (Value::Null, _) => {
                target.as_object_mut().map(|o| o.remove(key));
            }
            (Value::Array(items), Some(by)) => {
                let list = target[key.as_str()].as_array().cloned().unwrap_or_default();
                let mut merged = list;
                for item in items.iter().filter(|i| i.get("$patch").is_none()) {
                    match merged.iter_mut().find(|m| m[by] == item[by]) {
                        Some(m) => merge(m, item),
                        None => merged.push(item.clone()),
                    }
                }
                target[key.as_str()] = Value::Array(merged);
            }
            (Value::Array(items), None) => {
                target[key.as_str()] =
                    Value::Array(items.iter().filter(|i| i.get("$patch").is_none()).cloned().collect());
            }
            (Value::Object(_), _) if key == "state" || key == "lastState" => target[key.as_str()] = value.clone(),
            (Value::Object(_), _) => merge(&mut target[key.as_str()], value),
            (other, _) => target[key.as_str()] = other.clone(),
        }
    }
}

/// Lets every task that can run, run (the workers' writes are tasks of their own).
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// Advances tokio's paused clock by `by`, one second at a time, letting the world settle
/// after each step (timers fire and their writes land in order).
pub async fn pass(by: Duration) {
    let step = Duration::from_millis(250);
    let mut left = by;
    while !left.is_zero() {
        let d = left.min(step);
        tokio::time::advance(d).await;
        settle().await;
        left -= d;
    }
}
