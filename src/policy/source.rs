//! The policies as the lifecycle engine asks them ([`PolicySource`]): the valid policies,
//! indexed for pods and for nodes, rebuilt whenever one changes; and the pod label and
//! annotation keys they read, which the pod store is told to keep (pods are listed again when a
//! policy names a key the store did not keep yet).

use super::api::LifecyclePolicy;
use super::matching::{Empty, Index, Lookup, Seen, Target};
use crate::api::lifecycle::{NodeLifecycle, PodLifecycle};
use crate::informer::pod::SlimPod;
use crate::simulator::lifecycle::{KnobDevices, Knobs, PolicySource};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::any::Any;
use std::sync::{Arc, RwLock};

impl Knobs for LifecyclePolicy {
    fn seed(&self) -> Option<i64> {
        self.spec.seed
    }
    fn pods(&self) -> Option<&PodLifecycle> {
        self.spec.pods.as_ref().map(|p| &p.lifecycle)
    }
    fn nodes(&self) -> Option<&NodeLifecycle> {
        self.spec.nodes.as_ref().map(|n| &n.lifecycle)
    }
    fn created(&self) -> f64 {
        self.metadata.creation_timestamp.as_ref().map_or(0.0, |t| t.0.as_millisecond() as f64 / 1000.0)
    }
    fn pool(&self) -> &dyn Any {
        self
    }
    fn devices(&self) -> Option<KnobDevices<'_>> {
        let rule = self.spec.nodes.as_ref().filter(|n| !n.devices.is_empty())?;
        Some(KnobDevices {
            by: device_pool(self.metadata.name.as_deref().unwrap_or_default()),
            generation: self.metadata.generation.unwrap_or(1),
            seed: self.spec.seed.unwrap_or(0),
            sets: &rule.devices,
        })
    }
}

/// The device-pool label value of the slices a policy's devices are published in:
/// `policy.<name>` (a NodePool's slices carry its name).
pub fn device_pool(policy: &str) -> String {
    format!("policy.{policy}").chars().take(63).collect::<String>().trim_end_matches(['.', '-']).to_string()
}

/// The indexes of the policies now.
#[derive(Default, Debug)]
pub struct Indexes {
    pub pods: Index,
    pub nodes: Index,
}

impl Indexes {
    /// The indexes of the valid ones of `policies` (an invalid policy governs nothing: its
    /// status says why).
    pub fn of(policies: &[Arc<LifecyclePolicy>]) -> Self {
        let valid: Vec<Arc<LifecyclePolicy>> =
            policies.iter().filter(|p| super::rules::validate(p).is_empty()).cloned().collect();
        Self { pods: Index::build(&valid, Target::Pods), nodes: Index::build(&valid, Target::Nodes) }
    }
}

/// The label and annotation keys the pod rules of `policies` select on or read delays from.
pub fn pod_keys(policies: &[Arc<LifecyclePolicy>]) -> (Vec<String>, Vec<String>) {
    let (mut labels, mut annotations) = (Vec::new(), Vec::new());
    for p in policies {
        let Some(rule) = &p.spec.pods else { continue };
        let s = &rule.selector;
        labels.extend(s.match_labels.keys().cloned());
        labels.extend(s.match_expressions.iter().map(|r| r.key.clone()));
        annotations.extend(s.match_annotations.keys().cloned());
        annotations.extend(rule.lifecycle.delay_annotations());
    }
    for list in [&mut labels, &mut annotations] {
        list.sort();
        list.dedup();
    }
    (labels, annotations)
}

/// (apiGroup, kind) of the controller among `refs`.
pub fn controller(refs: Option<&Vec<OwnerReference>>) -> Option<(&str, &str)> {
    let owner = refs?.iter().find(|o| o.controller == Some(true))?;
    let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some((group, owner.kind.as_str()))
}

/// What a pod selector sees of `pod` on `node`.
pub fn seen_pod<'a>(pod: &'a SlimPod, node: Option<&'a Node>) -> Seen<'a> {
    Seen {
        labels: &pod.labels,
        annotations: pod.annotations.as_deref().map_or(&Empty as &dyn Lookup, |a| a as &dyn Lookup),
        namespace: pod.metadata.namespace.as_deref(),
        owner: controller(pod.metadata.owner_references.as_ref()),
        node_labels: node.map(|n| n.metadata.labels.as_ref().map_or(&Empty as &dyn Lookup, |l| l as &dyn Lookup)),
    }
}

/// What a node selector sees of `node`.
pub fn seen_node(node: &Node) -> Seen<'_> {
    fn or_empty(m: Option<&std::collections::BTreeMap<String, String>>) -> &dyn Lookup {
        m.map_or(&Empty as &dyn Lookup, |l| l as &dyn Lookup)
    }
    Seen {
        labels: or_empty(node.metadata.labels.as_ref()),
        annotations: or_empty(node.metadata.annotations.as_ref()),
        namespace: None,
        owner: controller(node.metadata.owner_references.as_ref()),
        node_labels: None,
    }
}

/// The policies the engine asks (see the module doc).
#[derive(Default)]
pub struct Policies {
    indexes: RwLock<Arc<Indexes>>,
    /// What is indexed: each policy's name, UID and spec generation.
    specs: RwLock<Vec<Spec>>,
}

