//! The fluid physics on a hand-built slot: a 3-host, one-switch cluster at 1 Gbit/s
//! (125 MB/s per host link; 7.5 MB per 60 ms slot).

use mlcc_core::SlotConfig;
use mlcc_core::flow::FlowRole;
use mlcc_core::job::Arch;
use mlcc_core::routing::Routes;
use mlcc_core::topology::Topology;
use mlcc_core::units::BytesPerSec;
use mlcc_sim::engine::{Engine, Phase};
use mlcc_sim::model_zoo;
use mlcc_sim::physics::{self, Offers, Scratch};
use mlcc_sim::placement::Placement;
use mlcc_sim::policy::{self, Context};
use mlcc_sim::state::{FlowRef, Sharing};
use mlcc_sim::workload::{JobSpec, Pinned};

const LINK: f64 = 125e6;
const MB: f64 = 1e6;

fn pinned(id: &str, arch: Arch, workers: &[&str], servers: &[&str]) -> JobSpec {
    let names = |h: &[&str]| h.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    JobSpec {
        id: id.into(),
        arrival_s: 0.0,
        model: model_zoo::by_name("resnet50").unwrap(),
        arch,
        workers: workers.len() as u32,
        servers: servers.len() as u32,
        iterations: 2,
        pinned: Some(Pinned {
            workers: names(workers),
            servers: names(servers),
            model_bytes: 100_000_000,
            compute_s: 0.1,
            whole_aggregate: true,
        }),
    }
}

/// Which flow of job `j` has `role` and leaves host `src`.
fn flow_of(t: &Topology, e: &Engine, j: usize, role: FlowRole, src: &str) -> usize {
    let src = t.node_by_name(src).unwrap();
    e.jobs[j]
        .flows
        .iter()
        .position(|f| f.role == role && f.src == src)
        .unwrap()
}

/// What the PS job's reply from h1 and the ring's flow from h1 move in one slot in which every
/// active flow is released to kernel TCP (offered its path's rate, as a flow below mlcc's bar
/// is), the push already in and the reply with `tail` bytes left.
fn one_released_slot(tail: f64) -> (f64, f64) {
    // A PS job (worker h2, server h1) and a ring (h1, h3): h1's uplink carries the server's
    // reply to h2 and the ring's flow to h3.
    let specs = [
        pinned("ps", Arch::Ps, &["h2"], &["h1"]),
        pinned("ring", Arch::Allreduce, &["h1", "h3"], &[]),
    ];
    let t = Topology::single_switch(3, BytesPerSec(LINK)).unwrap();
    let r = Routes::new(&t);
    let slots = SlotConfig::paper();
    let mut p = policy::by_name("fair").unwrap().build(&Context {
        topo: &t,
        slots,
        switch_tables: true,
    });
    let mut e = Engine::new(&t, &r, slots, &specs, Placement::Packed, 1).unwrap();
    while !e.jobs.iter().all(|j| matches!(j.phase, Phase::Comm { .. })) {
        assert!(e.now() < 100, "the jobs never communicate together");
        e.step(p.as_mut()).unwrap();
    }
    let push = flow_of(&t, &e, 0, FlowRole::Agg, "h2");
    let reply = flow_of(&t, &e, 0, FlowRole::Bcast, "h1");
    let ring = flow_of(&t, &e, 1, FlowRole::Ring, "h1");
    let ps = &mut e.jobs[0];
    ps.flows[push].sent = ps.flows[push].bytes;
    ps.flows[reply].sent = ps.flows[reply].bytes - tail;
    e.jobs[1].flows[ring].sent = 0.0;
    let active = [
        FlowRef {
            job: 0,
            flow: reply as u32,
        },
        FlowRef {
            job: 1,
            flow: ring as u32,
        },
    ];
    for (i, a) in active.iter().enumerate() {
        e.jobs[a.job as usize].flows[a.flow as usize].active_idx = Some(i as u32);
    }
    let before = (e.jobs[0].flows[reply].sent, e.jobs[1].flows[ring].sent);
    let offers = Offers {
        rates: &[LINK; 2],
        fill: &[None; 2],
        paced: true,
    };
    let mut s = Scratch::new(&t);
    physics::advance(
        &mut e.jobs,
        &active,
        &offers,
        slots.tau_secs(),
        Sharing::Fabric,
        &mut s,
    );
    (
        e.jobs[0].flows[reply].sent - before.0,
        e.jobs[1].flows[ring].sent - before.1,
    )
}

#[test]
fn a_reply_whose_aggregate_is_in_sends_its_tail_like_any_flow_that_holds_its_bytes() {
    // Half a megabyte left of the reply, the ring flow a whole slot's worth: on h1's uplink
    // each is served at half its line rate until the reply is done (4 ms at 62.5 MB/s), then
    // the ring flow alone. Offered at its tail spread over the slot instead (8.3 MB/s against
    // the ring's 125), it would leave a sixteenth of its tail behind here, and with every
    // further flow on the link more: a tail shrinking slot by slot, as a released reply's did
    // beside planned jobs (docs/results.md, 2026-12-06).
    let tail = 0.5 * MB;
    let (reply, ring) = one_released_slot(tail);
    assert!(
        (reply - tail).abs() < 1.0,
        "reply moved {reply} of its {tail}"
    );
    let slot = LINK * SlotConfig::paper().tau_secs();
    assert!(
        (reply + ring - slot).abs() < 1.0,
        "{reply} + {ring} is not the link's {slot}"
    );
}
