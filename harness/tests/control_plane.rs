//! Many hosts in one process: ring and PS jobs sharing links on small fabrics, every host
//! running core's policy through the harness's cluster.

use mlcc_core::host::{Enforce, PolicyConfig, RankRule};
use mlcc_core::job::{Arch, Job, Member, Role};
use mlcc_core::topology::{Topology, TopologyBuilder};
use mlcc_core::units::{Bytes, BytesPerSec};
use mlcc_core::{FeedbackMode, FlowRole, SlotConfig};
use mlcc_harness::control_plane::{ControlPlane, Visibility};
use mlcc_harness::fabric::{Fabric, FlowSlot, JobSpec};

/// 125 MB/s (1 Gbit/s) links: 7.5 MB per 60 ms slot.
const CAP: f64 = 125e6;

fn topo(hosts: usize) -> Topology {
    let mut b = TopologyBuilder::new();
    b.add_switch("sw", 0, None);
    for i in 1..=hosts {
        let h = format!("h{i}");
        b.add_host(&h, None, None);
        b.add_duplex(&h, "sw", BytesPerSec(CAP));
    }
    b.build().unwrap()
}

fn member(host: &str, role: Role, rank: u32) -> Member {
    Member {
        host: host.into(),
        role,
        rank,
    }
}

fn ring(id: &str, hosts: &[&str], mb: u64, iterations: u32, arrival: u64) -> JobSpec {
    JobSpec {
        job: Job {
            id: id.into(),
            arch: Arch::Allreduce,
            members: hosts
                .iter()
                .enumerate()
                .map(|(r, h)| member(h, Role::Worker, r as u32))
                .collect(),
            model_bytes: Bytes(mb * 1_000_000),
        },
        iterations,
        compute_slots: 6,
        arrival,
    }
}

fn ps(id: &str, workers: &[&str], servers: &[&str], mb: u64, iterations: u32) -> JobSpec {
    let mut members: Vec<Member> = workers
        .iter()
        .enumerate()
        .map(|(r, h)| member(h, Role::Worker, r as u32))
        .collect();
    members.extend(
        servers
            .iter()
            .enumerate()
            .map(|(r, h)| member(h, Role::Server, r as u32)),
    );
    JobSpec {
        job: Job {
            id: id.into(),
            arch: Arch::Ps,
            members,
            model_bytes: Bytes(mb * 1_000_000),
        },
        iterations,
        compute_slots: 6,
        arrival: 0,
    }
}

/// Three jobs on four hosts: a 3-worker ring, a PS job (2 workers, 2 servers), a 2-worker
/// ring; every uplink and downlink is shared by at least two of them.
fn jobs() -> Vec<JobSpec> {
    vec![
        ring("a", &["h1", "h2", "h3"], 98, 3, 0),
        ps("b", &["h2", "h4"], &["h1", "h3"], 98, 3),
        ring("c", &["h4", "h1"], 98, 3, 2),
    ]
}

/// Runs `jobs` to the end; returns every slot's flows.
fn run(
    cfg: PolicyConfig,
    vis: Visibility,
    jobs: Vec<JobSpec>,
) -> (ControlPlane, Vec<Vec<FlowSlot>>) {
    let t = topo(4);
    let mut cluster = ControlPlane::new(&t, cfg, vis);
    cluster.record();
    let mut fabric = Fabric::new(t, cfg.slots, jobs).unwrap();
    let mut slots = Vec::new();
    while !fabric.finished() {
        assert!(fabric.now().0 < 5_000, "{cfg:?} {vis:?}: did not finish");
        slots.push(fabric.step(&mut cluster));
    }
    (cluster, slots)
}

fn slots() -> SlotConfig {
    SlotConfig::paper()
}

