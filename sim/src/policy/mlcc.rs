//! `mlcc`: the system itself, with mlcc-core's own code — one [`Planner`] per host (Alg. 1 +
//! Alg. 2), one [`LoadTable`] per link owner as in DESIGN.md §4 (a switch's table holds the
//! links it transmits onto, a host's table its uplink).
//!
//! A slot runs as the real system does: every host fetches feedback from the tables as they
//! were at the end of the previous slot, plans, and only then do all hosts publish — so no
//! host sees another host's plan for the same slot, and dependency progress values (F) come
//! from the peers' previous-slot exchange: one slot stale.

use std::collections::HashMap;
use std::time::Instant;

use mlcc_core::alg2::Dependency;
use mlcc_core::estimator::Delivery;
use mlcc_core::flow::FlowRole;
use mlcc_core::load_table::{Query, Update};
use mlcc_core::planner::{FlowDecision, FlowInput, LinkFeedback, PlannerConfig};
use mlcc_core::topology::{LinkId, NodeId};
use mlcc_core::{FeedbackMode, FlowId, LoadTable, Planner, PrecedenceKey, Slot};

use super::{Context, Policy, View};

/// When a host's plan becomes visible to the other hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// All hosts fetch at the slot boundary and publish after planning: nobody sees a plan
    /// made in the same slot. The idealized, perfectly synchronized system.
    Lockstep,
    /// Hosts' clocks differ (DESIGN.md §3 tolerates skew up to τ/4, more than the ≤ 5 ms a
    /// slot's planning takes), so a host whose clock runs later fetches after earlier hosts
    /// published. Each host gets a fixed pseudo-random offset; hosts plan in offset order and
    /// publish at once.
    Skewed,
}

/// What the first component of a flow's precedence key holds (lower claims bandwidth first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// The slot the flow's iteration started in (DESIGN.md §6): first come, first served.
    IterationStart,
    /// The bytes the flow's job still has to move until it finishes, over all its remaining
    /// iterations (in size classes, see [`size_rank`]): shortest-remaining-job first (SRPT),
    /// which minimizes mean JCT on a single link. Every flow of a job carries the same rank, so a job's flows are not split
    /// by other jobs. Measured against `IterationStart` in the crate README.
    JobRemainingBytes,
}

/// Options of one mlcc variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub mode: FeedbackMode,
    pub visibility: Visibility,
    pub rank: Rank,
    /// In `precedence` mode, plan slot n (the one being enforced now) also around the slot-n
    /// rates that hosts which already planned in slot n published, whatever their rank: those
    /// hosts are sending at them now, and a lower-ranked flow can only yield from slot n+1 on.
    /// Without this a higher-ranked flow claims capacity that is in use in the same slot, the
    /// link is overbooked and shares in proportion, and the nearly-done flows on it miss their
    /// slot by a few bytes. With ranks that change while flows run (`JobRemainingBytes`) this
    /// is common (`--quick`, seed 1: 9 % of all offered bytes hit an overbooked link; 0 with
    /// this). Counting last slot's (stale) plans of lower-ranked flows instead livelocks: two
    /// flows each yield to the other's old booking (seen on `--quick`, seed 2).
    pub committed_now: bool,
    /// A job's flows leaving one host over the same first link split it in proportion to
    /// what each has left (MADD), as mlccd does (`scheduler/src/host.rs`): planned one by one,
    /// Alg. 1 fills the earliest slots with the first, so a PS worker sends its whole gradient
    /// to one server and then to the next, while the servers' downlinks idle in turn.
    pub split_uplink: bool,
}

impl Variant {
    pub fn paper(mode: FeedbackMode) -> Self {
        Variant {
            mode,
            visibility: Visibility::Skewed,
            rank: Rank::IterationStart,
            committed_now: false,
            split_uplink: false,
        }
    }
}

/// Rank of a job with `bytes` left whose iteration started in slot `since`: the size class
/// (quarter octaves of bytes, so a job changes class a few times in its life, not every slot)
/// in the high bits, the iteration start below it (first come, first served within a class).
/// A rank that changed every slot would move every entry in every load table every slot.
pub fn size_rank(bytes: f64, since: u64) -> u64 {
    let class = (4.0 * bytes.max(1.0).log2()).floor().clamp(0.0, 4095.0) as u64;
    (class << 40) | (since & ((1 << 40) - 1))
}

