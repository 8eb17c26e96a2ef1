use super::*;
use serde_json::json;

fn class(mode: &str, extra: serde_json::Value) -> StorageClass {
    let mut v = json!({"metadata": {"name": "disk"}, "provisioner": DRIVER, "volumeBindingMode": mode});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    serde_json::from_value(v).unwrap()
}

fn claim_of(size: &str, modes: &[&str], annotations: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data-web-0", "namespace": "db", "uid": "u-1", "annotations": annotations},
        "spec": {"storageClassName": "disk", "accessModes": modes, "resources": {"requests": {"storage": size}}},
    }))
    .unwrap()
}

fn node(zone: Option<&str>) -> Node {
    let labels = zone.map(|z| json!({ZONE_LABEL: z})).unwrap_or(json!({}));
    serde_json::from_value(json!({"metadata": {"name": "n-0", "labels": labels}})).unwrap()
}

#[test]
fn a_claim_waiting_for_its_consumer_gets_the_zone_of_the_node_the_scheduler_picked() {
    let c = class("WaitForFirstConsumer", json!({}));
    let pvc = claim_of("1Gi", &["ReadWriteOnce"], json!({}));
    assert_eq!(claim(&pvc, &c, None, &["a".into()]), Claim::Wait, "no node picked yet");
    let picked = claim_of("1Gi", &["ReadWriteOnce"], json!({SELECTED_NODE_ANNOTATION: "n-0"}));
    assert_eq!(claim(&picked, &c, Some(&node(Some("zone-b"))), &[]), Claim::Provision { zone: Some("zone-b".into()) });
    assert_eq!(claim(&picked, &c, Some(&node(None)), &[]), Claim::Provision { zone: None });
}

#[test]
fn an_immediate_claim_gets_one_of_the_allowed_zones_the_same_every_time() {
    let c = class(
        "Immediate",
        json!({"allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE_LABEL, "values": ["b", "c"]}]}]}),
    );
    let pvc = claim_of("1Gi", &["ReadWriteOnce"], json!({}));
    let zones: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let first = claim(&pvc, &c, None, &zones);
    let Claim::Provision { zone: Some(z) } = &first else { panic!("{first:?}") };
    assert!(z == "b" || z == "c", "{z}");
    assert_eq!(claim(&pvc, &c, None, &zones), first);
    assert_eq!(claim(&pvc, &class("Immediate", json!({})), None, &[]), Claim::Provision { zone: None });
    assert_eq!(claim(&pvc, &c, None, &["a".into()]), Claim::Wait, "no allowed zone has a simulated node");
}

#[test]
fn unsupported_access_modes_and_bad_parameters_are_refused_naming_the_fix() {
    let c = class("Immediate", json!({}));
    let rwx = claim_of("1Gi", &["ReadWriteMany"], json!({}));
    let Claim::Refuse(note) = claim(&rwx, &c, None, &[]) else { panic!() };
    assert!(note.contains("access mode ReadWriteMany is not supported") && note.contains("\"disk\""), "{note}");
    let bad = class("Immediate", json!({"parameters": {"attachDelay": "soon"}}));
    let Claim::Refuse(note) = claim(&claim_of("1Gi", &["ReadWriteOnce"], json!({})), &bad, None, &[]) else { panic!() };
    assert!(note.contains("parameters.attachDelay"), "{note}");
}

#[test]
fn the_volume_is_what_an_external_provisioner_creates() {
    let c = class("WaitForFirstConsumer", json!({"reclaimPolicy": "Retain"}));
    let pv = volume(&claim_of("2Gi", &["ReadWriteOnce"], json!({})), &c, Some("zone-a"));
    let v = serde_json::to_value(&pv).unwrap();
    assert_eq!(v["metadata"]["name"], "pvc-u-1");
    assert_eq!(v["metadata"]["annotations"][PROVISIONED_BY_ANNOTATION], DRIVER);
    assert_eq!(v["spec"]["capacity"]["storage"], "2Gi");
    assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(v["spec"]["claimRef"]["name"], "data-web-0");
    assert_eq!(v["spec"]["csi"]["driver"], DRIVER);
    assert_eq!(v["spec"]["csi"]["fsType"], "ext4");
    let term = &v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!((term["key"].as_str(), term["values"][0].as_str()), (Some(ZONE_LABEL), Some("zone-a")));
    assert!(is_ours(&pv));
}

#[test]
fn a_bigger_request_grows_the_volume_then_the_claims_status() {
    let c = class("Immediate", json!({"allowVolumeExpansion": true}));
    let mut pvc = claim_of("2Gi", &["ReadWriteOnce"], json!({}));
    pvc.status = Some(serde_json::from_value(json!({"capacity": {"storage": "1Gi"}})).unwrap());
    let mut pv = volume(&claim_of("1Gi", &["ReadWriteOnce"], json!({})), &c, None);
    assert_eq!(resize(&pvc, &pv, &c), Some(Resize { to: Quantity("2Gi".into()), volume: true }));
    pv.spec.as_mut().unwrap().capacity = Some([("storage".to_string(), Quantity("2Gi".into()))].into());
    assert_eq!(resize(&pvc, &pv, &c), Some(Resize { to: Quantity("2Gi".into()), volume: false }));
    pvc.status = Some(serde_json::from_value(json!({"capacity": {"storage": "2Gi"}})).unwrap());
    assert_eq!(resize(&pvc, &pv, &c), None);
    assert_eq!(resize(&claim_of("4Gi", &[], json!({})), &pv, &class("Immediate", json!({}))), None, "not expandable");
}

#[test]
fn only_released_volumes_of_the_driver_with_delete_are_reclaimed() {
    let c = class("Immediate", json!({}));
    let mut pv = volume(&claim_of("1Gi", &["ReadWriteOnce"], json!({})), &c, None);
    assert!(!reclaim(&pv));
    pv.status = Some(serde_json::from_value(json!({"phase": "Released"})).unwrap());
    assert!(reclaim(&pv));
    pv.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
    assert!(!reclaim(&pv));
}

#[test]
fn attachment_names_are_the_attach_detach_controllers() {
    // sha256("vol-1" + driver + "n-0"), as the controller manager names it.
    let name = attachment_name("vol-1", "n-0");
    assert!(name.starts_with("csi-") && name.len() == 68, "{name}");
    assert_ne!(name, attachment_name("vol-1", "n-1"));
}

#[test]
fn used_bytes_stay_in_the_class_range() {
    let mut c = VolumeClass { used_percent: (20, 80), ..Default::default() };
    for uid in ["a", "b", "c", "d"] {
        let used = used_bytes(1000, &c, uid);
        assert!((200..=800).contains(&used), "{used}");
        assert_eq!(used, used_bytes(1000, &c, uid));
    }
    c.used_percent = (50, 50);
    assert_eq!(used_bytes(1 << 30, &c, "x"), 1 << 29);
}
