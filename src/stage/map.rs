//! A kwok Stage read into what it does to the simulated objects, and that into lifecycle
//! policy knobs: which objects (its label, annotation and owner terms become the policy's
//! selector), at which moment of their life (its phase, condition and deletion terms), what it
//! writes (its status template rendered against a sample object, its delete) and after how
//! long (its delay). Every field of every stage is accounted for: mapped (with what it became)
//! or not (with why), one line each. Pure: files and output are the command's.

use super::api::{Stage, StageDelay, StageStep};
use super::expression::{self, Op, Path, Term};
use crate::api::lifecycle::{Delay, Heartbeat, NodeLifecycle, PodLifecycle};
use crate::policy::api::{
    LifecyclePolicy, LifecyclePolicySpec, NodeRule, NodeSelector, OwnerKind, PodRule, PodSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One line of the import's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub file: String,
    pub stage: String,
    pub field: String,
    pub mapped: bool,
    pub note: String,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = if self.mapped { "mapped" } else { "NOT MAPPED" };
        write!(f, "{}: Stage {}: {}: {verdict}: {}", self.file, self.stage, self.field, self.note)
    }
}

/// The kwok stage annotations the simulator reads itself (as kwok's own stages do), by stage.
const BUILT_IN_STAGES: [&str; 9] = [
    "pod-create",
    "pod-ready",
    "pod-complete",
    "pod-delete",
    "pod-init-container-running",
    "pod-init-container-completed",
    "pod-container-running-failed",
    "pod-init-container-running-failed",
    "node-not-ready",
];

/// The chaos labels the simulator honours itself, with kwok's semantics.
const CHAOS_LABELS: [&str; 3] = [
    "pod-container-running-failed.stage.kwok.x-k8s.io",
    "pod-init-container-running-failed.stage.kwok.x-k8s.io",
    "node-not-ready.stage.kwok.x-k8s.io",
];

/// What a stage is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Pods,
    Nodes,
}

/// When in an object's life a stage acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// A pod not running yet (Pending, no IP).
    Starting,
    /// A Pending pod whose init containers run (only pods with init containers).
    Initializing,
    Running,
    Deleting,
    /// A node not Ready yet.
    NodeStarting,
    /// A Ready, running node.
    NodeRunning,
}

/// What a stage's steps do.
#[derive(Clone, Debug, PartialEq)]
enum Effect {
    /// A pod step on its way to Running: created, initializing, initialized.
    StartStep,
    /// Running and Ready.
    Ready,
    /// Running and not Ready.
    NeverReady,
    Succeeded,
    /// Failed with a container's (`init`: an init container's) terminated state.
    Failed {
        init: bool,
    },
    Delete,
    /// Healthy node conditions written (and the node's defaults).
    NodeHealthy,
    /// Ready=False written.
    NodeNotReady,
}

/// The pieces of one policy being built: its selector's terms and its knobs.
#[derive(Clone, Debug, Default, PartialEq)]
struct Group {
    labels: BTreeMap<String, String>,
    expressions: Vec<LabelSelectorRequirement>,
    annotations: BTreeMap<String, String>,
    owners: Vec<OwnerKind>,
    /// (knob, value, stage) as set.
    pods: Vec<(String, Value, String)>,
    nodes: Vec<(String, Value, String)>,
    stages: Vec<String>,
    weight: i64,
}

/// The whole import: policies and the report.
#[derive(Debug, Default)]
pub struct Import {
    pub policies: Vec<LifecyclePolicy>,
    pub lines: Vec<Line>,
}

impl Import {
    /// Whether some field was not mapped.
    pub fn partial(&self) -> bool {
        self.lines.iter().any(|l| !l.mapped)
    }
}

struct Ctx<'a> {
    file: &'a str,
    stage: &'a str,
    lines: &'a mut Vec<Line>,
}

impl Ctx<'_> {
    fn say(&mut self, field: &str, mapped: bool, note: impl Into<String>) {
        self.lines.push(Line {
            file: self.file.to_string(),
            stage: self.stage.to_string(),
            field: field.to_string(),
            mapped,
            note: note.into(),
        });
    }
}

