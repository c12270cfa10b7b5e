//! One targeted test per rule of core's per-host policy (DESIGN.md §11a): each shows the rule's
//! effect against the same observations with the rule switched off.

use std::sync::Arc;

use mlcc_core::host::{
    Answer, Booking, Degraded, Enforce, FlowObs, HostPolicy, LINK_HEADROOM_SHARE, LinkObs,
    PeerProgress, PolicyConfig, RankRule, WARM_MAX_PER_CONNECTION, WARM_SHARE,
};
use mlcc_core::topology::{LinkId, Topology, TopologyBuilder};
use mlcc_core::units::BytesPerSec;
use mlcc_core::{FeedbackMode, FlowId, FlowRole, Slot, SlotConfig};

/// 100 MB/s links: 6 MB per 60 ms slot.
const CAP: f64 = 100e6;
/// What the policy plans of a link: its capacity less the headroom it leaves for rate floors.
const USABLE: f64 = CAP * (1.0 - LINK_HEADROOM_SHARE);
const MB: f64 = 1e6;
const TAU: f64 = 0.06;

fn topo() -> Topology {
    let mut b = TopologyBuilder::new();
    b.add_switch("sw", 0, None);
    for i in 1..=4 {
        let h = format!("h{i}");
        b.add_host(&h, None, None);
        b.add_duplex(&h, "sw", BytesPerSec(CAP));
    }
    b.build().unwrap()
}

fn link(t: &Topology, name: &str) -> LinkId {
    t.link_by_name(name).unwrap()
}

fn cfg() -> PolicyConfig {
    PolicyConfig::new(SlotConfig::paper())
}

fn without(rule: &str) -> PolicyConfig {
    cfg().with_rule(rule, false).unwrap()
}

/// A flow of `job` from `src` to `dst` with `remaining` bytes left, 20 MB waiting in its
/// sockets, an unbooked downlink and nothing else known.
fn flow(t: &Topology, job: &str, src: &str, dst: &str, role: FlowRole, remaining: f64) -> FlowObs {
    let up = LinkObs::unasked(link(t, &format!("{src}->sw")), CAP);
    let mut down = LinkObs::unasked(link(t, &format!("sw->{dst}")), CAP);
    down.answer = Answer::Load(vec![0.0; 10]);
    let mut f = FlowObs::new(
        FlowId::for_group(job, src, dst, role),
        Arc::from(job),
        role,
        t.node_by_name(dst).unwrap(),
        vec![up, down],
    );
    f.iteration_start = Slot(100);
    f.job_bytes = 100_000_000;
    f.remaining_bytes = remaining;
    f.app_backlog = Some(20.0 * MB);
    f
}

fn one(cfg: PolicyConfig, slot: u64, f: &FlowObs) -> mlcc_core::host::FlowOut {
    HostPolicy::new(cfg)
        .step(Slot(slot), std::slice::from_ref(f))
        .flows
        .remove(0)
}

fn paced(e: Enforce) -> f64 {
    match e {
        Enforce::Pace(r) => r,
        Enforce::Release => panic!("released"),
    }
}

#[test]
fn an_idle_flow_books_nothing_and_paces_into_what_is_free() {
    let t = topo();
    let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
    f.app_backlog = Some(10_000.0); // waiting for its predecessor
    let on = one(cfg(), 1, &f);
    assert!(on.idle);
    assert!(on.booking.is_withdraw(), "{:?}", on.booking);
    assert_eq!(paced(on.enforce), USABLE);
    let off = one(without("idle"), 1, &f);
    assert!(!off.idle);
    match &off.booking {
        Booking::Plan { rates, .. } => assert!(rates[0] > 0.0, "{rates:?}"),
        b => panic!("{b:?}"),
    }
}

