//! `kwok-pools uninstall`: deletes an instance's pools and waits until their children are gone
//! (playing the end of each deletion no simulator will play any more), then removes what the
//! install registered beside its Deployment (webhook configurations, admission policies) and,
//! on request, the CRDs. Works whether the operator still runs or not; what it does to each
//! object is decided in [`crate::deploy::uninstall`].

use crate::api::conventions::{INSTANCE_LABEL, POOL_LABEL, POOL_UID_ANNOTATION};
use crate::api::duration::parse_flag_duration;
use crate::deploy::uninstall::{Act, act, policy_names, webhook_name};
use crate::kinds::{self, Kind, Visitor};
use clap::Args;
use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    /// The operator instance whose pools go (`--instance` of `kwok-pools run`): a named
    /// instance's are the pools labelled `pools.kwok.x-k8s.io/instance=<name>`, the default
    /// instance's those without that label.
    #[arg(long, default_value = "kwok-pools")]
    pub instance: String,
    /// Only the pools whose labels match (the instance's `--pool-selector`, when it has one).
    #[arg(long, value_name = "SELECTOR", conflicts_with = "all_instances")]
    pub pool_selector: Option<String>,
    /// Delete the pools of every instance.
    #[arg(long)]
    pub all_instances: bool,
    /// Also delete the CRDs (every pool of every instance goes first).
    #[arg(long)]
    pub crds: bool,
    /// The install's name, which its admission policies are named after (the chart's release
    /// name; default: the instance's webhook configuration name).
    #[arg(long)]
    pub name: Option<String>,
    /// How long to wait for the pools' children to go.
    #[arg(long, default_value = "5m", value_parser = parse_flag_duration)]
    pub timeout: Duration,
}

impl UninstallArgs {
    /// Which pools go (a label selector; empty: all).
    fn pools(&self) -> String {
        if self.all_instances || self.crds {
            String::new()
        } else if let Some(s) = &self.pool_selector {
            s.clone()
        } else if self.instance == "kwok-pools" {
            format!("!{INSTANCE_LABEL}")
        } else {
            format!("{INSTANCE_LABEL}={}", self.instance)
        }
    }
}

/// What one round of sweeping found still there.
#[derive(Default)]
struct Left {
    children: usize,
    /// Objects whose deletion waits on somebody else's finalizers, with them.
    blocked: Vec<String>,
}

/// One kind's deleted pools and the sweep of their children.
trait Sweep: Send {
    fn round<'a>(&'a self, client: &'a Client, nodes: &'a mut BTreeSet<String>) -> BoxFuture<'a, kube::Result<Left>>;
}

struct KindSweep<K: Kind> {
    /// The deleted pools by uid (their children's owner).
    pools: HashMap<String, K>,
}

impl<K: Kind> Sweep for KindSweep<K> {
    fn round<'a>(&'a self, client: &'a Client, nodes: &'a mut BTreeSet<String>) -> BoxFuture<'a, kube::Result<Left>> {
        Box::pin(async move {
            let mut left = Left::default();
            if self.pools.is_empty() {
                return Ok(left);
            }
            let all: Api<K::Child> = Api::all(client.clone());
            let kind = <K::Child as Resource>::kind(&()).into_owned();
            for child in all.list(&ListParams::default().labels(POOL_LABEL)).await?.items {
                // Owned by a deleted pool, or made by a child of one (the VMI of a VMIPool's VM).
                let owner = child
                    .owner_references()
                    .iter()
                    .find(|o| self.pools.contains_key(&o.uid))
                    .map(|o| o.uid.clone())
                    .or_else(|| child.annotations().get(POOL_UID_ANNOTATION).cloned());
                let Some(pool) = owner.and_then(|uid| self.pools.get(&uid)) else { continue };
                if kind == "Node" {
                    nodes.insert(child.name_any());
                }
                left.children += 1;
                let api = K::child_api(client.clone(), pool);
                let what = format!("{kind} {}", full_name(child.meta()));
                match act(child.meta(), K::FINALIZERS, kind == "Pod") {
                    Act::Blocked(finalizers) => left.blocked.push(format!("{what}: {}", finalizers.join(", "))),
                    other => gone(perform(&api, &child, other).await)?,
                }
            }
            Ok(left)
        })
    }
}

fn full_name(meta: &kube::api::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.clone().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// Does what `act` decided to `object`.
async fn perform<C>(api: &Api<C>, object: &C, act: Act) -> kube::Result<()>
where
    C: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let name = object.name_any();
    match act {
        Act::Delete => api.delete(&name, &DeleteParams::default()).await.map(|_| ()),
        Act::Force => {
            api.delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.map(|_| ())
        }
        Act::Release(keep) => {
            let patch = serde_json::json!({"metadata": {"finalizers": keep, "resourceVersion": object.meta().resource_version}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
        }
        Act::Blocked(_) => Ok(()),
    }
}

/// An object already gone, or changed meanwhile (read again next round), is no failure.
fn gone(result: kube::Result<()>) -> kube::Result<()> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}

/// One kind's deletion: its plural, how many pools went, and the sweep of their children.
type Deleted = Result<(String, usize, Box<dyn Sweep>), String>;

/// Deletes every kind's pools that match the selector, keeping them for the sweep.
struct DeletePools<'a> {
    client: &'a Client,
    selector: String,
    deletions: Vec<BoxFuture<'a, Deleted>>,
}

