//! The NCCL profiler plugin (`patches/nccl/profiler`) under a C harness that loads it with
//! `dlopen` and replays, for every exported API version (`ncclProfiler_v1` … `_v6`), the event
//! sequence that NCCL version family emits (Group/GroupApi/CollApi/Coll/P2p, the proxy thread's
//! ProxyOp/ProxyStep events with their state records, CeColl) — written from NCCL's sources, see
//! the harness's header comment for tags and lines. No GPU, no NCCL. The progress file is read
//! with mlccd's own reader after every step of a scripted training loop.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

use mlcc_core::job::{Arch, Role};
use mlcc_patches::{ProgressWatch, c_compiler, cache_dir, repo_root, run};
use mlcc_scheduler::progress::ProgressSnapshot;

/// What `built` makes: the plugin, the harness, and the harness linked with `-rdynamic` (an
/// executable that exports its own copy of mlcc_progress.h's state).
struct Built {
    plugin: PathBuf,
    harness: PathBuf,
    harness_rdynamic: PathBuf,
}

/// Builds the plugin (with its own Makefile, as an operator would) and the harness, once.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
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
        let harness_rdynamic = out.join("nccl_profiler_harness_rdynamic");
        for (exe, extra) in [(&harness, None), (&harness_rdynamic, Some("-rdynamic"))] {
            run(Command::new(c_compiler())
                .args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
                .args(extra)
                .arg("-I")
                .arg(root.join("patches/nccl/profiler"))
                .arg("-I")
                .arg(root.join("patches/progress"))
                .arg("-o")
                .arg(exe)
                .arg(root.join("patches/harness/c/nccl_profiler_harness.c"))
                .arg("-ldl"));
        }
        Built {
            plugin,
            harness,
            harness_rdynamic,
        }
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
        let b = built();
        Harness::start_with(&b.harness, b.plugin.as_os_str(), version, env)
    }

    /// `plugin`: what the harness passes to dlopen (a path, or a name for the loader's search).
    fn start_with(
        harness: &Path,
        plugin: &std::ffi::OsStr,
        version: u32,
        env: &[(&str, String)],
    ) -> Harness {
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
            "MLCC_NCCL_MARK_MIN_BYTES",
            "NCCL_ALLGATHERV_ENABLE",
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

/// NCCL's version families and the profiler API each speaks.
const FAMILIES: [(u32, &str); 6] = [
    (1, "2.23"),
    (2, "2.24-2.25"),
    (3, "2.26"),
    (4, "2.27"),
    (5, "2.28"),
    (6, "2.29-2.30"),
];

/// The job the replays model: rank 0 of 2, one GPU on each of 2 nodes, so every ring hop crosses
/// the network. Per rank, a ring moves (the test's model, not NCCL's): all-reduce of S bytes
/// 2(n-1)/n S each way; all-gather / reduce-scatter (n-1) × the per-rank share each way; a
/// broadcast S out of the root and S into every other rank; send/recv their buffer.
const NRANKS: u64 = 2;

/// One operation of a step: the harness command, the network bytes it sends and receives on
/// rank 0, and its kind (for the report).
struct Op {
    cmd: String,
    sent: u64,
    recv: u64,
    kind: &'static str,
}

fn coll(kind: &'static str, func: &str, count: u64, t: &str, root: u64) -> Op {
    let bytes = count * type_size(t);
    let (sent, recv) = match func {
        "AllReduce" => {
            let b = 2 * (NRANKS - 1) * bytes / NRANKS;
            (b, b)
        }
        "AllGather" | "ReduceScatter" => ((NRANKS - 1) * bytes, (NRANKS - 1) * bytes),
        "Broadcast" if root == 0 => (bytes, 0),
        "Broadcast" => (0, bytes),
        // NCCL 2.28+: p2p tasks per peer with the call's per-peer count; the own chunk stays
        // local. (The NCCL patch before this model counted count x sizeof once.)
        "AlltoAll" => ((NRANKS - 1) * bytes, (NRANKS - 1) * bytes),
        "Gather" if root == 0 => (0, (NRANKS - 1) * bytes),
        "Gather" => (bytes, 0),
        "Scatter" if root == 0 => ((NRANKS - 1) * bytes, 0),
        "Scatter" => (0, bytes),
        _ => panic!("{func}"),
    };
    Op {
        cmd: format!("coll {func} {count} {t} {root} {sent} {recv}"),
        sent,
        recv,
        kind,
    }
}

fn p2p(func: &str, count: u64, t: &str) -> Op {
    let bytes = count * type_size(t);
    let send = func == "Send";
    Op {
        cmd: format!("p2p {func} {count} {t} 1 1"),
        sent: if send { bytes } else { 0 },
        recv: if send { 0 } else { bytes },
        kind: if send { "Send" } else { "Recv" },
    }
}

/// An operation on the intra-node communicator (comm 1): no network bytes.
fn local(cmd: &str, kind: &'static str) -> Op {
    Op {
        cmd: cmd.to_string(),
        sent: 0,
        recv: 0,
        kind,
    }
}

/// A training step on comm 0 (2 nodes) and comm 1 (this node only, e.g. tensor parallel).
fn step(v: u32) -> Vec<Op> {
    let mut ops = vec![
        local("use 1", "-"),
        // Tensor-parallel all-reduce first in the step: intra-node, never the marker.
        local(
            "coll AllReduce 4194304 ncclBfloat16 0 0 0",
            "AllReduce (intra-node)",
        ),
        local("use 0", "-"),
        coll("AllReduce", "AllReduce", 262_144, "ncclFloat32", 0),
        coll("AllReduce", "AllReduce", 1_000_001, "ncclFloat16", 0),
        coll("AllReduce", "AllReduce", 30_000, "ncclFloat64", 0),
        coll("Broadcast", "Broadcast", 4096, "ncclFloat32", 0),
        coll("Broadcast", "Broadcast", 1000, "ncclInt64", 1),
        coll("AllGather", "AllGather", 65_536, "ncclBfloat16", 0),
        coll("ReduceScatter", "ReduceScatter", 50_000, "ncclFloat32", 0),
        p2p("Send", 100_000, "ncclInt32"),
        p2p("Recv", 7, "ncclUint8"),
        // The loss, reduced for logging: a few bytes, never the marker.
        coll("AllReduce (metric)", "AllReduce", 1, "ncclFloat32", 0),
    ];
    if v >= 5 {
        ops.push(coll("AlltoAll", "AlltoAll", 30_000, "ncclFloat32", 0));
        ops.push(coll("Gather", "Gather", 5000, "ncclBfloat16", 0));
        ops.push(coll("Scatter", "Scatter", 7000, "ncclInt64", 1));
    }
    if v >= 6 {
        ops.push(local("use 1", "-"));
        ops.push(local(
            "ce AllGather 262144 ncclFloat32",
            "CE AllGather (intra-node)",
        ));
        ops.push(local("use 0", "-"));
    }
    ops
}

/// Starts a harness with comm 0 (rank 0 of 2 on 2 nodes) and comm 1 (rank 0 of 2 on one node).
fn start_job(v: u32, env: &[(&str, String)]) -> Harness {
    let mut h = Harness::start(v, env);
    let m0 = h.cmd("init 0 2 2");
    let m1 = h.cmd("init 0 2 1");
    assert!(m0.starts_with("comm=0 mask=") && m1.starts_with("comm=1 mask="));
    h.cmd("use 0");
    h
}

fn mask_of(reply: &str) -> u32 {
    u32::from_str_radix(reply.rsplit("0x").next().unwrap(), 16).unwrap()
}

#[test]
fn replayed_training_steps_count_network_bytes_per_iteration_in_every_family() {
    let mut table = Vec::new();
    for (v, family) in FAMILIES {
        let dir = tempfile::tempdir().unwrap();
        let job = format!("nccl-v{v}");
        let mut h = Harness::start(v, &env(dir.path(), &job, &[]));
        let mask = mask_of(&h.cmd("init 0 2 2"));
        h.cmd("init 0 2 1");
        h.cmd("use 0");
        // Coll (marks), ProxyOp (v1-v3 byte counts), ProxyStep (v4+ byte counts), v6 CeColl and
        // CollApi (Broadcast); never P2p or Group, which NCCL emits anyway.
        let want = match v {
            1..=3 => 0x0a,
            4 | 5 => 0x1a,
            _ => 0x121a,
        };
        assert_eq!(mask, want, "v{v}");
        let mut watch = ProgressWatch::default();
        // Before training: a barrier (one float: never the marker), the parameter broadcast.
        let before = [
            coll("-", "AllReduce", 1, "ncclFloat32", 0),
            coll("-", "Broadcast", 1 << 20, "ncclFloat32", 0),
        ];
        for op in &before {
            h.cmd(&op.cmd);
        }
        let pre_sent: u64 = before.iter().map(|o| o.sent).sum();
        let pre_recv: u64 = before.iter().map(|o| o.recv).sum();
        let s = snapshot(&mut watch, dir.path());
        assert_eq!(
            (s.iteration, s.bytes_sent, s.bytes_received),
            (0, pre_sent, pre_recv),
            "v{v}: before training"
        );
        let ops = step(v);
        let step_sent: u64 = ops.iter().map(|o| o.sent).sum();
        let step_recv: u64 = ops.iter().map(|o| o.recv).sum();
        let steps = 4u64;
        for k in 1..=steps {
            let (mut sent, mut recv) = (0, 0);
            for op in &ops {
                let before = snapshot(&mut watch, dir.path());
                h.cmd(&op.cmd);
                let after = snapshot(&mut watch, dir.path());
                assert_eq!(
                    (
                        after.bytes_sent - before.bytes_sent,
                        after.bytes_received - before.bytes_received
                    ),
                    (op.sent, op.recv),
                    "v{v} step {k}: {}",
                    op.cmd
                );
                sent += op.sent;
                recv += op.recv;
                if k == 1 && op.kind != "-" {
                    table.push((family, v, op.kind, op.sent, op.recv));
                }
                if op.kind == "AllReduce" && op.cmd.contains(" 262144 ") {
                    assert_eq!(after.iteration, k, "v{v}: the first bucket starts step {k}");
                }
            }
            assert_eq!((sent, recv), (step_sent, step_recv));
            let s = snapshot(&mut watch, dir.path());
            assert_eq!(s.iteration, k, "v{v}");
            assert_eq!(s.sent_this_iteration(), step_sent, "v{v} step {k}");
            assert_eq!(s.bytes_sent, pre_sent + k * step_sent, "v{v}");
            assert_eq!(s.bytes_received, pre_recv + k * step_recv, "v{v}");
            let last = if k == 1 { 0 } else { step_sent };
            assert_eq!(s.last_iteration_bytes, last, "v{v} step {k}");
        }
        let reader = watch.readers.values().next().unwrap();
        let hd = reader.header();
        assert_eq!(hd.job_id, job);
        assert_eq!(hd.arch, Some(Arch::Allreduce), "default for NCCL jobs");
        assert_eq!(hd.role, Role::Worker);
        assert_eq!(hd.rank, 0);
        let world = if v >= 4 { 2 } else { 0 };
        assert_eq!(hd.world_size, world, "v{v}: NCCL passes nranks from v4 on");
        assert_eq!(hd.model_bytes, 4_202_408);
        let path = reader.path().to_path_buf();
        h.cmd("finalize");
        assert!(path.exists(), "v{v}: one communicator is still alive");
        h.cmd("use 1");
        h.cmd("finalize");
        assert!(
            !path.exists(),
            "v{v}: finalize of the last communicator removes the file"
        );
        println!(
            "v{v} (NCCL {family}): {steps} iterations, {step_sent} B sent and {step_recv} B \
             received per iteration, last_iteration_bytes {step_sent}"
        );
    }
    println!("family     api  kind                          sent B   recv B (per iteration)");
    for (family, v, kind, sent, recv) in table {
        println!("{family:<10} v{v}   {kind:<26} {sent:>9} {recv:>8}");
    }
}

#[test]
fn group_mode_marks_explicit_groups_only_from_v5_and_falls_back_before() {
    // The same signature twice in a group: group mode marks the group once.
    let group: [(u64, &str); 3] = [
        (1 << 20, "ncclBfloat16"),
        (12_345, "ncclInt32"),
        (1 << 20, "ncclBfloat16"),
    ];
    // ring all-reduce over 2 ranks: the buffer each way
    let bytes: u64 = group.iter().map(|(c, t)| c * type_size(t)).sum();
    for (v, _) in FAMILIES {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::start(
            v,
            &env(
                dir.path(),
                &format!("group-v{v}"),
                &[("MLCC_NCCL_ITERATION", "group"), ("MLCC_JOB_ARCH", "ps")],
            ),
        );
        let mask = mask_of(&h.cmd("init 0 2 2"));
        assert_eq!(mask & 0x100 != 0, v >= 5, "v{v}: GroupApi from v5 on only");
        assert_eq!(mask & 0x1, 0, "v{v}: Group events come anyway");
        let mut watch = ProgressWatch::default();
        // A warm-up group (on v1-v3 it also shows the communicator's network, as NCCL would).
        h.cmd("group_begin");
        h.cmd("coll AllReduce 1 ncclFloat32 0 4 4");
        h.cmd("group_end");
        for k in 1..=3u64 {
            h.cmd("group_begin");
            for (c, t) in group {
                let b = c * type_size(t);
                h.cmd(&format!("coll AllReduce {c} {t} 0 {b} {b}"));
            }
            h.cmd("group_end");
            // A standalone collective between groups is an implicit group (GroupApi with
            // groupDepth 1 in v5+): no iteration of its own.
            h.cmd("coll AllReduce 1 ncclFloat32 0 4 4");
            let s = snapshot(&mut watch, dir.path());
            if v >= 5 {
                assert_eq!(
                    s.iteration,
                    1 + k,
                    "v{v}: warm-up group, then one per group"
                );
                assert_eq!(s.sent_this_iteration(), bytes + 4, "v{v}");
                let last = if k == 1 { 4 } else { bytes + 4 };
                assert_eq!(s.last_iteration_bytes, last, "v{v} group {k}");
            } else {
                // NCCL <= 2.27 cannot tell an explicit group: first-coll, whose marker (the
                // 2 MiB bucket) comes twice in the group's one kernel plan and marks once.
                assert_eq!(s.iteration, k, "v{v}");
                assert_eq!(s.sent_this_iteration(), bytes + 4, "v{v}");
                let last = if k == 1 { 0 } else { bytes + 4 };
                assert_eq!(s.last_iteration_bytes, last, "v{v} group {k}");
            }
        }
        let hd = watch.readers.values().next().unwrap().header().clone();
        assert_eq!(hd.arch, Some(Arch::Ps), "MLCC_JOB_ARCH is honoured");
        h.cmd("finalize");
    }
}

#[test]
fn a_barrier_first_is_not_the_marker_unless_the_threshold_allows() {
    for (v, _) in FAMILIES {
        for min in [None, Some("1")] {
            let dir = tempfile::tempdir().unwrap();
            let extra: Vec<(&'static str, &str)> = match min {
                Some(m) => vec![("MLCC_NCCL_MARK_MIN_BYTES", m)],
                None => vec![],
            };
            let mut h = start_job(v, &env(dir.path(), &format!("tiny-v{v}"), &extra));
            // v1-v3 learn that comm 0 crosses the network from a first transfer.
            h.cmd("coll AllGather 16 ncclInt8 0 16 16");
            h.cmd("coll AllReduce 1 ncclInt32 0 4 4"); // barrier, once
            for _ in 0..3 {
                h.cmd("coll AllReduce 262144 ncclFloat32 0 1048576 1048576");
            }
            let mut watch = ProgressWatch::default();
            let s = snapshot(&mut watch, dir.path());
            if min.is_none() {
                assert_eq!(s.iteration, 3, "v{v}: the bucket marks");
                assert_eq!(s.sent_this_iteration(), 1_048_576, "v{v}");
                assert_eq!(s.last_iteration_bytes, 1_048_576, "v{v}");
            } else {
                assert_eq!(s.iteration, 1, "v{v}: the barrier became the marker");
            }
            h.cmd("finalize");
            h.cmd("use 1");
            h.cmd("finalize");
        }
    }
}

#[test]
fn bytes_count_when_the_proxy_moves_them_not_at_launch() {
    // NCCL starts and stops Coll/P2p events at launch, before a byte moves: nothing may count
    // until the proxy thread's transfers happen.
    for (v, _) in FAMILIES {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::start(v, &env(dir.path(), &format!("late-v{v}"), &[]));
        h.cmd("init 0 2 2");
        h.cmd("defer on");
        h.cmd("coll AllReduce 262144 ncclFloat32 0 1048576 1048576");
        h.cmd("p2p Recv 1000 ncclInt32 1 1");
        let mut watch = ProgressWatch::default();
        watch.scan(dir.path());
        if let Some(r) = watch.readers.values().next() {
            let s = r.snapshot().unwrap();
            assert_eq!((s.bytes_sent, s.bytes_received), (0, 0), "v{v}: at launch");
        }
        h.cmd("progress");
        let s = snapshot(&mut watch, dir.path());
        assert_eq!(
            (s.bytes_sent, s.bytes_received),
            (1_048_576, 1_048_576 + 4000),
            "v{v}: after the transfers"
        );
        h.cmd("finalize");
    }
}

#[test]
fn graph_replays_count_and_mark_like_launches_but_the_v6_broadcast_only_at_capture() {
    // A CUDA graph replay runs the captured plan's host node (hostStreamPlanTask) again: Group,
    // Coll/P2p and proxy events, but no API events (ncclEnqueueCheck ran at capture only).
    for (v, _) in FAMILIES {
        for agv in [None, Some("0")] {
            if agv.is_some() && v < 6 {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let extra: Vec<(&'static str, &str)> = match agv {
                Some(a) => vec![("NCCL_ALLGATHERV_ENABLE", a)],
                None => vec![],
            };
            let mut h = Harness::start(v, &env(dir.path(), &format!("graph-v{v}"), &extra));
            h.cmd("init 0 2 2");
            // v1-v3 learn that comm 0 crosses the network from a first transfer.
            h.cmd("coll AllGather 16 ncclInt8 0 16 16");
            let mut watch = ProgressWatch::default();
            let s0 = snapshot(&mut watch, dir.path());
            h.cmd("coll AllReduce 262144 ncclFloat32 0 1048576 1048576"); // captured
            for _ in 0..3 {
                h.cmd("replay");
            }
            let s = snapshot(&mut watch, dir.path());
            assert_eq!(s.iteration, 4, "v{v}: capture and every replay mark");
            assert_eq!(s.bytes_sent - s0.bytes_sent, 4 * 1_048_576, "v{v}");
            assert_eq!(s.bytes_received - s0.bytes_received, 4 * 1_048_576, "v{v}");
            assert_eq!(s.last_iteration_bytes, 1_048_576, "v{v}");
            h.cmd("coll Broadcast 1024 ncclFloat32 0 4096 0");
            h.cmd("replay");
            let b = snapshot(&mut watch, dir.path()).bytes_sent - s.bytes_sent;
            // 2.29+ by default: counted from its CollApi event, which a replay does not repeat.
            let want = if v >= 6 && agv.is_none() {
                4096
            } else {
                2 * 4096
            };
            assert_eq!(b, want, "v{v} {agv:?}: a captured broadcast and its replay");
            h.cmd("finalize");
        }
    }
}

#[test]
fn a_process_whose_communicators_stay_on_one_node_writes_nothing_from_v4() {
    for (v, _) in FAMILIES.iter().filter(|f| f.0 >= 4) {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::start(*v, &env(dir.path(), &format!("local-v{v}"), &[]));
        h.cmd("init 3 8 1");
        h.cmd("coll AllReduce 1048576 ncclFloat32 0 0 0");
        h.cmd("coll Broadcast 1024 ncclFloat32 0 0 0");
        h.cmd("p2p Send 100 ncclInt32 1 0");
        if *v >= 6 {
            h.cmd("ce AllGather 1024 ncclFloat32");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "v{v}");
        h.cmd("finalize");
    }
}

#[test]
fn copy_engine_collectives_on_a_multi_node_communicator_count_their_buffer() {
    // 2.30's hierarchical CE path crosses nodes through RMA, with no proxy event.
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(6, &env(dir.path(), "ce", &[]));
    h.cmd("init 1 4 2");
    h.cmd("ce AllGather 1000 ncclBfloat16");
    let mut watch = ProgressWatch::default();
    let s = snapshot(&mut watch, dir.path());
    assert_eq!((s.bytes_sent, s.bytes_received), (2000, 2000));
    h.cmd("finalize");
}

#[test]
fn broadcast_on_2_29_is_counted_from_its_api_event_or_its_proxy_events() {
    // Default (NCCL_ALLGATHERV_ENABLE=1): no Coll or proxy event, the CollApi event counts it.
    // NCCL_ALLGATHERV_ENABLE=0: an ordinary collective, counted from its proxy steps.
    for agv in [None, Some("0")] {
        let dir = tempfile::tempdir().unwrap();
        let extra: Vec<(&'static str, &str)> = match agv {
            Some(a) => vec![("NCCL_ALLGATHERV_ENABLE", a)],
            None => vec![],
        };
        let mut h = Harness::start(6, &env(dir.path(), "bcast", &extra));
        let mask = mask_of(&h.cmd("init 0 2 2"));
        assert_eq!(mask & 0x200 != 0, agv.is_none(), "CollApi only when needed");
        h.cmd("coll Broadcast 1024 ncclFloat32 0 4096 0");
        h.cmd("coll Broadcast 10 ncclFloat64 1 0 80");
        let mut watch = ProgressWatch::default();
        let s = snapshot(&mut watch, dir.path());
        assert_eq!((s.bytes_sent, s.bytes_received), (4096, 80), "{agv:?}");
        h.cmd("finalize");
    }
}

#[test]
fn without_a_job_id_the_plugin_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    for (v, _) in FAMILIES {
        let mut h = Harness::start(v, &[("MLCC_SHM_DIR", dir.path().display().to_string())]);
        h.cmd("init 0 2 2");
        h.cmd("coll AllReduce 1024 ncclFloat32 0 4096 4096");
        h.cmd("p2p Send 1 ncclInt8 1 1");
        h.cmd("finalize");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn plugin_exports_every_version_and_nothing_else_of_note() {
    let out = run(Command::new("nm")
        .arg("-D")
        .arg("--defined-only")
        .arg(&built().plugin));
    let syms = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    names.sort_unstable();
    // The six tables NCCL looks for and explicit mode's entry point; the progress state stays
    // hidden, so the plugin never binds to an application's copy of it.
    let mut want: Vec<String> = FAMILIES
        .iter()
        .map(|(v, _)| format!("ncclProfiler_v{v}"))
        .collect();
    want.push("mlcc_nccl_profiler_iteration_begin".into());
    want.sort_unstable();
    assert_eq!(names, want, "{syms}");
}

#[test]
fn explicit_mode_marks_reach_the_plugin_nccl_loaded_rtld_local() {
    // The harness is the application: an executable that dlopens the plugin RTLD_NOW |
    // RTLD_LOCAL as NCCL does and marks iterations with mlcc_nccl_iteration_begin()
    // (mlcc_nccl_iteration.h). mlcc_iteration_begin() from mlcc_progress.h acts on the
    // executable's own state and must change nothing, exported (-rdynamic) or not.
    let b = built();
    let by_path = b.plugin.as_os_str().to_owned();
    let lib_dir = b.plugin.parent().unwrap().display().to_string();
    let mut runs: Vec<(u32, &Path, std::ffi::OsString, bool)> = FAMILIES
        .iter()
        .map(|(v, _)| (*v, b.harness.as_path(), by_path.clone(), false))
        .collect();
    // A bare name found through the loader's search path (NCCL's
    // "libnccl-profiler-<NCCL_PROFILER_PLUGIN>.so"), and an executable exporting its state.
    runs.push((
        6,
        b.harness.as_path(),
        "libnccl-profiler-mlcc.so".into(),
        true,
    ));
    runs.push((6, b.harness_rdynamic.as_path(), by_path.clone(), false));
    runs.push((2, b.harness_rdynamic.as_path(), by_path.clone(), false));
    let step = [
        (
            "coll AllReduce 262144 ncclFloat32 0 1048576 1048576",
            1_048_576u64,
        ),
        (
            "coll AllReduce 262144 ncclFloat32 0 1048576 1048576",
            1_048_576,
        ),
        ("coll AllGather 1000 ncclInt32 0 4000 4000", 4000),
        ("p2p Send 100 ncclInt32 1 1", 400),
    ];
    let step_sent: u64 = step.iter().map(|s| s.1).sum();
    for (v, harness, plugin, search) in runs {
        let what = format!("v{v} {} {plugin:?}", harness.display());
        let dir = tempfile::tempdir().unwrap();
        let mut e = env(
            dir.path(),
            &format!("explicit-v{v}"),
            &[("MLCC_NCCL_ITERATION", "explicit")],
        );
        if search {
            e.push(("LD_LIBRARY_PATH", lib_dir.clone()));
        }
        let mut h = Harness::start_with(harness, &plugin, v, &e);
        // NCCL loads the plugin at the first communicator's init: before, nothing to find.
        h.cmd("unload");
        assert_eq!(h.cmd("mark"), "-1", "{what}: plugin not loaded yet");
        h.cmd("load");
        assert_eq!(h.cmd("mark"), "0", "{what}: no communicator yet");
        h.cmd("init 0 2 2");
        // A barrier before training (on v1-v3 the file opens at this first event with a rank).
        h.cmd("coll AllReduce 1 ncclFloat32 0 4 4");
        assert_eq!(h.cmd("mark_progress_h"), "", "{what}");
        h.cmd(step[0].0);
        let mut watch = ProgressWatch::default();
        let s = snapshot(&mut watch, dir.path());
        assert_eq!(
            (s.iteration, s.bytes_sent),
            (0, 4 + 1_048_576),
            "{what}: neither mlcc_progress.h's mark nor the plugin itself marks"
        );
        for k in 1..=3u64 {
            assert_eq!(h.cmd("mark"), "1", "{what} step {k}");
            // The same all-reduce twice in the step: explicit mode marks only where told to.
            for (c, _) in step {
                h.cmd(c);
            }
            let s = snapshot(&mut watch, dir.path());
            assert_eq!(s.iteration, k, "{what}");
            assert_eq!(s.sent_this_iteration(), step_sent, "{what} step {k}");
            let last = if k == 1 { 0 } else { step_sent };
            assert_eq!(s.last_iteration_bytes, last, "{what} step {k}");
            h.cmd("mark_progress_h");
            assert_eq!(snapshot(&mut watch, dir.path()).iteration, k, "{what}");
        }
        let path = watch.readers.values().next().unwrap().path().to_path_buf();
        h.cmd("finalize");
        assert!(!path.exists(), "{what}");
        // NCCL dlcloses the plugin after its last communicator's finalize: the reference the
        // application's lookup keeps leaves it mapped (else this call would jump into an
        // unmapped library), and the next init's dlopen gets the same object back.
        h.cmd("unload");
        assert_eq!(h.cmd("mark"), "0", "{what}: every communicator finalized");
        h.cmd("load");
        h.cmd("init 0 2 2");
        h.cmd("coll AllReduce 1 ncclFloat32 0 4 4");
        assert_eq!(h.cmd("mark"), "1", "{what}: after a new init");
        h.cmd("finalize");
    }
    // Other modes ignore the application's mark.
    for (v, mode) in [(6, "first-coll"), (5, "group"), (1, "first-coll")] {
        let dir = tempfile::tempdir().unwrap();
        let mut h = Harness::start(
            v,
            &env(dir.path(), "not-explicit", &[("MLCC_NCCL_ITERATION", mode)]),
        );
        h.cmd("init 0 2 2");
        h.cmd("coll AllReduce 1 ncclFloat32 0 4 4");
        assert_eq!(h.cmd("mark"), "-2", "v{v} {mode}");
        let mut watch = ProgressWatch::default();
        assert_eq!(snapshot(&mut watch, dir.path()).iteration, 0, "v{v} {mode}");
        h.cmd("finalize");
    }
}
