//! Child processes of a cluster: start detached with a log and a pid file, recognise them
//! later by pid *and* command line, stop them.

use super::error::{ClusterError, IoContext};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `binary args…` in its own process group (so it outlives the command that started it
/// and is not hit by a Ctrl-C meant for that command), output appended to `log`, pid to `pid_file`.
pub fn spawn(binary: &Path, args: &[String], log: &Path, pid_file: &Path) -> Result<Child, ClusterError> {
    for dir in [log.parent(), pid_file.parent()].into_iter().flatten() {
        std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .ctx(|| format!("opening log {}", log.display()))?;
    let err = out.try_clone().ctx(|| format!("opening log {}", log.display()))?;
    let child = Command::new(binary)
        .args(args)
        .env("GOGC", gogc())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .ctx(|| format!("starting {}", binary.display()))?;
    std::fs::write(pid_file, child.id().to_string()).ctx(|| format!("writing {}", pid_file.display()))?;
    Ok(child)
}

/// The Go garbage collector target for the components: `$GOGC` when set, else 400. A local
/// simulation cluster has memory to spare and little CPU; collecting less often leaves more
/// of the two cores for the API server's real work.
fn gogc() -> String {
    std::env::var("GOGC").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "400".into())
}

/// Reads a pid file; `None` when absent or unreadable.
pub fn read_pid(pid_file: &Path) -> Option<i32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live process (a zombie counts as gone).
pub fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])).unwrap_or(false),
        Err(_) => false,
    }
}

/// Whether `pid` is alive and is the `binary` we started for the cluster in `state_dir`:
/// its executable name matches and its command line mentions the state directory.
pub fn is_ours(pid: i32, binary: &str, state_dir: &Path) -> bool {
    if !is_alive(pid) {
        return false;
    }
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<String> =
        raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let exe_matches =
        args.first().and_then(|a0| Path::new(a0).file_name()).is_some_and(|n| n.to_string_lossy() == binary);
    // The directory as a whole path component: `…/clusters/dev/` is not `…/clusters/dev2/`.
    let dir = format!("{}/", state_dir.display().to_string().trim_end_matches('/'));
    exe_matches && args.iter().skip(1).any(|a| a.contains(&dir))
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILL. Returns whether the process is gone.
pub fn stop(pid: i32, grace: Duration) -> bool {
    let target = Pid::from_raw(pid);
    let _ = kill(target, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !is_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = kill(target, Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !is_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !is_alive(pid)
}

/// `N` distinct free TCP ports on 127.0.0.1: every listener is held until all are chosen, so
/// the OS cannot hand one port out twice (it did: the API server and the controller manager
/// once got the same one, and the second could not start).
pub fn free_ports<const N: usize>() -> Result<[u16; N], ClusterError> {
    let mut held = Vec::with_capacity(N);
    let mut ports = [0; N];
    for port in &mut ports {
        let l = std::net::TcpListener::bind("127.0.0.1:0").ctx(|| "finding a free port".into())?;
        *port = l.local_addr().ctx(|| "finding a free port".into())?.port();
        held.push(l);
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_chosen_together_are_distinct() {
        for _ in 0..200 {
            let ports = free_ports::<5>().unwrap();
            let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
            assert_eq!(distinct.len(), 5, "{ports:?}");
        }
    }

    #[test]
    fn a_process_is_ours_only_by_binary_name_and_state_dir() {
        // argv: sh -c "sleep 30" sh /tmp/kwok-state/clusters/dev/etcd.conf
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30", "sh", "/tmp/kwok-state/clusters/dev/etcd.conf"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let dev = Path::new("/tmp/kwok-state/clusters/dev");
        // Between fork and exec the child still shows the test's command line.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !is_ours(pid, "sh", dev) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(is_ours(pid, "sh", dev));
        assert!(is_ours(pid, "sh", Path::new("/tmp/kwok-state/clusters/dev/")), "a trailing slash is the same dir");
        assert!(!is_ours(pid, "etcd", dev), "another binary");
        assert!(!is_ours(pid, "sh", Path::new("/tmp/kwok-state/clusters/de")), "a prefix of the dir is not the dir");
        assert!(!is_ours(pid, "sh", Path::new("/tmp/kwok-state/clusters/dev2")));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_ours(pid, "sh", dev), "a dead process is nobody's");
    }

    #[test]
    fn stop_ends_a_process() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(is_alive(pid));
        // Reap in the background so the zombie disappears.
        let h = std::thread::spawn(move || child.wait());
        assert!(stop(pid, Duration::from_secs(2)));
        h.join().unwrap().unwrap();
        assert!(!is_alive(pid));
    }
}
