//! The ValidatingWebhookConfiguration that points the API server at this webhook.
//!
//! failurePolicy is Ignore: when the operator is down, pools can still be created and edited
//! (the schema and CEL still refuse what they cover), and the reconciler validates again
//! before it acts, reporting Degraded instead of doing damage. With Fail, a stopped operator
//! would lock every pool, including the fix for a bad one.

use crate::pool::FIELD_MANAGER;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

pub const WEBHOOK_NAME: &str = "validate.pools.kwok.x-k8s.io";
pub const PATH: &str = "/validate";

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
        webhooks: Some(vec![ValidatingWebhook {
            name: WEBHOOK_NAME.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Ignore".into()),
            timeout_seconds: Some(5),
            match_policy: Some("Equivalent".into()),
            object_selector: selector,
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![crate::api::common::GROUP.into()]),
                api_versions: Some(vec![crate::api::common::VERSION.into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(vec!["nodepools".into(), "podpools".into()]),
                scope: Some("*".into()),
            }]),
            client_config,
            ..Default::default()
        }]),
    }
}

/// Creates or updates the configuration (server-side apply with the operator's field manager).
pub async fn register(client: kube::Client, config: &ValidatingWebhookConfiguration) -> kube::Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let name = config.metadata.name.clone().unwrap_or_default();
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(config)).await.map(|_| ())
}