/// Our delay for kwok's `durationMilliseconds` and `jitterDurationMilliseconds`: fixed, or
/// uniform between them (kwok: the jitter alone when it is not longer).
fn delay_of(duration: Option<i64>, jitter: Option<i64>) -> Delay {
    let ms = |v: i64| format!("{}ms", v.max(0));
    let d = duration.unwrap_or(0);
    match jitter {
        Some(j) if j <= d => Delay { fixed: Some(ms(j)), ..Default::default() },
        Some(j) => Delay { min: Some(ms(d)), max: Some(ms(j)), ..Default::default() },
        None => Delay { fixed: Some(ms(d)), ..Default::default() },
    }
}

/// The annotation a jq `durationFrom` reads (`.metadata.annotations["k"]`), if that is what it
/// is.
fn annotation_read(jq: &str) -> Option<String> {
    match expression::parse_path(jq)? {
        Path::Annotation(k) => Some(k),
        _ => None,
    }
}

/// Whether an annotation is one of kwok's stage annotations the simulator reads itself.
fn built_in_annotation(key: &str) -> bool {
    BUILT_IN_STAGES.iter().any(|s| key.starts_with(&format!("{s}.stage.kwok.x-k8s.io/")))
}

/// The stage's delay, reporting each of its fields.
fn map_delay(delay: Option<&StageDelay>, target: Target, c: &mut Ctx<'_>) -> Option<Delay> {
    let delay = delay?;
    let mut d = delay_of(delay.duration_milliseconds, delay.jitter_duration_milliseconds);
    c.say("spec.delay.durationMilliseconds", true, format!("the knob's delay: {}", describe(&d)));
    if delay.jitter_duration_milliseconds.is_some() {
        c.say(
            "spec.delay.jitterDurationMilliseconds",
            true,
            "the upper end of the delay, as kwok draws it (the jitter alone when it is not longer)",
        );
    }
    for (field, from) in [
        ("spec.delay.durationFrom", &delay.duration_from),
        ("spec.delay.jitterDurationFrom", &delay.jitter_duration_from),
    ] {
        let Some(from) = from else { continue };
        match from.jq() {
            Some(jq) => match annotation_read(jq) {
                Some(k) if built_in_annotation(&k) => {
                    c.say(field, true, format!("the simulator reads {k} from the object itself, as kwok's stage does"))
                }
                Some(k) if field == "spec.delay.durationFrom" && target == Target::Pods => {
                    c.say(field, true, format!("the knob's fromAnnotation: {k}, a duration or a time, as kwok reads it"));
                    d.from_annotation = Some(k);
                }
                Some(k) => c.say(
                    field,
                    false,
                    format!(
                        "a delay read from the annotation {k}: only a pod's delay (not its jitter, not a node's) reads one"
                    ),
                ),
                None if expression::parse_path(jq) == Some(Path::DeletionTimestamp) => c.say(
                    field,
                    true,
                    "until the deletion timestamp: a deleted pod here never outlives its grace period",
                ),
                None => c.say(field, false, format!("the expression {jq:?} is not one this importer reads")),
            },
            None => c.say(field, false, "a CEL expression: only jq forms are read"),
        }
    }
    for k in delay.unknown.keys() {
        c.say(&format!("spec.delay.{k}"), false, "not a field of kwok's StageDelay");
    }
    Some(d)
}

fn describe(d: &Delay) -> String {
    match (&d.fixed, &d.min, &d.max) {
        (Some(f), _, _) => format!("fixed {f}"),
        (_, Some(lo), Some(hi)) => format!("{lo} to {hi}"),
        _ => "none".into(),
    }
}

