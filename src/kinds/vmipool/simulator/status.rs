//! What KubeVirt's virt-controller and virt-handler would write for a VMI, built without them.
//! Pure: the next step for a VMI given its launcher pod, the launcher pod itself, and the
//! merge patches of each phase (only fields KubeVirt's own schema has, so a structural CRD
//! keeps them).

use crate::informer::pod::SlimPod;
use crate::kinds::vmipool::kubevirt::{VirtualMachineInstance, VmiSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodReadinessGate, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The finalizer KubeVirt puts on every VMI.
pub const FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// The readiness gate of a launcher pod (True while the VM is not paused).
pub const UNPAUSED_GATE: &str = "kubevirt.io/virtual-machine-unpaused";
/// Labels of launcher pods.
/// KubeVirt's labels on a launcher pod: `kubevirt.io=virt-launcher`, and the VMI's UID.
pub const APP_LABEL: &str = "kubevirt.io";
pub const CREATED_BY_LABEL: &str = "kubevirt.io/created-by";
pub const NODE_NAME_LABEL: &str = "kubevirt.io/nodeName";
/// The launcher image the simulated pods name (never pulled).
pub const LAUNCHER_IMAGE: &str = "quay.io/kubevirt/virt-launcher:v1.9.0";
/// Memory the launcher needs beyond the guest's, as KubeVirt counts it on KVM: page tables
/// (guest/512), fixed parts of the launcher and QEMU (~220Mi), 8Mi per vCPU, an IO thread
/// (8Mi) and a video device (32Mi).
fn overhead_mib(guest_mib: i64, vcpus: i64) -> i64 {
    (guest_mib / 512).saturating_add(260).saturating_add(vcpus.saturating_mul(8))
}

/// What the simulator does next for a VMI.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing now.
    Wait,
    /// Admit it, as the mutating webhook and virt-controller do: Pending, finalizer, default
    /// pod network.
    Admit,
    /// Create its launcher pod (then Scheduling).
    CreateLauncher,
    /// Its launcher pod exists (created before a restart): Scheduling.
    Scheduling,
    /// Mirror why the scheduler cannot place the launcher pod.
    Unschedulable(String, String),
    /// Set the launcher pod's readiness gate.
    Unpause,
    /// The launcher pod is ready on `node`: Scheduled.
    Scheduled,
    /// The VM "boots": Running.
    Running,
    /// The launcher pod is gone or failed: Failed.
    Fail(String),
    /// Deleted while not yet ended: its terminal phase first, as virt-handler's shutdown
    /// writes it (Succeeded for a VM that ran, Failed for one that never started).
    Stop { ran: bool },
    /// Deleting: delete the launcher pod first.
    DeleteLauncher,
    /// Deleting and the pod is gone: drop the finalizer.
    Release,
}

/// The next step for `vmi` given its launcher pod (`None`: there is none). `controller`:
/// this process plays virt-controller (else only virt-handler's Scheduled → Running).
/// `managed`: the VMI's node (or the pod's) is one this simulator manages.
pub fn next_step(vmi: &VirtualMachineInstance, pod: Option<&SlimPod>, controller: bool, managed: bool) -> Step {
    let phase = vmi.phase();
    if !controller {
        return if phase == "Scheduled" && managed && vmi.metadata.deletion_timestamp.is_none() {
            Step::Running
        } else {
            Step::Wait
        };
    }
    if vmi.metadata.deletion_timestamp.is_some() {
        let holds = vmi.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER);
        if holds && !matches!(phase, "" | "Succeeded" | "Failed") {
            return Step::Stop { ran: matches!(phase, "Scheduled" | "Running") };
        }
        return match pod {
            Some(p) if p.metadata.deletion_timestamp.is_none() => Step::DeleteLauncher,
            Some(_) => Step::Wait,
            None if vmi.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER) => Step::Release,
            None => Step::Wait,
        };
    }
    match (phase, pod) {
        ("", _) => Step::Admit,
        ("Pending", None) => Step::CreateLauncher,
        ("Succeeded" | "Failed", _) => Step::Wait,
        ("Pending", Some(_)) => Step::Scheduling,
        (_, None) => Step::Fail("the virt-launcher pod is gone".into()),
        (_, Some(p)) if p.metadata.deletion_timestamp.is_some() => {
            Step::Fail(format!("the virt-launcher pod {} is being deleted", p.name()))
        }
        (_, Some(p)) if p.phase() == "Failed" || p.phase() == "Succeeded" => {
            Step::Fail(format!("the virt-launcher pod {} ended ({})", p.name(), p.phase()))
        }
        (_, Some(p)) if !managed => unschedulable(vmi, p),
        // Bound to a managed node: unpaused before its kubelet (the pod simulator) runs it, so
        // the pod turns Running and Ready in one write.
        ("Scheduling", Some(p)) if p.condition(UNPAUSED_GATE) != Some("True") => Step::Unpause,
        ("Scheduling", Some(p)) if p.condition("Ready") == Some("True") => Step::Scheduled,
        ("Scheduled", Some(_)) => Step::Running,
        _ => Step::Wait,
    }
}

