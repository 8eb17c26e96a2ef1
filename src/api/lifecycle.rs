//! Lifecycle knobs shared by every pool kind: how fast and how badly simulated children
//! behave (start delays, exits, failures, crash loops, flapping nodes), declared on the pool.
//! Types, schema rules and the sampling of distributions (durations and seeded numbers are in
//! [`super::duration`]).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use super::delay::{Delay, Distribution, delay_problem, duration_schema, percent, percent_schema};
use super::duration::parse_duration;

/// What pods do: on a PodPool for its pods; on a NodePool for every pod on its nodes that no
/// PodPool governs (a Deployment's, a Job's, `kubectl run`'s).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.failPercent) ? self.failPercent : 0) + (has(self.crashLoopPercent) ? self.crashLoopPercent : 0) + (has(self.oomKillPercent) ? self.oomKillPercent : 0) + (has(self.imagePullFailPercent) ? self.imagePullFailPercent : 0) + (has(self.initFailPercent) ? self.initFailPercent : 0) + (has(self.livenessFailPercent) ? self.livenessFailPercent : 0) <= 100")
    .message("failPercent, crashLoopPercent, oomKillPercent, imagePullFailPercent, initFailPercent and livenessFailPercent add up to more than 100 (each pod has one fate)"))]
pub struct PodLifecycle {
    /// How long a bound pod takes to become Running (default: at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_delay: Option<Delay>,
    /// How long each init container runs before it completes and the next one starts, as the
    /// kubelet runs them one by one (`Init:1/3`…); the pod is Running once the last is done
    /// (default: at once, in the pod's one status write; each init container costs a write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_run_time: Option<Delay>,
    /// How long a deleted pod takes to exit, never longer than its grace period (default
    /// about a second, as a process that honours SIGTERM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_delay: Option<Delay>,
    /// The pods ignore SIGTERM: a deleted pod goes only when its whole grace period is over.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ignoreSIGTERM")]
    pub ignore_sigterm: Option<bool>,
    /// Percent of pods whose containers fail at start (exit code 1): the pod is Failed with
    /// `restartPolicy: Never`, and crash-loops otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub fail_percent: Option<u8>,
    /// Percent of pods that crash-loop: they run for `crashAfter`, exit 1, and wait in
    /// CrashLoopBackOff (10s, doubling to 5m) with a growing restartCount, as a kubelet shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub crash_loop_percent: Option<u8>,
    /// How long a crash-looping container runs before it crashes (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_after: Option<Delay>,
    /// How long a pod owned by a `Job` of any API group (batch's, Volcano's; kwok's rule) runs
    /// before it completes (default: `runTime`, else the operator's `--job-run-time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_run_time: Option<Delay>,
    /// How long a pod with `restartPolicy: Never` or `OnFailure` runs before its containers
    /// exit 0 and it is Succeeded: pods without a controller owner (bare pods, Kueue's plain
    /// pods) and those whose controller owner `runTimeOwners` lists (Argo's Workflow, Tekton's
    /// TaskRun…); never another controller's children (a VMI's launcher pod). A pod's
    /// `pod-complete.stage.kwok.x-k8s.io/delay` annotation says it for that pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<Delay>,
    /// The controller owners whose pods `runTime` finishes too, named as a policy's `owners`
    /// are: `{apiGroup: argoproj.io, kind: Workflow}` (`apiGroup` omitted: the core group;
    /// `'*'`: any group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub run_time_owners: Option<Vec<super::owners::OwnerKind>>,
    /// The exit code failing and crash-looping containers exit with (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "exit_code_schema")]
    pub exit_code: Option<i32>,
    /// Percent of pods whose containers are OOM-killed after `crashAfter` (exit 137, reason
    /// OOMKilled), then restarted with back-off (Failed with `restartPolicy: Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub oom_kill_percent: Option<u8>,
    /// Percent of pods whose images never pull: ErrImagePull, then ImagePullBackOff; they
    /// stay Pending, as with a wrong image name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub image_pull_fail_percent: Option<u8>,
    /// Percent of pods whose first init container fails (`exitCode`): Init:CrashLoopBackOff,
    /// or Failed with `restartPolicy: Never`. Pods without init containers are not affected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub init_fail_percent: Option<u8>,
    /// Percent of pods whose liveness probe starts failing `crashAfter` after each start: once
    /// its `failureThreshold` periods have failed (never before its `initialDelaySeconds`) the
    /// kubelet kills the container (`Unhealthy` and `Killing` events, exit 143, or 137 with
    /// `ignoreSIGTERM`) and restarts it with back-off. Pods without a liveness probe are not
    /// affected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub liveness_fail_percent: Option<u8>,
    /// Percent of running pods whose readiness probe never passes: Running but Ready=False for
    /// good, out of their Services' endpoints and never available to a rollout (what kwok
    /// users write a Stage that never sets Ready for). Pods annotated
    /// `pools.kwok.x-k8s.io/readiness: never` are never ready whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub not_ready_percent: Option<u8>,
    /// Readiness that flaps: a share of running pods fail their readiness probe now and then
    /// (Ready=False, out of their Services' endpoints), then pass again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ReadinessFlaps>,
    /// What each container uses (CPU, memory), as the kubelet API reports it to
    /// metrics-server, `kubectl top` and the HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::kubelet::Usage>,
    /// What each container prints (`kubectl logs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<super::kubelet::Logs>,
    /// What `kubectl exec` gets (default: a minimal shell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<super::kubelet::Exec>,
    /// Send the kubelet's Normal events for these pods (Pulled, Created, Started, Killing: one
    /// write each per container; default: the operator's `--pod-normal-events`, off). Warnings
    /// (BackOff, Unhealthy, Failed…) are always sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal_events: Option<bool>,
}

