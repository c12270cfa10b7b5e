//! The NCCL profiler plugin (`patches/nccl/profiler`) under a C harness that loads it with
//! `dlopen` and drives every exported API version (`ncclProfiler_v1` … `_v6`) the way NCCL does.
//! No GPU, no NCCL: the harness plays NCCL's side of the documented plugin interface. The
//! progress file is read with mlccd's own reader after every step of a scripted training loop.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

use mlcc_core::job::{Arch, Role};
use mlcc_patches::{ProgressWatch, c_compiler, cache_dir, repo_root, run};
use mlcc_scheduler::progress::ProgressSnapshot;

const VERSIONS: [u32; 6] = [1, 2, 3, 4, 5, 6];

/// Builds the plugin (with its own Makefile, as an operator would) and the harness, once.
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = cache_dir().join("nccl");
        std::fs::create_dir_all(&out).unwrap();
        let root = repo_root();
        run(Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(root.join("patches/nccl/profiler"))
            .arg(format!("OUT={}", out.display()))
            .arg(format!("CC={}", c_compiler())));
        let plugin = out.join("libnccl-profiler-mlcc.so");
        let harness = out.join("nccl_profiler_harness");
        run(Command::new(c_compiler())
            .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(root.join("patches/nccl/profiler"))
            .arg("-o")
            .arg(&harness)
            .arg(root.join("patches/harness/c/nccl_profiler_harness.c"))
            .arg("-ldl"));
        (plugin, harness)
    })
}

/// One harness process driving one API version.
struct Harness {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Harness {
    fn start(version: u32, env: &[(&str, String)]) -> Harness {
        let (plugin, harness) = built();
        let mut cmd = Command::new(harness);
        cmd.arg(plugin)
            .arg(version.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for k in [
            "MLCC_JOB_ID",
            "MLCC_JOB_ARCH",
            "MLCC_MODEL_BYTES",
            "MLCC_WORLD_SIZE",
            "MLCC_SHM_DIR",
            "MLCC_CC",
            "MLCC_RANK",
            "MLCC_NCCL_ITERATION",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the harness");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut h = Harness {
            child,
            stdin,
            stdout,
        };
        let hello = h.line();
        assert_eq!(
            hello,
            format!("ok loaded ncclProfiler_v{version} name=mlcc"),
            "v{version}"
        );
        h
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).expect("harness output");
        s.trim_end().to_string()
    }

