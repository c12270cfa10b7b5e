//! The discrete-slot engine: jobs arrive, are placed, compute, communicate and finish; each
//! slot a policy sets flow rates and [`crate::physics`] moves bytes.
//!
//! Time advances in slots of τ. A job's iteration is `compute_slots` of compute followed by
//! its flows; the next iteration's compute starts in the slot after the last flow finished.
//! Slots in which nothing communicates are skipped in one step (nothing can change in them),
//! which keeps long compute phases and quiet periods cheap.

use mlcc_core::SlotConfig;
use mlcc_core::flow::FlowRole;
use mlcc_core::job::{self, Arch, Member, Role};
use mlcc_core::routing::{Routes, ecmp_hash_str};
use mlcc_core::topology::{NodeId, Topology};

use crate::layers;
use crate::physics;
use crate::placement::{GpuPool, Placement};
use crate::policy::{Policy, View};
pub use crate::state::{BYTE_EPSILON, Flow, FlowRef, Job, Phase, Shape};
use crate::workload::JobSpec;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("job {job}: host {host:?} is not in the topology")]
    UnknownHost { job: String, host: String },
    #[error("job {job}: {source}")]
    Job {
        job: String,
        #[source]
        source: job::JobError,
    },
    #[error("job {job}: routing: {source}")]
    Route {
        job: String,
        #[source]
        source: mlcc_core::routing::RouteError,
    },
    #[error(
        "job {job} needs {need} servers with a free GPU but the cluster has only {have} servers"
    )]
    TooBig { job: String, need: u32, have: usize },
}

/// What a run produced, besides the jobs themselves.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Slots the clock passed, and slots in which flows were active (the ones that cost work).
    pub slots: u64,
    pub busy_slots: u64,
    pub bytes_delivered: f64,
    pub bytes_expected: f64,
    /// Bytes flows held (could have sent) but were not given while every link of their path
    /// had room left after the slot: capacity a policy left idle. Near 0 for a
    /// work-conserving policy. A broadcast counts what its aggregation had delivered by the end
    /// of the slot (an upper bound: some of it arrived too late to leave in the slot).
    pub idle_capacity_bytes: f64,
    /// Bytes that flows tried to send beyond what an overbooked link carried.
    pub overbooked_bytes: f64,
    pub wall_secs: f64,
    /// Whether the run hit `max_slots` before every job finished.
    pub truncated: bool,
}

pub struct Engine<'t> {
    topo: &'t Topology,
    routes: &'t Routes,
    slots: SlotConfig,
    pub jobs: Vec<Job>,
    gpus: GpuPool,
    queue: std::collections::VecDeque<usize>,
    next_arrival: usize,
    now: u64,
    active: Vec<FlowRef>,
    sendable: Vec<f64>,
    link_load: Vec<f64>,
    rates: Vec<f64>,
    /// Per active flow, its fill class this slot ([`Policy::fill`]).
    fill: Vec<Option<u8>>,
    scratch: physics::Scratch,
    /// Whether jobs communicate layer by layer ([`crate::layers`]) instead of one blob after
    /// the compute.
    per_layer: bool,
    pub stats: RunStats,
}

/// Whole slots of `secs` of compute (at least one).
fn compute_slots(secs: f64, tau: f64) -> u64 {
    ((secs / tau).round() as u64).max(1)
}

