//! A small fabric of training jobs on [`crate::fluid`] links, driven slot by slot through a
//! [`ControlPlane`]: what the harness's own tests run (the simulator has the full-size workload,
//! placement and reports on the same cluster and fluid links).
//!
//! A job is core's [`Job`] (so flow ids, bytes and dependencies are what mlccd derives), a
//! number of iterations and a compute time in slots; each iteration computes, then
//! communicates until every flow has delivered its bytes.

use std::sync::Arc;

use mlcc_core::host::Enforce;
use mlcc_core::job::Job;
use mlcc_core::routing::{Routes, ecmp_hash_str};
use mlcc_core::topology::{LinkId, NodeId, Topology};
use mlcc_core::{FlowId, FlowRole, Slot, SlotConfig};

use crate::control_plane::{Active, ControlPlane, Training};
use crate::fluid::{self, Links};

/// Bytes a flow may have left and still count as delivered (float crumbs of rate × τ).
const BYTE_EPSILON: f64 = 0.5;

/// One job of the fabric.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub job: Job,
    pub iterations: u32,
    pub compute_slots: u64,
    /// The slot its first compute phase starts in.
    pub arrival: u64,
}

#[derive(Clone, Debug)]
struct Flow {
    id: FlowId,
    job: usize,
    role: FlowRole,
    src: NodeId,
    path: Vec<LinkId>,
    bytes: f64,
    /// Indices (in the fabric's flows) of the flows this one depends on.
    upstream: Vec<usize>,
    slack: f64,
    sent: f64,
    last_achieved: f64,
}

impl Flow {
    fn remaining(&self) -> f64 {
        (self.bytes - self.sent).max(0.0)
    }

    fn done(&self) -> bool {
        self.sent + BYTE_EPSILON >= self.bytes
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Compute { until: u64 },
    Comm { since: u64 },
    Done,
}

#[derive(Clone, Debug)]
struct JobState {
    spec: JobSpec,
    name: Arc<str>,
    flows: Vec<usize>,
    iteration: u32,
    phase: Phase,
    finish: Option<u64>,
}

/// What one active flow did in one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSlot {
    pub id: FlowId,
    pub role: FlowRole,
    pub path: Vec<LinkId>,
    /// Bytes/s the cluster enforced (a released flow offers its path's bottleneck).
    pub rate: f64,
    /// Bytes its application held at the start of the slot, and bytes it moved.
    pub held: f64,
    pub moved: f64,
    /// A link (not the policy, not the data) held it below what it offered.
    pub link_limited: bool,
}

pub struct Fabric {
    topo: Topology,
    slots: SlotConfig,
    flows: Vec<Flow>,
    jobs: Vec<JobState>,
    links: Links,
    now: u64,
}

