//! The kubelet API of every simulated node, served by the replica that simulates it: what the
//! API server proxies (`kubectl logs`, `exec`, `attach`, `port-forward`, `get --raw
//! /api/v1/nodes/<n>/proxy/...`) and what metrics-server scrapes (`/metrics/resource`), over
//! TLS, authenticated and authorised as a kubelet in webhook mode does it.
//!
//! The pieces: where nodes advertise it (`kubelet::status::endpoint`), TLS and who connected
//! ([`tls`]), authentication and authorisation ([`auth`]), the paths ([`path`]), the handler
//! ([`routes`]), and beside it each answer with its renderer: logs ([`logs`]), usage readings,
//! `/metrics/resource` and `/stats/summary` ([`stats`]), GPUs ([`gpus`]), what an exec or attach
//! does ([`exec`]) over the streaming transports ([`spdy`], [`websocket`]).

pub mod auth;
pub mod client_ca;
pub mod exec;
pub mod gpus;
pub mod index;
pub mod logs;
pub mod path;
pub mod pod_list;
pub mod routes;
pub mod spdy;
pub mod state;
pub mod stats;
pub mod tls;
pub mod websocket;

use crate::api::duration::parse_flag_duration as parse_duration;
use crate::certs::Authority;
use crate::informer::shared;
use crate::kubelet::status::endpoint::{Advertise, Endpoints};
use crate::setup::SetupError;
use crate::simulator::{SimContext, Simulation};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The flags of the simulated kubelets' API.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerFlags {
    /// The port simulated nodes serve their kubelet API on (they advertise it in
    /// daemonEndpoints); 0 turns the API off (nodes then advertise 10250 and nothing answers).
    #[arg(long, default_value_t = 10250, env = "KWOK_POOLS_KUBELET_PORT")]
    pub kubelet_port: u16,
    /// The address nodes advertise for it (their Hostname address): `loopback` gives each node
    /// an address of its own in 127.128.0.0/9 (an operator on the control plane's machine), an
    /// IP is shared by every node of this replica (in a cluster: the pod IP). Default: $POD_IP
    /// if set, else `loopback`.
    #[arg(long, env = "KWOK_POOLS_KUBELET_ADDRESS")]
    pub kubelet_address: Option<String>,
    /// The CA that issues the kubelets' serving certificates (PEM certificate; with
    /// --kubelet-serving-ca-key). A local cluster passes its cluster CA, so metrics-server
    /// verifies kubelets as it verifies the API server (`kwok-pools run` against a local
    /// cluster takes it without this flag). Default: a CA made at start.
    #[arg(long, requires = "kubelet_serving_ca_key", env = "KWOK_POOLS_KUBELET_SERVING_CA_CERT")]
    pub kubelet_serving_ca_cert: Option<PathBuf>,
    #[arg(long, requires = "kubelet_serving_ca_cert", env = "KWOK_POOLS_KUBELET_SERVING_CA_KEY")]
    pub kubelet_serving_ca_key: Option<PathBuf>,
    /// The CA of the client certificates the kubelet API accepts (the API server's
    /// --kubelet-client-certificate is signed by it). Default: the API server's client CA, from
    /// the ConfigMap kube-system/extension-apiserver-authentication.
    #[arg(long)]
    pub kubelet_client_ca: Option<PathBuf>,
    /// How long a kubelet serving certificate is valid; each is re-issued after two thirds.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub kubelet_cert_lifetime: Duration,
    /// Connections the kubelet API keeps open at once (every node's together); more are closed
    /// after their handshake. Default: 1,024 plus 4 per node served (metrics-server, Prometheus
    /// and the API server each keep one per node), within the process's open-file limit. Each
    /// connection must send its request headers within 30s, and a kept-alive one idle longer
    /// than that is closed.
    #[arg(long)]
    pub kubelet_max_connections: Option<usize>,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            kubelet_port: 10250,
            kubelet_address: None,
            kubelet_serving_ca_cert: None,
            kubelet_serving_ca_key: None,
            kubelet_client_ca: None,
            kubelet_cert_lifetime: Duration::from_secs(24 * 3600),
            kubelet_max_connections: None,
        }
    }
}