impl<'t> Engine<'t> {
    /// `specs` must be sorted by arrival.
    pub fn new(
        topo: &'t Topology,
        routes: &'t Routes,
        slots: SlotConfig,
        specs: &[JobSpec],
        placement: Placement,
        seed: u64,
    ) -> Result<Self, EngineError> {
        let tau = slots.tau_secs();
        let hosts: Vec<NodeId> = topo.hosts().collect();
        let mut jobs = Vec::with_capacity(specs.len());
        for s in specs {
            if s.gpus() as usize > hosts.len() {
                return Err(EngineError::TooBig {
                    job: s.id.clone(),
                    need: s.gpus(),
                    have: hosts.len(),
                });
            }
            let compute = s.compute_secs();
            jobs.push(Job {
                spec: s.clone(),
                name: std::sync::Arc::from(s.id.as_str()),
                arrival_slot: (s.arrival_s / tau).ceil() as u64,
                hosts: vec![],
                flows: vec![],
                compute_slots: compute_slots(compute, tau),
                iteration: 0,
                phase: Phase::Queued,
                start_slot: None,
                shift_slots: 0,
                finish_slot: None,
                comm_slots: 0,
                layers: None,
                shape: Shape::NONE,
                last_comm_secs: None,
            });
        }
        Ok(Engine {
            topo,
            routes,
            slots,
            jobs,
            gpus: GpuPool::new(hosts, placement, seed),
            queue: Default::default(),
            next_arrival: 0,
            now: 0,
            active: vec![],
            sendable: vec![],
            link_load: vec![],
            rates: vec![],
            fill: vec![],
            scratch: physics::Scratch::new(topo),
            per_layer: false,
            stats: RunStats::default(),
        })
    }

    /// Switches the per-layer communication model ([`crate::layers`]) on or off (off by
    /// default: one blob of bytes after each iteration's compute).
    pub fn with_per_layer(mut self, on: bool) -> Self {
        self.per_layer = on;
        self
    }

    /// Slots job `ji`'s policy-added compute ([`Shape::extra_secs`]) costs.
    fn extra_slots(&self, ji: usize) -> u64 {
        let j = &self.jobs[ji];
        if j.shape.extra_secs <= 0.0 {
            return 0;
        }
        let tau = self.slots.tau_secs();
        compute_slots(j.spec.compute_secs() + j.shape.extra_secs, tau)
            .saturating_sub(j.compute_slots)
    }