pub struct Mlcc {
    /// The slot being planned.
    now: Slot,
    /// `MLCC_SIM_DEBUG=<slot>`: print every decision of that slot to stderr.
    debug_slot: Option<u64>,
    mode: FeedbackMode,
    rank: Rank,
    committed_now: bool,
    split_uplink: bool,
    /// Per link index: the slot-n rates published in slot n so far (the rates hosts that
    /// already planned this slot are enforcing), with their keys and publishers.
    fresh: Vec<Vec<(PrecedenceKey, usize, f64)>>,
    fresh_links: Vec<usize>,
    visibility: Visibility,
    /// Clock offset rank per node index (Skewed visibility).
    offset: Vec<u64>,
    /// Node names (publisher ids in the tables), by node index.
    names: Vec<String>,
    /// Planner per host, by node index.
    planners: Vec<Option<Planner>>,
    /// Load table per owner, by node index.
    tables: Vec<Option<LoadTable>>,
    /// Owner node index per link index.
    owner: Vec<usize>,
    capacity: Vec<f64>,
    /// Last F of each flow, with the iteration (comm start slot) it belongs to.
    progress: HashMap<FlowId, (u64, f64)>,
    next_progress: HashMap<FlowId, (u64, f64)>,
    /// Where each flow's plan is booked, so a withdrawn flow can be removed.
    booked: HashMap<FlowId, (Vec<LinkId>, PrecedenceKey)>,
    planned_last: Vec<NodeId>,
    latencies_us: Vec<f32>,
    /// Planned rates that a table refused (should stay 0; reported in tests).
    pub rejected_updates: u64,
    /// Feed the achieved rates to the planner's B_f filter. Off by default: in the fluid
    /// physics every limit is a link capacity the planner already sees through feedback, and
    /// a flow squeezed by proportional sharing at a tiny planned rate reports a near-zero
    /// "achievable" rate from which core's max filter never recovers (B_f = 0 → rate 0 →
    /// no new sample). See the crate README.
    pub delivery_samples: bool,
}

impl Mlcc {
    pub fn new(c: &Context<'_>, mode: FeedbackMode, visibility: Visibility) -> Self {
        Self::with(
            c,
            Variant {
                visibility,
                ..Variant::paper(mode)
            },
        )
    }

    pub fn with(c: &Context<'_>, v: Variant) -> Self {
        let Variant {
            mode,
            visibility,
            rank,
            committed_now,
            split_uplink,
        } = v;
        let topo = c.topo;
        let n = topo.nodes().len();
        let config = PlannerConfig {
            slots: c.slots,
            eta: 1.0,
            mode,
        };
        let mut planners: Vec<Option<Planner>> = (0..n).map(|_| None).collect();
        for h in topo.hosts() {
            planners[h.index()] = Some(Planner::new(config));
        }
        let mut owned: Vec<Vec<(LinkId, mlcc_core::BytesPerSec)>> = vec![vec![]; n];
        let mut owner = vec![0; topo.links().len()];
        for l in topo.links() {
            let o = topo.owner(l.id).node().index();
            owner[l.id.index()] = o;
            owned[o].push((l.id, l.capacity));
        }
        let k = c.slots.horizon();
        let tables = owned
            .into_iter()
            .map(|links| (!links.is_empty()).then(|| LoadTable::new(k, Slot(0), links)))
            .collect();
        Mlcc {
            now: Slot(0),
            debug_slot: std::env::var("MLCC_SIM_DEBUG")
                .ok()
                .and_then(|v| v.parse().ok()),
            mode,
            rank,
            committed_now,
            split_uplink,
            fresh: vec![vec![]; topo.links().len()],
            fresh_links: vec![],
            visibility,
            offset: topo
                .nodes()
                .iter()
                .map(|n| mlcc_core::routing::ecmp_hash_str(&n.name))
                .collect(),
            names: topo.nodes().iter().map(|n| n.name.clone()).collect(),
            planners,
            tables,
            owner,
            capacity: topo.links().iter().map(|l| l.capacity.0).collect(),
            progress: HashMap::new(),
            next_progress: HashMap::new(),
            booked: HashMap::new(),
            planned_last: vec![],
            latencies_us: vec![],
            rejected_updates: 0,
            delivery_samples: std::env::var_os("MLCC_SIM_DELIVERY_SAMPLES").is_some(),
        }
    }

    fn dependency(view: &View<'_>, progress: &HashMap<FlowId, (u64, f64)>, i: usize) -> Dependency {
        let r = view.active[i];
        let j = view.job(r);
        let f = view.flow(r);
        let since = match j.phase {
            crate::engine::Phase::Comm { since } => since,
            _ => 0,
        };
        // The peer's last reported F for this iteration, else its sent bytes.
        let peer = |u: usize| {
            let q = &j.flows[u];
            match progress.get(&q.id) {
                Some(&(s, p)) if s == since => p.max(q.sent),
                _ => q.sent,
            }
        };
        let up: Vec<f64> = f.upstream.iter().map(|&u| peer(u)).collect();
        match f.role {
            FlowRole::Agg => Dependency::Aggregation {
                broadcast_progress: up,
            },
            FlowRole::Bcast => Dependency::Broadcast {
                aggregation_progress: up,
            },
            FlowRole::Ring => Dependency::Ring {
                predecessor_progress: up.iter().copied().fold(f64::INFINITY, f64::min),
                slack_bytes: f.slack,
            },
        }
    }

