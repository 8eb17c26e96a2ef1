//! The ValidatingWebhookConfiguration (and the MutatingWebhookConfiguration that turns float
//! quantities into strings) that point the API server at this webhook.
//!
//! failurePolicy is Ignore: when the operator is down, pools can still be created and edited
//! (the schema and CEL still refuse what they cover), and the reconciler validates again
//! before it acts, reporting Degraded instead of doing damage. With Fail, a stopped operator
//! would lock every pool, including the fix for a bad one.

use super::error::WebhookError;
use crate::api::conventions::FIELD_MANAGER;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, Patch};

pub const WEBHOOK_NAME: &str = "validate.pools.kwok.x-k8s.io";
pub const PATH: &str = "/validate";
pub const MUTATING_WEBHOOK_NAME: &str = "quantities.pools.kwok.x-k8s.io";
pub const MUTATE_PATH: &str = "/mutate";
/// The webhook that judges evictions of VMIs' launcher pods (KubeVirt's, played without it).
pub const EVICTION_WEBHOOK_NAME: &str = "evictions.pools.kwok.x-k8s.io";

/// The resources the webhook judges: every pool kind's and the lifecycle policies.
pub fn resources() -> Vec<String> {
    let mut all: Vec<String> = crate::kinds::names().into_iter().map(|n| n.plural).collect();
    all.push("lifecyclepolicies".into());
    all
}

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Endpoint {
    Url(String),
    Service { namespace: String, name: String, port: i32 },
}

pub fn configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
    selector: Option<LabelSelector>,
) -> ValidatingWebhookConfiguration {
    let client_config = match endpoint {
        Endpoint::Url(url) => WebhookClientConfig {
            url: Some(url.clone()),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        Endpoint::Service { namespace, name, port } => WebhookClientConfig {
            url: None,
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(PATH.into()),
                port: Some(*port),
            }),
        },
    };
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        webhooks: Some(vec![
            ValidatingWebhook {
                name: WEBHOOK_NAME.into(),
                admission_review_versions: vec!["v1".into()],
                side_effects: "None".into(),
                failure_policy: Some("Ignore".into()),
                timeout_seconds: Some(5),
                match_policy: Some("Equivalent".into()),
                object_selector: selector,
                rules: Some(vec![
                    RuleWithOperations {
                        api_groups: Some(vec![crate::api::common::GROUP.into()]),
                        api_versions: Some(vec![crate::api::common::VERSION.into()]),
                        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                        resources: Some(resources()),
                        scope: Some("*".into()),
                    },
                    // The simulated CSI driver's classes: their parameters (immutable: create only).
                    RuleWithOperations {
                        api_groups: Some(vec!["storage.k8s.io".into()]),
                        api_versions: Some(vec!["v1".into()]),
                        operations: Some(vec!["CREATE".into()]),
                        resources: Some(vec!["storageclasses".into()]),
                        scope: Some("*".into()),
                    },
                ]),
                client_config: client_config.clone(),
                ..Default::default()
            },
            eviction_webhook(client_config),
        ]),
    }
}

/// Evictions of pods: a VMI's launcher pod whose VMI migrates on eviction is refused and the
/// VMI marked for evacuation (a side effect, none on a dry run). Evictions carry no labels, so
/// no object selector; failurePolicy Ignore as the other (a stopped operator lets drains go on).
fn eviction_webhook(client_config: WebhookClientConfig) -> ValidatingWebhook {
    ValidatingWebhook {
        name: EVICTION_WEBHOOK_NAME.into(),
        admission_review_versions: vec!["v1".into()],
        side_effects: "NoneOnDryRun".into(),
        failure_policy: Some("Ignore".into()),
        timeout_seconds: Some(5),
        match_policy: Some("Equivalent".into()),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec!["".into()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec!["CREATE".into()]),
            resources: Some(vec!["pods/eviction".into()]),
            scope: Some("Namespaced".into()),
        }]),
        client_config,
        ..Default::default()
    }
}