#[test]
fn a_sender_that_holds_its_bytes_is_not_held_back_by_stale_upstream_progress() {
    let t = topo();
    let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
    f.slack_bytes = 1.0 * MB;
    let run = |cfg: PolicyConfig| {
        let mut p = HostPolicy::new(cfg);
        let mut f = f.clone();
        // The predecessor reported F = 0 for this iteration, every slot.
        f.upstream = vec![PeerProgress {
            sent: 0.0,
            finish: 0.0,
            iteration: 0,
            seen: Slot(1),
            reported_in: None,
            next_rate: 0.0,
        }];
        p.step(Slot(1), std::slice::from_ref(&f));
        f.sent_bytes = 1.0 * MB;
        f.upstream[0].seen = Slot(2);
        p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
    };
    let on = run(cfg());
    assert_eq!(on.decision.reduction, 0.0);
    assert!(on.degraded.contains(&Degraded::HolderNotHeldBack));
    assert!(on.decision.rate > 0.9 * CAP, "{}", on.decision.rate);
    let off = run(without("holder"));
    assert!(off.decision.reduction > 0.0);
    assert!(off.decision.rate < 0.5 * CAP, "{}", off.decision.rate);
}

#[test]
fn b_f_learns_from_a_slot_where_data_waited_at_both_ends_and_the_path_held_it() {
    let t = topo();
    let f = flow(&t, "p", "h1", "h3", FlowRole::Agg, 500.0 * MB);
    let run = |cfg: PolicyConfig| {
        let mut p = HostPolicy::new(cfg);
        p.step(Slot(1), std::slice::from_ref(&f));
        let mut f = f.clone();
        f.achieved = Some(0.3 * CAP);
        p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
    };
    // 0.3 × 1.25 is below the floor of half the path.
    assert_eq!(run(cfg()).decision.achievable, 0.5 * USABLE);
    assert_eq!(run(without("delivery-samples")).decision.achievable, USABLE);
    // Where the data did not wait (under a flow in flight's worth), the application, not the
    // path, held the flow back: the slot teaches B_f nothing.
    let mut unknown = f.clone();
    unknown.app_backlog = Some(0.5 * MB);
    let mut p = HostPolicy::new(cfg());
    p.step(Slot(1), std::slice::from_ref(&unknown));
    unknown.achieved = Some(0.3 * CAP);
    let d = p
        .step(Slot(2), std::slice::from_ref(&unknown))
        .flows
        .remove(0);
    assert_eq!(d.decision.achievable, USABLE);
}

#[test]
fn a_jobs_flows_from_one_host_split_the_uplink_by_what_they_have_left() {
    let t = topo();
    let flows = [
        flow(&t, "p", "h1", "h3", FlowRole::Agg, 30.0 * MB),
        flow(&t, "p", "h1", "h4", FlowRole::Agg, 10.0 * MB),
    ];
    let on = HostPolicy::new(cfg()).step(Slot(1), &flows);
    let (a, b) = (on.flows[0].decision.rate, on.flows[1].decision.rate);
    assert!(
        (a - 0.75 * USABLE).abs() < 1.0 && (b - 0.25 * USABLE).abs() < 1.0,
        "{a} {b}"
    );
    let off = HostPolicy::new(without("split-uplink")).step(Slot(1), &flows);
    // One after the other: the first takes the uplink, the second waits a slot.
    assert_eq!(off.flows[0].decision.rate, USABLE);
    assert_eq!(off.flows[1].decision.rate, 0.0);
}

#[test]
fn a_flow_whose_plan_ends_this_slot_paces_into_what_is_free() {
    let t = topo();
    let f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 3.0 * MB);
    let on = one(cfg(), 1, &f);
    let planned = 3.0 * MB / TAU;
    assert!((on.decision.rate - planned).abs() < 1.0);
    assert_eq!(paced(on.enforce), USABLE);
    let off = one(without("pace-free"), 1, &f);
    assert!((paced(off.enforce) - planned).abs() < 1.0);
}

