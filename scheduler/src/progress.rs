//! Reader of the progress files training processes write through
//! `patches/progress/mlcc_progress.h` (docs/design.md §9).
//!
//! The layout is mirrored in [`abi`] and a test compiles the C header to prove both sides agree
//! on every offset. Files come from other users' processes, so everything read is validated: a
//! file with the wrong magic, version or size, or a job id that is not a clean UTF-8 name, is
//! refused with an error that says what is wrong, and the caller skips it with a warning.

use mlcc_core::learn::identity::Label;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;

use mlcc_core::job::{Arch, Role};

/// The byte layout of a progress file. Keep in sync with `mlcc_progress.h`.
pub mod abi {
    pub const MAGIC: &[u8; 8] = b"MLCCPRG1";
    pub const VERSION: u32 = 1;
    pub const HEADER_SIZE: usize = 256;
    pub const FILE_SIZE: usize = 512;
    pub const JOB_ID_MAX: usize = 64;
    pub const CC_NAME_MAX: usize = 16;

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct Header {
        pub magic: [u8; 8],
        pub abi_version: u32,
        pub header_size: u32,
        pub job_id: [u8; JOB_ID_MAX],
        pub arch: u32,
        pub role: u32,
        pub rank: u32,
        pub world_size: u32,
        pub model_bytes: u64,
        pub pid: u32,
        pub file_size: u32,
        pub start_time_ns: u64,
        pub cc_name: [u8; CC_NAME_MAX],
        pub total_iterations: u64,
        pub reserved: [u8; HEADER_SIZE - 144],
    }

    /// Each field is a 64-bit atomic in the file.
    #[repr(C)]
    pub struct Counters {
        pub seq: u64,
        pub bytes_sent: u64,
        pub bytes_received: u64,
        pub iteration: u64,
        pub iteration_start_ns: u64,
        pub iteration_start_sent: u64,
        pub last_iteration_bytes: u64,
        pub last_update_ns: u64,
    }

    /// Names of the values `mlcc_shim_layout` reports, in its order (for the agreement test).
    pub const FIELD_NAMES: [&str; 26] = [
        "sizeof header",
        "sizeof counters",
        "magic",
        "abi_version",
        "header_size",
        "job_id",
        "arch",
        "role",
        "rank",
        "world_size",
        "model_bytes",
        "pid",
        "file_size",
        "start_time_ns",
        "cc_name",
        "total_iterations",
        "seq",
        "bytes_sent",
        "bytes_received",
        "iteration",
        "iteration_start_ns",
        "iteration_start_sent",
        "last_iteration_bytes",
        "last_update_ns",
        "FILE_SIZE",
        "HEADER_SIZE",
    ];

    /// The same values from the Rust side.
    pub fn layout() -> [u64; 26] {
        use std::mem::{offset_of, size_of};
        [
            size_of::<Header>(),
            size_of::<Counters>(),
            offset_of!(Header, magic),
            offset_of!(Header, abi_version),
            offset_of!(Header, header_size),
            offset_of!(Header, job_id),
            offset_of!(Header, arch),
            offset_of!(Header, role),
            offset_of!(Header, rank),
            offset_of!(Header, world_size),
            offset_of!(Header, model_bytes),
            offset_of!(Header, pid),
            offset_of!(Header, file_size),
            offset_of!(Header, start_time_ns),
            offset_of!(Header, cc_name),
            offset_of!(Header, total_iterations),
            offset_of!(Counters, seq),
            offset_of!(Counters, bytes_sent),
            offset_of!(Counters, bytes_received),
            offset_of!(Counters, iteration),
            offset_of!(Counters, iteration_start_ns),
            offset_of!(Counters, iteration_start_sent),
            offset_of!(Counters, last_iteration_bytes),
            offset_of!(Counters, last_update_ns),
            FILE_SIZE,
            HEADER_SIZE,
        ]
        .map(|v| v as u64)
    }

    const _: () = assert!(std::mem::size_of::<Header>() == HEADER_SIZE);
    const _: () = assert!(HEADER_SIZE + std::mem::size_of::<Counters>() <= FILE_SIZE);
}

