//! Helpers shared by the scheduler's integration tests.
#![allow(dead_code, reason = "each test binary uses a subset")]

use std::path::{Path, PathBuf};

use mlcc_scheduler::progress::abi;

/// Writes a valid progress file for job "job" with `pid` by hand, then lets `corrupt` damage it.
pub fn crafted(dir: &Path, name: &str, pid: u32, corrupt: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut b = vec![0u8; abi::FILE_SIZE];
    b[0..8].copy_from_slice(abi::MAGIC);
    b[8..12].copy_from_slice(&abi::VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(abi::HEADER_SIZE as u32).to_le_bytes());
    b[16..19].copy_from_slice(b"job");
    b[104..108].copy_from_slice(&pid.to_le_bytes());
    corrupt(&mut b);
    let p = dir.join(name);
    std::fs::write(&p, &b).unwrap();
    // The writer's mode (mlcc_progress.h); whatever the umask, mlccd refuses group-writable.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    p
}
