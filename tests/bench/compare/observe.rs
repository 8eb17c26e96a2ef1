//! What the bench sees of the cluster, the same way for every tool: nodes Ready (with a
//! lease), pods Running and pods left (watches), lease renewals classed on time / late /
//! missed, nodes that went NotReady; and a sampler of CPU and memory once a second.

use super::harness::{cpu_seconds, rss_mib};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lease renewals seen while a window was open: a renewal is on time when it comes within
/// 1.5 renewal intervals (a quarter of the lease duration) of the last one, late when within
/// the lease duration, missed when the lease expired first (also counted, at the window's
/// end, for leases not renewed since).
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaseStats {
    pub on_time: u64,
    pub late: u64,
    pub missed: u64,
}

#[derive(Default)]
struct State {
    ready: HashSet<String>,
    /// How many of `ready` have a lease: kept as they change (polled many times a second).
    ready_leased: usize,
    /// Lease name → (last renew time, seconds since the epoch; duration seconds).
    leases: HashMap<String, (f64, f64)>,
    pods_running: HashSet<String>,
    pods: HashSet<String>,
    window: bool,
    stats: LeaseStats,
    went_not_ready: HashSet<String>,
    /// Nodes with the node lifecycle controller's not-ready or unreachable taint (a new node
    /// has the first until the controller manager sees it Ready).
    tainted: HashSet<String>,
}

/// The taints the node lifecycle controller puts on a node that is not (yet) Ready.
fn lifecycle_tainted(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
        ts.iter().any(|t| t.key == "node.kubernetes.io/not-ready" || t.key == "node.kubernetes.io/unreachable")
    })
}

#[derive(Clone)]
pub struct Observer {
    state: Arc<Mutex<State>>,
    tasks: Arc<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        if Arc::strong_count(&self.tasks) == 1 {
            self.tasks.iter().for_each(|t| t.abort());
        }
    }
}

fn epoch_secs(t: &k8s_openapi::jiff::Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

fn now_secs() -> f64 {
    epoch_secs(&k8s_openapi::jiff::Timestamp::now())
}

impl State {
    fn on_node(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if lifecycle_tainted(node) {
            self.tainted.insert(name.clone());
        } else {
            self.tainted.remove(&name);
        }
        if kwok_pools::kubelet::status::node::is_ready(node) {
            if !self.ready.contains(&name) {
                self.ready_leased += usize::from(self.leases.contains_key(&name));
                self.ready.insert(name);
            }
        } else if self.unready(&name) && self.window {
            self.went_not_ready.insert(name);
        }
    }

    /// Takes a node out of `ready`; whether it was in.
    fn unready(&mut self, name: &str) -> bool {
        let was = self.ready.remove(name);
        if was && self.leases.contains_key(name) {
            self.ready_leased -= 1;
        }
        was
    }

    fn lease_gone(&mut self, name: &str) {
        if self.leases.remove(name).is_some() && self.ready.contains(name) {
            self.ready_leased -= 1;
        }
    }

    fn on_lease(&mut self, lease: &Lease) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let spec = lease.spec.clone().unwrap_or_default();
        let Some(renewed) = spec.renew_time.map(|t| epoch_secs(&t.0)) else { return };
        let duration = f64::from(spec.lease_duration_seconds.unwrap_or(40));
        let ready = self.ready.contains(&name);
        let previous = self.leases.insert(name, (renewed, duration));
        if previous.is_none() && ready {
            self.ready_leased += 1;
        }
        if let Some((last, _)) = previous
            && self.window
            && renewed > last
        {
            let gap = renewed - last;
            match gap {
                g if g <= duration / 4.0 * 1.5 => self.stats.on_time += 1,
                g if g <= duration => self.stats.late += 1,
                _ => self.stats.missed += 1,
            }
        }
    }

    fn on_pod(&mut self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running {
            self.pods_running.insert(name.clone());
        } else {
            self.pods_running.remove(&name);
        }
        self.pods.insert(name);
    }
}

