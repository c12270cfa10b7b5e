//! [`ControlPlane`]: core's per-host policy on every host of a topology, one load table per link
//! owner as in docs/design.md §4 (a switch's table holds the links it transmits onto, a host's table
//! its uplink), and the peer exchange — all in one process, on a slot clock the caller drives.
//!
//! A slot runs as the real system does: every host fetches feedback, plans and publishes, then
//! reports its flows' progress to their peers (used from the next slot on: one slot stale, as
//! mlccd sees it). With [`Visibility::Lockstep`] no host sees another host's plan of the same
//! slot; with [`Visibility::Skewed`] hosts whose clocks run later see the earlier hosts' plans.

use std::sync::Arc;
use std::time::Instant;

use mlcc_core::hash::Map;
use mlcc_core::host::{
    Answer, Booking, Enforce, FlowObs, HostPolicy, LinkObs, PeerProgress, PolicyConfig,
};
use mlcc_core::job::JobProgress;
use mlcc_core::load_table::{Query, Update};
use mlcc_core::topology::{LinkId, NodeId, Topology};
use mlcc_core::{FeedbackMode, FlowId, FlowRole, LoadTable, Slot};

/// When a host's plan becomes visible to the other hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// All hosts fetch at the slot boundary and publish after planning: nobody sees a plan
    /// made in the same slot. The idealized, perfectly synchronized system.
    Lockstep,
    /// Hosts' clocks differ (docs/design.md §3 tolerates skew up to τ/4, more than the ≤ 5 ms a
    /// slot's planning takes), so a host whose clock runs later fetches after earlier hosts
    /// published. Each host gets a fixed pseudo-random offset; hosts plan in offset order and
    /// publish at once.
    Skewed,
}

/// One active flow as its sending host observes it this slot. The cluster fills in what the
/// network tells the host: `obs.links` (capacity and the owner's answer per link of `path`)
/// and `obs.upstream` (the peers' last reports of the flows named in `upstream`).
#[derive(Clone, Debug)]
pub struct Active {
    pub src: NodeId,
    pub path: Vec<LinkId>,
    pub obs: FlowObs,
    pub upstream: Vec<FlowId>,
}

/// What a fluid model knows of one training flow in one slot: both drivers of the cluster (the
/// simulator and the harness's fabric) describe their flows so, and [`Training::active`] turns
/// it into the observation mlccd would make of such a flow.
#[derive(Clone, Debug)]
pub struct Training<'a> {
    pub id: &'a FlowId,
    pub job: &'a Arc<str>,
    pub role: FlowRole,
    pub src: NodeId,
    pub dst: NodeId,
    pub path: &'a [LinkId],
    /// Iterations completed, and how many the job runs.
    pub iteration: u32,
    pub iterations: u32,
    /// The slot the current iteration's communication started in.
    pub comm_since: u64,
    pub model_bytes: f64,
    /// Bytes per iteration, and sent in this one.
    pub bytes: f64,
    pub sent: f64,
    pub slack: f64,
    /// Bytes the sender's application holds and has not sent (the daemon's backlog); `None`
    /// where nothing tells (a learned job: its sockets say what left, not what was handed
    /// over).
    pub held: Option<f64>,
    /// Bytes the sockets have on the wire unacknowledged; `None` where the driver does not say.
    pub in_flight: Option<f64>,
    /// The flow's sockets neither sent nor had a byte acknowledged last slot.
    pub quiet: bool,
    /// Bytes/s delivered last slot.
    pub last_achieved: f64,
    pub upstream: Vec<FlowId>,
}