#[test]
fn a_held_back_flow_keeps_the_rate_floor_per_connection() {
    let t = topo();
    let mut f = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
    f.links = vec![
        LinkObs::unasked(link(&t, "h3->sw"), CAP),
        LinkObs::unasked(link(&t, "sw->h1"), CAP),
    ];
    f.app_backlog = None; // nothing says the server holds the bytes
    f.connections = 2;
    f.upstream = vec![PeerProgress {
        sent: 0.0,
        finish: 0.0,
        iteration: 0,
        seen: Slot(1),
        reported_in: None,
        next_rate: 0.0,
    }];
    // The floor alone (warm, it would be paced at a share of its path: a cap on data it does
    // not have yet).
    let cold = without("warm-resume")
        .with_rule("warm-held", false)
        .unwrap();
    let on = one(cold, 1, &f);
    assert_eq!(on.decision.rate, 0.0, "nothing aggregated yet");
    assert_eq!(paced(on.enforce), 2.0 * 125_000.0);
    let no_floor = cold.with_rule("rate-floor", false).unwrap();
    assert_eq!(paced(one(no_floor, 1, &f).enforce), 0.0);
}

#[test]
fn a_held_flow_whose_plan_resumes_it_next_slot_is_kept_warm() {
    let t = topo();
    let mut f = flow(&t, "b", "h1", "h2", FlowRole::Agg, 50.0 * MB);
    // Its downlink is booked full by others in this slot and free from the next.
    let mut load = vec![0.0; 10];
    load[0] = CAP;
    f.links[1].answer = Answer::Load(load);
    let floor = 125_000.0;
    let resume_only = without("warm-held");
    let on = one(resume_only, 1, &f);
    assert_eq!(on.decision.rate, 0.0);
    let next = on.decision.plan[1];
    assert!(next > 0.9 * USABLE, "{:?}", on.decision.plan);
    // A 2-segment burst every ~1.5 ms at 100 MB/s, not every 23 ms at the floor.
    assert_eq!(paced(on.enforce), WARM_SHARE * next);
    assert!(paced(on.enforce) > 10.0 * floor);
    let cold = resume_only.with_rule("warm-resume", false).unwrap();
    assert_eq!(paced(one(cold, 1, &f).enforce), floor);
    // Held in the next slot too: the floor, unless every held flow is kept warm.
    f.links[1].answer = Answer::Load(vec![CAP; 10]);
    assert_eq!(paced(one(resume_only, 1, &f).enforce), floor);
}

#[test]
fn every_flow_with_bytes_left_is_kept_warm_at_a_share_of_its_path() {
    let t = topo();
    let mut f = flow(&t, "b", "h1", "h2", FlowRole::Agg, 50.0 * MB);
    f.links[1].answer = Answer::Load(vec![CAP; 10]); // held all horizon
    let floor = 125_000.0;
    let on = one(cfg(), 1, &f);
    assert_eq!(on.decision.rate, 0.0);
    let warm = WARM_SHARE * on.decision.achievable;
    assert_eq!(paced(on.enforce), warm);
    assert_eq!(paced(one(without("warm-held"), 1, &f).enforce), floor);
    // Waiting for data (idle: paced into what is free, here nothing) or not knowing what it
    // holds: warm too, for when its data arrives mid-slot.
    for backlog in [Some(1000.0), None] {
        let mut g = f.clone();
        g.app_backlog = backlog;
        assert_eq!(paced(one(cfg(), 1, &g).enforce), warm, "{backlog:?}");
    }
    // On a 10 Gbit/s path the share would be 25 MB/s unbooked: a few MB/s per connection
    // already space the stamps.
    let mut fast = f.clone();
    for l in &mut fast.links {
        l.capacity = 1.25e9;
    }
    fast.links[1].answer = Answer::Load(vec![1.25e9; 10]);
    fast.connections = 2;
    assert_eq!(
        paced(one(cfg(), 1, &fast).enforce),
        2.0 * WARM_MAX_PER_CONNECTION
    );
}