/// The mutating twin of a validating configuration: same name, endpoint (at
/// [`MUTATE_PATH`]), rules and selector. failurePolicy Ignore too: without it, a float
/// quantity is refused by the schema, as it would be without this webhook.
pub fn mutating_configuration(validating: &ValidatingWebhookConfiguration) -> MutatingWebhookConfiguration {
    // Only the pools' webhook has a twin (the eviction webhook mutates nothing).
    let webhooks = validating.webhooks.iter().flatten().filter(|w| w.name == WEBHOOK_NAME).map(|w| {
        let mut client_config = w.client_config.clone();
        if let Some(url) = client_config.url.as_mut() {
            *url = url.replace(PATH, MUTATE_PATH);
        }
        if let Some(service) = client_config.service.as_mut() {
            service.path = Some(MUTATE_PATH.into());
        }
        MutatingWebhook {
            name: MUTATING_WEBHOOK_NAME.into(),
            admission_review_versions: w.admission_review_versions.clone(),
            side_effects: w.side_effects.clone(),
            failure_policy: w.failure_policy.clone(),
            timeout_seconds: w.timeout_seconds,
            match_policy: w.match_policy.clone(),
            object_selector: w.object_selector.clone(),
            // Only the pools' quantities are mutated: not the StorageClasses the validating
            // configuration judges.
            rules: w.rules.as_ref().map(|r| {
                r.iter()
                    .filter(|r| r.api_groups.iter().flatten().any(|g| g == crate::api::common::GROUP))
                    .cloned()
                    .collect()
            }),
            reinvocation_policy: Some("Never".into()),
            client_config,
            ..Default::default()
        }
    });
    MutatingWebhookConfiguration { metadata: validating.metadata.clone(), webhooks: Some(webhooks.collect()) }
}

/// Creates or updates both configurations, and the policy that checks a pool's creator may
/// create its children ([`super::creators`]; a cluster that serves no admission policies gets
/// a warning: there only the webhook checks).
pub async fn register(
    client: kube::Client,
    validating: &ValidatingWebhookConfiguration,
    mutating: &MutatingWebhookConfiguration,
) -> kube::Result<()> {
    put(Api::<ValidatingWebhookConfiguration>::all(client.clone()), validating).await?;
    put(Api::<MutatingWebhookConfiguration>::all(client.clone()), mutating).await?;
    let name = validating.metadata.name.clone().unwrap_or_default();
    let Ok((policy, binding)) = super::creators::objects(&name) else {
        // Generated here and parsed by a unit test: never expected.
        tracing::error!("the pool creators' policy does not parse; only the webhook checks a pool's creator");
        return Ok(());
    };
    // Server-side apply: the same policy applied by an install (config/policy.yaml) is then
    // owned by both, never a conflict for either.
    let applied = async {
        ssa(
            Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(client.clone()),
            &policy,
        )
        .await?;
        ssa(Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(client), &binding)
            .await
    };
    match applied.await {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::warn!(
                "this API server serves no ValidatingAdmissionPolicies: only the webhook checks that a pool's creator may create its children, and it fails open"
            );
            Ok(())
        }
        other => other,
    }
}