impl Visitor for DeletePools<'_> {
    fn visit<K: Kind>(&mut self) {
        let (client, selector) = (self.client.clone(), self.selector.clone());
        self.deletions.push(Box::pin(async move {
            let plural = K::plural(&()).into_owned();
            let api: Api<K> = Api::all(client.clone());
            let pools = match api.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items,
                // The CRD is not installed: no pools of the kind.
                Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                Err(e) => return Err(format!("cannot list {plural}: {e}")),
            };
            let mut kept = HashMap::new();
            for pool in pools {
                let deleted =
                    K::pool_api(client.clone(), &pool).delete(&pool.name_any(), &DeleteParams::background()).await;
                gone(deleted.map(|_| ()))
                    .map_err(|e| format!("cannot delete {plural} {}: {e}", full_name(pool.meta())))?;
                if let Some(uid) = pool.uid() {
                    kept.insert(uid, pool);
                }
            }
            let count = kept.len();
            Ok((plural, count, Box::new(KindSweep::<K> { pools: kept }) as Box<dyn Sweep>))
        }));
    }
}

/// Pods on the deleted pools' nodes: gone with their node, which no kubelet will ever free.
async fn sweep_pods_on(client: &Client, nodes: &BTreeSet<String>) -> kube::Result<usize> {
    if nodes.is_empty() {
        return Ok(0);
    }
    let api: Api<Pod> = Api::all(client.clone());
    let mut left = 0;
    for pod in api.list(&ListParams::default()).await?.items {
        let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| nodes.contains(n));
        if !on {
            continue;
        }
        left += 1;
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let force = if pod.meta().deletion_timestamp.is_some() && pod.finalizers().is_empty() {
            Act::Force
        } else {
            Act::Delete
        };
        gone(perform(&api, &pod, force).await)?;
    }
    Ok(left)
}

async fn delete_named<K>(client: &Client, name: &str) -> kube::Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    match Api::<K>::all(client.clone()).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

pub async fn run(args: UninstallArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}; set KUBECONFIG"))?;
    let selector = args.pools();
    let whose = if selector.is_empty() { "every instance".to_string() } else { format!("instance {}", args.instance) };
    let mut delete = DeletePools { client: &client, selector, deletions: Vec::new() };
    kinds::visit_all(&mut delete);
    let mut sweeps = Vec::new();
    for deletion in delete.deletions {
        let (plural, count, sweep) = deletion.await.map_err(|e| anyhow::anyhow!("{e}; nothing else was removed"))?;
        println!("deleted {count} {plural} of {whose}");
        sweeps.push(sweep);
    }
    sweep_children(&client, &sweeps, args.timeout).await?;

    let webhook = webhook_name(&args.instance);
    let name = args.name.clone().unwrap_or_else(|| webhook.clone());
    let mut removed = Vec::new();
    let registered = async {
        if delete_named::<ValidatingWebhookConfiguration>(&client, &webhook).await? {
            removed.push(format!("ValidatingWebhookConfiguration {webhook}"));
        }
        if delete_named::<MutatingWebhookConfiguration>(&client, &webhook).await? {
            removed.push(format!("MutatingWebhookConfiguration {webhook}"));
        }
        for policy in policy_names(&name) {
            if delete_named::<ValidatingAdmissionPolicyBinding>(&client, &policy).await? {
                removed.push(format!("ValidatingAdmissionPolicyBinding {policy}"));
            }
            if delete_named::<ValidatingAdmissionPolicy>(&client, &policy).await? {
                removed.push(format!("ValidatingAdmissionPolicy {policy}"));
            }
        }
        Ok::<(), kube::Error>(())
    };
    registered.await.map_err(|e: kube::Error| {
        anyhow::anyhow!(
            "cannot remove the webhook configurations and policies: {e}; the pools are gone, run uninstall again"
        )
    })?;
    for r in &removed {
        println!("removed {r}");
    }
    if args.crds {
        for crd in kinds::crds() {
            let crd_name = crd.metadata.name.clone().unwrap_or_default();
            if delete_named::<CustomResourceDefinition>(&client, &crd_name).await? {
                println!("removed CustomResourceDefinition {crd_name}");
            }
        }
    }
    println!(
        "uninstalled: now remove the operator itself (`kubectl delete -f dist/install.yaml`, `kubectl delete -k config`, or `helm uninstall`)"
    );
    Ok(())
}

/// Sweeps the deleted pools' children until none is left, saying what it waits for.
async fn sweep_children(client: &Client, sweeps: &[Box<dyn Sweep>], timeout: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut told = Instant::now();
    let mut nodes = BTreeSet::new();
    loop {
        let mut left = Left::default();
        for sweep in sweeps {
            let found = sweep.round(client, &mut nodes).await.map_err(|e| {
                anyhow::anyhow!("cannot delete the pools' children: {e}; uninstall needs delete and patch on them (run it as a cluster admin)")
            })?;
            left.children += found.children;
            left.blocked.extend(found.blocked);
        }
        let pods = sweep_pods_on(client, &nodes)
            .await
            .map_err(|e| anyhow::anyhow!("cannot delete the pods on the pools' nodes: {e}"))?;
        if left.children == 0 && pods == 0 {
            println!("every child of the deleted pools is gone ({:.0?})", start.elapsed());
            return Ok(());
        }
        if start.elapsed() > timeout {
            let blocked = if left.blocked.is_empty() {
                String::new()
            } else {
                format!("; waiting on finalizers: {}", left.blocked.join("; "))
            };
            anyhow::bail!(
                "{} children and {pods} pods on their nodes are still there after {timeout:?}{blocked}: remove those finalizers (their controllers are gone?) and run uninstall again",
                left.children
            );
        }
        if told.elapsed() >= Duration::from_secs(5) {
            told = Instant::now();
            let blocked = if left.blocked.is_empty() {
                String::new()
            } else {
                format!(" (some wait on finalizers: {})", left.blocked.join("; "))
            };
            println!("waiting for {} children and {pods} pods on their nodes to go{blocked}", left.children);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
