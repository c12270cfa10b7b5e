//! Discovery of the progress files in `$MLCC_SHM_DIR` (DESIGN.md §9, §11 step 1).
//!
//! The daemon rescans the directory when inotify says something changed and at least once per
//! slot (a missed event must not hide a job). Files are validated once when they appear; a bad
//! file is reported once per version of it (path + size + mtime) rather than every slot, and
//! files whose writer died are dropped. The monitor never deletes files: they belong to the
//! job's user.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::progress::{
    ProgressError, ProgressHeader, ProgressPolicy, ProgressReader, ProgressSnapshot,
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

/// The progress files of the processes on this host.
#[derive(Debug)]
pub struct ProgressDir {
    dir: PathBuf,
    readers: HashMap<PathBuf, ProgressReader>,
    refused: HashMap<PathBuf, Version>,
    policy: ProgressPolicy,
}

/// One process's identity and counters, as read this slot.
#[derive(Clone, Debug)]
pub struct ProcessProgress<'a> {
    pub path: &'a Path,
    pub header: &'a ProgressHeader,
    pub snapshot: ProgressSnapshot,
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
            readers: HashMap::new(),
            refused: HashMap::new(),
            policy,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lists the directory and adopts, refuses or drops files. Only `mlcc.*` names are looked at.
    pub fn rescan(&mut self) -> std::io::Result<ScanReport> {
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
        let mut gone: Vec<PathBuf> = self
            .readers
            .iter()
            .filter(|(p, r)| !present.contains_key(*p) || !r.writer_alive())
            .map(|(p, _)| p.clone())
            .collect();
        gone.sort();
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
                    self.readers.insert(path.clone(), r);
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
    /// retries is left out of this slot (the caller keeps last slot's values).
    pub fn read(&self) -> Vec<Result<ProcessProgress<'_>, ProgressError>> {
        let mut v: Vec<_> = self
            .readers
            .iter()
            .map(|(path, r)| {
                r.snapshot().map(|snapshot| ProcessProgress {
                    path,
                    header: r.header(),
                    snapshot,
                })
            })
            .collect();
        v.sort_by(|a, b| match (a, b) {
            (Ok(a), Ok(b)) => a.path.cmp(b.path),
            (Ok(_), Err(_)) => std::cmp::Ordering::Less,
            (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
            (Err(_), Err(_)) => std::cmp::Ordering::Equal,
        });
        v
    }

    pub fn len(&self) -> usize {
        self.readers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }
}
