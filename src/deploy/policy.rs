//! ValidatingAdmissionPolicies that confine the operator's own identity to simulated objects.
//! RBAC cannot say "only fake nodes"; the API server can: with these policies bound, the
//! operator's ServiceAccount is refused
//! - any write to a Node that is not (and was not) annotated `kwok.x-k8s.io/node=fake`; a Node it
//!   creates without the fake `NoSchedule` taint, an update that drops that taint, and any node
//!   address that is link-local or unspecified (the API server proxies `kubectl logs` and exec to
//!   a node's address: 169.254.169.254 is a cloud's metadata service);
//! - any write to a node Lease (`kube-node-lease`) that does not carry that annotation — the
//!   simulator puts it on every Lease it creates, a kubelet never does;
//! - any Pod it creates that does not select simulated nodes (`nodeSelector type=kwok`), unless
//!   the namespace is labelled `pools.kwok.x-k8s.io/unconfined=true` by an administrator;
//! - any status write or deletion of a Pod that neither selects nor tolerates simulated nodes,
//!   and the deletion of a Pod that tolerates them only by tolerating every taint (a DaemonSet's,
//!   which runs on every real node) unless somebody else is deleting it already or it is a
//!   pool's child;
//! - VMIs as Pods (also when it writes as KubeVirt's handler, whose impersonated requests carry
//!   the extra `kwok-pools-impersonator=simulator`), where a VMI it plays virt-controller for
//!   is marked `pools.kwok.x-k8s.io/simulated` when it admits it;
//! - any VirtualMachine it creates or changes whose template does not select simulated nodes
//!   (unless the namespace is labelled unconfined), since KubeVirt would run it on a real node,
//!   and any change or deletion of a VirtualMachine that is not a VMIPool's;
//! - any ResourceSlice that is not labelled as a device pool's (`pools.kwok.x-k8s.io/device-pool`)
//!   and owned by the Node it names;
//! - with the `webhookCertSecret` bundle, any change to its own webhook configurations but
//!   their CA bundle.
//!
//! And one for everyone else: whoever creates or changes a pool must be allowed to create its
//! children ([`crate::admission::creators`]), checked by the API server, failing closed.
//!
//! What a policy cannot see: it has no lookups, so a Pod on a real node that tolerates the fake
//! taint looks like one that may run on a simulated node.

use super::{CHART, CONFIG, Spelling};
use crate::api::conventions::{
    DEVICE_POOL_LABEL, FAKE_NODE_ANNOTATION, FAKE_TAINT_KEY, FAKE_VALUE, POOL_LABEL, TYPE_LABEL, TYPE_VALUE,
};
pub use crate::api::conventions::{IMPERSONATOR_EXTRA, IMPERSONATOR_VALUE, SIMULATED_VMI_ANNOTATION};
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

/// A Node (CEL variable `v`, not null) carries the fake taint with its value and effect.
fn fake_tainted(v: &str) -> String {
    format!(
        "has({v}.spec.taints) && {v}.spec.taints.exists(t, t.key == '{FAKE_TAINT_KEY}' && has(t.value) && t.value == '{FAKE_VALUE}' && t.effect == 'NoSchedule')"
    )
}

/// A Pod or VMI (CEL variable `v`, not null) selects simulated nodes.
fn selects_simulated(v: &str) -> String {
    format!(
        "(has({v}.spec.nodeSelector) && '{TYPE_LABEL}' in {v}.spec.nodeSelector && {v}.spec.nodeSelector['{TYPE_LABEL}'] == '{TYPE_VALUE}')"
    )
}

/// A Pod or VMI (CEL variable `v`, not null) tolerates the simulated nodes' taint by its key.
fn tolerates_by_key(v: &str) -> String {
    format!("(has({v}.spec.tolerations) && {v}.spec.tolerations.exists(t, has(t.key) && t.key == '{FAKE_TAINT_KEY}'))")
}

