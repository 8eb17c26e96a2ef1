//! The compact pod kept in the store: what the PodPool controller and the pod simulator read,
//! instead of a k8s-openapi `Pod` (almost all of it optional fields nobody here reads). What
//! one costs is counted by `tests/pod_memory.rs`; the whole process by `make bench`.

use crate::api::conventions::{HASH_LABEL, INDEX_LABEL, POOL_LABEL};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use std::borrow::Cow;
use std::net::IpAddr;
use std::ops::Deref;

/// The words the kubelet and the API server write into pods (phases, condition types and
/// statuses, QoS classes, restart policies): held without an allocation of their own (a
/// running pod has about a dozen of them).
const KNOWN_WORDS: &[&str] = &[
    "True",
    "False",
    "Unknown",
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "DisruptionTarget",
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Guaranteed",
    "Burstable",
    "BestEffort",
    "Always",
    "OnFailure",
    "Never",
];

/// A short string read from a pod: one of [`KNOWN_WORDS`] (no allocation) or its own.
#[derive(Clone, Debug)]
pub enum Word {
    Known(&'static str),
    Own(Box<str>),
}

impl Word {
    fn new(s: &str) -> Self {
        KNOWN_WORDS.iter().find(|w| **w == s).map_or_else(|| Word::Own(s.into()), |w| Word::Known(w))
    }
}

impl Default for Word {
    fn default() -> Self {
        Word::Known("")
    }
}

impl Deref for Word {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Word::Known(s) => s,
            Word::Own(s) => s,
        }
    }
}