impl PodLifecycle {
    /// The annotations its delays are read from (`fromAnnotation`): the pod store keeps them.
    pub fn delay_annotations(&self) -> Vec<String> {
        let delays = [
            &self.start_delay,
            &self.init_run_time,
            &self.exit_delay,
            &self.crash_after,
            &self.job_run_time,
            &self.run_time,
        ];
        delays.into_iter().flatten().filter_map(|d| d.from_annotation.clone()).collect()
    }
}

/// Pods whose readiness flaps.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessFlaps {
    /// Percent of running pods whose readiness flaps (pods annotated
    /// `pools.kwok.x-k8s.io/readiness: flap` flap whatever it says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub flap_percent: Option<u8>,
    /// How long a pod stays unready each time (default 20s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_for: Option<Delay>,
    /// How often it goes unready (default 2m; longer than notReadyFor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub every: Option<String>,
}

/// How long an unready pod stays so when nothing is said.
pub const DEFAULT_UNREADY_FOR: Duration = Duration::from_secs(20);
/// How often a pod with flapping readiness goes unready when nothing is said.
pub const DEFAULT_UNREADY_EVERY: Duration = Duration::from_secs(120);

fn exit_code_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 1, "maximum": 255})
}

/// What a NodePool's nodes do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeLifecycle {
    /// Percent of the pool's nodes that go NotReady now and then: their lease and status
    /// stop, so the node lifecycle controller marks them Unknown and taints them, as it does a
    /// node whose kubelet is gone; then they come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "percent_schema")]
    pub not_ready_percent: Option<u8>,
    /// How long a flapping node stays away (default 60s; the controller manager notices after
    /// its node-monitor grace period, 50s by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_for: Option<Delay>,
    /// How often a flapping node goes away (default 10m; at least notReadyFor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub every: Option<String>,
    /// What each node uses beside its pods (its own daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::kubelet::NodeUsage>,
    /// Conditions the kubelet reports on a share of the nodes (memory, disk or PID pressure, a
    /// network that is down, Ready=False), for good or in windows: the node lifecycle
    /// controller taints those nodes and the scheduler steers clear, as on a real cluster.
    /// Other components' conditions are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.all(x, self.exists_one(y, y.type == x.type))").message("each condition type at most once"))]
    #[schemars(length(max = 5))]
    pub conditions: Option<Vec<NodeConditionKnob>>,
    /// How the pool's nodes heartbeat (default: the operator's flags, the kubelet's 40 s
    /// lease): trade fidelity for API-server headroom per pool, as kwokctl does per cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Heartbeat>,
    /// One outage, once: the nodes go NotReady `after` they come under these knobs (a node
    /// made later, or one newly selected by a policy), for `lasts`, then come back — the
    /// controller manager's taints follow, as with a node that fails once. Counted from when
    /// the simulator first sees the node so; a restarted simulator counts again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outage: Option<Outage>,
    /// Nodes boot as cloud instances do: NotReady (and with startup taints) for a while after
    /// their creation, then Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<super::cloud::Boot>,
    /// A share of new nodes never becomes Ready; a NodePool replaces them after a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_failures: Option<super::cloud::LaunchFailures>,
    /// Spot-style interruptions: a notice (taint and event), the kubelet's graceful shutdown
    /// (every pod ends `Terminated`), then the node is deleted and its pool brings a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptions: Option<super::cloud::Interruptions>,
}