/// A Pod or VMI (CEL variable `v`, not null) tolerates every taint (an empty key, Exists).
fn tolerates_all(v: &str) -> String {
    format!(
        "(has({v}.spec.tolerations) && {v}.spec.tolerations.exists(t, (!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
}

/// The namespace is labelled unconfined by an administrator (CEL variable `unconfined`).
fn unconfined() -> String {
    format!(
        "  - name: unconfined\n    expression: \"namespaceObject != null && has(namespaceObject.metadata.labels) && '{UNCONFINED_LABEL}' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['{UNCONFINED_LABEL}'] == 'true'\"\n"
    )
}

/// The operator's ServiceAccount as the API server names it.
fn user(s: &Spelling) -> String {
    format!("system:serviceaccount:{}:{}", s.namespace, s.name)
}

/// `matchConditions` for requests made by the operator's identity.
fn the_operator(s: &Spelling) -> String {
    format!(
        "  matchConditions:\n  - name: the-operator\n    expression: \"request.userInfo.username == '{}'\"\n",
        user(s)
    )
}

/// A policy named `<name>-<suffix>` with its `spec` body (indented two spaces, after
/// `failurePolicy`), and its binding.
fn bound(s: &Spelling, suffix: &str, body: &str) -> String {
    format!(
        r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}-{suffix}{labels}
spec:
  failurePolicy: Fail
{body}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-{suffix}{labels}
spec:
  policyName: {name}-{suffix}
  validationActions: [Deny]
"#,
        name = s.name,
        labels = s.labels,
    )
}

/// One validation: a CEL expression (in double quotes) and a CEL message expression.
fn validation(expression: &str, message: &str) -> String {
    format!("  - expression: \"{expression}\"\n    messageExpression: \"{message}\"\n    reason: Forbidden\n")
}

fn policies(s: &Spelling) -> String {
    node_policy(s)
        + &pod_policy(s)
        + &vmi_policy(s)
        + &vm_policy(s)
        + &slice_policy(s)
        + &crate::admission::creators::yaml(s.name, s.labels)
}

fn node_policy(s: &Spelling) -> String {
    let (old, new) = (marked("oldObject"), marked("object"));
    let address_ok = "!isIP(a.address) || !(ip(a.address).isLinkLocalUnicast() || ip(a.address).isLinkLocalMulticast() || ip(a.address).isUnspecified())";
    let validations = [
        validation(
            &format!("request.resource.resource != 'nodes' || (({old}) && ({new}))"),
            &format!(
                "'kwok-pools may write only simulated nodes (annotated {FAKE_NODE_ANNOTATION}={FAKE_VALUE}); node ' + request.name + ' is not one'"
            ),
        ),
        validation(
            &format!(
                "request.resource.resource != 'nodes' || request.operation != 'CREATE' || ({})",
                fake_tainted("object")
            ),
            &format!(
                "'kwok-pools creates only nodes with the taint {FAKE_TAINT_KEY}={FAKE_VALUE}:NoSchedule; node ' + request.name + ' has none'"
            ),
        ),
        validation(
            &format!(
                "request.resource.resource != 'nodes' || request.operation != 'UPDATE' || !({}) || ({})",
                fake_tainted("oldObject"),
                fake_tainted("object")
            ),
            &format!(
                "'kwok-pools may not remove the taint {FAKE_TAINT_KEY}={FAKE_VALUE}:NoSchedule from node ' + request.name"
            ),
        ),
        validation(
            &format!(
                "request.resource.resource != 'nodes' || object == null || !has(object.status.addresses) || object.status.addresses.all(a, {address_ok})"
            ),
            "'kwok-pools gives simulated nodes no link-local or unspecified address (the API server sends logs and exec to a node address); node ' + request.name + ' has one'",
        ),
        validation(
            &format!("request.resource.resource != 'leases' || request.namespace != '{LEASE_NAMESPACE}' || (({old}) && ({new}))"),
            &format!(
                "'kwok-pools may write only the Leases of simulated nodes (annotated {FAKE_NODE_ANNOTATION}={FAKE_VALUE}); Lease ' + request.name + ' is not one'"
            ),
        ),
    ]
    .concat();
    let body = format!(
        r#"  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [nodes, nodes/status]
    - apiGroups: [coordination.k8s.io]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [leases]
{matches}  validations:
{validations}"#,
        matches = the_operator(s),
    );
    bound(s, "simulated-nodes", &body)
}