/// Splits the selector into the policy's terms (which objects) and the moment's terms.
fn map_selector(stage: &Stage, target: Target, group: &mut Group, c: &mut Ctx<'_>) -> Result<Vec<Term>, ()> {
    let Some(sel) = &stage.spec.selector else {
        c.say("spec.selector", false, "no selector: kwok drops such a stage (it acts on nothing)");
        return Err(());
    };
    for (k, v) in &sel.match_labels {
        group.labels.insert(k.clone(), v.clone());
        c.say(&format!("spec.selector.matchLabels.{k}"), true, "the policy's selector");
    }
    for (k, v) in &sel.match_annotations {
        group.annotations.insert(k.clone(), v.clone());
        c.say(&format!("spec.selector.matchAnnotations.{k}"), true, "the policy's selector");
    }
    for k in sel.unknown.keys() {
        c.say(&format!("spec.selector.{k}"), false, "not a field of kwok's StageSelector");
    }
    let mut moment_terms = Vec::new();
    for (i, e) in sel.match_expressions.iter().enumerate() {
        let field = format!("spec.selector.matchExpressions[{i}]");
        if e.cel.is_some() && e.requirement().is_none() {
            c.say(&field, false, "a CEL expression: only jq path forms are read");
            continue;
        }
        let Some(req) = e.requirement() else {
            c.say(&field, false, "neither jq nor cel: kwok refuses it");
            continue;
        };
        let term = match expression::parse(&req) {
            Ok(t) => t,
            Err(why) => {
                c.say(&field, false, why);
                continue;
            }
        };
        match &term.path {
            Path::Label(k) => {
                let values = (!term.values.is_empty()).then(|| term.values.clone());
                let op = match term.op {
                    Op::In => "In",
                    Op::NotIn => "NotIn",
                    Op::Exists => "Exists",
                    Op::DoesNotExist => "DoesNotExist",
                };
                group.expressions.push(LabelSelectorRequirement { key: k.clone(), operator: op.into(), values });
                c.say(&field, true, format!("the policy's selector: label {k} {op}"));
            }
            Path::Annotation(k) if term.op == Op::In && term.values.len() == 1 => {
                group.annotations.insert(k.clone(), term.values[0].clone());
                c.say(&field, true, format!("the policy's selector: annotation {k}"));
            }
            Path::Annotation(k) => c.say(
                &field,
                false,
                format!("annotation {k} {:?}: a policy selects annotations by one exact value", term.op),
            ),
            Path::OwnerKind if target == Target::Pods && term.op == Op::In => {
                for kind in &term.values {
                    group.owners.push(OwnerKind { api_group: "*".into(), kind: kind.clone() });
                }
                c.say(&field, true, "the policy's selector: owners of these kinds (any API group, as kwok reads them)");
            }
            _ => {
                c.say(&field, true, "the moment of the object's life it acts at (see the knob it became)");
                moment_terms.push(term);
            }
        }
    }
    Ok(moment_terms)
}

/// The moment the stage's own terms describe.
fn moment(target: Target, terms: &[Term]) -> Option<Moment> {
    let has = |p: &Path, op: Op, v: Option<&str>| {
        terms.iter().any(|t| &t.path == p && t.op == op && v.is_none_or(|v| t.values.iter().any(|x| x == v)))
    };
    match target {
        Target::Pods => {
            let init_state = terms.iter().any(|t| matches!(t.path, Path::ContainerState { init: true, .. }));
            if has(&Path::DeletionTimestamp, Op::Exists, None) {
                Some(Moment::Deleting)
            } else if init_state {
                Some(Moment::Initializing)
            } else if has(&Path::Phase, Op::In, Some("Running")) {
                Some(Moment::Running)
            } else if has(&Path::Phase, Op::In, Some("Pending")) || has(&Path::PodIp, Op::DoesNotExist, None) {
                Some(Moment::Starting)
            } else {
                None
            }
        }
        Target::Nodes => {
            if has(&Path::Condition("Ready".into()), Op::NotIn, Some("True")) {
                Some(Moment::NodeStarting)
            } else if has(&Path::Phase, Op::In, Some("Running")) {
                Some(Moment::NodeRunning)
            } else {
                None
            }
        }
    }
}