impl Fabric {
    pub fn new(topo: Topology, slots: SlotConfig, jobs: Vec<JobSpec>) -> Result<Self, String> {
        let routes = Routes::new(&topo);
        let mut flows: Vec<Flow> = Vec::new();
        let mut states = Vec::with_capacity(jobs.len());
        for (ji, spec) in jobs.into_iter().enumerate() {
            let groups = spec.job.flow_groups().map_err(|e| e.to_string())?;
            let base = flows.len();
            for g in &groups {
                let node = |n: &str| topo.node_by_name(n).ok_or(format!("no host {n}"));
                let (src, dst) = (node(&g.src)?, node(&g.dst)?);
                let path = routes
                    .path(&topo, src, dst, ecmp_hash_str(g.id.as_str()))
                    .map_err(|e| e.to_string())?;
                flows.push(Flow {
                    id: g.id.clone(),
                    job: ji,
                    role: g.role,
                    src,
                    path,
                    bytes: g.bytes_per_iteration.as_f64(),
                    upstream: g
                        .upstream
                        .iter()
                        .filter_map(|u| groups.iter().position(|x| &x.id == u))
                        .map(|p| base + p)
                        .collect(),
                    slack: g.slack_bytes.as_f64(),
                    sent: 0.0,
                    last_achieved: 0.0,
                });
            }
            states.push(JobState {
                name: Arc::from(spec.job.id.as_str()),
                flows: (base..flows.len()).collect(),
                iteration: 0,
                phase: Phase::Compute {
                    until: spec.arrival + spec.compute_slots,
                },
                finish: None,
                spec,
            });
        }
        Ok(Fabric {
            links: Links::new(&topo),
            topo,
            slots,
            flows,
            jobs: states,
            now: 0,
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn now(&self) -> Slot {
        Slot(self.now)
    }

    pub fn finished(&self) -> bool {
        self.jobs.iter().all(|j| j.phase == Phase::Done)
    }

    /// The slot after each job's last byte arrived, by job.
    pub fn finish_slots(&self) -> Vec<Option<u64>> {
        self.jobs.iter().map(|j| j.finish).collect()
    }

    /// Bytes flow `f` may have sent in all at the start of the slot.
    fn allowed(&self, f: &Flow) -> f64 {
        let a = match f.role {
            FlowRole::Agg => f.bytes,
            FlowRole::Ring => f.upstream.first().map_or(f.bytes, |&q| {
                fluid::ring_allows(self.flows[q].sent, f.slack)
            }),
            FlowRole::Bcast => fluid::bcast_allows(self.aggregated(f, |_| 0.0), f.bytes),
        };
        a.min(f.bytes)
    }

    /// The smallest fraction of its iteration an aggregation flow into `f`'s server has moved,
    /// with `extra(a)` more bytes for flow `a`.
    fn aggregated(&self, f: &Flow, extra: impl Fn(usize) -> f64) -> f64 {
        f.upstream
            .iter()
            .map(|&a| (self.flows[a].sent + extra(a)) / self.flows[a].bytes.max(1.0))
            .fold(1.0, f64::min)
    }

    /// One slot: jobs whose compute ended start communicating, the cluster decides every
    /// active flow's rate, links and data move the bytes.
    pub fn step(&mut self, cluster: &mut ControlPlane) -> Vec<FlowSlot> {
        let now = self.now;
        let tau = self.slots.tau_secs();
        for j in &mut self.jobs {
            if let Phase::Compute { until } = j.phase
                && until <= now
            {
                j.phase = Phase::Comm { since: now };
                for &f in &j.flows {
                    self.flows[f].sent = 0.0;
                    self.flows[f].last_achieved = 0.0;
                }
            }
        }
        let active: Vec<usize> = self
            .jobs
            .iter()
            .filter(|j| matches!(j.phase, Phase::Comm { .. }))
            .flat_map(|j| j.flows.iter().copied())
            .filter(|&f| !self.flows[f].done())
            .collect();
        let held: Vec<f64> = active
            .iter()
            .map(|&i| (self.allowed(&self.flows[i]) - self.flows[i].sent).max(0.0))
            .collect();
        let obs: Vec<Active> = active
            .iter()
            .zip(&held)
            .map(|(&i, &held)| {
                let f = &self.flows[i];
                let j = &self.jobs[f.job];
                let since = match j.phase {
                    Phase::Comm { since } => since,
                    _ => now,
                };
                Training {
                    id: &f.id,
                    job: &j.name,
                    role: f.role,
                    src: f.src,
                    dst: f.path.last().map_or(f.src, |l| self.topo.link(*l).to),
                    path: &f.path,
                    iteration: j.iteration,
                    iterations: j.spec.iterations,
                    comm_since: since,
                    model_bytes: j.spec.job.model_bytes.as_f64(),
                    bytes: f.bytes,
                    sent: f.sent,
                    slack: f.slack,
                    held: Some(held),
                    in_flight: None,
                    quiet: false,
                    last_achieved: f.last_achieved,
                    upstream: f
                        .upstream
                        .iter()
                        .map(|&u| self.flows[u].id.clone())
                        .collect(),
                }
                .active()
            })
            .collect();
        let enforce = if active.is_empty() && !cluster.has_plans() {
            Vec::new()
        } else {
            cluster.step(Slot(now), obs)
        };
        let rates: Vec<f64> = active
            .iter()
            .zip(&enforce)
            .map(|(&i, o)| match o.enforce {
                Enforce::Pace(r) if r.is_finite() => r.max(0.0),
                Enforce::Pace(_) => 0.0,
                // Kernel TCP: unpaced, it offers its path's bottleneck and shares the rest.
                Enforce::Release => self.topo.bottleneck(&self.flows[i].path).0,
            })
            .collect();
        // What each flow offers: its rate, limited by what it holds (a broadcast may forward
        // what arrives at its server during the slot).
        let mut wanted = vec![0.0; active.len()];
        // Position in `active` of each of the fabric's flows.
        let mut slot_of = vec![None; self.flows.len()];
        for (n, &i) in active.iter().enumerate() {
            slot_of[i] = Some(n);
        }
        let pos = |f: usize| slot_of[f];
        for (n, &i) in active.iter().enumerate() {
            let f = &self.flows[i];
            if f.role != FlowRole::Bcast {
                wanted[n] = (rates[n] * tau).min(f.remaining()).min(held[n]);
            }
        }
        for (n, &i) in active.iter().enumerate() {
            let f = &self.flows[i];
            if f.role == FlowRole::Bcast {
                let agg = self.aggregated(f, |a| pos(a).map_or(0.0, |p| wanted[p]));
                let can = (fluid::bcast_allows(agg, f.bytes) - f.sent).max(0.0);
                wanted[n] = (rates[n] * tau).min(f.remaining()).min(can);
            }
        }
        let mut moved = vec![0.0; active.len()];
        let mut scaled = vec![false; active.len()];
        let paths: Vec<&[LinkId]> = active.iter().map(|&i| &self.flows[i].path[..]).collect();
        self.links.share(
            tau,
            0..active.len(),
            |n| paths[n],
            &wanted,
            &rates,
            &mut moved,
            &mut scaled,
        );
        // A broadcast never overtakes what its server aggregated by the end of the slot.
        for (n, &i) in active.iter().enumerate() {
            let f = &self.flows[i];
            if f.role == FlowRole::Bcast {
                let agg = self.aggregated(f, |a| pos(a).map_or(0.0, |p| moved[p]));
                moved[n] = moved[n].min((fluid::bcast_allows(agg, f.bytes) - f.sent).max(0.0));
            }
        }
        let mut out = Vec::with_capacity(active.len());
        for (n, &i) in active.iter().enumerate() {
            let f = &mut self.flows[i];
            f.sent = (f.sent + moved[n]).min(f.bytes);
            if f.bytes - f.sent < BYTE_EPSILON {
                f.sent = f.bytes;
            }
            f.last_achieved = moved[n] / tau;
            out.push(FlowSlot {
                id: f.id.clone(),
                role: f.role,
                path: f.path.clone(),
                rate: rates[n],
                held: held[n],
                moved: moved[n],
                link_limited: scaled[n],
            });
        }
        for j in &mut self.jobs {
            if !matches!(j.phase, Phase::Comm { .. })
                || !j.flows.iter().all(|&f| self.flows[f].done())
            {
                continue;
            }
            j.iteration += 1;
            j.phase = if j.iteration >= j.spec.iterations {
                j.finish = Some(now + 1);
                Phase::Done
            } else {
                Phase::Compute {
                    until: now + 1 + j.spec.compute_slots,
                }
            };
        }
        self.now += 1;
        out
    }
}
