//! Each pod's mounted claims as the kubelet reports them: `volume` entries of
//! `/stats/summary` (stats/v1alpha1 `VolumeStats`, with `pvcRef`) and the
//! `kubelet_volume_stats_*` gauges of `/metrics`. Pure: rendering only.

use super::resource_metrics::escape;
use crate::kubelet::VolumeStat;
use serde_json::{Value, json};
use std::fmt::Write;

/// The mounted claims of one pod.
pub struct PodVolumes {
    pub namespace: String,
    pub pod: String,
    pub stats: Vec<VolumeStat>,
}

/// Inodes a volume reports: one per 16 KiB of capacity (ext4's default ratio), one per 64 KiB
/// used.
fn inodes(v: &VolumeStat) -> (u64, u64) {
    let total = v.capacity_bytes / 16_384;
    (total, (v.used_bytes / 65_536).min(total))
}

/// Fills each pod's `volume` list of `summary` (pods matched by namespace and name).
pub fn fill_summary(summary: &mut Value, at: &str, volumes: &[PodVolumes]) {
    let Some(pods) = summary.get_mut("pods").and_then(Value::as_array_mut) else { return };
    for p in pods {
        let (ns, name) =
            (p["podRef"]["namespace"].as_str().unwrap_or_default(), p["podRef"]["name"].as_str().unwrap_or_default());
        let Some(found) = volumes.iter().find(|v| v.namespace == ns && v.pod == name) else { continue };
        let list: Vec<Value> = found
            .stats
            .iter()
            .map(|v| {
                let (total, used) = inodes(v);
                json!({
                    "time": at, "name": v.name,
                    "capacityBytes": v.capacity_bytes, "usedBytes": v.used_bytes,
                    "availableBytes": v.capacity_bytes.saturating_sub(v.used_bytes),
                    "inodes": total, "inodesUsed": used, "inodesFree": total - used,
                    "pvcRef": {"name": v.claim, "namespace": found.namespace},
                })
            })
            .collect();
        p["volume"] = Value::Array(list);
    }
}

/// The kubelet's `kubelet_volume_stats_*` gauges for the claims mounted on a node.
pub fn render(volumes: &[PodVolumes]) -> String {
    let mut out = String::new();
    type Pick = fn(&VolumeStat) -> u64;
    let families: [(&str, &str, Pick); 6] = [
        ("capacity_bytes", "Capacity in bytes of the volume", |v| v.capacity_bytes),
        ("available_bytes", "Number of available bytes in the volume", |v| {
            v.capacity_bytes.saturating_sub(v.used_bytes)
        }),
        ("used_bytes", "Number of used bytes in the volume", |v| v.used_bytes),
        ("inodes", "Maximum number of inodes in the volume", |v| inodes(v).0),
        ("inodes_free", "Number of free inodes in the volume", |v| inodes(v).0 - inodes(v).1),
        ("inodes_used", "Number of used inodes in the volume", |v| inodes(v).1),
    ];
    for (suffix, help, pick) in families {
        let name = format!("kubelet_volume_stats_{suffix}");
        let _ = writeln!(out, "# HELP {name} [ALPHA] {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let mut seen = std::collections::HashSet::new();
        for p in volumes {
            for v in &p.stats {
                // A claim mounted by two pods of the node is one series, as the kubelet's.
                if seen.insert((&p.namespace, &v.claim)) {
                    let _ = writeln!(
                        out,
                        "{name}{{namespace=\"{}\",persistentvolumeclaim=\"{}\"}} {}",
                        escape(&p.namespace),
                        escape(&v.claim),
                        pick(v)
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vols() -> Vec<PodVolumes> {
        let stat =
            VolumeStat { name: "data".into(), claim: "data-db-0".into(), capacity_bytes: 1 << 30, used_bytes: 1 << 28 };
        vec![PodVolumes { namespace: "db".into(), pod: "db-0".into(), stats: vec![stat] }]
    }

    #[test]
    fn summary_volumes_name_their_claim() {
        let mut s = json!({"pods": [{"podRef": {"name": "db-0", "namespace": "db"}, "volume": []}, {"podRef": {"name": "x", "namespace": "db"}, "volume": []}]});
        fill_summary(&mut s, "t", &vols());
        let v = &s["pods"][0]["volume"][0];
        assert_eq!((v["name"].as_str(), v["pvcRef"]["name"].as_str()), (Some("data"), Some("data-db-0")));
        assert_eq!(v["capacityBytes"], 1u64 << 30);
        assert_eq!(v["availableBytes"], (1u64 << 30) - (1 << 28));
        assert_eq!(s["pods"][1]["volume"], json!([]));
    }

    #[test]
    fn metrics_in_the_kubelets_names() {
        let text = render(&vols());
        assert!(
            text.contains(
                "kubelet_volume_stats_capacity_bytes{namespace=\"db\",persistentvolumeclaim=\"data-db-0\"} 1073741824"
            ),
            "{text}"
        );
        assert!(text.contains(
            "kubelet_volume_stats_used_bytes{namespace=\"db\",persistentvolumeclaim=\"data-db-0\"} 268435456"
        ));
        assert!(text.contains("# TYPE kubelet_volume_stats_inodes_free gauge"));
    }
}