impl Observer {
    pub fn start(client: &kube::Client) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let tasks = vec![
            watch(Api::<Node>::all(client.clone()), state.clone(), State::on_node, |s, n: &Node| {
                let name = n.metadata.name.as_deref().unwrap_or("");
                s.unready(name);
                s.tainted.remove(name);
            }),
            watch(
                Api::<Lease>::namespaced(client.clone(), "kube-node-lease"),
                state.clone(),
                State::on_lease,
                |s, l: &Lease| s.lease_gone(l.metadata.name.as_deref().unwrap_or("")),
            ),
            watch(
                Api::<Pod>::namespaced(client.clone(), super::writer::NS),
                state.clone(),
                State::on_pod,
                |s, p: &Pod| {
                    let name = p.metadata.name.as_deref().unwrap_or("");
                    s.pods.remove(name);
                    s.pods_running.remove(name);
                },
            ),
        ];
        Self { state, tasks: Arc::new(tasks) }
    }

    /// Nodes Ready that also have a lease (a node without one goes NotReady soon).
    pub fn nodes_ready(&self) -> usize {
        self.state.lock().unwrap().ready_leased
    }

    pub fn ready_names(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        let mut v: Vec<String> = s.ready.iter().filter(|n| s.leases.contains_key(*n)).cloned().collect();
        v.sort();
        v
    }

    /// Nodes that still carry the node lifecycle controller's not-ready or unreachable taint.
    pub fn nodes_tainted(&self) -> usize {
        self.state.lock().unwrap().tainted.len()
    }

    pub fn pods_running(&self) -> usize {
        self.state.lock().unwrap().pods_running.len()
    }

    pub fn pods(&self) -> usize {
        self.state.lock().unwrap().pods.len()
    }

    /// Starts counting lease renewals and nodes going NotReady.
    pub fn open_window(&self) {
        let mut s = self.state.lock().unwrap();
        s.window = true;
        s.stats = LeaseStats::default();
        s.went_not_ready.clear();
    }

    /// Stops counting; returns the renewals and how many nodes went NotReady. Leases not
    /// renewed for longer than on time count as late or missed.
    pub fn close_window(&self) -> (LeaseStats, usize) {
        let mut s = self.state.lock().unwrap();
        s.window = false;
        let now = now_secs();
        let mut stats = s.stats;
        for (last, duration) in s.leases.values() {
            let age = now - last;
            if age > *duration {
                stats.missed += 1;
            } else if age > duration / 4.0 * 1.5 {
                stats.late += 1;
            }
        }
        (stats, s.went_not_ready.len())
    }
}

fn watch<K, A, D>(api: Api<K>, state: Arc<Mutex<State>>, apply: A, delete: D) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    A: Fn(&mut State, &K) + Send + 'static,
    D: Fn(&mut State, &K) + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(k) | Event::InitApply(k)) => apply(&mut state.lock().unwrap(), &k),
                Ok(Event::Delete(k)) => delete(&mut state.lock().unwrap(), &k),
                Ok(_) => {}
                Err(e) => {
                    eprintln!("    (bench watch error: {e}; retrying)");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    })
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Sample {
    pub t: f64,
    pub done: f64,
    pub tool_cpu: f64,
    pub tool_rss: f64,
    pub apiserver_cpu: f64,
}

/// Samples progress (`done`), the tool's CPU seconds and RSS and the API server's CPU
/// seconds every half second from the moment it is started, and once more when stopped.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
    probe: Arc<Probe>,
}

struct Probe {
    start: Instant,
    tool: Option<i32>,
    apiserver: i32,
    tool0: f64,
    api0: f64,
    done: Box<dyn Fn() -> usize + Send + Sync>,
}

impl Probe {
    fn sample(&self) -> Sample {
        Sample {
            t: self.start.elapsed().as_secs_f64(),
            done: (self.done)() as f64,
            tool_cpu: self.tool.map_or(0.0, |p| cpu_seconds(p) - self.tool0),
            tool_rss: self.tool.map_or(0.0, rss_mib),
            apiserver_cpu: cpu_seconds(self.apiserver) - self.api0,
        }
    }
}

impl Sampler {
    pub fn start(tool: Option<i32>, apiserver: i32, done: impl Fn() -> usize + Send + Sync + 'static) -> Self {
        let probe = Arc::new(Probe {
            start: Instant::now(),
            tool,
            apiserver,
            tool0: tool.map_or(0.0, cpu_seconds),
            api0: cpu_seconds(apiserver),
            done: Box::new(done),
        });
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (out, p) = (samples.clone(), probe.clone());
        let task = tokio::spawn(async move {
            loop {
                let s = p.sample();
                out.lock().unwrap().push(s);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self { samples, task, probe }
    }

    pub fn stop(self) -> Vec<Sample> {
        self.task.abort();
        let mut v = std::mem::take(&mut *self.samples.lock().unwrap());
        v.push(self.probe.sample());
        v
    }
}
