//! Per-pod behaviour set by annotations on the pod (or its template): its own start delay,
//! run time, exit delay and failures, beside and above its pool's knobs. kwok's stage
//! annotation names are accepted where the meaning is the same, so a kwok user's manifests
//! behave here unchanged. Pure: parsing and checking; what a bad value means is said in
//! [`PodOverrides::problems`], which the simulator reports as an event on the pod.

use super::duration::parse_duration;
use std::collections::BTreeMap;
use std::time::Duration;

/// kwok's stages whose `delay` / `jitter-delay` annotations are read, and what each sets here.
pub const STAGE_PREFIX: &str = ".stage.kwok.x-k8s.io/";
/// Our own annotation: `fail` makes every image pull of the pod fail (ErrImagePull, then
/// ImagePullBackOff; the pod stays Pending).
pub const IMAGE_PULL_ANNOTATION: &str = "pools.kwok.x-k8s.io/image-pull";
/// Our own annotation: `flap` makes the pod's readiness probe fail now and then (see the
/// pool's `readiness` knob for how often; 2m / 20s when the pool says nothing); `never` makes
/// it never pass (Running, Ready=False for good).
pub const READINESS_ANNOTATION: &str = "pools.kwok.x-k8s.io/readiness";

/// A delay as kwok's stages write it: `delay`, and `jitter-delay` as the latest it may be
/// (uniform between the two when the jitter is the longer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub delay: Duration,
    pub latest: Option<Duration>,
}

impl Window {
    /// A sample from a uniform number in [0, 1).
    pub fn sample(&self, u: f64) -> Duration {
        match self.latest {
            Some(late) if late > self.delay => self.delay + (late - self.delay).mul_f64(u.clamp(0.0, 1.0)),
            _ => self.delay,
        }
    }
}

/// A container that fails: which one, how, and after how long it has run.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The container's name (`None`: every container).
    pub container: Option<String>,
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub after: Window,
}

/// kwok v0.8.0's chaos stages for pods: a pod labelled `<stage>.stage.kwok.x-k8s.io: "true"`
/// fails as the stage says, its annotations naming the container, exit code, reason, message
/// and delay.
pub const CONTAINER_CHAOS: &str = "pod-container-running-failed";
/// The same for an init container of a Pending pod.
pub const INIT_CHAOS: &str = "pod-init-container-running-failed";

/// A failure kwok's chaos stages inject: the pod ends Failed (whatever its restart policy),
/// with the named container (every one, when none is named) terminated.
#[derive(Clone, Debug, PartialEq)]
pub struct Chaos {
    /// An init container of a Pending pod (else a container of a Running pod).
    pub init: bool,
    pub container: Option<String>,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// How long after the pod is Running (an init container: after it is bound).
    pub after: Window,
}

/// What a pod's annotations say about it (only what they set).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodOverrides {
    /// Bound to Running (kwok's `pod-create` and `pod-ready` delays, added).
    pub start: Option<Window>,
    /// Running to Succeeded, for a pod with `restartPolicy: Never` or `OnFailure` whoever owns
    /// it (kwok's `pod-complete`).
    pub run_time: Option<Window>,
    /// Deleted to gone (kwok's `pod-delete`), never past the grace period.
    pub exit_delay: Option<Window>,
    /// A container that fails after it has run a while (this project's `pod-container-failed`,
    /// after a kwok proposal that did not land; kwok v0.8.0's own is [`Chaos`]).
    pub container_failed: Option<Failure>,
    /// An init container that fails (this project's `pod-init-container-failed`).
    pub init_failed: Option<Failure>,
    /// kwok's chaos label and its annotations.
    pub chaos: Option<Chaos>,
    pub image_pull_fails: bool,
    pub readiness_flaps: bool,
    /// Its readiness probe never passes.
    pub never_ready: bool,
    /// What was not understood, each naming the annotation and what to write instead; the
    /// pod behaves as if that annotation were not there.
    pub problems: Vec<String>,
}

fn key(stage: &str, field: &str) -> String {
    format!("{stage}{STAGE_PREFIX}{field}")
}

/// kwok's delay arithmetic: `delay`, or `jitter` when it is not longer, or uniform between them.
fn kwok_window(delay: Duration, jitter: Option<Duration>) -> Window {
    match jitter {
        Some(j) if j <= delay => Window { delay: j, latest: None },
        Some(j) => Window { delay, latest: Some(j) },
        None => Window { delay, latest: None },
    }
}

