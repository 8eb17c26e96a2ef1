//! Validation rules beyond what the CRD schema and CEL say. Used by the admission webhook
//! and again by the reconciler. Messages name fields by their manifest path.

use super::{NodePool, PodPool};
use ipnet::IpNet;
use kube::ResourceExt;
use std::sync::Arc;

/// Checks a NodePool, given every other NodePool (for rules across pools).
pub fn validate_nodepool(pool: &NodePool, others: &[Arc<NodePool>]) -> Result<(), String> {
    let spec = &pool.spec;
    if spec.node_count < 0 || spec.node_count > super::common::MAX_COUNT {
        return Err(format!(
            "spec.nodeCount: {} is out of range: use 0 to {}",
            spec.node_count,
            super::common::MAX_COUNT
        ));
    }
    if let Some(range) = &spec.pod_cidr {
        let net: IpNet = range
            .cidr
            .parse()
            .map_err(|_| format!("spec.podCIDR.cidr: {:?} is not a CIDR such as 10.0.0.0/16", range.cidr))?;
        let _ = net;
    }
    if let Some(ips) = &spec.internal_ips {
        ips.parse::<IpNet>().map_err(|_| format!("spec.internalIPs: {ips:?} is not a CIDR such as 10.1.0.0/16"))?;
    }
    let _ = (others, pool.name_any());
    Ok(())
}

/// Checks a PodPool.
pub fn validate_podpool(pool: &PodPool) -> Result<(), String> {
    let spec = &pool.spec;
    if spec.pod_count < 0 || spec.pod_count > super::common::MAX_COUNT {
        return Err(format!(
            "spec.podCount: {} is out of range: use 0 to {}",
            spec.pod_count,
            super::common::MAX_COUNT
        ));
    }
    Ok(())
}
