//! What a kubelet reports about a pod it runs, built without a kubelet. Pure: patches for
//! the status subresource (strategic merge: conditions merge by type, so conditions other
//! controllers own, such as readiness gates, are kept).

use crate::informer::pod::{SlimContainer, SlimPod};
pub use crate::kubelet::pod::{gates_ready, host_network, is_ready, is_running, is_terminal, phase, pod_ips};
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

fn container_id(pod_uid: &str, name: &str) -> String {
    format!("containerd://{}", sha(&[pod_uid, name]))
}

/// A container's status: `state` is the JSON of its state (`{"running": …}`, …).
fn container_status(pod_uid: &str, c: &SlimContainer, ready: bool, restarts: i32, state: Value) -> Value {
    let started = state.get("running").is_some();
    json!({
        "name": c.name,
        "image": c.image,
        "imageID": image_id(&c.image),
        "containerID": container_id(pod_uid, &c.name),
        "ready": ready,
        "started": started,
        "restartCount": restarts,
        "state": state,
    })
}

/// A `terminated` state with `exit_code`.
fn terminated(pod_uid: &str, c: &SlimContainer, exit_code: i32, now: &Value) -> Value {
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    json!({"terminated": {
        "exitCode": exit_code, "reason": reason, "startedAt": now, "finishedAt": now,
        "containerID": container_id(pod_uid, &c.name),
    }})
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

fn crashed_state(pod_uid: &str, c: &SlimContainer, restarts: i32, now: &Value) -> Value {
    let message = format!("back-off restarting failed container {} (simulated by kwok-pools)", c.name);
    let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
    let mut s = container_status(pod_uid, c, false, restarts, waiting);
    s["lastState"] = terminated(pod_uid, c, 1, now);
    s
}

/// The status patch of a pod whose containers crashed (exit 1) and wait in CrashLoopBackOff
/// with `restarts` restarts: Running, not ready, as a kubelet reports it.
pub fn crashed_patch(pod: &SlimPod, restarts: i32, now: &Value) -> Value {
    let containers: Vec<Value> = pod.containers.iter().map(|c| crashed_state(pod.uid(), c, restarts, now)).collect();
    json!({ "status": {
        "conditions": [
            cond("ContainersReady", false, now, Some("ContainersNotReady")),
            cond("Ready", false, now, Some("ContainersNotReady")),
        ],
        "containerStatuses": containers,
    }})
}

/// The status patch of a crash-looping pod whose containers run again after a back-off.
pub fn restarted_patch(pod: &SlimPod, restarts: i32, now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let mut s = container_status(uid, c, true, restarts, json!({"running": {"startedAt": now}}));
            s["lastState"] = terminated(uid, c, 1, now);
            s
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

/// The status patch of a pod whose containers exited 1 at start and that is not restarted
/// (`restartPolicy: Never`): Failed.
pub fn failed_patch(pod: &SlimPod, host_ips: &[IpAddr], now: &Value) -> Value {
    let uid = pod.uid();
    let containers: Vec<Value> =
        pod.containers.iter().map(|c| container_status(uid, c, false, 0, terminated(uid, c, 1, now))).collect();
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
    if !host_ips.is_empty() {
        status["hostIP"] = host_ips[0].to_string().into();
        status["hostIPs"] = host_ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>().into();
    }
    acknowledged(pod, &mut status, now);
    json!({ "status": status })
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

/// The status patch of a pod whose containers all exited 0 (a finished Job pod).
pub fn completed_patch(pod: &SlimPod, now: &Value) -> Value {
    let containers: Vec<Value> = pod.containers.iter().map(|c| terminated_state(pod.uid(), c, now)).collect();
    json!({ "status": {
        "phase": "Succeeded",
        "conditions": [
            cond("PodReadyToStartContainers", false, now, None),
            cond("ContainersReady", false, now, Some("PodCompleted")),
            cond("Ready", false, now, Some("PodCompleted")),
        ],
        "containerStatuses": containers,
    }})
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
        Ending::Signalled => terminated(uid, c, 143, now),
        Ending::Killed => terminated(uid, c, 137, now),
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
pub fn ready_fix(pod: &SlimPod, now: &Value) -> Option<Value> {
    if pod.phase() != "Running" {
        return None;
    }
    // A crash-looping pod is not ready whatever its gates say.
    let want = gates_ready(pod) && !pod.crash_looping;
    if is_ready(pod) == want {
        return None;
    }
    Some(json!({ "status": { "conditions": [cond("Ready", want, now, (!want).then_some("ReadinessGatesNotReady"))] } }))
}

/// Whether a Job owns the pod (its containers finish).
pub fn owned_by_job(pod: &SlimPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Job" && o.api_version.starts_with("batch/"))
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
        let v = crashed_patch(&p, 3, &json!("t"));
        let c = &v["status"]["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!((c["restartCount"].clone(), c["ready"].clone()), (json!(3), json!(false)));
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        let ready =
            v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
        assert_eq!((ready["status"].clone(), ready["reason"].clone()), (json!("False"), json!("ContainersNotReady")));
        let v = restarted_patch(&p, 3, &json!("t"));
        let c = &v["status"]["containerStatuses"][0];
        assert!(c["state"]["running"].is_object());
        assert_eq!((c["restartCount"].clone(), c["ready"].clone()), (json!(3), json!(true)));
        // Once the store shows the crash, nothing flips Ready back on.
        let mut crashed = pod(&[], &[("Ready", "False")]);
        crashed.phase = Some("Running".into());
        crashed.crash_looping = true;
        assert_eq!(ready_fix(&crashed, &json!("t")), None);
        let f = failed_patch(&p, &[], &json!("t"));
        assert_eq!(f["status"]["phase"], "Failed");
        assert_eq!(f["status"]["startTime"], "t", "a pod that never started gets its startTime");
        assert_eq!(f["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 1);
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