#[test]
fn every_job_finishes_under_every_variant_and_no_table_refuses_a_plan() {
    let mut variants = vec![
        ("mlccd's default", PolicyConfig::new(slots())),
        (
            "paper",
            PolicyConfig::paper(slots(), FeedbackMode::AllOthers),
        ),
        (
            "paper precedence",
            PolicyConfig::paper(slots(), FeedbackMode::Precedence),
        ),
    ];
    for rule in PolicyConfig::RULES {
        variants.push((
            rule,
            PolicyConfig::new(slots()).with_rule(rule, false).unwrap(),
        ));
    }
    for rank in RankRule::ALL {
        variants.push((
            rank.as_str(),
            PolicyConfig {
                rank,
                ..PolicyConfig::new(slots())
            },
        ));
    }
    for (name, cfg) in variants {
        for vis in [Visibility::Skewed, Visibility::Lockstep] {
            if cfg.mode == FeedbackMode::AllOthers && vis == Visibility::Lockstep {
                // Known: perfectly synchronized hosts in all-others mode livelock, each
                // fleeing the slot the others booked last slot (docs/design.md §6).
                continue;
            }
            let (cluster, run) = run(cfg, vis, jobs());
            assert_eq!(cluster.rejected_updates, 0, "{name} {vis:?}");
            let moved: f64 = run.iter().flatten().map(|f| f.moved).sum();
            // a: 3 ring flows × 2·2/3 of 98 MB; b: 4 pushes and 4 broadcasts × 49 MB; c: 2 ring
            // flows × 98 MB; 3 iterations each.
            let expected = 3.0 * (3.0 * 98e6 * 4.0 / 3.0 + 8.0 * 49e6 + 2.0 * 98e6);
            assert!(
                (moved - expected).abs() < 10.0,
                "{name} {vis:?}: {moved} of {expected}"
            );
        }
    }
}

#[test]
fn alg2_keeps_ring_and_broadcast_flows_behind_what_their_upstream_reported() {
    // The paper's variant: no rule overrides Alg. 2's hold-back, and nothing paces beyond
    // the plan, so every enforced rate is Alg. 2's.
    let cfg = PolicyConfig::paper(slots(), FeedbackMode::Precedence);
    let (cluster, _) = run(cfg, Visibility::Skewed, jobs());
    let tau = slots().tau_secs();
    let mut checked = 0;
    for r in cluster.recorded() {
        for (o, e) in r.obs.iter().zip(&r.orders) {
            let Enforce::Pace(rate) = e.enforce else {
                continue;
            };
            let fresh: Vec<f64> = o
                .upstream
                .iter()
                .filter(|p| p.iteration == o.iteration && r.slot.0 - p.seen.0 <= 2)
                .map(|p| p.finish)
                .collect();
            let finish = o.sent_bytes + rate * tau;
            let bound = match o.role {
                FlowRole::Ring => fresh
                    .iter()
                    .copied()
                    .reduce(f64::min)
                    .map(|t| t + o.slack_bytes),
                FlowRole::Bcast => fresh.iter().copied().reduce(f64::min),
                FlowRole::Agg => None,
            };
            if let Some(b) = bound
                && rate > 0.0
            {
                assert!(
                    finish <= b.max(o.sent_bytes) + 1.0,
                    "{} at {}: F {finish} > {b}",
                    o.id,
                    r.slot.0
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "{checked}");
}

#[test]
fn data_dependencies_hold_whatever_the_policy_enforces() {
    // Ring flows and PS pushes never move more than their application held at the start of
    // the slot (a broadcast may forward what reaches its server during the slot).
    for cfg in [
        PolicyConfig::new(slots()),
        PolicyConfig::paper(slots(), FeedbackMode::AllOthers),
    ] {
        let (_, run) = run(cfg, Visibility::Skewed, jobs());
        for f in run.iter().flatten() {
            if f.role != FlowRole::Bcast {
                assert!(f.moved <= f.held + 1e-6, "{f:?}");
            }
        }
    }
}

/// Flow-slots in which a link delivered less than the flows on it were enforced at.
fn overbooked(run: &[Vec<FlowSlot>]) -> usize {
    run.iter().flatten().filter(|f| f.link_limited).count()
}

#[test]
fn planning_slot_n_around_committed_rates_never_overbooks_the_enforced_slot() {
    // Ranked by remaining bytes, a job that starts communicating outranks one already on a
    // link; in plain precedence mode it claims capacity in use in the same slot, and the link
    // delivers less than was enforced. Planning slot n around the slot-n rates already
    // committed (by hosts that planned earlier in the slot) never overbooks it.
    let srpt = PolicyConfig {
        rank: RankRule::RemainingBytes,
        ..PolicyConfig::paper(slots(), FeedbackMode::Precedence)
    };
    let committed = PolicyConfig {
        committed_now: true,
        ..srpt
    };
    let jobs = || {
        vec![
            ps("a", &["h1", "h2"], &["h3", "h4"], 98, 4),
            ring("b", &["h1", "h2"], 98, 3, 0),
            ring("c", &["h3", "h4", "h1"], 98, 2, 3),
        ]
    };
    let (_, with) = run(committed, Visibility::Skewed, jobs());
    let (_, without) = run(srpt, Visibility::Skewed, jobs());
    assert_eq!(overbooked(&with), 0);
    assert!(overbooked(&without) > 0);
}
