//! `ccml`: host-side interleaving of co-located jobs' communication phases (CCML, the paper's
//! [47]; the idea Rajasekaran et al. develop as CASSINI, HotNets'22 / NSDI'24): from profiled
//! iteration times, jobs that share a server are time-shifted so that their communication
//! phases do not overlap.
//!
//! Realization in slots: each job's communication time is profiled once (its iteration's
//! bytes over its hosts' link capacities, alone). A job that starts communicating owns a
//! window of 1.5× that time; at every host link (uplink and downlink — all a host-side
//! scheme can see) jobs inside their window get capacity in the order their windows began, so
//! a co-located job that becomes ready later is shifted behind the earlier one; jobs past
//! their window (the profile was wrong, or the fabric slowed them) share what is left. The
//! fabric beyond the host links is invisible to CCML: there, flows share max-min fairly.

use mlcc_core::hash::Map;
use mlcc_core::topology::LinkId;

use super::fair::Fair;
use super::maxmin::MaxMin;
use super::{Context, Policy, View};
use crate::state::Phase;

/// Slack on the profiled communication time before a job loses its priority.
const WINDOW_GAIN: f64 = 1.5;

pub struct Ccml {
    capacity: Vec<f64>,
    residual: Vec<f64>,
    /// Profiled communication slots per job index.
    profile: Map<u32, u64>,
    solver: MaxMin,
    fair: Fair,
    host_cap: Vec<f64>,
    scratch: Vec<f64>,
}

impl Ccml {
    pub fn new(c: &Context<'_>) -> Self {
        let capacity: Vec<f64> = c.topo.links().iter().map(|l| l.capacity.0).collect();
        Ccml {
            residual: capacity.clone(),
            capacity,
            profile: Map::default(),
            solver: MaxMin::default(),
            fair: Fair::default(),
            host_cap: vec![],
            scratch: vec![],
        }
    }

    fn profiled_slots(&self, view: &View<'_>, job: u32) -> u64 {
        let j = &view.jobs[job as usize];
        let mut per_link: Map<LinkId, f64> = Map::default();
        for f in &j.flows {
            for l in [f.path.first(), f.path.last()].into_iter().flatten() {
                *per_link.entry(*l).or_default() += f.bytes;
            }
        }
        let secs = per_link
            .iter()
            .map(|(l, b)| b / self.capacity[l.index()].max(1.0))
            .fold(0.0, f64::max);
        ((secs * WINDOW_GAIN / view.tau).ceil() as u64).max(1)
    }
}

impl Policy for Ccml {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        // Classes: in-window jobs one by one in window order, then everyone else together.
        let mut jobs: Vec<(u64, u32, usize, usize)> = Vec::new();
        let mut late: Vec<(usize, usize)> = Vec::new();
        let mut start = 0;
        while start < view.active.len() {
            let ji = view.active[start].job;
            let end = start
                + view.active[start..]
                    .iter()
                    .take_while(|r| r.job == ji)
                    .count();
            if !self.profile.contains_key(&ji) {
                let p = self.profiled_slots(view, ji);
                self.profile.insert(ji, p);
            }
            let since = match view.jobs[ji as usize].phase {
                Phase::Comm { since } => since,
                _ => view.slot,
            };
            if view.slot < since + self.profile[&ji] {
                jobs.push((since, ji, start, end));
            } else {
                late.push((start, end));
            }
            start = end;
        }
        jobs.sort_unstable();
        self.residual.copy_from_slice(&self.capacity);
        self.host_cap.clear();
        self.host_cap.resize(view.active.len(), 0.0);
        let classes = jobs
            .iter()
            .map(|&(_, _, s, e)| vec![(s, e)])
            .chain(std::iter::once(late));
        for ranges in classes {
            let members: Vec<usize> = ranges.iter().flat_map(|&(s, e)| s..e).collect();
            if members.is_empty() {
                continue;
            }
            let ends: Vec<[LinkId; 2]> = members
                .iter()
                .map(|&i| {
                    let p = &view.flow(view.active[i]).path;
                    [p[0], p[p.len() - 1]]
                })
                .collect();
            let paths: Vec<&[LinkId]> = ends.iter().map(|e| &e[..]).collect();
            let demand: Vec<f64> = members
                .iter()
                .map(|&i| view.sendable[i] / view.tau)
                .collect();
            self.solver
                .solve(&paths, &demand, &self.residual, &mut self.scratch);
            for (n, &i) in members.iter().enumerate() {
                let r = self.scratch[n];
                self.host_cap[i] = r;
                for l in &ends[n] {
                    self.residual[l.index()] = (self.residual[l.index()] - r).max(0.0);
                }
            }
        }
        let caps = std::mem::take(&mut self.host_cap);
        self.fair.solve_capped(view, Some(&caps), out);
        self.host_cap = caps;
    }
}