/// One NotReady window of a node.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Outage {
    /// How long after the node comes under these knobs (default: at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Delay>,
    /// How long it lasts.
    pub lasts: Delay,
    /// `Unknown` (default): the node goes silent (lease and status stop) and the controller
    /// manager marks it Unknown after its grace period, as a node whose kubelet died.
    /// `False`: it goes on heartbeating and reports Ready=False (as kwok's node-not-ready
    /// stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<OutageReady>,
    /// A correlated outage: only the nodes whose label (a zone, by default) has one of these
    /// values go out, all in one window, counted from when the simulator first saw one of
    /// them under these knobs — so the node lifecycle controller sees a zone go down at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<super::cloud::OutageScope>,
}

/// What a node in an outage reports.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutageReady {
    #[default]
    Unknown,
    False,
}

/// A pool's node heartbeat.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    /// `leaseDurationSeconds` of each node's Lease, renewed every quarter of it (the
    /// kubelet's: 40; kwokctl's: 200). Keep it below the controller manager's
    /// `--node-monitor-grace-period`, or the nodes go NotReady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 3600))]
    pub lease_duration_seconds: Option<u32>,
    /// How often each node's status is written although nothing changed (the operator's
    /// `--node-status-frequency` when unset), from 1s to 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub status_report_interval: Option<String>,
}

impl Heartbeat {
    /// The lease duration and status interval it sets (what is unset or unreadable: `None`).
    pub fn settings(&self) -> (Option<Duration>, Option<Duration>) {
        let lease =
            self.lease_duration_seconds.filter(|s| (10..=3600).contains(s)).map(|s| Duration::from_secs(u64::from(s)));
        let status = self
            .status_report_interval
            .as_deref()
            .and_then(parse_duration)
            .filter(|d| (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(d));
        (lease, status)
    }
}

/// A condition a kubelet reports when something is wrong with its node.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BadCondition {
    /// MemoryPressure=True (the `node.kubernetes.io/memory-pressure` taint).
    MemoryPressure,
    /// DiskPressure=True.
    DiskPressure,
    /// PIDPressure=True.
    PIDPressure,
    /// NetworkUnavailable=True.
    NetworkUnavailable,
    /// Ready=False with the kubelet's reason (as kwok's `node-not-ready` stage): the node still
    /// heartbeats, unlike `notReadyPercent`, whose nodes go silent (Ready=Unknown).
    NotReady,
}

/// Which share of the nodes reports a bad condition, and when.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeConditionKnob {
    #[serde(rename = "type")]
    pub type_: BadCondition,
    /// Percent of the pool's nodes that report it.
    #[schemars(schema_with = "percent_schema")]
    pub percent: u8,
    /// How long it lasts each time; without it, the chosen nodes report it for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lasts: Option<Delay>,
    /// How often it comes back when it `lasts` a while (default 10m; longer than lasts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub every: Option<String>,
}

/// The sections of a pool's `spec.lifecycle` the shared simulator reads (the kubelet's pods and
/// nodes), whatever else the kind's own lifecycle type holds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sections<'a> {
    /// Makes every random choice reproducible: which pods fail, which nodes flap, each delay.
    pub seed: Option<i64>,
    pub pods: Option<&'a PodLifecycle>,
    pub nodes: Option<&'a NodeLifecycle>,
}