/// Why a progress file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: size {size} bytes, expected {expected}")]
    Size {
        path: PathBuf,
        size: u64,
        expected: usize,
    },
    #[error("{path}: not an mlcc progress file (bad magic)")]
    Magic { path: PathBuf },
    #[error(
        "{path}: ABI version {found}, this mlccd reads version {}",
        abi::VERSION
    )]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: header size {found}, expected {}", abi::HEADER_SIZE)]
    HeaderSize { path: PathBuf, found: u32 },
    #[error("{path}: job id is not 1-63 characters of [A-Za-z0-9._-]")]
    JobId { path: PathBuf },
    #[error(
        "{path}: job id {job_id:?} starts with {:?}, which names the jobs mlccd learns from their sockets",
        mlcc_core::learn::identity::JOB_PREFIX
    )]
    ReservedJobId { path: PathBuf, job_id: String },
    #[error("{path}: unknown {what} {value}")]
    Enum {
        path: PathBuf,
        what: &'static str,
        value: u32,
    },
    #[error("{path}: file name does not match its header ({detail})")]
    NameMismatch { path: PathBuf, detail: String },
    #[error("{path}: writer kept the sequence lock busy; try next slot")]
    Busy { path: PathBuf },
    /// The file is not one its writer alone controls (ProgressPolicy): another user could feed
    /// mlccd made-up progress for someone else's job.
    #[error("{path}: refused: {why}")]
    Untrusted { path: PathBuf, why: String },
}

/// Which progress files mlccd believes (docs/design.md §16: "progress files owned by the job's
/// user"). A progress file decides how fast the connections of the process it names are paced,
/// so a file must come from that process's user: /dev/shm is writable by every user of the
/// host, and without these checks one user could slow another's job down (or speed their own up
/// at others' expense) by writing a file that names the victim's pid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressPolicy {
    /// Uids whose files are accepted at all; empty: any uid (subject to the checks below).
    pub allowed_uids: Vec<u32>,
    /// Skip the check that the file's owner is root or a user id (real or effective) of the
    /// process the file names. Only for tests whose files stand in for processes of other users.
    pub trust_any_writer: bool,
}

impl ProgressPolicy {
    /// Checks the file's own metadata (from the open descriptor, so the checked file is the one
    /// read): a regular file, not group- or world-writable, owned by an allowed uid.
    fn check_meta(&self, path: &Path, meta: &std::fs::Metadata) -> Result<(), ProgressError> {
        use std::os::unix::fs::MetadataExt;
        let refuse = |why: String| ProgressError::Untrusted {
            path: path.to_path_buf(),
            why,
        };
        if !meta.is_file() {
            return Err(refuse("not a regular file".into()));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(refuse(format!(
                "mode {mode:04o} lets other users write it (the writer creates it 0640)"
            )));
        }
        let uid = meta.uid();
        if !self.allowed_uids.is_empty() && !self.allowed_uids.contains(&uid) {
            return Err(refuse(format!(
                "owned by uid {uid}, not one of progress_uids {:?}",
                self.allowed_uids
            )));
        }
        Ok(())
    }

    /// Checks that the file's owner `uid` runs the process `pid` the header names (or is root).
    fn check_writer(&self, path: &Path, uid: u32, pid: u32) -> Result<(), ProgressError> {
        if self.trust_any_writer || uid == 0 {
            return Ok(());
        }
        let refuse = |why: String| ProgressError::Untrusted {
            path: path.to_path_buf(),
            why,
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| refuse(format!("cannot read /proc/{pid}/status of its writer: {e}")))?;
        // "Uid:\treal\teffective\tsaved\tfs"
        let uids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|u| u.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if uids.iter().take(2).any(|&u| u == uid) {
            Ok(())
        } else {
            Err(refuse(format!(
                "owned by uid {uid}, but it names pid {pid}, which runs as uid {}",
                uids.get(1).map_or("?".to_string(), |u| u.to_string())
            )))
        }
    }
}

/// What a process said about itself when it opened the file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProgressHeader {
    pub job_id: String,
    /// `None` when the library could not say (MLCC_JOB_ARCH unset).
    pub arch: Option<Arch>,
    pub role: Role,
    pub rank: u32,
    pub world_size: u32,
    pub model_bytes: u64,
    pub pid: u32,
    pub start_time_ns: u64,
    pub cc_name: String,
    /// Iterations the job runs (`MLCC_TOTAL_ITERATIONS`); 0 when it did not say.
    pub total_iterations: u64,
}

/// One consistent reading of a file's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProgressSnapshot {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub iteration: u64,
    pub iteration_start_ns: u64,
    pub iteration_start_sent: u64,
    pub last_iteration_bytes: u64,
    pub last_update_ns: u64,
}

impl ProgressSnapshot {
    /// Bytes enqueued since the current iteration began.
    pub fn sent_this_iteration(&self) -> u64 {
        self.bytes_sent.saturating_sub(self.iteration_start_sent)
    }
}

/// How often a reader retries a seqlock held by the writer before giving up for this slot.
pub const SEQLOCK_RETRIES: usize = 64;

/// The parts of a progress file name `mlcc.<job>.<role>.<rank>.<pid>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileName {
    pub job_id: String,
    pub role: Role,
    pub rank: u32,
    pub pid: u32,
}