    /// Removes a finished or vanished flow's bookings from every table on its path (the
    /// daemon publishes `done`; the effect on the tables is the same).
    fn withdraw(&mut self, id: &FlowId) {
        if let Some((links, _)) = self.booked.remove(id) {
            for l in links {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                    t.advance(self.now);
                    t.withdraw(id);
                }
            }
        }
    }

    /// Books a host's decisions in the tables of their paths (DESIGN.md §11 step 4).
    fn publish(
        &mut self,
        view: &View<'_>,
        slot: Slot,
        h: NodeId,
        ds: Vec<(usize, FlowDecision)>,
        withdrawn: &[FlowId],
    ) {
        let host = self.names[h.index()].clone();
        for id in withdrawn {
            self.withdraw(id);
        }
        for (i, d) in ds {
            if d.done {
                self.withdraw(&d.id);
                continue;
            }
            let path = &view.flow(view.active[i]).path;
            if self.committed_now && d.plan.first().is_some_and(|&r| r > 0.0) {
                for &l in path {
                    let v = &mut self.fresh[l.index()];
                    if v.is_empty() {
                        self.fresh_links.push(l.index());
                    }
                    v.push((d.key.clone(), h.index(), d.plan[0]));
                }
            }
            for &l in path {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut()
                    && {
                        t.advance(slot);
                        true
                    }
                    && t.update(
                        l,
                        &Update {
                            flow: &d.id,
                            publisher: &host,
                            first_slot: slot,
                            rates: &d.plan,
                            key: &d.key,
                            done: false,
                        },
                    )
                    .is_err()
                {
                    self.rejected_updates += 1;
                }
            }
            if self.booked.get(&d.id).is_none_or(|(_, k)| *k != d.key) {
                self.booked
                    .insert(d.id.clone(), (path.clone(), d.key.clone()));
            }
        }
    }
}

impl Policy for Mlcc {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        let slot = Slot(view.slot);
        let k = view.slots.horizon();
        // Tables advance lazily, when first touched in a slot: `advance` to a later slot
        // covers every slot passed (history, window shift, expiry), and most of a large
        // fabric's tables are idle in any one slot (paper-fig15 has 2100 owners).
        self.now = slot;
        for l in self.fresh_links.drain(..) {
            self.fresh[l].clear();
        }
        // Active flows grouped by sending host, hosts in id order; plus hosts that planned
        // last slot and now have nothing (they must withdraw).
        let mut by_host: Vec<(NodeId, usize)> = view
            .active
            .iter()
            .enumerate()
            .map(|(i, &r)| (view.flow(r).src, i))
            .collect();
        by_host.sort_unstable();
        let mut hosts: Vec<NodeId> = by_host.iter().map(|x| x.0).collect();
        hosts.extend(self.planned_last.iter().copied());
        hosts.sort_unstable();
        hosts.dedup();
        if self.visibility == Visibility::Skewed {
            hosts.sort_by_key(|h| (self.offset[h.index()], *h));
        }

