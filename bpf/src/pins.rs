//! Where the datapath lives on bpffs. The pins keep the CC registered, its maps and the cgroup
//! links alive after the loader exits, which is what lets mlccd restart without touching flows.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::DatapathError;
use crate::sys;

pub const CC_LINK: &str = "cc_link";
pub const RATES: &str = "rates";
pub const STATS: &str = "stats";
pub const CONFIG: &str = "config";
pub const SOCKOPS_PROG: &str = "sockops_prog";
pub const CONG_CONTROL_PROG: &str = "cong_control_prog";
/// Followed by the cgroup directory's inode number, which is the cgroup's id.
pub const SOCKOPS_LINK_PREFIX: &str = "sockops_cg";
pub const MARK_PROG: &str = "mark_prog";
pub const MARKS: &str = "marks";
/// The count of stale ssthresh values the CC repaired (window.h), in both CCs' pins.
pub const REPAIRS: &str = "window_repairs";
/// Followed by the device's network namespace cookie and its ifindex.
pub const MARK_LINK_PREFIX: &str = "mark_if";

const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// Creates `dir` on a bpffs. Mounts /sys/fs/bpf if `dir` is below it and nothing is mounted
/// there (minimal hosts and containers often lack the mount).
/// Returns whether it created `dir`.
pub fn prepare_dir(dir: &Path) -> Result<bool, DatapathError> {
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    let root = Path::new(BPFFS_ROOT);
    if dir.starts_with(root) && root.is_dir() && !sys::is_bpffs(root).unwrap_or(false) {
        sys::mount_bpffs(root)
            .map_err(DatapathError::io(format!("mounting bpffs on {BPFFS_ROOT}")))?;
    }
    fs::create_dir_all(parent)
        .map_err(DatapathError::io(format!("creating {}", parent.display())))?;
    let on_bpffs =
        sys::is_bpffs(parent).map_err(DatapathError::io(format!("statfs {}", parent.display())))?;
    if !on_bpffs {
        return Err(DatapathError::Invalid {
            what: "pin directory",
            why: format!(
                "{} is not on a bpffs (mount -t bpf bpf {})",
                dir.display(),
                parent.display()
            ),
        });
    }
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(DatapathError::io(format!("creating {}", dir.display()))(e)),
    }
}

/// Checks that `dir` holds a datapath an earlier process loaded (its CC link is pinned there)
/// and that this process may open it: what re-opening a pinned datapath starts with.
pub fn check_loaded(dir: &Path) -> Result<(), DatapathError> {
    if !sys::euid_is_root() {
        return Err(DatapathError::NotPrivileged("opening pinned BPF objects"));
    }
    if !dir.join(CC_LINK).exists() {
        return Err(DatapathError::NotLoaded(dir.to_path_buf()));
    }
    Ok(())
}

/// The map pinned as `dir/name`.
pub fn open_map(dir: &Path, name: &str) -> Result<libbpf_rs::MapHandle, DatapathError> {
    let p = dir.join(name);
    libbpf_rs::MapHandle::from_pinned_path(&p)
        .map_err(DatapathError::bpf(format!("opening {}", p.display())))
}

/// What a one-counter array map (`REPAIRS`) holds.
pub fn read_counter(map: &libbpf_rs::MapHandle, what: &'static str) -> Result<u64, DatapathError> {
    use libbpf_rs::{MapCore, MapFlags};
    let raw = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(DatapathError::bpf(format!("reading the {what} map")))?
        .ok_or(DatapathError::Corrupt { map: what })?;
    let bytes: [u8; 8] = raw
        .as_slice()
        .try_into()
        .map_err(|_| DatapathError::Corrupt { map: what })?;
    Ok(u64::from_ne_bytes(bytes))
}

/// Pins made during a load; removed again unless the load completes.
pub struct PinSet {
    paths: Vec<PathBuf>,
    dir_created: Option<PathBuf>,
}

impl PinSet {
    pub fn new(dir: &Path, dir_created: bool) -> Self {
        Self {
            paths: Vec::new(),
            dir_created: dir_created.then(|| dir.to_path_buf()),
        }
    }

    pub fn record(&mut self, path: PathBuf) {
        self.paths.push(path);
    }

    pub fn commit(mut self) {
        self.paths.clear();
        self.dir_created = None;
    }
}

impl Drop for PinSet {
    fn drop(&mut self) {
        for p in self.paths.drain(..).rev() {
            let _ = fs::remove_file(p);
        }
        if let Some(d) = self.dir_created.take() {
            let _ = fs::remove_dir(d);
        }
    }
}
