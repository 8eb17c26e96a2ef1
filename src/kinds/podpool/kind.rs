//! PodPool on the pool core: how a Pod child is rendered (placed on fake nodes unless the
//! template says otherwise), judged ready, and replaced on a template change.

use super::PodPool;
use crate::api::conventions::HASH_LABEL;
use crate::api::lifecycle::LifecycleSpec;
use crate::api::{Placement, PoolStatus};
use crate::informer::pod::SlimPod;
use crate::informer::{Informer, Informers};
use crate::kubelet::status::pod as pod_status;
use crate::pool::placement::{confine, fake_node_selector, with_fake_node_toleration};
use crate::pool::plan::UpdateMode;
use crate::pool::stamp::from_template;
use crate::pool::status::Problem;
use crate::pool::{ChildId, NoFlags, PoolKind, Shared, hash};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;

/// Nothing beyond the pool is needed to render a pod.
#[derive(Clone, Default)]
pub struct PodEnv;

impl PoolKind for PodPool {
    type Child = Pod;
    type Stored = SlimPod;
    type Env = PodEnv;
    type Flags = NoFlags;
    const NOUN: &'static str = "pod";
    const TEMPLATE_PATH: &'static str = "spec.podTemplate";

    fn validation_env() -> PodEnv {
        PodEnv
    }
    const CREATE_WITH_POST: bool = true;

    fn count(&self) -> u32 {
        self.spec.pod_count.max(0) as u32
    }

    fn template_hash(&self) -> String {
        // The placement counts only when it is not the default (existing pools keep their hash).
        match self.spec.placement {
            Placement::Simulated => hash::of(&self.spec.pod_template.rendered_part()),
            other => hash::of(&(&self.spec.pod_template.rendered_part(), other)),
        }
    }

    fn pool_status(&self) -> Option<&PoolStatus> {
        self.status.as_ref()
    }

    fn update_mode(&self) -> UpdateMode {
        UpdateMode::replace(self.spec.max_unavailable.as_ref(), self.count())
    }

    fn problems(&self, _old: Option<&Self>, _peers: &[Arc<Self>]) -> Vec<String> {
        PodPool::problems(self)
    }

    fn env(_flags: &NoFlags, _shared: &Shared) -> Result<PodEnv, crate::setup::SetupError> {
        Ok(PodEnv)
    }

    fn children(informers: &Informers) -> Arc<Informer<SlimPod>> {
        crate::informer::shared::pods(informers)
    }