        type Planned = (NodeId, Vec<(usize, FlowDecision)>, Vec<FlowId>);
        let mut decisions: Vec<Planned> = Vec::with_capacity(hosts.len());
        let mut busy_hosts = Vec::with_capacity(hosts.len());
        let mut idx_of: Vec<usize> = Vec::new();
        let mut inputs: Vec<FlowInput> = Vec::new();
        let mut group_left: HashMap<(u32, LinkId), f64> = HashMap::new();
        for &h in &hosts {
            let host = self.names[h.index()].as_str();
            inputs.clear();
            idx_of.clear();
            // `by_host` is sorted by host; hosts may be visited in another order.
            let mut cursor = by_host.partition_point(|x| x.0 < h);
            group_left.clear();
            if self.split_uplink {
                for &(_, i) in by_host[cursor..].iter().take_while(|x| x.0 == h) {
                    let r = view.active[i];
                    let f = view.flow(r);
                    if let Some(&first) = f.path.first() {
                        *group_left.entry((r.job, first)).or_default() += f.remaining();
                    }
                }
            }
            while cursor < by_host.len() && by_host[cursor].0 == h {
                let i = by_host[cursor].1;
                cursor += 1;
                let r = view.active[i];
                let f = view.flow(r);
                let since = match view.job(r).phase {
                    crate::engine::Phase::Comm { since } => since,
                    _ => view.slot,
                };
                // The key's first component: the iteration start (DESIGN.md §6) or the
                // job's remaining bytes (see `Rank`). Both are a u64 that sorts; the table
                // and planner only compare it.
                let since = match self.rank {
                    Rank::IterationStart => since,
                    Rank::JobRemainingBytes => {
                        let j = view.job(r);
                        let per_iteration: f64 = j.flows.iter().map(|q| q.bytes).sum();
                        let left_now: f64 = j.flows.iter().map(|q| q.remaining()).sum();
                        let later = f64::from(j.spec.iterations.saturating_sub(j.iteration + 1));
                        size_rank(left_now + later * per_iteration, since)
                    }
                };
                let key = PrecedenceKey::new(Slot(since), f.id.clone());
                let path = f
                    .path
                    .iter()
                    .map(|&l| {
                        let mut load = vec![0.0; k];
                        if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                            t.advance(slot);
                            let _ = t.feedback(
                                l,
                                &Query {
                                    flow: &f.id,
                                    key: &key,
                                    exclude_publisher: Some(host),
                                },
                                self.mode,
                                slot,
                                &mut load,
                            );
                            if self.committed_now && self.mode == FeedbackMode::Precedence {
                                // Lower-ranked flows whose hosts already planned this slot
                                // are sending now: plan slot n around them too.
                                load[0] += self.fresh[l.index()]
                                    .iter()
                                    .filter(|(k, p, _)| *p != h.index() && *k > key)
                                    .map(|x| x.2)
                                    .sum::<f64>();
                            }
                        }
                        LinkFeedback {
                            link: l,
                            capacity: self.capacity[l.index()],
                            load,
                        }
                    })
                    .collect();
                inputs.push(FlowInput {
                    id: f.id.clone(),
                    iteration_start: Slot(since),
                    remaining_bytes: f.remaining(),
                    sent_bytes: f.sent,
                    path,
                    dependency: Self::dependency(view, &self.progress, i),
                    delivery: self.delivery_samples.then_some(Delivery {
                        rate: f.last_achieved,
                        backlogged: f.last_link_limited && f.last_rate > 0.0,
                    }),
                    rate_cap: match f
                        .path
                        .first()
                        .and_then(|&l| group_left.get(&(r.job, l)).map(|&all| (l, all)))
                    {
                        Some((l, all)) if all > f.remaining() => {
                            self.capacity[l.index()] * f.remaining() / all
                        }
                        _ => f64::INFINITY,
                    },
                });
                idx_of.push(i);
            }
            let Some(planner) = self.planners[h.index()].as_mut() else {
                continue;
            };
            let started = Instant::now();
            let plan = planner.plan(slot, &inputs);
            if !inputs.is_empty() {
                self.latencies_us
                    .push(started.elapsed().as_secs_f64() as f32 * 1e6);
                busy_hosts.push(h);
            }
            if self.debug_slot == Some(view.slot) {
                for (n, d) in plan.decisions.iter().enumerate() {
                    eprintln!(
                        "{} rem={:.0} sent={:.0} rate={:.0} planned={:.0} B={:.0} boost={:.0} red={:.0} dep={:?} plan={:?}",
                        d.id,
                        inputs[n].remaining_bytes,
                        inputs[n].sent_bytes,
                        d.rate,
                        d.planned_rate,
                        d.achievable,
                        d.boost,
                        d.reduction,
                        inputs[n].dependency,
                        d.plan.iter().map(|x| (*x / 1e6) as i64).collect::<Vec<_>>()
                    );
                }
            }
            let mut mine = Vec::with_capacity(plan.decisions.len());
            for (n, d) in plan.decisions.into_iter().enumerate() {
                let i = idx_of[n];
                out[i] = if d.rate.is_finite() {
                    d.rate.max(0.0)
                } else {
                    0.0
                };
                let since = inputs[n].iteration_start.0;
                self.next_progress.insert(d.id.clone(), (since, d.progress));
                mine.push((i, d));
            }
            match self.visibility {
                Visibility::Lockstep => decisions.push((h, mine, plan.withdrawn)),
                Visibility::Skewed => self.publish(view, slot, h, mine, &plan.withdrawn),
            }
        }
        // Lockstep: publish only now, so no host saw another's plan for this slot.
        for (h, ds, withdrawn) in decisions {
            self.publish(view, slot, h, ds, &withdrawn);
        }
        self.planned_last = busy_hosts;
        std::mem::swap(&mut self.progress, &mut self.next_progress);
        self.next_progress.clear();
    }

    fn wants_idle_slot(&self) -> bool {
        !self.planned_last.is_empty()
    }

    fn decision_latencies_us(&self) -> &[f32] {
        &self.latencies_us
    }
}
