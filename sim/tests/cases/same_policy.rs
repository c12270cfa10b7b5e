//! One scheduler (docs/design.md §2, §11a): mlccd and mlcc-sim are two drivers of core's
//! [`HostPolicy`], differing only in where observations come from.
//!
//! - the simulator's `mlcc` runs mlccd's configuration, as mlccd resolves it with no flags;
//! - random observation sequences driven through the daemon's path (`HostScheduler`: progress
//!   files, sockets, switch answers, peer exchange, clock skew) decide exactly what a fresh
//!   policy with the simulator's `mlcc` config decides from the same observations, and the
//!   daemon's orders, schedules and peer messages carry those decisions unchanged;
//! - every rate the simulator's `mlcc` sets is what a fresh policy with mlccd's config decides
//!   from the observations the simulator built, replayed host by host (and the physics is given
//!   exactly those rates).
//!
//! So the two shells add no rule of their own, and they run the same rules.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use mlcc_core::flow::FlowRole;
use mlcc_core::host::{Enforce, FlowObs, HostPolicy, PolicyConfig, StepOut};
use mlcc_core::job::{Arch, Role};
use mlcc_core::routing::Routes;
use mlcc_core::topology::{NodeId, Topology, TopologyBuilder};
use mlcc_core::units::parse_rate;
use mlcc_core::{Slot, SlotConfig};
use mlcc_proto::v1 as pb;
use mlcc_scheduler::config::DaemonArgs;
use mlcc_scheduler::datapath::{SocketKey, SocketStats};
use mlcc_scheduler::host::{
    FeedbackAnswers, HostConfig, HostScheduler, Observation, ProcessObs, SlotPlan,
};
use mlcc_scheduler::progress::{ProgressHeader, ProgressSnapshot};
use mlcc_scheduler::sockets::TcpConn;
use mlcc_sim::engine::Engine;
use mlcc_sim::model_zoo;
use mlcc_sim::placement::Placement;
use mlcc_sim::policy::mlcc::{Mlcc, Visibility, offered_rate};
use mlcc_sim::policy::{self, Context};
use mlcc_sim::workload::JobSpec;

const MB: u64 = 1_000_000;

/// h1..h4 (10.0.0.1..4) on one emulated switch sw1, 1 Gbit/s links: what both drivers run on.
fn topo() -> Arc<Topology> {
    let mut b = TopologyBuilder::new();
    let cap = parse_rate("1Gbit").unwrap();
    b.add_switch("sw1", 0, Some("127.0.0.1:1".into()));
    for i in 1..=4 {
        let name = format!("h{i}");
        b.add_host(&name, Some(format!("10.0.0.{i}").parse().unwrap()), None);
        b.add_duplex(&name, "sw1", cap);
    }
    Arc::new(b.build().unwrap())
}

fn sim_config(name: &str, slots: SlotConfig) -> (PolicyConfig, Visibility) {
    policy::by_name(name)
        .and_then(|e| e.mlcc_config(slots))
        .unwrap_or_else(|| panic!("{name} is an mlcc variant"))
}

#[test]
fn the_simulators_mlcc_is_mlccd_as_it_starts_with_no_flags() {
    let daemon = DaemonArgs {
        host: Some("h1".into()),
        topology: Some("unused.toml".into()),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    let slots = daemon.policy.slots;
    let (sim, vis) = sim_config("mlcc", slots);
    assert_eq!(daemon.host_config().policy, sim);
    assert_eq!(HostConfig::new("h1", slots).policy, sim);
    assert_eq!(sim, PolicyConfig::new(slots));
    assert_eq!(vis, Visibility::Skewed);
    // A variant is a different config, not different code: the paper's is another value.
    assert_ne!(sim_config("mlcc-paper", slots).0, sim);
}

/// splitmix64: the random observation sequences, reproducible by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn conn(local: &str, remote: &str, accepted: bool) -> TcpConn {
    TcpConn {
        local: local.parse().unwrap(),
        remote: remote.parse().unwrap(),
        accepted,
    }
}

