//! What the rule modules' tests share: a one-switch fabric of 100 MB/s links and a flow on it
//! with nothing known but its size and a backlog, stepped through a fresh policy.

pub(crate) use std::sync::Arc;

pub(crate) use super::{
    Answer, Booking, Enforce, FlowObs, FlowOut, HostPolicy, LINK_HEADROOM_SHARE, LinkObs,
    PeerProgress, PolicyConfig,
};
pub(crate) use crate::job::JobProgress;
pub(crate) use crate::topology::{LinkId, Topology, TopologyBuilder};
pub(crate) use crate::units::BytesPerSec;
pub(crate) use crate::{FeedbackMode, FlowId, FlowRole, Slot, SlotConfig};

/// 100 MB/s links: 6 MB per 60 ms slot.
pub(crate) const CAP: f64 = 100e6;
/// What the policy plans of a link: its capacity less the headroom it leaves for rate floors.
pub(crate) const USABLE: f64 = CAP * (1.0 - LINK_HEADROOM_SHARE);
pub(crate) const MB: f64 = 1e6;
pub(crate) const TAU: f64 = 0.06;

/// h1..h4 on one switch `sw`.
pub(crate) fn topo() -> Topology {
    let mut b = TopologyBuilder::new();
    b.add_switch("sw", 0, None);
    for i in 1..=4 {
        let h = format!("h{i}");
        b.add_host(&h, None, None);
        b.add_duplex(&h, "sw", BytesPerSec(CAP));
    }
    b.build().unwrap()
}

pub(crate) fn link(t: &Topology, name: &str) -> LinkId {
    t.link_by_name(name).unwrap()
}

/// mlccd's policy with the paper's slots.
pub(crate) fn cfg() -> PolicyConfig {
    PolicyConfig::new(SlotConfig::paper())
}

pub(crate) fn without(rule: &str) -> PolicyConfig {
    cfg().with_rule(rule, false).unwrap()
}

/// A flow of `job` from `src` to `dst` with `remaining` bytes left, 20 MB waiting in its
/// sockets, an unbooked downlink and nothing else known.
pub(crate) fn flow(
    t: &Topology,
    job: &str,
    src: &str,
    dst: &str,
    role: FlowRole,
    remaining: f64,
) -> FlowObs {
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
    f.job_progress.model_bytes = 100_000_000;
    f.remaining_bytes = Some(remaining);
    f.app_backlog = Some(20.0 * MB);
    f
}

/// A job of `model` bytes per iteration, `completed` of its `total` iterations done.
pub(crate) fn job(model: u64, completed: u64, total: u64) -> JobProgress {
    JobProgress {
        model_bytes: model,
        completed,
        total,
    }
}

/// `f` alone through a fresh policy in slot `slot`.
pub(crate) fn one(cfg: PolicyConfig, slot: u64, f: &FlowObs) -> FlowOut {
    HostPolicy::new(cfg)
        .step(Slot(slot), std::slice::from_ref(f))
        .flows
        .remove(0)
}

pub(crate) fn paced(e: Enforce) -> f64 {
    match e {
        Enforce::Pace(r) => r,
        Enforce::Release => panic!("released"),
    }
}
