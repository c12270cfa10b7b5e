//! Planning cost: Alg. 1 + Alg. 2 for one flow as K grows, a whole slot of 64 local flows, and
//! load-table feedback on a link holding 10 000 entries.
//!
//! `cargo bench -p mlcc-core --bench planning`. Goals (issue #2): ≤ 20 µs per flow at K = 10,
//! ≤ 1 ms per 64-flow slot, growth consistent with O(K² log K).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use mlcc_core::dependency::Dependency;
use mlcc_core::load_table::{Query, Update};
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::slot_allocation::{self, SlotPrice};
use mlcc_core::topology::LinkId;
use mlcc_core::{
    BytesPerSec, FeedbackMode, FlowId, LoadTable, Planner, PrecedenceKey, Rank, Slot, SlotConfig,
};

const GBIT10: f64 = 1.25e9;

/// A pseudo-random but fixed load pattern.
fn load(k: usize, seed: u64) -> Vec<f64> {
    (0..k)
        .map(|t| {
            let x = (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15 ^ seed) >> 40;
            (x % 1000) as f64 / 1000.0 * 0.9 * GBIT10
        })
        .collect()
}

/// One flow over a 4-link path (host → ToR → edge → ToR → host) with a ring dependency.
fn flow(i: usize, k: usize) -> FlowInput {
    FlowInput {
        id: FlowId::new(&format!("job{}/h{}>h{}/ring", i % 7, i, i + 1)).unwrap(),
        rank: Rank(1000 + (i % 5) as u64),
        remaining_bytes: 2e8 + i as f64 * 1e6,
        sent_bytes: 5e7,
        path: (0..4)
            .map(|l| LinkFeedback {
                // Local flows share the uplink (0) and spread over 16 other links.
                link: LinkId(if l == 0 {
                    0
                } else {
                    1 + ((i * 3 + l) % 16) as u32
                }),
                capacity: GBIT10,
                load: load(k, (i * 4 + l) as u64),
            })
            .collect(),
        dependency: Dependency::Ring {
            predecessor_progress: 6e7,
            slack_bytes: 1e7,
        },
        delivery: None,
        rate_cap: f64::INFINITY,
    }
}

fn config(k: usize) -> PlannerConfig {
    PlannerConfig {
        slots: SlotConfig::new(Duration::from_millis(60), k).unwrap(),
        eta: 1.0,
        mode: FeedbackMode::Precedence,
    }
}

fn per_flow(c: &mut Criterion) {
    let mut g = c.benchmark_group("alg1+alg2 one flow");
    for k in [10usize, 20, 40, 64] {
        let input = vec![flow(0, k)];
        let mut planner = Planner::new(config(k));
        let mut slot = 0;
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, _| {
            b.iter(|| {
                slot += 1;
                black_box(planner.plan(Slot(slot), black_box(&input)))
            })
        });
    }
    g.finish();

    // Alg. 1 alone, including K = 80 beyond the planner's own limit of 64, to show the growth.
    let mut g = c.benchmark_group("alg1 schedule");
    for k in [10usize, 20, 40, 80] {
        let l = load(k, 7);
        let slots: Vec<SlotPrice> = l
            .iter()
            .map(|b| SlotPrice {
                price: b / GBIT10,
                cap: GBIT10 - b,
            })
            .collect();
        // Enough bytes to need about half the horizon.
        let g_bytes = GBIT10 * 0.06 * k as f64 * 0.3;
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, _| {
            b.iter(|| {
                slot_allocation::schedule(black_box(g_bytes), 0.06, black_box(&slots), GBIT10, 1.0)
            })
        });
    }
    g.finish();
}

fn whole_slot(c: &mut Criterion) {
    let mut g = c.benchmark_group("slot");
    for n in [8usize, 64] {
        let inputs: Vec<FlowInput> = (0..n).map(|i| flow(i, 10)).collect();
        let mut planner = Planner::new(config(10));
        let mut slot = 0;
        g.bench_with_input(BenchmarkId::new("local flows", n), &n, |b, _| {
            b.iter(|| {
                slot += 1;
                black_box(planner.plan(Slot(slot), black_box(&inputs)))
            })
        });
    }
    g.finish();
}

fn feedback(c: &mut Criterion) {
    let k = 10;
    let mut table = LoadTable::new(k, Slot(0), [(LinkId(0), BytesPerSec(1e12))]);
    let ids: Vec<FlowId> = (0..10_000)
        .map(|i| {
            FlowId::new(&format!(
                "job{}/h{}>h{}/agg",
                i / 6,
                i % 1000,
                (i + 1) % 1000
            ))
            .unwrap()
        })
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let key = PrecedenceKey::new(Rank((i % 10) as u64), id.clone());
        table
            .update(
                LinkId(0),
                &Update {
                    flow: id,
                    publisher: &format!("h{}", i % 1000),
                    first_slot: Slot(0),
                    rates: &load(k, i as u64),
                    key: &key,
                    done: false,
                },
            )
            .unwrap();
    }
    let mut g = c.benchmark_group("feedback 10k entries");
    for mode in [FeedbackMode::AllOthers, FeedbackMode::Precedence] {
        let id = &ids[5000];
        let key = PrecedenceKey::new(Rank(5), id.clone());
        let mut out = vec![0.0; k];
        g.bench_function(format!("{mode:?}"), |b| {
            b.iter(|| {
                table
                    .feedback(
                        LinkId(0),
                        &Query {
                            flow: id,
                            key: &key,
                            exclude_publisher: Some("h0"),
                        },
                        mode,
                        Slot(0),
                        &mut out,
                    )
                    .unwrap();
                black_box(&out);
            })
        });
    }
    let id = &ids[42];
    let key = PrecedenceKey::new(Rank(2), id.clone());
    let rates = load(k, 99);
    g.bench_function("update (replace)", |b| {
        b.iter(|| {
            table
                .update(
                    LinkId(0),
                    &Update {
                        flow: id,
                        publisher: "h42",
                        first_slot: Slot(0),
                        rates: &rates,
                        key: &key,
                        done: false,
                    },
                )
                .unwrap()
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = per_flow, whole_slot, feedback
}
criterion_main!(benches);
