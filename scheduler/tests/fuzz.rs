//! Fuzz targets for what mlccd reads from others: progress files (written by any local
//! process), Peer Exchange calls (any host), Admin calls (mlccctl), switch replies (a buggy or
//! rogue switch) and its config file.
//!
//! bolero harnesses: under plain `cargo test` (stable) each replays its kept corpus in
//! `tests/__fuzz__/<target>/{corpus,crashes}` and then runs random inputs for
//! `BOLERO_RANDOM_TEST_TIME_MS` (1 s if unset); `scripts/fuzz.sh` sets the CI budget. The RPC
//! handlers are called through the generated service traits, as tonic calls them.
//! Properties: no panic; refusals are errors with a message; state stays usable afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bolero::{TypeGenerator, check, produce};
use mlcc_core::slot::{Slot, SlotConfig};
use mlcc_core::topology::Topology;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::admin_server::Admin;
use mlcc_proto::v1::peer_server::Peer;
use mlcc_scheduler::admin::AdminService;
use mlcc_scheduler::config::DaemonArgs;
use mlcc_scheduler::daemon::{LoopStatus, PeerService, Shared};
use mlcc_scheduler::datapath::{SocketKey, SocketStats};
use mlcc_scheduler::host::{FeedbackAnswers, HostConfig, HostScheduler, Observation};
use mlcc_scheduler::metrics::Metrics;
use mlcc_scheduler::monitor::ProgressDir;
use mlcc_scheduler::progress::{ProgressReader, abi, valid_job_id};
use prost::Message;
use tonic::Request;

#[path = "../../core/tests/support/toml_doc.rs"]
mod toml_doc;