/// Parses a progress file name; `None` for anything else in the directory.
pub fn parse_file_name(name: &str) -> Option<FileName> {
    let rest = name.strip_prefix("mlcc.")?;
    // The job id may contain dots: take the last three fields from the right.
    let mut it = rest.rsplitn(4, '.');
    let pid = it.next()?.parse().ok()?;
    let rank = it.next()?.parse().ok()?;
    let role = parse_role(it.next()?)?;
    let job_id = it.next()?.to_string();
    valid_job_id(&job_id).then_some(FileName {
        job_id,
        role,
        rank,
        pid,
    })
}

fn parse_role(s: &str) -> Option<Role> {
    match s {
        "worker" => Some(Role::Worker),
        "server" => Some(Role::Server),
        "scheduler" => Some(Role::Scheduler),
        _ => None,
    }
}

/// Same rule as the C writer: 1–63 bytes of `[A-Za-z0-9._-]`.
pub fn valid_job_id(s: &str) -> bool {
    (1..abi::JOB_ID_MAX).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn c_string(bytes: &[u8]) -> Option<&str> {
    let end = bytes.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&bytes[..end]).ok()
}

/// An open, validated progress file, mapped read-only.
pub struct ProgressReader {
    path: PathBuf,
    map: Mmap,
    header: ProgressHeader,
    /// A pidfd of the writer: readable once it exits, so liveness is one poll(2) per slot
    /// rather than a path lookup under /proc, and a reused pid cannot pass for it. `None`
    /// where pidfd_open(2) failed (the process is gone, or a kernel before 5.3): `/proc` then.
    writer: Option<std::os::fd::OwnedFd>,
}