fn header(job: &str, arch: Arch, role: Role, rank: u32, world: u32, model: u64) -> ProgressHeader {
    ProgressHeader {
        job_id: job.into(),
        arch: Some(arch),
        role,
        rank,
        world_size: world,
        model_bytes: model,
        pid: 100 + rank,
        start_time_ns: 0,
        cc_name: String::new(),
        total_iterations: 0,
    }
}

/// One process on h1 whose counters move at random: what it handed over, what got acked.
struct Proc {
    obs: ProcessObs,
    keys: Vec<SocketKey>,
    acked: Vec<u64>,
}

impl Proc {
    fn new(h: ProgressHeader, conns: Vec<TcpConn>) -> Self {
        let keys: Vec<SocketKey> = conns
            .iter()
            .filter(|c| !c.accepted)
            .map(|c| SocketKey::new(7, c.local, c.remote))
            .collect();
        let acked = vec![0; keys.len()];
        Proc {
            obs: ProcessObs {
                header: h,
                snapshot: ProgressSnapshot::default(),
                conns,
            },
            keys,
            acked,
        }
    }

    /// A slot of random progress: sometimes a new iteration, bytes acked, bytes handed over
    /// beyond them (or nothing waiting: an idle flow); a socket that does not move is quiet.
    fn step(&mut self, rng: &mut Rng, slot: u64) {
        let s = &mut self.obs.snapshot;
        if rng.chance(10) {
            s.last_iteration_bytes = s.sent_this_iteration();
            s.iteration += 1;
            s.iteration_start_sent = s.bytes_sent;
            s.iteration_start_ns = slot * 60_000_000;
        }
        for a in &mut self.acked {
            if !rng.chance(25) {
                *a += rng.below(8 * MB);
            }
        }
        let acked: u64 = self.acked.iter().sum();
        let waiting = if rng.chance(30) { 0 } else { rng.below(6 * MB) };
        s.bytes_sent = s.bytes_sent.max(acked + waiting);
    }

    fn stats(&self) -> impl Iterator<Item = (SocketKey, SocketStats)> + '_ {
        self.keys.iter().zip(&self.acked).map(|(k, &a)| {
            (
                *k,
                SocketStats {
                    bytes_sent: a,
                    bytes_acked: a,
                    ..Default::default()
                },
            )
        })
    }
}

/// The switch's answer: random loads, sometimes silent, sometimes missing a link.
fn answers(
    rng: &mut Rng,
    req: &mlcc_scheduler::host::FeedbackRequests,
    k: usize,
) -> FeedbackAnswers {
    let mut out = FeedbackAnswers::new();
    for (name, batch) in &req.per_switch {
        if rng.chance(15) {
            continue;
        }
        let mut flows = Vec::new();
        for q in &batch.items {
            let mut links = Vec::new();
            for l in &q.links {
                if rng.chance(10) {
                    continue;
                }
                links.push(pb::LinkLoad {
                    link: l.clone(),
                    capacity_bytes_per_sec: 125e6,
                    load_bytes_per_sec: (0..k).map(|_| rng.unit() * 125e6).collect(),
                    committed_bytes_per_sec: None,
                });
            }
            flows.push(pb::FlowFeedback {
                flow_id: q.flow_id.clone(),
                links,
            });
        }
        out.insert(
            name.clone(),
            pb::FetchFeedbackReply {
                flows,
                ..Default::default()
            },
        );
    }
    out
}

/// A peer's report of `id` made in `slot` (0: the old form, no slot and no next booking).
fn progress(id: &str, finish: u64, iteration: u64, slot: u64, next_rate: f64) -> pb::FlowProgress {
    pb::FlowProgress {
        flow_id: id.into(),
        sent_bytes: finish / 2,
        finish_bytes: finish,
        planned_rate_bytes_per_sec: 0.0,
        iteration,
        slot,
        next_rate_bytes_per_sec: next_rate,
        sockets: Vec::new(),
        learned_bytes_per_iteration: 0,
    }
}

