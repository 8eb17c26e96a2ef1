//! The check that whoever creates or changes a pool may create its children (a pool creates
//! them on its creator's behalf), made by the API server itself: a ValidatingAdmissionPolicy
//! whose CEL asks the authorizer about the requesting user, bound with `Deny`. It fails closed:
//! no webhook call, no timeout, no `failurePolicy: Ignore` to slip through. The webhook still
//! asks too (a clearer message, and clusters where the policy is not installed); the policy is
//! what holds when the webhook cannot answer. One validation per registered kind.

use crate::kinds;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};

/// The policy's (and its binding's) name for the install or instance `name`.
pub fn policy_name(name: &str) -> String {
    format!("{name}-pool-creators")
}

/// The CEL validations of every registered kind: (expression, message expression). One per
/// kind of object its pools create: the children, and what a spec field asks for besides.
fn validations() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for n in kinds::names() {
        let resources = std::iter::once((None, n.child_group.as_str(), n.child_plural.as_str()))
            .chain(n.also.iter().map(|a| (Some(a.field), a.group, a.plural)));
        for (field, group, plural) in resources {
            out.push(validation(&n, field, group, plural));
        }
    }
    out
}

/// Creating or changing a pool of kind `n` (whose spec sets `field`, if given) needs create on
/// `group`/`plural` where its children go.
fn validation(n: &kinds::Names, field: Option<&str>, group: &str, plural: &str) -> (String, String) {
    let scope = if n.namespaced { ".namespace(request.namespace)" } else { "" };
    let place = if n.namespaced { "\" in namespace \" + request.namespace" } else { "\" in the cluster\"" };
    let check = format!("authorizer.group('{group}').resource('{plural}'){scope}.check('create').allowed()");
    let asks = field.map(|f| format!(" || !has(object.spec.{f})")).unwrap_or_default();
    let expression = format!("request.resource.resource != '{}'{asks} || {check}", n.plural);
    // CEL's double-quoted strings, in a YAML single-quoted scalar ('' is a quote).
    let message = format!(
        "request.userInfo.username + \" may not create {plural}\" + {place} + \": a {kind} creates its {plural} on its creator''s behalf, so creating or changing one needs create on {plural} there too (ask an administrator for it)\"",
        kind = n.kind,
    );
    (expression, message)
}

/// The policy and its binding as YAML documents (each starting `---`): `name` as the install
/// spells it, `labels` the text after every object's name. `matchConstraints` is one atomic
/// value to server-side apply: it is written with the API server's defaults, or an install
/// applying it beside the operator (two field managers) would conflict with what the server
/// stored.
pub fn yaml(name: &str, labels: &str) -> String {
    let plurals: Vec<String> = kinds::names().into_iter().map(|n| n.plural).collect();
    let rules: String = validations()
        .into_iter()
        .map(|(e, m)| format!("  - expression: \"{e}\"\n    messageExpression: '{m}'\n    reason: Forbidden\n"))
        .collect();
    let policy = policy_name(name);
    format!(
        r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {policy}{labels}
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    namespaceSelector: {{}}
    objectSelector: {{}}
    resourceRules:
    - apiGroups: [{group}]
      apiVersions: ["*"]
      operations: [CREATE, UPDATE]
      resources: [{resources}]
      scope: "*"
  validations:
{rules}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {policy}{labels}
spec:
  policyName: {policy}
  validationActions: [Deny]
"#,
        group = crate::api::common::GROUP,
        resources = plurals.join(", "),
    )
}

/// The policy and its binding as objects, for an operator that installs them itself
/// (`--webhook-registration apply`, outside a cluster).
pub fn objects(name: &str) -> Result<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding), serde_yaml::Error> {
    let text = yaml(name, "");
    let mut docs = text.split("---\n").filter(|d| !d.trim().is_empty());
    let policy = serde_yaml::from_str(docs.next().unwrap_or_default())?;
    let binding = serde_yaml::from_str(docs.next().unwrap_or_default())?;
    Ok((policy, binding))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_asks_the_authorizer_about_its_children_where_they_go() {
        let (policy, binding) = objects("kwok-pools").unwrap();
        let spec = policy.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"), "fails closed");
        let v = spec.validations.unwrap();
        let also: usize = kinds::names().iter().map(|n| n.also.len()).sum();
        assert_eq!(
            v.len(),
            kinds::names().len() + also,
            "one per kind of child, and one per spec field asking for more"
        );
        assert!(
            v[0].expression.contains("authorizer.group('').resource('nodes').check('create')"),
            "{}",
            v[0].expression
        );
        assert!(v[1].expression.contains("resource('pods').namespace(request.namespace)"), "{}", v[1].expression);
        assert!(v[2].expression.contains("group('kubevirt.io').resource('virtualmachineinstances')"));
        assert_eq!(
            v[3].expression,
            "request.resource.resource != 'vmipools' || !has(object.spec.virtualMachine) || authorizer.group('kubevirt.io').resource('virtualmachines').namespace(request.namespace).check('create').allowed()",
            "a VMIPool that keeps VirtualMachines needs create on them too"
        );
        assert_eq!(binding.spec.validation_actions, vec!["Deny".to_string()]);
        let message = v[1].message_expression.as_deref().unwrap();
        assert!(
            message.contains("creator's behalf") && message.contains("\" in namespace \" + request.namespace"),
            "{message}"
        );
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert!(rules[0].resources.as_ref().unwrap().contains(&"podpools".to_string()));
    }
}