#[test]
fn plans_leave_the_rate_floors_of_held_back_flows_room_on_a_full_link() {
    let t = topo();
    // A flow that could fill its path, and one of another job held back behind it on the
    // same uplink (its downlink fully booked by others): it still sends at the floor.
    let big = flow(&t, "a", "h1", "h2", FlowRole::Agg, 50.0 * MB);
    let mut held = flow(&t, "b", "h1", "h3", FlowRole::Agg, 50.0 * MB);
    held.iteration_start = Slot(200); // ranked after `big`
    held.links[1].answer = Answer::Load(vec![CAP; 10]);
    let floor = 125_000.0;
    let run = |cfg: PolicyConfig| HostPolicy::new(cfg).step(Slot(1), &[big.clone(), held.clone()]);
    // The rate floor alone: a warm flow sends more, by design unbooked too.
    let cold = without("warm-held")
        .with_rule("warm-resume", false)
        .unwrap();
    let on = run(cold);
    assert_eq!(on.flows[1].decision.rate, 0.0);
    assert_eq!(paced(on.flows[1].enforce), floor);
    // What both send fits the uplink, so neither is squeezed below its plan.
    let sent = on.flows[0].decision.rate + floor;
    assert!(sent <= CAP, "{sent}");
    assert!((on.flows[0].decision.rate - USABLE).abs() < 1.0);
    // Without the headroom the plan fills the link and the floor overbooks it.
    let off = run(cold.with_rule("headroom", false).unwrap());
    assert_eq!(off.flows[0].decision.rate, CAP);
    assert!(off.flows[0].decision.rate + paced(off.flows[1].enforce) > CAP);
}

#[test]
fn peer_progress_counts_only_while_fresh_and_of_the_same_iteration() {
    let t = topo();
    let mut f = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
    f.app_backlog = None;
    let report = |iteration, seen| PeerProgress {
        sent: 0.0,
        finish: 0.0,
        iteration,
        seen: Slot(seen),
        reported_in: None,
        next_rate: 0.0,
    };
    for (up, held) in [
        (report(0, 9), true),
        (report(0, 8), true),
        (report(0, 7), false), // 3 slots old
        (report(1, 9), false), // of another iteration
    ] {
        f.upstream = vec![up];
        let d = one(cfg(), 10, &f).decision;
        assert_eq!(d.reduction > 0.0, held, "{up:?}");
    }
}

#[test]
fn a_broadcast_whose_pushes_arrive_this_slot_books_them_ahead_of_a_lower_ranked_local_flow() {
    let t = topo();
    // A PS server on h3: its broadcast holds nothing yet, but the worker's push into it
    // reported last slot that it books half a link for this one.
    let mut b = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
    b.app_backlog = Some(0.0);
    b.job_remaining_bytes = Some(100.0 * MB);
    b.upstream = vec![PeerProgress {
        sent: 0.0,
        finish: 0.0,
        iteration: 0,
        seen: Slot(9),
        reported_in: Some(Slot(9)),
        next_rate: 0.5 * CAP,
    }];
    // A larger job's ring flow from the same host, with data waiting.
    let mut r = flow(&t, "big", "h3", "h2", FlowRole::Ring, 500.0 * MB);
    r.job_remaining_bytes = Some(10e9);
    let run = |cfg: PolicyConfig| {
        let cfg = PolicyConfig {
            mode: FeedbackMode::Precedence,
            ..cfg
        };
        HostPolicy::new(cfg)
            .step(Slot(10), &[b.clone(), r.clone()])
            .flows
    };
    let on = run(cfg());
    assert!(!on[0].idle);
    // It books what will arrive (Alg. 2 holds it to the push's projected progress) ...
    assert!(
        (on[0].decision.rate - 0.5 * CAP).abs() < 0.01 * CAP,
        "{}",
        on[0].decision.rate
    );
    assert!(!on[0].booking.is_withdraw());
    // ... and the ring flow plans around it.
    assert!(
        on[1].decision.rate <= 0.5 * CAP + 1.0,
        "{}",
        on[1].decision.rate
    );
    let off = run(without("project-upstream"));
    assert!(off[0].idle);
    assert!(off[0].booking.is_withdraw());
    assert!(
        off[1].decision.rate > 0.99 * CAP,
        "{}",
        off[1].decision.rate
    );
    // A report two slots old is not moved on: nothing is known of the slot in between.
    let mut stale = b.clone();
    stale.upstream[0].reported_in = Some(Slot(8));
    let out = HostPolicy::new(cfg()).step(Slot(10), &[stale]).flows;
    assert!(out[0].idle);
}