impl std::fmt::Debug for ProgressReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReader")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl ProgressReader {
    /// Maps and validates a progress file, whoever wrote it (tools, tests); the daemon uses
    /// [`Self::open_trusted`].
    pub fn open(path: &Path) -> Result<Self, ProgressError> {
        Self::open_inner(path, None)
    }

    /// [`Self::open`] for a file mlccd will act on: refuses it unless `policy` trusts its
    /// owner and mode, and refuses a symlink (the name could point anywhere).
    pub fn open_trusted(path: &Path, policy: &ProgressPolicy) -> Result<Self, ProgressError> {
        Self::open_inner(path, Some(policy))
    }

    fn open_inner(path: &Path, policy: Option<&ProgressPolicy>) -> Result<Self, ProgressError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let io = |source| ProgressError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        if policy.is_some() {
            opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        }
        let file = opts.open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if let Some(p) = policy {
            p.check_meta(path, &meta)?;
        }
        let size = meta.len();
        if size != abi::FILE_SIZE as u64 {
            return Err(ProgressError::Size {
                path: path.to_path_buf(),
                size,
                expected: abi::FILE_SIZE,
            });
        }
        // SAFETY: the mapping is read-only and only ever read through atomics (counters) or
        // copied once after validation (header); a writer truncating the file under us would
        // raise SIGBUS, which the fixed size checked above and the writer's protocol (it never
        // truncates an open file) rule out.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = Self::parse_header(path, &map)?;
        if let Some(p) = policy {
            p.check_writer(path, meta.uid(), header.pid)?;
        }
        let writer = pidfd_open(header.pid);
        Ok(ProgressReader {
            path: path.to_path_buf(),
            map,
            header,
            writer,
        })
    }

    fn parse_header(path: &Path, map: &[u8]) -> Result<ProgressHeader, ProgressError> {
        let p = || path.to_path_buf();
        if map.len() < abi::FILE_SIZE {
            return Err(ProgressError::Size {
                path: p(),
                size: map.len() as u64,
                expected: abi::FILE_SIZE,
            });
        }
        // SAFETY: map is at least HEADER_SIZE bytes and Header is plain old data of that size;
        // read_unaligned makes no alignment assumption.
        let h: abi::Header = unsafe { std::ptr::read_unaligned(map.as_ptr().cast()) };
        if &h.magic != abi::MAGIC {
            return Err(ProgressError::Magic { path: p() });
        }
        if h.abi_version != abi::VERSION {
            return Err(ProgressError::Version {
                path: p(),
                found: h.abi_version,
            });
        }
        if h.header_size as usize != abi::HEADER_SIZE {
            return Err(ProgressError::HeaderSize {
                path: p(),
                found: h.header_size,
            });
        }
        let job_id = c_string(&h.job_id)
            .filter(|s| valid_job_id(s))
            .ok_or_else(|| ProgressError::JobId { path: p() })?
            .to_string();
        if Label::of_job(&job_id).is_some() {
            return Err(ProgressError::ReservedJobId { path: p(), job_id });
        }
        let arch = match h.arch {
            0 => None,
            1 => Some(Arch::Allreduce),
            2 => Some(Arch::Ps),
            v => {
                return Err(ProgressError::Enum {
                    path: p(),
                    what: "architecture",
                    value: v,
                });
            }
        };
        let role = match h.role {
            0 => Role::Worker,
            1 => Role::Server,
            2 => Role::Scheduler,
            v => {
                return Err(ProgressError::Enum {
                    path: p(),
                    what: "role",
                    value: v,
                });
            }
        };
        let cc_name = c_string(&h.cc_name).unwrap_or("").to_string();
        let header = ProgressHeader {
            job_id,
            arch,
            role,
            rank: h.rank,
            world_size: h.world_size,
            model_bytes: h.model_bytes,
            pid: h.pid,
            start_time_ns: h.start_time_ns,
            cc_name,
            total_iterations: h.total_iterations,
        };
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            let parsed = parse_file_name(name).ok_or_else(|| ProgressError::NameMismatch {
                path: p(),
                detail: "not named mlcc.<job>.<role>.<rank>.<pid>".into(),
            })?;
            let want = FileName {
                job_id: header.job_id.clone(),
                role: header.role,
                rank: header.rank,
                pid: header.pid,
            };
            if parsed != want {
                return Err(ProgressError::NameMismatch {
                    path: p(),
                    detail: format!("name says {parsed:?}, header says {want:?}"),
                });
            }
        }
        Ok(header)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &ProgressHeader {
        &self.header
    }

    fn counter(&self, index: usize) -> &AtomicU64 {
        let offset = abi::HEADER_SIZE + index * 8;
        // SAFETY: offset + 8 ≤ FILE_SIZE (checked at open); mmap'd memory is page aligned and
        // HEADER_SIZE is a multiple of 8, so the pointer is aligned for AtomicU64. The file is
        // shared with a writer using the same 64-bit atomics.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Reads the counters consistently, retrying at most [`SEQLOCK_RETRIES`] times while the
    /// writer holds the sequence lock. Never blocks the writer.
    pub fn snapshot(&self) -> Result<ProgressSnapshot, ProgressError> {
        let load = |i| self.counter(i).load(Ordering::Acquire);
        for _ in 0..SEQLOCK_RETRIES {
            let s1 = load(0);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let snap = ProgressSnapshot {
                bytes_sent: load(1),
                bytes_received: load(2),
                iteration: load(3),
                iteration_start_ns: load(4),
                iteration_start_sent: load(5),
                last_iteration_bytes: load(6),
                last_update_ns: load(7),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if load(0) == s1 {
                return Ok(snap);
            }
        }
        Err(ProgressError::Busy {
            path: self.path.clone(),
        })
    }

    /// Whether the writing process is gone (its pid no longer exists). A reused pid is caught
    /// by the caller comparing process start times if it matters.
    pub fn writer_alive(&self) -> bool {
        writers_alive(&[self])[0]
    }
}

/// [`ProgressReader::writer_alive`] for many readers at once: their pidfds in one `poll(2)`
/// rather than one each, since every slot asks it of every followed file.
pub fn writers_alive(readers: &[&ProgressReader]) -> Vec<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds: Vec<PollFd<'_>> = readers
        .iter()
        .filter_map(|r| r.writer.as_ref())
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // A pidfd polls readable once its process has exited; where poll fails, /proc tells.
    let polled = !fds.is_empty() && poll(&mut fds, Some(&now)).is_ok();
    let mut exited = fds.iter().map(|f| !f.revents().is_empty());
    readers
        .iter()
        .map(|r| {
            let by_fd = r.writer.as_ref().and_then(|_| exited.next());
            match by_fd {
                Some(gone) if polled => !gone,
                _ => Path::new("/proc").join(r.header.pid.to_string()).exists(),
            }
        })
        .collect()
}

/// A pidfd for `pid`, if the kernel gives one (Linux 5.3).
fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use rustix::process::{Pid, PidfdFlags};
    let pid = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_parse_and_reject_junk() {
        assert_eq!(
            parse_file_name("mlcc.job.v1.worker.3.1234"),
            Some(FileName {
                job_id: "job.v1".into(),
                role: Role::Worker,
                rank: 3,
                pid: 1234
            })
        );
        assert_eq!(
            parse_file_name("mlcc.j.server.0.1").unwrap().role,
            Role::Server
        );
        for bad in [
            "mlcc.j.boss.0.1",
            "mlcc.j.worker.x.1",
            "mlcc.worker.0.1",
            "other",
            "mlcc.j w.worker.0.1",
            "mlcc.j.worker.0.99999999999",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn job_ids_follow_the_writer_rule() {
        assert!(valid_job_id("resnet50-ps.2"));
        assert!(!valid_job_id(""));
        assert!(!valid_job_id(&"x".repeat(64)));
        assert!(!valid_job_id("a/b"));
        assert!(!valid_job_id("é"));
    }
}
