//! The four control-plane components (and the optional metrics-server) and how each is
//! started: binary name, command line, health endpoint. Pure: builds command lines from a
//! [`Layout`] and [`Ports`].

use super::layout::{Layout, Ports};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    Etcd,
    KubeApiserver,
    KubeControllerManager,
    KubeScheduler,
    /// The real metrics-server (`cluster create --metrics-server`), registered as the
    /// metrics.k8s.io APIService.
    MetricsServer,
}

/// Start order; `cluster delete` stops them in reverse.
pub const ALL: [Component; 4] =
    [Component::Etcd, Component::KubeApiserver, Component::KubeControllerManager, Component::KubeScheduler];
/// Components a cluster runs when asked for, after [`ALL`].
pub const OPTIONAL: [Component; 1] = [Component::MetricsServer];

/// The components of a cluster, in start order.
pub fn of_cluster(metrics_server: bool) -> Vec<Component> {
    let mut all = ALL.to_vec();
    if metrics_server {
        all.extend(OPTIONAL);
    }
    all
}

/// The pod network the controller manager's node IPAM splits into per-node podCIDRs
/// (a /24 each: room for 32768 nodes) and the service network. They do not overlap.
pub const CLUSTER_CIDR: &str = "10.128.0.0/9";
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
pub const SERVICE_IP: &str = "10.96.0.1";

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::KubeApiserver => "kube-apiserver",
            Component::KubeControllerManager => "kube-controller-manager",
            Component::KubeScheduler => "kube-scheduler",
            Component::MetricsServer => "metrics-server",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        ALL.into_iter().chain(OPTIONAL).find(|c| c.name() == name)
    }

    /// The binary has the component's name.
    pub fn binary(self) -> &'static str {
        self.name()
    }

    /// The URL that says the component is ready.
    pub fn health_url(self, ports: &Ports) -> String {
        match self {
            Component::Etcd => format!("https://127.0.0.1:{}/readyz", ports.etcd_client),
            Component::KubeApiserver => format!("https://127.0.0.1:{}/readyz", ports.apiserver),
            Component::KubeControllerManager => {
                format!("https://127.0.0.1:{}/healthz", ports.controller_manager)
            }
            Component::KubeScheduler => format!("https://127.0.0.1:{}/healthz", ports.scheduler),
            // Live (ready waits for a first scrape of every node).
            Component::MetricsServer => format!("https://127.0.0.1:{}/livez", ports.metrics_server),
        }
    }

    /// The command-line arguments for this component.
    pub fn args(self, layout: &Layout, ports: &Ports) -> Vec<String> {
        let p = |path: std::path::PathBuf| path.display().to_string();
        match self {
            Component::Etcd => {
                // Clients over TLS with a certificate of the etcd CA (the API server's only).
                let client = format!("https://127.0.0.1:{}", ports.etcd_client);
                let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
                vec![
                    "--name=default".into(),
                    format!("--data-dir={}", p(layout.etcd_data())),
                    format!("--listen-client-urls={client}"),
                    format!("--advertise-client-urls={client}"),
                    format!("--listen-peer-urls={peer}"),
                    format!("--initial-advertise-peer-urls={peer}"),
                    format!("--initial-cluster=default={peer}"),
                    format!("--cert-file={}", p(layout.cert("etcd-server"))),
                    format!("--key-file={}", p(layout.key("etcd-server"))),
                    "--client-cert-auth=true".into(),
                    format!("--trusted-ca-file={}", p(layout.cert("etcd-ca"))),
                    // A throw-away test cluster: durability is not worth the fsync cost.
                    "--unsafe-no-fsync=true".into(),
                    "--quota-backend-bytes=8589934592".into(),
                    "--log-level=warn".into(),
                ]
            }
            Component::KubeApiserver => apiserver_args(layout, ports),
            Component::KubeControllerManager => vec![
                format!("--kubeconfig={}", p(layout.component_kubeconfig("kube-controller-manager"))),
                format!("--authentication-kubeconfig={}", p(layout.component_kubeconfig("kube-controller-manager"))),
                format!("--authorization-kubeconfig={}", p(layout.component_kubeconfig("kube-controller-manager"))),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.controller_manager),
                "--leader-elect=false".into(),
                format!("--service-account-private-key-file={}", p(layout.sa_private())),
                format!("--root-ca-file={}", p(layout.ca_cert())),
                "--use-service-account-credentials=true".into(),
                "--allocate-node-cidrs=true".into(),
                format!("--cluster-cidr={CLUSTER_CIDR}"),
                "--node-cidr-mask-size=24".into(),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                // No kubelet reads the TTL annotation this controller keeps on every node, and
                // it rewrites all nodes each time the cluster crosses a size boundary.
                "--controllers=*,-ttl".into(),
                "--kube-api-qps=1000".into(),
                "--kube-api-burst=2000".into(),
                "--profiling=false".into(),
            ],
            Component::KubeScheduler => vec![
                format!("--config={}", p(layout.scheduler_config())),
                format!("--authentication-kubeconfig={}", p(layout.component_kubeconfig("kube-scheduler"))),
                format!("--authorization-kubeconfig={}", p(layout.component_kubeconfig("kube-scheduler"))),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.scheduler),
                "--profiling=false".into(),
            ],
            // As any kubelet needs it: the kubelets' CA (the cluster CA issues the simulated
            // kubelets' serving certificates), a client certificate, the node status port; its
            // default address preference (Hostname first).
            Component::MetricsServer => vec![
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.metrics_server),
                format!("--tls-cert-file={}", p(layout.cert("metrics-server"))),
                format!("--tls-private-key-file={}", p(layout.key("metrics-server"))),
                format!("--kubeconfig={}", p(layout.kubeconfig())),
                format!("--authentication-kubeconfig={}", p(layout.kubeconfig())),
                format!("--authorization-kubeconfig={}", p(layout.kubeconfig())),
                format!("--kubelet-certificate-authority={}", p(layout.ca_cert())),
                format!("--kubelet-client-certificate={}", p(layout.admin_cert())),
                format!("--kubelet-client-key={}", p(layout.admin_key())),
                "--kubelet-use-node-status-port".into(),
                "--metric-resolution=15s".into(),
                "--profiling=false".into(),
            ],
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The scheduler's configuration file: the client limits of a default scheduler (50 QPS)
/// would make it, not the API server, the bottleneck of a simulated cluster.
pub fn scheduler_config(layout: &Layout) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         clientConnection:\n  kubeconfig: {}\n  qps: 1000\n  burst: 2000\n\
         leaderElection:\n  leaderElect: false\n",
        layout.component_kubeconfig("kube-scheduler").display()
    )
}