#[test]
fn each_rank_rule_decides_which_job_claims_a_shared_uplink_first() {
    let t = topo();
    // Job a: a big model, first to start, in its first iteration, many iterations left.
    let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
    a.job_bytes = 500_000_000;
    a.iteration_start = Slot(5);
    a.job_attained_bytes = Some(0.0);
    a.job_remaining_bytes = Some(10e9);
    // Job b: a small model, started later, three iterations done, one left.
    let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 30.0 * MB);
    b.job_bytes = 50_000_000;
    b.iteration_start = Slot(9);
    b.job_attained_bytes = Some(150e6);
    b.job_remaining_bytes = Some(50e6);
    for (rule, first) in [
        (RankRule::IterationStart, "a"),
        (RankRule::JobBytes, "b"),
        (RankRule::AttainedService, "a"),
        (RankRule::RemainingBytes, "b"),
        (RankRule::RemainingOctaves, "b"),
    ] {
        let cfg = PolicyConfig {
            rank: rule,
            mode: FeedbackMode::Precedence,
            ..cfg()
        };
        let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone()]);
        let got: Vec<&str> = out
            .flows
            .iter()
            .filter(|f| f.decision.rate > 0.0)
            .map(|f| &f.id.as_str()[..1])
            .collect();
        assert_eq!(got, vec![first], "{rule}");
    }
}

#[test]
fn a_flow_that_finishes_in_this_slot_goes_before_a_job_of_a_lower_size_class() {
    let t = topo();
    let cfg = PolicyConfig {
        mode: FeedbackMode::Precedence,
        ..cfg()
    };
    // Job a: 100 MB left to its end, so the lower class, and a whole step (30 MB) to send.
    let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
    a.iteration_start = Slot(5);
    a.job_remaining_bytes = Some(100e6);
    // Job b: alike but an octave behind, with the last 3 MB of its step: half a slot's bytes.
    let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 3.0 * MB);
    b.iteration_start = Slot(9);
    b.job_remaining_bytes = Some(300e6);
    let rates = |cfg: PolicyConfig, b: &FlowObs| {
        let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone()]);
        (out.flows[0].decision.rate, out.flows[1].decision.rate)
    };
    // b's last bytes leave in this slot, a takes the rest of the uplink.
    let (ra, rb) = rates(cfg, &b);
    assert!(rb * TAU >= 3.0 * MB - 1.0, "b {rb}");
    assert!((ra + rb - USABLE).abs() < 1.0, "a {ra} b {rb}");
    // Without the rule a's class takes the whole uplink and b's 3 MB wait behind its 30 MB.
    let (ra, rb) = rates(cfg.with_rule("last-slot-first", false).unwrap(), &b);
    assert!((ra - USABLE).abs() < 1.0, "a {ra}");
    assert!(rb * TAU < 0.1 * MB, "b {rb}");
    // More than a slot's bytes left (6 MB at 100 MB/s): b is not in its last slot.
    b.remaining_bytes = 7.0 * MB;
    let (ra, _) = rates(cfg, &b);
    assert!((ra - USABLE).abs() < 1.0, "a {ra}");
}

#[test]
fn slot_n_is_planned_around_what_lower_ranked_flows_committed_in_it() {
    let t = topo();
    // More than the horizon carries: Alg. 1 fills every slot with what it may.
    let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 200.0 * MB);
    f.links[1].committed_now = Some(0.6 * CAP);
    let with = PolicyConfig {
        committed_now: true,
        mode: FeedbackMode::Precedence,
        ..cfg()
    };
    assert!((one(with, 1, &f).decision.rate - (USABLE - 0.6 * CAP)).abs() < 1.0);
    let without = PolicyConfig {
        committed_now: false,
        ..with
    };
    assert_eq!(one(without, 1, &f).decision.rate, USABLE);
}

