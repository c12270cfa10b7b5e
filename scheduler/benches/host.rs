//! The decision work of one slot (docs/design.md §11: under 5 ms at 64 local flows): observe + plan
//! of [`HostScheduler`] with N local flows, each to its own host through one emulated switch
//! that answers with a busy K-slot load on every link. `host_slot` takes its flows from jobs
//! added by hand; `host_slot_processes` from N ring workers' progress files and connections,
//! as mlccd on a training host does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group};
use mlcc_core::job::{Arch, Job, Member, Role};
use mlcc_core::topology::TopologyBuilder;
use mlcc_core::units::{Bytes, parse_rate};
use mlcc_core::{Slot, SlotConfig};
use mlcc_proto::v1 as pb;
use mlcc_scheduler::datapath::{SocketKey, SocketStats};
use mlcc_scheduler::host::{FeedbackAnswers, HostConfig, HostScheduler, Observation, ProcessObs};
use mlcc_scheduler::progress::{ProgressHeader, ProgressSnapshot};
use mlcc_scheduler::sockets::TcpConn;

/// mlccd's allocator (the `mimalloc` feature, on by default): the slot's many small blocks cost
/// what they cost in the daemon, not what glibc's malloc would make of them.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mlcc_alloc::MlccAlloc = mlcc_alloc::MlccAlloc;

const K: usize = 10;

fn ip(n: usize) -> String {
    format!("10.0.{}.{}", n / 200, n % 200 + 1)
}

struct Setup {
    host: HostScheduler,
    keys: Vec<SocketKey>,
    /// Ring workers on h0 (none: the flows are admin jobs').
    processes: Vec<ProcessObs>,
}

/// Where the flows come from.
#[derive(Clone, Copy)]
enum Jobs {
    Admin,
    ProgressFiles,
}

fn setup(flows: usize, jobs: Jobs) -> Setup {
    let mut b = TopologyBuilder::new();
    let cap = parse_rate("10Gbit").unwrap();
    b.add_switch("tor", 0, Some("127.0.0.1:1".into()));
    for i in 0..=flows {
        let h = format!("h{i}");
        b.add_host(&h, Some(ip(i).parse().unwrap()), None);
        b.add_duplex(&h, "tor", cap);
    }
    let topo = Arc::new(b.build().unwrap());
    let slots = SlotConfig::new(Duration::from_millis(60), K).unwrap();
    let mut host = HostScheduler::new(HostConfig::new("h0", slots), topo.clone()).unwrap();
    let mut keys = Vec::new();
    let mut processes = Vec::new();
    for i in 1..=flows {
        let out = TcpConn {
            local: format!("{}:{}", ip(0), 40000 + i).parse().unwrap(),
            remote: format!("{}:5000", ip(i)).parse().unwrap(),
            accepted: false,
        };
        keys.push(SocketKey::new(1, out.local, out.remote));
        if let Jobs::ProgressFiles = jobs {
            processes.push(ring_worker(i, out));
            continue;
        }
        host.add_job(Job {
            id: format!("job{i}"),
            arch: Arch::Allreduce,
            members: vec![
                Member {
                    host: "h0".into(),
                    role: Role::Worker,
                    rank: 0,
                },
                Member {
                    host: format!("h{i}"),
                    role: Role::Worker,
                    rank: 1,
                },
            ],
            model_bytes: Bytes(1_000_000_000_000),
        })
        .unwrap();
    }
    Setup {
        host,
        keys,
        processes,
    }
}

/// Rank 0 of a two-worker ring job on h0, sending to h`i` on `out` and receiving on a
/// connection h`i` opened.
fn ring_worker(i: usize, out: TcpConn) -> ProcessObs {
    let header = ProgressHeader {
        job_id: format!("job{i}"),
        arch: Some(Arch::Allreduce),
        role: Role::Worker,
        rank: 0,
        world_size: 2,
        model_bytes: 1_000_000_000_000,
        pid: 1000 + i as u32,
        start_time_ns: 0,
        cc_name: String::new(),
        total_iterations: 0,
    };
    let inbound = TcpConn {
        local: format!("{}:{}", ip(0), 20000 + i).parse().unwrap(),
        remote: format!("{}:41000", ip(i)).parse().unwrap(),
        accepted: true,
    };
    ProcessObs {
        header,
        snapshot: ProgressSnapshot::default(),
        conns: vec![out, inbound],
    }
}

