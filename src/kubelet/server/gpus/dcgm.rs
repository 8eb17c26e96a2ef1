//! The GPU metrics of a simulated node in NVIDIA's DCGM exporter's names and labels
//! (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_FB_FREE`, gauges; framebuffer
//! in MiB; `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, and `container`,
//! `namespace`, `pod` of the pod holding the GPU), so dashboards built for real GPU clusters
//! show simulated ones. Pure: a rendering of readings.

use std::fmt::Write;

/// One GPU at a moment.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReading<'a> {
    pub index: u32,
    pub uuid: &'a str,
    pub pci_bus_id: &'a str,
    pub model_name: &'a str,
    /// Framebuffer size and use (bytes).
    pub memory_total: f64,
    pub memory_used: f64,
    /// Percent.
    pub utilization: f64,
    /// (namespace, pod, container) of the pod whose claim holds it.
    pub holder: Option<(&'a str, &'a str, &'a str)>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(host: &str, g: &GpuReading) -> String {
    let mut out = format!(
        "gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"",
        g.index,
        escape(g.uuid),
        escape(g.pci_bus_id),
        g.index,
        escape(g.model_name),
        escape(host)
    );
    if let Some((ns, pod, container)) = g.holder {
        let _ =
            write!(out, ",container=\"{}\",namespace=\"{}\",pod=\"{}\"", escape(container), escape(ns), escape(pod));
    }
    out
}

/// A metric: its name, help, and value of a GPU.
type Family = (&'static str, &'static str, fn(&GpuReading) -> f64);

/// The exposition of `gpus` on node `host`.
pub fn render(host: &str, gpus: &[GpuReading]) -> String {
    let families: [Family; 3] = [
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |g| g.utilization.round()),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", |g| {
            ((g.memory_total - g.memory_used).max(0.0) / MIB).round()
        }),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |g| {
            (g.memory_used.min(g.memory_total) / MIB).round()
        }),
    ];
    let mut out = String::new();
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for g in gpus {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(host, g), value(g));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_render_in_the_exporters_names_with_their_holders() {
        let gib = 1024.0 * MIB;
        let gpus = [
            GpuReading {
                index: 0,
                uuid: "GPU-1",
                pci_bus_id: "0000:10:00.0",
                model_name: "NVIDIA A100-SXM4-80GB",
                memory_total: 80.0 * gib,
                memory_used: 20.0 * gib,
                utilization: 79.6,
                holder: Some(("ml", "train-0", "app")),
            },
            GpuReading {
                index: 1,
                uuid: "GPU-2",
                pci_bus_id: "0000:20:00.0",
                model_name: "x\"y",
                memory_total: 80.0 * gib,
                memory_used: 0.0,
                utilization: 0.0,
                holder: None,
            },
        ];
        let text = render("n-0", &gpus);
        assert!(text.contains("# TYPE DCGM_FI_DEV_GPU_UTIL gauge"));
        assert!(text.contains(
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\",pci_bus_id=\"0000:10:00.0\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"n-0\",container=\"app\",namespace=\"ml\",pod=\"train-0\"} 80\n"
        ), "{text}");
        assert!(text.contains("DCGM_FI_DEV_FB_USED{gpu=\"0\"") && text.contains("pod=\"train-0\"} 20480\n"), "{text}");
        assert!(text.contains("DCGM_FI_DEV_FB_FREE{gpu=\"1\",UUID=\"GPU-2\",pci_bus_id=\"0000:20:00.0\",device=\"nvidia1\",modelName=\"x\\\"y\",Hostname=\"n-0\"} 81920\n"), "{text}");
    }
}
