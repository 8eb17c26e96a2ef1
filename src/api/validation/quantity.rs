//! Kubernetes quantities (`500m`, `256Gi`, `1e27`, `2E`, `1Ei`) read as approximate numbers,
//! for comparisons that only advise. Never panics and never overflows: what is too large for
//! an `f64` becomes infinity.

/// The value of `text` as an `f64`, or `None` when it is not a quantity.
pub fn approximate(text: &str) -> Option<f64> {
    let text = text.trim();
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1.0, &text[1..]),
        b'-' => (-1.0, &text[1..]),
        _ => (1.0, text),
    };
    let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let mantissa: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let digits = &exp[1..];
            let (esign, edigits) = match digits.as_bytes().first()? {
                b'+' => (1, &digits[1..]),
                b'-' => (-1, &digits[1..]),
                _ => (1, digits),
            };
            if edigits.is_empty() || !edigits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Longer exponents than any f64 can hold saturate.
            let e: i32 = edigits.parse::<i32>().unwrap_or(i32::MAX).min(400);
            10f64.powi(esign * e)
        }
        _ => return None,
    };
    Some(sign * mantissa * factor)
}

#[cfg(test)]
mod tests {
    use super::approximate;

    #[test]
    fn every_form_the_api_server_takes() {
        for (text, value) in [
            ("32", 32.0),
            ("500m", 0.5),
            ("256Gi", 256.0 * 1024f64.powi(3)),
            ("1Ei", 1024f64.powi(6)),
            ("2E", 2e18),
            ("1e3", 1000.0),
            ("1.5", 1.5),
            (".5", 0.5),
            ("-1", -1.0),
            ("+2k", 2000.0),
            ("1E-3", 0.001),
        ] {
            let got = approximate(text).unwrap_or_else(|| panic!("{text} refused"));
            assert!((got - value).abs() <= value.abs() * 1e-12, "{text}: {got} != {value}");
        }
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        assert_eq!(approximate("1e27").map(|v| v > 1e26), Some(true));
        assert_eq!(approximate("9e999999999999"), Some(f64::INFINITY));
        assert!(approximate("1e27").unwrap() > approximate("1m").unwrap());
    }

    #[test]
    fn what_is_not_a_quantity() {
        for bad in ["", "lots", "1GiB", "1 Gi", ".", "1..2", "e3", "1e", "1e+", "Ki", "--1", "1x"] {
            assert_eq!(approximate(bad), None, "{bad}");
        }
    }
}
