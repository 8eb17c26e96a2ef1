//! Helpers for pools and their nodes in end-to-end tests.

use super::{SCOPE_LABEL, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kwok_pools::kinds::nodepool::NodePool;
use std::time::Duration;

/// A NodePool manifest for a test scope, built up: the one place the tests write a NodePool.
/// The pool and its nodes carry the scope label (the test's operator handles the pool and
/// simulates the nodes); by default one node with 8 CPUs, 32Gi and room for 110 pods.
#[derive(Clone, Debug)]
pub struct NodePoolYaml {
    name: String,
    scope: String,
    count: u32,
    pool_labels: Vec<(String, String)>,
    node_labels: Vec<(String, String)>,
    pod_cidr: Option<(String, u8)>,
    capacity: Option<String>,
    spec: String,
}

impl NodePoolYaml {
    pub fn new(name: &str, scope: &str) -> Self {
        Self {
            name: name.into(),
            scope: scope.into(),
            count: 1,
            pool_labels: Vec::new(),
            node_labels: Vec::new(),
            pod_cidr: None,
            capacity: Some("{cpu: 8, memory: 32Gi, pods: 110}".into()),
            spec: String::new(),
        }
    }

    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// A label on the pool itself.
    pub fn pool_label(mut self, key: &str, value: &str) -> Self {
        self.pool_labels.push((key.into(), value.into()));
        self
    }

    /// A label on every node.
    pub fn node_label(mut self, key: &str, value: &str) -> Self {
        self.node_labels.push((key.into(), value.into()));
        self
    }

    /// Each node's podCIDR: a /`mask` of `cidr`.
    pub fn pod_cidr(mut self, cidr: &str, mask: u8) -> Self {
        self.pod_cidr = Some((cidr.into(), mask));
        self
    }

    /// The nodes' capacity as a YAML flow map (`None`: the template says none).
    pub fn capacity(mut self, capacity: Option<&str>) -> Self {
        self.capacity = capacity.map(String::from);
        self
    }

    /// More spec lines (each indented two spaces, ending in a newline).
    pub fn spec(mut self, lines: &str) -> Self {
        self.spec.push_str(lines);
        self
    }

    pub fn yaml(&self) -> String {
        let labels = |extra: &[(String, String)]| {
            let mut all = vec![format!("{SCOPE_LABEL}: {}", self.scope)];
            all.extend(extra.iter().map(|(k, v)| format!("{k}: {v}")));
            format!("{{{}}}", all.join(", "))
        };
        let mut out = format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: NodePool\nmetadata:\n  name: {}\n  labels: {}\nspec:\n  nodeCount: {}\n",
            self.name,
            labels(&self.pool_labels),
            self.count
        );
        if let Some((cidr, mask)) = &self.pod_cidr {
            out.push_str(&format!("  podCIDR: {{cidr: {cidr}, maskSize: {mask}}}\n"));
        }
        out.push_str(&self.spec);
        out.push_str(&format!("  nodeTemplate:\n    metadata:\n      labels: {}\n", labels(&self.node_labels)));
        if let Some(capacity) = &self.capacity {
            out.push_str(&format!("    status:\n      capacity: {capacity}\n"));
        }
        out
    }
}

/// A NodePool manifest for `scope` with `count` nodes and extra spec YAML (indented 2).
pub fn nodepool_yaml(name: &str, scope: &str, count: u32, extra_spec: &str) -> String {
    NodePoolYaml::new(name, scope).count(count).spec(extra_spec).yaml()
}

/// Adds the scope label to a sample NodePool (its metadata and its node template).
pub fn scoped_sample(sample: &str, scope: &str) -> String {
    let mut v: serde_yaml::Value = serde_yaml::from_str(sample).expect("sample parses");
    let label = serde_yaml::Value::String(SCOPE_LABEL.into());
    let value = serde_yaml::Value::String(scope.into());
    let meta = &mut v["metadata"];
    if meta.get("labels").is_none() {
        meta["labels"] = serde_yaml::Value::Mapping(Default::default());
    }
    meta["labels"].as_mapping_mut().unwrap().insert(label.clone(), value.clone());
    let tmeta = &mut v["spec"]["nodeTemplate"]["metadata"];
    if tmeta.get("labels").is_none() {
        tmeta["labels"] = serde_yaml::Value::Mapping(Default::default());
    }
    tmeta["labels"].as_mapping_mut().unwrap().insert(label, value);
    serde_yaml::to_string(&v).unwrap()
}

pub async fn pool_nodes(client: &kube::Client, pool: &str) -> Vec<Node> {
    let api: Api<Node> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("pools.kwok.x-k8s.io/pool={pool}"));
    let mut nodes = api.list(&lp).await.map(|l| l.items).unwrap_or_default();
    nodes.sort_by_key(|n| n.metadata.name.clone());
    nodes
}

pub fn is_ready(node: &Node) -> bool {
    kwok_pools::kubelet::status::node::is_ready(node)
}

pub fn ready_condition(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_else(|| "none".into())
}