/// A launcher pod not on a managed node: the scheduler's reason, once per change.
fn unschedulable(vmi: &VirtualMachineInstance, pod: &SlimPod) -> Step {
    let Some(why) = pod.unschedulable.as_deref() else { return Step::Wait };
    let shown = vmi.condition("PodScheduled");
    let same = shown
        .is_some_and(|c| c.reason.as_deref() == Some(why.0.as_str()) && c.message.as_deref() == Some(why.1.as_str()));
    if same { Step::Wait } else { Step::Unschedulable(why.0.clone(), why.1.clone()) }
}

/// The status entry for a phase change, and the list with it appended.
fn transitions(vmi: &VirtualMachineInstance, phase: &str, now: &Value) -> Value {
    let mut list =
        vmi.status.as_ref().and_then(|s| s.rest.get("phaseTransitionTimestamps")).cloned().unwrap_or(json!([]));
    if let Some(items) = list.as_array_mut() {
        items.push(json!({"phase": phase, "phaseTransitionTimestamp": now}));
    }
    list
}

/// When the VMI last entered `phase`, from its `phaseTransitionTimestamps`.
pub fn phase_since(vmi: &VirtualMachineInstance, phase: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    let list = vmi.status.as_ref()?.rest.get("phaseTransitionTimestamps")?.as_array()?;
    list.iter().rev().find(|t| t["phase"] == phase).and_then(|t| t["phaseTransitionTimestamp"].as_str()?.parse().ok())
}

/// Whether the VMI belongs to a VMIPool: only those get the finalizer. A VMI of nobody's pool
/// must not hang in Terminating once the operator is gone (its launcher pod goes with it by
/// its owner reference all the same).
fn of_a_pool(vmi: &VirtualMachineInstance) -> bool {
    vmi.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true) && o.kind == "VMIPool" && o.api_version.starts_with(crate::api::common::GROUP)
    })
}

/// Admission: Pending, the finalizer (a pool's VMIs only), and (as KubeVirt's webhook does) an
/// interface bound by bridge to a pod network, both named `default`, when the VMI has neither.
/// A patch of the finalizers carries the resourceVersion read: the whole list is written, and
/// another controller's finalizer added meanwhile must not be dropped (a conflict instead).
pub fn admit_patch(vmi: &VirtualMachineInstance, now: &Value) -> Value {
    // Marked as played by this simulator (no KubeVirt runs): the operator's admission policy
    // lets its identity write such VMIs, wherever they run.
    let mut patch = json!({
        "metadata": {
            "uid": vmi.metadata.uid,
            "annotations": {crate::api::conventions::SIMULATED_VMI_ANNOTATION: "true"},
        },
        "status": {"phase": "Pending", "phaseTransitionTimestamps": transitions(vmi, "Pending", now)}
    });
    let mut finalizers = vmi.metadata.finalizers.clone().unwrap_or_default();
    if of_a_pool(vmi) && !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.into());
        patch["metadata"]["finalizers"] = json!(finalizers);
        patch["metadata"]["resourceVersion"] = json!(vmi.metadata.resource_version);
    }
    let devices = &vmi.spec.domain.devices;
    if vmi.spec.networks.is_empty() && devices.interfaces.is_empty() && !auto_attach_disabled(&vmi.spec) {
        patch["spec"] = json!({
            "networks": [{"name": "default", "pod": {}}],
            "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}}
        });
    }
    patch
}

fn auto_attach_disabled(spec: &VmiSpec) -> bool {
    spec.domain.devices.rest.get("autoattachPodInterface") == Some(&json!(false))
}

/// How many vCPUs the VMI has (cores × sockets × threads, at least 1).
fn vcpus(spec: &VmiSpec) -> i64 {
    let cpu = spec.domain.cpu.clone().unwrap_or_default();
    [cpu.cores, cpu.sockets, cpu.threads]
        .iter()
        .map(|v| i64::from(v.unwrap_or(1).max(1)))
        .fold(1i64, i64::saturating_mul)
}

/// MiB of a quantity such as `128Mi`, `2Gi`, `1G` (0 when unreadable).
fn mib(q: &Quantity) -> i64 {
    crate::api::validation::quantity::approximate(&q.0).map_or(0, |bytes| (bytes / (1024.0 * 1024.0)).ceil() as i64)
}

