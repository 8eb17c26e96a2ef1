//! The duration flags take: `90s`, `2m`, `500ms`, `1h30m`, or a bare number of seconds.
//! Never panics: a value too large for a duration, or not finite, is refused with a message.

use std::time::Duration;

/// The longest duration a flag takes (a year): anything longer is a typo.
pub const MAX_FLAG_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a flag's duration (see the module doc).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("invalid duration {s:?}: use e.g. 90s, 2m, 500ms, 1h30m");
    if s.is_empty() {
        return Err(bad());
    }
    let secs = if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        s.parse::<f64>().map_err(|_| bad())?
    } else {
        let mut total = 0f64;
        let mut rest = s;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            let (number, tail) = rest.split_at(digits);
            let value: f64 = number.parse().map_err(|_| bad())?;
            let (unit, tail) = match tail {
                t if t.starts_with("ms") => (0.001, &t[2..]),
                t if t.starts_with('s') => (1.0, &t[1..]),
                t if t.starts_with('m') => (60.0, &t[1..]),
                t if t.starts_with('h') => (3600.0, &t[1..]),
                _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
            };
            total += value * unit;
            rest = tail;
        }
        total
    };
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX_FLAG_DURATION => Ok(d),
        _ => Err(format!("duration {s:?} is out of range: use at most {}h", MAX_FLAG_DURATION.as_secs() / 3600)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_seconds() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
    }

    #[test]
    fn huge_or_malformed_values_are_refused_not_a_panic() {
        for bad in ["", "s", "1x", "99999999999999999999999h", "1e400", "inf", "NaN", "-5s", "1..2s", "9999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