/// Gives both installed configurations the CA of the certificate this operator keeps, and
/// nothing else: a JSON patch of each of its webhooks' `caBundle` (each guarded by the webhook's
/// name at that place), the only change the policy `<name>-webhook-ca-only` lets its identity
/// make. What else differs from what it serves (another endpoint, rules that miss a kind) is
/// then said by [`check`]; a missing configuration is an error (they ship with the operator).
pub async fn inject(
    client: kube::Client,
    validating: &ValidatingWebhookConfiguration,
    mutating: &MutatingWebhookConfiguration,
) -> Result<(), WebhookError> {
    if check(client.clone(), validating, mutating).await.is_ok() {
        return Ok(());
    }
    let name = validating.metadata.name.clone().unwrap_or_default();
    let ca = validating.webhooks.iter().flatten().find_map(|w| w.client_config.ca_bundle.clone()).unwrap_or_default();
    let v_names: Vec<String> = validating.webhooks.iter().flatten().map(|w| w.name.clone()).collect();
    let m_names: Vec<String> = mutating.webhooks.iter().flatten().map(|w| w.name.clone()).collect();
    let v_api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let m_api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let installed_v: Vec<String> = match v_api.get_opt(&name).await? {
        Some(c) => c.webhooks.iter().flatten().map(|w| w.name.clone()).collect(),
        None => Vec::new(),
    };
    let installed_m: Vec<String> = match m_api.get_opt(&name).await? {
        Some(c) => c.webhooks.iter().flatten().map(|w| w.name.clone()).collect(),
        None => Vec::new(),
    };
    let pp = crate::api::conventions::patch_params();
    if let Some(patch) = ca_patch(&installed_v, &v_names, &ca) {
        v_api.patch(&name, &pp, &Patch::<()>::Json(patch)).await?;
    }
    if let Some(patch) = ca_patch(&installed_m, &m_names, &ca) {
        m_api.patch(&name, &pp, &Patch::<()>::Json(patch)).await?;
    }
    tracing::info!(configuration = %name, "gave the webhook configurations the CA of the operator's certificate");
    check(client, validating, mutating).await
}

/// The JSON patch that sets `caBundle` of each webhook named in `ours` among `installed` (their
/// names in order), each guarded by a test of its name; `None` when none is there.
pub fn ca_patch(installed: &[String], ours: &[String], ca: &ByteString) -> Option<json_patch::Patch> {
    let encoded = serde_json::to_value(ca).unwrap_or_default();
    let ops: Vec<serde_json::Value> = installed
        .iter()
        .enumerate()
        .filter(|(_, n)| ours.contains(n))
        .flat_map(|(i, n)| {
            [
                serde_json::json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": n}),
                serde_json::json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}),
            ]
        })
        .collect();
    if ops.is_empty() {
        return None;
    }
    serde_json::from_value(serde_json::Value::Array(ops)).ok()
}

/// Makes the configuration exactly `desired`: a merge patch that replaces its webhooks whole
/// (one installed with a Service keeps no stale `service` beside our `url`); created when it
/// is missing (locally; in a cluster it ships with the operator, which may only patch it).
async fn ssa<K>(api: Api<K>, desired: &K) -> kube::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    api.patch(&name, &crate::api::conventions::apply_params(), &Patch::Apply(desired)).await.map(|_| ())
}

