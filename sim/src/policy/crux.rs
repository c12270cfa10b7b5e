//! `crux`: Crux (Cao et al., SIGCOMM'24) as a fluid model. Crux ranks jobs by GPU intensity —
//! the compute time of an iteration over the time its communication takes on its most loaded
//! link alone — and maps the ranks onto the few priority queues switches have: the most
//! GPU-intensive jobs go first, because every second of their communication holds back the
//! most GPU time. Here: strict priority between levels, max-min within a level (flows of one
//! level share a queue), recomputed every slot.
//!
//! Choices where the paper's mechanism does not carry over: levels are octaves of intensity
//! below the most intensive active job (a job within 2× of it shares its level; Crux compresses
//! ranks onto queues by its own clustering), at most [`LEVELS`] of them; Crux's path selection
//! is not modelled (the simulator routes by ECMP hash like mlccd).

use mlcc_core::topology::Topology;

use super::fair::Fair;
use super::{Policy, View};
use crate::state::{FlowRef, Job, job_runs};

/// Priority queues a switch port offers (8 in common data-centre switches).
pub const LEVELS: usize = 8;

/// A job's GPU intensity: compute seconds per iteration over the seconds its iteration's bytes
/// take on its most loaded link alone. Infinite for a job that moves nothing.
pub fn intensity(job: &Job, tau: f64, topo: &Topology) -> f64 {
    let comm = job.comm_secs_alone(topo);
    if comm > 0.0 {
        job.compute_slots as f64 * tau / comm
    } else {
        f64::INFINITY
    }
}

/// The level of a job of intensity `i` when the most intensive active job has `top`: 0 for
/// `top` and anything within 2× of it, one more per halving, at most `LEVELS - 1`; a job of no
/// (or no known) intensity goes last.
pub fn level(i: f64, top: f64) -> usize {
    if i.is_nan() || i <= 0.0 {
        return LEVELS - 1;
    }
    if i >= top || !top.is_finite() {
        return 0;
    }
    ((top / i).log2().floor() as usize).min(LEVELS - 1)
}

#[derive(Default)]
pub struct Crux {
    fair: Fair,
    residual: Vec<f64>,
    active: Vec<FlowRef>,
    sendable: Vec<f64>,
    out: Vec<f64>,
    /// Intensity per job index (NaN: not yet computed); fixed once a job is placed.
    intensity: Vec<f64>,
    /// Per job run of the active list: (intensity, then level; run).
    runs: Vec<(f64, usize, std::ops::Range<usize>)>,
}

impl Policy for Crux {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.residual.clear();
        self.residual
            .extend(view.topo.links().iter().map(|l| l.capacity.0));
        if self.intensity.len() < view.jobs.len() {
            self.intensity.resize(view.jobs.len(), f64::NAN);
        }
        self.runs.clear();
        for run in job_runs(view.active) {
            let j = view.active[run.start].job as usize;
            if self.intensity[j].is_nan() {
                self.intensity[j] = intensity(&view.jobs[j], view.tau, view.topo);
            }
            self.runs.push((self.intensity[j], 0, run));
        }
        let top = self.runs.iter().map(|r| r.0).fold(0.0, f64::max);
        for r in &mut self.runs {
            r.1 = level(r.0, top);
        }
        for lv in 0..LEVELS {
            // The level's flows, from every job on it, as one max-min problem.
            self.active.clear();
            self.sendable.clear();
            for (_, _, run) in self.runs.iter().filter(|r| r.1 == lv) {
                self.active.extend_from_slice(&view.active[run.clone()]);
                self.sendable.extend_from_slice(&view.sendable[run.clone()]);
            }
            if self.active.is_empty() {
                continue;
            }
            let sub = View {
                active: &self.active,
                sendable: &self.sendable,
                ..*view
            };
            self.out.clear();
            self.out.resize(self.active.len(), 0.0);
            self.fair
                .solve_weighted(&sub, None, None, &self.residual, &mut self.out);
            for (&r, &rate) in self.active.iter().zip(&self.out) {
                for l in &view.flow(r).path {
                    let c = &mut self.residual[l.index()];
                    *c = (*c - rate).max(0.0);
                }
            }
            let mut k = 0;
            for (_, _, run) in self.runs.iter().filter(|r| r.1 == lv) {
                out[run.clone()].copy_from_slice(&self.out[k..k + run.len()]);
                k += run.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_octaves_below_the_most_intensive_job() {
        assert_eq!(level(10.0, 10.0), 0);
        assert_eq!(level(5.1, 10.0), 0);
        assert_eq!(level(5.0, 10.0), 1);
        assert_eq!(level(1.0, 10.0), 3);
        assert_eq!(level(1e-9, 10.0), LEVELS - 1);
        // A job that moves nothing is as intensive as can be; a zero or NaN one goes last.
        assert_eq!(level(f64::INFINITY, f64::INFINITY), 0);
        assert_eq!(level(0.0, 10.0), LEVELS - 1);
        assert_eq!(level(f64::NAN, 10.0), LEVELS - 1);
    }
}
