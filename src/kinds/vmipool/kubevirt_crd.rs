//! A KubeVirt-compatible CRD for VirtualMachineInstances, for clusters without KubeVirt
//! (`kwok-pools crd --child-crds`, `kwok-pools cluster create --child-crds`): KubeVirt's names,
//! versions, printer columns and no subresources (status travels with the object). The schema
//! keeps every field; with KubeVirt's own structural CRD installed instead, everything works
//! the same, because the simulator writes only status fields KubeVirt's schema has.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// The CRD's name.
pub const NAME: &str = "virtualmachineinstances.kubevirt.io";
/// KubeVirt's VirtualMachine CRD's name.
pub const VM_NAME: &str = "virtualmachines.kubevirt.io";
pub const MIGRATION_NAME: &str = "virtualmachineinstancemigrations.kubevirt.io";

fn columns() -> Value {
    let col = |name: &str, type_: &str, path: &str, priority: i32| {
        let mut c = json!({"name": name, "type": type_, "jsonPath": path});
        if priority > 0 {
            c["priority"] = json!(priority);
        }
        c
    };
    json!([
        col("Age", "date", ".metadata.creationTimestamp", 0),
        col("Phase", "string", ".status.phase", 0),
        col("IP", "string", ".status.interfaces[0].ipAddress", 0),
        col("NodeName", "string", ".status.nodeName", 0),
        col("Ready", "string", ".status.conditions[?(@.type=='Ready')].status", 0),
        col("Live-Migratable", "string", ".status.conditions[?(@.type=='LiveMigratable')].status", 1),
        col("Paused", "string", ".status.conditions[?(@.type=='Paused')].status", 1),
    ])
}

fn version(name: &str, storage: bool, deprecated: bool) -> Value {
    let mut v = json!({
        "name": name,
        "served": true,
        "storage": storage,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        "additionalPrinterColumns": columns(),
    });
    if deprecated {
        v["deprecated"] = json!(true);
        v["deprecationWarning"] =
            json!(format!("kubevirt.io/{name} VirtualMachineInstance is now deprecated and will be removed in v2."));
    }
    v
}

/// The VirtualMachineInstance CRD.
pub fn crd() -> CustomResourceDefinition {
    let value = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "kwok-pools"}},
        "spec": {
            "group": "kubevirt.io",
            "scope": "Namespaced",
            "names": {
                "plural": "virtualmachineinstances",
                "singular": "virtualmachineinstance",
                "kind": "VirtualMachineInstance",
                "shortNames": ["vmi", "vmis"],
                "categories": ["all"]
            },
            "versions": [version("v1", true, false), version("v1alpha3", false, true)]
        }
    });
    // A fixed, valid document: it always converts.
    serde_json::from_value(value).unwrap_or_default()
}

/// KubeVirt's VirtualMachine CRD (its names, versions and columns, with the status
/// subresource KubeVirt's has), for the VM controller the simulator plays without KubeVirt.
pub fn vm_crd() -> CustomResourceDefinition {
    let columns = json!([
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Status", "type": "string", "description": "Human Readable Status", "jsonPath": ".status.printableStatus"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    ]);
    let names = json!({"plural": "virtualmachines", "singular": "virtualmachine", "kind": "VirtualMachine",
                       "shortNames": ["vm", "vms"], "categories": ["all"]});
    with_status(VM_NAME, names, &columns, |v| {
        format!("kubevirt.io/{v} is now deprecated and will be removed in a future release.")
    })
}

/// KubeVirt's VirtualMachineInstanceMigration CRD as KubeVirt installs it (names, columns,
/// the status subresource), its schema left open.
pub fn migration_crd() -> CustomResourceDefinition {
    let columns = json!([
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "VMI", "type": "string", "jsonPath": ".spec.vmiName"},
    ]);
    let names = json!({"plural": "virtualmachineinstancemigrations", "singular": "virtualmachineinstancemigration",
                       "kind": "VirtualMachineInstanceMigration", "shortNames": ["vmim", "vmims"], "categories": ["all"]});
    with_status(MIGRATION_NAME, names, &columns, |v| {
        format!("kubevirt.io/{v} VirtualMachineInstanceMigration is now deprecated and will be removed in v2.")
    })
}

/// A namespaced kubevirt.io CRD with an open schema and the status subresource, served as v1
/// (stored) and v1alpha3 (deprecated, with `warning`).
fn with_status(name: &str, names: Value, columns: &Value, warning: fn(&str) -> String) -> CustomResourceDefinition {
    let version = |v: &str, storage: bool| {
        let mut version = json!({
            "name": v, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "subresources": {"status": {}},
            "additionalPrinterColumns": columns,
        });
        if !storage {
            version["deprecated"] = json!(true);
            version["deprecationWarning"] = json!(warning(v));
        }
        version
    };
    let value = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kwok-pools"}},
        "spec": {"group": "kubevirt.io", "scope": "Namespaced", "names": names,
                 "versions": [version("v1", true), version("v1alpha3", false)]}
    });
    serde_json::from_value(value).unwrap_or_default()
}

pub fn companions() -> Vec<CustomResourceDefinition> {
    vec![vm_crd(), migration_crd()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vmi_crd_has_kubevirt_names_versions_and_columns_and_no_subresources() {
        let crd = crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(NAME));
        let names = &crd.spec.names;
        assert_eq!(names.short_names.as_deref(), Some(&["vmi".to_string(), "vmis".to_string()][..]));
        assert_eq!(names.categories.as_deref(), Some(&["all".to_string()][..]));
        let v: Vec<(&str, bool, bool, Option<bool>)> =
            crd.spec.versions.iter().map(|v| (v.name.as_str(), v.served, v.storage, v.deprecated)).collect();
        assert_eq!(v, vec![("v1", true, true, None), ("v1alpha3", true, false, Some(true))]);
        for version in &crd.spec.versions {
            assert!(version.subresources.is_none(), "status travels with the object");
            let cols: Vec<&str> =
                version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
            assert_eq!(cols, ["Age", "Phase", "IP", "NodeName", "Ready", "Live-Migratable", "Paused"]);
        }
    }

    #[test]
    fn the_vm_crd_has_kubevirt_names_columns_and_a_status_subresource() {
        let crd = vm_crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(VM_NAME));
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["vm".to_string(), "vms".to_string()][..]));
        for version in &crd.spec.versions {
            assert!(version.subresources.as_ref().is_some_and(|s| s.status.is_some()));
            let cols: Vec<&str> =
                version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
            assert_eq!(cols, ["Age", "Status", "Ready"]);
        }
    }

    #[test]
    fn the_migration_crd_has_kubevirt_names_columns_and_a_status_subresource() {
        let crd = migration_crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(MIGRATION_NAME));
        assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["vmim".to_string(), "vmims".to_string()][..]));
        assert_eq!(crd.spec.versions.iter().filter(|v| v.storage).count(), 1);
        for version in &crd.spec.versions {
            assert!(version.subresources.as_ref().is_some_and(|s| s.status.is_some()));
            let cols: Vec<&str> =
                version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
            assert_eq!(cols, ["Phase", "VMI"]);
        }
    }
}
