//! Finding the control-plane binaries built by `make controlplane`.

use super::component::ALL;
use super::error::ClusterError;
use std::path::{Path, PathBuf};

pub const BIN_DIR_ENV: &str = "KWOK_POOLS_BIN_DIR";

/// The binary directory: the flag, else `$KWOK_POOLS_BIN_DIR`, else the project's `bin/` found
/// from the running executable (`target/<profile>/kwok-pools` → `bin/`), else the one `make
/// install` fills (`~/.cache/kwok-pools/bin`), never the current directory.
pub fn resolve_bin_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(dir) = flag {
        return dir.to_path_buf();
    }
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        for ancestor in exe.ancestors().skip(1) {
            let candidate = ancestor.join("bin");
            if candidate.join("kube-apiserver").exists() {
                return candidate;
            }
        }
    }
    if let Some(installed) = installed_bin_dir().filter(|d| d.join("kube-apiserver").exists()) {
        return installed;
    }
    // Never the current directory: a binary planted there must not run as the control plane.
    PathBuf::from("/nonexistent: set KWOK_POOLS_BIN_DIR or --bin-dir")
}

/// Where `make install` links the control plane: `$XDG_CACHE_HOME/kwok-pools/bin`, else
/// `~/.cache/kwok-pools/bin`.
fn installed_bin_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("kwok-pools").join("bin"))
}

/// Checks that every component's binary is present and returns the directory, absolute.
pub fn check(bin_dir: &Path) -> Result<PathBuf, ClusterError> {
    let dir = std::path::absolute(bin_dir).unwrap_or_else(|_| bin_dir.to_path_buf());
    for c in ALL {
        let path = dir.join(c.binary());
        if !path.is_file() {
            return Err(ClusterError::MissingBinary { binary: c.binary().into(), bin_dir: dir });
        }
    }
    Ok(dir)
}

/// Checks that an optional component's binary is present.
pub fn check_optional(bin_dir: &Path, c: super::component::Component) -> Result<(), ClusterError> {
    if bin_dir.join(c.binary()).is_file() {
        return Ok(());
    }
    Err(ClusterError::Other(format!(
        "{} not found in {}: run `make {}` (it builds it from its Go module, once)",
        c.binary(),
        bin_dir.display(),
        c.binary()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_dir_names_the_first_missing_binary_and_make_target() {
        let dir = tempfile::tempdir().unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("etcd not found"), "{err}");
        assert!(err.contains("make controlplane"), "{err}");
    }
}
