//! `mlcc`: the system itself — one core [`HostPolicy`] per host (the very code mlccd runs, with
//! the config it runs by default unless a variant says otherwise) and one [`LoadTable`] per link
//! owner as in DESIGN.md §4 (a switch's table holds the links it transmits onto, a host's table
//! its uplink).
//!
//! The simulator differs from mlccd only in where observations come from: bytes sent, the
//! application's backlog and last slot's delivery from the physics instead of sockets and
//! progress files, feedback from the tables in this process instead of switch sessions, and
//! peers' progress from the previous slot's exchange (one slot stale, as the daemon sees it).
//!
//! A slot runs as the real system does: every host fetches feedback, plans and publishes; with
//! [`Visibility::Lockstep`] no host sees another host's plan for the same slot, with
//! [`Visibility::Skewed`] hosts whose clocks run later see the earlier hosts' plans.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use mlcc_core::host::{
    Answer, Booking, Enforce, FlowObs, HostPolicy, LinkObs, PeerProgress, PolicyConfig,
};
use mlcc_core::load_table::{Query, Update};
use mlcc_core::topology::{LinkId, NodeId};
use mlcc_core::{FeedbackMode, FlowId, LoadTable, PrecedenceKey, Slot};

use super::{Context, Policy, View};
use crate::model::Phase;
use crate::physics;

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

/// A flow's slot-n rate published in slot n, with its key and publisher: what the owner of a
/// link reports as committed for [`PolicyConfig::committed_now`].
type Committed = (PrecedenceKey, usize, f64);

pub struct Mlcc {
    cfg: PolicyConfig,
    /// The slot being planned.
    now: Slot,
    /// Per link index: the slot-n rates published in slot n so far.
    fresh: Vec<Vec<Committed>>,
    fresh_links: Vec<usize>,
    visibility: Visibility,
    /// Clock offset rank per node index (Skewed visibility).
    offset: Vec<u64>,
    /// Node names (publisher ids in the tables), by node index.
    names: Vec<String>,
    /// The policy of each host, by node index.
    policies: Vec<Option<HostPolicy>>,
    /// Load table per owner, by node index.
    tables: Vec<Option<LoadTable>>,
    /// Owner node index per link index.
    owner: Vec<usize>,
    capacity: Vec<f64>,
    /// Each flow's progress as its daemon last reported it to its peers.
    progress: HashMap<FlowId, PeerProgress>,
    next_progress: HashMap<FlowId, PeerProgress>,
    /// Where each flow's plan is booked, so a withdrawn flow can be removed.
    booked: HashMap<FlowId, Vec<LinkId>>,
    planned_last: Vec<NodeId>,
    latencies_us: Vec<f32>,
    /// Planned rates that a table refused (should stay 0; reported in tests).
    pub rejected_updates: u64,
    /// Every policy step's inputs and the rates it led to, when recording.
    recorded: Option<Vec<Recorded>>,
}

/// One host's policy step as the simulator ran it: what it observed and the rate it then set
/// for each flow (the conformance test replays these through a fresh [`HostPolicy`]).
#[derive(Clone, Debug)]
pub struct Recorded {
    pub host: NodeId,
    pub slot: Slot,
    pub obs: Vec<FlowObs>,
    pub rates: Vec<f64>,
}

impl Mlcc {
    pub fn new(c: &Context<'_>, cfg: PolicyConfig, visibility: Visibility) -> Self {
        let topo = c.topo;
        let n = topo.nodes().len();
        let cfg = PolicyConfig {
            slots: c.slots,
            ..cfg
        };
        let mut policies: Vec<Option<HostPolicy>> = (0..n).map(|_| None).collect();
        for h in topo.hosts() {
            policies[h.index()] = Some(HostPolicy::new(cfg));
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
            cfg,
            now: Slot(0),
            fresh: vec![vec![]; topo.links().len()],
            fresh_links: vec![],
            visibility,
            offset: topo
                .nodes()
                .iter()
                .map(|n| mlcc_core::routing::ecmp_hash_str(&n.name))
                .collect(),
            names: topo.nodes().iter().map(|n| n.name.clone()).collect(),
            policies,
            tables,
            owner,
            capacity: topo.links().iter().map(|l| l.capacity.0).collect(),
            progress: HashMap::new(),
            next_progress: HashMap::new(),
            booked: HashMap::new(),
            planned_last: vec![],
            latencies_us: vec![],
            rejected_updates: 0,
            recorded: None,
        }
    }