impl PartialEq for Word {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<str> for Word {
    fn eq(&self, other: &str) -> bool {
        &**self == other
    }
}

impl From<&str> for Word {
    fn from(s: &str) -> Self {
        Word::new(s)
    }
}

impl From<String> for Word {
    fn from(s: String) -> Self {
        match KNOWN_WORDS.iter().find(|w| **w == s) {
            Some(w) => Word::Known(w),
            None => Word::Own(s.into_boxed_str()),
        }
    }
}

/// The pool conventions' labels: every stored pod keeps these. The only other labels kept are
/// those a registered simulator reads ([`crate::pool::Simulate::POD_LABELS`]): a map of
/// all of a pod's labels costs more than the rest of the stored pod, and nothing here selects
/// pods by their other labels.
pub const POOL_LABELS: [&str; 3] = [POOL_LABEL, INDEX_LABEL, HASH_LABEL];

/// Label or annotation pairs a stored pod keeps, by their read key.
pub type ReadPairs = Box<[(&'static str, Box<str>)]>;

/// The most label and annotation keys stored pods keep beyond the conventions: each is kept
/// once for the life of the process (lifecycle policies name them), so their number is bounded.
pub const MAX_READ_KEYS: usize = 256;

/// The pod labels and annotations stored pods keep, beyond the pool conventions: what someone
/// reads (the kinds, the kubelet, lifecycle policies). Keys may be added while the store runs;
/// whoever adds one relists the pods so those already stored get it too.
#[derive(Debug)]
pub struct ReadKeys {
    labels: std::sync::RwLock<Vec<&'static str>>,
    annotations: std::sync::RwLock<Vec<&'static str>>,
}

/// The annotations every stored pod keeps when it has them: what a PodPool's scale-down reads
/// to choose its victims.
pub const POOL_ANNOTATIONS: [&str; 2] =
    [crate::api::conventions::DELETE_ANNOTATION, crate::api::conventions::DELETION_COST_ANNOTATION];

impl Default for ReadKeys {
    /// The pool conventions' labels and annotations.
    fn default() -> Self {
        Self {
            labels: std::sync::RwLock::new(POOL_LABELS.to_vec()),
            annotations: std::sync::RwLock::new(POOL_ANNOTATIONS.to_vec()),
        }
    }
}

impl ReadKeys {
    /// Adds label keys read by the code (`'static`).
    pub fn add_static_labels(&self, keys: &[&'static str]) {
        let mut labels = crate::sync::write(&self.labels);
        for k in keys {
            if !labels.contains(k) {
                labels.push(k);
            }
        }
    }

    /// Adds keys named at run time (a policy's); whether any was new. Past [`MAX_READ_KEYS`]
    /// in all, new keys are refused (`Err` names the first).
    pub fn add(&self, labels: &[String], annotations: &[String]) -> Result<bool, String> {
        let mut added = false;
        for (list, keys) in [(&self.labels, labels), (&self.annotations, annotations)] {
            for k in keys {
                let known = crate::sync::read(list).contains(&k.as_str());
                if known {
                    continue;
                }
                if self.count() >= MAX_READ_KEYS {
                    return Err(format!(
                        "{k}: the simulator keeps at most {MAX_READ_KEYS} pod label and annotation keys for policies; select on fewer distinct keys"
                    ));
                }
                // Kept for the life of the process: bounded by MAX_READ_KEYS.
                crate::sync::write(list).push(Box::leak(k.clone().into_boxed_str()));
                added = true;
            }
        }
        Ok(added)
    }

    fn count(&self) -> usize {
        crate::sync::read(&self.labels).len() + crate::sync::read(&self.annotations).len()
            - POOL_LABELS.len()
            - POOL_ANNOTATIONS.len()
    }

    /// A stored pod from `pod`, with the keys read now (and the pool conventions).
    pub fn slim(&self, pod: Pod) -> SlimPod {
        let labels = crate::sync::read(&self.labels);
        let annotations = crate::sync::read(&self.annotations);
        SlimPod::with_keys(pod, &labels, &annotations)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimContainer {
    pub name: String,
    pub image: String,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub sidecar: bool,
    /// Its `resources` (requests and limits) as JSON, shared by every container asking the
    /// same (a pool's pods share one string); `None` when it asks for nothing.
    pub resources: Option<std::sync::Arc<str>>,
}

/// One shared copy of each container resources JSON seen (few distinct shapes in a cluster).
fn interned(json: String) -> std::sync::Arc<str> {
    static SEEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<std::sync::Arc<str>>>> =
        std::sync::LazyLock::new(Default::default);
    let mut seen = crate::sync::lock(&SEEN);
    if let Some(hit) = seen.get(json.as_str()) {
        return hit.clone();
    }
    let shared: std::sync::Arc<str> = json.into();
    seen.insert(shared.clone());
    shared
}

/// The JSON of a container's requests and limits, when it has any.
fn resources_json(r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> Option<std::sync::Arc<str>> {
    let r = r?;
    let mut out = serde_json::Map::new();
    for (key, map) in [("requests", &r.requests), ("limits", &r.limits)] {
        if let Some(m) = map.as_ref().filter(|m| !m.is_empty()) {
            out.insert(key.into(), serde_json::to_value(m).ok()?);
        }
    }
    (!out.is_empty()).then(|| interned(serde_json::Value::Object(out).to_string()))
}

/// An ephemeral container (`kubectl debug`) and when its status says it started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimEphemeral {
    pub container: SlimContainer,
    /// `state.running.startedAt` of its status (`None`: no running status yet).
    pub started_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimPod {
    /// name, namespace, uid, owner references, deletion timestamp and grace period (no
    /// labels: see `labels`).
    pub metadata: ObjectMeta,
    /// Those of the read labels the pod has (read them with [`SlimPod::label`]).
    pub labels: Box<[(&'static str, Box<str>)]>,
    /// Those of the read annotations the pod has (what lifecycle policies select on; read
    /// them with [`SlimPod::annotation`]). Boxed: most pods have none, and a stored pod is
    /// counted in bytes.
    pub annotations: Option<Box<ReadPairs>>,
    pub node_name: Option<String>,
    pub host_network: bool,
    /// It has `spec.resourceClaims` (DRA devices the kubelet prepares before it starts).
    pub claims: bool,
    pub containers: Vec<SlimContainer>,
    pub init_containers: Vec<SlimContainer>,
    /// Condition types of the readiness gates.
    pub readiness_gates: Vec<String>,
    pub phase: Option<Word>,
    /// (type, status) of each condition.
    pub conditions: Vec<(Word, Word)>,
    pub pod_ips: Vec<IpAddr>,
    pub start_time: Option<Timestamp>,
    /// `spec.restartPolicy` (`Always` when unset).
    pub restart_policy: Option<Word>,
    /// The highest restartCount of its containers.
    pub restart_count: i32,
    /// `spec.activeDeadlineSeconds`: how long after its start the kubelet ends it.
    pub active_deadline_seconds: Option<u32>,
    /// A container waits in CrashLoopBackOff.
    pub crash_looping: bool,
    /// (reason, message) of a PodScheduled=False condition: why the scheduler cannot place it.
    pub unschedulable: Option<Box<(String, String)>>,
    /// `status.qosClass`.
    pub qos_class: Option<Word>,
    /// The CPU and memory levels its annotations set (`kwok.x-k8s.io/usage-cpu`, `-memory`).
    pub usage: Option<Box<crate::api::kubelet::Overrides>>,
    /// When its containers last started running (the latest `state.running.startedAt`).
    pub running_since: Option<Timestamp>,
    /// Its own behaviour, from its annotations (kwok's stage annotations and ours).
    pub overrides: Option<Box<crate::api::annotations::PodOverrides>>,
    /// `metadata.generation` (bumped by a spec change such as a resize) and the
    /// `status.observedGeneration` the kubelet last reported.
    pub generation: i64,
    pub observed_generation: i64,
    /// What few pods have (ephemeral containers, volumes the kubelet waits for): one thin
    /// pointer, nothing for most pods.
    pub rare: Option<Box<Rare>>,
    /// What the kubelet reads of its spec now and then (where it may run, how its probes time
    /// it), shared by every pod shaped alike; `None` when it says none of it.
    pub shape: Option<std::sync::Arc<super::shape::Shape>>,
}

/// What few stored pods have, kept behind one pointer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rare {
    /// Its ephemeral containers (`kubectl debug`).
    pub ephemeral: Vec<SlimEphemeral>,
    /// The volumes the kubelet waits for before it starts the pod (claims, ConfigMaps,
    /// Secrets).
    pub volumes: Option<super::volumes::PodVolumes>,
}

impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Pod> for SlimPod {
    /// A pod keeping the pool labels only.
    fn from(pod: Pod) -> Self {
        SlimPod::new(pod, &POOL_LABELS)
    }
}

/// A pod's ephemeral containers, with when each started running.
fn ephemeral_of(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    status: &k8s_openapi::api::core::v1::PodStatus,
) -> Vec<SlimEphemeral> {
    let started = |name: &str| {
        let s = status.ephemeral_container_statuses.iter().flatten().find(|s| s.name == name)?;
        s.state.as_ref()?.running.as_ref()?.started_at.as_ref().map(|t| t.0)
    };
    let list: Vec<SlimEphemeral> = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| SlimEphemeral {
            container: SlimContainer {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                ..Default::default()
            },
            started_at: started(&c.name),
        })
        .collect();
    list
}

/// When a pod's containers last started running (the latest `state.running.startedAt`).
fn running_since(status: &k8s_openapi::api::core::v1::PodStatus) -> Option<Timestamp> {
    let statuses = status.container_statuses.iter().flatten();
    statuses.filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref().map(|t| t.0)).max()
}

/// Whether a container of the pod waits in CrashLoopBackOff.
fn crash_looping(status: &k8s_openapi::api::core::v1::PodStatus) -> bool {
    status.container_statuses.iter().flatten().any(|c| {
        c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff")
    })
}

/// A pod's addresses (`podIPs`, else `podIP`).
fn ips_of(status: &k8s_openapi::api::core::v1::PodStatus) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = status.pod_ips.iter().flatten().filter_map(|p| p.ip.parse().ok()).collect();
    if ips.is_empty()
        && let Some(ip) = status.pod_ip.as_ref().and_then(|ip| ip.parse().ok())
    {
        ips.push(ip);
    }
    ips
}

impl SlimPod {
    /// A pod as the store keeps it, with those of `read_labels` it has.
    pub fn new(pod: Pod, read_labels: &[&'static str]) -> Self {
        Self::with_keys(pod, read_labels, &[])
    }

    /// A pod as the store keeps it, with those of `read_labels` and `read_annotations` it has.
    pub fn with_keys(pod: Pod, read_labels: &[&'static str], read_annotations: &[&'static str]) -> Self {
        let m = pod.metadata;
        let metadata = ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            owner_references: m.owner_references,
            deletion_timestamp: m.deletion_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            // What keeps the pod after its final delete (a Job's tracking finalizer).
            finalizers: m.finalizers.filter(|f| !f.is_empty()),
            ..Default::default()
        };
        let usage = crate::api::kubelet::Overrides::from_annotations(m.annotations.as_ref()).map(Box::new);
        let overrides =
            crate::api::annotations::PodOverrides::from_meta(m.labels.as_ref(), m.annotations.as_ref()).map(Box::new);
        let spec = pod.spec.unwrap_or_default();
        let shape = super::shape::Shape::of(&spec).map(super::shape::interned);
        let volumes = super::volumes::PodVolumes::of(metadata.name.as_deref().unwrap_or_default(), &spec);
        let slim = |c: &k8s_openapi::api::core::v1::Container| SlimContainer {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            sidecar: c.restart_policy.as_deref() == Some("Always"),
            resources: resources_json(c.resources.as_ref()),
        };
        let status = pod.status.unwrap_or_default();
        let ephemeral = ephemeral_of(&spec, &status);
        let pod_ips = ips_of(&status);
        let (running, looping) = (running_since(&status), crash_looping(&status));
        let labels = m.labels.map_or_else(Default::default, |all| {
            read_labels.iter().filter_map(|k| all.get(*k).map(|v| (*k, v.as_str().into()))).collect()
        });
        let annotations = m.annotations.as_ref().and_then(|all| {
            let found: ReadPairs =
                read_annotations.iter().filter_map(|k| all.get(*k).map(|v| (*k, v.as_str().into()))).collect();
            (!found.is_empty()).then(|| Box::new(found))
        });
        let mut out = SlimPod {
            metadata,
            labels,
            annotations,
            node_name: spec.node_name.filter(|n| !n.is_empty()),
            host_network: spec.host_network.unwrap_or(false),
            claims: spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()),
            containers: spec.containers.iter().map(slim).collect(),
            init_containers: spec.init_containers.iter().flatten().map(slim).collect(),
            readiness_gates: spec.readiness_gates.into_iter().flatten().map(|g| g.condition_type).collect(),
            phase: status.phase.map(Word::from),
            unschedulable: status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .map(|c| Box::new((c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))),
            qos_class: status.qos_class.map(Word::from),
            conditions: status
                .conditions
                .into_iter()
                .flatten()
                .map(|c| (Word::from(c.type_), Word::from(c.status)))
                .collect(),
            pod_ips,
            start_time: status.start_time.map(|t| t.0),
            restart_policy: spec.restart_policy.map(Word::from),
            restart_count: status.container_statuses.iter().flatten().map(|c| c.restart_count).max().unwrap_or(0),
            active_deadline_seconds: spec.active_deadline_seconds.map(|d| d.clamp(0, i64::from(u32::MAX)) as u32),
            running_since: running,
            usage,
            overrides,
            rare: (!ephemeral.is_empty() || volumes.is_some()).then(|| Box::new(Rare { ephemeral, volumes })),
            shape,
            generation: m.generation.unwrap_or(1),
            observed_generation: status.observed_generation.unwrap_or(0),
            crash_looping: looping,
        };
        out.shrink();
        out
    }

    /// Gives back spare capacity: stored pods live long.
    fn shrink(&mut self) {
        self.containers.shrink_to_fit();
        self.init_containers.shrink_to_fit();
        self.readiness_gates.shrink_to_fit();
        self.conditions.shrink_to_fit();
        self.pod_ips.shrink_to_fit();
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Its ephemeral containers (`kubectl debug`), when it has any.
    pub fn ephemeral(&self) -> Option<&[SlimEphemeral]> {
        self.rare.as_deref().map(|r| r.ephemeral.as_slice()).filter(|e| !e.is_empty())
    }

    /// The volumes the kubelet waits for before it starts the pod, when it has any.
    pub fn volumes(&self) -> Option<&super::volumes::PodVolumes> {
        self.rare.as_deref()?.volumes.as_ref()
    }

    /// The value of a label the store keeps (others are not kept: see [`POOL_LABELS`]).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }

    /// The value of a read annotation (see [`ReadKeys`]).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_deref()?.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }

    /// Sets a label (for tests and fixtures).
    pub fn set_label(&mut self, key: &'static str, value: &str) {
        let mut labels: Vec<_> = std::mem::take(&mut self.labels).into_vec();
        labels.retain(|(k, _)| *k != key);
        labels.push((key, value.into()));
        self.labels = labels.into_boxed_slice();
    }

    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    pub fn condition(&self, type_: &str) -> Option<&str> {
        self.conditions.iter().find(|(t, _)| t == type_).map(|(_, s)| &**s)
    }

    pub fn phase(&self) -> &str {
        self.phase.as_deref().unwrap_or("Pending")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_operator_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"a": "b"},
                         "annotations": {"big": "x"}, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1"}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i", "env": [{"name": "E", "value": "v"}]}],
                     "initContainers": [{"name": "s", "image": "e", "restartPolicy": "Always"}],
                     "readinessGates": [{"conditionType": "x/ready"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                       "startTime": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        let s = SlimPod::from(pod);
        assert_eq!((s.name(), s.uid(), s.phase()), ("p", "u", "Running"));
        assert_eq!(s.node_name.as_deref(), Some("node-1"));
        assert_eq!(s.containers, vec![SlimContainer { name: "c".into(), image: "i".into(), ..Default::default() }]);
        assert!(s.init_containers[0].sidecar);
        assert_eq!(s.readiness_gates, vec!["x/ready"]);
        assert_eq!(s.condition("Ready"), Some("True"));
        assert_eq!(s.pod_ips.len(), 2);
        assert!(s.metadata.annotations.is_none());
        assert!(matches!(s.phase, Some(Word::Known("Running"))), "a kubelet's word costs no allocation");
        assert!(matches!(Word::from("example.com/own"), Word::Own(_)));
        assert_eq!(&*Word::from("example.com/own"), "example.com/own");
        assert!(s.metadata.labels.is_none() && s.label("a").is_none(), "only the labels the operator reads");
        assert_eq!(s.metadata.owner_references.unwrap()[0].kind, "Job");
    }

    #[test]
    fn keeps_the_labels_the_operator_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "virt-launcher-vm-x", "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid",
                         "pools.kwok.x-k8s.io/pool": "web", "pools.kwok.x-k8s.io/index": "3",
                         "pools.kwok.x-k8s.io/template-hash": "abc", "app": "web", "tier": "front"}}
        }))
        .unwrap();
        const APP: &str = "kubevirt.io";
        const CREATED_BY: &str = "kubevirt.io/created-by";
        let mut s = SlimPod::new(pod.clone(), &[POOL_LABEL, INDEX_LABEL, HASH_LABEL, APP, CREATED_BY]);
        assert_eq!(s.labels.len(), 5);
        assert_eq!(SlimPod::from(pod).labels.len(), 3, "the pool labels, unless more are asked for");
        for (k, v) in [
            (APP, "virt-launcher"),
            (CREATED_BY, "vmi-uid"),
            (POOL_LABEL, "web"),
            (INDEX_LABEL, "3"),
            (HASH_LABEL, "abc"),
        ] {
            assert_eq!(s.label(k), Some(v), "{k}");
        }
        assert_eq!((s.label("app"), s.label("tier")), (None, None));
        s.set_label(HASH_LABEL, "def");
        assert_eq!((s.label(HASH_LABEL), s.labels.len()), (Some("def"), 5));
    }
}
