//! ValidatingAdmissionPolicies that confine the operator's own identity to simulated objects.
//! RBAC cannot say "only fake nodes"; the API server can: with these policies bound, the
//! operator's ServiceAccount is refused
//! - any write to a Node that is not (and was not) annotated `kwok.x-k8s.io/node=fake`;
//! - any write to a node Lease (`kube-node-lease`) that does not carry that annotation — the
//!   simulator puts it on every Lease it creates, a kubelet never does;
//! - any Pod it creates that does not select simulated nodes (`nodeSelector type=kwok`), unless
//!   the namespace is labelled `pools.kwok.x-k8s.io/unconfined=true` by an administrator;
//! - any status write or deletion of a Pod that neither selects nor tolerates simulated nodes.
//!
//! And one for everyone else: whoever creates or changes a pool must be allowed to create its
//! children ([`crate::admission::creators`]), checked by the API server, failing closed.
//!
//! What a policy cannot see: it has no lookups, so a Pod on a real node that tolerates every
//! taint (a DaemonSet's) looks like one that may run on a simulated node.

use super::{CHART, CONFIG, Spelling};
use crate::api::conventions::{FAKE_NODE_ANNOTATION, FAKE_TAINT_KEY, FAKE_VALUE, TYPE_LABEL, TYPE_VALUE};
use crate::informer::shared::LEASE_NAMESPACE;

/// The namespace label with which an administrator lets the operator create Pods that may land
/// on real nodes (a pool's `placement: Any`).
pub const UNCONFINED_LABEL: &str = "pools.kwok.x-k8s.io/unconfined";

/// An object (CEL variable `v`) is annotated as a simulated node, or absent (`null`).
fn marked(v: &str) -> String {
    format!(
        "{v} == null || (has({v}.metadata.annotations) && '{FAKE_NODE_ANNOTATION}' in {v}.metadata.annotations && {v}.metadata.annotations['{FAKE_NODE_ANNOTATION}'] == '{FAKE_VALUE}')"
    )
}

/// A Pod (CEL variable `v`, not null) selects simulated nodes.
fn selects_simulated(v: &str) -> String {
    format!(
        "has({v}.spec.nodeSelector) && '{TYPE_LABEL}' in {v}.spec.nodeSelector && {v}.spec.nodeSelector['{TYPE_LABEL}'] == '{TYPE_VALUE}'"
    )
}

/// A Pod (CEL variable `v`, not null) tolerates the simulated nodes' taint.
fn tolerates_simulated(v: &str) -> String {
    format!(
        "has({v}.spec.tolerations) && {v}.spec.tolerations.exists(t, (has(t.key) && t.key == '{FAKE_TAINT_KEY}') || ((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
}

fn policies(s: &Spelling) -> String {
    node_policy(s) + &pod_policy(s) + &crate::admission::creators::yaml(s.name, s.labels)
}

/// The operator's ServiceAccount as the API server names it.
fn user(s: &Spelling) -> String {
    format!("system:serviceaccount:{}:{}", s.namespace, s.name)
}

fn node_policy(s: &Spelling) -> String {
    let user = user(s);
    format!(
        r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}-simulated-nodes{labels}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [nodes, nodes/status]
    - apiGroups: [coordination.k8s.io]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [leases]
  matchConditions:
  - name: the-operator
    expression: "request.userInfo.username == '{user}'"
  validations:
  - expression: "request.resource.resource != 'nodes' || (({old}) && ({new}))"
    messageExpression: "'kwok-pools may write only simulated nodes (annotated {FAKE_NODE_ANNOTATION}={FAKE_VALUE}); node ' + request.name + ' is not one'"
    reason: Forbidden
  - expression: "request.resource.resource != 'leases' || request.namespace != '{LEASE_NAMESPACE}' || (({old}) && ({new}))"
    messageExpression: "'kwok-pools may write only the Leases of simulated nodes (annotated {FAKE_NODE_ANNOTATION}={FAKE_VALUE}); Lease ' + request.name + ' is not one'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-simulated-nodes{labels}
spec:
  policyName: {name}-simulated-nodes
  validationActions: [Deny]
"#,
        name = s.name,
        labels = s.labels,
        old = marked("oldObject"),
        new = marked("object"),
    )
}

fn pod_policy(s: &Spelling) -> String {
    let user = user(s);
    format!(
        r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}-simulated-pods{labels}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [UPDATE]
      resources: [pods/status]
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [DELETE]
      resources: [pods]
  matchConditions:
  - name: the-operator
    expression: "request.userInfo.username == '{user}'"
  variables:
  - name: unconfined
    expression: "namespaceObject != null && has(namespaceObject.metadata.labels) && '{UNCONFINED_LABEL}' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['{UNCONFINED_LABEL}'] == 'true'"
  validations:
  - expression: "request.operation != 'CREATE' || variables.unconfined || ({selects_new})"
    messageExpression: "'kwok-pools creates only Pods that select simulated nodes (nodeSelector {TYPE_LABEL}={TYPE_VALUE}); label the namespace {UNCONFINED_LABEL}=true to allow others in ' + request.namespace"
    reason: Forbidden
  - expression: "request.operation == 'CREATE' || ({selects_old}) || ({tolerates_old})"
    messageExpression: "'kwok-pools writes only Pods that may run on simulated nodes (they select or tolerate them); Pod ' + request.namespace + '/' + request.name + ' does neither'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-simulated-pods{labels}
spec:
  policyName: {name}-simulated-pods
  validationActions: [Deny]
"#,
        name = s.name,
        labels = s.labels,
        selects_new = selects_simulated("object"),
        selects_old = selects_simulated("oldObject"),
        tolerates_old = tolerates_simulated("oldObject"),
    )
}

/// `config/policy.yaml`.
pub fn config_yaml() -> String {
    format!(
        "# Generated by `kwok-pools generate` (make manifests): do not edit.\n\
         # What RBAC cannot say: the operator's ServiceAccount may write only simulated nodes, their\n\
         # Leases and Pods that run on them (see src/deploy/policy.rs for what is checked).\n{}",
        policies(&CONFIG).trim_start_matches("---\n")
    )
}

/// The chart's `templates/policy.yaml` (`policy.enabled`, on by default).
pub fn chart_yaml() -> String {
    format!(
        "{{{{- /* Generated by `kwok-pools generate` (make manifests): do not edit. */ -}}}}\n\
         {{{{- if .Values.policy.enabled }}}}\n\
         {{{{- $name := include \"kwok-pools.name\" . -}}}}\n\
         {{{{- $root := . }}}}\n\
         # The operator's ServiceAccount may write only simulated nodes, their Leases and Pods that\n\
         # run on them (what RBAC cannot say).\n{}{{{{- end }}}}\n",
        policies(&CHART)
    )
}
