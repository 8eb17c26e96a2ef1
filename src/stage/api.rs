//! kwok's `Stage` (kwok.x-k8s.io/v1alpha1, as of kwok v0.8.0) as the importer reads it: every
//! field kwok defines, and whatever else a file holds (kept, so that nothing is dropped
//! without a word: the importer reports each field it does not map).

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One Stage manifest.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: StageSpec,
    /// Fields kwok does not define at the top.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageSpec {
    #[serde(default)]
    pub resource_ref: ResourceRef,
    pub selector: Option<Selector>,
    #[serde(default)]
    pub weight: i64,
    pub weight_from: Option<ExpressionFrom>,
    pub delay: Option<StageDelay>,
    pub next: Option<StageNext>,
    pub immediate_next_stage: Option<bool>,
    #[serde(default)]
    pub steps: Vec<StageStep>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<MatchExpression>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// A requirement in kwok's path form (`jq`, or the deprecated inline key/operator/values), or
/// a CEL expression.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MatchExpression {
    pub key: Option<String>,
    pub operator: Option<String>,
    #[serde(default)]
    pub values: Vec<String>,
    pub jq: Option<JqRequirement>,
    pub cel: Option<CelExpression>,
}

impl MatchExpression {
    /// The path-form requirement, as kwok reads it (`jq` first, then the inline fields).
    pub fn requirement(&self) -> Option<JqRequirement> {
        if let Some(jq) = &self.jq {
            return Some(jq.clone());
        }
        let key = self.key.clone().filter(|k| !k.is_empty())?;
        Some(JqRequirement { key, operator: self.operator.clone().unwrap_or_default(), values: self.values.clone() })
    }
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct JqRequirement {
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CelExpression {
    #[serde(default)]
    pub expression: String,
}

/// Where kwok reads a value from: a CEL expression, a jq expression, or the deprecated
/// `expressionFrom` (jq).
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionFrom {
    pub cel: Option<CelExpression>,
    pub jq: Option<JqExpression>,
    pub expression_from: Option<String>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct JqExpression {
    #[serde(default)]
    pub expression: String,
}

impl ExpressionFrom {
    /// The jq expression, if this is one (kwok prefers CEL when both are set).
    pub fn jq(&self) -> Option<&str> {
        if self.cel.is_some() {
            return None;
        }
        self.jq.as_ref().map(|j| j.expression.as_str()).or(self.expression_from.as_deref())
    }
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageDelay {
    pub duration_milliseconds: Option<i64>,
    pub duration_from: Option<ExpressionFrom>,
    pub jitter_duration_milliseconds: Option<i64>,
    pub jitter_duration_from: Option<ExpressionFrom>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageNext {
    pub event: Option<StageEvent>,
    pub finalizers: Option<StageFinalizers>,
    #[serde(default)]
    pub delete: bool,
    #[serde(default)]
    pub patches: Vec<StagePatch>,
    pub status_template: Option<String>,
    pub status_subresource: Option<String>,
    pub status_patch_as: Option<Value>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageStep {
    pub patch: Option<StagePatch>,
    pub event: Option<StageEvent>,
    pub finalizers: Option<StageFinalizers>,
    #[serde(default)]
    pub delete: bool,
    pub apply: Option<Value>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StagePatch {
    pub subresource: Option<String>,
    pub root: Option<String>,
    #[serde(default)]
    pub template: String,
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub impersonation: Option<Value>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StageEvent {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StageFinalizers {
    #[serde(default)]
    pub add: Vec<FinalizerItem>,
    #[serde(default)]
    pub remove: Vec<FinalizerItem>,
    #[serde(default)]
    pub empty: bool,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct FinalizerItem {
    #[serde(default)]
    pub value: String,
}

impl Stage {
    /// The steps kwok runs: `steps`, else `next` turned into steps in kwok's order (event,
    /// finalizers, the patches or the status template, delete).
    pub fn steps(&self) -> Vec<StageStep> {
        if !self.spec.steps.is_empty() {
            return self.spec.steps.clone();
        }
        let Some(next) = &self.spec.next else { return Vec::new() };
        let mut out = Vec::new();
        if next.event.is_some() {
            out.push(StageStep { event: next.event.clone(), ..Default::default() });
        }
        if next.finalizers.is_some() {
            out.push(StageStep { finalizers: next.finalizers.clone(), ..Default::default() });
        }
        if !next.patches.is_empty() {
            out.extend(next.patches.iter().map(|p| StageStep { patch: Some(p.clone()), ..Default::default() }));
        } else if let Some(template) = &next.status_template {
            let patch = StagePatch {
                subresource: Some(next.status_subresource.clone().unwrap_or_else(|| "status".into())),
                root: Some("status".into()),
                template: template.clone(),
                type_: None,
                impersonation: next.status_patch_as.clone(),
            };
            out.push(StageStep { patch: Some(patch), ..Default::default() });
        }
        if next.delete {
            out.push(StageStep { delete: true, ..Default::default() });
        }
        out
    }
}

/// Every Stage in a multi-document YAML text (other kinds: `Err` with what they are).
pub fn parse_all(text: &str) -> Vec<Result<Stage, String>> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = match Value::deserialize(doc) {
            Ok(Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                out.push(Err(format!("not YAML: {e}")));
                break;
            }
        };
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let api = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
        if kind != "Stage" || !api.starts_with("kwok.x-k8s.io/") {
            out.push(Err(format!("{api} {kind} is not a kwok Stage (kwok.x-k8s.io/v1alpha1)")));
            continue;
        }
        out.push(serde_json::from_value::<Stage>(value).map_err(|e| format!("not a Stage kwok reads: {e}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_becomes_kwoks_steps_in_its_order_and_nothing_is_dropped() {
        let text = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: s}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector: {}\n  next:\n    delete: true\n    event: {type: Normal, reason: R, message: M}\n    statusTemplate: 'phase: Running'\n  surprise: 1\n---\napiVersion: v1\nkind: ConfigMap\n";
        let all = parse_all(text);
        let stage = all[0].as_ref().unwrap();
        let steps = stage.steps();
        assert!(steps[0].event.is_some() && steps[1].patch.is_some() && steps[2].delete, "{steps:?}");
        let patch = steps[1].patch.as_ref().unwrap();
        assert_eq!((patch.root.as_deref(), patch.subresource.as_deref()), (Some("status"), Some("status")));
        assert!(stage.spec.unknown.contains_key("surprise"), "an unknown field is kept to be reported");
        assert!(all[1].as_ref().unwrap_err().contains("not a kwok Stage"));
    }
}
