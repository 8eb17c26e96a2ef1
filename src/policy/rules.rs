//! LifecyclePolicy's own rules beyond the shared lifecycle's: selector requirements that
//! Kubernetes would refuse in a LabelSelector, namespaces that cannot exist.

use super::api::{LifecyclePolicy, PodSelector};
use crate::api::validation;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

/// Every problem with `policy`, each with its manifest path: the shared lifecycle rules at the
/// policy's paths, then the selectors'.
pub fn validate(policy: &LifecyclePolicy) -> Vec<String> {
    let mut out = validation::check(&policy.spec, &());
    out.extend(
        crate::api::lifecycle::problems(&policy.spec).into_iter().map(|p| relocate(&format!("spec.lifecycle{p}"))),
    );
    if let Some(p) = &policy.spec.pods {
        out.extend(selector_problems("spec.pods.selector", &p.selector.match_expressions));
        out.extend(pod_selector_problems(&p.selector));
    }
    if let Some(n) = &policy.spec.nodes {
        out.extend(selector_problems("spec.nodes.selector", &n.selector.match_expressions));
        // The NodePool's own device rules, at the policy's path.
        out.extend(
            crate::kinds::nodepool::devices::problems(&n.devices).into_iter().map(|p| format!("spec.nodes.devices{p}")),
        );
    }
    if policy.spec.pods.is_none() && policy.spec.nodes.is_none() {
        out.push("spec: Required value: a policy says what pods do (pods), what nodes do (nodes), or both".into());
    }
    out
}

/// A problem of the shared lifecycle rules (`spec.lifecycle.pods.X`) at its place in a
/// policy (`spec.pods.lifecycle.X`).
fn relocate(p: &str) -> String {
    for section in ["pods", "nodes"] {
        if let Some(rest) = p.strip_prefix(&format!("spec.lifecycle.{section}")) {
            return format!("spec.{section}.lifecycle{rest}");
        }
    }
    p.to_string()
}

/// Problems with label requirements at `path` (`.matchExpressions[i]…`).
pub fn selector_problems(path: &str, requirements: &[LabelSelectorRequirement]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in requirements.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = r.values.as_deref().unwrap_or_default();
        match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                out.push(format!("{at}.values: Required value: {} needs at least one value", r.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                out.push(format!("{at}.values: Forbidden: {} takes no values", r.operator));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                out.push(format!("{at}.operator: Unsupported value: {other:?}: use In, NotIn, Exists or DoesNotExist"))
            }
        }
        if r.key.is_empty() || r.key.len() > 316 {
            out.push(format!("{at}.key: Invalid value: {:?}: a label key such as app or example.com/tier", r.key));
        }
    }
    out
}

/// Problems with a pod selector's namespaces and node selector.
pub fn pod_selector_problems(s: &PodSelector) -> Vec<String> {
    let mut out = Vec::new();
    for (i, ns) in s.namespaces.iter().enumerate() {
        let ok = !ns.is_empty()
            && ns.len() <= 63
            && ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !ns.starts_with('-')
            && !ns.ends_with('-');
        if !ok {
            out.push(format!(
                "spec.pods.selector.namespaces[{i}]: Invalid value: {ns:?}: a namespace name (lower case letters, digits and '-')"
            ));
        }
    }
    if let Some(node) = &s.node {
        out.extend(selector_problems("spec.pods.selector.node", node.match_expressions.as_deref().unwrap_or_default()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::api::LifecyclePolicy;

    fn problems(spec: &str) -> Vec<String> {
        let p: LifecyclePolicy = serde_yaml::from_str(&format!(
            "apiVersion: pools.kwok.x-k8s.io/v1alpha1\nkind: LifecyclePolicy\nmetadata: {{name: p}}\nspec:\n{spec}"
        ))
        .unwrap();
        super::validate(&p)
    }

    #[test]
    fn bad_policies_are_refused_with_the_field_named() {
        assert_eq!(
            problems("  pods: {selector: {matchLabels: {app: web}}, lifecycle: {failPercent: 10}}\n"),
            Vec::<String>::new()
        );
        let e = problems("  weight: 3\n");
        assert!(e[0].starts_with("spec: Required value"), "{e:?}");
        let e = problems("  pods: {selector: {matchExpressions: [{key: app, operator: In}]}, lifecycle: {}}\n");
        assert_eq!(e, ["spec.pods.selector.matchExpressions[0].values: Required value: In needs at least one value"]);
        let e = problems(
            "  nodes: {selector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}, lifecycle: {}}\n",
        );
        assert!(e[0].starts_with("spec.nodes.selector.matchExpressions[0].operator: Unsupported value"), "{e:?}");
        let e = problems("  pods: {selector: {namespaces: [Team_A]}, lifecycle: {}}\n");
        assert!(e[0].starts_with("spec.pods.selector.namespaces[0]: Invalid value"), "{e:?}");
        let e = problems("  pods: {lifecycle: {failPercent: 70, crashLoopPercent: 40}}\n");
        assert!(e.iter().any(|p| p.starts_with("spec.pods.lifecycle")), "the shared rules at the policy's path: {e:?}");
        let e = problems("  nodes: {lifecycle: {notReadyFor: {fixed: soon}}}\n");
        assert!(e[0].starts_with("spec.nodes.lifecycle.notReadyFor.fixed"), "{e:?}");
    }
}
