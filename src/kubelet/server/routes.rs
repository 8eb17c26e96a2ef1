//! The kubelet API's one handler: the path parsed, the caller authenticated and authorised on
//! the node the request is for, then the answer — health, the node's pods, resource metrics,
//! the stats summary, container logs, exec, attach, run, port-forward.

use super::auth::{self, Caller};
use super::exec::answer;
use super::path::{self, Route, Target};
use super::state::{KubeletApi, text};
use super::stats::{self as readings, resource_metrics, summary};
use super::tls::Conn;
use super::{logs, spdy, websocket};
use crate::informer::pod::SlimPod;
use crate::kubelet::status::endpoint::Advertise;
use crate::simulator::lifecycle::epoch_now;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

pub fn router(api: Arc<KubeletApi>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(api)
}

pub(super) fn query(req: &Request) -> Vec<(String, String)> {
    form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect()
}

/// What a request is for, found before it is authorised.
struct Located {
    node: Option<Arc<Node>>,
    pod: Option<Arc<SlimPod>>,
}

impl KubeletApi {
    #[allow(clippy::result_large_err)] // the error is the answer to send (axum's own handlers do this)
    fn node(&self, name: &str) -> Result<Arc<Node>, Response> {
        match self.nodes.get(&ObjectRef::new(name)) {
            Some(n) if (self.serves)(&n) => Ok(n),
            Some(_) => {
                Err(text(StatusCode::NOT_FOUND, format!("node {name:?} is not simulated by this kwok-pools replica")))
            }
            None => Err(text(StatusCode::NOT_FOUND, format!("node {name:?} not found"))),
        }
    }

    /// The node the connection's address is for (a node's own loopback address), if any.
    fn node_at(&self, conn: &Conn) -> Option<String> {
        crate::sync::lock(&self.endpoints).node_at(conn.local).map(str::to_string)
    }

    #[allow(clippy::result_large_err)] // the error is the answer to send
    fn locate(&self, conn: &Conn, parsed: &path::Parsed) -> Result<Located, Response> {
        if let Some((ns, name)) = parsed.route.pod() {
            let pod = self.pods.get(&ObjectRef::new(name).within(ns)).ok_or_else(|| {
                text(StatusCode::NOT_FOUND, format!("pod {ns}/{name} does not exist on a simulated node"))
            })?;
            let node_name = pod.node_name.clone().unwrap_or_default();
            if let Some(at) = self.node_at(conn)
                && at != node_name
            {
                return Err(text(StatusCode::NOT_FOUND, format!("pod {ns}/{name} is not on node {at}")));
            }
            let uid = match &parsed.route {
                Route::Exec(t) | Route::Attach(t) | Route::Run(t) => t.uid.as_deref(),
                Route::PortForward { uid, .. } => uid.as_deref(),
                _ => None,
            };
            if uid.is_some_and(|u| u != pod.uid()) {
                return Err(text(StatusCode::NOT_FOUND, format!("pod {ns}/{name} with that UID does not exist")));
            }
            return Ok(Located { node: Some(self.node(&node_name)?), pod: Some(pod) });
        }
        let name = parsed.node.clone().or_else(|| self.node_at(conn));
        let advertise = crate::sync::lock(&self.endpoints).advertise();
        match (name, &parsed.route) {
            (Some(n), _) => Ok(Located { node: Some(self.node(&n)?), pod: None }),
            (None, Route::Healthz) => Ok(Located { node: None, pod: None }),
            (None, _) => Err(text(
                StatusCode::NOT_FOUND,
                match advertise {
                    Advertise::Shared(ip) => format!(
                        "{ip} serves the kubelet API of every node this replica simulates: name the node in the path \
                         (/nodes/<node>{p}, or /metrics/nodes/<node>/metrics/resource, which the nodes' \
                         metrics.k8s.io/resource-metrics-path annotation tells metrics-server)",
                        p = match parsed.route {
                            Route::Summary => "/stats/summary",
                            Route::Pods => "/pods",
                            _ => "/metrics/resource",
                        }
                    ),
                    Advertise::Loopback => format!("{} is no simulated node's address", conn.local),
                },
            )),
        }
    }

