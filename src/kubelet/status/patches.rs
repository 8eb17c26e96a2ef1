//! What a kubelet reports about a pod it runs, built without a kubelet. Pure: patches for
//! the status subresource (strategic merge: conditions merge by type, so conditions other
//! controllers own, such as readiness gates, are kept).

use crate::informer::pod::{SlimContainer, SlimPod};
pub use crate::kubelet::status::pod::{
    Exit, gates_ready, host_network, is_ready, is_running, is_terminal, phase, pod_ips,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::net::IpAddr;

fn sha(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    format!("{repo}@sha256:{}", sha(&[image]))
}

/// The runtime ID a container reports (`containerd://<hash>`), the same every time it is asked.
pub fn container_id(pod_uid: &str, name: &str) -> String {
    format!("containerd://{}", sha(&[pod_uid, name]))
}

/// A container's status: `state` is the JSON of its state (`{"running": …}`, …).
/// What a kubelet with in-place resize (v1.37) reports of a container's resources: those it
/// gave (`allocatedResources`, the requests) and those in force (`resources`). The API server
/// allows a resize only of pods whose running containers report `resources`.
fn container_status(pod_uid: &str, c: &SlimContainer, ready: bool, restarts: i32, state: Value) -> Value {
    let started = state.get("running").is_some();
    let mut status = json!({
        "name": c.name,
        "image": c.image,
        "imageID": image_id(&c.image),
        "containerID": container_id(pod_uid, &c.name),
        "ready": ready,
        "started": started,
        "restartCount": restarts,
        "state": state,
    });
    if let Some(resources) = c.resources.as_deref().and_then(|r| serde_json::from_str::<Value>(r).ok()) {
        if let Some(requests) = resources.get("requests") {
            status["allocatedResources"] = requests.clone();
        }
        status["resources"] = resources;
    }
    status
}

/// A `terminated` state with `exit_code`.
fn terminated(pod_uid: &str, c: &SlimContainer, exit_code: i32, now: &Value) -> Value {
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    json!({"terminated": {
        "exitCode": exit_code, "reason": reason, "startedAt": now, "finishedAt": now,
        "containerID": container_id(pod_uid, &c.name),
    }})
}

/// A `terminated` state as `exit` says.
fn exited(pod_uid: &str, c: &SlimContainer, exit: &Exit, now: &Value) -> Value {
    let mut state = terminated(pod_uid, c, exit.code, now);
    state["terminated"]["reason"] = exit.reason.clone().into();
    if let Some(m) = &exit.message {
        state["terminated"]["message"] = m.clone().into();
    }
    state
}

fn addresses(status: &mut Value, host_ips: &[IpAddr], pod_ips: &[IpAddr]) {
    if !host_ips.is_empty() {
        status["hostIP"] = host_ips[0].to_string().into();
        status["hostIPs"] = host_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>().into();
    }
    if !pod_ips.is_empty() {
        status["podIP"] = pod_ips[0].to_string().into();
        status["podIPs"] = pod_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>().into();
    }
}

fn running_state(pod_uid: &str, c: &SlimContainer, ready: bool, now: &Value) -> Value {
    container_status(pod_uid, c, ready, 0, json!({"running": {"startedAt": now}}))
}

fn terminated_state(pod_uid: &str, c: &SlimContainer, now: &Value) -> Value {
    container_status(pod_uid, c, false, 0, terminated(pod_uid, c, 0, now))
}

fn cond(type_: &str, status: bool, now: &Value, reason: Option<&str>) -> Value {
    let mut c = json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastTransitionTime": now,
        "lastProbeTime": null,
    });
    if let Some(r) = reason {
        c["reason"] = r.into();
    }
    c
}

/// The status patch that makes a pod Running with the given addresses.
pub fn running_patch(pod: &SlimPod, host_ips: &[IpAddr], pod_ips: &[IpAddr], now: &Value) -> Value {
    let uid = pod.uid();
    let ready = gates_ready(pod);
    let containers: Vec<Value> = pod.containers.iter().map(|c| running_state(uid, c, true, now)).collect();
    let init: Vec<Value> = pod
        .init_containers
        .iter()
        .map(|c| if c.sidecar { running_state(uid, c, true, now) } else { terminated_state(uid, c, now) })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "conditions": [
            cond("PodReadyToStartContainers", true, now, None),
            cond("Initialized", true, now, None),
            cond("ContainersReady", true, now, None),
            cond("Ready", ready, now, (!ready).then_some("ReadinessGatesNotReady")),
        ],
        "hostIP": host_ips.first().map(|ip| ip.to_string()),
        "hostIPs": host_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>(),
        "podIP": pod_ips.first().map(|ip| ip.to_string()),
        "podIPs": pod_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>(),
        "containerStatuses": containers,
    });
    if !init.is_empty() {
        status["initContainerStatuses"] = Value::Array(init);
    }
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
}

