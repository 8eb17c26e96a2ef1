//! The simulated CSI driver's names and its StorageClass parameters (pure): what the storage
//! simulation, the admission webhook, the NodePool and `cluster create` share.

use super::delay::Distribution;
use super::duration::parse_duration;
use std::collections::BTreeMap;
use std::time::Duration;

/// The simulated CSI driver: its CSIDriver object, the provisioner of its StorageClasses and
/// the attacher of its VolumeAttachments.
pub const DRIVER: &str = "disk.csi.pools.kwok.x-k8s.io";
/// The StorageClass `cluster create --storage-class` installs (the cluster's default).
pub const PRESET_CLASS: &str = "simulated-disk";
/// On a node: how many of the driver's volumes may be attached to it (its CSINode's
/// `allocatable.count`); a NodePool writes it from `spec.storage.attachLimit`.
pub const ATTACH_LIMIT_ANNOTATION: &str = "pools.kwok.x-k8s.io/volume-attach-limit";
/// A node's attach limit when nothing sets one: the scheduler's former default for a cloud
/// block disk (AWS EBS, `DefaultMaxEBSVolumes`).
pub const DEFAULT_ATTACH_LIMIT: u32 = 39;
/// The most an attach limit may say.
pub const MAX_ATTACH_LIMIT: u32 = 4096;
/// On a node: the attach/detach controller attaches its volumes (the kubelet's
/// `--enable-controller-attach-detach`, on by default).
pub const CONTROLLER_ATTACH_ANNOTATION: &str = "volumes.kubernetes.io/controller-managed-attach-detach";
/// The zone label: the driver's topology key.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The annotation the scheduler writes on a claim waiting for its first consumer.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The annotation an external provisioner writes on the volumes it made.
pub const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";

/// The access modes a volume may have.
pub const ACCESS_MODES: [&str; 4] = ["ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany", "ReadWriteMany"];

/// How the driver's volumes of one StorageClass behave: read from its `parameters`, every
/// value a string (`provisionDelay: "2s"` or `"1s..5s"`, `attachFailurePercent: "10"`).
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeClass {
    /// How long creating a volume takes.
    pub provision_delay: Distribution,
    /// The share of provisioning attempts that fail (each retry draws again).
    pub provision_failure_percent: u8,
    /// How long attaching a volume to a node takes.
    pub attach_delay: Distribution,
    /// The share of attach attempts that fail (each retry draws again).
    pub attach_failure_percent: u8,
    /// How full a volume reports itself (per volume, drawn in this range), in percent.
    pub used_percent: (u8, u8),
    /// The access modes its volumes support.
    pub access_modes: Vec<String>,
}

impl Default for VolumeClass {
    fn default() -> Self {
        Self {
            provision_delay: Distribution::Fixed(Duration::ZERO),
            provision_failure_percent: 0,
            attach_delay: Distribution::Fixed(Duration::ZERO),
            attach_failure_percent: 0,
            used_percent: (10, 10),
            access_modes: vec!["ReadWriteOnce".into(), "ReadWriteOncePod".into()],
        }
    }
}

/// The parameters the driver reads, with what each takes.
pub const PARAMETERS: [(&str, &str); 6] = [
    ("provisionDelay", "a duration (2s) or a range (1s..5s)"),
    ("provisionFailurePercent", "a percentage from 0 to 100"),
    ("attachDelay", "a duration (2s) or a range (1s..5s)"),
    ("attachFailurePercent", "a percentage from 0 to 100"),
    ("usedPercent", "a percentage (30) or a range (10..80)"),
    ("accessModes", "a comma-separated list of ReadWriteOnce, ReadWriteOncePod, ReadOnlyMany, ReadWriteMany"),
];

/// The prefix of the parameters Kubernetes' CSI sidecars reserve (fstype, secrets): accepted,
/// not read.
pub const RESERVED_PREFIX: &str = "csi.storage.k8s.io/";

impl VolumeClass {
    /// The class its `parameters` describe, or what is wrong, naming the parameter
    /// (`parameters.attachDelay: …`).
    pub fn from_parameters(parameters: Option<&BTreeMap<String, String>>) -> Result<Self, String> {
        let mut class = VolumeClass::default();
        for (key, value) in parameters.into_iter().flatten() {
            if key.starts_with(RESERVED_PREFIX) {
                continue;
            }
            let wrong = |what: &str| format!("parameters.{key}: {value:?} is not {what}");
            let Some((_, what)) = PARAMETERS.iter().find(|(k, _)| k == key) else {
                let known: Vec<&str> = PARAMETERS.iter().map(|(k, _)| *k).collect();
                return Err(format!(
                    "parameters.{key}: not a parameter of {DRIVER}; it reads {} (and {RESERVED_PREFIX}*)",
                    known.join(", ")
                ));
            };
            match key.as_str() {
                "provisionDelay" => class.provision_delay = delay(value).ok_or_else(|| wrong(what))?,
                "attachDelay" => class.attach_delay = delay(value).ok_or_else(|| wrong(what))?,
                "provisionFailurePercent" => class.provision_failure_percent = pct(value).ok_or_else(|| wrong(what))?,
                "attachFailurePercent" => class.attach_failure_percent = pct(value).ok_or_else(|| wrong(what))?,
                "usedPercent" => class.used_percent = pct_range(value).ok_or_else(|| wrong(what))?,
                _ => class.access_modes = modes(value).ok_or_else(|| wrong(what))?,
            }
        }
        Ok(class)
    }

