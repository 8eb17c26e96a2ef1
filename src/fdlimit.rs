//! The process's open-file limit: raised to the hard limit at start, as Go programs do, so
//! the kubelet API can keep a connection per node for metrics-server and Prometheus on a
//! host whose soft limit is 1,024; read back to bound those connections.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft open-file limit to the hard one; the soft limit now (`None`: unknown).
pub fn raise() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::debug!(from = soft, to = hard, "raised the open-file limit");
        return Some(hard);
    }
    Some(soft)
}

/// The soft open-file limit now.
pub fn open_file_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(soft, _)| soft)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let raised = super::raise().unwrap();
        assert_eq!(super::open_file_limit(), Some(raised));
    }
}
