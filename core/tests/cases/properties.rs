//! Property tests: invariants that must hold for any input, not just the hand-picked ones.

use std::time::Duration;

use proptest::prelude::*;

use mlcc_core::dependency::Dependency;
use mlcc_core::load_table::{Query, Update};
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::slot_allocation::{self, BYTE_EPSILON, SlotPrice};
use mlcc_core::topology::LinkId;
use mlcc_core::{
    BytesPerSec, FeedbackMode, FlowId, LoadTable, Planner, PrecedenceKey, Rank, Slot, SlotConfig,
};

const TAU: f64 = 0.06;

fn slot_prices(k: usize) -> impl Strategy<Value = Vec<SlotPrice>> {
    prop::collection::vec(
        (0.0f64..3.0, 0.0f64..2e9).prop_map(|(price, cap)| SlotPrice { price, cap }),
        k,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Alg. 1 plans finite, non-negative rates within each slot's cap, and plans exactly
    /// min(G, what the caps allow).
    #[test]
    fn alg1_respects_caps_and_plans_all_it_can(
        slots in (1usize..=20).prop_flat_map(slot_prices),
        remaining in 0.0f64..2e8,
        eta in 0.0f64..4.0,
    ) {
        let s = slot_allocation::schedule(remaining, TAU, &slots, 1.25e9, eta);
        prop_assert_eq!(s.rates.len(), slots.len());
        for (r, sl) in s.rates.iter().zip(&slots) {
            prop_assert!(r.is_finite() && *r >= 0.0, "rate {}", r);
            prop_assert!(*r <= sl.cap * (1.0 + 1e-12) + 1e-9, "rate {} above cap {}", r, sl.cap);
        }
        let can = slots.iter().map(|s| s.cap * TAU).sum::<f64>();
        let want = remaining.min(can);
        let got = s.bytes(TAU);
        // When nothing is left to plan the schedule may leave < 1 byte of crumbs.
        prop_assert!((got - want).abs() <= BYTE_EPSILON + 1e-9 * want, "planned {} want {}", got, want);
        prop_assert_eq!(s.completion.is_some(), remaining <= can + BYTE_EPSILON);
        if let Some(beta) = s.completion {
            prop_assert!(s.rates[beta.min(s.rates.len())..].iter().all(|r| *r == 0.0));
        }
    }
}

/// A random multi-host instance: links with capacities, flows with a host, a path over the
/// links, bytes, a precedence start and a dependency.
#[derive(Clone, Debug)]
struct Instance {
    capacities: Vec<f64>,
    flows: Vec<(usize, Vec<usize>, f64, u64, Dependency)>,
}

fn instance() -> impl Strategy<Value = Instance> {
    (1usize..=4).prop_flat_map(|links| {
        let caps = prop::collection::vec(1e6f64..2e9, links);
        let dep = prop_oneof![
            Just(Dependency::None),
            (0.0f64..5e7).prop_map(|p| Dependency::Ring {
                predecessor_progress: p,
                slack_bytes: 1e6
            }),
            prop::collection::vec(0.0f64..5e7, 1..3).prop_map(|v| Dependency::Broadcast {
                aggregation_progress: v
            }),
            prop::collection::vec(0.0f64..5e7, 1..3).prop_map(|v| Dependency::Aggregation {
                broadcast_progress: v
            }),
        ];
        let flow = (
            0usize..3,
            prop::sample::subsequence((0..links).collect::<Vec<_>>(), 1..=links),
            0.0f64..1e8,
            0u64..5,
            dep,
        );
        (caps, prop::collection::vec(flow, 1..12))
            .prop_map(|(capacities, flows)| Instance { capacities, flows })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// With `precedence` feedback and hosts planning in precedence order through a shared load
    /// table, no link is ever booked above its capacity in any slot — with dependency boosts,
    /// hold-backs and the second pass that hands released bandwidth to others.
    #[test]
    fn precedence_planning_never_overbooks_a_link(inst in instance()) {
        let k = 10;
        let cfg = PlannerConfig {
            slots: SlotConfig::new(Duration::from_millis(60), k).unwrap(),
            eta: 1.0,
            mode: FeedbackMode::Precedence,
        };
        let links: Vec<(LinkId, BytesPerSec)> = inst
            .capacities
            .iter()
            .enumerate()
            .map(|(i, c)| (LinkId(i as u32), BytesPerSec(*c)))
            .collect();
        let mut table = LoadTable::new(k, Slot(0), links);
        // Hosts plan in order, and a host's flows all sort after the previous host's: the
        // iteration start is offset by the host index, so planning order = precedence order.
        for host in 0..3usize {
            let hname = format!("h{host}");
            let flows: Vec<FlowInput> = inst
                .flows
                .iter()
                .enumerate()
                .filter(|(_, f)| f.0 == host)
                .map(|(i, (_, path, bytes, start, dep))| {
                    let id = FlowId::new(&format!("f{i}")).unwrap();
                    let key = PrecedenceKey::new(Rank(host as u64 * 100 + start), id.clone());
                    let path = path
                        .iter()
                        .map(|&l| {
                            let mut load = vec![0.0; k];
                            table
                                .feedback(
                                    LinkId(l as u32),
                                    &Query { flow: &id, key: &key, exclude_publisher: Some(&hname) },
                                    FeedbackMode::Precedence,
                                    Slot(0),
                                    &mut load,
                                )
                                .unwrap();
                            LinkFeedback { link: LinkId(l as u32), capacity: inst.capacities[l], load }
                        })
                        .collect();
                    FlowInput {
                        id,
                        rank: key.rank,
                        remaining_bytes: *bytes,
                        sent_bytes: 0.0,
                        path,
                        dependency: dep.clone(),
                        delivery: None,
                        rate_cap: f64::INFINITY,
                    }
                })
                .collect();
            let out = Planner::new(cfg).plan(Slot(0), &flows);
            for (d, f) in out.decisions.iter().zip(&flows) {
                prop_assert!(d.plan.iter().all(|r| r.is_finite() && *r >= 0.0));
                prop_assert!(d.plan.iter().all(|r| *r <= d.achievable * (1.0 + 1e-12)));
                prop_assert_eq!(d.plan[0], d.rate);
                for l in &f.path {
                    table
                        .update(
                            l.link,
                            &Update {
                                flow: &d.id,
                                publisher: &hname,
                                first_slot: Slot(0),
                                rates: &d.plan,
                                key: &d.key,
                                done: d.done,
                            },
                        )
                        .unwrap();
                }
            }
        }
        for (i, c) in inst.capacities.iter().enumerate() {
            for t in 0..k as u64 {
                let load = table.load(LinkId(i as u32), Slot(t)).unwrap();
                prop_assert!(load <= c * (1.0 + 1e-9), "link {} slot {}: {} > {}", i, t, load, c);
            }
        }
        table.check_invariants().map_err(TestCaseError::fail)?;
    }
}

#[derive(Clone, Debug)]
enum Op {
    Update {
        flow: u8,
        host: u8,
        first: u64,
        rates: Vec<f64>,
        start: u64,
    },
    Done {
        flow: u8,
    },
    Advance(u64),
}

/// Updates (most under an unchanged rank), withdrawals and advances over up to 40 flows, so a
/// link holds enough entries for its prefix sums.
fn busy_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0u8..40, 0u8..4, 0u64..3, prop::collection::vec(0.0f64..300.0, 1..6))
            .prop_map(|(flow, host, first, rates)| Op::Update {
                flow,
                host: flow % 4,
                first,
                rates,
                // Ranks that stay with the flow, but now and then not.
                start: if host == 0 { u64::from(flow % 3) + 1 } else { u64::from(flow % 3) },
            }),
        1 => (0u8..40).prop_map(|flow| Op::Done { flow }),
        1 => (0u64..3).prop_map(Op::Advance),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..3, 0u64..6, prop::collection::vec(-10.0f64..500.0, 0..7), 0u64..4)
            .prop_map(|(flow, host, first, rates, start)| Op::Update { flow, host, first, rates, start }),
        1 => (0u8..8).prop_map(|flow| Op::Done { flow }),
        1 => (0u64..6).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any sequence of updates, withdrawals and slot advances keeps the table consistent:
    /// a flow has at most one entry, sums match the entries, expired entries are gone, bad
    /// updates change nothing, and feedback is never negative or above the total load.
    #[test]
    fn load_table_replace_and_expiry_invariants(ops in prop::collection::vec(op(), 1..60)) {
        let k = 5usize;
        let mut t = LoadTable::new(k, Slot(10), [(LinkId(0), BytesPerSec(100.0))]);
        // The same operations, but every update preceded by a withdrawal from the link, so it
        // never takes the in-place replacement path: both tables must agree to the bit.
        let mut twin = t.clone();
        // And a table keeping no publisher sums, as a precedence switch's.
        let mut lean = t.clone().without_publisher_sums();
        let mut last_refresh: std::collections::HashMap<u8, Slot> = Default::default();
        for op in ops {
            match op {
                Op::Update { flow, host, first, rates, start } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    let key = PrecedenceKey::new(Rank(start), id.clone());
                    let before = t.entries(LinkId(0)).unwrap().len();
                    let u = Update {
                        flow: &id,
                        publisher: &format!("h{host}"),
                        first_slot: t.now().plus(first),
                        rates: &rates,
                        key: &key,
                        done: false,
                    };
                    let valid = rates.iter().all(|r| (0.0..=400.0).contains(r)) && rates.len() <= k;
                    let res = t.update(LinkId(0), &u);
                    prop_assert_eq!(res.is_ok(), valid, "{:?}", res);
                    prop_assert_eq!(lean.update(LinkId(0), &u).is_ok(), valid);
                    if valid {
                        twin.withdraw_from(LinkId(0), &id).unwrap();
                    }
                    prop_assert_eq!(twin.update(LinkId(0), &u).is_ok(), valid);
                    if valid {
                        last_refresh.insert(flow, t.now());
                        let e = t.entries(LinkId(0)).unwrap();
                        let mine: Vec<_> = e.iter().filter(|(f, _)| **f == id).collect();
                        prop_assert_eq!(mine.len(), 1);
                        prop_assert_eq!(&mine[0].1.rates, &rates);
                    } else {
                        prop_assert_eq!(t.entries(LinkId(0)).unwrap().len(), before);
                    }
                }
                Op::Done { flow } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    t.withdraw(&id);
                    // The one link's withdrawal must leave what the whole table's does.
                    twin.withdraw_from(LinkId(0), &id).unwrap();
                    lean.withdraw(&id);
                    last_refresh.remove(&flow);
                    prop_assert!(t.entries(LinkId(0)).unwrap().iter().all(|(f, _)| **f != id));
                }
                Op::Advance(d) => {
                    let to = t.now().plus(d);
                    t.advance(to);
                    twin.advance(to);
                    lean.advance(to);
                    last_refresh.retain(|_, s| s.0 + k as u64 > to.0);
                    prop_assert_eq!(t.entries(LinkId(0)).unwrap().len(), last_refresh.len());
                }
            }
            t.check_invariants().map_err(TestCaseError::fail)?;
            lean.check_invariants().map_err(TestCaseError::fail)?;
            for i in 0..2 * k as u64 {
                let (a, b) = (t.load(LinkId(0), t.now().plus(i)), twin.load(LinkId(0), t.now().plus(i)));
                prop_assert_eq!(a.clone().map(f64::to_bits), lean.load(LinkId(0), t.now().plus(i)).map(f64::to_bits));
                prop_assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits));
            }
            prop_assert_eq!(t.entries(LinkId(0)).unwrap(), twin.entries(LinkId(0)).unwrap());
            // Feedback equals a brute-force sum over the entries, for a few askers.
            for (probe, start, host) in [("f0", 2u64, Some("h1")), ("f3", 0, None), ("f7", 3, Some("h0"))] {
                let probe = FlowId::new(probe).unwrap();
                let key = PrecedenceKey::new(Rank(start), probe.clone());
                for mode in [FeedbackMode::AllOthers, FeedbackMode::Precedence] {
                    let mut out = vec![0.0; k];
                    let q = Query { flow: &probe, key: &key, exclude_publisher: host };
                    t.feedback(LinkId(0), &q, mode, t.now(), &mut out).unwrap();
                    let mut twin_out = vec![0.0; k];
                    twin.feedback(LinkId(0), &q, mode, t.now(), &mut twin_out).unwrap();
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    prop_assert_eq!(bits(&out), bits(&twin_out), "{:?}", mode);
                    // Both answers of one walk are each table's two separate answers, to the bit.
                    // It may catch the link up and keep prefix sums: `t` and `twin` must
                    // still agree on everything after.
                    let now = t.now();
                    for (s, lean_one) in [(0, false), (1, false), (0, true), (1, true)] {
                        let table = if lean_one { &mut lean } else { &mut t };
                        let slot = now.plus(s);
                        let mut sep = vec![0.0; k];
                        table.feedback(LinkId(0), &q, mode, slot, &mut sep).unwrap();
                        let committed = table.committed(LinkId(0), &q, slot).unwrap();
                        let mut pair = vec![0.0; k];
                        let c = table.feedback_committed(LinkId(0), &q, mode, slot, &mut pair).unwrap();
                        prop_assert_eq!(bits(&pair), bits(&sep), "{:?}", mode);
                        prop_assert_eq!(c.to_bits(), committed.to_bits());
                    }
                    let mut lean_out = vec![0.0; k];
                    lean.feedback(LinkId(0), &q, mode, t.now(), &mut lean_out).unwrap();
                    if mode == FeedbackMode::Precedence {
                        prop_assert_eq!(bits(&out), bits(&lean_out));
                        for s in 0..2 {
                            let slot = t.now().plus(s);
                            prop_assert_eq!(
                                t.committed(LinkId(0), &q, slot).unwrap().to_bits(),
                                lean.committed(LinkId(0), &q, slot).unwrap().to_bits()
                            );
                        }
                    }
                    let mut want = vec![0.0; k];
                    for (f, e) in t.entries(LinkId(0)).unwrap() {
                        let counted = *f != probe
                            && host != Some(e.publisher.as_str())
                            && (mode == FeedbackMode::AllOthers || e.key < key);
                        if counted {
                            for (i, w) in want.iter_mut().enumerate() {
                                let slot = t.now().0 + i as u64;
                                if let Some(r) = slot.checked_sub(e.first_slot.0).and_then(|d| e.rates.get(d as usize)) {
                                    *w += r;
                                }
                            }
                        }
                    }
                    for (got, want) in out.iter().chain(&lean_out).zip(want.iter().cycle()) {
                        prop_assert!((got - want).abs() < 1e-6, "{:?}: got {:?} and {:?} want {:?}", mode, out, lean_out, want);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Advancing is lazy: a link catches up (history, expiry, window) only when it is written
    /// or swept. Every read must still answer as if the table had moved one slot at a time with
    /// every link caught up at once, which is what `eager` does.
    #[test]
    fn lazy_advance_reads_as_slot_by_slot(ops in prop::collection::vec(op(), 1..80), sweep in 0usize..3) {
        let k = 4usize;
        let links = [LinkId(0), LinkId(7)];
        let mut lazy = LoadTable::new(k, Slot(10), links.map(|l| (l, BytesPerSec(100.0))));
        let mut eager = lazy.clone();
        for op in ops {
            match op {
                Op::Update { flow, host, first, rates, start } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    let key = PrecedenceKey::new(Rank(start), id.clone());
                    let u = Update {
                        flow: &id,
                        publisher: &format!("h{host}"),
                        first_slot: lazy.now().plus(first),
                        rates: &rates,
                        key: &key,
                        done: false,
                    };
                    let link = links[usize::from(flow) % 2];
                    prop_assert_eq!(lazy.update(link, &u).is_ok(), eager.update(link, &u).is_ok());
                }
                Op::Done { flow } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    lazy.withdraw(&id);
                    eager.withdraw(&id);
                }
                Op::Advance(d) => {
                    let from = lazy.now();
                    lazy.advance(from.plus(d));
                    lazy.settle_some(sweep);
                    for s in 1..=d {
                        eager.advance(from.plus(s));
                        eager.settle_all();
                    }
                }
            }
            lazy.check_invariants().map_err(TestCaseError::fail)?;
            eager.check_invariants().map_err(TestCaseError::fail)?;
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(1.0);
            for l in links {
                let (a, b) = (lazy.entries(l).unwrap(), eager.entries(l).unwrap());
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(lazy.entry_count(l).unwrap(), a.len());
                let (a, b) = (lazy.max_recent_load(l).unwrap(), eager.max_recent_load(l).unwrap());
                prop_assert!(close(a, b), "max recent load {} vs {}", a, b);
                for i in 0..2 * k as u64 {
                    let s = lazy.now().plus(i);
                    let (a, b) = (lazy.load(l, s).unwrap(), eager.load(l, s).unwrap());
                    prop_assert!(close(a, b), "load in slot {:?}: {} vs {}", s, a, b);
                }
                for (probe, start, host) in [("f0", 2u64, Some("h1")), ("f3", 0, None), ("f6", 1, Some("h2"))] {
                    let probe = FlowId::new(probe).unwrap();
                    let key = PrecedenceKey::new(Rank(start), probe.clone());
                    let q = Query { flow: &probe, key: &key, exclude_publisher: host };
                    for mode in [FeedbackMode::AllOthers, FeedbackMode::Precedence] {
                        let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
                        lazy.feedback(l, &q, mode, lazy.now(), &mut a).unwrap();
                        eager.feedback(l, &q, mode, eager.now(), &mut b).unwrap();
                        prop_assert!(a.iter().zip(&b).all(|(x, y)| close(*x, *y)), "{:?}: {:?} vs {:?}", mode, a, b);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A busy link asked by every flow between writes (its prefix sums built, kept through
    /// rewrites under the same key, dropped as keys and slots change) answers each question as
    /// the two separate walks of a table that was never asked, to the bit, and the asking
    /// leaves the table as the unasked one.
    #[test]
    fn prefix_sums_answer_as_the_walks_of_an_unasked_table(ops in prop::collection::vec(busy_op(), 1..120)) {
        let k = 5usize;
        let mut t = LoadTable::new(k, Slot(10), [(LinkId(0), BytesPerSec(1000.0))]);
        let mut unasked = t.clone();
        let mode = FeedbackMode::Precedence;
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for op in ops {
            match op {
                Op::Update { flow, host, first, rates, start } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    let key = PrecedenceKey::new(Rank(start), id.clone());
                    let u = Update {
                        flow: &id,
                        publisher: &format!("h{host}"),
                        first_slot: t.now().plus(first),
                        rates: &rates,
                        key: &key,
                        done: false,
                    };
                    prop_assert!(t.update(LinkId(0), &u).is_ok());
                    prop_assert!(unasked.update(LinkId(0), &u).is_ok());
                }
                Op::Done { flow } => {
                    let id = FlowId::new(&format!("f{flow}")).unwrap();
                    t.withdraw(&id);
                    unasked.withdraw(&id);
                }
                Op::Advance(d) => {
                    let to = t.now().plus(d);
                    t.advance(to);
                    unasked.advance(to);
                }
            }
            let now = t.now();
            for flow in (0u8..40).step_by(3) {
                let id = FlowId::new(&format!("f{flow}")).unwrap();
                let key = PrecedenceKey::new(Rank(u64::from(flow % 3)), id.clone());
                let host = format!("h{}", flow % 4);
                let q = Query { flow: &id, key: &key, exclude_publisher: Some(&host) };
                for slot in [now, now.plus(1)] {
                    let mut sep = vec![0.0; k];
                    unasked.feedback(LinkId(0), &q, mode, slot, &mut sep).unwrap();
                    let committed = unasked.committed(LinkId(0), &q, slot).unwrap();
                    let mut pair = vec![0.0; k];
                    let c = t.feedback_committed(LinkId(0), &q, mode, slot, &mut pair).unwrap();
                    prop_assert_eq!(bits(&pair), bits(&sep), "f{} from {:?}", flow, slot);
                    prop_assert_eq!(c.to_bits(), committed.to_bits(), "f{} from {:?}", flow, slot);
                }
            }
            t.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(t.entries(LinkId(0)).unwrap(), unasked.entries(LinkId(0)).unwrap());
            for i in 0..2 * k as u64 {
                prop_assert_eq!(
                    t.load(LinkId(0), now.plus(i)).map(f64::to_bits),
                    unasked.load(LinkId(0), now.plus(i)).map(f64::to_bits)
                );
            }
            prop_assert_eq!(
                t.max_recent_load(LinkId(0)).map(f64::to_bits),
                unasked.max_recent_load(LinkId(0)).map(f64::to_bits)
            );
        }
    }
}