    /// The first of `wanted` this class's volumes do not support.
    pub fn unsupported<'a>(&self, wanted: &'a [String]) -> Option<&'a str> {
        wanted.iter().find(|m| !self.access_modes.contains(m)).map(String::as_str)
    }
}

/// `2s`, or `1s..5s` (uniform).
fn delay(text: &str) -> Option<Distribution> {
    match text.split_once("..") {
        None => parse_duration(text.trim()).map(Distribution::Fixed),
        Some((lo, hi)) => {
            let (lo, hi) = (parse_duration(lo.trim())?, parse_duration(hi.trim())?);
            (lo <= hi).then_some(Distribution::Uniform(lo, hi))
        }
    }
}

fn pct(text: &str) -> Option<u8> {
    text.trim().parse::<u8>().ok().filter(|p| *p <= 100)
}

/// `30`, or `10..80`.
fn pct_range(text: &str) -> Option<(u8, u8)> {
    match text.split_once("..") {
        None => pct(text).map(|p| (p, p)),
        Some((lo, hi)) => {
            let (lo, hi) = (pct(lo)?, pct(hi)?);
            (lo <= hi).then_some((lo, hi))
        }
    }
}

fn modes(text: &str) -> Option<Vec<String>> {
    let list: Vec<String> = text.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect();
    (!list.is_empty() && list.iter().all(|m| ACCESS_MODES.contains(&m.as_str()))).then_some(list)
}

/// A node's attach limit from its annotation: the default when unset, `Err` when it does not
/// read.
pub fn attach_limit(annotation: Option<&str>) -> Result<u32, String> {
    match annotation {
        None => Ok(DEFAULT_ATTACH_LIMIT),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_ATTACH_LIMIT)
            .ok_or_else(|| format!("{ATTACH_LIMIT_ANNOTATION}: {v:?} is not a count from 0 to {MAX_ATTACH_LIMIT}")),
    }
}

/// The StorageClass `cluster create --storage-class` installs: the driver's, the cluster's
/// default, binding when the first pod is scheduled (so volumes follow their pod's zone),
/// expandable, deleted with their claim.
pub fn preset_class() -> k8s_openapi::api::storage::v1::StorageClass {
    let metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(PRESET_CLASS.into()),
        annotations: Some([("storageclass.kubernetes.io/is-default-class".to_string(), "true".to_string())].into()),
        ..Default::default()
    };
    k8s_openapi::api::storage::v1::StorageClass {
        metadata,
        provisioner: DRIVER.into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        allow_volume_expansion: Some(true),
        reclaim_policy: Some("Delete".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parameters_read_into_a_class() {
        let c = VolumeClass::from_parameters(Some(&params(&[
            ("provisionDelay", "1s..5s"),
            ("attachDelay", "500ms"),
            ("attachFailurePercent", "10"),
            ("usedPercent", "20..80"),
            ("accessModes", "ReadWriteOnce, ReadWriteMany"),
            ("csi.storage.k8s.io/fstype", "ext4"),
        ])))
        .unwrap();
        assert_eq!(c.provision_delay, Distribution::Uniform(Duration::from_secs(1), Duration::from_secs(5)));
        assert_eq!(c.attach_delay, Distribution::Fixed(Duration::from_millis(500)));
        assert_eq!((c.attach_failure_percent, c.provision_failure_percent), (10, 0));
        assert_eq!(c.used_percent, (20, 80));
        assert_eq!(c.unsupported(&["ReadWriteMany".into()]), None);
        assert_eq!(c.unsupported(&["ReadOnlyMany".into()]), Some("ReadOnlyMany"));
        assert_eq!(VolumeClass::from_parameters(None).unwrap(), VolumeClass::default());
    }

    #[test]
    fn bad_parameters_name_the_parameter() {
        for (pairs, needle) in [
            (vec![("attachDelay", "soon")], "parameters.attachDelay: \"soon\" is not a duration"),
            (vec![("provisionDelay", "5s..1s")], "parameters.provisionDelay"),
            (vec![("attachFailurePercent", "101")], "parameters.attachFailurePercent: \"101\" is not a percentage"),
            (vec![("usedPercent", "-3")], "parameters.usedPercent"),
            (vec![("accessModes", "ReadWriteSometimes")], "parameters.accessModes"),
            (vec![("type", "gp3")], "parameters.type: not a parameter of disk.csi.pools.kwok.x-k8s.io"),
        ] {
            let e = VolumeClass::from_parameters(Some(&params(&pairs))).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn attach_limits_read_from_the_annotation() {
        assert_eq!(attach_limit(None), Ok(DEFAULT_ATTACH_LIMIT));
        assert_eq!(attach_limit(Some("16")), Ok(16));
        assert_eq!(attach_limit(Some("0")), Ok(0));
        assert!(attach_limit(Some("lots")).unwrap_err().contains(ATTACH_LIMIT_ANNOTATION));
        assert!(attach_limit(Some("5000")).is_err());
    }
}
