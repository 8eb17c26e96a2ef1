//! kwok's selector expressions in the path (jq) form its stages use, read into what they test:
//! a label, an annotation, the deletion timestamp, the finalizers, the owner's kind, the phase,
//! the pod IP, a condition's status, a container state. Anything else is not understood (and
//! reported by the importer). Whitespace inside an expression does not matter.

use super::api::JqRequirement;

/// What a path reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Path {
    Label(String),
    Annotation(String),
    DeletionTimestamp,
    Finalizers,
    OwnerKind,
    Phase,
    PodIp,
    /// `.status.conditions.[] | select( .type == "X" ) | .status`.
    Condition(String),
    /// `.status.containerStatuses.[].state.<state>…` (`init`: initContainerStatuses).
    ContainerState {
        init: bool,
        state: String,
    },
}

/// The operators kwok takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement, understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub path: Path,
    pub op: Op,
    pub values: Vec<String>,
}

impl Term {
    /// Whether the requirement holds for a value the path reads (`None`: no value), with kwok's
    /// semantics (an empty string exists).
    pub fn holds(&self, value: Option<&str>) -> bool {
        match (self.op, value) {
            (Op::In, Some(v)) => self.values.iter().any(|x| x == v),
            (Op::In, None) => false,
            (Op::NotIn, Some(v)) => !self.values.iter().any(|x| x == v),
            (Op::NotIn, None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
        }
    }
}

/// A bracketed, quoted key: `["k"]` or `['k']`.
fn bracketed(rest: &str) -> Option<String> {
    let inner = rest.strip_prefix('[')?.strip_suffix(']')?;
    let q = inner.chars().next()?;
    if q != '"' && q != '\'' {
        return None;
    }
    inner.strip_prefix(q)?.strip_suffix(q).map(str::to_string)
}

/// What `key` reads, if it is a form this importer understands.
pub fn parse_path(key: &str) -> Option<Path> {
    let k: String = key.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(rest) = k.strip_prefix(".metadata.labels") {
        return bracketed(rest).map(Path::Label).or_else(|| rest.strip_prefix('.').map(|s| Path::Label(s.into())));
    }
    if let Some(rest) = k.strip_prefix(".metadata.annotations") {
        return bracketed(rest)
            .map(Path::Annotation)
            .or_else(|| rest.strip_prefix('.').map(|s| Path::Annotation(s.into())));
    }
    match k.as_str() {
        ".metadata.deletionTimestamp" => return Some(Path::DeletionTimestamp),
        ".metadata.finalizers" | ".metadata.finalizers.[]" | ".metadata.finalizers[]" => return Some(Path::Finalizers),
        ".metadata.ownerReferences.[].kind" | ".metadata.ownerReferences[].kind" => return Some(Path::OwnerKind),
        ".status.phase" => return Some(Path::Phase),
        ".status.podIP" => return Some(Path::PodIp),
        _ => {}
    }
    if let Some(rest) = k
        .strip_prefix(".status.conditions.[]|select(.type==")
        .or_else(|| k.strip_prefix(".status.conditions[]|select(.type=="))
    {
        let (quoted, tail) = rest.split_once(')')?;
        if tail != "|.status" {
            return None;
        }
        let t = quoted.trim_matches('"').trim_matches('\'');
        return Some(Path::Condition(t.to_string()));
    }
    for (prefix, init) in [(".status.containerStatuses", false), (".status.initContainerStatuses", true)] {
        if let Some(rest) = k.strip_prefix(prefix) {
            let rest = rest.strip_prefix(".[]").or_else(|| rest.strip_prefix("[]"))?;
            let state = rest.strip_prefix(".state.")?;
            let state = state.split('.').next()?.to_string();
            return Some(Path::ContainerState { init, state });
        }
    }
    None
}

/// A requirement understood, or why not.
pub fn parse(req: &JqRequirement) -> Result<Term, String> {
    let op = match req.operator.as_str() {
        "In" => Op::In,
        "NotIn" => Op::NotIn,
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        other => return Err(format!("operator {other:?} is not one kwok takes (In, NotIn, Exists, DoesNotExist)")),
    };
    let path =
        parse_path(&req.key).ok_or_else(|| format!("the expression {:?} is not one this importer reads", req.key))?;
    Ok(Term { path, op, values: req.values.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_kwoks_stages_use_are_read() {
        assert_eq!(
            parse_path(r#".metadata.labels["pod-container-running-failed.stage.kwok.x-k8s.io"]"#),
            Some(Path::Label("pod-container-running-failed.stage.kwok.x-k8s.io".into()))
        );
        assert_eq!(parse_path(".metadata.annotations['a/b']"), Some(Path::Annotation("a/b".into())));
        assert_eq!(
            parse_path(r#".status.conditions.[] | select( .type == "Ready" ) | .status"#),
            Some(Path::Condition("Ready".into()))
        );
        assert_eq!(parse_path(".metadata.ownerReferences.[].kind"), Some(Path::OwnerKind));
        assert_eq!(
            parse_path(".status.initContainerStatuses.[].state.waiting.reason"),
            Some(Path::ContainerState { init: true, state: "waiting".into() })
        );
        assert_eq!(parse_path(".spec.nodeName | length"), None);
    }

    #[test]
    fn operators_follow_kwoks_semantics() {
        let t = |op, values: &[&str]| Term {
            path: Path::Phase,
            op,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        assert!(t(Op::NotIn, &["True"]).holds(None), "no value is NotIn anything");
        assert!(t(Op::Exists, &[]).holds(Some("")), "an empty string exists");
        assert!(!t(Op::In, &["Running"]).holds(Some("Pending")));
        let bad =
            parse(&JqRequirement { key: ".status.phase".into(), operator: "Intersection".into(), values: vec![] });
        assert!(bad.unwrap_err().contains("not one kwok takes"));
    }
}