/// The kubelet API's default connection bound for `nodes` served: 1,024 and 4 a node, leaving
/// 512 of the process's `open_files` for everything else (never below 64).
pub fn connection_bound(nodes: usize, open_files: Option<u64>) -> usize {
    let wanted = 1024 + 4 * nodes;
    let room = open_files.map_or(usize::MAX, |f| usize::try_from(f.saturating_sub(512)).unwrap_or(usize::MAX));
    wanted.min(room).max(64)
}

#[cfg(test)]
mod bound_tests {
    #[test]
    fn the_connection_bound_grows_with_the_nodes_within_the_open_file_limit() {
        assert_eq!(super::connection_bound(0, None), 1024);
        assert_eq!(super::connection_bound(5000, Some(1 << 20)), 21_024, "4 a node: metrics-server, Prometheus…");
        assert_eq!(super::connection_bound(5000, Some(20_000)), 19_488, "512 files left for the rest");
        assert_eq!(super::connection_bound(5000, Some(256)), 64);
    }
}

/// The kubelet API of this process: shared by the pool controller (nodes are born with their
/// endpoint), the node simulator (keeps it on the node) and the server.
#[derive(Clone)]
pub struct ServerEnv {
    pub endpoints: Arc<Mutex<Endpoints>>,
    max_connections: Option<usize>,
    listener: Arc<Mutex<Option<std::net::TcpListener>>>,
    serving: Arc<tls::Serving>,
    /// The client CA read at start, and its file (re-read every minute).
    client_ca: Option<String>,
    client_ca_file: Option<PathBuf>,
}

fn read(path: &PathBuf, flag: &'static str) -> Result<String, SetupError> {
    std::fs::read_to_string(path).map_err(|source| SetupError::Read { flag, path: path.clone(), source })
}

impl ServerEnv {
    /// Binds the port and reads the CAs (`None`: the API is off).
    pub fn new(flags: &ServerFlags) -> Result<Option<Self>, SetupError> {
        if flags.kubelet_port == 0 {
            return Ok(None);
        }
        let advertise =
            match flags.kubelet_address.clone().or_else(|| std::env::var("POD_IP").ok().filter(|s| !s.is_empty())) {
                None => Advertise::Loopback,
                Some(a) if a == "loopback" => Advertise::Loopback,
                Some(a) => Advertise::Shared(a.parse::<IpAddr>().map_err(|_| SetupError::Flag {
                    flag: "--kubelet-address",
                    problem: format!("{a:?} is neither `loopback` nor an IP address"),
                })?),
            };
        let bind = SocketAddr::from(([0, 0, 0, 0], flags.kubelet_port));
        let listen = |source| SetupError::Listen {
            what: "the simulated kubelets' API",
            port: flags.kubelet_port,
            source,
            advice: "a real kubelet there? pass --kubelet-port with a free port, or 0 to turn it off",
        };
        let listener = std::net::TcpListener::bind(bind).map_err(listen)?;
        listener.set_nonblocking(true).map_err(listen)?;
        let ca = match (&flags.kubelet_serving_ca_cert, &flags.kubelet_serving_ca_key) {
            (Some(c), Some(k)) => {
                Authority::from_pem(&read(c, "--kubelet-serving-ca-cert")?, &read(k, "--kubelet-serving-ca-key")?)
                    .map_err(|e| SetupError::Certificate {
                        what: "--kubelet-serving-ca-cert/--kubelet-serving-ca-key",
                        problem: e.to_string(),
                    })?
            }
            _ => Authority::new("kwok-pools-kubelet-serving-ca")
                .map_err(|e| SetupError::Certificate { what: "the kubelet serving CA", problem: e.to_string() })?,
        };
        let client_ca = flags.kubelet_client_ca.as_ref().map(|p| read(p, "--kubelet-client-ca")).transpose()?;
        let serving = Arc::new(tls::Serving::new(ca, flags.kubelet_cert_lifetime.max(Duration::from_secs(60))));
        if let Some(pem) = &client_ca {
            serving.set_client_ca(pem).map_err(|problem| SetupError::Flag { flag: "--kubelet-client-ca", problem })?;
        }
        Ok(Some(Self {
            endpoints: Arc::new(Mutex::new(Endpoints::new(advertise, flags.kubelet_port))),
            max_connections: flags.kubelet_max_connections,
            listener: Arc::new(Mutex::new(Some(listener))),
            serving,
            client_ca,
            client_ca_file: flags.kubelet_client_ca.clone(),
        }))
    }
}

