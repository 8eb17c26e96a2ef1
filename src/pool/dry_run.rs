//! The API server as the judge of a template: render the child a pool would create last (the
//! longest name) and create it with a server-side dry run. Nothing is stored; the answer is
//! exactly what the real create would get, told at the pool manifest's paths.

use super::{PoolKind, child, refusal};
use crate::api::conventions::FIELD_MANAGER;
use kube::api::PostParams;
use kube::{Client, Resource, ResourceExt};

/// What the API server finds wrong with the children of `pool` (empty: they would be
/// accepted). An error that is not a verdict on the object (unreachable, forbidden, throttled)
/// is returned as such, for the caller to decide.
pub async fn child_problems<P: PoolKind>(client: Client, pool: &P, env: &P::Env) -> Result<Vec<String>, kube::Error> {
    let index = pool.count().saturating_sub(1);
    let mut child = match child(pool, index, &pool.template_hash(), env) {
        Ok(rendered) => rendered,
        Err(problem) => return Ok(vec![problem.message]),
    };
    // The pool may not exist yet (a create under review): no owner to point at.
    child.meta_mut().owner_references = None;
    let name = child.name_any();
    let params = PostParams { dry_run: true, field_manager: Some(FIELD_MANAGER.into()) };
    match P::child_api(client, pool).create(&params, &child).await {
        Ok(_) => Ok(vec![]),
        // Validation runs before the store looks for the name: a child that exists already
        // (a live pool) passed it.
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(vec![]),
        Err(kube::Error::Api(s)) if refusal::is_refusal(&s) => Ok(refusal::messages(&s, P::TEMPLATE_PATH, &name)),
        Err(e) => Err(e),
    }
}