    /// Slots from the start of an iteration to its first byte: the whole compute, or under the
    /// per-layer model the forward pass; the policy's added compute on top.
    fn slots_before_comm(&self, ji: usize) -> u64 {
        let j = &self.jobs[ji];
        j.layers.as_ref().map_or(j.compute_slots, |l| l.fwd_slots) + self.extra_slots(ji)
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn finished(&self) -> bool {
        self.jobs.iter().all(|j| j.phase == Phase::Done)
    }

    /// Builds the job's flow groups with mlcc-core's own job model, so flow ids, byte counts
    /// and dependencies are exactly what the daemon derives.
    fn materialize(
        &mut self,
        ji: usize,
        hosts: Vec<NodeId>,
        front_first: bool,
    ) -> Result<(), EngineError> {
        let topo = self.topo;
        let j = &mut self.jobs[ji];
        let name = |h: NodeId| topo.node(h).name.clone();
        let mut members = Vec::new();
        for (rank, &h) in hosts.iter().take(j.spec.workers as usize).enumerate() {
            members.push(Member {
                host: name(h),
                role: Role::Worker,
                rank: rank as u32,
            });
        }
        if j.spec.arch == Arch::Ps {
            for (rank, &h) in hosts.iter().skip(j.spec.workers as usize).enumerate() {
                members.push(Member {
                    host: name(h),
                    role: Role::Server,
                    rank: rank as u32,
                });
            }
        }
        let cj = job::Job {
            id: j.spec.id.clone(),
            arch: j.spec.arch,
            members,
            model_bytes: mlcc_core::Bytes(j.spec.model_bytes()),
        };
        let groups = cj.flow_groups().map_err(|source| EngineError::Job {
            job: j.spec.id.clone(),
            source,
        })?;
        let mut flows = Vec::with_capacity(groups.len());
        for g in &groups {
            let (Some(src), Some(dst)) = (topo.node_by_name(&g.src), topo.node_by_name(&g.dst))
            else {
                continue;
            };
            let path = self
                .routes
                .path(topo, src, dst, ecmp_hash_str(g.id.as_str()))
                .map_err(|source| EngineError::Route {
                    job: j.spec.id.clone(),
                    source,
                })?;
            let upstream = g
                .upstream
                .iter()
                .filter_map(|u| groups.iter().position(|x| &x.id == u))
                .collect();
            let bytes = g.bytes_per_iteration.as_f64();
            flows.push(Flow {
                id: g.id.clone(),
                src,
                dst,
                role: g.role,
                bytes,
                base_bytes: bytes,
                released: bytes,
                buckets: vec![],
                bucket_sent: vec![],
                path,
                upstream,
                slack: g.slack_bytes.as_f64(),
                base_slack: g.slack_bytes.as_f64(),
                sent: 0.0,
                last_rate: 0.0,
                last_achieved: 0.0,
                last_link_limited: false,
                last_data_late: false,
                active_idx: None,
            });
        }
        j.hosts = hosts;
        j.flows = flows;
        if self.per_layer {
            j.layers = Some(layers::plan(j.spec.model, j.compute_slots, front_first));
        }
        let per_iteration: f64 = j.flows.iter().map(|f| f.bytes).sum();
        self.stats.bytes_expected += per_iteration * f64::from(j.spec.iterations);
        Ok(())
    }

    fn admit(&mut self, policy: &mut dyn Policy) -> Result<(), EngineError> {
        while self.next_arrival < self.jobs.len()
            && self.jobs[self.next_arrival].arrival_slot <= self.now
        {
            self.queue.push_back(self.next_arrival);
            self.next_arrival += 1;
        }
        while let Some(&ji) = self.queue.front() {
            let hosts = if let Some(p) = &self.jobs[ji].spec.pinned {
                // A testbed's job runs where its scenario puts it, beside whatever else runs there.
                p.workers
                    .iter()
                    .chain(&p.servers)
                    .map(|h| {
                        self.topo
                            .node_by_name(h)
                            .ok_or_else(|| EngineError::UnknownHost {
                                job: self.jobs[ji].spec.id.clone(),
                                host: h.clone(),
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                let need = self.jobs[ji].spec.gpus();
                let Some(hosts) = self.gpus.place(ji as u64, need) else {
                    break;
                };
                hosts
            };
            self.queue.pop_front();
            self.materialize(ji, hosts, policy.front_first())?;
            let shift = policy.start_shift(&self.jobs, ji, self.now, self.topo, self.slots);
            self.jobs[ji].shape = policy.shape(&self.jobs, ji, self.slots.tau_secs());
            let until = self.now + shift + self.slots_before_comm(ji);
            let j = &mut self.jobs[ji];
            j.start_slot = Some(self.now);
            j.shift_slots = shift;
            j.phase = Phase::Compute { until };
        }
        Ok(())
    }

    /// The next slot at which something can happen when no flow is active.
    fn next_event(&self) -> u64 {
        let mut next = u64::MAX;
        if let Some(j) = self.jobs.get(self.next_arrival) {
            next = next.min(j.arrival_slot);
        }
        for j in &self.jobs {
            if let Phase::Compute { until } = j.phase {
                next = next.min(until);
            }
        }
        next.max(self.now + 1)
    }

    /// Adds this slot's idle capacity and overbooked bytes to the stats (see [`RunStats`]).
    fn account_idle(&mut self, tau: f64) {
        self.link_load.clear();
        self.link_load.resize(self.topo.links().len(), 0.0);
        for r in &self.active {
            let f = &self.jobs[r.job as usize].flows[r.flow as usize];
            // A reply whose whole aggregate came in during the slot held its share of its
            // links for when its data would arrive: that share was not idle.
            let used = if f.last_data_late {
                f.last_achieved.max(f.last_rate.max(0.0))
            } else {
                f.last_achieved
            };
            for l in &f.path {
                self.link_load[l.index()] += used * tau;
            }
        }
        for (i, r) in self.active.iter().enumerate() {
            let f = &self.jobs[r.job as usize].flows[r.flow as usize];
            let moved = f.last_achieved * tau;
            if f.last_link_limited {
                let wanted = (f.last_rate.max(0.0) * tau).min(self.sendable[i]);
                self.stats.overbooked_bytes += (wanted - moved).max(0.0);
                continue;
            }
            // A reply whose whole aggregate came in during the slot could send only for the
            // rest of it: what it could have moved then is not known here, so it counts none.
            if f.last_data_late {
                continue;
            }
            let mut short = self.sendable[i] - moved;
            // `sendable` bounds a broadcast by its pushes running at their path's rate all
            // slot; what it holds now is where they actually were at its end.
            if f.role == FlowRole::Bcast {
                short = short.min(physics::held(&self.jobs[r.job as usize], f));
            }
            if short <= crate::state::BYTE_EPSILON {
                continue;
            }
            let room = f
                .path
                .iter()
                .map(|l| {
                    let c = self.topo.links()[l.index()].capacity.0 * tau;
                    (c - self.link_load[l.index()]).max(0.0)
                })
                .fold(f64::INFINITY, f64::min);
            self.stats.idle_capacity_bytes += short.min(room);
        }
    }

    /// Runs one slot (or skips to the next event if nothing communicates). Returns whether
    /// flows were active.
    pub fn step(&mut self, policy: &mut dyn Policy) -> Result<bool, EngineError> {
        self.admit(policy)?;
        let now = self.now;
        self.active.clear();
        for (ji, j) in self.jobs.iter_mut().enumerate() {
            if let Phase::Compute { until } = j.phase
                && until <= now
            {
                j.phase = Phase::Comm { since: now };
                layers::begin_iteration(j);
                // What a policy's shape changed about the bytes.
                let changed: f64 = j.flows.iter().map(|f| f.bytes - f.base_bytes).sum();
                if changed != 0.0 {
                    self.stats.bytes_expected += changed;
                }
            }
            if let Phase::Comm { since } = j.phase {
                layers::release(j, now, since);
                j.comm_slots += 1;
                for (fi, f) in j.flows.iter_mut().enumerate() {
                    f.active_idx = None;
                    if !f.is_done() {
                        f.active_idx = Some(self.active.len() as u32);
                        self.active.push(FlowRef {
                            job: ji as u32,
                            flow: fi as u32,
                        });
                    }
                }
            }
        }
        let tau = self.slots.tau_secs();
        let busy = !self.active.is_empty();
        if busy || policy.wants_idle_slot() {
            physics::sendable(self.topo, &self.jobs, &self.active, tau, &mut self.sendable);
            self.rates.clear();
            self.rates.resize(self.active.len(), 0.0);
            let view = View {
                slot: now,
                tau,
                slots: self.slots,
                topo: self.topo,
                jobs: &self.jobs,
                active: &self.active,
                sendable: &self.sendable,
            };
            policy.rates(&view, &mut self.rates);
            self.fill.clear();
            self.fill.resize(self.active.len(), None);
            policy.fill(&mut self.fill);
            let offers = physics::Offers {
                rates: &self.rates,
                fill: &self.fill,
                paced: policy.paced_by_linux(),
            };
            self.stats.bytes_delivered += physics::advance(
                &mut self.jobs,
                &self.active,
                &offers,
                tau,
                policy.sharing(),
                &mut self.scratch,
            );
            self.account_idle(tau);
            for j in &mut self.jobs {
                if matches!(j.phase, Phase::Comm { .. }) {
                    layers::account(j, now);
                }
            }
        }
        // Iterations that completed in this slot.
        for ji in 0..self.jobs.len() {
            let j = &mut self.jobs[ji];
            let Phase::Comm { since } = j.phase else {
                continue;
            };
            if !j.flows.iter().all(Flow::is_done) {
                continue;
            }
            j.iteration += 1;
            j.last_comm_secs = Some((now + 1 - since) as f64 * tau);
            if j.iteration >= j.spec.iterations {
                j.phase = Phase::Done;
                j.finish_slot = Some(now + 1);
                if j.spec.pinned.is_none() {
                    self.gpus.release(&j.hosts);
                }
            } else {
                self.jobs[ji].shape = policy.shape(&self.jobs, ji, tau);
                let extra = self.extra_slots(ji);
                let j = &mut self.jobs[ji];
                let until = match &j.layers {
                    None => now + 1 + j.compute_slots + extra,
                    Some(l) => layers::next_backward(l, now, extra),
                };
                j.phase = Phase::Compute { until };
            }
        }
        self.stats.slots = now + 1;
        if busy {
            self.stats.busy_slots += 1;
            self.now += 1;
        } else {
            self.now = self.next_event();
            if self.now == u64::MAX {
                self.now = now + 1;
            }
        }
        Ok(busy)
    }
}
