//! Test objects built up on their own types, as controller-rs' fixtures are: `Pod::test("p")
//! .on("n1").phase("Running").slim()`, `Node::test("n1").fake()`. The one way a unit test makes
//! a pod or a node; what a test does not say is what any pod or node has.

use super::pod::SlimPod;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// A pod for a test.
pub trait TestPod: Sized {
    /// Pod `name` in namespace `d` (UID `uid-<name>`), one container `app` (image `app:1`),
    /// restart policy Always, Pending.
    fn test(name: &str) -> Self;
    fn namespace(self, namespace: &str) -> Self;
    fn uid(self, uid: &str) -> Self;
    /// Bound to `node`.
    fn on(self, node: &str) -> Self;
    fn phase(self, phase: &str) -> Self;
    fn label(self, key: &str, value: &str) -> Self;
    fn annotate(self, key: &str, value: &str) -> Self;
    /// Its controller owner.
    fn owned_by(self, api_version: &str, kind: &str, name: &str, uid: &str) -> Self;
    fn restart(self, policy: &str) -> Self;
    /// An init container (`sidecar`: restartable, as a sidecar is).
    fn init_container(self, name: &str, sidecar: bool) -> Self;
    /// A status condition.
    fn condition(self, type_: &str, status: &str) -> Self;
    /// As the store keeps it.
    fn slim(self) -> SlimPod;
    /// As the store keeps it when these labels and annotations are read (a policy's).
    fn slim_reading(self, labels: &[&'static str], annotations: &[&'static str]) -> SlimPod;
}

impl TestPod for Pod {
    fn test(name: &str) -> Self {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("d".into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod.spec = Some(PodSpec {
            restart_policy: Some("Always".into()),
            containers: vec![Container { name: "app".into(), image: Some("app:1".into()), ..Default::default() }],
            ..Default::default()
        });
        pod.status = Some(PodStatus { phase: Some("Pending".into()), ..Default::default() });
        pod
    }

    fn namespace(mut self, namespace: &str) -> Self {
        self.metadata.namespace = Some(namespace.into());
        self
    }

    fn uid(mut self, uid: &str) -> Self {
        self.metadata.uid = Some(uid.into());
        self
    }

    fn on(mut self, node: &str) -> Self {
        self.spec.get_or_insert_default().node_name = Some(node.into());
        self
    }

    fn phase(mut self, phase: &str) -> Self {
        self.status.get_or_insert_default().phase = Some(phase.into());
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.metadata.labels.get_or_insert_default().insert(key.into(), value.into());
        self
    }

    fn annotate(mut self, key: &str, value: &str) -> Self {
        self.metadata.annotations.get_or_insert_default().insert(key.into(), value.into());
        self
    }

    fn owned_by(mut self, api_version: &str, kind: &str, name: &str, uid: &str) -> Self {
        let owner = OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        };
        self.metadata.owner_references.get_or_insert_default().push(owner);
        self
    }

    fn restart(mut self, policy: &str) -> Self {
        self.spec.get_or_insert_default().restart_policy = Some(policy.into());
        self
    }

    fn init_container(mut self, name: &str, sidecar: bool) -> Self {
        let c = Container {
            name: name.into(),
            image: Some("init:1".into()),
            restart_policy: sidecar.then(|| "Always".into()),
            ..Default::default()
        };
        self.spec.get_or_insert_default().init_containers.get_or_insert_default().push(c);
        self
    }

    fn condition(mut self, type_: &str, status: &str) -> Self {
        let c = PodCondition { type_: type_.into(), status: status.into(), ..Default::default() };
        self.status.get_or_insert_default().conditions.get_or_insert_default().push(c);
        self
    }

    fn slim(self) -> SlimPod {
        SlimPod::from(self)
    }

    fn slim_reading(self, labels: &[&'static str], annotations: &[&'static str]) -> SlimPod {
        SlimPod::with_keys(self, labels, annotations)
    }
}

/// A node for a test.
pub trait TestNode: Sized {
    /// Node `name` (UID `uid-<name>`), nothing else.
    fn test(name: &str) -> Self;
    /// Simulated by the default rules (kwok's annotation).
    fn fake(self) -> Self;
    fn label(self, key: &str, value: &str) -> Self;
    fn annotate(self, key: &str, value: &str) -> Self;
}

impl TestNode for Node {
    fn test(name: &str) -> Self {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.uid = Some(format!("uid-{name}"));
        node
    }

    fn fake(self) -> Self {
        self.annotate(crate::api::conventions::FAKE_NODE_ANNOTATION, crate::api::conventions::FAKE_VALUE)
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.metadata.labels.get_or_insert_default().insert(key.into(), value.into());
        self
    }

    fn annotate(mut self, key: &str, value: &str) -> Self {
        self.metadata.annotations.get_or_insert_default().insert(key.into(), value.into());
        self
    }
}