    /// Records every policy step from now on (see [`Recorded`]).
    pub fn record(&mut self) {
        self.recorded = Some(Vec::new());
    }

    pub fn recorded(&self) -> &[Recorded] {
        self.recorded.as_deref().unwrap_or_default()
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// What host `h`'s daemon would observe of active flow `i` this slot.
    fn observe(&mut self, view: &View<'_>, h: NodeId, i: usize) -> FlowObs {
        let slot = self.now;
        let r = view.active[i];
        let j = view.job(r);
        let f = view.flow(r);
        let since = match j.phase {
            Phase::Comm { since } => since,
            _ => view.slot,
        };
        let model = j.spec.model.bytes as f64;
        let mut o = FlowObs::new(
            f.id.clone(),
            Arc::from(j.spec.id.as_str()),
            f.role,
            f.dst,
            Vec::with_capacity(f.path.len()),
        );
        o.iteration = u64::from(j.iteration);
        o.iteration_start = Slot(since);
        o.job_bytes = j.spec.model.bytes;
        o.job_attained_bytes = Some(f64::from(j.iteration) * model);
        o.job_remaining_bytes =
            Some(f64::from(j.spec.iterations.saturating_sub(j.iteration)) * model);
        o.sent_bytes = f.sent;
        o.remaining_bytes = f.remaining();
        o.slack_bytes = f.slack;
        o.app_backlog = Some(physics::held(j, f));
        o.achieved = Some(f.last_achieved);
        o.upstream = f
            .upstream
            .iter()
            .filter_map(|&u| self.progress.get(&j.flows[u].id).copied())
            .collect();
        // The key this flow will carry, for the tables' precedence queries.
        let host = self.names[h.index()].as_str();
        let key = PrecedenceKey::new(
            self.cfg.rank.rank(mlcc_core::host::RankBasis::of(&o)),
            f.id.clone(),
        );
        let k = self.cfg.slots.horizon();
        let committed = self.cfg.committed_now && self.cfg.mode == FeedbackMode::Precedence;
        for &l in &f.path {
            let mut lo = LinkObs::unasked(l, self.capacity[l.index()]);
            if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                t.advance(slot);
                let mut load = vec![0.0; k];
                if t.feedback(
                    l,
                    &Query {
                        flow: &f.id,
                        key: &key,
                        exclude_publisher: Some(host),
                    },
                    self.cfg.mode,
                    slot,
                    &mut load,
                )
                .is_ok()
                {
                    lo.answer = Answer::Load(load);
                }
                if committed {
                    lo.committed_now = Some(
                        self.fresh[l.index()]
                            .iter()
                            .filter(|(k, p, _)| *p != h.index() && *k > key)
                            .map(|x| x.2)
                            .sum(),
                    );
                }
            }
            o.links.push(lo);
        }
        o
    }

    /// Removes a finished or vanished flow's bookings from every table on its path (the
    /// daemon publishes `done`; the effect on the tables is the same).
    fn withdraw(&mut self, id: &FlowId) {
        if let Some(links) = self.booked.remove(id) {
            for l in links {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                    t.advance(self.now);
                    t.withdraw(id);
                }
            }
        }
    }

    /// Books a host's decisions in the tables of their paths (DESIGN.md §11 step 4).
    fn publish(&mut self, view: &View<'_>, h: NodeId, ds: Vec<(usize, Booking)>, gone: &[FlowId]) {
        let host = self.names[h.index()].clone();
        for id in gone {
            self.withdraw(id);
        }
        for (i, b) in ds {
            let f = view.flow(view.active[i]);
            let Booking::Plan {
                first_slot,
                rates,
                key,
            } = b
            else {
                self.withdraw(&f.id);
                continue;
            };
            if self.cfg.committed_now && rates.first().is_some_and(|&r| r > 0.0) {
                for &l in &f.path {
                    let v = &mut self.fresh[l.index()];
                    if v.is_empty() {
                        self.fresh_links.push(l.index());
                    }
                    v.push((key.clone(), h.index(), rates[0]));
                }
            }
            for &l in &f.path {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                    t.advance(first_slot);
                    let u = Update {
                        flow: &f.id,
                        publisher: &host,
                        first_slot,
                        rates: &rates,
                        key: &key,
                        done: false,
                    };
                    if t.update(l, &u).is_err() {
                        self.rejected_updates += 1;
                    }
                }
            }
            if !self.booked.contains_key(&f.id) {
                self.booked.insert(f.id.clone(), f.path.clone());
            }
        }
    }
}

