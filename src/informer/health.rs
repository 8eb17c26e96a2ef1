//! Whether a watch is healthy, for `/readyz`: synced at least once, and not failing for long.
//! Pure apart from the clock it is given; the advice names what to do about a failure.

use kube::runtime::watcher;
use std::time::{Duration, Instant};

/// A watch failing for longer than this makes the operator not ready.
pub const FAILING_GRACE: Duration = Duration::from_secs(15);

#[derive(Clone, Debug, Default)]
pub struct WatchState {
    pub synced: bool,
    pub failing_since: Option<Instant>,
    pub last_error: Option<String>,
    /// The watch task is gone (it panicked or its stream ended): nothing will update the store.
    pub ended: bool,
}

impl WatchState {
    /// A complete list arrived.
    pub fn synced(&mut self) {
        self.synced = true;
        self.failing_since = None;
    }

    /// An event arrived: the watch works.
    pub fn ok(&mut self) {
        self.failing_since = None;
    }

    pub fn failed(&mut self, advice: String, now: Instant) {
        self.failing_since.get_or_insert(now);
        self.last_error = Some(advice);
    }

    /// What is wrong with the watch of `kind` at `now`, if anything.
    pub fn problem(&self, kind: &str, now: Instant, grace: Duration) -> Option<String> {
        let error = self.last_error.as_deref().unwrap_or("no error yet");
        if self.ended {
            return Some(format!("the watch of {kind} has ended (a bug: see the log); restart the operator"));
        }
        match self.failing_since {
            Some(since) if now.saturating_duration_since(since) >= grace => Some(format!(
                "the watch of {kind} has been failing for {}s: {error}",
                now.saturating_duration_since(since).as_secs()
            )),
            _ if !self.synced => Some(format!("{kind} not listed yet (last error: {error})")),
            _ => None,
        }
    }
}

/// The HTTP status of a watch error, when the API server answered.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// A watch error with what to do about it.
pub fn advice(kind: &str, error: &watcher::Error) -> String {
    let what = match status_code(error) {
        Some(401) => {
            "the API server does not accept the operator's credentials: check its kubeconfig or service account token"
                .to_string()
        }
        Some(403) => format!("the operator may not list/watch {kind}: grant it (see config/rbac.yaml)"),
        Some(404) => format!(
            "the API server does not serve {kind}: install its CRD (for pools: kubectl apply --server-side -f crds/)"
        ),
        Some(code) if code >= 500 => "the API server is failing: check kube-apiserver and etcd".to_string(),
        _ => "is the API server reachable? retrying with backoff".to_string(),
    };
    format!("{error}; {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_synced_and_unready_while_failing_past_the_grace() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(15);
        let mut s = WatchState::default();
        assert!(s.problem("pods", t0, grace).unwrap().contains("not listed yet"));
        s.synced();
        assert_eq!(s.problem("pods", t0, grace), None);
        s.failed("boom; what to do".into(), t0);
        assert_eq!(s.problem("pods", t0 + Duration::from_secs(5), grace), None, "a blip is not unready");
        let p = s.problem("pods", t0 + Duration::from_secs(20), grace).expect("failing for long");
        assert!(p.contains("pods") && p.contains("20s") && p.contains("what to do"), "{p}");
        s.failed("again".into(), t0 + Duration::from_secs(18));
        assert!(s.problem("pods", t0 + Duration::from_secs(20), grace).is_some(), "failing since the first error");
        s.ok();
        assert_eq!(s.problem("pods", t0 + Duration::from_secs(30), grace), None, "recovered");
        s.ended = true;
        assert!(s.problem("pods", t0, grace).unwrap().contains("restart the operator"), "a dead watch at once");
    }

    #[test]
    fn advice_names_what_to_do() {
        let api = |code: u16| {
            watcher::Error::InitialListFailed(kube::Error::Api(
                kube::core::Status::failure("nope", "Reason").with_code(code).boxed(),
            ))
        };
        assert!(advice("pods", &api(403)).contains("config/rbac.yaml"));
        assert!(advice("nodepools", &api(404)).contains("install its CRD"));
        assert!(advice("pods", &api(500)).contains("kube-apiserver"));
        assert!(advice("pods", &watcher::Error::NoResourceVersion).contains("retrying"));
    }
}
