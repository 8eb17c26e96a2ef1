//! Which nodes the simulator manages, with kwok's flags and kwok's rules for conflicts.

use super::selector::Selector;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

pub use crate::api::conventions::FAKE_NODE_ANNOTATION;
pub const DEFAULT_ANNOTATION_SELECTOR: &str = "kwok.x-k8s.io/node=fake";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manage {
    /// Every node in the cluster.
    All,
    /// Exactly one node, by name.
    Single(String),
    /// Nodes whose annotations and labels both match (an empty selector matches all).
    Selected { annotations: Selector, labels: Selector },
}

impl Manage {
    /// Builds the rule from the kwok-compatible flags. As in kwok, `--manage-all-nodes` and
    /// `--manage-single-node` exclude each other and the selectors; with no flag at all the
    /// default annotation selector applies.
    pub fn from_flags(
        all: bool,
        single: Option<&str>,
        annotation_selector: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Self, String> {
        let has_selectors = annotation_selector.is_some() || label_selector.is_some();
        if all && single.is_some() {
            return Err("--manage-all-nodes conflicts with --manage-single-node: use one of them".into());
        }
        if all && has_selectors {
            return Err("--manage-all-nodes conflicts with --manage-nodes-with-annotation-selector and \
                 --manage-nodes-with-label-selector: use either all nodes or selectors"
                .into());
        }
        if single.is_some() && has_selectors {
            return Err("--manage-single-node conflicts with --manage-nodes-with-annotation-selector and \
                 --manage-nodes-with-label-selector: use either one node or selectors"
                .into());
        }
        if all {
            return Ok(Manage::All);
        }
        if let Some(name) = single {
            if name.is_empty() {
                return Err("--manage-single-node needs a node name".into());
            }
            return Ok(Manage::Single(name.to_string()));
        }
        let annotations = Selector::parse(annotation_selector.unwrap_or(DEFAULT_ANNOTATION_SELECTOR))
            .map_err(|e| format!("--manage-nodes-with-annotation-selector: {e}"))?;
        let labels = Selector::parse(label_selector.unwrap_or(""))
            .map_err(|e| format!("--manage-nodes-with-label-selector: {e}"))?;
        Ok(Manage::Selected { annotations, labels })
    }

    pub fn manages(&self, node: &Node) -> bool {
        match self {
            Manage::All => true,
            Manage::Single(name) => node.name_any() == *name,
            Manage::Selected { annotations, labels } => {
                annotations.matches(node.metadata.annotations.as_ref()) && labels.matches(node.metadata.labels.as_ref())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        use crate::informer::fixtures::TestNode;
        let node = annotations.iter().fold(Node::test(name), |n, (k, v)| n.annotate(k, v));
        labels.iter().fold(node, |n, (k, v)| n.label(k, v))
    }

    #[test]
    fn default_manages_annotated_nodes_only() {
        let m = Manage::from_flags(false, None, None, None).unwrap();
        assert!(m.manages(&node("a", &[("kwok.x-k8s.io/node", "fake")], &[])));
        assert!(!m.manages(&node("b", &[], &[])));
    }

    #[test]
    fn all_and_single() {
        assert!(Manage::from_flags(true, None, None, None).unwrap().manages(&node("x", &[], &[])));
        let m = Manage::from_flags(false, Some("x"), None, None).unwrap();
        assert!(m.manages(&node("x", &[], &[])));
        assert!(!m.manages(&node("y", &[("kwok.x-k8s.io/node", "fake")], &[])));
    }

    #[test]
    fn label_selector_combines_with_annotations() {
        let m = Manage::from_flags(false, None, None, Some("team=a")).unwrap();
        assert!(m.manages(&node("a", &[("kwok.x-k8s.io/node", "fake")], &[("team", "a")])));
        assert!(!m.manages(&node("b", &[("kwok.x-k8s.io/node", "fake")], &[("team", "b")])));
        let m = Manage::from_flags(false, None, Some(""), Some("team=a")).unwrap();
        assert!(m.manages(&node("c", &[], &[("team", "a")])));
    }

    #[test]
    fn conflicts_are_refused_with_the_flag_names() {
        let e = Manage::from_flags(true, Some("x"), None, None).unwrap_err();
        assert!(e.contains("--manage-single-node"));
        assert!(Manage::from_flags(true, None, Some("a=b"), None).is_err());
        assert!(Manage::from_flags(true, None, None, Some("a=b")).is_err());
        assert!(Manage::from_flags(false, Some("x"), None, Some("a=b")).is_err());
    }
}