/// The API server's arguments.
fn apiserver_args(layout: &Layout, ports: &Ports) -> Vec<String> {
    let p = |path: std::path::PathBuf| path.display().to_string();
    vec![
        format!("--etcd-servers=https://127.0.0.1:{}", ports.etcd_client),
        format!("--etcd-cafile={}", p(layout.cert("etcd-ca"))),
        format!("--etcd-certfile={}", p(layout.cert("apiserver-etcd-client"))),
        format!("--etcd-keyfile={}", p(layout.key("apiserver-etcd-client"))),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.apiserver),
        "--endpoint-reconciler-type=none".into(),
        format!("--tls-cert-file={}", p(layout.cert("apiserver"))),
        format!("--tls-private-key-file={}", p(layout.key("apiserver"))),
        format!("--client-ca-file={}", p(layout.ca_cert())),
        "--authorization-mode=Node,RBAC".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(layout.sa_public())),
        format!("--service-account-signing-key-file={}", p(layout.sa_private())),
        "--allow-privileged=true".into(),
        // Its identity towards kubelets (logs, exec, port-forward, node proxy): the
        // simulated kubelets accept the cluster CA's client certificates.
        format!("--kubelet-client-certificate={}", p(layout.cert("apiserver-kubelet-client"))),
        format!("--kubelet-client-key={}", p(layout.key("apiserver-kubelet-client"))),
        // API aggregation (metrics.k8s.io): the front proxy's client certificate and the
        // headers that carry the caller to the aggregated server.
        format!("--proxy-client-cert-file={}", p(layout.cert("front-proxy-client"))),
        format!("--proxy-client-key-file={}", p(layout.key("front-proxy-client"))),
        format!("--requestheader-client-ca-file={}", p(layout.cert("front-proxy-ca"))),
        "--requestheader-allowed-names=front-proxy-client".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        // Its client certificate towards webhooks (the operator's --webhook-client-ca).
        format!("--admission-control-config-file={}", p(layout.admission_config())),
        "--profiling=false".into(),
        // Room for simulators that write thousands of objects per second.
        "--max-requests-inflight=2000".into(),
        "--max-mutating-requests-inflight=1000".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_refers_to_its_state_dir() {
        // `cluster delete` recognises its processes by the state directory in their command line.
        let layout = Layout::new("/tmp/x/clusters/demo".into());
        let ports = Ports {
            etcd_client: 1,
            etcd_peer: 2,
            apiserver: 3,
            controller_manager: 4,
            scheduler: 5,
            metrics_server: 6,
        };
        for c in ALL.into_iter().chain(OPTIONAL) {
            assert!(c.args(&layout, &ports).iter().any(|a| a.contains("/tmp/x/clusters/demo")), "{c}");
        }
    }

    #[test]
    fn apiserver_binds_loopback_without_endpoint_reconciler() {
        let layout = Layout::new("/s".into());
        let ports = Ports {
            etcd_client: 1,
            etcd_peer: 2,
            apiserver: 6443,
            controller_manager: 4,
            scheduler: 5,
            metrics_server: 6,
        };
        let args = Component::KubeApiserver.args(&layout, &ports);
        for want in ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none", "--secure-port=6443"] {
            assert!(args.iter().any(|a| a == want), "{want}");
        }
    }

    #[test]
    fn parses_names() {
        assert_eq!(Component::parse("kube-scheduler"), Some(Component::KubeScheduler));
        assert_eq!(Component::parse("kubelet"), None);
    }
}
