//! Syntax of Kubernetes names: qualified names (label and annotation keys) and label values.
//! A leaf: the validation rules and the lifecycle checks both use it.

/// Why `key` is no qualified name (a label or annotation key; `None`: it is one).
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    (!(name_ok && prefix_ok)).then(|| {
        "must be a qualified name: an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric".to_string()
    })
}

/// Why `value` is no valid label value (`None`: it is one).
pub fn label_value_problem(value: &str) -> Option<String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    (!ok).then(|| "must be empty or 1-63 characters [A-Za-z0-9._-] starting and ending alphanumeric".to_string())
}