#[test]
fn a_silent_or_skewed_switch_is_reported_and_a_skewed_one_releases_the_flow() {
    let t = topo();
    let sw = t.node_by_name("sw").unwrap();
    let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
    f.links[1].answer = Answer::Silent { switch: sw };
    let out = one(cfg(), 1, &f);
    assert_eq!(out.degraded, vec![Degraded::SwitchSilent { switch: sw }]);
    assert!(matches!(out.enforce, Enforce::Pace(_)));
    f.links[1].unsynced_switch = Some(sw);
    let out = one(cfg(), 1, &f);
    assert!(out.degraded.contains(&Degraded::ClockSkew { switch: sw }));
    assert_eq!(out.enforce, Enforce::Release);
    assert!(out.booking.is_withdraw());
}

#[test]
fn a_tail_the_sender_holds_is_flushed_at_the_path_rate() {
    let t = topo();
    // 200 kB left, all of it handed over; the downlink is booked to 70 % by others now.
    let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 0.2 * MB);
    f.app_backlog = Some(0.2 * MB);
    let mut load = vec![0.0; 10];
    load[0] = 0.7 * CAP;
    f.links[1].answer = Answer::Load(load);
    // Planned to spread the 200 kB over the slot (3.3 MB/s); flushed, it leaves at the
    // path's rate and is done 2 ms into the slot.
    let on = one(cfg(), 1, &f);
    assert_eq!(paced(on.enforce), on.decision.achievable);
    let off = one(without("flush-tail"), 1, &f);
    assert!(paced(off.enforce) < 0.35 * CAP, "{:?}", off.enforce);
    // Not a tail: more than 5 % of a slot's bytes, or bytes the sender does not hold yet.
    let mut big = f.clone();
    big.remaining_bytes = 2.0 * MB;
    big.app_backlog = Some(2.0 * MB);
    assert!(paced(one(cfg(), 1, &big).enforce) < 0.35 * CAP);
    let mut waiting = f.clone();
    waiting.app_backlog = Some(0.1 * MB);
    assert!(paced(one(cfg(), 1, &waiting).enforce) < 0.35 * CAP);
}

#[test]
fn remaining_bytes_rank_falls_back_to_attained_service_on_the_same_scale() {
    use mlcc_core::host::RankBasis;
    let basis = |remaining: Option<f64>, attained: Option<f64>| RankBasis {
        iteration_start: Slot(7),
        job_bytes: 100_000_000,
        job_attained_bytes: attained,
        job_remaining_bytes: remaining,
        last_slot: false,
    };
    let r = RankRule::RemainingBytes;
    // A job that said it has 1 GB left goes before one that has sent 10 GB and did not say,
    // and after one that has sent only 100 MB: all three on the size-class scale.
    let said = r.rank(basis(Some(1e9), Some(5e9)));
    let old_unsaid = r.rank(basis(None, Some(10e9)));
    let young_unsaid = r.rank(basis(None, Some(1e8)));
    assert!(young_unsaid < said && said < old_unsaid);
    assert_eq!(
        old_unsaid,
        RankRule::AttainedService.rank(basis(None, Some(10e9)))
    );
}