impl PodOverrides {
    /// From a pod's labels (kwok's chaos labels) and annotations; `None` when none of ours (or
    /// kwok's) is there.
    pub fn from_meta(
        labels: Option<&BTreeMap<String, String>>,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Self> {
        let chaos_label = |stage: &str| {
            labels.and_then(|l| l.get(&format!("{stage}.stage.kwok.x-k8s.io"))).is_some_and(|v| v == "true")
        };
        let (container, init) = (chaos_label(CONTAINER_CHAOS), chaos_label(INIT_CHAOS));
        let none = BTreeMap::new();
        let mut o = Self::from_annotations(annotations).unwrap_or_default();
        if init || container {
            let a = annotations.unwrap_or(&none);
            o.chaos = Some(if init { o.chaos_of(a, INIT_CHAOS, true) } else { o.chaos_of(a, CONTAINER_CHAOS, false) });
        }
        (o != PodOverrides::default()).then_some(o)
    }

    /// kwok's chaos stage `stage`, as its annotations set it (kwok's defaults otherwise: 1s,
    /// exit code 1, its reason and message).
    fn chaos_of(&mut self, a: &BTreeMap<String, String>, stage: &str, init: bool) -> Chaos {
        let delay = self.duration(a, &key(stage, "delay")).unwrap_or(Duration::from_secs(1));
        let jitter = self.duration(a, &key(stage, "jitter-delay")).unwrap_or(Duration::from_secs(1));
        let code_key = key(stage, "exit-code");
        let exit_code = match a.get(&code_key).map(|t| t.trim().parse::<i32>()) {
            None => 1,
            Some(Ok(c)) => c,
            Some(Err(_)) => {
                self.problems.push(format!("annotation {code_key}: not a number; kwok's default 1 is used"));
                1
            }
        };
        let (reason, message) = if init {
            ("initContainerError", "initContainer reported errors")
        } else {
            ("containerFailed", "container failed")
        };
        let text =
            |field: &str, default: &str| a.get(&key(stage, field)).cloned().unwrap_or_else(|| default.to_string());
        Chaos {
            init,
            container: a.get(&key(stage, "container-name")).map(|n| n.trim().to_string()).filter(|n| !n.is_empty()),
            exit_code,
            reason: text("reason", reason),
            message: text("message", message),
            after: kwok_window(delay, Some(jitter)),
        }
    }

    /// From a pod's annotations; `None` when none of ours (or kwok's) is there.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Option<Self> {
        let a = annotations?;
        if !a.keys().any(|k| k.contains(STAGE_PREFIX) || k == IMAGE_PULL_ANNOTATION || k == READINESS_ANNOTATION) {
            return None;
        }
        let mut o = PodOverrides::default();
        let create = o.window(a, "pod-create", Duration::ZERO);
        let ready = o.window(a, "pod-ready", Duration::ZERO);
        o.start = (create.is_some() || ready.is_some()).then(|| {
            let zero = Window { delay: Duration::ZERO, latest: None };
            let (x, y) = (create.unwrap_or(zero), ready.unwrap_or(zero));
            let late = |w: Window| w.latest.unwrap_or(w.delay).max(w.delay);
            Window {
                delay: x.delay + y.delay,
                latest: (x.latest.is_some() || y.latest.is_some()).then(|| late(x) + late(y)),
            }
        });
        o.run_time = o.window(a, "pod-complete", Duration::ZERO);
        o.exit_delay = o.window(a, "pod-delete", Duration::ZERO);
        // kwok's defaults for these stages: 2s after the container runs, 1s at once for init.
        o.container_failed = o.failure(a, "pod-container-failed", Duration::from_secs(2));
        o.init_failed = o.failure(a, "pod-init-container-failed", Duration::ZERO);
        o.image_pull_fails = o.word(a, IMAGE_PULL_ANNOTATION, "fail");
        match a.get(READINESS_ANNOTATION).map(|v| v.trim()) {
            Some("never") => o.never_ready = true,
            _ => o.readiness_flaps = o.word_of(a, READINESS_ANNOTATION, &["flap", "never"]) == Some("flap"),
        }
        Some(o)
    }

    fn duration(&mut self, a: &BTreeMap<String, String>, name: &str) -> Option<Duration> {
        let text = a.get(name)?;
        let parsed = parse_duration(text.trim());
        if parsed.is_none() {
            self.problems.push(format!(
                "annotation {name}: {text:?} is not a duration such as 500ms, 2s or 1m30s (at most 24h); it is ignored"
            ));
        }
        parsed
    }

    /// A stage's `delay` and `jitter-delay`; `default` when only the jitter is set.
    fn window(&mut self, a: &BTreeMap<String, String>, stage: &str, default: Duration) -> Option<Window> {
        let delay = self.duration(a, &key(stage, "delay"));
        let latest = self.duration(a, &key(stage, "jitter-delay"));
        if delay.is_none() && latest.is_none() {
            return None;
        }
        Some(Window { delay: delay.unwrap_or(default), latest })
    }

