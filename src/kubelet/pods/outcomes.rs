//! What a pod's fate does once it has started: crash loops (with their exit code and reason,
//! OOM kills among them), image pulls that back off, init containers that fail again after
//! their back-off, and readiness probes that fail now and then.

use super::{Loop, Timer, now_value};
use crate::informer::pod::SlimPod;
use crate::kubelet::status::fate::{self, Fate, PodPlan};
use crate::kubelet::status::patches::{self as pod_status, Exit};
use crate::simulator::lifecycle::epoch_now;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

/// How the plan's fate exits (a plain `Error` exit 1 when it does not say).
fn exit_of(plan: &PodPlan) -> Exit {
    match &plan.fate {
        Fate::CrashLoops { exit, .. } | Fate::FailsAtStart(exit) | Fate::InitFails(exit) => exit.clone(),
        _ => Exit::error(1),
    }
}

impl Loop {
    /// A crash-looping container exits: CrashLoopBackOff (or Failed, if never restarted).
    pub(super) fn crash(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some((pod, node)) = self.ready_for(Timer::Crash(key.clone(), uid.to_string()), uid) else { return };
        let exit = exit_of(&self.plan(&pod, &node));
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let now = now_value();
        let patch = if pod.restart_policy.as_deref() == Some("Never") {
            pod_status::failed_patch(&pod, &[], &exit, &now)
        } else {
            pod_status::crashed_patch(&pod, t.restarts.saturating_add(1), &exit, &now)
        };
        t.down = true;
        t.restarts = t.restarts.saturating_add(1);
        t.write.in_flight = true;
        self.sim.metrics.injected(if exit.reason == "OOMKilled" { "oom-kill" } else { "crash" });
        self.spawn_status(pod, patch, "crash");
    }

    /// The back-off is over: the container runs again, or fails again if it fails at start.
    pub(super) fn restart(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some((pod, node)) = self.ready_for(Timer::Restart(key.clone(), uid.to_string()), uid) else { return };
        let plan = self.plan(&pod, &node);
        let fails_at_start = matches!(plan.fate, Fate::FailsAtStart(_));
        let exit = exit_of(&plan);
        let Some(t) = self.tracked.get_mut(uid) else { return };
        let now = now_value();
        let patch = if fails_at_start {
            t.restarts = t.restarts.saturating_add(1);
            pod_status::crashed_patch(&pod, t.restarts, &exit, &now)
        } else {
            t.down = false;
            pod_status::restarted_patch(&pod, t.restarts, &exit, &now)
        };
        t.write.in_flight = true;
        if fails_at_start {
            self.sim.metrics.injected("crash");
        }
        self.spawn_status(pod, patch, if fails_at_start { "crash" } else { "restart" });
    }

    /// The pending pod a Pending-phase timer is for, and its node, if it is still that pod,
    /// undeleted, on a node of ours; its write is begun. When a write is in flight the timer
    /// is armed again, and `None`.
    fn pending(&mut self, timer: Timer, key: &ObjectRef<SlimPod>, uid: &str) -> Option<(Arc<SlimPod>, Arc<Node>)> {
        let pod = self.sim.pods.get(key)?;
        if pod.metadata.uid.as_deref() != Some(uid)
            || pod.metadata.deletion_timestamp.is_some()
            || pod.phase() != "Pending"
        {
            return None;
        }
        let node = self.managed_node(&pod)?;
        let t = self.tracked.get_mut(uid)?;
        if !t.write.begin() {
            self.timers.set(timer, Duration::from_secs(1));
            return None;
        }
        Some((pod, node))
    }

    /// ErrImagePull becomes ImagePullBackOff, and stays so: the image never pulls.
    pub(super) fn pull_back_off(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some((pod, _)) = self.pending(Timer::PullBackOff(key.clone(), uid.to_string()), key, uid) else { return };
        let patch = pod_status::image_pull_patch(&pod, &[], &[], true, &now_value());
        self.spawn_status(pod, patch, "image-pull-back-off");
    }

    /// A failed init container ran again after its back-off, and failed again.
    pub(super) fn init_retry(&mut self, key: &ObjectRef<SlimPod>, uid: &str) {
        let Some((pod, node)) = self.pending(Timer::InitRetry(key.clone(), uid.to_string()), key, uid) else { return };
        let exit = exit_of(&self.plan(&pod, &node));
        // `pending` found it tracked.
        let Some(t) = self.tracked.get_mut(uid) else { return };
        t.restarts = t.restarts.saturating_add(1);
        let restarts = t.restarts;
        self.timers.set(Timer::InitRetry(key.clone(), uid.to_string()), fate::crash_back_off(restarts + 1));
        self.sim.metrics.injected("init-fail");
        let patch = pod_status::init_failed_patch(&pod, (&[], &[]), &exit, restarts, &now_value());
        self.spawn_status(pod, patch, "init-fail");
    }

    /// A running pod whose readiness flaps: writes the probe's verdict when it differs from
    /// what the pod shows, and looks again when the verdict changes. `true` when it wrote.
    pub(super) fn probe(&mut self, pod: &Arc<SlimPod>, uid: &str, plan: &PodPlan) -> bool {
        let Some(flap) = &plan.readiness else { return false };
        let now = epoch_now();
        let passing = flap.away_until(now).is_none();
        let timer = Timer::Probe(ObjectRef::from_obj(pod.as_ref()), uid.to_string());
        // A moment past the change, so the window has surely turned when the pod is looked at.
        self.timers.set(timer, flap.next_change(now).saturating_sub(now) + Duration::from_millis(100));
        let shown = pod.condition("ContainersReady") != Some("False");
        if passing == shown {
            return false;
        }
        let Some(t) = self.tracked.get_mut(uid) else { return false };
        t.write.in_flight = true;
        if !passing {
            self.sim.metrics.injected("unready");
        }
        let patch = pod_status::probe_patch(pod, passing, &now_value());
        self.spawn_status(pod.clone(), patch, if passing { "probe-pass" } else { "probe-fail" });
        true
    }
}