impl Training<'_> {
    pub fn active(self) -> Active {
        let mut o = FlowObs::new(
            self.id.clone(),
            self.job.clone(),
            self.role,
            self.dst,
            Vec::with_capacity(self.path.len()),
        );
        o.iteration = u64::from(self.iteration);
        o.iteration_start = Slot(self.comm_since);
        o.job_progress = JobProgress {
            model_bytes: self.model_bytes as u64,
            completed: u64::from(self.iteration),
            total: u64::from(self.iterations),
        };
        o.sent_bytes = self.sent;
        o.remaining_bytes = Some((self.bytes - self.sent).max(0.0));
        o.slack_bytes = self.slack;
        o.app_backlog = self.held;
        o.in_flight = self.in_flight;
        o.quiet_connections = usize::from(self.quiet) * o.connections;
        o.achieved = Some(self.last_achieved);
        Active {
            src: self.src,
            path: self.path.to_vec(),
            obs: o,
            upstream: self.upstream,
        }
    }
}

/// What a host's policy ordered for one flow this slot: its enforced rate (or release), and
/// the fill class its bytes beyond that rate go in, if any ([`PolicyConfig::fill`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Order {
    pub enforce: Enforce,
    pub fill: Option<u8>,
}

/// One host's policy step as the control plane ran it: what it observed and what it ordered.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub host: NodeId,
    pub slot: Slot,
    pub obs: Vec<FlowObs>,
    pub orders: Vec<Order>,
}

pub struct ControlPlane {
    cfg: PolicyConfig,
    visibility: Visibility,
    /// The slot being planned.
    now: Slot,
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
    progress: Map<FlowId, PeerProgress>,
    /// This slot's reports, in the order the hosts planned; a flow reports once a slot.
    next_progress: Vec<(FlowId, PeerProgress)>,
    /// Where each flow's plan is booked, so a withdrawn flow can be removed.
    booked: Map<FlowId, Vec<LinkId>>,
    planned_last: Vec<NodeId>,
    latencies_us: Vec<f32>,
    /// Bookings and withdrawals that a table refused (should stay 0).
    pub rejected_updates: u64,
    recorded: Option<Vec<Recorded>>,
    /// Answers' load vectors the policies are done with, for the next flows' answers.
    spare_loads: Vec<Vec<f64>>,
}

impl ControlPlane {
    /// Every host of `topo` runs a policy with `cfg`.
    pub fn new(topo: &Topology, cfg: PolicyConfig, visibility: Visibility) -> Self {
        let n = topo.nodes().len();
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
        let k = cfg.slots.horizon();
        let tables = owned
            .into_iter()
            .map(|links| {
                (!links.is_empty()).then(|| LoadTable::new(k, Slot(0), links).answering(cfg.mode))
            })
            .collect();
        ControlPlane {
            cfg,
            visibility,
            now: Slot(0),
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
            progress: Map::default(),
            next_progress: Vec::new(),
            booked: Map::default(),
            planned_last: vec![],
            latencies_us: vec![],
            rejected_updates: 0,
            recorded: None,
            spare_loads: Vec::new(),
        }
    }

    /// Cloud mode (paper §VI-H): no switch emulators. Links a switch owns have no table, so
    /// hosts are not asked about them and plan them as unbooked, as mlccd does with a topology
    /// whose switches name no emulator; a host's own uplink keeps its table.
    pub fn without_switch_tables(mut self, topo: &Topology) -> Self {
        for s in topo.switches() {
            self.tables[s.index()] = None;
        }
        self
    }

    /// Whether some host planned last slot: it must be stepped even without active flows, to
    /// withdraw what it booked.
    pub fn has_plans(&self) -> bool {
        !self.planned_last.is_empty()
    }

    /// Wall-clock µs of every host's policy step that had flows.
    pub fn latencies_us(&self) -> &[f32] {
        &self.latencies_us
    }

    /// Records every policy step from now on (see [`Recorded`]).
    pub fn record(&mut self) {
        self.recorded = Some(Vec::new());
    }

    pub fn recorded(&self) -> &[Recorded] {
        self.recorded.as_deref().unwrap_or_default()
    }