impl Policy for Mlcc {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        let slot = Slot(view.slot);
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
        let tau = self.cfg.slots.tau_secs();

        type Planned = (NodeId, Vec<(usize, Booking)>, Vec<FlowId>);
        let mut lockstep: Vec<Planned> = Vec::new();
        let mut busy_hosts = Vec::with_capacity(hosts.len());
        let mut idx_of: Vec<usize> = Vec::new();
        let mut obs: Vec<FlowObs> = Vec::new();
        for &h in &hosts {
            obs.clear();
            idx_of.clear();
            // `by_host` is sorted by host; hosts may be visited in another order.
            let first = by_host.partition_point(|x| x.0 < h);
            for &(_, i) in by_host[first..].iter().take_while(|x| x.0 == h) {
                let o = self.observe(view, h, i);
                obs.push(o);
                idx_of.push(i);
            }
            let Some(policy) = self.policies[h.index()].as_mut() else {
                continue;
            };
            let started = Instant::now();
            let step = policy.step(slot, &obs);
            if !obs.is_empty() {
                self.latencies_us
                    .push(started.elapsed().as_secs_f64() as f32 * 1e6);
                busy_hosts.push(h);
            }
            let mut mine = Vec::with_capacity(step.flows.len());
            for (n, fo) in step.flows.into_iter().enumerate() {
                let i = idx_of[n];
                let f = view.flow(view.active[i]);
                out[i] = match fo.enforce {
                    Enforce::Pace(r) if r.is_finite() => r.max(0.0),
                    Enforce::Pace(_) => 0.0,
                    // Kernel TCP: unpaced, it offers its path's bottleneck and shares the rest.
                    Enforce::Release => view.topo.bottleneck(&f.path).0,
                };
                self.next_progress.insert(
                    fo.id.clone(),
                    PeerProgress {
                        sent: fo.sent,
                        finish: fo.sent + fo.decision.rate * tau,
                        iteration: obs[n].iteration,
                        seen: slot,
                    },
                );
                mine.push((i, fo.booking));
            }
            if let Some(r) = &mut self.recorded {
                r.push(Recorded {
                    host: h,
                    slot,
                    obs: obs.clone(),
                    rates: idx_of.iter().map(|&i| out[i]).collect(),
                });
            }
            match self.visibility {
                Visibility::Lockstep => lockstep.push((h, mine, step.withdrawn)),
                Visibility::Skewed => self.publish(view, h, mine, &step.withdrawn),
            }
        }
        // Lockstep: publish only now, so no host saw another's plan for this slot.
        for (h, ds, gone) in lockstep {
            self.publish(view, h, ds, &gone);
        }
        self.planned_last = busy_hosts;
        // The exchange: reports arrive after everyone planned. Older reports stay until the
        // daemon would have dropped them (the policy judges their freshness).
        self.progress.extend(self.next_progress.drain());
        if slot.0.is_multiple_of(64) {
            let keep = self.cfg.peer_stale_slots.max(1) * 4;
            self.progress
                .retain(|_, p| slot.since(p.seen).is_none_or(|d| d <= keep));
        }
    }

    fn wants_idle_slot(&self) -> bool {
        !self.planned_last.is_empty()
    }

    fn decision_latencies_us(&self) -> &[f32] {
        &self.latencies_us
    }
}