    async fn caller(&self, conn: &Conn, headers: &axum::http::HeaderMap) -> Result<Caller, Response> {
        if let Some(c) = &conn.certificate {
            return Ok(c.clone());
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let unauthorized = || text(StatusCode::UNAUTHORIZED, "Unauthorized");
        let Some(token) = bearer else { return Err(unauthorized()) };
        let source = conn.peer.unwrap_or(conn.local);
        match self.auth.token(token, source).await {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(unauthorized()),
            Err(e @ auth::ReviewError::Busy) => {
                let mut r = text(StatusCode::TOO_MANY_REQUESTS, e.to_string());
                r.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                Err(r)
            }
            Err(e) => {
                tracing::warn!(error = %e, "kubelet API: cannot review a token");
                Err(text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
            }
        }
    }
}

async fn handle(State(api): State<Arc<KubeletApi>>, req: Request) -> Response {
    let Some(conn) = req.extensions().get::<Arc<Conn>>().cloned() else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "no connection information");
    };
    let path = req.uri().path().to_string();
    let Some(parsed) = path::parse(&path) else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{path}: not a path of the simulated kubelet (it serves /healthz, /pods, /metrics/resource, /metrics/dcgm, /stats/summary, /containerLogs, /exec, /attach, /run, /portForward)"
            ),
        );
    };
    let headers = req.headers().clone();
    let caller = match api.caller(&conn, &headers).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (verb, subresources) = auth::attributes(req.method().as_str(), &path);
    let located = api.locate(&conn, &parsed);
    // The node the caller is judged on: the one found, else the one asked for (in the path, or
    // by the address called), else every node. A caller not allowed there learns nothing of
    // what exists (403 whether or not the pod does); only one who is gets the 404.
    let node_name = match &located {
        Ok(l) => l.node.as_ref().and_then(|n| n.metadata.name.clone()).unwrap_or_default(),
        Err(_) => parsed.node.clone().or_else(|| api.node_at(&conn)).unwrap_or_default(),
    };
    match api.auth.allowed(&caller, verb, subresources, &node_name).await {
        Ok(true) => {}
        Ok(false) => {
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])",
                    caller.user,
                    subresources.join(" ")
                ),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "kubelet API: cannot authorise a request");
            return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
    }
    match located {
        Ok(located) => answer(&api, parsed.route, located, req).await,
        Err(not_found) => not_found,
    }
}

