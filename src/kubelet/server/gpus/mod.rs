//! `/metrics/dcgm`: the GPUs a simulated node has (what its kind gives it, e.g. a NodePool's
//! `spec.devices` whose devices are `type: gpu`, as the `nvidia-gpu` preset publishes them) with
//! what the pod holding each one uses (its pool's `usage.gpuUtilization` and `gpuMemory`), in
//! the DCGM exporter's names ([`dcgm`]).

pub mod dcgm;

use super::state::KubeletApi;
use crate::kubelet::status::usage::{self, Model};
use dcgm::GpuReading;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::Device;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::sync::Arc;

fn string<'a>(d: &'a Device, name: &str) -> Option<&'a str> {
    d.attributes.as_ref()?.get(name)?.string.as_deref()
}

/// A GPU, the pod holding it (and its first container), and (utilisation, bytes used).
type Held = (Device, Option<(Arc<crate::informer::pod::SlimPod>, String)>, (f64, f64));

/// The node's GPUs as the exporter would read them at `now`.
pub fn render(api: &KubeletApi, node: &Node, now: f64) -> String {
    let name = node.name_any();
    let mut models: HashMap<usize, Model> = HashMap::new();
    let mut held: Vec<Held> = Vec::new();
    for gpu in api.devices.gpus(node) {
        let d = gpu.device;
        let pod = gpu.holder.and_then(|(ns, pod)| api.pods.get(&ObjectRef::new(&pod).within(&ns)));
        let use_ = pod.as_ref().map_or((0.0, 0.0), |pod| {
            let governing = api.lifecycles.pod_knobs(pod, node);
            let key = governing.as_ref().map_or(0, |p| Arc::as_ptr(p) as *const () as usize);
            let model = models.entry(key).or_insert_with(|| match governing.as_deref() {
                Some(p) => Model::new(p.pods().and_then(|p| p.usage.as_ref()), p.seed(), p.created()),
                None => Model::default(),
            });
            let ns = pod.namespace().unwrap_or_default();
            let words: Vec<&str> = match model.seed {
                Some(_) => vec![&ns, pod.name(), &d.name],
                None => vec![pod.uid(), &d.name],
            };
            usage::gpu(model, &words, now)
        });
        let holder = pod.map(|p| {
            let container = p.containers.first().map(|c| c.name.clone()).unwrap_or_default();
            (p, container)
        });
        held.push((d, holder, use_));
    }
    let readings: Vec<GpuReading> = held
        .iter()
        .enumerate()
        .map(|(i, (d, holder, (utilization, used)))| {
            let memory = d
                .capacity
                .as_ref()
                .and_then(|c| c.get("memory"))
                .and_then(|q| crate::api::kubelet::quantity(&q.value.0));
            GpuReading {
                index: d.name.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(i as u32),
                uuid: string(d, "uuid").unwrap_or(&d.name),
                pci_bus_id: string(d, "resource.kubernetes.io/pciBusID").unwrap_or_default(),
                model_name: string(d, "productName").unwrap_or_default(),
                memory_total: memory.unwrap_or(0.0),
                memory_used: *used,
                utilization: *utilization,
                holder: holder
                    .as_ref()
                    .map(|(p, c)| (p.metadata.namespace.as_deref().unwrap_or_default(), p.name(), c.as_str())),
            }
        })
        .collect();
    dcgm::render(&name, &readings)
}
