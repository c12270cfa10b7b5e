//! The trainer's side of the progress ABI, through the real C header (see build.rs).

use std::os::fd::AsRawFd;

unsafe extern "C" {
    fn mlcc_tb_open_env(role: i32, rank: u32) -> i32;
    fn mlcc_tb_iteration_begin();
    fn mlcc_tb_add(dir: i32, bytes: u64);
    fn mlcc_tb_set_cc(fd: i32) -> i32;
    fn mlcc_tb_close();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Worker = 0,
    Server = 1,
}

/// An open progress file; closed (and removed) on drop. Inert when `MLCC_JOB_ID` is unset.
pub struct Progress {
    open: bool,
}

impl Progress {
    /// Opens from the environment (`MLCC_JOB_ID`, `MLCC_JOB_ARCH`, `MLCC_MODEL_BYTES`,
    /// `MLCC_WORLD_SIZE`, `MLCC_SHM_DIR`, `MLCC_CC`, `MLCC_TOTAL_ITERATIONS`), as patched
    /// libraries do.
    pub fn open_env(role: Role, rank: u32) -> Result<Self, String> {
        // SAFETY: the header's functions take plain values and keep their own global state.
        match unsafe { mlcc_tb_open_env(role as i32, rank) } {
            0 => Ok(Progress { open: true }),
            1 => Ok(Progress { open: false }),
            _ => Err("cannot open the progress file (see stderr)".into()),
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn iteration_begin(&self) {
        // SAFETY: no-op when not open.
        unsafe { mlcc_tb_iteration_begin() }
    }

    pub fn sent(&self, bytes: u64) {
        // SAFETY: as above.
        unsafe { mlcc_tb_add(0, bytes) }
    }

    pub fn received(&self, bytes: u64) {
        // SAFETY: as above.
        unsafe { mlcc_tb_add(1, bytes) }
    }

    /// Puts a data socket on the CC named in the progress header (`MLCC_CC`).
    pub fn set_cc(&self, s: &impl AsRawFd) -> Result<(), String> {
        // SAFETY: the fd is a live socket owned by the caller.
        match unsafe { mlcc_tb_set_cc(s.as_raw_fd()) } {
            0 => Ok(()),
            _ => Err("TCP_CONGESTION from the progress header failed (see stderr)".into()),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.open {
            // SAFETY: closes the header's global state once.
            unsafe { mlcc_tb_close() }
        }
    }
}