/// A sample object at `moment`: what the status template is rendered against.
fn sample(moment: Moment, labels: &BTreeMap<String, String>) -> Value {
    let containers = json!([{"name": "app", "image": "app:1"}]);
    match moment {
        Moment::NodeStarting | Moment::NodeRunning => json!({
            "metadata": {"name": "node-0", "labels": labels, "annotations": {}, "creationTimestamp": super::template::NOW},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "addresses": [],
                       "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}, "capacity": {"cpu": "1", "memory": "1Gi", "pods": "110"},
                       "nodeInfo": {"architecture": "amd64"}},
        }),
        _ => {
            let running = moment == Moment::Running;
            let state = if running {
                json!({"running": {"startedAt": super::template::NOW}})
            } else {
                json!({"waiting": {"reason": "PodInitializing"}})
            };
            json!({
                "metadata": {"name": "pod-0", "namespace": "default", "uid": "u-0", "labels": labels, "annotations": {},
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-0", "controller": true}]},
                "spec": {"nodeName": "node-0", "hostNetwork": false, "containers": containers,
                         "initContainers": [{"name": "init", "image": "init:1"}], "readinessGates": []},
                "status": {
                    "phase": if running { "Running" } else { "Pending" },
                    "conditions": [{"type": "Initialized", "status": if running { "True" } else { "False" }}],
                    "containerStatuses": [{"name": "app", "image": "app:1", "ready": running, "restartCount": 0, "state": state}],
                    "initContainerStatuses": [{"name": "init", "image": "init:1", "ready": running, "restartCount": 0,
                                               "state": {"waiting": {"reason": "PodInitializing"}}}],
                },
            })
        }
    }
}

fn ready_of(status: &Value) -> Option<&str> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str())
}

/// What the stage's steps do, reporting each step.
fn effect(stage: &Stage, moment: Moment, labels: &BTreeMap<String, String>, c: &mut Ctx<'_>) -> Option<Effect> {
    let mut found = None;
    for (i, step) in stage.steps().iter().enumerate() {
        let field = if stage.spec.steps.is_empty() { "spec.next".to_string() } else { format!("spec.steps[{i}]") };
        if let Some(e) = step_effect(step, moment, labels, &field, c) {
            found = Some(e);
        }
    }
    found
}

fn step_effect(
    step: &StageStep,
    moment: Moment,
    labels: &BTreeMap<String, String>,
    field: &str,
    c: &mut Ctx<'_>,
) -> Option<Effect> {
    if let Some(e) = &step.event {
        c.say(
            &format!("{field}.event"),
            false,
            format!("the {} event {:?}: the simulator writes no such event", e.type_, e.reason),
        );
    }
    if let Some(f) = &step.finalizers {
        let what = if f.empty { "empties the finalizers" } else { "adds or removes finalizers" };
        c.say(
            &format!("{field}.finalizers"),
            false,
            format!("{what}: the simulator leaves other components' finalizers alone"),
        );
    }
    if step.apply.is_some() {
        c.say(
            &format!("{field}.apply"),
            false,
            "creates or applies another object: the simulator makes no other objects",
        );
    }
    for k in step.unknown.keys() {
        c.say(&format!("{field}.{k}"), false, "not a field of kwok's stage steps");
    }
    if step.delete {
        c.say(&format!("{field}.delete"), true, "the pod's final delete (grace period 0)");
        return Some(Effect::Delete);
    }
    let patch = step.patch.as_ref()?;
    let patch_field = format!("{field}.statusTemplate");
    if patch.impersonation.is_some() {
        c.say(&format!("{field}.statusPatchAs"), false, "the simulator writes status as itself");
    }
    if patch.root.as_deref() != Some("status") {
        c.say(&patch_field, false, "a patch of something other than the status: only status templates are read");
        return None;
    }
    let rendered = match super::template::render(&patch.template, &sample(moment, labels)) {
        Ok(v) => v,
        Err(why) => {
            c.say(&patch_field, false, why);
            return None;
        }
    };
    let phase = rendered["phase"].as_str();
    let ready = ready_of(&rendered);
    let e = match (moment, phase, ready) {
        (Moment::NodeStarting | Moment::NodeRunning, _, Some("False")) => Effect::NodeNotReady,
        (Moment::NodeStarting | Moment::NodeRunning, _, _) => Effect::NodeHealthy,
        (_, Some("Failed"), _) => {
            let init = rendered["initContainerStatuses"]
                .as_array()
                .is_some_and(|s| s.iter().any(|c| c["state"]["terminated"]["exitCode"].as_i64().unwrap_or(0) != 0));
            Effect::Failed { init }
        }
        (_, Some("Succeeded"), _) => Effect::Succeeded,
        (_, Some("Running"), Some("False")) => Effect::NeverReady,
        (_, Some("Running"), _) => Effect::Ready,
        (Moment::Starting | Moment::Initializing, _, _) => Effect::StartStep,
        _ => {
            c.say(&patch_field, false, format!("writes {rendered}: not a change this importer knows"));
            return None;
        }
    };
    c.say(&patch_field, true, format!("rendered: {}", effect_name(&e)));
    Some(e)
}

