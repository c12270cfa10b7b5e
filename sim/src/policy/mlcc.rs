//! `mlcc`: the system itself — mlcc-harness's [`ControlPlane`] (core's per-host policy on every host,
//! the very code mlccd runs, and one load table per link owner) on the simulator's physics.
//!
//! The simulator differs from mlccd only in where observations come from: bytes sent, the
//! application's backlog and last slot's delivery from the physics instead of sockets and
//! progress files, feedback from the tables in this process instead of switch sessions, and
//! peers' progress from the previous slot's exchange (one slot stale, as the daemon sees it).

use std::sync::Arc;

use mlcc_core::Slot;
use mlcc_core::flow::FlowRole;
use mlcc_core::hash::Map;
use mlcc_core::host::{Enforce, PolicyConfig};
use mlcc_core::job;
use mlcc_core::learn::identity::{Identity, Label, Report};
use mlcc_core::learn::{Learned as LearnedEstimate, Learner, LearnerConfig};
use mlcc_core::topology::{LinkId, NodeId, Topology};
use mlcc_harness::control_plane::{Active, ControlPlane, Order, Recorded, Training};

pub use mlcc_harness::control_plane::Visibility;

use super::{Context, Policy, View};
use crate::physics;
use crate::state::{Job, Phase};

pub struct Mlcc {
    cluster: ControlPlane,
    /// Per reply flow of a PS that replies only to a whole aggregate: the iteration its
    /// replies are in and the slot they began, which its progress file gives as the
    /// iteration's start (the testbed's trainer calls `iteration_begin` when the aggregate is
    /// whole, not when the pushes began).
    replies_began: Map<(u32, u32), (u32, u64)>,
    /// This slot's orders, in the order of the active flows.
    orders: Vec<Order>,
    /// `Some` with `progress=off`: each job's progress learned from its bytes alone.
    learning: Option<Learning>,
}

/// Where an mlcc variant's hosts get each job's progress from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// A progress file (`progress=on`, the default).
    #[default]
    Files,
    /// Learned from its bytes alone (`progress=off`), as mlccd learns a process with no
    /// progress file: a flow whose process is below the learner's bar is left to kernel TCP.
    Learned,
    /// Learned, with each job's length told (`progress=told`), as mlccd reads
    /// `MLCC_TOTAL_ITERATIONS` from a learned process's environment; the iterations are still
    /// the learner's.
    Told,
}

/// Progress as core's learner reads it from the bytes each job sends from each host, as mlccd
/// reads a process with no progress file ([`mlcc_core::learn`]): one learner per (job,
/// sending host), fed every slot whatever the job is doing. Each such process names its job as
/// mlccd's does ([`identity`]): its own label at first, then the least heard over its flows'
/// connections from the learned processes that send to it (mlccd's peer reports, one slot
/// stale).
#[derive(Default)]
struct Learning {
    procs: Map<(u32, NodeId), Learned>,
    /// Each job's length is known (`progress=told`), as mlccd reads it from a learned
    /// process's environment.
    told: bool,
}

struct Learned {
    learner: Learner,
    /// Its job and iteration count as the reports it heard settle them, by the flow (of this
    /// job, into this host) each came over.
    identity: Identity<u32>,
    /// The label it goes by now, and the job that names (kept, not rebuilt every slot).
    named: Label,
    job: Arc<str>,
    total: f64,
    /// Per flow: bytes sent in its iteration when last seen, and bytes sent in all.
    flows: Map<u32, (f64, f64)>,
}

impl Learning {
    /// Adds what every flow sent since last slot to its process and shows each learner; then
    /// hands each learned process's label to the process its flows lead to.
    fn observe(&mut self, slot: u64, jobs: &[Job]) {
        for (ji, j) in jobs.iter().enumerate() {
            if j.start_slot.is_none() || matches!(j.phase, Phase::Queued | Phase::Done) {
                continue;
            }
            for (fi, f) in j.flows.iter().enumerate() {
                let p = self.procs.entry((ji as u32, f.src)).or_insert_with(|| {
                    let own = Label::own(&format!("n{}", f.src.0), ji as u32);
                    Learned {
                        job: own.job_id().into(),
                        named: own.clone(),
                        identity: Identity::new(own),
                        learner: Learner::new(LearnerConfig::default()),
                        total: 0.0,
                        flows: Map::default(),
                    }
                });
                let (sent, total) = p.flows.entry(fi as u32).or_insert((0.0, 0.0));
                // A flow's count starts again with each iteration's communication: the rest of
                // the last one (if the slot that ended it was not seen), then this one's.
                let moved = if f.sent >= *sent {
                    f.sent - *sent
                } else {
                    (f.bytes - *sent).max(0.0) + f.sent
                };
                *sent = f.sent;
                *total += moved;
                p.total += moved;
            }
        }
        self.hear(jobs);
        for p in self.procs.values_mut() {
            let peers = p.identity.take_peer_bytes();
            p.learner.hear(Slot(slot), peers);
            p.learner.observe(Slot(slot), p.total as u64);
        }
    }

