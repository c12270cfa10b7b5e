//! The decision work of one slot (docs/design.md §11: under 5 ms at 64 local flows): observe + plan
//! of [`HostScheduler`] with N local flows, each to its own host through one emulated switch
//! that answers with a busy K-slot load on every link.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mlcc_core::job::{Arch, Job, Member, Role};
use mlcc_core::topology::TopologyBuilder;
use mlcc_core::units::{Bytes, parse_rate};
use mlcc_core::{Slot, SlotConfig};
use mlcc_proto::v1 as pb;
use mlcc_scheduler::datapath::{SocketKey, SocketStats};
use mlcc_scheduler::host::{FeedbackAnswers, HostConfig, HostScheduler, Observation};

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
}

fn setup(flows: usize) -> Setup {
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
    for i in 1..=flows {
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
        keys.push(SocketKey::new(
            1,
            format!("{}:40000", ip(0)).parse().unwrap(),
            format!("{}:5000", ip(i)).parse().unwrap(),
        ));
    }
    Setup { host, keys }
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
    let req = s.host.observe(
        Slot(1000 + n),
        &Observation {
            processes: Vec::new(),
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
    let mut g = c.benchmark_group("host_slot");
    for flows in [8usize, 64, 512] {
        let mut s = setup(flows);
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
criterion_main!(benches);
