//! PodPool's own rules (garde): its template owns only what the pool does not set and names
//! a container; the API server judges the rest on the rendered pod.

use super::api::{PodPool, PodTemplate};
use crate::api::conventions::RESERVED_LABELS;
use crate::api::validation::{check, lines, metadata_problems};

impl PodTemplate {
    /// Rules on a pod template: only what the pool owns (the API server judges the rendered pod,
    /// and the schema requires a container).
    /// garde runs it on the pool's template field (`api.rs` names it).
    pub fn rules(t: &Self, _ctx: &()) -> garde::Result {
        let mut out = Vec::new();
        metadata_problems(t.metadata.as_ref(), &RESERVED_LABELS, &mut out);
        if t.spec.containers.is_empty() {
            out.push(".spec.containers: Required value: a Pod needs at least one container, e.g. containers: [{name: app, image: nginx}]".into());
        }
        lines(out)
    }
}

impl PodPool {
    /// Every problem with this pool (messages with manifest paths).
    pub fn problems(&self) -> Vec<String> {
        let mut out = check(&self.spec, &());
        if self.spec.placement == crate::api::Placement::Simulated {
            let selector = self.spec.pod_template.spec.node_selector.as_ref();
            out.extend(crate::pool::placement::selector_conflict(selector, "spec.podTemplate.spec"));
            let node_name = self.spec.pod_template.spec.node_name.as_deref();
            out.extend(crate::pool::placement::node_name_conflict(node_name, "spec.podTemplate.spec"));
        }
        out
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