/// The daemon's orders, schedules and peer messages carry `out` unchanged: every socket's
/// order is core's split of the flow's rate (or of its hand-over's two rates) over its busy and
/// quiet connections.
fn assert_carried(host: &HostScheduler, plan: &SlotPlan, out: &StepOut, ctx: &str) {
    assert_eq!(host.flows().count(), out.flows.len(), "{ctx}");
    for fo in &out.flows {
        let f = host.flows().find(|f| f.id == fo.id).unwrap();
        assert_eq!(f.decision.as_ref(), Some(&fo.decision), "{ctx}: {}", fo.id);
        let quiet = f.quiet_sockets();
        assert_eq!(
            (fo.connections.count, fo.connections.quiet),
            (f.sockets.len(), quiet.len()),
            "{ctx}: {}",
            fo.id
        );
        let expect = |rate: f64, k: &SocketKey| {
            let r = fo.connections.split(rate);
            Some(if quiet.contains(k) { r.quiet } else { r.busy } as u64)
        };
        match fo.enforce {
            Enforce::Release => {
                for k in &f.sockets {
                    assert!(plan.clear.contains(k), "{ctx}: {} not released", fo.id);
                }
            }
            Enforce::Pace(rate) => {
                let first = fo.handover.map_or(rate, |h| h.first);
                for k in &f.sockets {
                    let o = plan.orders.iter().find(|o| o.key == *k);
                    let got = o.map(|o| o.bytes_per_sec);
                    assert_eq!(got, expect(first, k), "{ctx}: {}", fo.id);
                    assert_eq!(o.map(|o| o.fill), Some(fo.fill), "{ctx}: {}", fo.id);
                    if let Some(h) = fo.handover {
                        let mut then = plan.handovers.iter().flat_map(|(_, o)| o);
                        let got = then.find(|o| o.key == *k).map(|o| o.bytes_per_sec);
                        assert_eq!(got, expect(h.then, k), "{ctx}: {}", fo.id);
                    }
                }
            }
        }
        let item = plan
            .schedules
            .values()
            .flat_map(|b| &b.items)
            .find(|i| i.flow_id == fo.id.as_str());
        if let Some(item) = item {
            assert_eq!(item.rank, fo.booking.key().rank.0, "{ctx}: {}", fo.id);
            assert_eq!(item.done, fo.booking.is_withdraw(), "{ctx}: {}", fo.id);
            if !item.done {
                assert_eq!(
                    item.rates_bytes_per_sec, fo.decision.plan,
                    "{ctx}: {}",
                    fo.id
                );
            }
        }
        let msg = plan
            .peers
            .iter()
            .flat_map(|(_, flows)| flows)
            .find(|m| m.flow_id == fo.id.as_str())
            .unwrap_or_else(|| panic!("{ctx}: no progress for {}", fo.id));
        assert_eq!(
            (msg.sent_bytes, msg.finish_bytes),
            (fo.sent as u64, fo.finish as u64),
            "{ctx}: {}",
            fo.id
        );
    }
}