/// One slot: datapath counters in, observe, the switch's answer, plan.
fn slot(s: &mut Setup, n: u64) -> usize {
    let stats = s
        .keys
        .iter()
        .map(|k| {
            let acked = n * 50_000_000;
            (
                *k,
                SocketStats {
                    bytes_sent: acked,
                    bytes_acked: acked,
                    ..Default::default()
                },
            )
        })
        .collect();
    // The library hands its sockets more than they acked: every flow has data.
    let processes = s
        .processes
        .iter()
        .map(|p| ProcessObs {
            snapshot: ProgressSnapshot {
                bytes_sent: (n + 1) * 50_000_000,
                ..p.snapshot
            },
            ..p.clone()
        })
        .collect();
    let req = s.host.observe(
        Slot(1000 + n),
        &Observation {
            processes,
            stats: Some(stats),
        },
    );
    let answers: FeedbackAnswers = req
        .per_switch
        .into_iter()
        .map(|(name, batch)| {
            let flows = batch
                .items
                .into_iter()
                .map(|q| pb::FlowFeedback {
                    links: q
                        .links
                        .into_iter()
                        .map(|l| pb::LinkLoad {
                            link: l,
                            capacity_bytes_per_sec: 1.25e9,
                            load_bytes_per_sec: (0..K).map(|t| (t as f64) * 1e8).collect(),
                            committed_bytes_per_sec: None,
                        })
                        .collect(),
                    flow_id: q.flow_id,
                })
                .collect();
            (
                name,
                pb::FetchFeedbackReply {
                    switch_slot: 1000 + n,
                    from_slot: 1000 + n,
                    flows,
                    rejected: Vec::new(),
                    switch_unix_ns: 0,
                },
            )
        })
        .collect::<HashMap<_, _>>();
    s.host.plan(&answers).orders.len()
}

fn bench(c: &mut Criterion) {
    bench_group(c, "host_slot", Jobs::Admin);
    bench_group(c, "host_slot_processes", Jobs::ProgressFiles);
}

fn bench_group(c: &mut Criterion, name: &str, jobs: Jobs) {
    let mut g = c.benchmark_group(name);
    for flows in [8usize, 64, 512] {
        let mut s = setup(flows, jobs);
        let mut n = 0;
        // Warm: flows exist and have a plan.
        for _ in 0..3 {
            n += 1;
            assert_eq!(slot(&mut s, n), flows);
        }
        g.bench_with_input(BenchmarkId::from_parameter(flows), &flows, |b, _| {
            b.iter(|| {
                n += 1;
                slot(&mut s, n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

/// `HOST_BENCH_SLOTS=N [HOST_BENCH_FLOWS=512] [HOST_BENCH_JOBS=admin]`: runs N slots of one
/// group and exits, for a profiler's count of instructions per slot. Criterion runs as many
/// slots as fit its time, and a slot's work moves with the flows' progress, so counts from
/// criterion runs of two builds do not compare; N fixed slots do.
fn profile(slots: u64) {
    let flows = std::env::var("HOST_BENCH_FLOWS").map_or(512, |v| v.parse().expect("flows"));
    let jobs = match std::env::var("HOST_BENCH_JOBS").as_deref() {
        Ok("admin") => Jobs::Admin,
        _ => Jobs::ProgressFiles,
    };
    let mut s = setup(flows, jobs);
    for n in 1..=slots {
        assert_eq!(slot(&mut s, n), flows);
    }
}

fn main() {
    if let Ok(n) = std::env::var("HOST_BENCH_SLOTS") {
        profile(n.parse().expect("HOST_BENCH_SLOTS: a number of slots"));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
