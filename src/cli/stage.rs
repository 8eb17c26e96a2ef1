//! `kwok-pools stage import FILE|DIR…`: kwok Stage manifests read into lifecycle policies
//! (YAML on stdout, or applied with `--apply`), with a report on stderr of what each field
//! became or why it could not be mapped. Exits non-zero when a field is not mapped, unless
//! `--allow-partial`.

use crate::stage::{api, map};
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum StageCommand {
    /// Read kwok Stage files (or every .yaml/.yml in a directory, recursively) and write the
    /// equivalent LifecyclePolicies.
    Import(ImportArgs),
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Stage files or directories.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The policies' name prefix.
    #[arg(long, default_value = "kwok")]
    pub prefix: String,
    /// Apply the policies to the cluster (server-side) instead of printing them.
    #[arg(long)]
    pub apply: bool,
    /// Write the policies even when some field could not be mapped (it is still reported).
    #[arg(long)]
    pub allow_partial: bool,
}

/// Every YAML file under `path` (itself, when it is a file), in a stable order. A directory
/// with a kustomization.yaml is read as kustomize would: its `resources`, in their order (kwok's
/// `kustomize/stage/fast` is node/fast, node/heartbeat-with-lease and pod/fast).
fn files(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let kustomization = path.join("kustomization.yaml");
    if let Ok(text) = std::fs::read_to_string(&kustomization) {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", kustomization.display()))?;
        let resources = doc["resources"].as_sequence().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for r in resources.iter().filter_map(|r| r.as_str()) {
            out.extend(files(&path.join(r))?);
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // kwok's stage sets keep their test inputs beside them: not stages.
            if p.file_name().is_some_and(|n| n == "testdata") {
                continue;
            }
            out.extend(files(&p)?);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml")
            && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        {
            out.push(p);
        }
    }
    Ok(out)
}

/// Reads the stages, reports, and prints or applies the policies; the exit code.
pub async fn run(args: &ImportArgs) -> anyhow::Result<i32> {
    let mut stages = Vec::new();
    let mut unreadable = 0;
    for path in &args.paths {
        for file in files(path).map_err(anyhow::Error::msg)? {
            let text = std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            for parsed in api::parse_all(&text) {
                match parsed {
                    Ok(stage) => stages.push((file.display().to_string(), stage)),
                    Err(why) => {
                        eprintln!("{}: NOT MAPPED: {why}", file.display());
                        unreadable += 1;
                    }
                }
            }
        }
    }
    if stages.is_empty() {
        anyhow::bail!(
            "no kwok Stage found in {:?}: give Stage manifests (kwok.x-k8s.io/v1alpha1) or directories holding them",
            args.paths
        );
    }
    let import = map::import(&stages, &args.prefix);
    for line in &import.lines {
        eprintln!("{line}");
    }
    let unmapped = import.lines.iter().filter(|l| !l.mapped).count() + unreadable;
    eprintln!(
        "{} stages read: {} policies, {} fields mapped, {unmapped} not mapped",
        stages.len(),
        import.policies.len(),
        import.lines.iter().filter(|l| l.mapped).count()
    );
    if unmapped > 0 && !args.allow_partial {
        eprintln!(
            "not written: some fields could not be mapped (each is named above); pass --allow-partial to write the policies without them"
        );
        return Ok(1);
    }
    if args.apply {
        apply(&import.policies).await?;
    } else {
        for p in &import.policies {
            let mut v = serde_json::to_value(p)?;
            v["apiVersion"] = "pools.kwok.x-k8s.io/v1alpha1".into();
            v["kind"] = "LifecyclePolicy".into();
            print!("---\n{}", serde_yaml::to_string(&v)?);
        }
    }
    Ok(0)
}

async fn apply(policies: &[crate::policy::LifecyclePolicy]) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot build a Kubernetes client: {e}; set KUBECONFIG, or leave out --apply to print the policies"
        )
    })?;
    let api: kube::Api<crate::policy::LifecyclePolicy> = kube::Api::all(client);
    for p in policies {
        let name = p.metadata.name.clone().unwrap_or_default();
        let mut v = serde_json::to_value(p)?;
        v["apiVersion"] = "pools.kwok.x-k8s.io/v1alpha1".into();
        v["kind"] = "LifecyclePolicy".into();
        api.patch(&name, &crate::api::conventions::apply_params(), &kube::api::Patch::Apply(&v))
            .await
            .map_err(|e| anyhow::anyhow!("applying LifecyclePolicy {name}: {e}"))?;
        eprintln!("lifecyclepolicy.pools.kwok.x-k8s.io/{name} applied");
    }
    Ok(())
}