/// The status patch of a pod whose init containers run one by one, as the kubelet starts
/// them: its `k`-th regular init container runs (`k + 1 = starts.len()`, started at
/// `starts[k]`), those before it completed (init `j` ran from `starts[j]` to `starts[j + 1]`),
/// the sidecars before it run, the rest wait in PodInitializing. Pending, not Initialized,
/// with its addresses (the sandbox is made).
pub fn init_progress_patch(pod: &SlimPod, ips: (&[IpAddr], &[IpAddr]), starts: &[Value], now: &Value) -> Value {
    let uid = pod.uid();
    let k = starts.len().saturating_sub(1);
    let waiting = json!({"waiting": {"reason": "PodInitializing"}});
    let mut regular = 0;
    let init: Vec<Value> = pod
        .init_containers
        .iter()
        .map(|c| {
            let reached = regular <= k;
            if c.sidecar {
                return if reached {
                    running_state(uid, c, true, now)
                } else {
                    container_status(uid, c, false, 0, waiting.clone())
                };
            }
            let j = regular;
            regular += 1;
            match j.cmp(&k) {
                std::cmp::Ordering::Less => completed_between(uid, c, &starts[j], &starts[j + 1]),
                std::cmp::Ordering::Equal => {
                    container_status(uid, c, false, 0, json!({"running": {"startedAt": starts[j]}}))
                }
                std::cmp::Ordering::Greater => container_status(uid, c, false, 0, waiting.clone()),
            }
        })
        .collect();
    let containers: Vec<Value> =
        pod.containers.iter().map(|c| container_status(uid, c, false, 0, waiting.clone())).collect();
    let mut status = json!({
        "phase": "Pending",
        "conditions": [
            cond("PodReadyToStartContainers", true, now, None),
            cond("Initialized", false, now, Some("ContainersNotInitialized")),
            cond("ContainersReady", false, now, Some("ContainersNotReady")),
            cond("Ready", false, now, Some("ContainersNotReady")),
        ],
        "initContainerStatuses": init,
        "containerStatuses": containers,
    });
    addresses(&mut status, ips.0, ips.1);
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
}

/// An init container that completed, having run from `started` to `finished`.
fn completed_between(pod_uid: &str, c: &SlimContainer, started: &Value, finished: &Value) -> Value {
    let mut s = terminated_state(pod_uid, c, finished);
    s["state"]["terminated"]["startedAt"] = started.clone();
    s
}

/// A running patch of a pod whose regular init containers ran one by one from `starts`
/// (the last until now): their terminated states say when each ran.
pub fn with_init_times(mut patch: Value, pod: &SlimPod, starts: &[Value], now: &Value) -> Value {
    let uid = pod.uid();
    let regular = pod.init_containers.iter().enumerate().filter(|(_, c)| !c.sidecar);
    for (j, (at, c)) in regular.enumerate().take(starts.len()) {
        let finished = starts.get(j + 1).unwrap_or(now);
        if let Some(slot) = patch["status"]["initContainerStatuses"].get_mut(at) {
            *slot = completed_between(uid, c, &starts[j], finished);
        }
    }
    patch
}

/// What a kubelet sets once, when it first takes the pod: `startTime`, and `PodScheduled`
/// for a pod bound by nodeName (the scheduler's, with its time, stays).
fn acknowledged(pod: &SlimPod, status: &mut Value, now: &Value) {
    if pod.start_time.is_none() {
        status["startTime"] = now.clone();
    }
    if pod.condition("PodScheduled").is_none()
        && let Some(conds) = status["conditions"].as_array_mut()
    {
        conds.push(cond("PodScheduled", true, now, None));
    }
}

/// The status patch of a pod the kubelet has taken but not started (its start delay runs):
/// Pending, containers waiting in ContainerCreating, host addresses and startTime set.
pub fn pending_patch(pod: &SlimPod, host_ips: &[IpAddr], now: &Value) -> Value {
    let creating = json!({"waiting": {"reason": "ContainerCreating"}});
    let containers: Vec<Value> =
        pod.containers.iter().map(|c| container_status(pod.uid(), c, false, 0, creating.clone())).collect();
    let mut status = json!({
        "phase": "Pending",
        "conditions": [
            cond("PodReadyToStartContainers", false, now, None),
            cond("Initialized", true, now, None),
            cond("ContainersReady", false, now, Some("ContainersNotReady")),
            cond("Ready", false, now, Some("ContainersNotReady")),
        ],
        "hostIP": host_ips.first().map(|ip| ip.to_string()),
        "hostIPs": host_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>(),
        "containerStatuses": containers,
    });
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
}

