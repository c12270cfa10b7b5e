//! Discovery of the progress files in `$MLCC_SHM_DIR` (docs/design.md §9, §11 step 1).
//!
//! [`ProgressDir::poll`], called every slot, lists the directory only when inotify says
//! something in it changed, and at least every [`RESCAN_SLOTS`] slots anyway (an event lost to
//! a queue overflow, or a writer that died without removing its file, is seen within ≈1 s);
//! between listings it only checks that the adopted files' writers live. Where inotify is not
//! available (no watch could be set, e.g. the directory does not exist yet) it lists every slot
//! and keeps trying to set the watch: one inotify watch (rustix) on one directory, drained
//! without blocking. Files are validated once when they appear; a bad
//! file is reported once per version of it (path + size + mtime) rather than every slot, and
//! files whose writer died are dropped. The monitor never deletes files: they belong to the
//! job's user.

use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::progress::{
    ProgressError, ProgressHeader, ProgressPolicy, ProgressReader, ProgressSnapshot, writers_alive,
};

/// What changed in the directory since the last scan.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// Newly adopted files.
    pub added: Vec<PathBuf>,
    /// Files gone from the directory or whose writer exited.
    pub removed: Vec<PathBuf>,
    /// Files refused this scan, each reported once per version of the file.
    pub refused: Vec<ProgressError>,
}

/// A file version that failed validation: skipped until it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    len: u64,
    modified: Option<SystemTime>,
    /// Mode and owner: a file refused for them is looked at again once they are fixed.
    mode: u32,
    uid: u32,
}

/// Polls between full listings of the directory while inotify watches it (≈1 s at τ = 60 ms).
pub const RESCAN_SLOTS: u32 = 16;

/// An inotify instance watching one directory for entries appearing, changing or leaving.
#[derive(Debug)]
struct DirWatch {
    fd: OwnedFd,
}

