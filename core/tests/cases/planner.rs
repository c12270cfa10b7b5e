//! Planner behaviour on small cases whose answers are computed by hand in the comments.

use std::time::Duration;

use mlcc_core::dependency::Dependency;
use mlcc_core::estimator::Delivery;
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::topology::LinkId;
use mlcc_core::{FeedbackMode, FlowId, Planner, Rank, Slot, SlotConfig};

/// τ = 100 ms, K = 4: a 100 B/s link moves 10 bytes per slot.
fn config(mode: FeedbackMode) -> PlannerConfig {
    PlannerConfig {
        slots: SlotConfig::new(Duration::from_millis(100), 4).unwrap(),
        eta: 1.0,
        mode,
    }
}

fn link(id: u32, capacity: f64, load: &[f64]) -> LinkFeedback {
    LinkFeedback {
        link: LinkId(id),
        capacity,
        load: load.to_vec(),
    }
}

fn flow(id: &str, start: u64, remaining: f64, path: Vec<LinkFeedback>) -> FlowInput {
    FlowInput {
        id: FlowId::new(id).unwrap(),
        rank: Rank(start),
        remaining_bytes: remaining,
        sent_bytes: 0.0,
        path,
        dependency: Dependency::None,
        delivery: None,
        rate_cap: f64::INFINITY,
    }
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

#[track_caller]
fn assert_plan(got: &[f64], want: &[f64]) {
    assert!(close(got, want), "plan {got:?}, expected {want:?}");
}

#[test]
fn two_local_flows_on_one_link_are_staggered() {
    // A's iteration started first, so it plans first and takes slots 0-1 (20 bytes at 10/slot);
    // B sees A's plan at once and takes slots 2-3.
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let out = p.plan(
        Slot(10),
        &[
            flow("b", 5, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
            flow("a", 4, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
        ],
    );
    assert_plan(&out.decisions[1].plan, &[100.0, 100.0, 0.0, 0.0]);
    assert_plan(&out.decisions[0].plan, &[0.0, 0.0, 100.0, 100.0]);
    assert_eq!(out.decisions[0].rate, 0.0);
    assert_eq!(out.decisions[0].completion, Some(4));
    assert_eq!(out.decisions[1].completion, Some(2));
}

#[test]
fn a_rate_cap_splits_a_link_instead_of_staggering() {
    // As above, but each flow capped at half the link: both send at once, 50 per slot.
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let capped = |id, start| FlowInput {
        rate_cap: 50.0,
        ..flow(id, start, 20.0, vec![link(0, 100.0, &[0.0; 4])])
    };
    let out = p.plan(Slot(10), &[capped("b", 5), capped("a", 4)]);
    for d in &out.decisions {
        assert_plan(&d.plan, &[50.0, 50.0, 50.0, 50.0]);
        assert_eq!(d.rate, 50.0);
    }
    // A cap that is not a positive number is no cap.
    let out = Planner::new(config(FeedbackMode::Precedence)).plan(
        Slot(10),
        &[FlowInput {
            rate_cap: f64::NAN,
            ..flow("a", 4, 20.0, vec![link(0, 100.0, &[0.0; 4])])
        }],
    );
    assert_eq!(out.decisions[0].rate, 100.0);
}

#[test]
fn a_flow_plans_around_other_hosts_bookings_on_any_link_of_its_path() {
    // Uplink free; the downlink (capacity 200) is booked 150 in slots 0-1 by another host.
    // Cap = min(100 uplink, 200 − 150 = 50) = 50 in slots 0-1, 100 after.
    // 20 bytes: β̂=2 cannot (5+5); β̂=3: slot 2 (price 0) first → 10, then slot 0 (price 0.75)
    // → 5 bytes, slot 1 → 5 bytes: β=3, cost 3 + (0.5·0.75)·2 = 3.75. β̂=4: slots 2, 3 → β=4,
    // cost 4. So [50, 50, 100, 0].
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let out = p.plan(
        Slot(0),
        &[flow(
            "a",
            0,
            20.0,
            vec![
                link(0, 100.0, &[0.0; 4]),
                link(1, 200.0, &[150.0, 150.0, 0.0, 0.0]),
            ],
        )],
    );
    assert_plan(&out.decisions[0].plan, &[50.0, 50.0, 100.0, 0.0]);
    assert_eq!(out.decisions[0].completion, Some(3));
}

#[test]
fn slow_ring_predecessor_holds_a_flow_back_and_frees_bandwidth_for_another_job() {
    // Ring flow r (older iteration, plans first) would take the whole link in slot 0:
    // F = 0 + 100·0.1 = 10 bytes, but its predecessor has only reached 2 bytes and the slack
    // is 3, so it is held back by 10 − 2 − 3 = 5 bytes → rate 50. Its remaining 35 bytes are
    // re-planned over slots 1-3 (10, 10, 10 → cannot finish: takes all offered).
    // PS job flow q (younger) first saw r's full plan, leaving nothing; in the second pass it
    // gets the 50 B/s r released in slot 0.
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let mut r = flow("r", 1, 40.0, vec![link(0, 100.0, &[0.0; 4])]);
    r.dependency = Dependency::Ring {
        predecessor_progress: 2.0,
        slack_bytes: 3.0,
    };
    let q = flow("q", 2, 5.0, vec![link(0, 100.0, &[0.0; 4])]);
    let out = p.plan(Slot(0), &[r, q]);
    let (r, q) = (&out.decisions[0], &out.decisions[1]);
    assert!((r.reduction - 5.0).abs() < 1e-9);
    assert!((r.rate - 50.0).abs() < 1e-9);
    assert_plan(&r.plan, &[50.0, 100.0, 100.0, 100.0]);
    assert!((r.progress - 5.0).abs() < 1e-9);
    assert_plan(&q.plan, &[50.0, 0.0, 0.0, 0.0]);
    assert_eq!(q.completion, Some(1));
}

#[test]
fn ps_broadcast_ahead_of_aggregation_is_held_and_lagging_one_boosted() {
    // Broadcast b1: aggregation into the PS reached 4 bytes; b1 already sent 2 and would send
    // 10 more → F = 12 → held back by 8 → rate 100 − 80 = 20 B/s.
    // Broadcast b2 (own link) sent nothing: F = 10 → held back by 10 − 4 = 6 → 40 B/s.
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let mut b1 = flow("b1", 0, 50.0, vec![link(0, 100.0, &[0.0; 4])]);
    b1.sent_bytes = 2.0;
    b1.dependency = Dependency::Broadcast {
        aggregation_progress: vec![4.0, 9.0],
    };
    let mut b2 = flow("b2", 0, 50.0, vec![link(1, 100.0, &[0.0; 4])]);
    b2.dependency = b1.dependency.clone();
    let out = p.plan(Slot(0), &[b1, b2]);
    assert!((out.decisions[0].rate - 20.0).abs() < 1e-9);
    assert!((out.decisions[1].rate - 40.0).abs() < 1e-9);
    // An aggregation flow behind the PS's fastest broadcast (F_b = 30) catches up: its own
    // plan is capped by a booking of 50 in slot 0 → r = 50, F = 5, Δ = 25 → +250 B/s, but the
    // slot cap A(0) = 50 keeps it at 50: catching up never overbooks the link.
    let mut a = flow("a", 0, 50.0, vec![link(2, 100.0, &[50.0, 0.0, 0.0, 0.0])]);
    a.dependency = Dependency::Aggregation {
        broadcast_progress: vec![30.0],
    };
    let out = p.plan(Slot(1), &[a.clone()]);
    assert!((out.decisions[0].boost - 25.0).abs() < 1e-9);
    assert!((out.decisions[0].rate - 50.0).abs() < 1e-9);
    // Where the plan defers (slot 0 half booked → Alg. 1 sends 100 bytes in slot 1 alone:
    // r = 0, F = 0), Δ = 30 bytes → 300 B/s now, within A(0) = 500; the other 70 bytes are
    // re-planned into slot 1.
    a.path = vec![link(2, 1000.0, &[500.0, 0.0, 0.0, 0.0])];
    a.remaining_bytes = 100.0;
    let out = p.plan(Slot(2), &[a]);
    assert_eq!(out.decisions[0].planned_rate, 0.0);
    assert!((out.decisions[0].rate - 300.0).abs() < 1e-9);
    assert_plan(&out.decisions[0].plan, &[300.0, 700.0, 0.0, 0.0]);
}

#[test]
fn all_others_mode_sees_last_slots_plans_of_flows_not_yet_replanned() {
    let mut p = Planner::new(config(FeedbackMode::AllOthers));
    // Slot 0: a first (older), b after: staggered as in precedence mode.
    let flows = vec![
        flow("a", 0, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
        flow("b", 0, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
    ];
    let out = p.plan(Slot(0), &flows);
    assert_plan(&out.decisions[0].plan, &[100.0, 100.0, 0.0, 0.0]);
    assert_plan(&out.decisions[1].plan, &[0.0, 0.0, 100.0, 100.0]);
    // Slot 1: a has 10 left and b 20. a plans first but now also sees b's previous booking
    // (slots 2-3 of the old window = slots 1-2 of the new one). Slot 0 is free → a takes it.
    // b then sees a's new plan [100,0,0,0] and re-plans into slots 1-2.
    let mut flows = flows;
    flows[0].remaining_bytes = 10.0;
    let out = p.plan(Slot(1), &flows);
    assert_plan(&out.decisions[0].plan, &[100.0, 0.0, 0.0, 0.0]);
    assert_plan(&out.decisions[1].plan, &[0.0, 100.0, 100.0, 0.0]);
}

#[test]
fn finished_and_vanished_flows_withdraw() {
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    p.plan(
        Slot(0),
        &[
            flow("a", 0, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
            flow("b", 0, 20.0, vec![link(0, 100.0, &[0.0; 4])]),
        ],
    );
    let out = p.plan(
        Slot(1),
        &[flow("a", 0, 0.0, vec![link(0, 100.0, &[0.0; 4])])],
    );
    assert!(out.decisions[0].done);
    assert_eq!(out.decisions[0].plan, vec![0.0; 4]);
    assert_eq!(out.withdrawn, vec![FlowId::new("b").unwrap()]);
    let out = p.plan(Slot(2), &[]);
    assert!(out.withdrawn.is_empty());
}

#[test]
fn achievable_rate_limits_plans_after_measurements() {
    // The flow delivered only 40 B/s while backlogged → B = 50 B/s: plans never exceed it.
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let mut f = flow("a", 0, 1000.0, vec![link(0, 100.0, &[0.0; 4])]);
    f.delivery = Some(Delivery {
        rate: 40.0,
        backlogged: true,
    });
    let out = p.plan(Slot(0), &[f]);
    assert_eq!(out.decisions[0].achievable, 50.0);
    assert_plan(&out.decisions[0].plan, &[50.0; 4]);
    assert_eq!(out.decisions[0].completion, None);
}

#[test]
fn duplicate_ids_and_bad_capacities_cannot_corrupt_a_plan() {
    let mut p = Planner::new(config(FeedbackMode::Precedence));
    let out = p.plan(
        Slot(0),
        &[
            flow(
                "a",
                0,
                10.0,
                vec![link(0, 100.0, &[0.0; 4]), link(1, f64::NAN, &[1e9; 4])],
            ),
            flow("a", 0, 99.0, vec![link(0, 100.0, &[0.0; 4])]),
            flow("c", 0, f64::INFINITY, vec![link(0, 100.0, &[f64::NAN; 4])]),
        ],
    );
    assert_eq!(out.decisions.len(), 2);
    assert_plan(&out.decisions[0].plan, &[100.0, 0.0, 0.0, 0.0]);
    assert!(
        out.decisions
            .iter()
            .all(|d| d.plan.iter().all(|r| r.is_finite() && *r >= 0.0))
    );
}