    /// What last slot's reports carried: the label, iteration count and bytes per iteration of
    /// each learned (scheduled) flow's sender, heard by the process at its receiving end.
    fn hear(&mut self, jobs: &[Job]) {
        let mut heard = Vec::new();
        for (&(ji, src), p) in &self.procs {
            let Some(e) = p.learner.estimate() else {
                continue;
            };
            let report = Report {
                label: p.identity.label().clone(),
                iteration: p.identity.iteration(e.iteration),
                bytes_per_iteration: e.bytes_per_iteration as u64,
            };
            for (fi, f) in jobs[ji as usize].flows.iter().enumerate() {
                if f.src == src {
                    heard.push(((ji, f.dst), fi as u32, report.clone()));
                }
            }
        }
        for (to, fi, report) in heard {
            if let Some(p) = self.procs.get_mut(&to) {
                let mine = p.learner.estimate().map(|e| e.iteration);
                p.identity.hear(fi, report, mine);
            }
        }
        for p in self.procs.values_mut() {
            let label = p.identity.label();
            if &p.named != label {
                p.named = label.clone();
                p.job = label.job_id().into();
            }
        }
    }

    /// The progress of flow `fi` of job `ji` from `src` as its learner estimates it: the
    /// learned job, the estimate, the flow's share of the process's bytes, and the iteration
    /// as the job counts it; `None` below the bar.
    fn of(&self, ji: u32, fi: u32, src: NodeId) -> Option<(Arc<str>, &LearnedEstimate, f64, u64)> {
        let p = self.procs.get(&(ji, src))?;
        let e = p.learner.estimate()?;
        let carried = p.flows.get(&fi).map_or(0.0, |f| f.1);
        let share = if p.total > 0.0 {
            carried / p.total
        } else {
            0.0
        };
        Some((p.job.clone(), e, share, p.identity.iteration(e.iteration)))
    }

    /// Whether the process sending from `src` for job `ji` is learned under the job `job`:
    /// a flow follows an upstream flow only where the upstream's reports reach it under its
    /// own job's name, as mlccd matches peer reports by job.
    fn reports_as(&self, ji: u32, src: NodeId, job: &str) -> bool {
        self.procs
            .get(&(ji, src))
            .is_some_and(|p| p.learner.estimate().is_some() && &*p.job == job)
    }
}

/// The rate a flow sends at under `e`: its paced rate, or, released to kernel TCP (unpaced),
/// its path's bottleneck, sharing the rest with whoever else offers.
pub fn offered_rate(e: Enforce, topo: &Topology, path: &[LinkId]) -> f64 {
    match e {
        Enforce::Pace(r) if r.is_finite() => r.max(0.0),
        Enforce::Pace(_) => 0.0,
        Enforce::Release => topo.bottleneck(path).0,
    }
}

impl Mlcc {
    pub fn new(c: &Context<'_>, cfg: PolicyConfig, visibility: Visibility) -> Self {
        let cfg = PolicyConfig {
            slots: c.slots,
            ..cfg
        };
        let cluster = ControlPlane::new(c.topo, cfg, visibility);
        Mlcc {
            cluster: if c.switch_tables {
                cluster
            } else {
                cluster.without_switch_tables(c.topo)
            },
            replies_began: Map::default(),
            orders: Vec::new(),
            learning: None,
        }
    }

    /// Each job's progress from where `progress` says (progress files unless told otherwise).
    pub fn with_progress(self, progress: Progress) -> Self {
        let learning = match progress {
            Progress::Files => None,
            Progress::Learned | Progress::Told => Some(Learning {
                told: progress == Progress::Told,
                ..Learning::default()
            }),
        };
        Mlcc { learning, ..self }
    }

    /// Records every host's policy step from now on.
    pub fn record(&mut self) {
        self.cluster.record();
    }

    pub fn recorded(&self) -> &[Recorded] {
        self.cluster.recorded()
    }