fn crashed_state(pod_uid: &str, c: &SlimContainer, restarts: i32, exit: &Exit, now: &Value) -> Value {
    let message = format!("back-off restarting failed container {} (simulated by kwok-pools)", c.name);
    let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
    let mut s = container_status(pod_uid, c, false, restarts, waiting);
    s["lastState"] = exited(pod_uid, c, exit, now);
    s
}

/// The status patch of a pod whose containers crashed (as `exit` says: all, or the one it
/// names) and wait in CrashLoopBackOff with `restarts` restarts: Running, not ready, as a
/// kubelet reports it. The others keep running.
pub fn crashed_patch(pod: &SlimPod, restarts: i32, exit: &Exit, now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            if exit.hits(&c.name) {
                crashed_state(uid, c, restarts, exit, now)
            } else {
                container_status(uid, c, true, 0, json!({"running": {"startedAt": since(pod, now)}}))
            }
        })
        .collect();
    json!({ "status": {
        "conditions": [
            cond("ContainersReady", false, now, Some("ContainersNotReady")),
            cond("Ready", false, now, Some("ContainersNotReady")),
        ],
        "containerStatuses": containers,
    }})
}

/// When the pod's containers started running (now, if the store does not say).
fn since(pod: &SlimPod, now: &Value) -> Value {
    pod.running_since.map_or_else(|| now.clone(), |t| t.to_string().into())
}

/// The status patch of a crash-looping pod whose containers run again after a back-off.
pub fn restarted_patch(pod: &SlimPod, restarts: i32, exit: &Exit, now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            if exit.hits(&c.name) {
                let mut s = container_status(uid, c, true, restarts, json!({"running": {"startedAt": now}}));
                s["lastState"] = exited(uid, c, exit, now);
                s
            } else {
                container_status(uid, c, true, 0, json!({"running": {"startedAt": since(pod, now)}}))
            }
        })
        .collect();
    let ready = gates_ready(pod);
    json!({ "status": {
        "conditions": [
            cond("ContainersReady", true, now, None),
            cond("Ready", ready, now, (!ready).then_some("ReadinessGatesNotReady")),
        ],
        "containerStatuses": containers,
    }})
}

/// The status patch of a pod whose containers exited as `exit` says and that is not
/// restarted (`restartPolicy: Never`): Failed. Its other containers are reported finished.
pub fn failed_patch(pod: &SlimPod, host_ips: &[IpAddr], exit: &Exit, now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let state = if exit.hits(&c.name) { exited(uid, c, exit, now) } else { terminated(uid, c, 0, now) };
            container_status(uid, c, false, 0, ran_since(state, pod, now))
        })
        .collect();
    let mut status = json!({
        "phase": "Failed",
        "conditions": [
            cond("PodReadyToStartContainers", false, now, None),
            cond("Initialized", true, now, None),
            cond("ContainersReady", false, now, Some("PodFailed")),
            cond("Ready", false, now, Some("PodFailed")),
        ],
        "containerStatuses": containers,
    });
    // A pod that ran keeps the host addresses it has.
    addresses(&mut status, host_ips, &[]);
    acknowledged(pod, &mut status, now);
    end_init_containers(pod, &mut status, now);
    json!({ "status": status })
}

/// The status patch of a pod the kubelet's admission refused: Failed, with the check's reason
/// and "Pod was rejected: " before its message, as the kubelet's `rejectPod` writes it.
pub fn rejected_patch(r: &super::admission::Rejection) -> Value {
    json!({"status": {"phase": "Failed", "reason": r.reason, "message": format!("Pod was rejected: {}", r.message)}})
}