/// A fresh scratch directory per target and process.
fn scratch(target: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mlcc-fuzz-{target}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------------------------------------
// Progress files

/// A valid file of job "job", rank 0, pid `pid`, as the C writer lays it out.
fn valid_file(pid: u32) -> Vec<u8> {
    let mut b = vec![0u8; abi::FILE_SIZE];
    b[0..8].copy_from_slice(abi::MAGIC);
    b[8..12].copy_from_slice(&abi::VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(abi::HEADER_SIZE as u32).to_le_bytes());
    b[16..19].copy_from_slice(b"job");
    b[104..108].copy_from_slice(&pid.to_le_bytes());
    b[108..112].copy_from_slice(&(abi::FILE_SIZE as u32).to_le_bytes());
    b
}

#[derive(Debug, TypeGenerator)]
enum Corrupt {
    /// Overwrites bytes at an offset (header and counters are in the first 512).
    Set {
        at: u16,
        #[generator(produce::<Vec<u8>>().with().len(1usize..8))]
        bytes: Vec<u8>,
    },
    Truncate(u16),
    Extend(u16),
    /// The sequence counter left odd: a writer that died mid-update.
    OddSeq,
}

#[derive(Debug, TypeGenerator)]
struct ProgressInput {
    /// Name the file after its header (a bad name is refused before anything else is read).
    matching_name: bool,
    #[generator(produce::<String>().with().len(0usize..24))]
    name: String,
    #[generator(produce::<Vec<Corrupt>>().with().len(0usize..4))]
    corrupt: Vec<Corrupt>,
}

fn check_progress(dir: &Path, name: &str, bytes: &[u8]) {
    // A name with '/' or NUL cannot be a file in `dir`; the reader only sees real entries.
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return;
    }
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    match ProgressReader::open(&path) {
        Ok(r) => {
            assert_eq!(bytes.len(), abi::FILE_SIZE);
            assert!(valid_job_id(&r.header().job_id), "{:?}", r.header());
            // Either a consistent snapshot or "busy": never a panic or a hang.
            let _ = r.snapshot();
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // The directory scan the daemon runs every slot.
    let mut pd = ProgressDir::new(dir);
    let _ = pd.rescan();
    let _ = pd.read();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn progress_file() {
    let dir = scratch("progress_file");
    check!().with_type::<ProgressInput>().for_each(|p| {
        let mut b = valid_file(4242);
        for c in &p.corrupt {
            match c {
                Corrupt::Set { at, bytes } => {
                    let at = *at as usize % abi::FILE_SIZE;
                    for (i, v) in bytes.iter().enumerate() {
                        if let Some(x) = b.get_mut(at + i) {
                            *x = *v;
                        }
                    }
                }
                Corrupt::Truncate(n) => b.truncate(*n as usize % (abi::FILE_SIZE + 1)),
                Corrupt::Extend(n) => b.resize(b.len() + 1 + *n as usize % 4096, 0xa5),
                Corrupt::OddSeq => {
                    if let Some(s) = b.get_mut(abi::HEADER_SIZE) {
                        *s |= 1;
                    }
                }
            }
        }
        let name = if p.matching_name {
            "mlcc.job.worker.0.4242".to_string()
        } else {
            format!("mlcc.{}", p.name)
        };
        check_progress(&dir, &name, &b);
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// Arbitrary bytes under the name a valid file would have.
#[test]
fn progress_bytes() {
    let dir = scratch("progress_bytes");
    check!().for_each(|b: &[u8]| check_progress(&dir, "mlcc.job.worker.0.4242", b));
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Peer, Admin and switch replies

struct Fixture {
    rt: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    slot: Mutex<u64>,
}

const START: u64 = 1_000_000;

fn fixture() -> Fixture {
    // With an emulator address, so that plans are published to the switch.
    let topo = Arc::new(
        Topology::from_toml_str(
            "[generate]\nkind = \"single-switch\"\nhosts = 4\nhost_link = \"8Gbit\"\n[emulators]\n",
        )
        .unwrap(),
    );
    let slots = SlotConfig::new(std::time::Duration::from_millis(20), 4).unwrap();
    let host = HostScheduler::new(HostConfig::new("h1", slots), topo).unwrap();
    let shared = Arc::new(Shared {
        host: Mutex::new(host),
        metrics: Arc::new(Metrics::new()),
        status: Mutex::new(LoopStatus::default()),
        started: Instant::now(),
        enforcing: false,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Fixture {
        rt,
        shared,
        slot: Mutex::new(START),
    }
}

fn name(i: u8) -> String {
    ["h1", "h2", "h3", "h4", "h9", "", "sw1", "a/b>c"][i as usize % 8].to_string()
}

fn flow_id(job: u8, src: u8, dst: u8, role: u8) -> String {
    let role = ["agg", "bcast", "ring", "x"][role as usize % 4];
    // One job in four is a learned one, whose reports carry sockets.
    let job = match job % 4 {
        3 => "learned-h1-7".to_string(),
        j => format!("j{j}"),
    };
    format!("{job}/{}>{}/{role}", name(src), name(dst))
}

#[derive(Debug, TypeGenerator)]
struct MemberIn {
    host: u8,
    role: u8,
    rank: u8,
}

#[derive(Debug, TypeGenerator)]
struct FlowIn {
    job: u8,
    src: u8,
    dst: u8,
    role: u8,
    sent: u64,
    finish: u64,
    iteration: u64,
    rate: f64,
    slot: u64,
    next_rate: f64,
    learned_bytes: u64,
    /// (local, remote): any strings, well-formed addresses or not.
    #[generator(produce::<Vec<(String, String)>>().with().len(0usize..3))]
    sockets: Vec<(String, String)>,
}

impl FlowIn {
    fn progress(&self) -> pb::FlowProgress {
        pb::FlowProgress {
            flow_id: flow_id(self.job, self.src, self.dst, self.role),
            sent_bytes: self.sent,
            finish_bytes: self.finish,
            planned_rate_bytes_per_sec: self.rate,
            iteration: self.iteration,
            slot: self.slot,
            next_rate_bytes_per_sec: self.next_rate,
            sockets: self
                .sockets
                .iter()
                .map(|(local, remote)| pb::SocketPair {
                    local: local.clone(),
                    remote: remote.clone(),
                })
                .collect(),
            learned_bytes_per_iteration: self.learned_bytes,
        }
    }
}

#[derive(Debug, TypeGenerator)]
struct LinkIn {
    link: u8,
    capacity: f64,
    #[generator(produce::<Vec<f64>>().with().len(0usize..7))]
    load: Vec<f64>,
}

#[derive(Debug, TypeGenerator)]
struct SocketIn {
    dst: u8,
    port: u16,
    sent: u64,
    acked: u64,
    rate: u64,
    srtt_us: u32,
    queued: Option<u64>,
}

#[derive(Debug, TypeGenerator)]
enum Op {
    AddJob {
        job: u8,
        arch: u8,
        #[generator(produce::<Vec<MemberIn>>().with().len(0usize..10))]
        members: Vec<MemberIn>,
        model_bytes: u64,
    },
    RemoveJob(u8),
    Exchange {
        sender: u8,
        #[generator(produce::<Vec<FlowIn>>().with().len(0usize..6))]
        flows: Vec<FlowIn>,
    },
    /// One slot: observe, then plan with what "the switch" answered for each asked flow.
    Slot {
        skip: u8,
        switch_slot: u64,
        #[generator(produce::<Vec<LinkIn>>().with().len(0usize..4))]
        links: Vec<LinkIn>,
        answer: bool,
        /// Datapath counters of sockets towards h2..h4: what lets admin jobs' flows be seen.
        #[generator(produce::<Vec<SocketIn>>().with().len(0usize..4))]
        sockets: Vec<SocketIn>,
    },
    List(u8),
    /// A request decoded from arbitrary bytes: kind, then the message.
    Raw {
        kind: u8,
        #[generator(produce::<Vec<u8>>().with().len(0usize..64))]
        bytes: Vec<u8>,
    },
}

/// How deep `host_calls` reaches (printed with `--nocapture`): jobs the Admin service accepted
/// and flow decisions the planner made on fuzzed switch answers.
static JOBS_ADDED: AtomicUsize = AtomicUsize::new(0);
static FLOWS_PLANNED: AtomicUsize = AtomicUsize::new(0);

fn run(f: &Fixture, op: &Op) {
    let admin = AdminService::new(f.shared.clone());
    let peer = PeerService::new(f.shared.clone(), tokio::sync::watch::channel(false).1);
    match op {
        Op::AddJob {
            job,
            arch,
            members,
            model_bytes,
        } => {
            let req = pb::AddJobRequest {
                job: Some(pb::Job {
                    job_id: format!("j{}", job % 3),
                    // Mostly valid enum values, so that jobs get accepted and planned.
                    architecture: [1, 2, 1, 2, 0, -1, 9][*arch as usize % 7],
                    members: members
                        .iter()
                        .map(|m| pb::JobMember {
                            host: name(m.host % 4 + (m.host / 128) * 4),
                            role: [1, 2, 1, 2, 3, 0, 9][m.role as usize % 7],
                            rank: u32::from(m.rank % 6),
                        })
                        .collect(),
                    model_bytes: *model_bytes,
                    ..Default::default()
                }),
            };
            match f
                .rt
                .block_on(async { admin.add_job(Request::new(req)).await.map(|_| ()) })
            {
                Ok(()) => {
                    JOBS_ADDED.fetch_add(1, Relaxed);
                }
                Err(s) => assert!(!s.message().is_empty()),
            }
        }
        Op::RemoveJob(j) => {
            let req = pb::RemoveJobRequest {
                job_id: format!("j{}", j % 3),
            };
            f.rt.block_on(async { admin.remove_job(Request::new(req)).await.map(|_| ()) })
                .unwrap();
        }
        Op::Exchange { sender, flows } => {
            let req = pb::ExchangeRequest {
                sender_host: name(*sender),
                slot: *f.slot.lock().unwrap(),
                flows: flows.iter().map(FlowIn::progress).collect(),
            };
            let r =
                f.rt.block_on(peer.exchange(Request::new(req)))
                    .unwrap()
                    .into_inner();
            assert_eq!(r.receiver_host, "h1");
        }
        Op::Slot {
            skip,
            switch_slot,
            links,
            answer,
            sockets,
        } => {
            let mut slot = f.slot.lock().unwrap();
            *slot += u64::from(skip % 3);
            let mut host = f.shared.host();
            let stats = sockets
                .iter()
                .map(|k| {
                    let ip = |h: u8| std::net::IpAddr::from([10, 0, 0, h]);
                    let key = SocketKey::new(
                        1,
                        std::net::SocketAddr::new(ip(1), k.port),
                        std::net::SocketAddr::new(ip(k.dst % 4 + 2), 9000),
                    );
                    let st = SocketStats {
                        bytes_sent: k.sent,
                        bytes_acked: k.acked,
                        retransmits: 0,
                        srtt: std::time::Duration::from_micros(k.srtt_us.into()),
                        min_rtt: None,
                        delivery_rate_bytes_per_sec: k.rate,
                        queued_bytes: k.queued,
                        ..SocketStats::default()
                    };
                    (key, st)
                })
                .collect();
            let obs = Observation {
                processes: Vec::new(),
                stats: Some(stats),
            };
            let asked = host.observe(Slot(*slot), &obs);
            let mut answers = FeedbackAnswers::new();
            if *answer {
                for (sw, batch) in asked.per_switch {
                    let flows = batch
                        .items
                        .iter()
                        .map(|q| pb::FlowFeedback {
                            flow_id: q.flow_id.clone(),
                            links: links
                                .iter()
                                .map(|l| pb::LinkLoad {
                                    link: q
                                        .links
                                        .get(l.link as usize % (q.links.len() + 1))
                                        .cloned()
                                        .unwrap_or_else(|| "sw1->h9".into()),
                                    capacity_bytes_per_sec: l.capacity,
                                    load_bytes_per_sec: l.load.clone(),
                                    committed_bytes_per_sec: Some(l.capacity),
                                })
                                .collect(),
                        })
                        .collect();
                    answers.insert(
                        sw,
                        pb::FetchFeedbackReply {
                            switch_slot: *switch_slot % 4 + *slot - 2,
                            from_slot: *slot,
                            flows,
                            rejected: Vec::new(),
                            switch_unix_ns: 0,
                        },
                    );
                }
            }
            let plan = host.plan(&answers);
            assert_eq!(plan.slot, Slot(*slot));
            FLOWS_PLANNED.fetch_add(
                plan.schedules.values().map(|b| b.items.len()).sum(),
                Relaxed,
            );
        }
        Op::List(which) => {
            let ok = match which % 6 {
                0 => f.rt.block_on(async {
                    admin
                        .status(Request::new(pb::StatusRequest {}))
                        .await
                        .map(|_| ())
                }),
                1 => f.rt.block_on(async {
                    admin
                        .list_jobs(Request::new(pb::ListJobsRequest {}))
                        .await
                        .map(|_| ())
                }),
                2 => f.rt.block_on(async {
                    admin
                        .list_flows(Request::new(pb::ListFlowsRequest::default()))
                        .await
                        .map(|_| ())
                }),
                3 => f.rt.block_on(async {
                    admin
                        .list_links(Request::new(pb::ListLinksRequest {}))
                        .await
                        .map(|_| ())
                }),
                4 => f.rt.block_on(async {
                    admin
                        .list_switches(Request::new(pb::ListSwitchesRequest {}))
                        .await
                        .map(|_| ())
                }),
                _ => Ok(()),
            };
            ok.unwrap();
        }
        Op::Raw { kind, bytes } => raw(f, *kind, bytes),
    }
}

/// One Peer or Admin call whose request prost decoded from arbitrary bytes.
fn raw(f: &Fixture, kind: u8, bytes: &[u8]) {
    let admin = AdminService::new(f.shared.clone());
    let peer = PeerService::new(f.shared.clone(), tokio::sync::watch::channel(false).1);
    let r = match kind % 4 {
        0 => match pb::ExchangeRequest::decode(bytes) {
            Ok(req) => f.rt.block_on(peer.exchange(Request::new(req))).map(|_| ()),
            Err(_) => return,
        },
        1 => match pb::AddJobRequest::decode(bytes) {
            Ok(req) => f.rt.block_on(admin.add_job(Request::new(req))).map(|_| ()),
            Err(_) => return,
        },
        2 => match pb::RemoveJobRequest::decode(bytes) {
            Ok(req) => {
                f.rt.block_on(admin.remove_job(Request::new(req)))
                    .map(|_| ())
            }
            Err(_) => return,
        },
        _ => match pb::ListFlowsRequest::decode(bytes) {
            Ok(req) => {
                f.rt.block_on(admin.list_flows(Request::new(req)))
                    .map(|_| ())
            }
            Err(_) => return,
        },
    };
    if let Err(s) = r {
        assert!(!s.message().is_empty());
    }
}

/// Sequences of Peer and Admin calls and slots planned on arbitrary switch answers.
#[test]
fn host_calls() {
    check!()
        .with_generator(produce::<Vec<Op>>().with().len(0usize..12))
        .for_each(|ops| {
            // Fresh state per input, so a failure replays (and shrinks) alone.
            let f = fixture();
            for op in ops {
                run(&f, op);
            }
        });
    eprintln!(
        "host_calls: {} jobs added, {} schedule items published",
        JOBS_ADDED.load(Relaxed),
        FLOWS_PLANNED.load(Relaxed)
    );
}

/// Peer and Admin requests as bytes: `[kind][len][message]` records.
#[test]
fn peer_admin_bytes() {
    let f = std::panic::AssertUnwindSafe(fixture());
    check!().for_each(|mut b: &[u8]| {
        while let [kind, len, rest @ ..] = b {
            let len = (*len as usize).min(rest.len());
            raw(&f, *kind, &rest[..len]);
            b = &rest[len..];
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Config

fn check_config(path: &Path, text: &[u8]) -> bool {
    std::fs::write(path, text).unwrap();
    let args = DaemonArgs {
        config: Some(path.to_path_buf()),
        ..Default::default()
    };
    match args.resolve() {
        Ok(c) => {
            assert!(c.rpc_deadline < c.policy.slots.tau() && !c.rpc_deadline.is_zero());
            assert!(c.policy.eta.is_finite() && c.policy.eta >= 0.0);
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

const MLCCD_SEEDS: &[&str] = &[
    include_str!("../../deploy/mlccd.example.toml"),
    "host = \"h1\"\ntopology = \"t.toml\"\ntau = \"30ms\"\nrpc_deadline = \"10ms\"\npeer_listen = \"127.0.0.1:7000\"\npeer_port = 7000\n[peers]\nh2 = \"127.0.0.1:7001\"\n",
];

const MLCCD_WORDS: toml_doc::Vocabulary = toml_doc::Vocabulary {
    tables: &["peers", "x"],
    keys: &[
        "host",
        "topology",
        "shm_dir",
        "peer_listen",
        "peer_port",
        "admin_socket",
        "metrics_listen",
        "tau",
        "horizon",
        "eta",
        "feedback_mode",
        "rpc_deadline",
        "datapath",
        "bpf_pin_dir",
        "bpf_cc_name",
        "tcp_tso_rtt_log",
        "rto_floor",
        "fallback",
        "ps_scheduler_port",
        "log_format",
        "h2",
    ],
    strings: &[
        "h1",
        "t.toml",
        "0.0.0.0:50071",
        "[::1]:1",
        "127.0.0.1:99999",
        "60ms",
        "0ms",
        "60ms",
        "59.999999ms",
        "1s",
        "9ms",
        "precedence",
        "all-others",
        "bpf",
        "dry-run",
        "human",
        "json",
        "cubic",
        "reno",
        "",
    ],
};

#[test]
fn mlccd_config_mutated() {
    let dir = scratch("mlccd_config_mutated");
    let path = dir.join("mlccd.toml");
    check!().with_type::<toml_doc::Mutated>().for_each(|m| {
        check_config(&path, m.render(MLCCD_SEEDS, &MLCCD_WORDS).as_bytes());
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mlccd_config_bytes() {
    let dir = scratch("mlccd_config_bytes");
    let path = dir.join("mlccd.toml");
    check!().for_each(|b: &[u8]| {
        check_config(&path, b);
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// Found by `host_calls`: the acked bytes of a flow's sockets were summed with `+`, which
/// panicked (debug) or wrapped (release) on counters near u64::MAX.
#[test]
fn acked_counters_near_the_limit_do_not_overflow() {
    let f = fixture();
    run(
        &f,
        &Op::AddJob {
            job: 0,
            arch: 0, // allreduce
            members: (0..2)
                .map(|i| MemberIn {
                    host: i,
                    role: 0, // worker
                    rank: i,
                })
                .collect(),
            model_bytes: 1 << 30,
        },
    );
    assert_eq!(f.shared.host().admin_jobs().count(), 1);
    for _ in 0..2 {
        let socket = |port| SocketIn {
            dst: 0, // h2
            port,
            sent: u64::MAX,
            acked: u64::MAX - 1,
            rate: u64::MAX,
            srtt_us: u32::MAX,
            queued: Some(u64::MAX),
        };
        run(
            &f,
            &Op::Slot {
                skip: 1,
                switch_slot: 0,
                links: Vec::new(),
                answer: false,
                sockets: vec![socket(1000), socket(1001)],
            },
        );
    }
    assert!(f.shared.host().flows().count() > 0);
}