    fn failure(&mut self, a: &BTreeMap<String, String>, stage: &str, default: Duration) -> Option<Failure> {
        let name = a.get(&key(stage, "name"))?.trim().to_string();
        let code_key = key(stage, "exit-code");
        let exit_code = match a.get(&code_key) {
            None => 1,
            Some(text) => match text.trim().parse::<i32>() {
                Ok(c) if (1..=255).contains(&c) => c,
                _ => {
                    self.problems.push(format!(
                        "annotation {code_key}: {text:?} is not an exit code from 1 to 255 (a failure exits non-zero; to finish a pod use {}); exit code 1 is used",
                        key("pod-complete", "delay")
                    ));
                    1
                }
            },
        };
        let reason = a.get(&key(stage, "reason")).map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        let after = self.window(a, stage, default).unwrap_or(Window { delay: default, latest: None });
        Some(Failure {
            container: (!name.is_empty()).then_some(name),
            exit_code,
            reason: reason.unwrap_or_else(|| "Error".into()),
            message: a.get(&key(stage, "message")).cloned(),
            after,
        })
    }

    /// The annotation's value when it is one of `words` (anything else is a problem).
    fn word_of<'a>(&mut self, a: &'a BTreeMap<String, String>, name: &str, words: &[&str]) -> Option<&'a str> {
        let v = a.get(name)?.trim();
        if words.contains(&v) {
            return Some(v);
        }
        let said: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
        self.problems
            .push(format!("annotation {name}: {v:?} is not understood; write {} or remove it", said.join(" or ")));
        None
    }

    fn word(&mut self, a: &BTreeMap<String, String>, name: &str, want: &str) -> bool {
        match a.get(name).map(|v| v.trim()) {
            None => false,
            Some(v) if v == want => true,
            Some(v) => {
                self.problems.push(format!("annotation {name}: {v:?} is not understood; write {want:?} or remove it"));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Option<PodOverrides> {
        let a: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        PodOverrides::from_annotations(Some(&a))
    }

    #[test]
    fn pods_without_our_annotations_cost_nothing() {
        assert_eq!(parse(&[("app", "x"), ("kwok.x-k8s.io/usage-cpu", "1")]), None);
        assert_eq!(PodOverrides::from_annotations(None), None);
    }

    #[test]
    fn kwoks_stage_annotations_mean_the_same_here() {
        let o = parse(&[
            ("pod-ready.stage.kwok.x-k8s.io/delay", "2s"),
            ("pod-ready.stage.kwok.x-k8s.io/jitter-delay", "4s"),
            ("pod-complete.stage.kwok.x-k8s.io/delay", "30s"),
            ("pod-delete.stage.kwok.x-k8s.io/delay", "500ms"),
        ])
        .unwrap();
        let start = o.start.unwrap();
        assert_eq!((start.sample(0.0), start.sample(0.5)), (Duration::from_secs(2), Duration::from_secs(3)));
        assert_eq!(o.run_time.unwrap().sample(0.9), Duration::from_secs(30));
        assert_eq!(o.exit_delay.unwrap().delay, Duration::from_millis(500));
        assert!(o.problems.is_empty());
        // pod-create and pod-ready both delay the start: they add up.
        let o = parse(&[("pod-create.stage.kwok.x-k8s.io/delay", "1s"), ("pod-ready.stage.kwok.x-k8s.io/delay", "2s")])
            .unwrap();
        assert_eq!(o.start.unwrap().sample(0.7), Duration::from_secs(3));
    }

    #[test]
    fn container_failures_take_kwoks_fields_and_defaults() {
        let o = parse(&[
            ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
            ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "137"),
            ("pod-container-failed.stage.kwok.x-k8s.io/reason", "OOMKilled"),
        ])
        .unwrap();
        let f = o.container_failed.unwrap();
        assert_eq!(
            (f.container.as_deref(), f.exit_code, f.reason.as_str(), f.after.delay),
            (Some("app"), 137, "OOMKilled", Duration::from_secs(2))
        );
        let o = parse(&[("pod-init-container-failed.stage.kwok.x-k8s.io/name", "setup")]).unwrap();
        let f = o.init_failed.unwrap();
        assert_eq!((f.exit_code, f.reason.as_str(), f.message), (1, "Error", None));
    }

    #[test]
    fn bad_values_name_the_annotation_and_are_ignored() {
        let o = parse(&[
            ("pod-complete.stage.kwok.x-k8s.io/delay", "soon"),
            ("pod-container-failed.stage.kwok.x-k8s.io/name", "app"),
            ("pod-container-failed.stage.kwok.x-k8s.io/exit-code", "0"),
            (IMAGE_PULL_ANNOTATION, "maybe"),
        ])
        .unwrap();
        assert_eq!(o.run_time, None);
        assert_eq!(o.container_failed.unwrap().exit_code, 1);
        assert!(!o.image_pull_fails);
        assert_eq!(o.problems.len(), 3, "{:?}", o.problems);
        assert!(o.problems[0].starts_with("annotation pod-complete.stage.kwok.x-k8s.io/delay: \"soon\""));
        assert!(o.problems[1].contains("exit-code: \"0\" is not an exit code from 1 to 255"));
        assert!(o.problems[2].contains("write \"fail\""));
        let o = parse(&[(IMAGE_PULL_ANNOTATION, "fail"), (READINESS_ANNOTATION, "flap")]).unwrap();
        assert!(o.image_pull_fails && o.readiness_flaps && o.problems.is_empty());
    }
}
