//! The C writer (`patches/progress/mlcc_progress.h`, compiled by build.rs) and the Rust reader
//! agree on the layout, and what one writes the other reads — including under concurrent writes.

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use mlcc_core::job::{Arch, Role};
use mlcc_scheduler::progress::{ProgressError, ProgressReader, abi};

mod common;
use common::crafted;

unsafe extern "C" {
    fn mlcc_shim_layout(out: *mut u64);
    fn mlcc_shim_open(
        dir: *const c_char,
        job: *const c_char,
        arch: c_int,
        role: c_int,
        rank: u32,
        world: u32,
        model: u64,
    ) -> c_int;
    fn mlcc_shim_open_env(role: c_int, rank: u32) -> c_int;
    fn mlcc_shim_add(dir: c_int, bytes: u64);
    fn mlcc_shim_add_tagged(dir: c_int, tag: u64, bytes: u64);
    fn mlcc_shim_iteration_begin();
    fn mlcc_shim_close();
    fn mlcc_shim_path() -> *const c_char;
    fn mlcc_shim_cxx_is_open() -> c_int;
}

/// The C writer keeps one process-wide state: tests that use it take turns.
static WRITER: Mutex<()> = Mutex::new(());

fn writer_path() -> PathBuf {
    // SAFETY: returns a pointer to a NUL-terminated buffer inside the writer's static state.
    let p = unsafe { CStr::from_ptr(mlcc_shim_path()) };
    PathBuf::from(p.to_str().unwrap())
}

fn open(dir: &Path, job: &str, arch: c_int, role: c_int, rank: u32) -> c_int {
    let d = CString::new(dir.to_str().unwrap()).unwrap();
    let j = CString::new(job).unwrap();
    // SAFETY: valid NUL-terminated strings for the duration of the call.
    unsafe { mlcc_shim_open(d.as_ptr(), j.as_ptr(), arch, role, rank, 4, 98_000_000) }
}

#[test]
fn c_and_rust_agree_on_every_offset() {
    let mut c = [0u64; 26];
    // SAFETY: the shim writes exactly 25 values.
    unsafe { mlcc_shim_layout(c.as_mut_ptr()) };
    let rust = abi::layout();
    for ((name, c), r) in abi::FIELD_NAMES.iter().zip(c).zip(rust) {
        assert_eq!(c, r, "{name}: C says {c}, Rust says {r}");
    }
}

#[test]
fn what_the_c_writer_writes_the_reader_reads() {
    let _g = WRITER.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(open(dir.path(), "resnet50.ps", 2, 1, 3), 0);
    let path = writer_path();
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("mlcc.resnet50.ps.server.3.{}", std::process::id())
    );
    let r = ProgressReader::open(&path).unwrap();
    let h = r.header();
    assert_eq!(h.job_id, "resnet50.ps");
    assert_eq!(h.arch, Some(Arch::Ps));
    assert_eq!(h.role, Role::Server);
    assert_eq!((h.rank, h.world_size, h.model_bytes), (3, 4, 98_000_000));
    assert_eq!(h.pid, std::process::id());
    assert!(r.writer_alive());
    assert_eq!(r.snapshot().unwrap().iteration, 0);
    // SAFETY: reads the shared writer state from the C++ translation unit.
    assert_eq!(
        unsafe { mlcc_shim_cxx_is_open() },
        1,
        "C and C++ share one writer"
    );

    // SAFETY: plain calls into the writer.
    unsafe {
        mlcc_shim_iteration_begin();
        mlcc_shim_add(0, 1000);
        mlcc_shim_add(1, 300);
        mlcc_shim_add(0, 500);
        mlcc_shim_iteration_begin();
        mlcc_shim_add(0, 200);
    }
    let s = r.snapshot().unwrap();
    assert_eq!((s.bytes_sent, s.bytes_received), (1700, 300));
    assert_eq!(s.iteration, 2);
    assert_eq!(s.last_iteration_bytes, 1500);
    assert_eq!(s.sent_this_iteration(), 200);
    assert!(s.iteration_start_ns > 0 && s.last_update_ns >= s.iteration_start_ns);

    // Tagged adds: the first tag marks every iteration start.
    unsafe {
        mlcc_shim_add_tagged(0, 7, 10);
        mlcc_shim_add_tagged(0, 8, 10);
        mlcc_shim_add_tagged(1, 7, 5);
        mlcc_shim_add_tagged(0, 7, 10);
    }
    let s = r.snapshot().unwrap();
    assert_eq!(
        s.iteration, 4,
        "tag 7 began iterations 3 and 4; a receive does not"
    );
    assert_eq!(s.last_iteration_bytes, 20);
    unsafe { mlcc_shim_close() };
    assert!(!path.exists(), "close removes the file");
}