#[test]
fn a_finished_flow_stands_by_at_what_higher_ranked_flows_leave_instead_of_being_released() {
    let t = topo();
    // Job b is between iterations (done); job a, which outranks it, gets 40 % of the uplink
    // (its downlink is 60 % booked); job c, ranked below b, books the rest.
    let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
    a.job_remaining_bytes = Some(30e6);
    a.links[1].answer = Answer::Load(vec![0.6 * CAP; 10]);
    let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 0.0);
    b.app_backlog = Some(0.0);
    b.job_remaining_bytes = Some(300e6);
    let mut c = flow(&t, "c", "h1", "h4", FlowRole::Ring, 30.0 * MB);
    c.job_remaining_bytes = Some(3e9);
    let run = |cfg: PolicyConfig| {
        let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone(), c.clone()]);
        let a_rate = out.flows[0].decision.rate;
        (a_rate, out.flows[1].enforce, out.flows[1].booking.clone())
    };
    let (a_rate, on, booking) = run(cfg());
    assert!(
        a_rate > 0.0 && a_rate < CAP,
        "a gets part of the uplink: {a_rate}"
    );
    assert!(
        booking.is_withdraw(),
        "a finished flow books nothing: {booking:?}"
    );
    // Standing by, b may restart at what a leaves, not at what a and c leave (nothing).
    assert!(
        (paced(on) - (USABLE - a_rate)).abs() < 1.0,
        "{on:?}, a at {a_rate}"
    );
    let (_, off, _) = run(without("standby"));
    assert_eq!(
        off,
        Enforce::Release,
        "without standby a finished flow is released"
    );
    // Where a takes the whole uplink, b stands by at an even share of it (three flows), not at
    // the rate floor.
    let mut a = a.clone();
    a.links[1].answer = Answer::Load(vec![0.0; 10]);
    let out = HostPolicy::new(cfg()).step(Slot(10), &[a, b.clone(), c.clone()]);
    assert!(
        (out.flows[0].decision.rate - USABLE).abs() < 1.0,
        "a takes the uplink"
    );
    let even = paced(out.flows[1].enforce);
    assert!((even - USABLE / 3.0).abs() < 1.0, "b stands by at {even}");
}

#[test]
fn a_flow_ending_this_slot_goes_first_on_its_path_and_hands_it_back() {
    let t = topo();
    // Two jobs' ring flows on the same links, h1 -> h2: a holds its last 2 MB, b has 30 MB.
    let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 2.0 * MB);
    a.app_backlog = Some(2.0 * MB);
    let b = flow(&t, "b", "h1", "h2", FlowRole::Ring, 30.0 * MB);
    let step = |cfg: PolicyConfig, b: &FlowObs| {
        HostPolicy::new(cfg)
            .step(Slot(1), &[a.clone(), b.clone()])
            .flows
    };
    let on = step(cfg(), &b);
    let (ha, hb) = (on[0].handover.unwrap(), on[1].handover.unwrap());
    // The slot orders share the path as Alg. 1 planned it: a spread over the whole slot.
    let (ra, rb) = (paced(on[0].enforce), paced(on[1].enforce));
    assert!((ra * TAU - 2.0 * MB).abs() < 1.0, "a {ra}");
    // a goes first at nearly all of it and is through in 21 ms; b keeps a trickle, then has
    // the whole path; each sends in the slot what its slot order gives it.
    assert!((ha.first + hb.first - (ra + rb)).abs() < 1.0);
    assert!((ha.first * ha.for_secs - 2.0 * MB).abs() < 1.0);
    assert!(ha.for_secs < 0.022, "{ha:?}");
    assert_eq!(ha.for_secs, hb.for_secs);
    assert!(
        hb.first < 0.06 * (ra + rb) && (hb.then - (ra + rb)).abs() < 1.0,
        "{hb:?}"
    );
    let bytes = |h: mlcc_core::host::Handover| h.first * h.for_secs + h.then * (TAU - h.for_secs);
    assert!((bytes(hb) - rb * TAU).abs() < 1.0, "{}", bytes(hb));
    // Off, or on another downlink (swapping would move load between downlinks): no hand-over.
    let off = step(without("handover"), &b);
    assert!(off.iter().all(|f| f.handover.is_none()));
    assert_eq!(paced(off[0].enforce), ra);
    let other = flow(&t, "b", "h1", "h3", FlowRole::Ring, 30.0 * MB);
    assert!(step(cfg(), &other).iter().all(|f| f.handover.is_none()));
    // Not ending: bytes the sender does not hold yet.
    let mut waiting = a.clone();
    waiting.app_backlog = Some(1.0 * MB);
    let out = HostPolicy::new(cfg())
        .step(Slot(1), &[waiting, b.clone()])
        .flows;
    assert!(out.iter().all(|f| f.handover.is_none()));
}