/// The status patch of a pod whose images do not pull: Pending, its containers waiting in
/// `ErrImagePull` (first) or `ImagePullBackOff` (after), as a kubelet shows a wrong image.
pub fn image_pull_patch(
    pod: &SlimPod,
    host_ips: &[IpAddr],
    pod_ips: &[IpAddr],
    backing_off: bool,
    now: &Value,
) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let waiting = if backing_off {
                json!({"reason": "ImagePullBackOff", "message": format!("Back-off pulling image {:?}", c.image)})
            } else {
                json!({"reason": "ErrImagePull", "message": format!(
                    "failed to pull and unpack image {:?}: simulated by kwok-pools (the pod's pools.kwok.x-k8s.io/image-pull annotation or its pool's imagePullFailPercent)",
                    c.image
                )})
            };
            container_status(uid, c, false, 0, json!({ "waiting": waiting }))
        })
        .collect();
    let mut status = json!({
        "phase": "Pending",
        "conditions": [
            cond("PodReadyToStartContainers", true, now, None),
            cond("Initialized", true, now, None),
            cond("ContainersReady", false, now, Some("ContainersNotReady")),
            cond("Ready", false, now, Some("ContainersNotReady")),
        ],
        "containerStatuses": containers,
    });
    addresses(&mut status, host_ips, pod_ips);
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
}

/// The status patch of a pod whose init container (`exit.container`, else the first) failed
/// for the `restarts`-th time: Pending with `Init:Error` the first time, then
/// `Init:CrashLoopBackOff`; Failed when the pod is never restarted. Init containers before it
/// finished (sidecars run); the app containers wait in `PodInitializing`.
pub fn init_failed_patch(pod: &SlimPod, ips: (&[IpAddr], &[IpAddr]), exit: &Exit, restarts: i32, now: &Value) -> Value {
    let uid = pod.uid();
    let never = pod.restart_policy.as_deref() == Some("Never");
    let failing = pod.init_containers.iter().position(|c| !c.sidecar && exit.hits(&c.name)).unwrap_or(0);
    let init: Vec<Value> = pod
        .init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i < failing {
                if c.sidecar { running_state(uid, c, true, now) } else { terminated_state(uid, c, now) }
            } else if i == failing {
                if never || restarts == 0 {
                    container_status(uid, c, false, restarts, exited(uid, c, exit, now))
                } else {
                    crashed_state(uid, c, restarts, exit, now)
                }
            } else {
                container_status(uid, c, false, 0, json!({"waiting": {"reason": "PodInitializing"}}))
            }
        })
        .collect();
    let waiting = json!({"waiting": {"reason": "PodInitializing"}});
    let containers: Vec<Value> =
        pod.containers.iter().map(|c| container_status(uid, c, false, 0, waiting.clone())).collect();
    let (phase, why) = if never { ("Failed", "PodFailed") } else { ("Pending", "ContainersNotReady") };
    let mut status = json!({
        "phase": phase,
        "conditions": [
            cond("PodReadyToStartContainers", !never, now, None),
            cond("Initialized", false, now, Some("ContainersNotInitialized")),
            cond("ContainersReady", false, now, Some(why)),
            cond("Ready", false, now, Some(why)),
        ],
        "initContainerStatuses": init,
        "containerStatuses": containers,
    });
    addresses(&mut status, ips.0, if never { &[] } else { ips.1 });
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
}

/// The status patch of a running pod whose readiness probe starts failing (`passing`
/// false) or passes again: its containers' `ready`, ContainersReady and Ready.
pub fn probe_patch(pod: &SlimPod, passing: bool, now: &Value) -> Value {
    let uid = pod.uid();
    let started = since(pod, now);
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| container_status(uid, c, passing, pod.restart_count, json!({"running": {"startedAt": started}})))
        .collect();
    let ready = passing && gates_ready(pod);
    let reason = if !passing { Some("ContainersNotReady") } else { (!ready).then_some("ReadinessGatesNotReady") };
    json!({ "status": {
        "conditions": [
            cond("ContainersReady", passing, now, (!passing).then_some("ContainersNotReady")),
            cond("Ready", ready, now, reason),
        ],
        "containerStatuses": containers,
    }})
}

/// `base` with `over` laid on it: container statuses replaced, conditions replaced by type.
pub fn with(mut base: Value, over: Value) -> Value {
    if let Some(c) = over["status"].get("containerStatuses") {
        base["status"]["containerStatuses"] = c.clone();
    }
    let replacing: Vec<Value> = over["status"]["conditions"].as_array().cloned().unwrap_or_default();
    if let Some(conds) = base["status"]["conditions"].as_array_mut() {
        for new in replacing {
            match conds.iter_mut().find(|c| c["type"] == new["type"]) {
                Some(old) => *old = new,
                None => conds.push(new),
            }
        }
    }
    base
}

/// A terminated `state` that started when the pod's containers started running (a kubelet
/// reports when the container that ended had started).
fn ran_since(mut state: Value, pod: &SlimPod, now: &Value) -> Value {
    state["terminated"]["startedAt"] = since(pod, now);
    state
}

