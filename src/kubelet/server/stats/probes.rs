//! `/metrics/probes` as a kubelet writes it: `prober_probe_total` per container and probe type
//! with its result, counting the probes its period has run since the container started (after
//! the initial delay), successful while the pod is Ready (readiness) and always for liveness
//! and startup (a liveness failure restarts the container: the restart is what the knobs
//! simulate). Pure: rendering only.

use super::resource_metrics::{ContainerReading, NodeReading, escape};
use std::fmt::Write;
use std::time::Duration;

/// Probes run by `every` from `start` (seconds since the epoch) to `now`.
fn runs(start: f64, every: Duration, now: f64) -> u64 {
    let ran = now - start;
    if ran < 0.0 { 0 } else { (ran / every.as_secs_f64().max(1.0)).floor() as u64 + 1 }
}

fn sample(out: &mut String, c: &ContainerReading<'_>, probe_type: &str, result: &str, n: u64) {
    let _ = writeln!(
        out,
        "prober_probe_total{{container=\"{}\",namespace=\"{}\",pod=\"{}\",pod_uid=\"{}\",probe_type=\"{probe_type}\",result=\"{result}\"}} {n}",
        escape(c.container),
        escape(c.namespace),
        escape(c.pod),
        escape(c.uid)
    );
}

pub fn render(r: &NodeReading<'_>, now: f64) -> String {
    let mut out = String::with_capacity(256 + r.containers.len() * 400);
    let _ = writeln!(
        out,
        "# HELP prober_probe_total [ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result."
    );
    let _ = writeln!(out, "# TYPE prober_probe_total counter");
    for c in &r.containers {
        let p = &c.probes;
        if let Some(every) = p.startup_every {
            sample(
                &mut out,
                c,
                "Startup",
                "successful",
                runs(c.started + p.started_after.as_secs_f64(), every, now).min(1),
            );
        }
        let warm = c.started + p.ready_after.as_secs_f64();
        if let Some(every) = p.readiness_every {
            let n = runs(warm, every, now);
            let (ok, failed) = if c.ready { (n, 0) } else { (0, n) };
            sample(&mut out, c, "Readiness", "successful", ok);
            sample(&mut out, c, "Readiness", "failed", failed);
        }
        if let Some(every) = p.liveness_every {
            sample(&mut out, c, "Liveness", "successful", runs(c.started + p.started_after.as_secs_f64(), every, now));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::shape::Probes;

    #[test]
    fn probes_count_by_their_period_after_the_delay() {
        let probes = Probes {
            ready_after: Duration::from_secs(10),
            readiness_every: Some(Duration::from_secs(5)),
            liveness_every: Some(Duration::from_secs(10)),
            ..Probes::default()
        };
        let c = ContainerReading { started: 1000.0, probes, ..ContainerReading::test() };
        let unready = ContainerReading { ready: false, pod: "web-1", ..c.clone() };
        let r = NodeReading { containers: vec![c, unready], ..Default::default() };
        let text = render(&r, 1031.0);
        // Readiness from 1010 every 5s: 1010, 1015, …, 1030 = 5 runs; liveness from 1000: 4.
        assert!(
            text.contains("pod=\"web-0\",pod_uid=\"u\",probe_type=\"Readiness\",result=\"successful\"} 5\n"),
            "{text}"
        );
        assert!(text.contains("pod=\"web-1\",pod_uid=\"u\",probe_type=\"Readiness\",result=\"failed\"} 5\n"), "{text}");
        assert!(text.contains("probe_type=\"Liveness\",result=\"successful\"} 4\n"), "{text}");
        assert!(!text.contains("Startup"));
    }
}
