//! Kubernetes selector strings (`a=b,c!=d,e,!f,g in (h,i),j notin (k)`), matched against
//! label or annotation maps. kwok selects nodes by annotations with the same syntax.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
    text: String,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part).map_err(|e| format!("invalid selector {text:?}: {e}"))?);
        }
        Ok(Self { requirements, text: text.trim().to_string() })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, map: Option<&BTreeMap<String, String>>) -> bool {
        let empty = BTreeMap::new();
        let map = map.unwrap_or(&empty);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => map.get(k) == Some(v),
            Requirement::NotEquals(k, v) => map.get(k) != Some(v),
            Requirement::Exists(k) => map.contains_key(k),
            Requirement::NotExists(k) => !map.contains_key(k),
            Requirement::In(k, vs) => map.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => map.get(k).is_none_or(|v| !vs.contains(v)),
        })
    }
}

impl Selector {
    /// The same selector as a Kubernetes LabelSelector (for object selectors).
    pub fn to_label_selector(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
        let req = |key: &str, op: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            values,
        };
        let exprs = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => req(k, "In", Some(vec![v.clone()])),
                Requirement::NotEquals(k, v) => req(k, "NotIn", Some(vec![v.clone()])),
                Requirement::Exists(k) => req(k, "Exists", None),
                Requirement::NotExists(k) => req(k, "DoesNotExist", None),
                Requirement::In(k, vs) => req(k, "In", Some(vs.clone())),
                Requirement::NotIn(k, vs) => req(k, "NotIn", Some(vs.clone())),
            })
            .collect::<Vec<_>>();
        LabelSelector { match_expressions: (!exprs.is_empty()).then_some(exprs), match_labels: None }
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn check_key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() || k.contains(char::is_whitespace) {
        return Err(format!("bad key {k:?}"));
    }
    Ok(k.to_string())
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected (v1,v2) after in/notin, got {rest:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(check_key(k)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(check_key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(Requirement::Equals(check_key(k)?, v.trim().to_string()));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(Requirement::Equals(check_key(k)?, v.trim().to_string()));
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let rest = words[1].trim_start();
        if let Some(r) = rest.strip_prefix("notin") {
            return Ok(Requirement::NotIn(check_key(words[0])?, parse_set(r)?));
        }
        if let Some(r) = rest.strip_prefix("in") {
            return Ok(Requirement::In(check_key(words[0])?, parse_set(r)?));
        }
        return Err(format!("cannot parse {part:?}"));
    }
    Ok(Requirement::Exists(check_key(part)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn equality_and_existence() {
        let s = Selector::parse("kwok.x-k8s.io/node=fake").unwrap();
        assert!(s.matches(Some(&map(&[("kwok.x-k8s.io/node", "fake")]))));
        assert!(!s.matches(Some(&map(&[("kwok.x-k8s.io/node", "real")]))));
        assert!(!s.matches(None));
        let s = Selector::parse("a,!b,c!=x").unwrap();
        assert!(s.matches(Some(&map(&[("a", "1"), ("c", "y")]))));
        assert!(!s.matches(Some(&map(&[("a", "1"), ("b", "1")]))));
        assert!(!s.matches(Some(&map(&[("a", "1"), ("c", "x")]))));
    }

    #[test]
    fn set_based() {
        let s = Selector::parse("env in (a, b),tier notin (db)").unwrap();
        assert!(s.matches(Some(&map(&[("env", "a")]))));
        assert!(!s.matches(Some(&map(&[("env", "c")]))));
        assert!(!s.matches(Some(&map(&[("env", "b"), ("tier", "db")]))));
    }

    #[test]
    fn rejects_garbage() {
        assert!(Selector::parse("a in b").is_err());
        assert!(Selector::parse("a b c").is_err());
        assert!(Selector::parse("=x").is_err());
    }

    #[test]
    fn converts_to_a_label_selector() {
        let s = Selector::parse("a=b,!c").unwrap().to_label_selector();
        let e = s.match_expressions.unwrap();
        assert_eq!((e[0].operator.as_str(), e[0].values.clone()), ("In", Some(vec!["b".to_string()])));
        assert_eq!(e[1].operator, "DoesNotExist");
    }

    #[test]
    fn empty_matches_everything() {
        let s = Selector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(None));
    }
}