    /// Bytes/s booked on `link` for `slot` by every flow, as its owner's table holds it.
    pub fn booked(&mut self, link: LinkId, slot: Slot) -> f64 {
        let now = self.now;
        self.tables[self.owner[link.index()]]
            .as_mut()
            .map_or(0.0, |t| {
                t.advance(now);
                t.load(link, slot).unwrap_or(0.0)
            })
    }

    /// Fills in what the network tells `a`'s host: each link's answer from its owner's table
    /// and the peers' last reports.
    fn answer(&mut self, a: &mut Active) {
        let slot = self.now;
        let h = a.src;
        let host = self.names[h.index()].as_str();
        // Into the vectors the observation came with, and answers into spare ones: the
        // simulator asks this for every active flow in every slot.
        a.obs.upstream.clear();
        a.obs.upstream.extend(
            a.upstream
                .iter()
                .filter_map(|u| self.progress.get(u).copied()),
        );
        a.obs.links.clear();
        a.obs.links.extend(
            a.path
                .iter()
                .map(|&l| LinkObs::unasked(l, self.capacity[l.index()])),
        );
        // The key this flow will carry, for the tables' precedence queries.
        let key = self.cfg.key_of(&a.obs);
        let k = self.cfg.slots.horizon();
        let committed = self.cfg.committed_now && self.cfg.mode == FeedbackMode::Precedence;
        let FlowObs { id, links, .. } = &mut a.obs;
        for lo in links {
            let l = lo.link;
            if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                t.advance(slot);
                let mut load = self.spare_loads.pop().unwrap_or_default();
                load.resize(k, 0.0);
                let q = Query {
                    flow: id,
                    key: &key,
                    exclude_publisher: Some(host),
                };
                // With `committed`, what a switch answers a query that asks for it
                // (FeedbackQuery.committed): both from one walk of the link.
                let answered = if committed {
                    t.feedback_committed(l, &q, self.cfg.mode, slot, &mut load)
                        .map(|c| lo.committed_now = Some(c))
                } else {
                    t.feedback(l, &q, self.cfg.mode, slot, &mut load)
                };
                if answered.is_ok() {
                    lo.answer = Answer::Load(load);
                } else {
                    self.spare_loads.push(load);
                }
            }
        }
    }

    /// Empties `obs`, keeping its answers' load vectors for [`Self::answer`].
    fn recycle(&mut self, obs: &mut Vec<FlowObs>) {
        for o in obs.drain(..) {
            for lo in o.links {
                if let Answer::Load(v) = lo.answer {
                    self.spare_loads.push(v);
                }
            }
        }
    }

    /// Removes a finished or vanished flow's bookings from every table on its path (the
    /// daemon publishes `done`; the effect on the tables is the same).
    fn withdraw(&mut self, id: &FlowId) {
        if let Some(links) = self.booked.remove(id) {
            for l in links {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                    t.advance(self.now);
                    // The owner's table holds `l`: the owners were built from the links.
                    if t.withdraw_from(l, id).is_err() {
                        self.rejected_updates += 1;
                    }
                }
            }
        }
    }

    /// Books a host's decisions in the tables of their paths (docs/design.md §11 step 4).
    fn publish(&mut self, h: NodeId, ds: Vec<(FlowId, Vec<LinkId>, Booking)>, gone: &[FlowId]) {
        let host = self.names[h.index()].clone();
        for id in gone {
            self.withdraw(id);
        }
        for (id, path, b) in ds {
            let Booking::Plan {
                first_slot,
                rates,
                key,
            } = b
            else {
                self.withdraw(&id);
                continue;
            };
            for &l in &path {
                if let Some(t) = self.tables[self.owner[l.index()]].as_mut() {
                    t.advance(first_slot);
                    let u = Update {
                        flow: &id,
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
            self.booked.entry(id).or_insert(path);
        }
    }

    /// Runs slot `slot` for the active flows `flows` (any order): fills in their answers,
    /// steps every host's policy, publishes and exchanges. Returns each flow's order, in the
    /// order of `flows`.
    pub fn step(&mut self, slot: Slot, flows: Vec<Active>) -> Vec<Order> {
        // Tables advance lazily, when first touched in a slot: `advance` to a later slot covers
        // every slot passed (history, window shift, expiry), and most of a large fabric's
        // tables are idle in any one slot (paper-fig15 has 2100 owners).
        self.now = slot;
        // Active flows grouped by sending host, hosts in id order; plus hosts that planned
        // last slot and now have nothing (they must withdraw).
        let mut by_host: Vec<(NodeId, usize)> =
            flows.iter().enumerate().map(|(i, a)| (a.src, i)).collect();
        let mut flows: Vec<Option<Active>> = flows.into_iter().map(Some).collect();
        let mut paths: Vec<Vec<LinkId>> = vec![Vec::new(); flows.len()];
        by_host.sort_unstable();
        let mut hosts: Vec<NodeId> = by_host.iter().map(|x| x.0).collect();
        hosts.extend(self.planned_last.iter().copied());
        hosts.sort_unstable();
        hosts.dedup();
        if self.visibility == Visibility::Skewed {
            hosts.sort_by_key(|h| (self.offset[h.index()], *h));
        }

        type Planned = (NodeId, Vec<(FlowId, Vec<LinkId>, Booking)>, Vec<FlowId>);
        let mut lockstep: Vec<Planned> = Vec::new();
        let mut out = vec![
            Order {
                enforce: Enforce::Release,
                fill: None,
            };
            flows.len()
        ];
        let mut busy_hosts = Vec::with_capacity(hosts.len());
        let mut idx_of: Vec<usize> = Vec::new();
        let mut obs: Vec<FlowObs> = Vec::new();
        for &h in &hosts {
            idx_of.clear();
            self.recycle(&mut obs);
            // `by_host` is sorted by host; hosts may be visited in another order.
            let first = by_host.partition_point(|x| x.0 < h);
            for &(_, i) in by_host[first..].iter().take_while(|x| x.0 == h) {
                let Some(mut a) = flows[i].take() else {
                    continue;
                };
                self.answer(&mut a);
                obs.push(a.obs);
                paths[i] = a.path;
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
                out[i] = Order {
                    enforce: fo.enforce,
                    fill: fo.fill,
                };
                self.next_progress.push((
                    fo.id.clone(),
                    PeerProgress {
                        sent: fo.sent,
                        finish: fo.finish,
                        iteration: obs[n].iteration,
                        seen: slot,
                        reported_in: Some(slot),
                        next_rate: fo.decision.next_rate(),
                    },
                ));
                mine.push((fo.id, std::mem::take(&mut paths[i]), fo.booking));
            }
            if let Some(r) = &mut self.recorded {
                r.push(Recorded {
                    host: h,
                    slot,
                    obs: obs.clone(),
                    orders: idx_of.iter().map(|&i| out[i]).collect(),
                });
            }
            match self.visibility {
                Visibility::Lockstep => lockstep.push((h, mine, step.withdrawn)),
                Visibility::Skewed => self.publish(h, mine, &step.withdrawn),
            }
        }
        self.recycle(&mut obs);
        // Lockstep: publish only now, so no host saw another's plan for this slot.
        for (h, ds, gone) in lockstep {
            self.publish(h, ds, &gone);
        }
        self.planned_last = busy_hosts;
        // The exchange: reports arrive after everyone planned. Older reports stay until the
        // daemon would have dropped them (the policy judges their freshness).
        self.progress.extend(self.next_progress.drain(..));
        if slot.0.is_multiple_of(64) {
            let keep = self.cfg.peer_stale_slots.max(1) * 4;
            self.progress
                .retain(|_, p| slot.since(p.seen).is_none_or(|d| d <= keep));
        }
        out
    }
}
