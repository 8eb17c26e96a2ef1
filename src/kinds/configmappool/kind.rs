//! ConfigMapPool on the pool core: a ConfigMap is rendered from the template and updated in
//! place; it is ready once it exists.

use super::ConfigMapPool;
use crate::api::PoolStatus;
use crate::informer::{Informer, Informers, shared};
use crate::pool::plan::UpdateMode;
use crate::pool::stamp::from_template;
use crate::pool::status::Problem;
use crate::pool::{ChildId, NoFlags, PoolKind, Shared, hash};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;

impl PoolKind for ConfigMapPool {
    type Child = ConfigMap;
    type Stored = ConfigMap;
    type Env = ();
    type Flags = NoFlags;
    const NOUN: &'static str = "ConfigMap";
    const TEMPLATE_PATH: &'static str = "spec.configMapTemplate";
    const PATCHES_CHILDREN: bool = true;

    fn count(&self) -> u32 {
        self.spec.config_map_count.max(0) as u32
    }

    fn template_hash(&self) -> String {
        hash::of(&self.spec.config_map_template)
    }

    fn pool_status(&self) -> Option<&PoolStatus> {
        self.status.as_ref()
    }

    fn update_mode(&self) -> UpdateMode {
        UpdateMode::InPlace
    }

    fn lifecycle(&self) -> Option<&dyn crate::api::lifecycle::LifecycleSpec> {
        self.spec.lifecycle.as_ref().map(|l| l as &dyn crate::api::lifecycle::LifecycleSpec)
    }

    fn problems(&self, _old: Option<&Self>, _peers: &[Arc<Self>]) -> Vec<String> {
        ConfigMapPool::problems(self)
    }

    fn env(_flags: &NoFlags, _shared: &Shared) -> Result<(), crate::setup::SetupError> {
        Ok(())
    }

    fn children(informers: &Informers) -> Arc<Informer<ConfigMap>> {
        shared::labelled(informers)
    }

    fn validation_env() {}

    fn example() -> Self {
        let mut pool = ConfigMapPool::new(
            "settings",
            serde_json::from_value(serde_json::json!({
                "configMapCount": 2,
                "configMapTemplate": {"metadata": {"labels": {"app": "settings"}}, "data": {"mode": "fast"}},
                "lifecycle": {"seed": 1, "configMaps": {"stampAfter": {"fixed": "2s"}}},
            }))
            .unwrap_or_else(|e| unreachable!("the example ConfigMapPool spec decodes: {e}")),
        );
        pool.metadata.namespace = Some("default".into());
        pool.metadata.uid = Some("example-uid".into());
        pool
    }

    fn render(&self, _id: &ChildId, _env: &()) -> Result<ConfigMap, Problem> {
        let t = &self.spec.config_map_template;
        Ok(ConfigMap { metadata: from_template(t.metadata.as_ref()), data: Some(t.data.clone()), ..Default::default() })
    }

    fn is_ready(_child: &ConfigMap) -> bool {
        true
    }

    fn child_api(client: Client, pool: &Self) -> Api<ConfigMap> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }

    fn pool_api(client: Client, pool: &Self) -> Api<Self> {
        Api::namespaced(client, &pool.namespace().unwrap_or_default())
    }
}
