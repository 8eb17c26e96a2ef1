//! What a simulated container's shell sees, built from its pod as the kubelet builds a
//! container's environment: `PATH`, `HOSTNAME` and `HOME`, then the container's `env` in order
//! (literal values with `$(VAR)` references expanded, and the downward API's `fieldRef`s);
//! values from ConfigMaps and Secrets are left out (the operator reads neither). Its files: the
//! kubelet-managed `/etc/hostname` and `/etc/hosts`, and the service account's namespace. Pure.

use super::shell::Container;
use k8s_openapi::api::core::v1::{EnvVar, Pod};

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment and files of `container` in `pod`.
pub fn container(pod: &Pod, container: &str) -> Container {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let hostname = spec.and_then(|s| s.hostname.clone()).unwrap_or_else(|| name.clone());
    let mut env = vec![("PATH".to_string(), PATH.to_string()), ("HOSTNAME".to_string(), hostname.clone())];
    let all = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    let declared: Vec<EnvVar> =
        all.filter(|c| c.name == container).flat_map(|c| c.env.clone().unwrap_or_default()).collect();
    for var in &declared {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => Some(expand_references(v, &env)),
            (None, Some(from)) => from.field_ref.as_ref().and_then(|f| field(pod, &f.field_path)),
            (None, None) => Some(String::new()),
        };
        if let Some(v) = value {
            env.push((var.name.clone(), v));
        }
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".to_string(), "/root".to_string()));
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
    let mut hosts = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if let Some(ip) = ip {
        let fqdn = spec
            .and_then(|s| s.subdomain.as_ref())
            .map(|sub| format!("{hostname}.{sub}.{namespace}.svc.cluster.local\t"))
            .unwrap_or_default();
        hosts.push_str(&format!("{ip}\t{fqdn}{hostname}\n"));
    }
    let files = [
        ("/etc/hostname".to_string(), format!("{hostname}\n")),
        ("/etc/hosts".to_string(), hosts),
        ("/var/run/secrets/kubernetes.io/serviceaccount/namespace".to_string(), namespace),
    ]
    .into();
    Container { env, files }
}

/// `$(VAR)` references to variables defined before, expanded as the kubelet does (`$$` is a
/// literal `$`; an unknown reference stays as written).
fn expand_references(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(close) = after.strip_prefix('(').and_then(|a| a.find(')')) {
            let name = &after[1..=close];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &after[close + 2..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A downward-API field of the pod.
fn field(pod: &Pod, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let keyed = |prefix: &str, map: Option<&std::collections::BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        map?.get(key).cloned()
    };
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
        "status.hostIP" => status.and_then(|s| s.host_ip.clone()),
        "status.podIPs" => status.and_then(|s| s.pod_ips.as_ref()).map(|ips| join(ips.iter().map(|i| i.ip.clone()))),
        "status.hostIPs" => status.and_then(|s| s.host_ips.as_ref()).map(|ips| join(ips.iter().map(|i| i.ip.clone()))),
        _ => keyed("metadata.labels['", meta.labels.as_ref())
            .or_else(|| keyed("metadata.annotations['", meta.annotations.as_ref())),
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "node-3",
                "subdomain": "web",
                "containers": [
                    {"name": "sidecar", "env": [{"name": "ONLY", "value": "sidecar"}]},
                    {"name": "app", "env": [
                        {"name": "GREETING", "value": "hi"},
                        {"name": "MESSAGE", "value": "$(GREETING) from $(POD) $$(GREETING) $(NOPE)"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": "EMPTY"}
                    ]}
                ]
            },
            "status": {"podIP": "10.0.0.7"}
        }))
        .unwrap()
    }

    #[test]
    fn the_environment_is_the_kubelets_in_order() {
        let c = container(&pod(), "app");
        let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            env,
            [
                format!("PATH={PATH}"),
                "HOSTNAME=web-0".into(),
                "GREETING=hi".into(),
                // POD is defined after MESSAGE: its reference stays, as the kubelet leaves it.
                "MESSAGE=hi from $(POD) $(GREETING) $(NOPE)".into(),
                "POD=web-0".into(),
                "NODE=node-3".into(),
                "APP=web".into(),
                "IP=10.0.0.7".into(),
                "EMPTY=".into(),
                "HOME=/root".into(),
            ]
        );
        assert!(!c.env.iter().any(|(k, _)| k == "ONLY"), "another container's env is not this one's");
    }

    #[test]
    fn files_are_the_kubelet_managed_ones() {
        let c = container(&pod(), "app");
        assert_eq!(c.files["/etc/hostname"], "web-0\n");
        assert!(c.files["/etc/hosts"].ends_with("10.0.0.7\tweb-0.web.shop.svc.cluster.local\tweb-0\n"));
        assert_eq!(c.files["/var/run/secrets/kubernetes.io/serviceaccount/namespace"], "shop");
    }
}
