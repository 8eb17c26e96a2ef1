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

    /// How many lines were written from `started` until `now` (before rotation).
    pub fn total(&self, started: f64, now: f64) -> u64 {
        let repeats = self.repeat.as_ref().map_or(0, |(_, every)| ((now - started) / every).floor().max(0.0) as u64);
        self.lines.len() as u64 + repeats
    }

    /// When line `i` (counted from the first ever written) was written.
    pub fn at(&self, i: u64, started: f64) -> f64 {
        let statics = self.lines.len() as u64;
        match &self.repeat {
            Some((_, every)) if i >= statics => started + (i - statics + 1) as f64 * every,
            _ => started + i as f64 * 1e-6,
        }
    }

    /// Line `i`, its placeholders filled (at most [`MAX_LINE_BYTES`]: a template full of
    /// `{pod}` never grows a line past it).
    pub fn line(&self, i: u64, pod: &str, started: f64) -> Line {
        let statics = self.lines.len() as u64;
        let text = match (&self.repeat, usize::try_from(i).ok().and_then(|i| self.lines.get(i))) {
            (_, Some(t)) => t.clone(),
            (Some((t, _)), None) => fill(t, i - statics + 1, pod),
            (None, None) => String::new(),
        };
        Line { at: self.at(i, started), text: cut(text, MAX_LINE_BYTES) }
    }

    /// The lines the options show at `now` of a run from `started`, as a range of indexes:
    /// the last [`MAX_LINES`] (older ones rotated away), since, then tail — decided before any
    /// line is made, so a huge log costs only what is shown.
    pub fn shown(&self, options: &Options, started: f64, now: f64) -> std::ops::Range<u64> {
        let end = self.total(started, now);
        let mut start = end.saturating_sub(MAX_LINES);
        if let Some(since) = options.since(now) {
            start = start.max(self.first_at_or_after(since, started, end));
        }
        if let Some(n) = options.tail_lines {
            start = start.max(end.saturating_sub(n));
        }
        start..end
    }

    /// The first index below `end` written at or after `since` (`end` if none).
    fn first_at_or_after(&self, since: f64, started: f64, end: u64) -> u64 {
        let (mut lo, mut hi) = (0, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.at(mid, started) >= since {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Every line written from `started` until `now` (the last [`MAX_LINES`]).
    pub fn until(&self, pod: &str, started: f64, now: f64) -> Vec<Line> {
        let all = Options::default();
        self.shown(&all, started, now).map(|i| self.line(i, pod, started)).collect()
    }

    /// When the next line after `now` is written, if any.
    pub fn next_after(&self, started: f64, now: f64) -> Option<f64> {
        let (_, every) = self.repeat.as_ref()?;
        let n = ((now - started) / every).floor().max(0.0) + 1.0;
        Some(started + n * every)
    }
}

/// The longest line a container's log shows (a longer one is cut, as a runtime splits it).
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// `text` cut to at most `max` bytes, on a character boundary.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

fn fill(text: &str, n: u64, pod: &str) -> String {
    // Bounded before it is made: each placeholder adds at most the pod name's length.
    let room = MAX_LINE_BYTES + 1;
    let short = cut(text.to_string(), room);
    let mut out = String::with_capacity(short.len().min(room));
    let mut rest = short.as_str();
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (with, skip) = if tail.starts_with("{n}") {
            (n.to_string(), 3)
        } else if tail.starts_with("{pod}") {
            (pod.to_string(), 5)
        } else {
            ("{".to_string(), 1)
        };
        out.push_str(&with);
        rest = &tail[skip..];
        if out.len() > MAX_LINE_BYTES {
            return out;
        }
    }
    out.push_str(rest);
    out
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
    pub fn since(&self, now: f64) -> Option<f64> {
        match (self.since_seconds.map(|s| now - s), self.since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
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
        let shown = |o: Options| s.shown(&o, 0.0, 100.0).map(|i| s.line(i, "p", 0.0).text).collect::<Vec<_>>();
        assert_eq!(shown(q(&[("tailLines", "3")])), ["tick 98", "tick 99", "tick 100"]);
        assert_eq!(shown(q(&[("sinceSeconds", "10")])).len(), 11);
        let stamped = q(&[("timestamps", "true")]).render(&all[0]);
        assert!(stamped.starts_with("1970-01-01T00:00:01Z tick 1"), "{stamped}");
        assert!(Options::parse(&[("tailLines".into(), "x".into())]).is_err());
    }

    #[test]
    fn a_huge_log_shows_its_tail_without_making_the_rest() {
        let template = "{pod}".repeat(800);
        let l = logs(serde_json::json!({"line": template, "every": "100ms"}));
        let s = Script::new(Some(&l), None, &"p".repeat(253), "c");
        // A year of lines: 315 million written, the last 100,000 kept, three shown.
        let (started, now) = (0.0, 365.0 * 86400.0);
        let tail = Options { tail_lines: Some(3), ..Options::default() };
        let range = s.shown(&tail, started, now);
        assert_eq!(range.end - range.start, 3);
        assert_eq!(
            s.shown(&Options::default(), started, now).end - s.shown(&Options::default(), started, now).start,
            MAX_LINES
        );
        let line = s.line(range.start, &"p".repeat(253), started);
        assert_eq!(line.text.len(), MAX_LINE_BYTES, "a line is cut, however many placeholders");
        let since = Options { since_seconds: Some(1.0), ..Options::default() };
        assert_eq!(s.shown(&since, started, now).count(), 11, "the last second, both ends: eleven lines");
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
