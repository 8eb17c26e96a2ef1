//! Why the kubelet refused a pod: the reason and message its admission handlers give (the
//! predicate checks in [`super::admission`], the eviction manager in [`super::eviction`]). Pure.

/// Why the kubelet refused a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The pod's `status.reason` and the event's reason.
    pub reason: String,
    /// The event's message; the pod's `status.message` is it after "Pod was rejected: ".
    pub message: String,
}

impl Rejection {
    pub fn predicate(name: &str, description: &str) -> Self {
        Rejection { reason: name.into(), message: format!("Predicate {name} failed: {description}") }
    }
}