#[test]
fn the_daemons_path_decides_what_the_simulators_config_decides() {
    let topo = topo();
    let slots = SlotConfig::paper();
    let k = slots.horizon();
    let (sim_cfg, _) = sim_config("mlcc", slots);
    let mut decided_rates = 0usize;
    let mut held_or_idle = BTreeSet::new();
    for seed in 0..24u64 {
        let mut rng = Rng(seed);
        let mut host = HostScheduler::new(HostConfig::new("h1", slots), topo.clone()).unwrap();
        host.record_observations(true);
        let mut replay = HostPolicy::new(sim_cfg);
        // A ring worker h1 → h2 (its predecessor on h3), a PS worker pushing to h3 (over two
        // connections) and h4, and a PS worker of a job of unknown size pushing to h4.
        let mut procs = vec![
            Proc::new(
                header("r", Arch::Allreduce, Role::Worker, 0, 3, 30 * MB),
                vec![
                    conn("10.0.0.1:40000", "10.0.0.2:5000", false),
                    conn("10.0.0.1:5000", "10.0.0.3:40001", true),
                ],
            ),
            Proc::new(
                header("p", Arch::Ps, Role::Worker, 0, 2, 40 * MB),
                vec![
                    conn("10.0.0.1:41000", "10.0.0.3:9000", false),
                    conn("10.0.0.1:41002", "10.0.0.3:9001", false),
                    conn("10.0.0.1:41001", "10.0.0.4:9000", false),
                ],
            ),
            Proc::new(
                header("u", Arch::Ps, Role::Worker, 0, 2, 0),
                vec![conn("10.0.0.1:42000", "10.0.0.4:9002", false)],
            ),
        ];
        for n in 1..40u64 {
            let slot = Slot(1000 + n);
            for p in &mut procs {
                p.step(&mut rng, slot.0);
            }
            let obs = Observation {
                processes: procs.iter().map(|p| p.obs.clone()).collect(),
                stats: Some(procs.iter().flat_map(Proc::stats).collect()),
            };
            let unsynced: BTreeSet<String> = if rng.chance(5) {
                ["sw1".to_string()].into()
            } else {
                BTreeSet::new()
            };
            host.set_unsynced_switches(unsynced);
            let req = host.observe(slot, &obs);
            let ans = answers(&mut rng, &req, k);
            let plan = host.plan(&ans);
            let seen: Vec<FlowObs> = host.recorded_observations().unwrap().to_vec();
            let out = replay.step(slot, &seen);
            assert_carried(&host, &plan, &out, &format!("seed {seed} slot {}", slot.0));
            decided_rates += out.flows.len();
            for (fo, o) in out.flows.iter().zip(&seen) {
                if fo.idle {
                    held_or_idle.insert("idle");
                }
                let c = fo.connections;
                if c.quiet > 0 && c.quiet < c.count && matches!(fo.enforce, Enforce::Pace(_)) {
                    held_or_idle.insert("quiet sockets");
                }
                if o.remaining_bytes.is_none() && !fo.booking.is_withdraw() {
                    held_or_idle.insert("unknown size");
                }
                if fo.handover.is_some() {
                    held_or_idle.insert("handed over");
                }
                if fo.decision.reduction > 0.0 {
                    held_or_idle.insert("held back");
                }
                if fo.decision.boost > 0.0 {
                    held_or_idle.insert("boosted");
                }
                if fo.enforce == Enforce::Release {
                    held_or_idle.insert("released");
                }
            }
            // Peers report back: the ring predecessor into h1, the PS's broadcasts; sometimes a
            // peer is silent.
            let it_r = procs[0].obs.snapshot.iteration;
            let it_p = procs[1].obs.snapshot.iteration;
            // The reports speak of this slot, or say nothing of it; their next booking moves
            // them on in the next slot (`project_upstream`).
            let of = if rng.chance(70) { slot.0 } else { 0 };
            let next = rng.unit() * 125e6;
            host.on_exchange(
                "h3",
                &[progress("r/h3>h1/ring", rng.below(60 * MB), it_r, of, next)],
            );
            host.on_exchange_reply(
                "h3",
                &[progress(
                    "p/h3>h1/bcast",
                    rng.below(30 * MB),
                    it_p,
                    of,
                    next,
                )],
            );
            if rng.chance(20) {
                host.on_exchange_failed("h2");
            } else {
                host.on_exchange_reply("h2", &[]);
            }
        }
    }
    assert!(decided_rates > 1000, "{decided_rates}");
    // The sequences reach the rules, not only the plain path.
    for what in [
        "idle",
        "held back",
        "boosted",
        "released",
        "quiet sockets",
        "unknown size",
        "handed over",
    ] {
        assert!(
            held_or_idle.contains(what),
            "no {what} flow in any sequence"
        );
    }
}