async fn answer(api: &Arc<KubeletApi>, route: Route, at: Located, req: Request) -> Response {
    let now = epoch_now().as_secs_f64();
    match (route, at.node, at.pod) {
        (Route::Healthz, _, _) => text(StatusCode::OK, "ok"),
        (Route::Pods, Some(node), _) => pods(api, &node).await,
        (Route::ResourceMetrics, Some(node), _) => {
            let on = api.index.on(node.metadata.name.as_deref().unwrap_or_default());
            let reading = readings::reading(&node, &on, &api.lifecycles, &api.counters, now);
            let mut r = text(StatusCode::OK, resource_metrics::render(&reading, (now * 1000.0) as i64));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            r
        }
        (route @ (Route::Cadvisor | Route::KubeletMetrics | Route::ProbeMetrics), Some(node), _) => {
            let on = api.index.on(node.metadata.name.as_deref().unwrap_or_default());
            let reading = readings::reading(&node, &on, &api.lifecycles, &api.counters, now);
            let body = match route {
                Route::Cadvisor => super::stats::cadvisor::render(&reading, (now * 1000.0) as i64),
                Route::ProbeMetrics => super::stats::probes::render(&reading, now),
                _ => {
                    let volumes = super::stats::volumes::render(&mounted(api, &on));
                    super::stats::kubelet_metrics::render(&reading) + &volumes
                }
            };
            let mut r = text(StatusCode::OK, body);
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            r
        }
        (Route::Dcgm, Some(node), _) => {
            let mut r = text(StatusCode::OK, super::gpus::render(api, &node, now));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            r
        }
        (Route::Summary, Some(node), _) => {
            let on = api.index.on(node.metadata.name.as_deref().unwrap_or_default());
            let reading = readings::reading(&node, &on, &api.lifecycles, &api.counters, now);
            let mut s = summary::summary(&reading, now);
            let at = s["node"]["cpu"]["time"].as_str().unwrap_or_default().to_string();
            super::stats::volumes::fill_summary(&mut s, &at, &mounted(api, &on));
            axum::Json(s).into_response()
        }
        (Route::ContainerLogs { container, .. }, Some(node), Some(pod)) => {
            logs::container_logs(api.clone(), node, pod, container, query(&req)).await
        }
        (Route::Run(t), Some(node), Some(pod)) => run(api, &node, &pod, &t, req).await,
        (Route::Exec(t), Some(node), Some(pod)) => streaming(api, &node, &pod, &t, false, req).await,
        (Route::Attach(t), Some(node), Some(pod)) => streaming(api, &node, &pod, &t, true, req).await,
        (Route::PortForward { namespace, pod: name, .. }, Some(_), Some(_)) => port_forward(namespace, name, req).await,
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The pods bound to the node, as the kubelet lists them (see [`super::pod_list`]).
async fn pods(api: &KubeletApi, node: &Node) -> Response {
    api.pod_lists.answer(&api.client, node.metadata.name.as_deref().unwrap_or_default()).await
}

fn container_known(pod: &SlimPod, container: &str) -> bool {
    pod.containers.iter().chain(&pod.init_containers).any(|c| c.name == container)
}

fn not_a_container(pod: &SlimPod, container: &str) -> Response {
    text(StatusCode::BAD_REQUEST, format!("container {container} is not valid for pod {}", pod.name()))
}

/// The exec knob that governs the pod.
fn exec_settings(api: &KubeletApi, node: &Node, pod: &SlimPod) -> Option<crate::api::kubelet::Exec> {
    let pool = api.lifecycles.pod_knobs(pod, node)?;
    pool.pods()?.exec.clone()
}

/// What the container's shell sees (read from the API server: the store keeps no env), when
/// its exec knob is the shell.
async fn environment(
    api: &KubeletApi,
    settings: Option<&crate::api::kubelet::Exec>,
    pod: &SlimPod,
    container: &str,
) -> super::exec::shell::Container {
    if settings.is_some_and(|s| s.mode != crate::api::kubelet::ExecMode::Shell) {
        return Default::default();
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    match kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(api.client.clone(), ns).get_opt(pod.name()).await {
        Ok(Some(full)) => super::exec::environment::container(&full, container),
        _ => Default::default(),
    }
}

async fn run(api: &KubeletApi, node: &Node, pod: &SlimPod, t: &Target, req: Request) -> Response {
    if !container_known(pod, &t.container) {
        return not_a_container(pod, &t.container);
    }
    let command = answer::command(&query(&req));
    let settings = exec_settings(api, node, pod);
    let env = environment(api, settings.as_ref(), pod, &t.container).await;
    let a = answer::answer(settings.as_ref(), &command, pod.name(), &t.container, &env);
    text(StatusCode::OK, format!("{}{}", a.stdout, a.stderr))
}

async fn streaming(
    api: &Arc<KubeletApi>,
    node: &Node,
    pod: &SlimPod,
    t: &Target,
    attach: bool,
    req: Request,
) -> Response {
    if !container_known(pod, &t.container) {
        return not_a_container(pod, &t.container);
    }
    let q = query(&req);
    let asked = spdy::Asked::from_query(&q);
    let settings = exec_settings(api, node, pod);
    let env = if attach { Default::default() } else { environment(api, settings.as_ref(), pod, &t.container).await };
    let (pod_name, container) = (pod.name().to_string(), t.container.clone());
    let script = if attach { Some(logs::script(api, node, pod, &container).await) } else { None };
    let started = logs::started(pod);
    let command = answer::command(&q);
    let run = move |mut streams: super::exec::Streams| async move {
        match script {
            Some(script) => {
                super::exec::attach(&pod_name, &container, &script, started, &mut streams).await;
                0
            }
            None => {
                let a = answer::answer(settings.as_ref(), &command, &pod_name, &container, &env);
                super::exec::exec(&a, asked.stdin, &mut streams).await
            }
        }
    };
    upgrade(req, spdy::EXEC_PROTOCOLS.as_slice(), websocket::EXEC_PROTOCOLS.as_slice(), move |io| match io {
        Upgraded::Spdy(io, protocol) => Box::pin(spdy::exec(io, protocol, asked, run)),
        Upgraded::WebSocket(socket) => Box::pin(websocket::exec(*socket, asked, run)),
    })
    .await
}

async fn port_forward(namespace: String, pod: String, req: Request) -> Response {
    let ports: Vec<u16> = query(&req).iter().filter(|(k, _)| k == "port").filter_map(|(_, v)| v.parse().ok()).collect();
    // Two WebSocket channels per port, each named by one byte.
    if ports.len() > websocket::MAX_PORTS {
        let why = format!("{} ports asked for: forward at most {} at once", ports.len(), websocket::MAX_PORTS);
        return text(StatusCode::BAD_REQUEST, why);
    }
    upgrade(req, spdy::PORT_FORWARD_PROTOCOLS.as_slice(), websocket::PORT_FORWARD_PROTOCOLS.as_slice(), move |io| {
        match io {
            Upgraded::Spdy(io, _) => Box::pin(spdy::port_forward(io, namespace, pod)),
            Upgraded::WebSocket(socket) => Box::pin(websocket::port_forward(*socket, ports, namespace, pod)),
        }
    })
    .await
}

/// An upgraded connection.
pub enum Upgraded {
    Spdy(hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>, &'static str),
    WebSocket(Box<axum::extract::ws::WebSocket>),
}

type Session = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Switches the connection to SPDY or WebSocket (whichever the client asks for) and runs
/// `then` on it.
async fn upgrade(
    mut req: Request,
    spdy: &'static [&'static str],
    ws: &'static [&'static str],
    then: impl FnOnce(Upgraded) -> Session + Send + 'static,
) -> Response {
    if spdy::wants_spdy(req.headers()) {
        let Some(protocol) = spdy::negotiate(req.headers(), spdy) else {
            return text(
                StatusCode::FORBIDDEN,
                format!("no protocol both sides speak: this kubelet speaks {}", spdy.join(", ")),
            );
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(up) => then(Upgraded::Spdy(hyper_util::rt::TokioIo::new(up), protocol)).await,
                Err(e) => tracing::debug!(error = %e, "kubelet API: SPDY upgrade failed"),
            }
        });
        return spdy::switching(protocol);
    }
    let (mut parts, _) = req.into_parts();
    match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => {
            upgrade.protocols(ws.iter().copied()).on_upgrade(move |socket| then(Upgraded::WebSocket(Box::new(socket))))
        }
        Err(_) => {
            text(StatusCode::BAD_REQUEST, "Upgrade request required: connect with SPDY/3.1 or WebSocket (kubectl does)")
        }
    }
}

/// The mounted claims of the pods on a node, as the storage simulation reports them.
fn mounted(
    api: &KubeletApi,
    on: &[std::sync::Arc<crate::informer::pod::SlimPod>],
) -> Vec<super::stats::volumes::PodVolumes> {
    on.iter()
        .filter(|p| p.volumes().is_some_and(|v| !v.claims.is_empty()))
        .map(|p| super::stats::volumes::PodVolumes {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            pod: p.name().to_string(),
            stats: api.volumes.stats(p),
        })
        .filter(|v| !v.stats.is_empty())
        .collect()
}