/// A policy's name, UID and spec generation: what tells its spec changed (its status does not).
type Spec = (String, Option<String>, Option<i64>);

impl Policies {
    /// Indexes `policies` from now on, unless their specs are those indexed already (a status
    /// write changes none: the workers need not look at every object again). `true` when it
    /// indexed them anew.
    pub fn set(&self, policies: &[Arc<LifecyclePolicy>]) -> bool {
        let mut specs: Vec<Spec> = policies
            .iter()
            .map(|p| (kube::ResourceExt::name_any(p.as_ref()), p.metadata.uid.clone(), p.metadata.generation))
            .collect();
        specs.sort();
        let mut indexed = crate::sync::write(&self.specs);
        if *indexed == specs && !specs.is_empty() {
            return false;
        }
        *crate::sync::write(&self.indexes) = Arc::new(Indexes::of(policies));
        *indexed = specs;
        true
    }

    /// The indexes now (for the status).
    pub fn indexes(&self) -> Arc<Indexes> {
        crate::sync::read(&self.indexes).clone()
    }
}

impl PolicySource for Policies {
    fn pod(&self, pod: &SlimPod, node: &Node) -> Option<Arc<dyn Knobs>> {
        let indexes = self.indexes();
        if indexes.pods.is_empty() {
            return None;
        }
        let best = indexes.pods.best(Target::Pods, &seen_pod(pod, Some(node)))?;
        Some(best.policy.clone() as Arc<dyn Knobs>)
    }

    fn node(&self, node: &Node) -> Option<Arc<dyn Knobs>> {
        let indexes = self.indexes();
        if indexes.nodes.is_empty() {
            return None;
        }
        let best = indexes.nodes.best(Target::Nodes, &seen_node(node))?;
        Some(best.policy.clone() as Arc<dyn Knobs>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::fixtures::{TestNode, TestPod};
    use k8s_openapi::api::core::v1::Pod;

    fn policy(spec: &str) -> Arc<LifecyclePolicy> {
        policy_at(spec, 1)
    }

    /// Policy `p` at spec generation `generation`.
    fn policy_at(spec: &str, generation: i64) -> Arc<LifecyclePolicy> {
        Arc::new(
            serde_yaml::from_str(&format!(
                "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: p, uid: u1, generation: {generation}}}\nspec:\n{spec}"
            ))
            .unwrap(),
        )
    }

    #[test]
    fn only_a_new_spec_is_indexed_anew_not_a_status_write() {
        let policies = Policies::default();
        let spec = "  pods: {selector: {matchLabels: {app: web}}, lifecycle: {failPercent: 100}}\n";
        assert!(policies.set(&[policy_at(spec, 1)]), "the first time");
        let indexed = policies.indexes();
        let mut with_status = (*policy_at(spec, 1)).clone();
        with_status.status = Some(super::super::api::PolicyStatus { pods: 3, ..Default::default() });
        assert!(!policies.set(&[Arc::new(with_status)]), "a status write changes no spec");
        assert!(Arc::ptr_eq(&indexed, &policies.indexes()), "the same indexes: cached knobs stay valid");
        assert!(policies.set(&[policy_at(spec, 2)]), "a new generation");
        assert!(policies.set(&[]), "none left");
    }

    #[test]
    fn a_policy_governs_the_pods_and_nodes_it_selects_and_an_invalid_one_nothing() {
        let policies = Policies::default();
        let node = Node::test("n").label("zone", "a");
        let pod = Pod::test("web-0").label("app", "web").on("n").slim_reading(&["app"], &[]);
        assert!(policies.pod(&pod, &node).is_none(), "no policy yet");
        policies.set(&[policy("  pods: {selector: {matchLabels: {app: web}, node: {matchLabels: {zone: a}}}, lifecycle: {failPercent: 100}}\n  nodes: {selector: {matchLabels: {zone: a}}, lifecycle: {notReadyPercent: 50}}\n")]);
        let knobs = policies.pod(&pod, &node).expect("selected by its labels and its node's");
        assert_eq!(knobs.pods().unwrap().fail_percent, Some(100));
        assert_eq!(policies.node(&node).unwrap().nodes().unwrap().not_ready_percent, Some(50));
        let other = Pod::test("db-0").label("app", "db").on("n").slim_reading(&["app"], &[]);
        assert!(policies.pod(&other, &node).is_none());
        policies.set(&[policy_at(
            "  pods: {selector: {matchExpressions: [{key: app, operator: In}]}, lifecycle: {}}\n",
            2,
        )]);
        assert!(policies.pod(&pod, &node).is_none(), "an invalid policy governs nothing");
    }

    #[test]
    fn the_keys_a_policy_selects_on_are_the_ones_the_pod_store_keeps() {
        let p = policy(
            "  pods: {selector: {matchLabels: {app: web}, matchExpressions: [{key: tier, operator: Exists}], matchAnnotations: {chaos: 'on'}}, lifecycle: {}}\n",
        );
        assert_eq!(pod_keys(&[p]), (vec!["app".to_string(), "tier".into()], vec!["chaos".to_string()]));
    }
}