fn job(id: &str, arch: Arch, workers: u32, servers: u32, iterations: u32) -> JobSpec {
    JobSpec {
        id: id.into(),
        arrival_s: 0.0,
        model: model_zoo::by_name("resnet50").unwrap(),
        arch,
        workers,
        servers,
        iterations,
        pinned: None,
    }
}

#[test]
fn every_rate_the_simulator_sets_is_the_daemon_configs_decision() {
    for per_layer in [false, true] {
        every_rate_is_the_daemon_configs_decision(per_layer);
    }
}

/// One job model: the blob (`per_layer` false) or buckets released as the backward pass goes,
/// which core sees only as the application's backlog growing bucket by bucket.
fn every_rate_is_the_daemon_configs_decision(per_layer: bool) {
    let topo = topo();
    let routes = Routes::new(&topo);
    let slots = SlotConfig::paper();
    let (cfg, vis) = sim_config("mlcc", slots);
    let mut sim = Mlcc::new(
        &Context {
            topo: &topo,
            slots,
            switch_tables: true,
        },
        cfg,
        vis,
    );
    sim.record();
    // Ring and PS jobs sharing the four hosts' links.
    let specs = [
        job("a", Arch::Allreduce, 3, 0, 3),
        job("b", Arch::Ps, 2, 2, 3),
        job("c", Arch::Allreduce, 2, 0, 4),
    ];
    let mut e = Engine::new(&topo, &routes, slots, &specs, Placement::Packed, 1)
        .unwrap()
        .with_per_layer(per_layer);
    // The rates the engine's physics was given are the offered rates of the recorded
    // enforcements.
    let mut checked = 0;
    while !e.finished() {
        assert!(e.now() < 10_000, "did not finish");
        let before = sim.recorded().len();
        e.step(&mut sim).unwrap();
        for r in &sim.recorded()[before..] {
            for (o, order) in r.obs.iter().zip(&r.orders) {
                let f = e
                    .jobs
                    .iter()
                    .flat_map(|j| &j.flows)
                    .find(|f| f.id == o.id)
                    .unwrap();
                // A flow sending in a fill class sends unpaced.
                let offered = match order.fill {
                    Some(_) => f64::INFINITY,
                    None => offered_rate(order.enforce, &topo, &f.path),
                };
                assert_eq!(f.last_rate, offered, "{}", o.id);
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
    // A PS worker holds its whole gradient once its compute is over; under the per-layer model
    // core saw pushes holding part of what was left (buckets not yet released).
    let partial = sim
        .recorded()
        .iter()
        .flat_map(|r| &r.obs)
        .filter(|o| o.role == FlowRole::Agg)
        .filter(|o| {
            let left = o
                .remaining_bytes
                .expect("the simulator knows every flow's size");
            o.app_backlog.is_some_and(|b| b + 1.0 < left)
        })
        .count();
    assert_eq!(partial > 0, per_layer, "{partial}");
    let daemon_cfg = |h: NodeId| HostConfig::new(topo.node(h).name.clone(), slots).policy;
    let mut replay: HashMap<NodeId, HostPolicy> = HashMap::new();
    let mut compared = 0;
    for r in sim.recorded() {
        let p = replay
            .entry(r.host)
            .or_insert_with(|| HostPolicy::new(daemon_cfg(r.host)));
        let out = p.step(r.slot, &r.obs);
        assert_eq!(out.flows.len(), r.orders.len());
        for (fo, order) in out.flows.iter().zip(&r.orders) {
            let decided = (fo.enforce, fo.fill);
            assert_eq!(
                decided,
                (order.enforce, order.fill),
                "slot {} {}",
                r.slot.0,
                fo.id
            );
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared}");
}