#[test]
fn open_env_is_a_no_op_without_a_job_id_and_refuses_bad_ids() {
    let _g = WRITER.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: the WRITER lock serializes every test that reads these variables.
    unsafe {
        std::env::remove_var("MLCC_JOB_ID");
        std::env::set_var("MLCC_SHM_DIR", dir.path());
        assert_eq!(mlcc_shim_open_env(0, 0), 1);
        std::env::set_var("MLCC_JOB_ID", "bad/id");
        assert_eq!(mlcc_shim_open_env(0, 0), -1);
        std::env::set_var("MLCC_JOB_ID", "gpt2");
        std::env::set_var("MLCC_JOB_ARCH", "allreduce");
        std::env::set_var("MLCC_MODEL_BYTES", "1200000000");
        assert_eq!(mlcc_shim_open_env(0, 2), 0);
    }
    let r = ProgressReader::open(&writer_path()).unwrap();
    assert_eq!(r.header().arch, Some(Arch::Allreduce));
    assert_eq!(r.header().model_bytes, 1_200_000_000);
    unsafe {
        mlcc_shim_close();
        std::env::remove_var("MLCC_JOB_ID");
        std::env::remove_var("MLCC_SHM_DIR");
    }
    // Calls after close (or without open) do nothing and do not crash.
    unsafe {
        mlcc_shim_add(0, 1);
        mlcc_shim_iteration_begin();
    }
}

#[test]
fn snapshots_stay_consistent_under_a_busy_writer() {
    let _g = WRITER.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(open(dir.path(), "busy", 1, 0, 0), 0);
    let r = ProgressReader::open(&writer_path()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: plain calls into the writer.
                unsafe {
                    mlcc_shim_iteration_begin();
                    for _ in 0..10 {
                        mlcc_shim_add(0, 100);
                    }
                }
            }
        });
        let mut last = 0;
        let mut ok = 0;
        for _ in 0..20_000 {
            match r.snapshot() {
                Ok(s) => {
                    ok += 1;
                    // Every complete iteration sent exactly 1000 bytes; the current one ≤ 1000.
                    assert!(s.iteration_start_sent <= s.bytes_sent);
                    assert!(s.iteration_start_sent == (s.iteration.max(1) - 1) * 1000);
                    assert!(s.iteration < 2 || s.last_iteration_bytes == 1000, "{s:?}");
                    assert!(s.iteration >= last);
                    last = s.iteration;
                }
                Err(ProgressError::Busy { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(ok > 0, "the reader never got a consistent snapshot");
    });
    unsafe { mlcc_shim_close() };
}

#[test]
fn corrupt_truncated_and_foreign_files_are_refused_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ok = crafted(d, "mlcc.job.worker.0.42", 42, |_| {});
    assert_eq!(ProgressReader::open(&ok).unwrap().header().job_id, "job");
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            crafted(d, "mlcc.job.worker.0.43", 42, |b| b.truncate(100)),
            "size 100",
        ),
        (
            crafted(d, "mlcc.job.worker.0.44", 42, |b| b[0] = b'X'),
            "bad magic",
        ),
        (
            crafted(d, "mlcc.job.worker.0.45", 42, |b| b[8] = 9),
            "ABI version 9",
        ),
        (
            crafted(d, "mlcc.job.worker.0.46", 42, |b| b[13] = 0),
            "header size 0",
        ),
        (
            crafted(d, "mlcc.job.worker.0.47", 42, |b| b[16] = 0xff),
            "job id",
        ),
        (
            crafted(d, "mlcc.job.worker.0.48", 42, |b| b[16..80].fill(b'a')),
            "job id",
        ),
        (
            crafted(d, "mlcc.job.worker.0.49", 42, |b| b[84] = 7),
            "unknown role 7",
        ),
        (
            crafted(d, "mlcc.other.worker.0.42", 42, |_| {}),
            "does not match",
        ),
        (crafted(d, "random-name", 42, |_| {}), "does not match"),
    ];
    for (path, want) in cases {
        let e = ProgressReader::open(&path).unwrap_err().to_string();
        assert!(
            e.contains(want),
            "{}: {e:?} should mention {want:?}",
            path.display()
        );
        assert!(
            e.contains(path.to_str().unwrap()),
            "error names the file: {e}"
        );
    }
    let e = ProgressReader::open(&d.join("missing")).unwrap_err();
    assert!(matches!(e, ProgressError::Io { .. }));
}

/// `learned-…` names the jobs mlccd learns from their sockets: a progress file that takes the
/// prefix is refused, with the reason, rather than read as a learned job.
#[test]
fn a_progress_file_may_not_take_a_learned_jobs_name() {
    let _g = WRITER.lock().unwrap();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(open(dir.path(), "learned-h1-10", 1, 0, 0), 0);
    let path = writer_path();
    let err = ProgressReader::open(&path)
        .map(|_| ())
        .expect_err("refused");
    assert!(
        matches!(&err, ProgressError::ReservedJobId { job_id, .. } if job_id == "learned-h1-10"),
        "{err}"
    );
    assert!(
        err.to_string().contains("learns from their sockets"),
        "{err}"
    );
    // SAFETY: closes the file opened above.
    unsafe { mlcc_shim_close() };
}