/// A kind's `spec.lifecycle` type: each kind declares its own, with the shared sections it
/// takes (seed, pods, nodes) and sections of its own, which it checks itself.
pub trait LifecycleSpec {
    /// The shared sections it has.
    fn sections(&self) -> Sections<'_>;
    /// Problems with its own sections, each starting with its path below `spec.lifecycle`.
    fn own_problems(&self) -> Vec<String> {
        Vec::new()
    }
}

/// `spec.lifecycle` of a pool whose children are pods (PodPool): a seed and what pods do.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodsLifecycle {
    /// Makes every random choice reproducible: which pods fail, each delay, each usage.
    /// Without it, each run differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodLifecycle>,
}

impl LifecycleSpec for PodsLifecycle {
    fn sections(&self) -> Sections<'_> {
        Sections { seed: self.seed, pods: self.pods.as_ref(), nodes: None }
    }
}

/// How long a flapping node stays away when nothing is said.
pub const DEFAULT_NOT_READY_FOR: Duration = Duration::from_secs(60);
/// How often a flapping node goes away when nothing is said.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(600);

/// Problems with a lifecycle, each starting with its path below `spec.lifecycle`: the shared
/// sections' rules, then the kind's own.
pub fn problems(l: &dyn LifecycleSpec) -> Vec<String> {
    let Sections { pods, nodes, .. } = l.sections();
    let mut out = delay_problems(pods, nodes);
    out.extend(super::kubelet::problems(
        pods.and_then(|p| p.usage.as_ref()),
        pods.and_then(|p| p.logs.as_ref()),
        nodes.and_then(|n| n.usage.as_ref()),
    ));
    if let Some(p) = pods {
        out.extend(pod_problems(p));
    }
    if let Some(n) = nodes {
        out.extend(node_problems(n));
    }
    out.extend(l.own_problems());
    out
}

/// Durations that are not one distribution of readable durations.
fn delay_problems(pods: Option<&PodLifecycle>, nodes: Option<&NodeLifecycle>) -> Vec<String> {
    let mut out = Vec::new();
    let mut delay = |path: &str, d: &Option<Delay>| out.extend(delay_problem(path, d.as_ref()));
    if let Some(p) = pods {
        delay("pods.startDelay", &p.start_delay);
        delay("pods.initRunTime", &p.init_run_time);
        delay("pods.exitDelay", &p.exit_delay);
        delay("pods.crashAfter", &p.crash_after);
        delay("pods.jobRunTime", &p.job_run_time);
        delay("pods.runTime", &p.run_time);
        if let Some(r) = &p.readiness {
            delay("pods.readiness.notReadyFor", &r.not_ready_for);
        }
    }
    if let Some(n) = nodes {
        delay("nodes.notReadyFor", &n.not_ready_for);
        for (i, c) in n.conditions.iter().flatten().enumerate() {
            delay(&format!("nodes.conditions[{i}].lasts"), &c.lasts);
        }
    }
    out.extend(annotation_reads(pods, nodes));
    out
}

/// `fromAnnotation` only where a pod's delay is drawn, naming a key the API server takes.
fn annotation_reads(pods: Option<&PodLifecycle>, nodes: Option<&NodeLifecycle>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = pods {
        let named = [
            ("startDelay", &p.start_delay),
            ("exitDelay", &p.exit_delay),
            ("crashAfter", &p.crash_after),
            ("jobRunTime", &p.job_run_time),
            ("runTime", &p.run_time),
        ];
        for (name, d) in named {
            let Some(key) = d.as_ref().and_then(|d| d.from_annotation.as_deref()) else { continue };
            if let Some(problem) = super::names::qualified_name_problem(&key.to_ascii_lowercase()) {
                out.push(format!(".pods.{name}.fromAnnotation: {key:?} is no annotation key: it {problem}"));
            }
        }
    }
    let not_read = |path: &str, d: Option<&Delay>| {
        d.is_some_and(|d| d.from_annotation.is_some()).then(|| {
            format!(
                ".{path}.fromAnnotation: only a pod's startDelay, exitDelay, crashAfter, jobRunTime and runTime read an annotation; remove it here"
            )
        })
    };
    out.extend(not_read("pods.readiness.notReadyFor", pods.and_then(|p| p.readiness.as_ref()?.not_ready_for.as_ref())));
    if let Some(n) = nodes {
        out.extend(not_read("nodes.notReadyFor", n.not_ready_for.as_ref()));
        for (i, c) in n.conditions.iter().flatten().enumerate() {
            out.extend(not_read(&format!("nodes.conditions[{i}].lasts"), c.lasts.as_ref()));
        }
        if let Some(o) = &n.outage {
            out.extend(not_read("nodes.outage.after", o.after.as_ref()));
            out.extend(not_read("nodes.outage.lasts", Some(&o.lasts)));
        }
    }
    out
}

