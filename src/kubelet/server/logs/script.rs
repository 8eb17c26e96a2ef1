//! What a simulated container prints, as `kubectl logs` shows it: the pool's `logs` knobs (or
//! the pod's `pools.kwok.x-k8s.io/logs` annotation) turned into timestamped lines, and the
//! kubelet's log options (`tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`, `previous`) applied to them. Deterministic from the container's start, so
//! every replica prints the same. Pure; following is the server's part.

use crate::api::duration::parse_duration;
use crate::api::kubelet::Logs;

/// The most lines a container's log holds (older ones are rotated away, as a kubelet's are).
pub const MAX_LINES: u64 = 100_000;

/// One line and when it was written (Unix seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub at: f64,
    pub text: String,
}

/// A container's log as its knobs say.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// Printed once, at start.
    pub lines: Vec<String>,
    /// Printed every `every` seconds after start (`{n}`: the count, `{pod}`: the pod).
    pub repeat: Option<(String, f64)>,
}

impl Script {
    /// The script of `logs` (the annotation's lines take the place of `lines`); without knobs,
    /// one line that says what the container is.
    pub fn new(logs: Option<&Logs>, annotation: Option<&str>, pod: &str, container: &str) -> Self {
        let lines: Vec<String> = match (annotation, logs) {
            (Some(text), _) => text.lines().map(str::to_string).collect(),
            (None, Some(l)) if !l.lines.is_empty() => l.lines.clone(),
            (None, Some(l)) if l.line.is_some() => Vec::new(),
            _ => vec![format!(
                "kwok-pools: container {container} of pod {pod} started (simulated; set spec.lifecycle.pods.logs for its output)"
            )],
        };
        let repeat = logs.and_then(|l| {
            let every = parse_duration(l.every.as_deref()?)?.as_secs_f64().max(0.1);
            Some((l.line.clone().unwrap_or_else(|| "{pod}: tick {n}".into()), every))
        });
        Self { lines, repeat }
    }

    /// Every line written from `started` until `now` (the last [`MAX_LINES`]).
    pub fn until(&self, pod: &str, started: f64, now: f64) -> Vec<Line> {
        let mut out: Vec<Line> = self
            .lines
            .iter()
            .enumerate()
            .map(|(i, t)| Line { at: started + i as f64 * 1e-6, text: t.clone() })
            .collect();
        if let Some((text, every)) = &self.repeat {
            let count = (((now - started) / every).floor().max(0.0) as u64).min(MAX_LINES);
            let first = count.saturating_sub(MAX_LINES) + 1;
            for n in first..=count {
                out.push(Line { at: started + n as f64 * every, text: fill(text, n, pod) });
            }
        }
        let skip = out.len().saturating_sub(MAX_LINES as usize);
        out.drain(..skip);
        out
    }

    /// When the next line after `now` is written, if any.
    pub fn next_after(&self, started: f64, now: f64) -> Option<f64> {
        let (_, every) = self.repeat.as_ref()?;
        let n = ((now - started) / every).floor().max(0.0) + 1.0;
        Some(started + n * every)
    }
}

fn fill(text: &str, n: u64, pod: &str) -> String {
    text.replace("{n}", &n.to_string()).replace("{pod}", pod)
}

/// The kubelet's log options, from the query the API server passes on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub since_seconds: Option<f64>,
    /// Unix seconds.
    pub since_time: Option<f64>,
    pub limit_bytes: Option<usize>,
}

impl Options {
    /// From the query pairs (unknown keys ignored; bad values refused with the key).
    pub fn parse(query: &[(String, String)]) -> Result<Self, String> {
        let mut o = Options::default();
        for (k, v) in query {
            let bad = || format!("{k}={v:?} is not valid");
            match k.as_str() {
                "follow" => o.follow = v == "true" || v == "1",
                "previous" => o.previous = v == "true" || v == "1",
                "timestamps" => o.timestamps = v == "true" || v == "1",
                "tailLines" | "tail" => o.tail_lines = Some(v.parse().map_err(|_| bad())?),
                "sinceSeconds" => o.since_seconds = Some(v.parse::<u64>().map_err(|_| bad())? as f64),
                "sinceTime" => {
                    let t: k8s_openapi::jiff::Timestamp = v.parse().map_err(|_| bad())?;
                    o.since_time = Some(t.as_millisecond() as f64 / 1000.0);
                }
                "limitBytes" => o.limit_bytes = Some(v.parse().map_err(|_| bad())?),
                _ => {}
            }
        }
        Ok(o)
    }

    /// The earliest time shown, if limited.
    fn since(&self, now: f64) -> Option<f64> {
        match (self.since_seconds.map(|s| now - s), self.since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// `lines` as the options show them at `now`: since, tail.
    pub fn select(&self, lines: Vec<Line>, now: f64) -> Vec<Line> {
        let since = self.since(now);
        let mut kept: Vec<Line> = lines.into_iter().filter(|l| since.is_none_or(|s| l.at >= s)).collect();
        if let Some(n) = self.tail_lines {
            let skip = kept.len().saturating_sub(n as usize);
            kept.drain(..skip);
        }
        kept
    }

    /// One line as written to the client.
    pub fn render(&self, line: &Line) -> String {
        if self.timestamps {
            let t = k8s_openapi::jiff::Timestamp::from_nanosecond((line.at * 1e9) as i128).unwrap_or_default();
            format!("{} {}\n", t, line.text)
        } else {
            format!("{}\n", line.text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs(v: serde_json::Value) -> Logs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn static_lines_then_a_line_every_interval() {
        let l = logs(serde_json::json!({"lines": ["starting", "ready"], "line": "{pod} served {n}", "every": "10s"}));
        let s = Script::new(Some(&l), None, "web-0", "app");
        let lines = s.until("web-0", 100.0, 135.0);
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["starting", "ready", "web-0 served 1", "web-0 served 2", "web-0 served 3"]);
        assert_eq!(s.next_after(100.0, 135.0), Some(140.0));
        // The annotation's lines take the place of the pool's.
        let s = Script::new(Some(&l), Some("one\ntwo"), "web-0", "app");
        assert_eq!(s.until("web-0", 0.0, 5.0)[1].text, "two");
    }

    #[test]
    fn tail_since_and_timestamps_as_the_kubelet_applies_them() {
        let l = logs(serde_json::json!({"line": "tick {n}", "every": "1s"}));
        let s = Script::new(Some(&l), None, "p", "c");
        let all = s.until("p", 0.0, 100.0);
        assert_eq!(all.len(), 100);
        let q = |pairs: &[(&str, &str)]| {
            Options::parse(&pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>()).unwrap()
        };
        let tail = q(&[("tailLines", "3")]).select(all.clone(), 100.0);
        assert_eq!(tail.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["tick 98", "tick 99", "tick 100"]);
        assert_eq!(q(&[("sinceSeconds", "10")]).select(all.clone(), 100.0).len(), 11);
        let stamped = q(&[("timestamps", "true")]).render(&all[0]);
        assert!(stamped.starts_with("1970-01-01T00:00:01Z tick 1"), "{stamped}");
        assert!(Options::parse(&[("tailLines".into(), "x".into())]).is_err());
    }

    #[test]
    fn without_knobs_the_container_says_what_it_is() {
        let s = Script::new(None, None, "p", "c");
        let lines = s.until("p", 0.0, 1e6);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].text.contains("spec.lifecycle.pods.logs"));
        assert_eq!(s.next_after(0.0, 10.0), None);
    }
}