/// The init containers of a pod that has ended: the plain ones Completed long ago, the sidecars
/// stopped once the main containers exited (the kubelet ends them last), exit 0. Added to `status`
/// when the pod has any.
fn end_init_containers(pod: &SlimPod, status: &mut Value, now: &Value) {
    if pod.init_containers.is_empty() {
        return;
    }
    let uid = pod.uid();
    let statuses: Vec<Value> = pod
        .init_containers
        .iter()
        .map(|c| {
            let state =
                if c.sidecar { ran_since(terminated(uid, c, 0, now), pod, now) } else { terminated(uid, c, 0, now) };
            container_status(uid, c, false, 0, state)
        })
        .collect();
    status["initContainerStatuses"] = Value::Array(statuses);
}

/// The status patch of a pod whose containers all exited 0 (a finished Job pod).
pub fn completed_patch(pod: &SlimPod, now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| container_status(uid, c, false, 0, ran_since(terminated(uid, c, 0, now), pod, now)))
        .collect();
    let mut status = json!({
        "phase": "Succeeded",
        "conditions": [
            cond("PodReadyToStartContainers", false, now, None),
            cond("ContainersReady", false, now, Some("PodCompleted")),
            cond("Ready", false, now, Some("PodCompleted")),
        ],
        "containerStatuses": containers,
    });
    end_init_containers(pod, &mut status, now);
    json!({ "status": status })
}

/// How a deleted pod's containers ended, as its runtime reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// They stopped on SIGTERM within the grace period (exit 143).
    Signalled,
    /// They ignored SIGTERM and were killed when the grace period ran out (exit 137).
    Killed,
    /// They never ran (the pod was deleted before it started): the kubelet's
    /// `ContainerStatusUnknown`.
    NeverStarted,
}

/// The status patch of a deleted pod whose containers have stopped: its terminal phase and
/// terminated container states, which the kubelet (since 1.27) writes before the final delete,
/// so a Job controller sees the pod end (`podFailurePolicy`, `podReplacementPolicy: Failed`).
pub fn terminated_patch(pod: &SlimPod, ending: Ending, now: &Value) -> Value {
    let uid = pod.uid();
    let state = |c: &SlimContainer| match ending {
        Ending::Signalled => ran_since(terminated(uid, c, 143, now), pod, now),
        Ending::Killed => ran_since(terminated(uid, c, 137, now), pod, now),
        Ending::NeverStarted => json!({"terminated": {
            "exitCode": 137, "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "startedAt": null, "finishedAt": now,
        }}),
    };
    let statuses = |list: &[SlimContainer]| -> Vec<Value> {
        list.iter().map(|c| container_status(uid, c, false, pod.restart_count, state(c))).collect()
    };
    let mut status = json!({
        "phase": "Failed",
        "conditions": [
            cond("PodReadyToStartContainers", false, now, None),
            cond("ContainersReady", false, now, Some("PodFailed")),
            cond("Ready", false, now, Some("PodFailed")),
        ],
        "containerStatuses": statuses(&pod.containers),
    });
    if ending == Ending::NeverStarted && !pod.init_containers.is_empty() {
        status["initContainerStatuses"] = statuses(&pod.init_containers).into();
    }
    json!({ "status": status })
}

/// The status patch of a pod past its `activeDeadlineSeconds`: the kubelet stops its
/// containers and fails it with reason `DeadlineExceeded`.
pub fn deadline_patch(pod: &SlimPod, now: &Value) -> Value {
    let ending = if is_running(pod) { Ending::Signalled } else { Ending::NeverStarted };
    let mut patch = terminated_patch(pod, ending, now);
    patch["status"]["reason"] = "DeadlineExceeded".into();
    patch["status"]["message"] = "Pod was active on the node longer than the specified deadline".into();
    patch
}

/// When readiness gates change on a running pod: the Ready condition it should show now, if
/// it differs from what it shows.
/// The statuses of a running pod's ephemeral containers (`kubectl debug`), when one has none
/// yet: each running (since it first was), never ready, as the kubelet reports them. The list
/// is written whole (it has no merge key).
pub fn ephemeral_patch(pod: &SlimPod, now: &Value) -> Option<Value> {
    let list = pod.ephemeral()?;
    if pod.phase() != "Running" || list.iter().all(|e| e.started_at.is_some()) {
        return None;
    }
    let statuses: Vec<Value> = list
        .iter()
        .map(|e| {
            let since = e.started_at.map_or_else(|| now.clone(), |t| json!(t.to_string()));
            container_status(pod.uid(), &e.container, false, 0, json!({"running": {"startedAt": since}}))
        })
        .collect();
    Some(json!({"status": {"ephemeralContainerStatuses": statuses}}))
}