/// The launcher pod's resources: memory = the guest's + an overhead, cpu = the VMI's request
/// or a tenth of a CPU per vCPU, and one `devices.kubevirt.io/kvm`.
fn launcher_resources(spec: &VmiSpec) -> ResourceRequirements {
    let resources = spec.domain.resources.clone().unwrap_or_default();
    let requests_in = resources.requests.unwrap_or_default();
    let guest = spec.domain.memory.as_ref().and_then(|m| m.guest.as_ref()).or(requests_in.get("memory"));
    let guest_mib = guest.map_or(0, mib);
    let overhead = overhead_mib(guest_mib, vcpus(spec));
    let memory = guest_mib.saturating_add(overhead);
    let mut limits = resources.limits.unwrap_or_default();
    // As KubeVirt: the overhead counts in a memory limit too, and a cpu limit without a
    // request is the request (the pod would be refused with a request above its limit).
    if let Some(limit) = limits.get("memory").map(mib) {
        limits.insert("memory".into(), Quantity(format!("{}Mi", limit.saturating_add(overhead))));
    }
    let cpu = requests_in
        .get("cpu")
        .or(limits.get("cpu"))
        .cloned()
        .unwrap_or_else(|| Quantity(format!("{}m", vcpus(spec).saturating_mul(100))));
    let mut requests = BTreeMap::from([
        ("memory".to_string(), Quantity(format!("{memory}Mi"))),
        ("cpu".to_string(), cpu),
        ("devices.kubevirt.io/kvm".to_string(), Quantity("1".into())),
    ]);
    limits.insert("devices.kubevirt.io/kvm".into(), Quantity("1".into()));
    for (k, v) in &limits {
        requests.entry(k.clone()).or_insert_with(|| v.clone());
    }
    ResourceRequirements { requests: Some(requests), limits: Some(limits), ..Default::default() }
}

/// A name as a label value: up to 63 characters; a longer one is cut to 54 and given the
/// first 8 hex digits of its SHA-256 (KubeVirt shortens the same way, with SHA-1).
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let digest = Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", name.chars().take(54).collect::<String>().trim_end_matches(['-', '.']))
}

/// The launcher pod of `vmi` (named by the API server from `virt-launcher-<vmi>-`), with the
/// VMI's placement and confined to simulated nodes: playing virt-controller means no real
/// KubeVirt runs, so only a simulated node can run it (and the operator's admission policy
/// lets it create no other pod).
pub fn launcher_pod(vmi: &VirtualMachineInstance) -> Pod {
    let mut pod = launcher_pod_as_kubevirt_makes_it(vmi);
    if let Some(spec) = pod.spec.as_mut() {
        crate::pool::placement::confine(&mut spec.node_selector, &mut spec.tolerations);
    }
    pod
}

fn launcher_pod_as_kubevirt_makes_it(vmi: &VirtualMachineInstance) -> Pod {
    let name = vmi.metadata.name.clone().unwrap_or_default();
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let mut labels = vmi.metadata.labels.clone().unwrap_or_default();
    labels.insert(APP_LABEL.into(), "virt-launcher".into());
    labels.insert(CREATED_BY_LABEL.into(), uid.clone());
    labels.insert("vm.kubevirt.io/name".into(), label_value(vmi.spec.hostname.as_deref().unwrap_or(&name)));
    labels.insert("vmi.kubevirt.io/id".into(), label_value(&name));
    let annotations = BTreeMap::from([
        ("kubevirt.io/domain".to_string(), name.clone()),
        ("kubectl.kubernetes.io/default-container".to_string(), "compute".to_string()),
    ]);
    let grace = vmi.spec.termination_grace_period_seconds.unwrap_or(30).max(0);
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("virt-launcher-{name}-")),
            namespace: vmi.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachineInstance".into(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "compute".into(),
                image: Some(LAUNCHER_IMAGE.into()),
                command: Some(vec!["/usr/bin/virt-launcher-monitor".into()]),
                resources: Some(launcher_resources(&vmi.spec)),
                ..Default::default()
            }],
            restart_policy: Some("Never".into()),
            readiness_gates: Some(vec![PodReadinessGate { condition_type: UNPAUSED_GATE.into() }]),
            termination_grace_period_seconds: Some(grace.saturating_add(30)),
            node_selector: vmi.spec.node_selector.clone(),
            affinity: vmi.spec.affinity.clone(),
            tolerations: vmi.spec.tolerations.clone(),
            hostname: vmi.spec.hostname.clone(),
            subdomain: vmi.spec.subdomain.clone(),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..placement_from(&vmi.spec)
        }),
        status: None,
    }
}