/// The pod knobs' rules: percentages, one fate per pod, exit codes, readiness windows.
fn pod_problems(p: &PodLifecycle) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(percent("pods.failPercent", p.fail_percent));
    out.extend(percent("pods.crashLoopPercent", p.crash_loop_percent));
    out.extend(percent("pods.oomKillPercent", p.oom_kill_percent));
    out.extend(percent("pods.imagePullFailPercent", p.image_pull_fail_percent));
    out.extend(percent("pods.initFailPercent", p.init_fail_percent));
    out.extend(percent("pods.livenessFailPercent", p.liveness_fail_percent));
    out.extend(percent("pods.notReadyPercent", p.not_ready_percent));
    let fates = [
        p.fail_percent,
        p.crash_loop_percent,
        p.oom_kill_percent,
        p.image_pull_fail_percent,
        p.init_fail_percent,
        p.liveness_fail_percent,
    ];
    if fates.iter().map(|v| u16::from(v.unwrap_or(0))).sum::<u16>() > 100 {
        out.push(
            ".pods: failPercent, crashLoopPercent, oomKillPercent, imagePullFailPercent, initFailPercent and livenessFailPercent add up to more than 100 (each pod has one fate)"
                .into(),
        );
    }
    if let Some(code) = p.exit_code.filter(|c| !(1..=255).contains(c)) {
        out.push(format!(".pods.exitCode: {code} is not an exit code from 1 to 255 (a failure exits non-zero)"));
    }
    for (i, o) in p.run_time_owners.iter().flatten().enumerate() {
        let kind_ok = o.kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && o.kind.chars().all(|c| c.is_ascii_alphanumeric())
            && o.kind.len() <= 63;
        if !kind_ok {
            out.push(format!(
                ".pods.runTimeOwners[{i}].kind: {:?} is not a kind (CamelCase letters and digits, such as Workflow)",
                o.kind
            ));
        }
        let g = o.api_group.as_str();
        if !g.is_empty() && g != "*" && super::names::qualified_name_problem(&format!("{g}/x")).is_some() {
            out.push(format!(
                ".pods.runTimeOwners[{i}].apiGroup: {g:?} is not an API group (a DNS subdomain such as argoproj.io; omit it for the core group, '*' for any)"
            ));
        }
    }
    if let Some(r) = &p.readiness {
        out.extend(percent("pods.readiness.flapPercent", r.flap_percent));
        out.extend(window_rule(
            "pods.readiness",
            r.every.as_deref(),
            DEFAULT_UNREADY_EVERY,
            r.not_ready_for.as_ref(),
            DEFAULT_UNREADY_FOR,
        ));
    }
    out
}

