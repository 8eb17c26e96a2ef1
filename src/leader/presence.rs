//! Which running instance handles which pools: the replica that runs an instance's pool
//! controllers keeps a Lease `<instance>-pools` saying so (its pool selector in an annotation,
//! renewed while it runs). `kwok-pools status` and an instance that starts read them to name a
//! pool no running instance handles (a plain manifest while only a named instance runs).

use crate::simulator::selector::Selector;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, ObjectMeta, Patch};
use kube::{Api, Client, ResourceExt};
use std::collections::BTreeMap;
use std::time::Duration;

/// The label (value: the instance) on every presence Lease.
pub const PRESENCE_LABEL: &str = "pools.kwok.x-k8s.io/pools-of";
/// The annotation holding the label selector of the pools the instance handles.
pub const SELECTOR_ANNOTATION: &str = "pools.kwok.x-k8s.io/pool-selector";
/// How long a presence holds without renewal; renewed every third of it.
pub const DURATION: Duration = Duration::from_secs(30);

/// One instance that runs its pool controllers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presence {
    pub instance: String,
    /// The replica running them.
    pub identity: String,
    /// The pools it handles (a label selector).
    pub selector: String,
}

/// The Lease that says `p` runs, as of `now`.
pub fn lease(p: &Presence, namespace: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(format!("{}-pools", p.instance)),
            namespace: Some(namespace.into()),
            labels: Some([(PRESENCE_LABEL.to_string(), p.instance.clone())].into()),
            annotations: Some([(SELECTOR_ANNOTATION.to_string(), p.selector.clone())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(p.identity.clone()),
            lease_duration_seconds: i32::try_from(DURATION.as_secs()).ok(),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// The instances whose presence holds at `now` (renewed within its duration), with the pools
/// they handle. A Lease without a parseable selector is skipped.
pub fn running(leases: &[Lease], now: Timestamp) -> Vec<(String, Selector)> {
    leases
        .iter()
        .filter_map(|l| {
            let instance = l.labels().get(PRESENCE_LABEL)?.clone();
            let spec = l.spec.as_ref()?;
            let renewed = spec.renew_time.as_ref()?.0;
            let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(30)));
            if now.duration_since(renewed) > duration {
                return None;
            }
            let selector = Selector::parse(l.annotations().get(SELECTOR_ANNOTATION)?).ok()?;
            Some((instance, selector))
        })
        .collect()
}

/// The running instance that handles a pool with `labels` (`None`: none does).
pub fn handler<'a>(running: &'a [(String, Selector)], labels: &BTreeMap<String, String>) -> Option<&'a str> {
    running.iter().find(|(_, s)| s.matches(Some(labels))).map(|(i, _)| i.as_str())
}

/// What to tell the owner of a pool no running instance handles.
pub fn unhandled_advice(labels: &BTreeMap<String, String>) -> String {
    match labels.get(crate::api::conventions::INSTANCE_LABEL) {
        Some(i) => format!(
            "no running operator instance handles it: it is labelled {}={i}; run `kwok-pools run --instance {i}` (or the chart with instance={i}), or remove the label for the default instance",
            crate::api::conventions::INSTANCE_LABEL
        ),
        None => format!(
            "no running operator instance handles it: the default instance handles unlabelled pools and none runs; label the pool {}=<instance> for a named instance, or run the default instance",
            crate::api::conventions::INSTANCE_LABEL
        ),
    }
}

/// The presence Leases this client may list: every namespace's, else `namespace`'s.
pub async fn list(client: &Client, namespace: &str) -> kube::Result<Vec<Lease>> {
    let lp = ListParams::default().labels(PRESENCE_LABEL);
    match Api::<Lease>::all(client.clone()).list(&lp).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Ok(Api::<Lease>::namespaced(client.clone(), namespace).list(&lp).await?.items)
        }
        Err(e) => Err(e),
    }
}

/// Keeps `p`'s presence while the process runs (never returns).
pub async fn keep(client: Client, namespace: String, p: Presence) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let name = format!("{}-pools", p.instance);
    let params = crate::api::conventions::apply_params();
    let mut told = false;
    loop {
        match api.patch(&name, &params, &Patch::Apply(lease(&p, &namespace, Timestamp::now()))).await {
            Ok(_) => told = false,
            Err(e) if !told => {
                told = true;
                tracing::warn!(error = %e, lease = %name, %namespace, "cannot write this instance's presence Lease: `kwok-pools status` may report its pools as unhandled (the operator needs patch on leases in its namespace)");
            }
            Err(_) => {}
        }
        tokio::time::sleep(DURATION / 3).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn a_pool_is_handled_by_the_running_instance_whose_selector_matches() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let ago = |s: i64| now.checked_sub(SignedDuration::from_secs(s)).unwrap();
        let a = Presence {
            instance: "a".into(),
            identity: "a-0".into(),
            selector: "pools.kwok.x-k8s.io/instance=a".into(),
        };
        let gone = Presence {
            instance: "kwok-pools".into(),
            identity: "x".into(),
            selector: "!pools.kwok.x-k8s.io/instance".into(),
        };
        let leases = [lease(&a, "ns", ago(5)), lease(&gone, "ns", ago(120))];
        let run = running(&leases, now);
        assert_eq!(run.len(), 1, "an expired presence is no running instance");
        assert_eq!(handler(&run, &labels(&[("pools.kwok.x-k8s.io/instance", "a")])), Some("a"));
        let plain = labels(&[("team", "x")]);
        assert_eq!(handler(&run, &plain), None, "the default instance does not run");
        assert!(unhandled_advice(&plain).contains("run the default instance"), "{}", unhandled_advice(&plain));
        let for_b = labels(&[("pools.kwok.x-k8s.io/instance", "b")]);
        assert!(unhandled_advice(&for_b).contains("--instance b"), "{}", unhandled_advice(&for_b));
    }
}