/// What else of the VMI's placement KubeVirt copies to its launcher pod (kept untyped in the
/// VMI spec): scheduler, priority class, topology spread, DNS.
fn placement_from(spec: &VmiSpec) -> PodSpec {
    fn field<T: serde::de::DeserializeOwned>(spec: &VmiSpec, key: &str) -> Option<T> {
        spec.rest.get(key).cloned().and_then(|v| serde_json::from_value(v).ok())
    }
    PodSpec {
        scheduler_name: field(spec, "schedulerName"),
        priority_class_name: field(spec, "priorityClassName"),
        topology_spread_constraints: field(spec, "topologySpreadConstraints"),
        dns_policy: field(spec, "dnsPolicy"),
        dns_config: field(spec, "dnsConfig"),
        ..Default::default()
    }
}

/// Scheduling: the launcher pod exists.
pub fn scheduling_patch(vmi: &VirtualMachineInstance, now: &Value) -> Value {
    json!({
        "metadata": {"uid": vmi.metadata.uid},
        "status": {"phase": "Scheduling", "phaseTransitionTimestamps": transitions(vmi, "Scheduling", now)}
    })
}

/// The scheduler's reason mirrored into a PodScheduled condition.
pub fn unschedulable_patch(vmi: &VirtualMachineInstance, reason: &str, message: &str, now: &Value) -> Value {
    let mut conditions: Vec<Value> = other_conditions(vmi, &["PodScheduled"]);
    conditions.push(json!({"type": "PodScheduled", "status": "False", "reason": reason, "message": message, "lastProbeTime": null, "lastTransitionTime": now}));
    json!({"metadata": {"uid": vmi.metadata.uid}, "status": {"conditions": conditions}})
}

fn other_conditions(vmi: &VirtualMachineInstance, except: &[&str]) -> Vec<Value> {
    vmi.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .filter(|c| !except.contains(&c.type_.as_str()))
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect()
}

/// Scheduled: the launcher pod is ready on `node`.
pub fn scheduled_patch(vmi: &VirtualMachineInstance, pod: &SlimPod, node: &str, now: &Value) -> Value {
    let mut labels = BTreeMap::new();
    labels.insert(NODE_NAME_LABEL.to_string(), node.to_string());
    let mut status = json!({
        "phase": "Scheduled",
        "phaseTransitionTimestamps": transitions(vmi, "Scheduled", now),
        "nodeName": node,
        "activePods": {pod.uid(): node},
        "launcherContainerImageVersion": LAUNCHER_IMAGE,
        "conditions": other_conditions(vmi, &["PodScheduled"]),
    });
    if let Some(qos) = &pod.qos_class {
        status["qosClass"] = json!(&**qos);
    }
    json!({"metadata": {"uid": vmi.metadata.uid, "labels": labels}, "status": status})
}

/// A deterministic, locally administered MAC for an interface of a VMI.
fn mac(vmi_uid: &str, interface: &str) -> String {
    let digest = Sha256::digest(format!("{vmi_uid}/{interface}").as_bytes());
    let mut bytes = [0x02u8, 0, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&digest[..5]);
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Whether the VMI can live-migrate, with KubeVirt's reason when it cannot.
fn live_migratable(spec: &VmiSpec) -> (bool, Option<(&'static str, &'static str)>) {
    let pod_net = spec.networks.iter().find(|n| n.pod.is_some()).map(|n| n.name.as_str());
    let bridged = spec.domain.devices.interfaces.iter().any(|i| i.bridge.is_some() && Some(i.name.as_str()) == pod_net);
    if bridged {
        return (
            false,
            Some((
                "InterfaceNotLiveMigratable",
                "cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin to connect to the pod network",
            )),
        );
    }
    // PVC access modes are not read: a VMI on PVCs counts as migratable (shared storage).
    (true, None)
}

/// KubeVirt's migration method: BlockMigration when local (non-shared) disks would have to be
/// copied, as with a containerDisk or an emptyDisk; else LiveMigration.
fn migration_method(spec: &VmiSpec) -> &'static str {
    let local = spec.volumes.iter().any(|v| {
        v.container_disk.is_some()
            || v.empty_disk.is_some()
            || v.rest.contains_key("ephemeral")
            || v.rest.contains_key("hostDisk")
    });
    if local { "BlockMigration" } else { "LiveMigration" }
}

/// What a guest agent reports about the guest OS (a Fedora cloud image's agent).
fn guest_os_info() -> Value {
    json!({
        "id": "fedora",
        "name": "Fedora Linux",
        "prettyName": "Fedora Linux 41 (Cloud Edition)",
        "version": "41 (Cloud Edition)",
        "versionId": "41",
        "kernelRelease": "6.11.4-301.fc41.x86_64",
        "kernelVersion": "#1 SMP PREEMPT_DYNAMIC Sun Oct 20 15:02:33 UTC 2024",
        "machine": "x86_64",
    })
}