fn effect_name(e: &Effect) -> &'static str {
    match e {
        Effect::StartStep => "a step of the pod's start (created, initializing)",
        Effect::Ready => "the pod Running and Ready",
        Effect::NeverReady => "the pod Running, not Ready",
        Effect::Succeeded => "the pod Succeeded",
        Effect::Failed { init: false } => "a container failed, the pod Failed",
        Effect::Failed { init: true } => "an init container failed, the pod Failed",
        Effect::Delete => "the pod deleted",
        Effect::NodeHealthy => "the node's healthy conditions",
        Effect::NodeNotReady => "the node Ready=False",
    }
}

/// The knob a (moment, effect) becomes, with its value.
fn knob(
    target: Target,
    moment: Moment,
    effect: &Effect,
    delay: Option<&Delay>,
    group: &Group,
    c: &mut Ctx<'_>,
) -> Option<(String, Value)> {
    let d = delay.cloned().unwrap_or(Delay { fixed: Some("0s".into()), ..Default::default() });
    let job = group.owners.iter().any(|o| o.kind == "Job");
    let chaos = group.expressions.iter().any(|e| CHAOS_LABELS.contains(&e.key.as_str()))
        || group.labels.keys().any(|k| CHAOS_LABELS.contains(&k.as_str()));
    let value = |d: &Delay| serde_json::to_value(d).unwrap_or_default();
    match (target, moment, effect) {
        (Target::Pods, Moment::Starting, Effect::StartStep | Effect::Ready) => Some(("startDelay".into(), value(&d))),
        (Target::Pods, Moment::Initializing, _) => {
            c.say(
                "spec",
                false,
                "kwok delays only pods with init containers by this stage: no knob tells them apart, so it is not added to startDelay (pods with init containers start that much sooner here)",
            );
            None
        }
        (Target::Pods, Moment::Running, Effect::Succeeded) if job => Some(("jobRunTime".into(), value(&d))),
        (Target::Pods, Moment::Running, Effect::Succeeded) => Some(("runTime".into(), value(&d))),
        (Target::Pods, Moment::Deleting, Effect::Delete) => Some(("exitDelay".into(), value(&d))),
        (Target::Pods, _, Effect::NeverReady) => Some(("notReadyPercent".into(), json!(100))),
        (_, _, Effect::Failed { .. } | Effect::NodeNotReady) if chaos => {
            c.say("spec", true, "kwok's chaos label and annotations: the simulator honours them itself, with kwok's semantics (no policy needed)");
            None
        }
        (Target::Nodes, Moment::NodeStarting, Effect::NodeHealthy) => {
            c.say(
                "spec",
                true,
                "the simulator's own kubelet makes every managed node Ready with these conditions (no policy needed)",
            );
            None
        }
        (Target::Nodes, Moment::NodeRunning, Effect::NodeHealthy) => {
            let every = d.min.clone().or(d.fixed.clone()).unwrap_or_else(|| "10s".into());
            let h = Heartbeat { status_report_interval: Some(clamp_interval(&every)), ..Default::default() };
            Some(("heartbeat".into(), serde_json::to_value(h).unwrap_or_default()))
        }
        (Target::Nodes, _, Effect::NodeNotReady) => {
            let outage = json!({"lasts": {"fixed": "24h"}, "ready": "False", "after": value(&d)});
            Some(("outage".into(), outage))
        }
        _ => {
            c.say("spec", false, format!("{} at that moment has no knob", effect_name(effect)));
            None
        }
    }
}

/// A status report interval within what the knob takes (1s to 1h).
fn clamp_interval(text: &str) -> String {
    let d = crate::api::duration::parse_duration(text).unwrap_or(std::time::Duration::from_secs(10));
    let d = d.clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(3600));
    format!("{}s", d.as_secs())
}