/// The node knobs' rules: flapping windows, bad conditions listed once with sound windows.
fn node_problems(n: &NodeLifecycle) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(h) = &n.heartbeat {
        if let Some(s) = h.lease_duration_seconds.filter(|s| !(10..=3600).contains(s)) {
            out.push(format!(
                ".nodes.heartbeat.leaseDurationSeconds: {s} is not from 10 to 3600 (the kubelet's is 40)"
            ));
        }
        if let Some(i) = &h.status_report_interval
            && parse_duration(i).is_none_or(|d| !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d))
        {
            out.push(format!(".nodes.heartbeat.statusReportInterval: {i:?} is not a duration from 1s to 1h"));
        }
    }
    out.extend(percent("nodes.notReadyPercent", n.not_ready_percent));
    out.extend(super::cloud::problems(n.boot.as_ref(), n.launch_failures.as_ref(), n.interruptions.as_ref()));
    if let Some(o) = &n.outage {
        out.extend(delay_problem("nodes.outage.after", o.after.as_ref()));
        out.extend(delay_problem("nodes.outage.lasts", Some(&o.lasts)));
    }
    out.extend(window_rule(
        "nodes",
        n.every.as_deref(),
        DEFAULT_EVERY,
        n.not_ready_for.as_ref(),
        DEFAULT_NOT_READY_FOR,
    ));
    let conditions = n.conditions.as_deref().unwrap_or_default();
    for (i, c) in conditions.iter().enumerate() {
        let path = format!("nodes.conditions[{i}]");
        out.extend(percent(&format!("{path}.percent"), Some(c.percent)));
        if conditions[..i].iter().any(|o| o.type_ == c.type_) {
            out.push(format!(".{path}.type: {:?} is listed twice; list each condition type once", c.type_));
        }
        if c.lasts.is_some() {
            out.extend(window_rule(&path, c.every.as_deref(), DEFAULT_EVERY, c.lasts.as_ref(), DEFAULT_EVERY));
        } else if c.every.is_some() {
            out.push(format!(".{path}.every: only with lasts (without it the condition is for good)"));
        }
    }
    if conditions.len() > 5 {
        out.push(format!(".nodes.conditions: {} entries; there are 5 condition types", conditions.len()));
    }
    out
}