    /// What active flow `i`'s host knows of it: its progress file, or what its learner
    /// estimates (`None` below the bar).
    fn observe_as_known(&mut self, view: &View<'_>, i: usize) -> Option<Active> {
        let Some(l) = &self.learning else {
            return Some(self.observe(view, i));
        };
        let r = view.active[i];
        let f = view.flow(r);
        let (job, e, share, iteration) = l.of(r.job, r.flow, f.src)?;
        let flows = &view.job(r).flows;
        let held = physics::held(view.job(r), f);
        let upstream = f
            .upstream
            .iter()
            .filter(|&&u| l.reports_as(r.job, flows[u].src, &job))
            .map(|&u| flows[u].id.clone())
            .collect();
        Some(
            Training {
                id: &f.id,
                job: &job,
                role: f.role,
                src: f.src,
                dst: f.dst,
                path: &f.path,
                iteration: iteration as u32,
                iterations: if l.told {
                    view.job(r).spec.iterations
                } else {
                    0
                },
                comm_since: e.iteration_start.0,
                model_bytes: e.bytes_per_iteration,
                bytes: share * e.last_iteration_bytes,
                sent: (share * e.sent_this_iteration).min(share * e.last_iteration_bytes),
                // Nothing says the world size (a ring's slack is its smallest ring's).
                slack: match f.role {
                    FlowRole::Ring => job::ring_slack_bytes(e.bytes_per_iteration as u64, 0) as f64,
                    _ => 0.0,
                },
                // What the application holds is what its sockets hold unacknowledged (mlccd
                // reads the datapath's queue): in the fluid model, what the sender holds.
                held: Some(held),
                in_flight: Some(held),
                quiet: f.last_achieved <= 0.0,
                last_achieved: f.last_achieved,
                upstream,
            }
            .active(),
        )
    }

    /// What active flow `i`'s host observes of it this slot, before the network's answers.
    fn observe(&mut self, view: &View<'_>, i: usize) -> Active {
        let r = view.active[i];
        let j = view.job(r);
        let f = view.flow(r);
        let mut since = match j.phase {
            Phase::Comm { since } => since,
            _ => view.slot,
        };
        let held = physics::held(j, f);
        // A PS that replies only to a whole aggregate (the testbed's trainer) begins its
        // replies' iteration only then, so until then mlccd sees the reply flow done with its
        // last iteration, on standby; and it reads that moment as the iteration's start (what
        // its rank's first-come-first-served part orders by), on standby too.
        let replies = f.role == FlowRole::Bcast && j.whole_aggregate();
        let waiting = replies && f.sent <= 0.0 && held <= 0.0;
        let (iteration, sent) = if waiting {
            (j.iteration.saturating_sub(1), f.bytes)
        } else {
            (j.iteration, f.sent)
        };
        if replies {
            let key = (r.job, r.flow);
            let known = self.replies_began.get(&key).map(|&(it, _)| it);
            if !waiting && known != Some(j.iteration) {
                // Replies whose aggregate became whole during the last slot began in it.
                let began = view.slot.saturating_sub(u64::from(f.last_data_late));
                self.replies_began.insert(key, (j.iteration, began));
            }
            if let Some(&(it, began)) = self.replies_began.get(&key)
                && it == iteration
            {
                since = began;
            }
        }
        Training {
            id: &f.id,
            job: &j.name,
            role: f.role,
            src: f.src,
            dst: f.dst,
            path: &f.path,
            iteration,
            iterations: j.spec.iterations,
            comm_since: since,
            model_bytes: j.spec.model_bytes() as f64,
            bytes: f.bytes,
            sent,
            slack: f.slack,
            held: Some(held),
            in_flight: None,
            quiet: false,
            last_achieved: f.last_achieved,
            upstream: f.upstream.iter().map(|&u| j.flows[u].id.clone()).collect(),
        }
        .active()
    }
}

impl Policy for Mlcc {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        if let Some(l) = self.learning.as_mut() {
            l.observe(view.slot, view.jobs);
        }
        let (which, actives): (Vec<usize>, Vec<Active>) = (0..view.active.len())
            .filter_map(|i| Some((i, self.observe_as_known(view, i)?)))
            .unzip();
        let orders = self.cluster.step(Slot(view.slot), actives);
        // What the policy does not know is kernel TCP's.
        let released = Order {
            enforce: Enforce::Release,
            fill: None,
        };
        self.orders = vec![released; view.active.len()];
        for (i, o) in which.into_iter().zip(orders) {
            self.orders[i] = o;
        }
        for (i, o) in self.orders.iter().enumerate() {
            out[i] = offered_rate(o.enforce, view.topo, &view.flow(view.active[i]).path);
        }
    }

    fn fill(&self, out: &mut [Option<u8>]) {
        for (o, f) in self.orders.iter().zip(out) {
            *f = o.fill;
        }
    }

    fn paced_by_linux(&self) -> bool {
        true
    }

    fn wants_idle_slot(&self) -> bool {
        self.cluster.has_plans()
    }

    fn decision_latencies_us(&self) -> &[f32] {
        self.cluster.latencies_us()
    }
}