/// Sums two delays (the steps of one path): fixed values add; otherwise the ranges' ends add.
fn add_delays(a: &Value, b: &Value) -> Value {
    let ends = |v: &Value| -> (u128, u128) {
        let ms = |s: Option<&str>| s.and_then(crate::api::duration::parse_duration).map_or(0, |d| d.as_millis());
        match v["fixed"].as_str() {
            Some(f) => (ms(Some(f)), ms(Some(f))),
            None => (ms(v["min"].as_str()), ms(v["max"].as_str())),
        }
    };
    let ((a0, a1), (b0, b1)) = (ends(a), ends(b));
    let (lo, hi) = (a0 + b0, a1 + b1);
    if lo == hi {
        json!({"fixed": format!("{lo}ms")})
    } else {
        json!({"min": format!("{lo}ms"), "max": format!("{hi}ms")})
    }
}

/// Adds a stage's knob to its policy's: the steps of a start add up; another value for a knob
/// already set is reported.
fn add_knob(knobs: &mut Vec<(String, Value, String)>, knob: String, value: Value, stage: &str, c: &mut Ctx<'_>) {
    match knobs.iter_mut().find(|(k, _, _)| *k == knob) {
        // The steps of one start add up (kwok's general pod stages: created, initializing, ready).
        Some((_, old, first))
            if knob == "startDelay" && [&*old, &value].iter().any(|v| v.get("fromAnnotation").is_some()) =>
        {
            let note = format!(
                "startDelay: a delay read from an annotation does not add up with stage {first}'s; the first is kept"
            );
            c.say("spec.delay", false, note);
        }
        Some((_, old, _)) if knob == "startDelay" => *old = add_delays(old, &value),
        Some((_, old, first)) if *old != value => {
            let note = format!("{knob} is set by stage {first} too ({old}); the first is kept");
            c.say("spec", false, note);
        }
        Some(_) => {}
        None => knobs.push((knob, value, stage.to_string())),
    }
}

/// Imports `stages` (each with the file it came from); `prefix` names the policies.
pub fn import(stages: &[(String, Stage)], prefix: &str) -> Import {
    let mut lines = Vec::new();
    let mut groups: BTreeMap<String, (Target, Group)> = BTreeMap::new();
    for (file, stage) in stages {
        let mut c = Ctx { file, stage: &stage.metadata.name, lines: &mut lines };
        let (api, kind) = (stage.spec.resource_ref.api_group.as_str(), stage.spec.resource_ref.kind.as_str());
        let target = match (api, kind) {
            ("v1" | "", "Pod") => Target::Pods,
            ("v1" | "", "Node") => Target::Nodes,
            _ => {
                c.say(
                    "spec.resourceRef",
                    false,
                    format!("{api} {kind}: kwok-pools does not simulate this kind (nothing of this stage is mapped)"),
                );
                continue;
            }
        };
        if api.is_empty() {
            c.say(
                "spec.resourceRef.apiGroup",
                true,
                "empty: read as v1 (kwok itself would hand such a stage to its generic controller)",
            );
        } else {
            c.say("spec.resourceRef", true, format!("{kind}s"));
        }
        for k in stage.unknown.keys().chain(stage.spec.unknown.keys()) {
            c.say(k, false, "not a field of kwok's Stage");
        }
        let mut group = Group::default();
        let Ok(terms) = map_selector(stage, target, &mut group, &mut c) else { continue };
        let Some(moment) = moment(target, &terms) else {
            c.say("spec.selector", false, "its terms name no moment of the object's life this importer knows");
            continue;
        };
        let delay = map_delay(stage.spec.delay.as_ref(), target, &mut c);
        if stage.spec.weight != 0 || stage.spec.weight_from.is_some() {
            c.say("spec.weight", true, "kwok's weights choose between stages matching one object; here each moment has one behaviour and the policy's weight breaks ties between policies");
        }
        if stage.spec.immediate_next_stage.is_some() {
            c.say(
                "spec.immediateNextStage",
                true,
                "the simulator moves an object on without waiting for another watch event",
            );
        }
        let Some(effect) = effect(stage, moment, &group.labels, &mut c) else { continue };
        let Some((knob, value)) = knob(target, moment, &effect, delay.as_ref(), &group, &mut c) else { continue };
        group.weight = stage.spec.weight;
        let key = serde_json::to_string(&(
            format!("{target:?}"),
            &group.labels,
            &group.expressions,
            &group.annotations,
            &group.owners,
        ))
        .unwrap_or_default();
        let entry = groups.entry(key).or_insert_with(|| {
            (target, Group { stages: Vec::new(), pods: Vec::new(), nodes: Vec::new(), ..group.clone() })
        });
        entry.1.stages.push(stage.metadata.name.clone());
        let knobs = if target == Target::Pods { &mut entry.1.pods } else { &mut entry.1.nodes };
        add_knob(knobs, knob, value, &stage.metadata.name, &mut c);
    }
    let policies = groups.into_values().map(|(target, g)| policy(prefix, target, g)).collect();
    Import { policies, lines }
}