/// Time for a TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to send a request's headers, and the most a kept-alive connection sits idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The simulation that serves the API.
pub fn simulation(
    env: &ServerEnv,
    sim: &SimContext,
    serves: Box<dyn Fn(&k8s_openapi::api::core::v1::Node) -> bool + Send + Sync>,
    devices: super::AllDevices,
    volumes: Arc<dyn super::Volumes>,
) -> Option<Simulation> {
    let listener = crate::sync::lock(&env.listener).take()?;
    let (nodes, pods) = (shared::nodes(&sim.informers), shared::pods(&sim.informers));
    let index = Arc::new(index::PodsByNode::default());
    let follow = index.clone().follow(pods.subscribe());
    let api = Arc::new(state::KubeletApi {
        client: sim.client.clone(),
        nodes: nodes.store(),
        pods: pods.store(),
        index,
        endpoints: env.endpoints.clone(),
        lifecycles: sim.lifecycles.clone(),
        counters: stats::Counters::default(),
        auth: auth::Authorizer::new(sim.client.clone()),
        devices,
        volumes,
        pod_lists: pod_list::PodLists::default(),
        serves,
    });
    let endpoints = env.endpoints.clone();
    let names: tls::Names =
        Arc::new(move |ip| crate::sync::lock(&endpoints).node_at(ip).map(|n| vec![n.to_string()]).unwrap_or_default());
    let handshake = tls::Acceptor { serving: env.serving.clone(), names, handshake_timeout: HANDSHAKE_TIMEOUT };
    let (fixed, served) = (env.max_connections, env.endpoints.clone());
    let bound: crate::netlimit::Bound = Arc::new(move || {
        fixed.unwrap_or_else(|| connection_bound(crate::sync::lock(&served).count(), crate::fdlimit::open_file_limit()))
    });
    let acceptor = crate::netlimit::ConnectionLimit::following("kubelet API", bound, handshake);
    let ca_source = match &env.client_ca_file {
        Some(path) => client_ca::Source::File(path.clone()),
        None => client_ca::Source::ConfigMap(sim.client.clone()),
    };
    let (serving, read_at_start) = (env.serving.clone(), env.client_ca.clone());
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let run = async move {
        tokio::spawn(client_ca::keep(ca_source, serving, read_at_start));
        tracing::info!(port, "serving the simulated kubelets' API");
        let server = async move {
            let server = match axum_server::from_tcp(listener) {
                Ok(s) => s,
                Err(e) => return tracing::error!(error = %e, "the kubelet API cannot use its port"),
            };
            let mut server = server.acceptor(acceptor);
            let timer = || hyper_util::rt::TokioTimer::new();
            server.http_builder().http1().timer(timer()).header_read_timeout(HEADER_TIMEOUT);
            server.http_builder().http2().timer(timer()).keep_alive_interval(HEADER_TIMEOUT);
            let server = server.first_request_timeout(HEADER_TIMEOUT).accept_error_handler(|remote, e| {
                tracing::debug!(?remote, error = %e, "kubelet API connection refused");
            });
            let served = server.serve(routes::router(api).into_make_service()).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the kubelet API stopped");
            }
        };
        tokio::join!(server, follow);
    };
    Some(Simulation { name: "kubelet API".into(), ready: Vec::new(), run: Box::pin(run) })
}
