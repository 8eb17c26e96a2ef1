//! Cloud node lifecycle knobs (`spec.lifecycle.nodes`): nodes that boot, fail to launch and get
//! interrupted as cloud instances do, and outages shared by every node of a zone. Types and
//! their rules; the simulator plays them (`kubelet::status::cloud`).

use super::delay::{Delay, duration_schema, percent_schema};
use super::duration::parse_duration;
use k8s_openapi::api::core::v1::Taint;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The label a correlated outage groups nodes by when it names none.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label that says whether a node is spot or on-demand (Karpenter's).
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// The taint an interruption notice puts on its node when the knob names none.
pub const INTERRUPTION_TAINT: &str = "pools.kwok.x-k8s.io/interruption";
/// How long before an interruption its notice comes by default (a spot instance's two minutes).
pub const DEFAULT_NOTICE: Duration = Duration::from_secs(120);
/// How long an interrupted node takes to shut down by default (its pods end at once).
pub const DEFAULT_SHUTDOWN: Duration = Duration::from_secs(30);
/// How long after its creation a node whose launch failed is replaced by default.
pub const DEFAULT_REPLACE_AFTER: Duration = Duration::from_secs(300);

/// How a node boots: NotReady from its creation until its kubelet and network are up.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Boot {
    /// How long after its creation the node becomes Ready (drawn per node). Meanwhile its
    /// kubelet heartbeats and reports Ready=False (`KubeletNotReady`, the network plugin not
    /// ready), and the API server's `node.kubernetes.io/not-ready` taint keeps pods away.
    pub after: Delay,
    /// Taints the nodes carry from their creation until they are Ready, then removed, as the
    /// daemon that owns them would (a CNI agent's, Karpenter's `startupTaints`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub startup_taints: Vec<Taint>,
}

/// A share of new nodes that never become Ready.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LaunchFailures {
    /// Percent of new nodes whose launch fails (drawn per node object, so a replacement draws
    /// again): Ready=False, the condition `LaunchFailed`, a Warning event.
    #[schemars(schema_with = "percent_schema")]
    pub percent: u8,
    /// How long after its creation a failed node of a NodePool is deleted and replaced
    /// (default 5m). Nodes no pool made keep the condition: their autoscaler decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub replace_after: Option<String>,
}

/// Spot-style interruptions: a notice, then the kubelet's graceful node shutdown, then the
/// node is gone (its pool brings a new one).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Interruptions {
    /// The mean time between interruptions of one node: each node is interrupted once, at a
    /// time after its creation drawn from an exponential distribution of this mean (`2h` is a
    /// rate of 0.5 per node per hour; a pool of 100 such nodes loses about 50 an hour).
    #[schemars(schema_with = "duration_schema")]
    pub every: String,
    /// How long before the interruption the notice comes (default 2m): the taint goes on and
    /// a Warning `InterruptionNotice` event is recorded on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub notice: Option<String>,
    /// The notice's taint (default `pools.kwok.x-k8s.io/interruption:NoSchedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<Taint>,
    /// How long the node takes to shut down (default 30s): at the interruption every pod on it
    /// ends Failed with the kubelet's reason `Terminated`, then the node is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub shutdown_grace_period: Option<String>,
    /// Only nodes labelled `karpenter.sh/capacity-type: spot` are interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_only: Option<bool>,
}

impl Interruptions {
    /// The mean time between interruptions (`None`: not readable or zero).
    pub fn mean(&self) -> Option<Duration> {
        parse_duration(&self.every).filter(|d| !d.is_zero())
    }

    pub fn notice(&self) -> Duration {
        self.notice.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_NOTICE)
    }

    pub fn shutdown(&self) -> Duration {
        self.shutdown_grace_period.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_SHUTDOWN)
    }

    /// The notice's taint.
    pub fn taint(&self) -> Taint {
        self.taint.clone().unwrap_or_else(|| Taint {
            key: INTERRUPTION_TAINT.into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        })
    }
}

impl LaunchFailures {
    pub fn replace_after(&self) -> Duration {
        self.replace_after.as_deref().and_then(parse_duration).unwrap_or(DEFAULT_REPLACE_AFTER)
    }
}

/// The nodes an outage takes down together: every node whose label has one of these values.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutageScope {
    /// The label the nodes share (default `topology.kubernetes.io/zone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub label: Option<String>,
    /// The values whose nodes go out; nodes with another value (or without the label) stay.
    #[schemars(length(min = 1, max = 64), inner(length(max = 63)))]
    pub values: Vec<String>,
}

