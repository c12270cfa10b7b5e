//! Arbitrary requests, fed straight to the service implementation: no panic, every item is
//! either applied or rejected exactly once, and the load table's invariants hold throughout.

use crate::common;

use std::sync::Arc;

use common::*;
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::Slot;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::Switch;
use mlcc_switch_emu::grpc::{Shared, SwitchService};
use mlcc_switch_emu::metrics::Metrics;
use mlcc_switch_emu::{Clock, Emulator, ManualClock};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c", "job/h1>h2/agg"]).prop_map(String::from),
        1 => any::<String>(),
        1 => Just("x".repeat(129)),
        1 => Just(String::new()),
    ]
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["h1", "h2", "h3", "h4"]).prop_map(String::from),
        1 => any::<String>(),
    ]
}

fn link() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["sw1->h1", "sw1->h2", "sw1->h3", "sw1->h4"]).prop_map(String::from),
        1 => prop::sample::select(vec!["h1->sw1", "", "sw1->h9"]).prop_map(String::from),
        1 => any::<String>(),
    ]
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => 0.0..4.0 * CAP,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
        1 => Just(4.0 * CAP + 1.0),
        1 => any::<f64>(),
    ]
}

fn slot_near() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => START - 6..START + 30,
        1 => Just(0u64),
        1 => any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Update(pb::UpdateScheduleRequest),
    Fetch(pb::FetchFeedbackRequest),
    Table(pb::TableRequest),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let sched = (
        text(),
        prop::collection::vec(link(), 0..3),
        slot_near(),
        prop::collection::vec(rate(), 0..K + 2),
        slot_near(),
        any::<bool>(),
    )
        .prop_map(
            |(flow_id, links, first_slot, rates, key, done)| pb::ScheduleItem {
                flow_id,
                links,
                first_slot,
                rates_bytes_per_sec: rates,
                rank: key,
                done,
            },
        );
    let query = (text(), prop::collection::vec(link(), 0..3), slot_near()).prop_map(
        |(flow_id, links, key)| pb::FeedbackQuery {
            flow_id,
            links,
            rank: key,
            committed: false,
        },
    );
    prop_oneof![
        4 => (host(), slot_near(), prop::collection::vec(sched, 0..8))
            .prop_map(|(host, slot, flows)| Op::Update(pb::UpdateScheduleRequest { host, slot, flows })),
        3 => (host(), slot_near(), prop::collection::vec(query, 0..8))
            .prop_map(|(host, slot, flows)| Op::Fetch(pb::FetchFeedbackRequest { host, slot, flows })),
        1 => (link(), any::<u32>()).prop_map(|(link, max_entries)| Op::Table(pb::TableRequest { link, max_entries })),
        2 => (0u64..3).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_requests_never_break_the_table(
        ops in prop::collection::vec(op(), 1..40),
        mode in prop::sample::select(vec![FeedbackMode::AllOthers, FeedbackMode::Precedence]),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let clock = Arc::new(ManualClock::new(slots().start_ns(Slot(START))));
        let emu = Emulator::new(&topology(), "sw1", slots(), mode, Slot(START)).unwrap();
        let shared = Arc::new(Shared::new(emu, clock.clone() as Arc<dyn Clock>, Arc::new(Metrics::new())));
        let svc = SwitchService::new(shared.clone());
        let mut slot = START;
        for op in ops {
            match op {
                Op::Update(req) => {
                    let n = req.flows.len();
                    if let Ok(r) = rt.block_on(svc.update_schedule(tonic::Request::new(req))) {
                        let r = r.into_inner();
                        prop_assert_eq!(r.accepted as usize + r.rejected.len(), n);
                        prop_assert_eq!(r.switch_slot, slot);
                    }
                }
                Op::Fetch(req) => {
                    let n = req.flows.len();
                    if let Ok(r) = rt.block_on(svc.fetch_feedback(tonic::Request::new(req))) {
                        let r = r.into_inner();
                        prop_assert_eq!(r.flows.len() + r.rejected.len(), n);
                        for f in &r.flows {
                            for l in &f.links {
                                prop_assert_eq!(l.load_bytes_per_sec.len(), K);
                                prop_assert!(l.load_bytes_per_sec.iter().all(|x| x.is_finite() && *x >= 0.0));
                            }
                        }
                    }
                }
                Op::Table(req) => {
                    let _ = rt.block_on(svc.table(tonic::Request::new(req)));
                }
                Op::Advance(d) => {
                    slot += d;
                    clock.set(slots().start_ns(Slot(slot)));
                    shared.tick();
                }
            }
            let inv = shared.lock().table().check_invariants();
            prop_assert!(inv.is_ok(), "{:?}", inv);
        }
    }
}
