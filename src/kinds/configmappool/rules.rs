//! ConfigMapPool's own rules: its template owns only what the pool does not set, and every
//! data key is one the API server takes.

use super::api::{ConfigMapPool, ConfigMapTemplate};
use crate::api::conventions::RESERVED_LABELS;
use crate::api::validation::{check, lines, metadata_problems};

impl ConfigMapTemplate {
    /// Rules on a ConfigMap template.
    /// garde runs it on the pool's template field (`api.rs` names it).
    pub fn rules(t: &Self, _ctx: &()) -> garde::Result {
        let mut out = Vec::new();
        metadata_problems(t.metadata.as_ref(), &RESERVED_LABELS, &mut out);
        for key in t.data.keys() {
            let ok = !key.is_empty()
                && key.len() <= 253
                && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !ok {
                out.push(format!(".data.{key}: a key must be 1-253 characters of [-._a-zA-Z0-9]"));
            }
        }
        lines(out)
    }
}

impl ConfigMapPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        check(&self.spec, &())
    }
}