pub fn ready_fix(pod: &SlimPod, now: &Value) -> Option<Value> {
    if pod.phase() != "Running" || pod.condition("ContainersReady") == Some("False") {
        // A crash-looping pod, or one whose probe fails, is not ready whatever its gates say.
        return None;
    }
    let want = gates_ready(pod) && !pod.crash_looping;
    if is_ready(pod) == want {
        return None;
    }
    Some(json!({ "status": { "conditions": [cond("Ready", want, now, (!want).then_some("ReadinessGatesNotReady"))] } }))
}

#[cfg(test)]
mod ephemeral_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, EphemeralContainer, Pod, PodSpec, PodStatus,
    };

    fn debugged(phase: &str, started: &[&str]) -> SlimPod {
        let debug =
            |name: &str| EphemeralContainer { name: name.into(), image: Some("busybox".into()), ..Default::default() };
        let status = |name: &str| ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        "2026-01-02T03:04:05Z".parse().unwrap(),
                    )),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        SlimPod::from(Pod {
            metadata: kube::api::ObjectMeta { uid: Some("u1".into()), ..Default::default() },
            spec: Some(PodSpec {
                ephemeral_containers: Some(vec![debug("dbg-1"), debug("dbg-2")]),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ephemeral_container_statuses: Some(started.iter().map(|n| status(n)).collect()),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn a_new_ephemeral_container_runs_and_the_others_keep_their_start() {
        let patch = ephemeral_patch(&debugged("Running", &["dbg-1"]), &json!("now")).expect("dbg-2 has no status");
        let list = patch["status"]["ephemeralContainerStatuses"].as_array().unwrap();
        assert_eq!(list.len(), 2, "the whole list");
        assert_eq!(list[0]["state"]["running"]["startedAt"], "2026-01-02T03:04:05Z", "dbg-1 keeps its start");
        assert_eq!(list[1]["state"]["running"]["startedAt"], "now");
        assert_eq!((list[1]["name"].as_str(), list[1]["ready"].as_bool()), (Some("dbg-2"), Some(false)));
        assert!(list[1]["containerID"].as_str().unwrap().starts_with("containerd://"));
        assert_eq!(ephemeral_patch(&debugged("Running", &["dbg-1", "dbg-2"]), &json!("now")), None, "all reported");
        assert_eq!(ephemeral_patch(&debugged("Pending", &[]), &json!("now")), None, "not before the pod runs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodReadinessGate, PodSpec, PodStatus};

    fn pod(gates: &[&str], conditions: &[(&str, &str)]) -> SlimPod {
        SlimPod::from(Pod {
            metadata: kube::api::ObjectMeta { uid: Some("u1".into()), ..Default::default() },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("nginx:1.27".into()),
                    ..Default::default()
                }],
                init_containers: Some(vec![
                    Container { name: "setup".into(), image: Some("busybox".into()), ..Default::default() },
                    Container {
                        name: "proxy".into(),
                        image: Some("envoy".into()),
                        restart_policy: Some("Always".into()),
                        ..Default::default()
                    },
                ]),
                readiness_gates: Some(
                    gates.iter().map(|g| PodReadinessGate { condition_type: g.to_string() }).collect(),
                ),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| PodCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn an_ended_pods_sidecars_are_stopped_not_running() {
        let p = pod(&[], &[]);
        for patch in [completed_patch(&p, &json!("t")), failed_patch(&p, &[], &Exit::error(1), &json!("t"))] {
            let init = patch["status"]["initContainerStatuses"].as_array().unwrap();
            assert_eq!(init.len(), 2, "{patch}");
            for c in init {
                assert!(c["state"].get("running").is_none(), "{c}");
                assert_eq!(c["state"]["terminated"]["exitCode"], 0, "{c}");
            }
        }
    }

    #[test]
    fn running_patch_has_everything_kubectl_shows() {
        let p = pod(&[], &[]);
        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        let host: IpAddr = "100.64.0.1".parse().unwrap();
        let v = running_patch(&p, &[host], &[ip], &json!("2026-01-01T00:00:00Z"));
        let s = &v["status"];
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.0.0.5");
        assert_eq!(s["hostIPs"][0]["ip"], "100.64.0.1");
        let c = &s["containerStatuses"][0];
        assert_eq!((c["ready"].clone(), c["restartCount"].clone()), (json!(true), json!(0)));
        assert!(c["containerID"].as_str().unwrap().starts_with("containerd://"));
        assert!(c["imageID"].as_str().unwrap().starts_with("nginx@sha256:"));
        let init = &s["initContainerStatuses"];
        assert_eq!(init[0]["state"]["terminated"]["reason"], "Completed");
        assert!(init[1]["state"]["running"].is_object(), "sidecars keep running");
        let ready = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
    }

    #[test]
    fn readiness_gates_hold_ready_back() {
        let p = pod(&["example.com/lb"], &[]);
        assert!(!gates_ready(&p));
        let v = running_patch(&p, &[], &[], &json!("t"));
        let ready =
            v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
        assert_eq!(ready["status"], "False");
        let mut running = pod(&["example.com/lb"], &[("Ready", "False"), ("example.com/lb", "True")]);
        running.phase = Some("Running".into());
        assert!(gates_ready(&running));
        let fix = ready_fix(&running, &json!("t")).unwrap();
        assert_eq!(fix["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn crash_loops_look_as_a_kubelet_shows_them() {
        let p = pod(&[], &[]);
        let v = crashed_patch(&p, 3, &Exit::error(1), &json!("t"));
        let c = &v["status"]["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!((c["restartCount"].clone(), c["ready"].clone()), (json!(3), json!(false)));
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        let ready =
            v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
        assert_eq!((ready["status"].clone(), ready["reason"].clone()), (json!("False"), json!("ContainersNotReady")));
        let v = restarted_patch(&p, 3, &Exit::error(1), &json!("t"));
        let c = &v["status"]["containerStatuses"][0];
        assert!(c["state"]["running"].is_object());
        assert_eq!((c["restartCount"].clone(), c["ready"].clone()), (json!(3), json!(true)));
        // Once the store shows the crash, nothing flips Ready back on.
        let mut crashed = pod(&[], &[("Ready", "False")]);
        crashed.phase = Some("Running".into());
        crashed.crash_looping = true;
        assert_eq!(ready_fix(&crashed, &json!("t")), None);
        let f = failed_patch(&p, &[], &Exit::error(1), &json!("t"));
        assert_eq!(f["status"]["phase"], "Failed");
        assert_eq!(f["status"]["startTime"], "t", "a pod that never started gets its startTime");
        assert_eq!(f["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 1);
    }

    #[test]
    fn outcomes_show_their_exit_code_and_reason() {
        let mut p = pod(&[], &[]);
        p.containers.push(SlimContainer { name: "side".into(), image: "busybox".into(), ..Default::default() });
        let oom = Exit { container: Some("app".into()), ..Exit::oom_killed() };
        let v = crashed_patch(&p, 1, &oom, &json!("t"));
        let app = &v["status"]["containerStatuses"][0];
        assert_eq!(app["lastState"]["terminated"]["reason"], "OOMKilled");
        assert_eq!(app["lastState"]["terminated"]["exitCode"], 137);
        assert!(v["status"]["containerStatuses"][1]["state"]["running"].is_object(), "the other one runs on");
        let f = failed_patch(&p, &[], &Exit { message: Some("boom".into()), ..Exit::error(42) }, &json!("t"));
        let t = &f["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!((t["exitCode"].as_i64(), t["message"].as_str()), (Some(42), Some("boom")));

        let ip: IpAddr = "10.0.0.5".parse().unwrap();
        let pull = image_pull_patch(&p, &[], &[ip], false, &json!("t"));
        assert_eq!(pull["status"]["phase"], "Pending");
        assert_eq!(pull["status"]["podIP"], "10.0.0.5", "the sandbox has its address");
        assert_eq!(pull["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ErrImagePull");
        let back = image_pull_patch(&p, &[], &[ip], true, &json!("t"));
        assert_eq!(back["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ImagePullBackOff");

        // The first init container fails: Init:Error, then Init:CrashLoopBackOff.
        let first = init_failed_patch(&p, (&[], &[ip]), &Exit::error(2), 0, &json!("t"));
        let init = &first["status"]["initContainerStatuses"];
        assert_eq!(init[0]["state"]["terminated"]["exitCode"], 2);
        assert_eq!(init[1]["state"]["waiting"]["reason"], "PodInitializing");
        assert_eq!(first["status"]["phase"], "Pending");
        assert_eq!(first["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing");
        let again = init_failed_patch(&p, (&[], &[ip]), &Exit::error(2), 2, &json!("t"));
        assert_eq!(again["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(again["status"]["initContainerStatuses"][0]["restartCount"], 2);
        p.restart_policy = Some("Never".into());
        assert_eq!(init_failed_patch(&p, (&[], &[ip]), &Exit::error(2), 0, &json!("t"))["status"]["phase"], "Failed");
    }

    #[test]
    fn a_failing_probe_takes_readiness_and_a_passing_one_gives_it_back() {
        let mut p = pod(&[], &[("Ready", "True"), ("ContainersReady", "True")]);
        p.phase = Some("Running".into());
        let v = probe_patch(&p, false, &json!("t"));
        assert_eq!(v["status"]["containerStatuses"][0]["ready"], false);
        let ready = v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ContainersNotReady")));
        let v = probe_patch(&p, true, &json!("t"));
        assert_eq!(v["status"]["containerStatuses"][0]["ready"], true);
        // While the probe fails, readiness gates do not flip Ready back.
        let failing = pod(&[], &[("Ready", "False"), ("ContainersReady", "False")]);
        assert_eq!(ready_fix(&SlimPod { phase: Some("Running".into()), ..failing }, &json!("t")), None);
    }

    #[test]
    fn the_kubelet_sets_start_time_and_pod_scheduled_once() {
        let mut scheduled = pod(&[], &[("PodScheduled", "True")]);
        let v = running_patch(&scheduled, &[], &[], &json!("t"));
        assert!(!v["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "PodScheduled"));
        assert_eq!(v["status"]["startTime"], "t");
        scheduled.start_time = Some(k8s_openapi::jiff::Timestamp::from_second(5).unwrap());
        let v = running_patch(&scheduled, &[], &[], &json!("t"));
        assert!(v["status"].get("startTime").is_none(), "startTime is not moved");
        // Bound by nodeName, without the scheduler: the kubelet reports PodScheduled.
        let v = running_patch(&pod(&[], &[]), &[], &[], &json!("t"));
        assert!(v["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "PodScheduled"));
        let p = pending_patch(&pod(&[], &[]), &[], &json!("t"));
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating");
    }

    #[test]
    fn completed_pods_exit_zero() {
        let v = completed_patch(&pod(&[], &[]), &json!("t"));
        assert_eq!(v["status"]["phase"], "Succeeded");
        assert_eq!(v["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0);
        // A kubelet reports when the container that ended had started.
        let mut ran = pod(&[], &[]);
        ran.running_since = Some("2026-01-02T03:04:05Z".parse().unwrap());
        let t = &completed_patch(&ran, &json!("t"))["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!((t["startedAt"].as_str(), t["finishedAt"].as_str()), (Some("2026-01-02T03:04:05Z"), Some("t")));
        let t = &terminated_patch(&ran, Ending::Signalled, &json!("t"))["status"]["containerStatuses"][0]["state"];
        assert_eq!(t["terminated"]["startedAt"], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn a_deleted_pod_ends_failed_with_its_containers_exit() {
        let p = pod(&[], &[]);
        for (ending, code, reason) in [
            (Ending::Signalled, 143, "Error"),
            (Ending::Killed, 137, "Error"),
            (Ending::NeverStarted, 137, "ContainerStatusUnknown"),
        ] {
            let v = terminated_patch(&p, ending, &json!("t"));
            assert_eq!(v["status"]["phase"], "Failed", "{ending:?}");
            let state = &v["status"]["containerStatuses"][0]["state"]["terminated"];
            assert_eq!(
                (state["exitCode"].as_i64(), state["reason"].as_str()),
                (Some(code), Some(reason)),
                "{ending:?}"
            );
            assert_eq!(v["status"]["containerStatuses"][0]["ready"], false);
            let ready = v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
            assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("PodFailed")));
        }
        // Init containers of a pod that never started are reported too; of one that ran, kept.
        assert!(
            terminated_patch(&p, Ending::NeverStarted, &json!("t"))["status"].get("initContainerStatuses").is_some()
        );
        assert!(terminated_patch(&p, Ending::Signalled, &json!("t"))["status"].get("initContainerStatuses").is_none());
    }

    #[test]
    fn a_pod_past_its_deadline_fails_with_the_kubelets_reason() {
        let v = deadline_patch(&pod(&[], &[]), &json!("t"));
        assert_eq!(v["status"]["phase"], "Failed");
        assert_eq!(v["status"]["reason"], "DeadlineExceeded");
        assert_eq!(v["status"]["message"], "Pod was active on the node longer than the specified deadline");
    }
}
