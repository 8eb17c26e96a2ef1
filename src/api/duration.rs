//! Durations as Kubernetes writes them (Go syntax) and the seeded unit number every sampled
//! knob draws from: the leaves the lifecycle and kubelet knobs are built on.

use std::time::Duration;

/// A duration as Kubernetes writes them (Go syntax): `500ms`, `2s`, `1.5m`, `1h30m`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";
/// The longest duration any knob takes.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The longest duration a flag takes (a year): anything longer is a typo.
pub const MAX_FLAG_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The seconds of a Go duration (`1h30m`, `2.5s`, `500ms`), if `text` is one: the one parser
/// every duration goes through, knob or flag.
fn go_seconds(text: &str) -> Option<f64> {
    if text.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        if number.is_empty() || number.starts_with('.') || number.ends_with('.') || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let (unit, tail) = if let Some(t) = tail.strip_prefix("ms") {
            (0.001, t)
        } else if let Some(t) = tail.strip_prefix('s') {
            (1.0, t)
        } else if let Some(t) = tail.strip_prefix('m') {
            (60.0, t)
        } else if let Some(t) = tail.strip_prefix('h') {
            (3600.0, t)
        } else {
            return None;
        };
        total += value * unit;
        rest = tail;
    }
    total.is_finite().then_some(total)
}

/// Parses a knob's duration: a Go duration (`1h30m`, `2.5s`, `500ms`). `None` when it is not
/// one, or longer than [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Option<Duration> {
    go_seconds(text).filter(|t| *t <= MAX_DURATION.as_secs_f64()).map(Duration::from_secs_f64)
}

/// Parses a flag's duration: a Go duration (`90s`, `2m`, `500ms`, `1h30m`) or a bare number of
/// seconds, at most [`MAX_FLAG_DURATION`]. Never panics: a value too large, or not finite, is
/// refused with a message saying what to write.
pub fn parse_flag_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bare = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let secs = if bare { s.parse::<f64>().ok().filter(|v| v.is_finite()) } else { go_seconds(s) };
    let secs =
        secs.ok_or_else(|| format!("invalid duration {s:?}: use e.g. 90s, 2m, 500ms, 1h30m (units ms, s, m, h)"))?;
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX_FLAG_DURATION => Ok(d),
        _ => Err(format!("duration {s:?} is out of range: use at most {}h", MAX_FLAG_DURATION.as_secs() / 3600)),
    }
}

/// A number in [0, 1) from `seed` and the words of `key`: the same inputs give the same number
/// in every process and every run.
pub fn unit(seed: i64, key: &[&str]) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (seed as u64);
    for part in key {
        for b in part.bytes().chain(std::iter::once(0)) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    // SplitMix64 finaliser: spreads the FNV state over every bit.
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (text, secs) in [("500ms", 0.5), ("2s", 2.0), ("1.5m", 90.0), ("1h30m", 5400.0), ("1m0.5s", 60.5)] {
            assert_eq!(parse_duration(text), Some(Duration::from_secs_f64(secs)), "{text}");
        }
        for bad in ["", "5", "s", "1d", "-1s", "1.s", ".5s", "1..5s", "25h", "1s2"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        let re = regex::Regex::new(DURATION_PATTERN).unwrap();
        assert!(re.is_match("1h30m") && re.is_match("500ms") && !re.is_match("1d") && !re.is_match("5"));
    }

    #[test]
    fn flags_take_go_durations_and_seconds() {
        assert_eq!(parse_flag_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_flag_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_flag_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_flag_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_flag_duration("48h"), Ok(Duration::from_secs(48 * 3600)), "flags go past a knob's 24h");
        assert_eq!(parse_flag_duration(" 12 "), Ok(Duration::from_secs(12)));
    }

    #[test]
    fn huge_or_malformed_flag_values_are_refused_not_a_panic() {
        for bad in ["", "s", "1x", "99999999999999999999999h", "1e400", "inf", "NaN", "-5s", "1..2s", "9999999h"] {
            let e = parse_flag_duration(bad).unwrap_err();
            assert!(e.contains("use e.g.") || e.contains("out of range"), "{bad}: {e}");
        }
    }

    #[test]
    fn seeded_numbers_repeat_and_spread() {
        assert_eq!(unit(42, &["pod", "a"]), unit(42, &["pod", "a"]));
        assert_ne!(unit(42, &["pod", "a"]), unit(43, &["pod", "a"]));
        assert_ne!(unit(42, &["pod", "a"]), unit(42, &["pod", "b"]));
        // ["ab", "c"] and ["a", "bc"] are different keys.
        assert_ne!(unit(1, &["ab", "c"]), unit(1, &["a", "bc"]));
        let hits = (0..10_000).filter(|i| unit(7, &["node", &i.to_string()]) < 0.1).count();
        assert!((850..1150).contains(&hits), "about a tenth: {hits}");
    }
}
