//! `--profile`: the API server's CPU profile over exactly one workload window. Go serves one
//! CPU profile at a time and cannot end one early, so the window is recorded in consecutive
//! pieces of a few seconds (its own pprof endpoint, read through kubectl as the cluster's
//! admin) until the window closes, then merged into one profile with `go tool pprof`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Seconds per piece: the most a window's profile runs past the window's end.
const PIECE_SECONDS: u32 = 5;

/// A profile being recorded; [`Profile::finish`] ends it at the window's end.
pub struct Profile {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<PathBuf>>,
    file: PathBuf,
}

impl Profile {
    /// Starts recording into `file` (pieces beside it until the end).
    pub fn start(kubectl: PathBuf, kubeconfig: PathBuf, file: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let base = file.clone();
        let thread = std::thread::spawn(move || {
            let mut pieces = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let piece = base.with_extension(format!("part{}.pprof", pieces.len()));
                let Ok(out) = std::fs::File::create(&piece) else { break };
                let ok = Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["get", "--raw", &format!("/debug/pprof/profile?seconds={PIECE_SECONDS}")])
                    .stdout(out)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    eprintln!("  ! the API server gave no profile piece (is it serving /debug/pprof?)");
                    let _ = std::fs::remove_file(&piece);
                    break;
                }
                pieces.push(piece);
            }
            pieces
        });
        println!("  profiling the API server over this window into {}", file.display());
        Self { stop, thread, file }
    }

    /// Ends the recording (waits for the piece in progress, off the runtime's threads) and
    /// merges the pieces.
    pub async fn finish(self) {
        let _ = tokio::task::spawn_blocking(move || self.finish_blocking()).await;
    }

    fn finish_blocking(self) {
        self.stop.store(true, Ordering::Relaxed);
        let pieces = self.thread.join().unwrap_or_default();
        if pieces.is_empty() {
            return;
        }
        match merge(&pieces, &self.file) {
            Ok(()) => {
                for p in &pieces {
                    let _ = std::fs::remove_file(p);
                }
                println!(
                    "  profile of {} s written: go tool pprof -top {}",
                    pieces.len() as u32 * PIECE_SECONDS,
                    self.file.display()
                );
            }
            Err(e) => {
                eprintln!("  ! pieces kept beside {} (merge them with go tool pprof -proto): {e}", self.file.display())
            }
        }
    }
}

/// The Go toolchain `make controlplane` uses, else the one on PATH.
fn go() -> PathBuf {
    let local = Path::new("/usr/local/go/bin/go");
    if local.exists() { local.to_path_buf() } else { PathBuf::from("go") }
}

fn merge(pieces: &[PathBuf], file: &Path) -> Result<(), String> {
    let out = std::fs::File::create(file).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let status = Command::new(go())
        .args(["tool", "pprof", "-proto"])
        .args(pieces)
        .stdout(out)
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("go tool pprof did not start: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("go tool pprof -proto: {status}")) }
}