/// Running: the guest is up; its interfaces report the launcher pod's addresses. `agent`: a
/// guest agent is connected (else nothing only an agent reports: no OS info, no
/// `AgentConnected`, interfaces from the domain alone).
pub fn running_patch(vmi: &VirtualMachineInstance, pod_ips: &[std::net::IpAddr], agent: bool, now: &Value) -> Value {
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let pod_net = vmi.spec.networks.iter().find(|n| n.pod.is_some()).map(|n| n.name.clone());
    let interfaces: Vec<Value> = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .enumerate()
        .map(|(i, iface)| {
            let mut v = json!({
                "name": iface.name,
                "mac": iface.mac_address.clone().unwrap_or_else(|| mac(&uid, &iface.name)),
                "infoSource": if agent { "domain, guest-agent" } else { "domain" },
                "queueCount": 1,
                "linkState": "up",
                "interfaceName": format!("eth{i}"),
            });
            if Some(&iface.name) == pod_net.as_ref() {
                let ips: Vec<String> = pod_ips.iter().map(ToString::to_string).collect();
                v["podInterfaceName"] = json!("eth0");
                if let Some(first) = ips.first() {
                    v["ipAddress"] = json!(first);
                    v["ipAddresses"] = json!(ips);
                }
            }
            v
        })
        .collect();
    let (migratable, why) = live_migratable(&vmi.spec);
    let mut lm = json!({"type": "LiveMigratable", "status": if migratable { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": null});
    if let Some((reason, message)) = why {
        lm["reason"] = json!(reason);
        lm["message"] = json!(message);
    }
    let mut conditions = other_conditions(vmi, &["Ready", "LiveMigratable", "PodScheduled", "AgentConnected"]);
    conditions.push(json!({"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
    conditions.push(lm);
    if agent {
        conditions.push(
            json!({"type": "AgentConnected", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
        );
    }
    json!({
        "metadata": {"uid": vmi.metadata.uid},
        "status": {
            "phase": "Running",
            "phaseTransitionTimestamps": transitions(vmi, "Running", now),
            "interfaces": interfaces,
            "conditions": conditions,
            "migrationMethod": migration_method(&vmi.spec),
            "guestOSInfo": if agent { guest_os_info() } else { json!({}) },
        }
    })
}

/// Failed, with the reason in a condition.
pub fn failed_patch(vmi: &VirtualMachineInstance, why: &str, now: &Value) -> Value {
    ended_patch(vmi, "Failed", why, now)
}

/// A deleted VMI's terminal phase, written before its finalizer goes: Succeeded when its VM
/// ran (the guest was shut down), Failed when it never started.
pub fn stopped_patch(vmi: &VirtualMachineInstance, ran: bool, now: &Value) -> Value {
    if ran {
        ended_patch(vmi, "Succeeded", "the VMI was deleted: its guest was shut down", now)
    } else {
        ended_patch(vmi, "Failed", "the VMI was deleted before its guest started", now)
    }
}

fn ended_patch(vmi: &VirtualMachineInstance, phase: &str, why: &str, now: &Value) -> Value {
    let mut conditions = other_conditions(vmi, &["Ready", "AgentConnected"]);
    conditions.push(json!({"type": "Ready", "status": "False", "reason": "PodTerminating", "message": why, "lastProbeTime": null, "lastTransitionTime": now}));
    json!({
        "metadata": {"uid": vmi.metadata.uid},
        "status": {"phase": phase, "phaseTransitionTimestamps": transitions(vmi, phase, now), "conditions": conditions}
    })
}

/// The finalizer dropped (the launcher pod is gone), guarded by the resourceVersion read.
pub fn release_patch(vmi: &VirtualMachineInstance) -> Value {
    let finalizers: Vec<String> =
        vmi.metadata.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
    json!({"metadata": {"uid": vmi.metadata.uid, "resourceVersion": vmi.metadata.resource_version, "finalizers": finalizers}})
}

/// The launcher pod's readiness gate, set True (strategic merge on conditions by type).
pub fn unpause_patch(pod: &SlimPod, now: &Value) -> Value {
    json!({
        "metadata": {"uid": pod.uid()},
        "status": {"conditions": [{"type": UNPAUSED_GATE, "status": "True", "lastProbeTime": null, "lastTransitionTime": now}]}
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(phase: &str, spec: Value) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "d", "uid": "u-vm", "labels": {"app": "x"}},
            "spec": spec,
        }))
        .unwrap();
        if !phase.is_empty() {
            v.status =
                Some(crate::kinds::vmipool::kubevirt::VmiStatus { phase: Some(phase.into()), ..Default::default() });
        }
        v
    }

    fn pod(phase: &str, conditions: &[(&str, &str)]) -> SlimPod {
        use crate::informer::fixtures::TestPod;
        let pod = k8s_openapi::api::core::v1::Pod::test("virt-launcher-vm-abcde").uid("u-pod").phase(phase);
        conditions.iter().fold(pod, |p, (t, s)| p.condition(t, s)).slim()
    }

    fn plain() -> Value {
        json!({"domain": {"memory": {"guest": "1Gi"}, "cpu": {"cores": 2, "sockets": 2}}})
    }

    #[test]
    fn the_controller_walks_kubevirts_phases() {
        let step =
            |phase: &str, p: Option<SlimPod>, managed: bool| next_step(&vmi(phase, plain()), p.as_ref(), true, managed);
        assert_eq!(step("", None, false), Step::Admit);
        assert_eq!(step("Pending", None, false), Step::CreateLauncher);
        assert_eq!(step("Pending", Some(pod("Pending", &[])), false), Step::Scheduling, "a pod made before a restart");
        assert_eq!(step("Scheduling", Some(pod("Pending", &[])), false), Step::Wait, "not placed, no reason yet");
        assert_eq!(step("Scheduling", Some(pod("Running", &[])), true), Step::Unpause);
        assert_eq!(step("Scheduling", Some(pod("Pending", &[])), true), Step::Unpause, "as soon as it is bound");
        assert_eq!(
            step("Scheduling", Some(pod("Running", &[(UNPAUSED_GATE, "True"), ("Ready", "True")])), true),
            Step::Scheduled
        );
        assert_eq!(step("Scheduled", Some(pod("Running", &[(UNPAUSED_GATE, "True")])), true), Step::Running);
        assert!(matches!(step("Running", None, false), Step::Fail(_)), "launcher pod gone");
        assert!(matches!(step("Running", Some(pod("Failed", &[])), true), Step::Fail(_)));
        assert_eq!(step("Failed", None, false), Step::Wait);
    }

    #[test]
    fn an_unschedulable_launcher_is_mirrored_once() {
        let mut p = pod("Pending", &[]);
        p.unschedulable =
            Some(Box::new(("Unschedulable".into(), "0/2 nodes are available: 2 Insufficient cpu.".into())));
        let v = vmi("Scheduling", plain());
        let step = next_step(&v, Some(&p), true, false);
        let Step::Unschedulable(reason, message) = step else { panic!("{step:?}") };
        let patched = unschedulable_patch(&v, &reason, &message, &json!("now"));
        let mut shown = v.clone();
        shown.status.as_mut().unwrap().conditions =
            serde_json::from_value(patched["status"]["conditions"].clone()).unwrap();
        assert_eq!(next_step(&shown, Some(&p), true, false), Step::Wait, "already shown");
    }

    #[test]
    fn deletion_ends_the_vmi_deletes_the_launcher_then_drops_the_finalizer() {
        let deleted = |phase: &str| {
            let mut v = vmi(phase, plain());
            v.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
            v.metadata.finalizers = Some(vec![FINALIZER.into(), "other".into()]);
            v
        };
        let running = pod("Running", &[]);
        assert_eq!(next_step(&deleted("Running"), Some(&running), true, true), Step::Stop { ran: true });
        assert_eq!(next_step(&deleted("Scheduled"), Some(&running), true, true), Step::Stop { ran: true });
        assert_eq!(next_step(&deleted("Scheduling"), Some(&running), true, true), Step::Stop { ran: false });
        assert_eq!(next_step(&deleted("Pending"), None, true, true), Step::Stop { ran: false });
        let stopped = stopped_patch(&deleted("Running"), true, &json!("t"));
        assert_eq!(stopped["status"]["phase"], "Succeeded");
        assert_eq!(
            stopped["status"]["phaseTransitionTimestamps"].as_array().unwrap().last().unwrap()["phase"],
            "Succeeded"
        );
        assert_eq!(stopped_patch(&deleted("Scheduling"), false, &json!("t"))["status"]["phase"], "Failed");
        let mut v = deleted("Succeeded");
        assert_eq!(next_step(&v, Some(&running), true, true), Step::DeleteLauncher);
        let mut going = pod("Running", &[]);
        going.metadata.deletion_timestamp = v.metadata.deletion_timestamp.clone();
        assert_eq!(next_step(&v, Some(&going), true, true), Step::Wait);
        assert_eq!(next_step(&v, None, true, true), Step::Release);
        v.metadata.resource_version = Some("41".into());
        let released = release_patch(&v);
        assert_eq!(released["metadata"]["finalizers"], json!(["other"]), "only ours goes");
        assert_eq!(released["metadata"]["resourceVersion"], "41", "a conflict, not a lost finalizer, if it changed");
    }

    #[test]
    fn only_a_connected_guest_agent_reports_the_os_and_its_condition() {
        let ips = ["10.244.0.5".parse().unwrap()];
        let net = json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}, "networks": [{"name": "default", "pod": {}}]});
        let without = running_patch(&vmi("Scheduled", net.clone()), &ips, false, &json!("t"));
        assert_eq!(without["status"]["guestOSInfo"], json!({}));
        assert_eq!(without["status"]["interfaces"][0]["infoSource"], "domain");
        assert_eq!(
            without["status"]["interfaces"][0]["ipAddress"], "10.244.0.5",
            "the pod network's address all the same"
        );
        let types = |p: &Value| -> Vec<String> {
            p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].as_str().unwrap().to_string())
                .collect()
        };
        assert!(!types(&without).contains(&"AgentConnected".to_string()));
        let with = running_patch(&vmi("Scheduled", net), &ips, true, &json!("t"));
        assert_eq!(with["status"]["guestOSInfo"]["id"], "fedora");
        assert_eq!(with["status"]["interfaces"][0]["infoSource"], "domain, guest-agent");
        assert!(types(&with).contains(&"AgentConnected".to_string()));
    }

    #[test]
    fn beside_kubevirt_only_scheduled_vmis_on_managed_nodes_are_touched() {
        assert_eq!(next_step(&vmi("Scheduled", plain()), None, false, true), Step::Running);
        assert_eq!(next_step(&vmi("Scheduled", plain()), None, false, false), Step::Wait);
        for phase in ["", "Pending", "Scheduling", "Running"] {
            assert_eq!(next_step(&vmi(phase, plain()), None, false, true), Step::Wait, "{phase}");
        }
    }

    #[test]
    fn admission_adds_kubevirts_default_network_only_when_there_is_none() {
        let patch = admit_patch(&vmi("", plain()), &json!("t"));
        assert!(patch["metadata"].get("finalizers").is_none(), "a VMI of no pool gets no finalizer");
        let mut pooled = vmi("", plain());
        pooled.metadata.resource_version = Some("7".into());
        pooled.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "pools.kwok.x-k8s.io/v1alpha1".into(),
            kind: "VMIPool".into(),
            name: "p".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        let patch = admit_patch(&pooled, &json!("t"));
        assert_eq!(patch["metadata"]["finalizers"], json!([FINALIZER]));
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["spec"]["networks"], json!([{"name": "default", "pod": {}}]));
        assert_eq!(patch["spec"]["domain"]["devices"]["interfaces"], json!([{"name": "default", "bridge": {}}]));
        assert_eq!(
            patch["status"]["phaseTransitionTimestamps"],
            json!([{"phase": "Pending", "phaseTransitionTimestamp": "t"}])
        );
        let with_net = json!({"domain": {"devices": {"interfaces": [{"name": "n", "masquerade": {}}]}}, "networks": [{"name": "n", "pod": {}}]});
        assert!(admit_patch(&vmi("", with_net), &json!("t")).get("spec").is_none());
    }

    #[test]
    fn the_launcher_pod_asks_for_what_kubevirt_would() {
        let mut v = vmi("Pending", plain());
        v.spec.termination_grace_period_seconds = Some(10);
        v.spec.node_selector = Some([("type".to_string(), "kwok".to_string())].into());
        let p = launcher_pod(&v);
        assert_eq!(p.metadata.generate_name.as_deref(), Some("virt-launcher-vm-"));
        let labels = p.metadata.labels.unwrap();
        assert_eq!(
            (labels["kubevirt.io"].as_str(), labels[CREATED_BY_LABEL].as_str(), labels["app"].as_str()),
            ("virt-launcher", "u-vm", "x")
        );
        assert_eq!(p.metadata.owner_references.unwrap()[0].controller, Some(true));
        let spec = p.spec.unwrap();
        assert_eq!(spec.termination_grace_period_seconds, Some(40), "the VMI's grace + 30");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.readiness_gates.unwrap()[0].condition_type, UNPAUSED_GATE);
        assert_eq!(spec.node_selector.unwrap()["type"], "kwok");
        assert!(
            crate::pool::placement::tolerates_fake_nodes(&spec.tolerations.clone().unwrap()),
            "confined to simulated nodes"
        );
        assert_eq!(spec.enable_service_links, Some(false));
        let c = &spec.containers[0];
        assert_eq!(c.name, "compute");
        let requests = c.resources.as_ref().unwrap().requests.clone().unwrap();
        assert_eq!(requests["cpu"].0, "400m", "4 vCPUs / 10");
        // 1Gi guest + 2 (page tables) + 220 + 8 × 4 + 8 + 32.
        assert_eq!(requests["memory"].0, "1318Mi");
        assert_eq!(c.resources.as_ref().unwrap().limits.as_ref().unwrap()["devices.kubevirt.io/kvm"].0, "1");
    }

    #[test]
    fn running_reports_the_pods_addresses_a_stable_mac_and_live_migratability() {
        let bridged = json!({"domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}}, "networks": [{"name": "default", "pod": {}}]});
        let ips: Vec<std::net::IpAddr> = vec!["10.1.2.3".parse().unwrap()];
        let patch = running_patch(&vmi("Scheduled", bridged), &ips, false, &json!("t"));
        let iface = &patch["status"]["interfaces"][0];
        assert_eq!((iface["ipAddress"].as_str(), iface["podInterfaceName"].as_str()), (Some("10.1.2.3"), Some("eth0")));
        assert_eq!(iface["mac"], json!(mac("u-vm", "default")));
        assert_eq!(mac("u-vm", "default"), mac("u-vm", "default"), "deterministic");
        assert!(mac("u-vm", "default").starts_with("02:"), "locally administered");
        let lm = patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "LiveMigratable")
            .unwrap()
            .clone();
        assert_eq!((lm["status"].as_str(), lm["reason"].as_str()), (Some("False"), Some("InterfaceNotLiveMigratable")));
        let masq = json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}, "networks": [{"name": "default", "pod": {}}]});
        let patch = running_patch(&vmi("Scheduled", masq.clone()), &ips, false, &json!("t"));
        assert_eq!(patch["status"]["migrationMethod"], "LiveMigration");
        let mut with_disk = masq;
        with_disk["volumes"] = json!([{"name": "root", "containerDisk": {"image": "cirros"}}]);
        let patch = running_patch(&vmi("Scheduled", with_disk), &ips, false, &json!("t"));
        assert_eq!(patch["status"]["migrationMethod"], "BlockMigration", "a containerDisk is copied");
    }

    #[test]
    fn limits_long_names_and_terminating_pods_are_handled_as_kubevirt_does() {
        // A Guaranteed VMI: requests equal limits; the pod's limit carries the overhead too.
        let guaranteed = json!({"domain": {"resources": {"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi", "cpu": "1"}}}});
        let r = launcher_resources(&vmi("Pending", guaranteed).spec);
        let (req, lim) = (r.requests.unwrap(), r.limits.unwrap());
        assert_eq!(req["memory"], lim["memory"], "never a request above the limit");
        assert_eq!((req["cpu"].0.as_str(), lim["cpu"].0.as_str()), ("1", "1"));
        let only_limit = json!({"domain": {"memory": {"guest": "64Mi"}, "resources": {"limits": {"cpu": "50m"}}}});
        assert_eq!(launcher_resources(&vmi("Pending", only_limit).spec).requests.unwrap()["cpu"].0, "50m");
        // Absurd sizes saturate instead of overflowing.
        let huge = json!({"domain": {"cpu": {"cores": 2147483647, "sockets": 2147483647, "threads": 2147483647}, "memory": {"guest": "9E"}}});
        let _ = launcher_resources(&vmi("Pending", huge).spec);
        // Placement kept untyped in the VMI reaches the pod.
        let placed = json!({"domain": {"memory": {"guest": "64Mi"}}, "schedulerName": "custom", "priorityClassName": "high", "dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"]}});
        let spec = launcher_pod(&vmi("Pending", placed)).spec.unwrap();
        assert_eq!(
            (spec.scheduler_name.as_deref(), spec.priority_class_name.as_deref()),
            (Some("custom"), Some("high"))
        );
        assert_eq!(spec.dns_config.unwrap().nameservers.unwrap(), vec!["1.1.1.1".to_string()]);
        // Long names fit a label value.
        let mut long = vmi("Pending", plain());
        long.metadata.name = Some("a".repeat(80));
        let labels = launcher_pod(&long).metadata.labels.unwrap();
        assert!(labels["vmi.kubevirt.io/id"].len() <= 63, "{}", labels["vmi.kubevirt.io/id"]);
        assert_ne!(
            label_value(&"a".repeat(80)),
            label_value(&format!("{}b", "a".repeat(79))),
            "distinct names stay distinct"
        );
        // A launcher pod being deleted under a live VMI fails it.
        let mut going = pod("Running", &[(UNPAUSED_GATE, "True"), ("Ready", "True")]);
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(matches!(next_step(&vmi("Running", plain()), Some(&going), true, true), Step::Fail(_)));
    }

    #[test]
    fn a_malformed_vmi_still_decodes() {
        let v: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "odd"},
            "spec": {"domain": {"devices": {"disks": [{"disk": {}}], "interfaces": [{}]}}, "networks": [{"multus": {}}], "volumes": [{"containerDisk": {}}]},
            "status": {"conditions": [{"reason": "x"}]}
        }))
        .unwrap();
        assert_eq!(v.spec.volumes.len(), 1);
    }
}