fn pod_policy(s: &Spelling) -> String {
    let old_may_run = format!(
        "{} || {} || {}",
        selects_simulated("oldObject"),
        tolerates_by_key("oldObject"),
        tolerates_all("oldObject")
    );
    let validations = [
        validation(
            &format!("request.operation != 'CREATE' || variables.unconfined || {}", selects_simulated("object")),
            &format!(
                "'kwok-pools creates only Pods that select simulated nodes (nodeSelector {TYPE_LABEL}={TYPE_VALUE}); label the namespace {UNCONFINED_LABEL}=true to allow others in ' + request.namespace"
            ),
        ),
        validation(
            &format!("request.operation == 'CREATE' || {old_may_run}"),
            "'kwok-pools writes only Pods that may run on simulated nodes (they select or tolerate them); Pod ' + request.namespace + '/' + request.name + ' does neither'",
        ),
        validation(
            &format!(
                "request.operation != 'DELETE' || {} || {} || has(oldObject.metadata.deletionTimestamp) || (has(oldObject.metadata.labels) && '{POOL_LABEL}' in oldObject.metadata.labels)",
                selects_simulated("oldObject"),
                tolerates_by_key("oldObject")
            ),
            "'kwok-pools deletes a Pod that tolerates every taint (a DaemonSet pod runs on real nodes too) only once somebody else is deleting it; Pod ' + request.namespace + '/' + request.name + ' is not being deleted'",
        ),
    ]
    .concat();
    let body = format!(
        r#"  matchConstraints:
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
{matches}  variables:
{unconfined}  validations:
{validations}"#,
        matches = the_operator(s),
        unconfined = unconfined(),
    );
    bound(s, "simulated-pods", &body)
}

fn vmi_policy(s: &Spelling) -> String {
    let matches = format!(
        "  matchConditions:\n  - name: the-operator-or-its-impersonation\n    expression: \"request.userInfo.username == '{}' || (has(request.userInfo.extra) && '{IMPERSONATOR_EXTRA}' in request.userInfo.extra && '{IMPERSONATOR_VALUE}' in request.userInfo.extra['{IMPERSONATOR_EXTRA}'])\"\n",
        user(s)
    );
    let simulated = format!(
        "(has(oldObject.metadata.annotations) && '{SIMULATED_VMI_ANNOTATION}' in oldObject.metadata.annotations)"
    );
    let unadmitted = "(!has(oldObject.status) || !has(oldObject.status.phase) || oldObject.status.phase == '')";
    let validations = [
        validation(
            &format!("request.operation != 'CREATE' || variables.unconfined || {}", selects_simulated("object")),
            &format!(
                "'kwok-pools creates only VMIs that select simulated nodes (nodeSelector {TYPE_LABEL}={TYPE_VALUE}); label the namespace {UNCONFINED_LABEL}=true to allow others in ' + request.namespace"
            ),
        ),
        validation(
            &format!(
                "request.operation == 'CREATE' || {} || {} || {simulated} || {unadmitted}",
                selects_simulated("oldObject"),
                tolerates_by_key("oldObject")
            ),
            "'kwok-pools writes only VMIs on simulated nodes (they select or tolerate them, or it plays virt-controller for them); VMI ' + request.namespace + '/' + request.name + ' is none of those'",
        ),
    ]
    .concat();
    let body = kubevirt_body("virtualmachineinstances, virtualmachineinstances/status", &matches, &validations);
    bound(s, "simulated-vmis", &body)
}

/// The body of a policy on KubeVirt's `resources` (every write), for requests `matches`
/// selects, with the `unconfined` variable.
fn kubevirt_body(resources: &str, matches: &str, validations: &str) -> String {
    format!(
        r#"  matchConstraints:
    resourceRules:
    - apiGroups: [kubevirt.io]
      apiVersions: ["*"]
      operations: [CREATE, UPDATE, DELETE]
      resources: [{resources}]
{matches}  variables:
{unconfined}  validations:
{validations}"#,
        unconfined = unconfined(),
    )
}