async fn put<K>(api: Api<K>, desired: &K) -> kube::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let pp = crate::api::conventions::patch_params();
    match api.patch(&name, &pp, &Patch::Merge(desired)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let post = kube::api::PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            api.create(&post, desired).await.map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// What is wrong with the configurations as installed, compared with what this operator
/// serves: missing, another endpoint, a CA that is not its own, rules that miss a kind.
pub async fn check(
    client: kube::Client,
    validating: &ValidatingWebhookConfiguration,
    mutating: &MutatingWebhookConfiguration,
) -> Result<(), WebhookError> {
    let name = validating.metadata.name.clone().unwrap_or_default();
    let found_v = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get_opt(&name).await?;
    let found_m = Api::<MutatingWebhookConfiguration>::all(client).get_opt(&name).await?;
    let (Some(found_v), Some(found_m)) = (found_v, found_m) else {
        return Err(WebhookError::Registration(format!(
            "ValidatingWebhookConfiguration and MutatingWebhookConfiguration {name} must both exist"
        )));
    };
    let want = |hooks: Vec<(String, WebhookClientConfig, Option<Vec<RuleWithOperations>>)>,
                have: Vec<(String, WebhookClientConfig, Option<Vec<RuleWithOperations>>)>,
                what: &str|
     -> Result<(), WebhookError> {
        for (hook, config, rules) in hooks {
            let Some((_, got, got_rules)) = have.iter().find(|(n, _, _)| *n == hook) else {
                return Err(WebhookError::Registration(format!("the {what} has no webhook {hook}")));
            };
            if got.service != config.service || got.url != config.url {
                return Err(WebhookError::Registration(format!(
                    "the {what}'s webhook {hook} calls {:?}, not this operator ({:?})",
                    got.service.as_ref().map(|s| format!("{}/{}", s.namespace, s.name)).or(got.url.clone()),
                    config.service.as_ref().map(|s| format!("{}/{}", s.namespace, s.name)).or(config.url.clone())
                )));
            }
            let ca = |c: &WebhookClientConfig| {
                c.ca_bundle.as_ref().map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            };
            if ca(got) != ca(&config) {
                return Err(WebhookError::Registration(format!(
                    "the {what}'s webhook {hook} trusts another CA than the webhook's certificate (ca.crt of its Secret)"
                )));
            }
            let resources = |r: &Option<Vec<RuleWithOperations>>| -> Vec<String> {
                let mut v: Vec<String> =
                    r.iter().flatten().flat_map(|r| r.resources.clone().unwrap_or_default()).collect();
                v.sort();
                v
            };
            let missing: Vec<String> =
                resources(&rules).into_iter().filter(|r| !resources(got_rules).contains(r)).collect();
            if !missing.is_empty() {
                return Err(WebhookError::Registration(format!(
                    "the {what}'s webhook {hook} does not cover {}",
                    missing.join(", ")
                )));
            }
        }
        Ok(())
    };
    let v = |c: &ValidatingWebhookConfiguration| {
        c.webhooks
            .iter()
            .flatten()
            .map(|w| (w.name.clone(), w.client_config.clone(), w.rules.clone()))
            .collect::<Vec<_>>()
    };
    let m = |c: &MutatingWebhookConfiguration| {
        c.webhooks
            .iter()
            .flatten()
            .map(|w| (w.name.clone(), w.client_config.clone(), w.rules.clone()))
            .collect::<Vec<_>>()
    };
    want(v(validating), v(&found_v), "ValidatingWebhookConfiguration")?;
    want(m(mutating), m(&found_m), "MutatingWebhookConfiguration")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_patches_only_the_ca_of_our_webhooks_each_guarded_by_its_name() {
        let installed = vec!["someone.else".to_string(), WEBHOOK_NAME.to_string()];
        let patch = ca_patch(&installed, &[WEBHOOK_NAME.to_string()], &ByteString(b"PEM".to_vec())).unwrap();
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops,
            serde_json::json!([
                {"op": "test", "path": "/webhooks/1/name", "value": WEBHOOK_NAME},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "UEVN"},
            ])
        );
        assert!(ca_patch(&installed[..1], &[WEBHOOK_NAME.to_string()], &ByteString(vec![])).is_none());
    }

    #[test]
    fn the_mutating_twin_points_at_its_own_path() {
        let by_url = configuration("x", &Endpoint::Url("https://127.0.0.1:9443/validate".into()), "CA", None);
        let m = mutating_configuration(&by_url);
        let hook = &m.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.client_config.url.as_deref(), Some("https://127.0.0.1:9443/mutate"));
        assert_eq!((hook.failure_policy.as_deref(), hook.side_effects.as_str()), (Some("Ignore"), "None"));
        // The pools' rule only: the validating configuration also judges StorageClasses.
        let validating = by_url.webhooks.as_ref().unwrap()[0].rules.clone().unwrap();
        assert_eq!(validating.len(), 2);
        assert_eq!(hook.rules.as_deref(), Some(&validating[..1]));
        let svc = Endpoint::Service { namespace: "n".into(), name: "s".into(), port: 443 };
        let m = mutating_configuration(&configuration("x", &svc, "CA", None));
        let hook = &m.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.client_config.service.as_ref().unwrap().path.as_deref(), Some("/mutate"));
        assert_eq!(m.metadata.name.as_deref(), Some("x"));
    }
}