/// `every` must be longer than the longest `notReadyFor`: what goes away comes back before it
/// goes again.
fn window_rule(
    path: &str,
    every: Option<&str>,
    every_default: Duration,
    away: Option<&Delay>,
    away_default: Duration,
) -> Vec<String> {
    let mut out = Vec::new();
    let every = match every {
        None => Some(every_default),
        Some(text) => parse_duration(text).or_else(|| {
            out.push(format!(".{path}.every: {text:?} is not a duration such as 10m (at most 24h)"));
            None
        }),
    };
    let away = match away {
        None => Some(away_default),
        Some(d) => d.distribution().ok().map(|d| d.longest()),
    };
    if let (Some(every), Some(away)) = (every, away)
        && away >= every
    {
        out.push(format!(
            ".{path}.every: {every:?} is not longer than notReadyFor ({away:?} at the longest): it must come back before it goes again"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::duration::unit;

    /// A lifecycle with both shared sections (NodePool's shape; the api room names no kind).
    #[derive(Deserialize, Default)]
    struct Lifecycle {
        pods: Option<PodLifecycle>,
        nodes: Option<NodeLifecycle>,
    }

    impl LifecycleSpec for Lifecycle {
        fn sections(&self) -> Sections<'_> {
            Sections { seed: None, pods: self.pods.as_ref(), nodes: self.nodes.as_ref() }
        }
    }

    #[test]
    fn distributions_sample_within_their_shape() {
        let fixed = Delay { fixed: Some("2s".into()), ..Default::default() }.distribution().unwrap();
        assert_eq!(fixed.sample(0.9, 0.1), Duration::from_secs(2));
        let uniform = Delay { min: Some("1s".into()), max: Some("3s".into()), ..Default::default() };
        let uniform = uniform.distribution().unwrap();
        assert_eq!(uniform.sample(0.0, 0.0), Duration::from_secs(1));
        assert_eq!(uniform.sample(0.5, 0.0), Duration::from_secs(2));
        let normal = Delay { mean: Some("10s".into()), stddev: Some("100s".into()), ..Default::default() };
        let normal = normal.distribution().unwrap();
        for i in 0..100 {
            let s = normal.sample(unit(1, &["n", &i.to_string()]), unit(2, &["n", &i.to_string()]));
            assert!(s <= crate::api::duration::MAX_DURATION, "never negative, never beyond the cap: {s:?}");
        }
        let samples: Vec<f64> = (0..2000)
            .map(|i| normal.sample(unit(3, &[&i.to_string()]), unit(4, &[&i.to_string()])).as_secs_f64())
            .collect();
        let zero = samples.iter().filter(|s| **s == 0.0).count();
        assert!(zero > 500 && zero < 1300, "a wide normal around 10s is clamped at 0 about half the time: {zero}");
    }

    #[test]
    fn bad_delays_say_which_field() {
        let backwards = Delay { min: Some("3s".into()), max: Some("1s".into()), ..Default::default() };
        assert!(backwards.distribution().unwrap_err().starts_with(".min:"));
        let mixed = Delay { fixed: Some("1s".into()), mean: Some("1s".into()), ..Default::default() };
        assert!(mixed.distribution().unwrap_err().contains("exactly one"));
        let bad = Delay { fixed: Some("soon".into()), ..Default::default() };
        assert!(bad.distribution().unwrap_err().starts_with(".fixed: \"soon\""));
    }

    #[test]
    fn lifecycle_rules() {
        let l: Lifecycle = serde_yaml::from_str(
            "pods: {failPercent: 60, crashLoopPercent: 50, startDelay: {min: 2s, max: 1s}}\nnodes: {notReadyPercent: 10, notReadyFor: {fixed: 5m}, every: 1m}\n",
        )
        .unwrap();
        let p = problems(&l);
        assert!(p.iter().any(|m| m.starts_with(".pods.startDelay.min:")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".pods: failPercent, crashLoopPercent")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".nodes.every: 60s is not longer")), "{p:?}");
        let good: Lifecycle = serde_yaml::from_str(
            "seed: 7\npods: {exitDelay: {fixed: 1s}, ignoreSIGTERM: true, crashLoopPercent: 20}\nnodes: {notReadyPercent: 10, notReadyFor: {fixed: 40s}, every: 2m}\n",
        )
        .unwrap();
        assert_eq!(problems(&good), Vec::<String>::new());
        // The defaults count (notReadyFor 60s), equal is not enough, and a normal
        // distribution counts with its tail.
        for bad in [
            "{notReadyPercent: 10, every: 30s}",
            "{notReadyPercent: 10, notReadyFor: {fixed: 1m}, every: 1m}",
            "{notReadyPercent: 10, notReadyFor: {mean: 30s, stddev: 20s}, every: 60s}",
            "{notReadyPercent: 10, notReadyFor: {fixed: 11m}}",
        ] {
            let l = Lifecycle { nodes: Some(serde_yaml::from_str(bad).unwrap()), ..Default::default() };
            assert!(problems(&l).iter().any(|m| m.starts_with(".nodes.every:")), "{bad}");
        }
    }

    #[test]
    fn only_a_pods_delays_read_an_annotation_and_the_key_is_checked() {
        let good: Lifecycle = serde_yaml::from_str(
            "pods: {runTime: {fromAnnotation: example.com/run-for}, startDelay: {fromAnnotation: s, fixed: 1s}}",
        )
        .unwrap();
        assert_eq!(problems(&good), Vec::<String>::new());
        let bad: Lifecycle = serde_yaml::from_str(
            "pods: {exitDelay: {fromAnnotation: 'not a key'}, readiness: {flapPercent: 5, notReadyFor: {fromAnnotation: r}}}\nnodes: {outage: {after: {fromAnnotation: o}, lasts: {fixed: 1m}}}",
        )
        .unwrap();
        let p = problems(&bad);
        for path in [
            ".pods.exitDelay.fromAnnotation:",
            ".pods.readiness.notReadyFor.fromAnnotation:",
            ".nodes.outage.after.fromAnnotation:",
        ] {
            assert!(p.iter().any(|m| m.starts_with(path)), "{path} in {p:?}");
        }
        let two = Delay {
            from_annotation: Some("a".into()),
            fixed: Some("1s".into()),
            mean: Some("1s".into()),
            ..Default::default()
        };
        assert!(two.distribution().unwrap_err().contains("exactly one"), "one fallback at most");
    }

    #[test]
    fn run_time_owners_name_kinds_and_groups() {
        let l: Lifecycle = serde_yaml::from_str(
            "pods: {runTimeOwners: [{kind: workflow}, {apiGroup: Argo_Proj, kind: Workflow}, {apiGroup: '*', kind: Job}, {kind: TaskRun, apiGroup: tekton.dev}]}",
        )
        .unwrap();
        let p = problems(&l);
        assert!(p.iter().any(|m| m.starts_with(".pods.runTimeOwners[0].kind: \"workflow\" is not a kind")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".pods.runTimeOwners[1].apiGroup: \"Argo_Proj\"")), "{p:?}");
        assert_eq!(p.len(), 2, "any group and tekton.dev are fine: {p:?}");
    }

    #[test]
    fn every_fate_shares_one_hundred_percent_and_exit_codes_fail() {
        let l: Lifecycle = serde_yaml::from_str(
            "pods: {failPercent: 30, oomKillPercent: 30, imagePullFailPercent: 30, initFailPercent: 20, exitCode: 0}",
        )
        .unwrap();
        let p = problems(&l);
        assert!(p.iter().any(|m| m.starts_with(".pods: failPercent, crashLoopPercent, oomKillPercent")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".pods.exitCode: 0 is not an exit code")), "{p:?}");
        let l: Lifecycle = serde_yaml::from_str(
            "pods: {readiness: {flapPercent: 10, notReadyFor: {fixed: 3m}, every: 2m}, runTime: {min: 3s, max: 1s}}",
        )
        .unwrap();
        let p = problems(&l);
        assert!(p.iter().any(|m| m.starts_with(".pods.readiness.every: 120s is not longer")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".pods.runTime.min:")), "{p:?}");
        let ok: Lifecycle = serde_yaml::from_str(
            "pods: {oomKillPercent: 10, imagePullFailPercent: 5, initFailPercent: 5, exitCode: 42, runTime: {fixed: 10s}, readiness: {flapPercent: 50}}",
        )
        .unwrap();
        assert_eq!(problems(&ok), Vec::<String>::new());
    }

    #[test]
    fn node_conditions_are_checked() {
        let l: Lifecycle = serde_yaml::from_str(
            "nodes: {conditions: [{type: MemoryPressure, percent: 101}, {type: MemoryPressure, percent: 5, every: 1m}, {type: NotReady, percent: 10, lasts: {fixed: 2m}, every: 1m}]}",
        )
        .unwrap();
        let p = problems(&l);
        assert!(p.iter().any(|m| m.starts_with(".nodes.conditions[0].percent: 101")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".nodes.conditions[1].type: MemoryPressure is listed twice")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".nodes.conditions[1].every: only with lasts")), "{p:?}");
        assert!(p.iter().any(|m| m.starts_with(".nodes.conditions[2].every: 60s is not longer")), "{p:?}");
        let ok: Lifecycle = serde_yaml::from_str(
            "nodes: {conditions: [{type: DiskPressure, percent: 20}, {type: NotReady, percent: 5, lasts: {fixed: 30s}, every: 2m}]}",
        )
        .unwrap();
        assert_eq!(problems(&ok), Vec::<String>::new());
        assert!(serde_yaml::from_str::<Lifecycle>("nodes: {conditions: [{type: Hungry, percent: 1}]}").is_err());
    }

    #[test]
    fn a_pools_heartbeat_is_checked_and_read() {
        let l: Lifecycle =
            serde_yaml::from_str("nodes: {heartbeat: {leaseDurationSeconds: 5, statusReportInterval: 2h}}").unwrap();
        let p = problems(&l);
        assert!(
            p.iter().any(|m| m.starts_with(".nodes.heartbeat.leaseDurationSeconds: 5 is not from 10 to 3600")),
            "{p:?}"
        );
        assert!(p.iter().any(|m| m.starts_with(".nodes.heartbeat.statusReportInterval: \"2h\"")), "{p:?}");
        let ok = Heartbeat { lease_duration_seconds: Some(200), status_report_interval: Some("1m".into()) };
        assert_eq!(ok.settings(), (Some(Duration::from_secs(200)), Some(Duration::from_secs(60))));
        assert_eq!(Heartbeat::default().settings(), (None, None));
    }
}