    fn example() -> Self {
        let mut pool = PodPool::new("web", serde_json::from_value(serde_json::json!({
            "podCount": 3,
            "maxUnavailable": "25%",
            "podTemplate": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "app", "image": "nginx",
                                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}},
            "lifecycle": {"pods": {"startDelay": {"fixed": "1s"}, "failPercent": 5}},
        })).unwrap_or_else(|e| unreachable!("the example PodPool spec decodes: {e}")));
        pool.metadata.namespace = Some("default".into());
        pool.metadata.uid = Some("example-uid".into());
        pool
    }

    fn lifecycle(&self) -> Option<&dyn LifecycleSpec> {
        self.spec.lifecycle.as_ref().map(|l| l as &dyn LifecycleSpec)
    }

    fn placement(&self) -> Option<Placement> {
        Some(self.spec.placement)
    }

    fn confine(pod: &mut Pod) {
        if let Some(spec) = pod.spec.as_mut() {
            confine(&mut spec.node_selector, &mut spec.tolerations);
        }
    }

    fn render(&self, _id: &ChildId, _env: &PodEnv) -> Result<Pod, Problem> {
        let template = &self.spec.pod_template;
        let mut spec = template.spec.clone();
        // Pods may always go to simulated nodes; with placement Any, the template's own
        // placement decides, and a template without one still lands on simulated nodes.
        spec.tolerations = Some(with_fake_node_toleration(spec.tolerations.take()));
        let placed = spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
            || spec.node_selector.as_ref().is_some_and(|s| !s.is_empty())
            || spec.affinity.is_some();
        if !placed {
            spec.node_selector = Some(fake_node_selector());
        }

        Ok(Pod { metadata: from_template(template.metadata.as_ref()), spec: Some(spec), status: None })
    }

    fn is_ready(child: &SlimPod) -> bool {
        pod_status::is_ready(child)
    }

    fn child_hash(child: &SlimPod) -> Option<String> {
        child.label(HASH_LABEL).map(String::from)
    }

    fn is_finished(child: &SlimPod) -> bool {
        matches!(child.phase(), "Succeeded" | "Failed")
    }

    fn deletion_order(child: &SlimPod) -> (bool, i32) {
        crate::api::conventions::deletion_order(|k| child.annotation(k).map(str::to_string))
    }

    fn is_failing(child: &SlimPod) -> bool {
        child.phase() == "Failed" || child.crash_looping
    }

    fn child_api(client: Client, pool: &Self) -> Api<Pod> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }

    fn pool_api(client: Client, pool: &Self) -> Api<Self> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conventions::INDEX_LABEL;
    use crate::kinds::podpool::{PodPoolSpec, PodTemplate};
    use crate::pool::child;
    use crate::pool::placement::tolerates_fake_nodes;
    use k8s_openapi::api::core::v1::{Container, PodSpec, Toleration};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn pool(spec: PodSpec) -> PodPool {
        let mut p = PodPool::new(
            "web",
            PodPoolSpec {
                pod_count: 2,
                pod_template: PodTemplate { metadata: None, spec, ..Default::default() },
                max_unavailable: None,
                lifecycle: None,
                placement: Placement::Simulated,
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid-1".into());
        p
    }

    fn container() -> Vec<Container> {
        vec![Container { name: "c".into(), image: Some("img".into()), ..Default::default() }]
    }

    #[test]
    fn pods_go_to_fake_nodes_by_default() {
        let p = pool(PodSpec { containers: container(), ..Default::default() });
        let pod = child(&p, 1, "h", &PodEnv).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_selector.unwrap()["type"], "kwok");
        assert!(tolerates_fake_nodes(&spec.tolerations.unwrap()));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[INDEX_LABEL], "1");
        assert_eq!(pod.metadata.owner_references.unwrap()[0].uid, "uid-1");
    }

    #[test]
    fn a_stored_pod_keeps_the_hash_it_was_rendered_with() {
        let p = pool(PodSpec { containers: container(), ..Default::default() });
        let mut pod = child(&p, 1, "h1", &PodEnv).unwrap();
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert("app".into(), "web".into());
        let stored = SlimPod::from(pod);
        assert_eq!(PodPool::child_hash(&stored).as_deref(), Some("h1"));
        assert_eq!(stored.label(INDEX_LABEL), Some("1"));
        assert_eq!(stored.label("app"), None, "labels the operator never reads are not kept");
    }

    #[test]
    fn pods_are_confined_to_simulated_nodes_unless_placement_is_any() {
        let zone = || Some([("zone".to_string(), "a".to_string())].into());
        let mut p = pool(PodSpec { containers: container(), node_selector: zone(), ..Default::default() });
        let selector = child(&p, 0, "h", &PodEnv).unwrap().spec.unwrap().node_selector.unwrap();
        assert_eq!(
            (selector["zone"].as_str(), selector["type"].as_str()),
            ("a", "kwok"),
            "the template's and the confinement"
        );
        let named = pool(PodSpec { containers: container(), node_name: Some("n1".into()), ..Default::default() });
        let spec = child(&named, 0, "h", &PodEnv).unwrap().spec.unwrap();
        assert_eq!(spec.node_selector.unwrap()["type"], "kwok", "a real node's kubelet refuses it");
        p.spec.placement = Placement::Any;
        let spec = child(&p, 0, "h", &PodEnv).unwrap().spec.unwrap();
        assert_eq!(spec.node_selector.unwrap().get("type"), None, "Any: the template's own placement wins");
        assert_ne!(
            p.template_hash(),
            pool(PodSpec { containers: container(), node_selector: zone(), ..Default::default() }).template_hash()
        );
    }

    #[test]
    fn only_a_toleration_that_matches_the_fake_taint_counts() {
        let t = |key: Option<&str>, op: Option<&str>, value: Option<&str>| Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            ..Default::default()
        };
        assert!(tolerates_fake_nodes(&[t(Some("kwok.x-k8s.io/node"), Some("Exists"), None)]));
        assert!(tolerates_fake_nodes(&[t(Some("kwok.x-k8s.io/node"), None, Some("fake"))]));
        assert!(tolerates_fake_nodes(&[t(None, Some("Exists"), None)]));
        assert!(!tolerates_fake_nodes(&[t(Some("kwok.x-k8s.io/node"), Some("Equal"), Some("real"))]), "another value");
        assert!(!tolerates_fake_nodes(&[t(Some("kwok.x-k8s.io/node"), None, None)]), "Equal with no value");
    }

    #[test]
    fn an_existing_toleration_is_not_duplicated() {
        let t = Toleration { operator: Some("Exists".into()), ..Default::default() };
        let p = pool(PodSpec { containers: container(), tolerations: Some(vec![t]), ..Default::default() });
        assert_eq!(child(&p, 0, "h", &PodEnv).unwrap().spec.unwrap().tolerations.unwrap().len(), 1);
    }

    #[test]
    fn max_unavailable_sets_the_replace_budget() {
        let mut p = pool(PodSpec { containers: container(), ..Default::default() });
        p.spec.pod_count = 10;
        p.spec.max_unavailable = Some(IntOrString::String("20%".into()));
        assert_eq!(p.update_mode(), UpdateMode::Replace { max_unavailable: 2 });
        p.spec.max_unavailable = Some(IntOrString::Int(3));
        assert_eq!(p.update_mode(), UpdateMode::Replace { max_unavailable: 3 });
        p.spec.max_unavailable = None;
        assert_eq!(p.update_mode(), UpdateMode::Replace { max_unavailable: 2 }, "a quarter of 10, rounded down");
    }
}