impl OutageScope {
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(ZONE_LABEL)
    }

    /// The group `labels` put a node in (`None`: the outage spares it).
    pub fn group_of(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<String> {
        let value = labels?.get(self.label())?;
        self.values.contains(value).then(|| format!("{}={value}", self.label()))
    }
}

/// Problems with the cloud knobs, each with its path below `spec.lifecycle`.
pub fn problems(
    boot: Option<&Boot>,
    launch: Option<&LaunchFailures>,
    interruptions: Option<&Interruptions>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(b) = boot {
        out.extend(super::delay::delay_problem("nodes.boot.after", Some(&b.after)));
        for (i, t) in b.startup_taints.iter().enumerate() {
            out.extend(taint_problem(&format!("nodes.boot.startupTaints[{i}]"), t));
        }
    }
    if let Some(l) = launch {
        out.extend(super::delay::percent("nodes.launchFailures.percent", Some(l.percent)));
        out.extend(duration_problem("nodes.launchFailures.replaceAfter", l.replace_after.as_deref(), false));
    }
    if let Some(i) = interruptions {
        out.extend(duration_problem("nodes.interruptions.every", Some(&i.every), true));
        out.extend(duration_problem("nodes.interruptions.notice", i.notice.as_deref(), false));
        out.extend(duration_problem(
            "nodes.interruptions.shutdownGracePeriod",
            i.shutdown_grace_period.as_deref(),
            false,
        ));
        if let Some(t) = &i.taint {
            out.extend(taint_problem("nodes.interruptions.taint", t));
        }
    }
    out
}

fn duration_problem(path: &str, text: Option<&str>, nonzero: bool) -> Option<String> {
    let text = text?;
    match parse_duration(text) {
        None => Some(format!(".{path}: {text:?} is not a duration such as 30s or 2h (at most 24h)")),
        Some(d) if nonzero && d.is_zero() => Some(format!(".{path}: must be longer than 0s")),
        Some(_) => None,
    }
}

fn taint_problem(path: &str, t: &Taint) -> Option<String> {
    if t.key.is_empty() {
        return Some(format!(".{path}.key: must not be empty"));
    }
    (!["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()))
        .then(|| format!(".{path}.effect: {:?} is not NoSchedule, PreferNoSchedule or NoExecute", t.effect))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_durations_percents_and_taints_name_their_field() {
        let boot: Boot = serde_yaml::from_str(
            "after: {min: 30s, max: 10s}\nstartupTaints: [{key: '', effect: NoSchedule}, {key: a, effect: Never}]",
        )
        .unwrap();
        let launch = LaunchFailures { percent: 120, replace_after: Some("soon".into()) };
        let i: Interruptions = serde_yaml::from_str("every: 0s\nnotice: 2x").unwrap();
        let p = problems(Some(&boot), Some(&launch), Some(&i));
        for prefix in [
            ".nodes.boot.after.",
            ".nodes.boot.startupTaints[0].key:",
            ".nodes.boot.startupTaints[1].effect:",
            ".nodes.launchFailures.percent: 120",
            ".nodes.launchFailures.replaceAfter: \"soon\"",
            ".nodes.interruptions.every: must be longer",
            ".nodes.interruptions.notice: \"2x\"",
        ] {
            assert!(p.iter().any(|m| m.starts_with(prefix)), "{prefix} missing from {p:?}");
        }
        let good: Interruptions = serde_yaml::from_str("every: 2h\nspotOnly: true").unwrap();
        assert!(problems(None, None, Some(&good)).is_empty());
        assert_eq!(
            (good.notice(), good.shutdown(), good.taint().key.as_str()),
            (DEFAULT_NOTICE, DEFAULT_SHUTDOWN, INTERRUPTION_TAINT)
        );
    }

    #[test]
    fn an_outage_scope_groups_nodes_by_their_label_value() {
        let s = OutageScope { label: None, values: vec!["zone-b".into()] };
        let labels = |z: &str| Some([(ZONE_LABEL.to_string(), z.to_string())].into_iter().collect());
        assert_eq!(s.group_of(labels("zone-b").as_ref()).as_deref(), Some("topology.kubernetes.io/zone=zone-b"));
        assert_eq!(s.group_of(labels("zone-a").as_ref()), None);
        assert_eq!(s.group_of(None), None);
    }
}
