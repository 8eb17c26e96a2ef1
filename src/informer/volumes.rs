//! What the kubelet's volume manager reads of a pod's volumes, kept in the stored pod only
//! when there is something to wait for: claims (PersistentVolumeClaims, generic ephemeral
//! volumes) and the ConfigMaps and Secrets it mounts without `optional: true`. The API
//! server's own projected `kube-root-ca.crt` (published into every namespace by the
//! controller manager) is not kept: every pod has it.

use k8s_openapi::api::core::v1::{PodSpec, Volume};

/// The ConfigMap the controller manager publishes into every namespace.
const ROOT_CA: &str = "kube-root-ca.crt";

/// What a mounted source is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    ConfigMap,
    Secret,
}

impl SourceKind {
    /// As the kubelet's messages name it (`configmap "x" not found`).
    pub fn word(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmap",
            SourceKind::Secret => "secret",
        }
    }
}

/// One ConfigMap or Secret a volume mounts.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub volume: Box<str>,
    pub kind: SourceKind,
    pub name: Box<str>,
}

/// A pod's volumes the kubelet waits for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodVolumes {
    /// (volume, claim name) of each PersistentVolumeClaim it uses.
    pub claims: Box<[(Box<str>, Box<str>)]>,
    pub sources: Box<[Source]>,
}

impl PodVolumes {
    /// The volumes of `spec` (a pod named `pod`) the kubelet waits for; `None` when none.
    pub fn of(pod: &str, spec: &PodSpec) -> Option<Self> {
        let (mut claims, mut sources) = (Vec::new(), Vec::new());
        for v in spec.volumes.iter().flatten() {
            if let Some(c) = &v.persistent_volume_claim {
                claims.push((v.name.as_str().into(), c.claim_name.as_str().into()));
            } else if v.ephemeral.is_some() {
                // A generic ephemeral volume's claim is named after its pod and volume.
                claims.push((v.name.as_str().into(), format!("{pod}-{}", v.name).into()));
            }
            sources_of(v, &mut sources);
        }
        (!claims.is_empty() || !sources.is_empty())
            .then(|| PodVolumes { claims: claims.into(), sources: sources.into() })
    }
}

fn sources_of(v: &Volume, out: &mut Vec<Source>) {
    let mut add = |kind, name: Option<&String>, optional: Option<bool>| {
        if let Some(name) = name.filter(|n| !n.is_empty() && optional != Some(true)) {
            if kind == SourceKind::ConfigMap && name == ROOT_CA {
                return;
            }
            out.push(Source { volume: v.name.as_str().into(), kind, name: name.as_str().into() });
        }
    };
    if let Some(c) = &v.config_map {
        add(SourceKind::ConfigMap, Some(&c.name), c.optional);
    }
    if let Some(s) = &v.secret {
        add(SourceKind::Secret, s.secret_name.as_ref(), s.optional);
    }
    for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
        if let Some(c) = &p.config_map {
            add(SourceKind::ConfigMap, Some(&c.name), c.optional);
        }
        if let Some(s) = &p.secret {
            add(SourceKind::Secret, Some(&s.name), s.optional);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(volumes: serde_json::Value) -> PodSpec {
        serde_json::from_value(serde_json::json!({"containers": [], "volumes": volumes})).unwrap()
    }

    #[test]
    fn claims_and_required_sources_are_kept_the_rest_is_not() {
        let s = spec(serde_json::json!([
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "cfg", "configMap": {"name": "app"}},
            {"name": "maybe", "configMap": {"name": "opt", "optional": true}},
            {"name": "tls", "secret": {"secretName": "certs"}},
            {"name": "kube-api-access-x", "projected": {"sources": [
                {"configMap": {"name": "kube-root-ca.crt"}},
                {"secret": {"name": "extra"}},
                {"serviceAccountToken": {"path": "token"}}
            ]}},
            {"name": "tmp", "emptyDir": {}}
        ]));
        let v = PodVolumes::of("web-0", &s).unwrap();
        let claims: Vec<(&str, &str)> = v.claims.iter().map(|(a, b)| (&**a, &**b)).collect();
        assert_eq!(claims, [("data", "data-web-0"), ("scratch", "web-0-scratch")]);
        let sources: Vec<(&str, SourceKind, &str)> = v.sources.iter().map(|s| (&*s.volume, s.kind, &*s.name)).collect();
        assert_eq!(
            sources,
            [
                ("cfg", SourceKind::ConfigMap, "app"),
                ("tls", SourceKind::Secret, "certs"),
                ("kube-api-access-x", SourceKind::Secret, "extra")
            ]
        );
    }

    #[test]
    fn a_pod_with_only_the_default_token_volume_keeps_nothing() {
        let s = spec(serde_json::json!([
            {"name": "kube-api-access-x", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}},
            {"name": "tmp", "emptyDir": {}}
        ]));
        assert_eq!(PodVolumes::of("p", &s), None);
    }
}