impl DirWatch {
    fn new(dir: &Path) -> std::io::Result<Self> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("directory path holds a NUL byte"))?;
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let mask = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::ATTRIB
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        inotify::add_watch(&fd, path.as_c_str(), mask)?;
        Ok(DirWatch { fd })
    }

    /// Drains the queued events. `Ok(true)`: something happened (or may have: overflow);
    /// `Err`: the watch is gone (directory removed or moved) and must be set again.
    fn drain(&self) -> std::io::Result<bool> {
        use rustix::fs::inotify::{ReadFlags, Reader};
        use rustix::io::Errno;
        let gone = ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF;
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = Reader::new(&self.fd, &mut buf);
        let mut any = false;
        loop {
            match events.next() {
                Ok(ev) if ev.events().intersects(gone) => {
                    return Err(std::io::Error::other("the watched directory went away"));
                }
                Ok(_) => any = true,
                Err(Errno::AGAIN) => return Ok(any),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The progress files of the processes on this host.
#[derive(Debug)]
pub struct ProgressDir {
    dir: PathBuf,
    /// By path: read in path order.
    readers: BTreeMap<PathBuf, Followed>,
    refused: HashMap<PathBuf, Version>,
    policy: ProgressPolicy,
    watch: Option<DirWatch>,
    /// Polls since the last full listing.
    since_listing: u32,
    listings: u64,
}

/// A file being followed, with its last consistent counters for a slot whose read finds the
/// sequence lock held throughout (a writer preempted inside its update on a loaded host).
#[derive(Debug)]
struct Followed {
    reader: ProgressReader,
    last: Option<ProgressSnapshot>,
}

/// One process's identity and counters, as read this slot.
#[derive(Clone, Debug)]
pub struct ProcessProgress<'a> {
    pub path: &'a Path,
    pub header: &'a ProgressHeader,
    pub snapshot: ProgressSnapshot,
    /// The writer held its sequence lock through every retry: `snapshot` is the last slot's.
    pub stale: bool,
}

impl ProgressDir {
    /// Follows `dir` with the default [`ProgressPolicy`]: any owner, but only files their
    /// writer's user owns and only they can write.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_policy(dir, ProgressPolicy::default())
    }

    pub fn with_policy(dir: impl Into<PathBuf>, policy: ProgressPolicy) -> Self {
        ProgressDir {
            dir: dir.into(),
            readers: BTreeMap::new(),
            refused: HashMap::new(),
            policy,
            watch: None,
            since_listing: 0,
            listings: 0,
        }
    }

    /// Once per slot: lists the directory if inotify reported a change, if no watch is set, or
    /// if [`RESCAN_SLOTS`] polls passed; otherwise only drops files whose writer exited.
    pub fn poll(&mut self) -> std::io::Result<ScanReport> {
        let changed = match &self.watch {
            Some(w) => match w.drain() {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(dir = %self.dir.display(), "inotify watch lost: {e}");
                    self.watch = None;
                    true
                }
            },
            None => true,
        };
        if self.watch.is_none() {
            // Set before listing, so nothing that appears in between is missed.
            self.watch = DirWatch::new(&self.dir).ok();
        }
        self.since_listing += 1;
        if changed || self.since_listing >= RESCAN_SLOTS {
            return self.rescan();
        }
        let gone = self.dropped(|_| true);
        for p in &gone {
            self.readers.remove(p);
        }
        Ok(ScanReport {
            removed: gone,
            ..Default::default()
        })
    }

    /// The followed files to drop, in path order: those whose writer exited, and those not
    /// `listed` any more.
    fn dropped(&self, listed: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
        let readers: Vec<&ProgressReader> = self.readers.values().map(|f| &f.reader).collect();
        self.readers
            .keys()
            .zip(writers_alive(&readers))
            .filter(|(p, alive)| !alive || !listed(p))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Whether an inotify watch is set on the directory.
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Full listings of the directory so far.
    pub fn listings(&self) -> u64 {
        self.listings
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lists the directory and adopts, refuses or drops files. Only `mlcc.*` names are looked at.
    pub fn rescan(&mut self) -> std::io::Result<ScanReport> {
        self.since_listing = 0;
        self.listings += 1;
        let mut report = ScanReport::default();
        let mut present = HashMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("mlcc.") {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let version = Version {
                len: meta.len(),
                modified: meta.modified().ok(),
                mode: std::os::unix::fs::MetadataExt::mode(&meta),
                uid: std::os::unix::fs::MetadataExt::uid(&meta),
            };
            present.insert(entry.path(), version);
        }
        // Gone files, and files whose writer exited.
        let gone = self.dropped(|p| present.contains_key(p));
        for p in &gone {
            self.readers.remove(p);
        }
        report.removed = gone;
        self.refused.retain(|p, _| present.contains_key(p));
        let mut new: Vec<(PathBuf, Version)> = present
            .into_iter()
            .filter(|(p, v)| !self.readers.contains_key(p) && self.refused.get(p) != Some(v))
            .collect();
        new.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, version) in new {
            match ProgressReader::open_trusted(&path, &self.policy) {
                Ok(r) if r.writer_alive() => {
                    self.refused.remove(&path);
                    self.readers.insert(
                        path.clone(),
                        Followed {
                            reader: r,
                            last: None,
                        },
                    );
                    report.added.push(path);
                }
                // A leftover of a dead process: not an error, just nothing to follow.
                Ok(_) => {
                    self.refused.insert(path, version);
                }
                Err(e) => {
                    self.refused.insert(path, version);
                    report.refused.push(e);
                }
            }
        }
        Ok(report)
    }

    /// Reads every adopted file. A file whose writer held its sequence lock through all
    /// retries gives its last consistent counters, marked stale: left out of the slot, its
    /// process's share of a flow group vanished for a slot (and a group of it alone was
    /// withdrawn and planned afresh). Only a file never read yet is an error then.
    pub fn read(&mut self) -> Vec<Result<ProcessProgress<'_>, ProgressError>> {
        let mut v: Vec<_> = self
            .readers
            .iter_mut()
            .map(|(path, f)| {
                let (snapshot, stale) = match (f.reader.snapshot(), f.last) {
                    (Ok(s), _) => {
                        f.last = Some(s);
                        (s, false)
                    }
                    (Err(ProgressError::Busy { .. }), Some(s)) => (s, true),
                    (Err(e), _) => return Err(e),
                };
                Ok(ProcessProgress {
                    path,
                    header: f.reader.header(),
                    snapshot,
                    stale,
                })
            })
            .collect();
        // In path order (the map's), errors last.
        v.sort_by_key(|r| r.is_err());
        v
    }

    pub fn len(&self) -> usize {
        self.readers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }
}
