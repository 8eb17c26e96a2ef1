use clap::{CommandFactory, FromArgMatches};
use kwok_pools::cli::{Cli, Command};
use kwok_pools::kinds::{self, KindFlags};

// mimalloc instead of glibc's malloc: the operator allocates from many tokio worker threads,
// and glibc's per-thread arenas kept freed memory as RSS (see README, Benchmarks).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    // `run` and `simulate` take every registered kind's flags too.
    let command = Cli::command().mut_subcommand("run", kinds::add_flags).mut_subcommand("simulate", kinds::add_flags);
    let matches = command.get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let kind_flags = match matches.subcommand() {
        Some(("run" | "simulate", sub)) => KindFlags::from_matches(sub).unwrap_or_else(|e| e.exit()),
        _ => KindFlags::default(),
    };
    exit_with_parent_if_asked();
    kwok_pools::telemetry::init_crypto();
    let result = match cli.command {
        Command::Cluster(cmd) => kwok_pools::cli::cluster::run(cmd).await,
        Command::Run(args) => run(args, true, kind_flags).await,
        Command::Simulate(args) => run(args, false, kind_flags).await,
        Command::Status(args) => kwok_pools::cli::status::run(args).await,
        Command::Uninstall(args) => kwok_pools::cli::uninstall::run(args).await,
        Command::WebhookCert(args) => kwok_pools::cli::webhook_cert::secret_yaml(&args).map(|y| print!("{y}")),
        Command::Crd { child_crds: false } => {
            print!("{}", kwok_pools::kinds::crds_yaml());
            Ok(())
        }
        Command::Crd { child_crds: true } => {
            let crds = kwok_pools::kinds::stand_in_crds();
            print!("{}", crds.iter().filter_map(|c| serde_yaml::to_string(c).ok()).collect::<Vec<_>>().join("---\n"));
            Ok(())
        }
        Command::Generate { root } => {
            kwok_pools::deploy::write_all(&root).map_err(anyhow::Error::from).map(|written| {
                for path in written {
                    println!("wrote {path}");
                }
            })
        }
        Command::Schema { out } => write_schemas(&out),
        Command::Stage(kwok_pools::cli::stage::StageCommand::Import(args)) => {
            match kwok_pools::cli::stage::run(&args).await {
                Ok(0) => Ok(()),
                Ok(code) => std::process::exit(code),
                Err(e) => Err(e),
            }
        }
        Command::Dist { image } => {
            print!("{}", kwok_pools::deploy::dist::install_yaml(&image));
            Ok(())
        }
        Command::Version => {
            println!("kwok-pools {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// With `KWOK_POOLS_EXIT_WITH_PARENT` set (test harnesses), the process is killed when the
/// thread that started it ends, even on a panic or a kill of the harness.
fn exit_with_parent_if_asked() {
    if std::env::var_os("KWOK_POOLS_EXIT_WITH_PARENT").is_none() {
        return;
    }
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        eprintln!("warning: cannot tie this process to its parent: {e}");
    }
    // The parent may have gone before the line above: then nobody waits for this process.
    if nix::unistd::getppid() == nix::unistd::Pid::from_raw(1) {
        std::process::exit(1);
    }
}

async fn run(mut args: kwok_pools::cli::run::RunArgs, controllers: bool, kinds: KindFlags) -> anyhow::Result<()> {
    kwok_pools::telemetry::init_tracing(args.log_json);
    let open_files = kwok_pools::fdlimit::raise();
    tracing::debug!(?open_files, "open-file limit");
    // The kubeconfig the client will read: $KUBECONFIG's first file, else ~/.kube/config.
    let kubeconfig = std::env::var_os("KUBECONFIG")
        .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
        .or_else(|| dirs::home_dir().map(|h| h.join(".kube/config")));
    if let Some(said) = args.with_local_cluster_pki(kubeconfig.as_deref()) {
        tracing::info!("{said}");
    }
    let config = args.config(controllers, kinds).map_err(|e| anyhow::anyhow!(e))?;
    kwok_pools::operator::run(config).await
}

fn write_schemas(out: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("creating {}: {e}", out.display()))?;
    for (name, text) in kwok_pools::kinds::editor_schemas() {
        let path = out.join(&name);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