/// The policy of one group.
fn policy(prefix: &str, target: Target, g: Group) -> LifecyclePolicy {
    let first = g.stages.first().cloned().unwrap_or_default();
    let name = format!("{prefix}-{first}").chars().take(63).collect::<String>().trim_end_matches('-').to_string();
    let knobs = |list: &[(String, Value, String)]| -> Value {
        Value::Object(list.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect())
    };
    let mut spec =
        LifecyclePolicySpec { weight: Some(g.weight.clamp(0, 1000) as i32).filter(|w| *w != 0), ..Default::default() };
    match target {
        Target::Pods => {
            let lifecycle: PodLifecycle = serde_json::from_value(knobs(&g.pods)).unwrap_or_default();
            let selector = PodSelector {
                match_labels: g.labels,
                match_expressions: g.expressions,
                match_annotations: g.annotations,
                owners: g.owners,
                ..Default::default()
            };
            spec.pods = Some(PodRule { selector, lifecycle });
        }
        Target::Nodes => {
            let lifecycle: NodeLifecycle = serde_json::from_value(knobs(&g.nodes)).unwrap_or_default();
            let selector = NodeSelector {
                match_labels: g.labels,
                match_expressions: g.expressions,
                match_annotations: g.annotations,
                owners: Vec::new(),
            };
            spec.nodes = Some(NodeRule { selector, lifecycle, devices: Vec::new() });
        }
    }
    let annotations = [("pools.kwok.x-k8s.io/imported-from".to_string(), g.stages.join(","))].into();
    LifecyclePolicy {
        metadata: ObjectMeta { name: Some(name), annotations: Some(annotations), ..Default::default() },
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(yaml: &str) -> (String, Stage) {
        let mut all = super::super::api::parse_all(yaml);
        ("f.yaml".to_string(), all.remove(0).unwrap())
    }

    const READY: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: ready}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector:\n    matchExpressions:\n    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}\n    - {key: '.status.phase', operator: In, values: [Pending]}\n  delay: {durationMilliseconds: 1000, jitterDurationMilliseconds: 3000}\n  next:\n    statusTemplate: |\n      conditions:\n      - type: Ready\n        status: \"True\"\n      phase: Running\n";
    const COMPLETE: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: complete}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector:\n    matchLabels: {workload: short-lived}\n    matchExpressions:\n    - {key: '.status.phase', operator: In, values: [Running]}\n    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}\n  delay: {durationMilliseconds: 30000}\n  next:\n    statusTemplate: 'phase: Succeeded'\n";
    const DELETE: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: delete}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector:\n    matchExpressions:\n    - {key: '.metadata.deletionTimestamp', operator: Exists}\n  next:\n    delete: true\n    event: {type: Normal, reason: Gone, message: bye}\n";

    #[test]
    fn stages_become_the_knobs_of_the_moment_they_act_at() {
        let import = import(&[stage(READY), stage(COMPLETE), stage(DELETE)], "kwok");
        let by = |sel_label: Option<&str>| {
            import
                .policies
                .iter()
                .find(|p| {
                    p.spec.pods.as_ref().unwrap().selector.match_labels.get("workload").map(String::as_str) == sel_label
                })
                .unwrap()
        };
        let all = &by(None).spec.pods.as_ref().unwrap().lifecycle;
        assert_eq!(all.start_delay.as_ref().unwrap().min.as_deref(), Some("1000ms"));
        assert_eq!(all.start_delay.as_ref().unwrap().max.as_deref(), Some("3000ms"));
        assert_eq!(all.exit_delay.as_ref().unwrap().fixed.as_deref(), Some("0s"), "deleted at once");
        let short = by(Some("short-lived")).spec.pods.as_ref().unwrap();
        assert_eq!(short.lifecycle.job_run_time.as_ref().unwrap().fixed.as_deref(), Some("30000ms"));
        assert_eq!(short.selector.owners, vec![OwnerKind { api_group: "*".into(), kind: "Job".into() }]);
        // The event is named as not mapped, with its stage and field; everything else mapped.
        let unmapped: Vec<&Line> = import.lines.iter().filter(|l| !l.mapped).collect();
        assert_eq!(unmapped.len(), 1, "{unmapped:?}");
        assert_eq!((unmapped[0].stage.as_str(), unmapped[0].field.as_str()), ("delete", "spec.next.event"));
        assert!(import.partial());
        for p in &import.policies {
            assert!(crate::policy::rules::validate(p).is_empty(), "{:?}", crate::policy::rules::validate(p));
        }
    }

    #[test]
    fn kinds_it_does_not_play_and_unknown_fields_are_reported_never_dropped() {
        let pvc = stage(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: pvc}\nspec:\n  resourceRef: {apiGroup: v1, kind: PersistentVolumeClaim}\n  selector: {}\n",
        );
        let odd = stage(&READY.replace("  delay:", "  flavour: mint\n  delay:"));
        let cel = stage(&READY.replace("    - {key: '.status.phase', operator: In, values: [Pending]}\n", "    - {key: '.status.phase', operator: In, values: [Pending]}\n    - cel: {expression: 'self.spec.x == 1'}\n"));
        let import = import(&[pvc, odd, cel], "kwok");
        let said =
            |stage: &str, field: &str| import.lines.iter().any(|l| l.stage == stage && l.field == field && !l.mapped);
        assert!(said("pvc", "spec.resourceRef"));
        assert!(said("ready", "flavour"));
        assert!(said("ready", "spec.selector.matchExpressions[2]"), "{:?}", import.lines);
    }

    #[test]
    fn delays_follow_kwoks_jitter_rule() {
        assert_eq!(delay_of(Some(1000), Some(1000)).fixed.as_deref(), Some("1000ms"));
        assert_eq!(
            delay_of(Some(10000), Some(1000)).fixed.as_deref(),
            Some("1000ms"),
            "the jitter alone when not longer"
        );
        let d = delay_of(Some(1000), Some(5000));
        assert_eq!((d.min.as_deref(), d.max.as_deref()), (Some("1000ms"), Some("5000ms")));
        assert_eq!(delay_of(None, None).fixed.as_deref(), Some("0ms"));
        assert_eq!(
            add_delays(&json!({"fixed": "1s"}), &json!({"min": "1s", "max": "5s"})),
            json!({"min": "2000ms", "max": "6000ms"})
        );
    }

    #[test]
    fn a_delay_read_from_a_pods_annotation_becomes_from_annotation_and_a_nodes_is_reported() {
        let from = "  delay:\n    durationMilliseconds: 30000\n    durationFrom: {expressionFrom: '.metadata.annotations[\"x.io/run-for\"]'}\n";
        let pods = stage(&COMPLETE.replace("  delay: {durationMilliseconds: 30000}\n", from));
        let imported = import(&[pods], "kwok");
        let run = imported.policies[0].spec.pods.as_ref().unwrap().lifecycle.job_run_time.clone().unwrap();
        assert_eq!((run.from_annotation.as_deref(), run.fixed.as_deref()), (Some("x.io/run-for"), Some("30000ms")));
        assert!(!imported.partial(), "{:?}", imported.lines);
        assert!(crate::policy::rules::validate(&imported.policies[0]).is_empty());

        let node = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: down}\nspec:\n  resourceRef: {apiGroup: v1, kind: Node}\n  selector:\n    matchLabels: {x: y}\n    matchExpressions:\n    - {key: '.status.phase', operator: In, values: [Running]}\n  delay:\n    durationFrom: {expressionFrom: '.metadata.annotations[\"x.io/down-after\"]'}\n  next:\n    statusTemplate: |\n      conditions:\n      - type: Ready\n        status: \"False\"\n";
        let nodes = import(&[stage(node)], "kwok");
        assert!(
            nodes.lines.iter().any(|l| l.stage == "down" && l.field == "spec.delay.durationFrom" && !l.mapped),
            "{:?}",
            nodes.lines
        );
    }
}