/// Waits until the pool has exactly `count` nodes, all Ready, named `<pool>-0..count-1`.
pub async fn wait_ready_nodes(client: &kube::Client, pool: &str, count: usize, timeout: Duration) -> Vec<Node> {
    let what = format!("{count} Ready nodes of {pool}");
    wait_for(&what, timeout, || async {
        let nodes = pool_nodes(client, pool).await;
        let ready = nodes.iter().filter(|n| is_ready(n) && n.metadata.deletion_timestamp.is_none()).count();
        let mut names: Vec<String> = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
        names.sort();
        let mut want: Vec<String> = (0..count).map(|i| format!("{pool}-{i}")).collect();
        want.sort();
        if nodes.len() == count && ready == count && names == want {
            Ok(nodes)
        } else {
            let unexpected: Vec<&String> = names.iter().filter(|n| !want.contains(n)).take(5).collect();
            Err(format!("{} nodes, {ready} Ready; names not wanted: {unexpected:?}", nodes.len()))
        }
    })
    .await
}

pub async fn get_pool(client: &kube::Client, name: &str) -> NodePool {
    Api::<NodePool>::all(client.clone()).get(name).await.expect("the NodePool exists")
}

pub async fn lease(client: &kube::Client, node: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), "kube-node-lease").get_opt(node).await.ok().flatten()
}

/// Seconds since the lease of `node` was renewed.
pub async fn lease_age(client: &kube::Client, node: &str) -> Option<f64> {
    let l = lease(client, node).await?;
    let renew = l.spec?.renew_time?;
    let now = k8s_openapi::jiff::Timestamp::now();
    Some((now - renew.0).total(k8s_openapi::jiff::Unit::Second).unwrap_or(f64::MAX))
}

/// Waits until the pool's status reports `ready`/`updated` of `desired` with Ready=True.
pub async fn wait_pool_status(client: &kube::Client, name: &str, desired: i32, timeout: Duration) -> NodePool {
    let what = format!("status of {name} to show {desired} ready and up to date");
    wait_for(&what, timeout, || async {
        let p = get_pool(client, name).await;
        let s = p.status.clone().unwrap_or_default();
        let ready_cond = s.condition("Ready").map(|c| c.status.as_str()).unwrap_or("none").to_string();
        let fresh = s.observed_generation == p.metadata.generation;
        if fresh
            && s.replicas == desired
            && s.ready_replicas == desired
            && s.updated_replicas == desired
            && ready_cond == "True"
        {
            Ok(p)
        } else {
            Err(format!(
                "replicas {} ready {} updated {} Ready={ready_cond} observed {:?}/{:?}",
                s.replicas, s.ready_replicas, s.updated_replicas, s.observed_generation, p.metadata.generation
            ))
        }
    })
    .await
}

/// Waits until `node` has a lease (the simulator writes it right after first sight of the
/// node, but not always before the node's status).
pub async fn wait_lease(client: &kube::Client, node: &str) -> Lease {
    let what = format!("a lease for {node}");
    wait_for(&what, Duration::from_secs(30), || async { lease(client, node).await.ok_or("no lease yet".to_string()) })
        .await
}

/// Whether a pod (as the API returns it) is Ready.
pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A NodePool for `scope` whose nodes carry the scope label (so the test's operator simulates
/// them), each with its /`mask` of `cidr` and room for `max_pods` pods.
pub fn scoped_nodepool(
    name: &str,
    scope: &str,
    count: u32,
    cidr: &str,
    mask: u8,
    max_pods: u32,
    extra_spec: &str,
) -> String {
    let capacity = format!("{{cpu: 64, memory: 256Gi, pods: {max_pods}}}");
    NodePoolYaml::new(name, scope).count(count).pod_cidr(cidr, mask).capacity(Some(&capacity)).spec(extra_spec).yaml()
}

/// A PodPool in `ns` whose pods (labelled `app: <name>`) go to the scope's nodes; `pod_spec`
/// is the rest of the pod spec, indented six spaces.
pub fn scoped_podpool(name: &str, ns: &str, scope: &str, count: u32, extra_spec: &str, pod_spec: &str) -> String {
    format!(
        "apiVersion: pools.kwok.x-k8s.io/v1alpha1
kind: PodPool
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{SCOPE_LABEL}: {scope}}}
spec:
  podCount: {count}
{extra_spec}  podTemplate:
    metadata:
      labels: {{app: {name}}}
    spec:
      nodeSelector: {{{SCOPE_LABEL}: {scope}}}
{pod_spec}"
    )
}

/// The pods of `ns` matching `selector` (all of them for "").
pub async fn list_pods(client: &kube::Client, ns: &str, selector: &str) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(selector)).await.map(|l| l.items).unwrap_or_default()
}

/// A bare Pod in `ns` on the scope's fake nodes; `spec_extra` adds spec lines (indented two).
pub fn scoped_pod(name: &str, ns: &str, scope: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
{spec_extra}  nodeSelector: {{{SCOPE_LABEL}: {scope}}}
  tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
  containers: [{{name: c, image: nginx}}]
"
    )
}

/// Deletes the NodePool when dropped, pass or fail.
pub struct NodePoolCleanup(pub String);

impl Drop for NodePoolCleanup {
    fn drop(&mut self) {
        super::delete_quietly("nodepool", &self.0);
    }
}

/// A NodePool of `count` nodes in the scope that advertise KubeVirt's KVM device (VMIs'
/// launcher pods land on them).
pub fn kvm_nodepool(pool: &str, scope: &str, count: u32) -> String {
    NodePoolYaml::new(pool, scope)
        .count(count)
        .capacity(Some("{cpu: 64, memory: 256Gi, pods: 110, devices.kubevirt.io/kvm: 1k}"))
        .yaml()
}