/// VirtualMachines (a VMIPool's that keeps them) are created and changed only if the VMI they
/// run selects simulated nodes (KubeVirt would otherwise start it on a real node), and changed
/// or deleted only if they are a VMIPool's.
fn vm_policy(s: &Spelling) -> String {
    let template = "has(object.spec.template) && has(object.spec.template.spec)";
    let pools = "has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(o, o.kind == 'VMIPool' && o.apiVersion.startsWith('pools.kwok.x-k8s.io/'))";
    let validations = [
        validation(
            &format!(
                "request.operation == 'DELETE' || variables.unconfined || ({template} && {})",
                selects_simulated("object.spec.template")
            ),
            &format!(
                "'kwok-pools writes only VirtualMachines whose template selects simulated nodes (nodeSelector {TYPE_LABEL}={TYPE_VALUE}); label the namespace {UNCONFINED_LABEL}=true to allow others in ' + request.namespace"
            ),
        ),
        validation(
            &format!("request.operation == 'CREATE' || ({pools})"),
            "'kwok-pools changes and deletes only the VirtualMachines of VMIPools; VM ' + request.namespace + '/' + request.name + ' is not one'",
        ),
    ]
    .concat();
    let body = kubevirt_body("virtualmachines", &the_operator(s), &validations);
    bound(s, "simulated-vms", &body)
}

fn slice_policy(s: &Spelling) -> String {
    let ours = |v: &str| {
        format!(
            "({v} == null || (has({v}.metadata.labels) && '{DEVICE_POOL_LABEL}' in {v}.metadata.labels && has({v}.spec.nodeName) && has({v}.metadata.ownerReferences) && {v}.metadata.ownerReferences.exists(o, o.kind == 'Node' && o.name == {v}.spec.nodeName)))"
        )
    };
    let validations = validation(
        &format!("{} && {}", ours("oldObject"), ours("object")),
        &format!(
            "'kwok-pools writes only the ResourceSlices of simulated nodes (labelled {DEVICE_POOL_LABEL}, owned by the Node they name); ResourceSlice ' + request.name + ' is not one'"
        ),
    );
    let body = format!(
        r#"  matchConstraints:
    resourceRules:
    - apiGroups: [resource.k8s.io]
      apiVersions: ["*"]
      operations: [CREATE, UPDATE, DELETE]
      resources: [resourceslices]
{matches}  validations:
{validations}"#,
        matches = the_operator(s),
    );
    bound(s, "simulated-slices", &body)
}

/// With the `webhookCertSecret` bundle the operator may patch its own webhook configurations:
/// this policy lets it change nothing there but the CA bundle (a stolen token cannot widen
/// their rules or point them elsewhere).
fn ca_only_policy(s: &Spelling) -> String {
    let same = "o.name == w.name && o.?rules == w.?rules && o.?failurePolicy == w.?failurePolicy && o.?matchPolicy == w.?matchPolicy && o.?namespaceSelector == w.?namespaceSelector && o.?objectSelector == w.?objectSelector && o.?sideEffects == w.?sideEffects && o.?timeoutSeconds == w.?timeoutSeconds && o.?admissionReviewVersions == w.?admissionReviewVersions && o.?matchConditions == w.?matchConditions && o.?reinvocationPolicy == w.?reinvocationPolicy && o.clientConfig.?url == w.clientConfig.?url && o.clientConfig.?service == w.clientConfig.?service";
    let validations = validation(
        &format!(
            "request.operation == 'UPDATE' && object.?webhooks.orValue([]).size() == oldObject.?webhooks.orValue([]).size() && object.?webhooks.orValue([]).all(w, oldObject.?webhooks.orValue([]).exists(o, {same}))"
        ),
        "'kwok-pools may change only the CA bundle of its webhook configurations; ' + request.name + ' was changed otherwise'",
    );
    let body = format!(
        r#"  matchConstraints:
    resourceRules:
    - apiGroups: [admissionregistration.k8s.io]
      apiVersions: [v1]
      operations: [CREATE, UPDATE, DELETE]
      resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations]
{matches}  validations:
{validations}"#,
        matches = the_operator(s),
    );
    bound(s, "webhook-ca-only", &body)
}

