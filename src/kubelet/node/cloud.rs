//! The cloud lifecycle in the node loop: where a node stands under its knobs' boot, launch
//! failures and interruptions ([`cloud::plan`]), a timer for its next change, and what each
//! phase writes once: the startup taints removed when it is up, the interruption notice (taint
//! and event), the kubelet's `Shutdown` event, and the node's deletion when it is gone.

use super::{Done, NodeLoop, NodeSimulator, Timer};
use crate::kubelet::recorder::KubeletRecorder;
use crate::kubelet::status::cloud::{self, CloudPlan, Phase};
use crate::simulator::lifecycle::Knobs;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Taint};
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a write of the cloud lifecycle is given before it is tried again (a taint write
/// often meets the node lifecycle controller's own taint change: a conflict).
const RETRY: Duration = Duration::from_secs(5);

/// What this replica sent about a node's cloud lifecycle (each write once, again after
/// [`RETRY`] if the node still does not show it).
#[derive(Default, Debug)]
pub(super) struct CloudSent {
    /// When this replica first saw the node under cloud knobs (seconds since the epoch).
    since: Option<Duration>,
    startup: Option<Instant>,
    notice: Option<Instant>,
    gone: Option<Instant>,
    launch_event: bool,
    shutdown_event: bool,
}

/// Whether a write is due now (it is then noted as sent); else `retry` learns when to look again.
fn due(sent: &mut Option<Instant>, retry: &mut Option<Duration>) -> bool {
    if let Some(at) = *sent
        && at.elapsed() < RETRY
    {
        let wait = RETRY - at.elapsed() + Duration::from_millis(100);
        *retry = Some(retry.map_or(wait, |r| r.min(wait)));
        return false;
    }
    *sent = Some(Instant::now());
    true
}

impl NodeLoop {
    /// Where `node` stands in its cloud lifecycle now (`None`: no cloud knob), with a timer for
    /// its next change and the writes its phase asks for.
    pub(super) fn cloud_now(&mut self, node: &Node, name: &str, knobs: Option<&dyn Knobs>) -> Option<Phase> {
        let now = self.sim.config.clock.now().epoch();
        let t = self.tracked.get_mut(name)?;
        let Some(plan) = knobs.and_then(|k| cloud::plan(k.nodes()?, k.seed(), node, *t.cloud.since.get_or_insert(now)))
        else {
            t.cloud.since = None;
            return None;
        };
        let (phase, next) = plan.at(now);
        let next = next.map(|n| crate::simulator::timer_delay(n.saturating_sub(now)) + Duration::from_millis(100));
        // Written once, and looked at again until the node shows it.
        let retry = self.cloud_writes(node, name, &plan, phase);
        if let Some(wait) = [next, retry].into_iter().flatten().min() {
            self.timers.set(Timer::Cloud(name.to_string()), wait);
        }
        Some(phase)
    }

    /// The writes `phase` asks for that the node does not show yet; when to look again for
    /// those sent a moment ago.
    fn cloud_writes(&mut self, node: &Node, name: &str, plan: &CloudPlan, phase: Phase) -> Option<Duration> {
        let t = self.tracked.get_mut(name)?;
        let sent = &mut t.cloud;
        let mut retry = None;
        let mut events = Vec::new();
        match phase {
            Phase::Up | Phase::Noticed
                if cloud::without_taints(node, &plan.startup_taints).is_some()
                    && due(&mut sent.startup, &mut retry) =>
            {
                let startup = plan.startup_taints.clone();
                let left = move |n: &Node| cloud::without_taints(n, &startup);
                spawn_taints(&self.writes, &self.sim, node, left, "startup taints removed");
            }
            Phase::LaunchFailed { .. } if !std::mem::replace(&mut sent.launch_event, true) => {
                self.sim.metrics.injected("node_launch_failure");
                events.push((EventType::Warning, "LaunchFailed", "Launch".to_string(),
                    "The instance never finished booting and will not become Ready (simulated by kwok-pools: spec.lifecycle.nodes.launchFailures); its NodePool replaces it after replaceAfter".to_string()));
            }
            _ => {}
        }
        if let (true, Some(i)) = (phase.noticed(), plan.interruption.as_ref()) {
            if !cloud::has_taint(node, &i.taint) && phase != Phase::Gone && due(&mut sent.notice, &mut retry) {
                let taint = i.taint.clone();
                let with = move |n: &Node| {
                    let mut taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
                    (!cloud::has_taint(n, &taint)).then(|| {
                        taints.push(taint.clone());
                        taints
                    })
                };
                spawn_taints(&self.writes, &self.sim, node, with, "interruption notice");
                let note = format!(
                    "The instance is interrupted in {}s: tainted {}:{} (simulated by kwok-pools: spec.lifecycle.nodes.interruptions)",
                    i.at.saturating_sub(self.sim.config.clock.now().epoch()).as_secs(),
                    i.taint.key,
                    i.taint.effect
                );
                events.push((EventType::Warning, cloud::NOTICE_REASON, "Interrupt".to_string(), note));
                self.sim.metrics.injected("node_interruption");
            }
            if phase != Phase::Noticed && !std::mem::replace(&mut sent.shutdown_event, true) {
                events.push((
                    EventType::Normal,
                    "Shutdown",
                    "Shutdown".to_string(),
                    "Shutdown manager detected shutdown event".to_string(),
                ));
            }
        }
        if phase == Phase::Gone && due(&mut sent.gone, &mut retry) {
            spawn_delete(&self.writes, &self.sim, node);
        }
        for (type_, reason, action, note) in events {
            spawn_event(&self.writes, &self.recorder, node, type_, reason, action, note);
        }
        retry
    }
}

/// How many times a taint write reads the node again after a conflict (the node lifecycle
/// controller and the controller manager write the same list) before it waits for [`RETRY`].
const CONFLICT_TRIES: usize = 4;

/// Writes the node's taints as `taints` computes them from the node (`None`: nothing to
/// change), unless the node changed since it was read: then reads it again and recomputes,
/// so a notice lands when it is due, not [`RETRY`] later.
fn spawn_taints(
    writes: &super::Writes<Done>,
    sim: &Arc<NodeSimulator>,
    node: &Node,
    taints: impl Fn(&Node) -> Option<Vec<Taint>> + Send + 'static,
    what: &'static str,
) {
    let (sim, node) = (sim.clone(), node.clone());
    writes.spawn(move || async move {
        let api: Api<Node> = Api::all(sim.client.clone());
        let name = node.name_any();
        let mut node = node;
        for attempt in 1..=CONFLICT_TRIES {
            let Some(list) = taints(&node) else { return Done::Noted };
            let version = node.resource_version();
            let patch = serde_json::json!({"metadata": {"resourceVersion": version}, "spec": {"taints": list}});
            let result = api.patch(&name, &crate::api::conventions::patch_params(), &Patch::Merge(&patch)).await;
            sim.metrics.write("nodes", "patch", result.is_ok());
            match &result {
                Ok(_) => tracing::info!(node = %name, "{what}"),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_TRIES => {
                    match api.get_opt(&name).await {
                        Ok(Some(fresh)) if fresh.metadata.uid == node.metadata.uid => {
                            node = fresh;
                            continue;
                        }
                        Ok(_) => return Done::Noted,
                        Err(e) => tracing::warn!(node = %name, error = %e, "cannot read the node again ({what}); trying again in 5s"),
                    }
                }
                Err(e) if !crate::simulator::machinery::object_gone(&result) => {
                    tracing::warn!(node = %name, error = %e, "cannot write the node's taints ({what}); trying again in 5s")
                }
                Err(_) => {}
            }
            break;
        }
        Done::Noted
    });
}

/// Deletes the node (the cloud took its instance away), unless it was replaced meanwhile.
fn spawn_delete(writes: &super::Writes<Done>, sim: &Arc<NodeSimulator>, node: &Node) {
    let (sim, name, uid) = (sim.clone(), node.name_any(), node.metadata.uid.clone());
    writes.spawn(move || async move {
        let api: Api<Node> = Api::all(sim.client.clone());
        let dp =
            DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..Default::default() };
        let result = api.delete(&name, &dp).await;
        sim.metrics.write("nodes", "delete", result.is_ok());
        match &result {
            Ok(_) => tracing::info!(node = %name, "interrupted node shut down and deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "cannot delete the interrupted node; trying again in 5s")
            }
        }
        Done::Noted
    });
}

fn spawn_event(
    writes: &super::Writes<Done>,
    recorder: &KubeletRecorder,
    node: &Node,
    type_: EventType,
    reason: &str,
    action: String,
    note: String,
) {
    let recorder = recorder.clone();
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.name_any()),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    let ev = Event { type_, reason: reason.to_string(), note: Some(note), action, secondary: None };
    writes.spawn(move || async move {
        if let Err(e) = recorder.publish(&ev, &regarding).await {
            tracing::debug!(error = %e, reason = %ev.reason, "node event not recorded");
        }
        Done::Noted
    });
}
