//! Snapshots of plans for fixed inputs, so any change in planning behaviour shows up as a diff
//! in review (`cargo insta review` to accept an intended change).

use std::time::Duration;

use mlcc_core::dependency::Dependency;
use mlcc_core::job::{Arch, Job, Member, Role};
use mlcc_core::planner::{FlowInput, LinkFeedback, PlannerConfig, SlotOutput};
use mlcc_core::slot_allocation::{self, SlotPrice};
use mlcc_core::topology::LinkId;
use mlcc_core::{Bytes, FeedbackMode, FlowId, Planner, Rank, Slot, SlotConfig};

/// Rounds every float so snapshots do not churn on the last bit.
fn rounded(out: &SlotOutput) -> serde_json::Value {
    fn walk(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Number(n) if n.is_f64() => {
                serde_json::json!((n.as_f64().unwrap() * 1000.0).round() / 1000.0)
            }
            serde_json::Value::Array(a) => a.into_iter().map(walk).collect(),
            serde_json::Value::Object(o) => o.into_iter().map(|(k, v)| (k, walk(v))).collect(),
            other => other,
        }
    }
    walk(serde_json::to_value(out).unwrap())
}

fn link(id: u32, capacity: f64, load: Vec<f64>) -> LinkFeedback {
    LinkFeedback {
        link: LinkId(id),
        capacity,
        load,
    }
}

/// Three local flows of two jobs share an uplink (link 0, 1 Gbit/s); the ring flow's path
/// also crosses a downlink another host booked heavily in the first slots.
fn scenario() -> Vec<FlowInput> {
    let gbit = 125e6;
    vec![
        FlowInput {
            id: FlowId::new("ring/h1>h2/ring").unwrap(),
            rank: Rank(100),
            remaining_bytes: 20e6,
            sent_bytes: 4e6,
            path: vec![
                link(0, gbit, vec![0.0; 10]),
                link(
                    1,
                    gbit,
                    vec![1e8, 1e8, 5e7, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ),
            ],
            dependency: Dependency::Ring {
                predecessor_progress: 6e6,
                slack_bytes: 2e6,
            },
            delivery: None,
            rate_cap: f64::INFINITY,
        },
        FlowInput {
            id: FlowId::new("ps/h1>h4/agg").unwrap(),
            rank: Rank(101),
            remaining_bytes: 8e6,
            sent_bytes: 0.0,
            path: vec![link(0, gbit, vec![0.0; 10]), link(2, gbit, vec![0.0; 10])],
            dependency: Dependency::Aggregation {
                broadcast_progress: vec![0.0],
            },
            delivery: None,
            rate_cap: f64::INFINITY,
        },
        FlowInput {
            id: FlowId::new("ps/h1>h3/bcast").unwrap(),
            rank: Rank(101),
            remaining_bytes: 8e6,
            sent_bytes: 1e6,
            path: vec![link(0, gbit, vec![0.0; 10]), link(3, gbit, vec![0.0; 10])],
            dependency: Dependency::Broadcast {
                aggregation_progress: vec![2e6, 3e6],
            },
            delivery: None,
            rate_cap: f64::INFINITY,
        },
    ]
}

fn planner(mode: FeedbackMode) -> Planner {
    Planner::new(PlannerConfig {
        slots: SlotConfig::new(Duration::from_millis(60), 10).unwrap(),
        eta: 1.0,
        mode,
    })
}

#[test]
fn snapshot_precedence_slot() {
    let out = planner(FeedbackMode::Precedence).plan(Slot(102), &scenario());
    insta::assert_json_snapshot!("precedence_slot", rounded(&out));
}

#[test]
fn snapshot_all_others_two_slots() {
    let mut p = planner(FeedbackMode::AllOthers);
    p.plan(Slot(102), &scenario());
    let mut next = scenario();
    next[0].sent_bytes += 3e6;
    next[0].remaining_bytes -= 3e6;
    let out = p.plan(Slot(103), &next);
    insta::assert_json_snapshot!("all_others_second_slot", rounded(&out));
}

#[test]
fn snapshot_alg1_schedules() {
    let slots: Vec<SlotPrice> = (0..10)
        .map(|t| SlotPrice {
            price: [0.8, 0.8, 0.4, 0.0, 0.0, 0.2, 0.0, 0.0, 0.9, 0.0][t],
            cap: [
                25e6, 25e6, 75e6, 125e6, 125e6, 100e6, 125e6, 125e6, 12.5e6, 125e6,
            ][t],
        })
        .collect();
    let schedules: Vec<_> = [1e6, 1.2e7, 3e7, 6e7, 1e9]
        .iter()
        .map(|&g| slot_allocation::schedule(g, 0.06, &slots, 125e6, 1.0))
        .collect();
    insta::assert_json_snapshot!("alg1_schedules", schedules);
}

#[test]
fn snapshot_flow_groups_of_paper_jobs() {
    let m = |host: &str, role, rank| Member {
        host: host.into(),
        role,
        rank,
    };
    let jobs = [
        Job {
            id: "vgg16".into(),
            arch: Arch::Ps,
            members: vec![
                m("h1", Role::Worker, 0),
                m("h2", Role::Worker, 1),
                m("h3", Role::Server, 0),
                m("h4", Role::Server, 1),
            ],
            model_bytes: Bytes(528_000_000),
        },
        Job {
            id: "gpt2".into(),
            arch: Arch::Allreduce,
            members: vec![
                m("h1", Role::Worker, 0),
                m("h5", Role::Worker, 1),
                m("h6", Role::Worker, 2),
            ],
            model_bytes: Bytes(1_200_000_000),
        },
    ];
    let groups: Vec<_> = jobs.iter().map(|j| j.flow_groups().unwrap()).collect();
    insta::assert_json_snapshot!("paper_job_flow_groups", groups);
}
