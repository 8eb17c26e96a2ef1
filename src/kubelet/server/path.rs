//! The kubelet API's paths, parsed: which endpoint, for which node, pod and container. Pure.

/// A request the simulated kubelet answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Healthz,
    /// The pods bound to the node (`/pods`).
    Pods,
    /// `/metrics/resource`.
    ResourceMetrics,
    /// `/metrics/cadvisor`.
    Cadvisor,
    /// `/metrics`: the kubelet's own.
    KubeletMetrics,
    /// `/metrics/probes`.
    ProbeMetrics,
    /// `/metrics/dcgm`: its GPUs in the DCGM exporter's names.
    Dcgm,
    /// `/stats/summary`.
    Summary,
    ContainerLogs {
        namespace: String,
        pod: String,
        container: String,
    },
    Exec(Target),
    Attach(Target),
    /// `/run`: a command's output in the response body.
    Run(Target),
    PortForward {
        namespace: String,
        pod: String,
        uid: Option<String>,
    },
}

/// The container a streaming request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub pod: String,
    pub uid: Option<String>,
    pub container: String,
}

/// A parsed path: the route and, for node-scoped paths that name it, the node
/// (`/nodes/<node>/…` or kwok's `/metrics/nodes/<node>/metrics/resource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub route: Route,
    pub node: Option<String>,
}

fn target(parts: &[&str]) -> Option<Target> {
    let s = |i: usize| parts[i].to_string();
    match parts.len() {
        3 => Some(Target { namespace: s(0), pod: s(1), uid: None, container: s(2) }),
        4 => Some(Target { namespace: s(0), pod: s(1), uid: Some(s(2)), container: s(3) }),
        _ => None,
    }
}

/// The route of `path`, if the kubelet has one.
pub fn parse(path: &str) -> Option<Parsed> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if parts.iter().any(|p| p.is_empty()) && parts != [""] {
        return None;
    }
    match parts.as_slice() {
        ["metrics", "nodes", node, "metrics", "resource"] => {
            Some(Parsed { route: Route::ResourceMetrics, node: Some(node.to_string()) })
        }
        ["metrics", "nodes", node, "metrics", "dcgm"] => {
            Some(Parsed { route: Route::Dcgm, node: Some(node.to_string()) })
        }
        ["metrics", "nodes", node, "metrics", "cadvisor"] => {
            Some(Parsed { route: Route::Cadvisor, node: Some(node.to_string()) })
        }
        ["metrics", "nodes", node, "metrics", "probes"] => {
            Some(Parsed { route: Route::ProbeMetrics, node: Some(node.to_string()) })
        }
        ["metrics", "nodes", node, "metrics"] => {
            Some(Parsed { route: Route::KubeletMetrics, node: Some(node.to_string()) })
        }
        ["nodes", node, rest @ ..] => {
            let inner = parse(&rest.join("/"))?;
            let node_scoped = matches!(
                inner.route,
                Route::Healthz
                    | Route::Pods
                    | Route::ResourceMetrics
                    | Route::Cadvisor
                    | Route::KubeletMetrics
                    | Route::ProbeMetrics
                    | Route::Dcgm
                    | Route::Summary
            );
            node_scoped.then(|| Parsed { route: inner.route, node: Some(node.to_string()) })
        }
        _ => parse_plain(&parts).map(|route| Parsed { route, node: None }),
    }
}

fn parse_plain(parts: &[&str]) -> Option<Route> {
    Some(match parts {
        ["healthz"] => Route::Healthz,
        ["pods"] => Route::Pods,
        ["metrics", "resource"] => Route::ResourceMetrics,
        ["metrics", "cadvisor"] => Route::Cadvisor,
        ["metrics", "probes"] => Route::ProbeMetrics,
        ["metrics"] => Route::KubeletMetrics,
        ["metrics", "dcgm"] => Route::Dcgm,
        ["stats", "summary"] => Route::Summary,
        ["containerLogs", ns, pod, container] => {
            Route::ContainerLogs { namespace: ns.to_string(), pod: pod.to_string(), container: container.to_string() }
        }
        ["exec", rest @ ..] => Route::Exec(target(rest)?),
        ["attach", rest @ ..] => Route::Attach(target(rest)?),
        ["run", rest @ ..] => Route::Run(target(rest)?),
        ["portForward", ns, pod] => Route::PortForward { namespace: ns.to_string(), pod: pod.to_string(), uid: None },
        ["portForward", ns, pod, uid] => {
            Route::PortForward { namespace: ns.to_string(), pod: pod.to_string(), uid: Some(uid.to_string()) }
        }
        _ => return None,
    })
}

impl Route {
    /// The pod a route is about.
    pub fn pod(&self) -> Option<(&str, &str)> {
        match self {
            Route::ContainerLogs { namespace, pod, .. } | Route::PortForward { namespace, pod, .. } => {
                Some((namespace, pod))
            }
            Route::Exec(t) | Route::Attach(t) | Route::Run(t) => Some((&t.namespace, &t.pod)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_paths() {
        let p = |s: &str| parse(s).map(|p| (p.route, p.node));
        assert_eq!(p("/healthz"), Some((Route::Healthz, None)));
        assert_eq!(p("/metrics/resource"), Some((Route::ResourceMetrics, None)));
        assert_eq!(p("/metrics/dcgm"), Some((Route::Dcgm, None)));
        assert_eq!(p("/nodes/n-1/metrics/dcgm"), Some((Route::Dcgm, Some("n-1".into()))));
        assert_eq!(p("/metrics/nodes/n-1/metrics/resource"), Some((Route::ResourceMetrics, Some("n-1".into()))));
        assert_eq!(p("/nodes/n-1/stats/summary"), Some((Route::Summary, Some("n-1".into()))));
        assert_eq!(p("/nodes/n-1/containerLogs/a/b/c"), None, "pod paths find the node themselves");
        assert_eq!(
            p("/containerLogs/d/web-0/app"),
            Some((Route::ContainerLogs { namespace: "d".into(), pod: "web-0".into(), container: "app".into() }, None))
        );
        let exec = Target { namespace: "d".into(), pod: "p".into(), uid: Some("u".into()), container: "c".into() };
        assert_eq!(p("/exec/d/p/u/c"), Some((Route::Exec(exec), None)));
        assert!(matches!(p("/attach/d/p/c"), Some((Route::Attach(_), None))));
        assert_eq!(
            p("/portForward/d/p"),
            Some((Route::PortForward { namespace: "d".into(), pod: "p".into(), uid: None }, None))
        );
        assert_eq!(p("/metrics/cadvisor"), Some((Route::Cadvisor, None)));
        assert_eq!(p("/metrics"), Some((Route::KubeletMetrics, None)));
        assert_eq!(p("/nodes/n-1/metrics/probes"), Some((Route::ProbeMetrics, Some("n-1".into()))));
        assert_eq!(p("/metrics/nodes/n-1/metrics/cadvisor"), Some((Route::Cadvisor, Some("n-1".into()))));
        for bad in ["/", "/exec/d/p", "/containerLogs/d//c", "/nope", "/metrics/nodes/n/metrics/other"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse("/exec/d/p/c").unwrap().route.pod(), Some(("d", "p")));
    }
}