/// `config/policy.yaml`.
pub fn config_yaml() -> String {
    format!(
        "# Generated by `kwok-pools generate` (make manifests): do not edit.\n\
         # What RBAC cannot say: the operator's ServiceAccount may write only simulated nodes, their\n\
         # Leases, and Pods, VMIs and ResourceSlices of simulated nodes (see src/deploy/policy.rs).\n{}",
        policies(&CONFIG).trim_start_matches("---\n")
    )
}

/// The CA-only policy of the `webhookCertSecret` bundle (its kustomize component, dist).
pub fn config_ca_only_yaml() -> String {
    format!(
        "# Generated by `kwok-pools generate` (make manifests): do not edit.\n\
         # With the right to patch its webhook configurations, the operator may change only their CA.\n{}",
        ca_only_policy(&CONFIG).trim_start_matches("---\n")
    )
}

/// The chart's `templates/policy.yaml` (`policy.enabled`, on by default; the CA-only policy
/// with `rbac.webhookCertSecret.enabled`).
pub fn chart_yaml() -> String {
    format!(
        "{{{{- /* Generated by `kwok-pools generate` (make manifests): do not edit. */ -}}}}\n\
         {{{{- if .Values.policy.enabled }}}}\n\
         {{{{- $name := include \"kwok-pools.name\" . -}}}}\n\
         {{{{- $root := . }}}}\n\
         # The operator's ServiceAccount may write only simulated nodes, their Leases, and Pods,\n\
         # VMIs and ResourceSlices of simulated nodes (what RBAC cannot say).\n{}\
         {{{{- if (.Values.rbac.webhookCertSecret).enabled }}}}\n{}{{{{- end }}}}\n\
         {{{{- end }}}}\n",
        policies(&CHART),
        ca_only_policy(&CHART)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};

    fn documents(text: &str) -> Vec<serde_yaml::Value> {
        use serde::Deserialize;
        serde_yaml::Deserializer::from_str(text)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect()
    }

    #[test]
    fn every_policy_parses_and_has_its_binding() {
        let text = config_yaml() + "---\n" + &config_ca_only_yaml();
        let docs = documents(&text);
        let mut policies = Vec::new();
        for d in &docs {
            match d["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") => {
                    let p: ValidatingAdmissionPolicy = serde_yaml::from_value(d.clone()).unwrap();
                    let spec = p.spec.unwrap();
                    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
                    assert!(!spec.validations.unwrap().is_empty());
                    policies.push(p.metadata.name.unwrap());
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    let b: ValidatingAdmissionPolicyBinding = serde_yaml::from_value(d.clone()).unwrap();
                    assert_eq!(b.metadata.name.as_deref(), Some(b.spec.policy_name.as_str()));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        for want in ["nodes", "pods", "vmis", "slices"] {
            assert!(policies.contains(&format!("kwok-pools-simulated-{want}")), "{policies:?}");
        }
        assert!(policies.contains(&"kwok-pools-webhook-ca-only".to_string()));
        assert!(policies.contains(&"kwok-pools-pool-creators".to_string()));
        assert_eq!(docs.len(), policies.len() * 2);
    }

    #[test]
    fn the_operator_and_its_marked_impersonation_are_the_ones_confined() {
        let text = config_yaml();
        assert!(text.contains("request.userInfo.username == 'system:serviceaccount:kwok-pools:kwok-pools'"));
        assert!(text.contains(&format!("'{IMPERSONATOR_EXTRA}' in request.userInfo.extra")));
        let chart = chart_yaml();
        assert!(chart.contains("system:serviceaccount:{{ $root.Release.Namespace }}:{{ $name }}"), "{chart}");
        assert!(chart.contains("{{- if (.Values.rbac.webhookCertSecret).enabled }}"));
    }
}