    /// Sends one command; returns the text after "ok".
    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let reply = self.line();
        assert!(reply.starts_with("ok"), "{c} -> {reply:?}");
        reply[2..].trim().to_string()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn type_size(t: &str) -> u64 {
    match t {
        "ncclInt8" | "ncclUint8" => 1,
        "ncclFloat16" | "ncclBfloat16" => 2,
        "ncclInt32" | "ncclFloat32" => 4,
        "ncclInt64" | "ncclFloat64" => 8,
        _ => panic!("{t}"),
    }
}

fn env(dir: &Path, job: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("MLCC_JOB_ID", job.to_string()),
        ("MLCC_SHM_DIR", dir.display().to_string()),
        ("MLCC_MODEL_BYTES", "4202408".to_string()),
    ];
    v.extend(extra.iter().map(|(k, val)| (*k, val.to_string())));
    v
}

fn snapshot(watch: &mut ProgressWatch, dir: &Path) -> ProgressSnapshot {
    watch.scan(dir);
    assert_eq!(watch.readers.len(), 1, "exactly one progress file");
    watch.readers.values().next().unwrap().snapshot().unwrap()
}

/// A training step: gradient buckets all-reduced in the same order every step, plus one send
/// and one receive (pipeline-parallel activations).
const STEP: [(&str, u64, &str); 6] = [
    ("coll AllReduce", 1_048_576, "ncclFloat32"),
    ("coll AllReduce", 262_144, "ncclFloat16"),
    ("coll AllReduce", 1_000, "ncclFloat64"),
    ("coll AllReduce", 7, "ncclUint8"),
    ("p2p Send", 100, "ncclInt32"),
    ("p2p Recv", 50, "ncclInt64"),
];

#[test]
fn first_all_reduce_marks_iterations_with_exact_bytes_in_every_version() {
    let step_sent: u64 = STEP
        .iter()
        .filter(|s| s.0 != "p2p Recv")
        .map(|s| s.1 * type_size(s.2))
        .sum();
    let step_recv: u64 = STEP
        .iter()
        .filter(|s| s.0 != "p2p Send")
        .map(|s| s.1 * type_size(s.2))
        .sum();
    let broadcast = 4096 * 4; // DDP broadcasts parameters once before training
    println!("per step: sent {step_sent} B, received {step_recv} B; broadcast {broadcast} B");
    for v in VERSIONS {
        let dir = tempfile::tempdir().unwrap();
        let job = format!("nccl-v{v}");
        let mut h = Harness::start(v, &env(dir.path(), &job, &[]));
        let mask = h.cmd("init 2 4");
        assert_eq!(mask, "mask=0x6", "v{v}: asks for Coll and P2p events only");
        let mut watch = ProgressWatch::default();
        h.cmd("coll Broadcast 4096 ncclFloat32");
        let s = snapshot(&mut watch, dir.path());
        assert_eq!((s.iteration, s.bytes_sent), (0, broadcast), "v{v}");
        for step in 1..=4u64 {
            for (i, (c, count, t)) in STEP.iter().enumerate() {
                h.cmd(&format!("{c} {count} {t}"));
                if i == 0 {
                    let s = snapshot(&mut watch, dir.path());
                    assert_eq!(s.iteration, step, "v{v}: first bucket starts step {step}");
                }
            }
            let s = snapshot(&mut watch, dir.path());
            assert_eq!(s.iteration, step, "v{v}");
            assert_eq!(s.sent_this_iteration(), step_sent, "v{v} step {step}");
            assert_eq!(s.bytes_sent, broadcast + step * step_sent, "v{v}");
            assert_eq!(s.bytes_received, broadcast + step * step_recv, "v{v}");
            let last = if step == 1 { 0 } else { step_sent };
            assert_eq!(s.last_iteration_bytes, last, "v{v} step {step}");
        }
        let reader = watch.readers.values().next().unwrap();
        let hd = reader.header();
        assert_eq!(hd.job_id, job);
        assert_eq!(hd.arch, Some(Arch::Allreduce), "default for NCCL jobs");
        assert_eq!(hd.role, Role::Worker);
        assert_eq!(
            hd.rank, 2,
            "v{v}: rank from init (v4+) or from the events (v1-v3)"
        );
        let world = if v >= 4 { 4 } else { 0 };
        assert_eq!(hd.world_size, world, "v{v}: NCCL passes nranks from v4 on");
        assert_eq!(hd.model_bytes, 4_202_408);
        let path = reader.path().to_path_buf();
        h.cmd("finalize");
        assert!(
            !path.exists(),
            "v{v}: finalize of the last communicator removes the file"
        );
        println!(
            "v{v}: 4 steps, last_iteration_bytes {} B, file {} removed at finalize",
            step_sent,
            path.file_name().unwrap().to_string_lossy()
        );
    }
}

#[test]
fn group_mode_marks_each_outermost_group() {
    let group: [(u64, &str); 3] = [
        (1 << 20, "ncclBfloat16"),
        (12_345, "ncclInt32"),
        (1 << 20, "ncclBfloat16"),
    ];
    let bytes: u64 = group.iter().map(|(c, t)| c * type_size(t)).sum();
    for v in VERSIONS {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::start(
            v,
            &env(
                dir.path(),
                &format!("group-v{v}"),
                &[("MLCC_NCCL_ITERATION", "group"), ("MLCC_JOB_ARCH", "ps")],
            ),
        );
        let mask = h.cmd("init 0 2");
        let want = if v >= 5 { 0x106 } else { 0x7 };
        assert_eq!(
            mask,
            format!("mask=0x{want:x}"),
            "v{v}: Group (v1-4) / GroupApi (v5+)"
        );
        let mut watch = ProgressWatch::default();
        for step in 1..=3u64 {
            h.cmd("group_begin");
            for (c, t) in group {
                h.cmd(&format!("coll AllReduce {c} {t}"));
            }
            h.cmd("group_end");
            let s = snapshot(&mut watch, dir.path());
            assert_eq!(s.iteration, step, "v{v}");
            assert_eq!(s.sent_this_iteration(), bytes, "v{v}");
            assert_eq!(s.last_iteration_bytes, if step == 1 { 0 } else { bytes });
            // Repeated signatures inside a group do not start iterations in this mode.
        }
        let hd = watch.readers.values().next().unwrap().header().clone();
        assert_eq!(hd.arch, Some(Arch::Ps), "MLCC_JOB_ARCH is honoured");
        h.cmd("finalize");
    }
}

#[test]
fn without_a_job_id_the_plugin_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    for v in VERSIONS {
        let mut h = Harness::start(v, &[("MLCC_SHM_DIR", dir.path().display().to_string())]);
        h.cmd("init 0 1");
        h.cmd("coll AllReduce 1024 ncclFloat32");
        h.cmd("p2p Send 1 ncclInt8");
        h.cmd("finalize");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn plugin_exports_every_version_and_nothing_else_of_note() {
    let (plugin, _) = built();
    let out = run(Command::new("nm")
        .arg("-D")
        .arg("--defined-only")
        .arg(plugin));
    let syms = String::from_utf8_lossy(&out.stdout);
    for v in VERSIONS {
        assert!(
            syms.lines()
                .any(|l| l.ends_with(&format!(" ncclProfiler_v{v}"))),
            "ncclProfiler_v{v} missing:\n{syms}"
        );
    }
}
