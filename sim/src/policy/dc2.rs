//! `dc2`: DC2, delay-aware compression control (Abdelmoniem & Canini, peer paper 003), as a
//! fluid model. Each worker's shim measures the communication phase's delay every iteration
//! and sets the next iteration's sparsification ratio k (the share of gradient elements sent)
//! from it; the network underneath is max-min fair (TCP).
//!
//! The control rule is the paper's DA5 ("Timely-thresholds delay gradient", Algorithm 1), with
//! its Table I defaults: over the delays d_j of the job's iterations, m_j the minimum so far,
//! a_j the mean of the last w = 50, r_j the mean of their last w differences,
//!
//! - d_j < α·m_j: k + k_inc;
//! - d_j > α·a_j: k · (1 − β·(d_j − α·a_j) / (d_j − α·m_j));
//! - otherwise k + k_inc if r_j/m_j < 0, else k · (1 − β·r_j/m_j);
//!
//! clamped to [k_min, k_max] = [0.005, 0.3], k_inc = 0.005, α = 1.25, β = 0.8.
//!
//! Our choices where the paper leaves it open: d_j is the job's communication phase, first
//! byte to last (under `--per-layer` from the backward pass's start, when the first bucket
//! leaves); the first iteration uses k_max (no delay measured yet); bytes on the wire are k ×
//! the gradient — the paper's own "average compression ratio (or average communicated volume
//! normalized by the baseline)", indices not counted — in every flow (PS pushes and replies,
//! ring steps alike); compressing and decompressing cost [`COMPRESS_SECS_PER_BYTE`] per
//! gradient byte of compute each iteration, whatever k (a sampled Top-k threshold and the
//! selection scan the whole gradient), added before the communication (to the compute without
//! `--per-layer`, to the forward pass with it). What compression costs in accuracy — and so in
//! iterations to converge — is not modelled: a job runs its iterations whatever k was.

use std::collections::VecDeque;

use super::fair::Fair;
use super::{Policy, View};
use crate::state::{Job, Shape};

pub const K_MIN: f64 = 0.005;
pub const K_MAX: f64 = 0.3;
pub const K_INC: f64 = 0.005;
pub const ALPHA: f64 = 1.25;
pub const BETA: f64 = 0.8;
/// The delay monitor's window w (iterations).
pub const WINDOW: usize = 50;
/// Compute seconds per gradient byte to compress and decompress: 5 GB/s, 20 ms for
/// ResNet-50's 98 MB, 110 ms for VGG19's 549 MB on a V100 (our choice; measured Top-k
/// overheads on V100s are of this order).
pub const COMPRESS_SECS_PER_BYTE: f64 = 1.0 / 5e9;

/// The delay monitor of one job: d_j over the last w + 1 iterations and the minimum so far.
#[derive(Clone, Debug)]
pub struct Monitor {
    pub k: f64,
    delays: VecDeque<f64>,
    min: f64,
    /// Iterations measured so far.
    seen: u32,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor {
            k: K_MAX,
            delays: VecDeque::new(),
            min: f64::INFINITY,
            seen: 0,
        }
    }
}

impl Monitor {
    /// Records delay `d` (s) and returns the next ratio by DA5.
    pub fn observe(&mut self, d: f64) -> f64 {
        self.delays.push_back(d);
        if self.delays.len() > WINDOW + 1 {
            self.delays.pop_front();
        }
        self.min = self.min.min(d);
        let last: Vec<f64> = self.delays.iter().rev().take(WINDOW).copied().collect();
        let a = last.iter().sum::<f64>() / last.len() as f64;
        let diffs: Vec<f64> = self
            .delays
            .iter()
            .zip(self.delays.iter().skip(1))
            .map(|(p, q)| q - p)
            .collect();
        let r = if diffs.is_empty() {
            0.0
        } else {
            let tail = &diffs[diffs.len().saturating_sub(WINDOW)..];
            tail.iter().sum::<f64>() / tail.len() as f64
        };
        let m = self.min.max(1e-12);
        let k = self.k;
        let next = if d < ALPHA * m {
            k + K_INC
        } else if d > ALPHA * a {
            k * (1.0 - BETA * (d - ALPHA * a) / (d - ALPHA * m))
        } else if r / m < 0.0 {
            k + K_INC
        } else {
            k * (1.0 - BETA * r / m)
        };
        self.k = next.clamp(K_MIN, K_MAX);
        self.k
    }
}

#[derive(Default)]
pub struct Dc2 {
    fair: Fair,
    /// Per job index.
    monitors: Vec<Option<Monitor>>,
}

impl Dc2 {
    /// Job `job`'s monitor, if it has one yet.
    pub fn monitor(&self, job: usize) -> Option<&Monitor> {
        self.monitors.get(job).and_then(Option::as_ref)
    }
}

impl Policy for Dc2 {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.fair.solve_capped(view, None, out);
    }

    fn shape(&mut self, jobs: &[Job], job: usize, _tau: f64) -> Shape {
        if self.monitors.len() < jobs.len() {
            self.monitors.resize(jobs.len(), None);
        }
        let j = &jobs[job];
        let m = self.monitors[job].get_or_insert_with(Monitor::default);
        if let Some(d) = j.last_comm_secs
            && j.iteration > m.seen
        {
            m.seen = j.iteration;
            m.observe(d);
        }
        Shape {
            scale: m.k,
            extra_secs: j.spec.model_bytes() as f64 * COMPRESS_SECS_PER_BYTE,
            ..Shape::NONE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_grows_while_delays_are_flat_and_shrinks_when_they_grow() {
        let mut m = Monitor::default();
        // Flat at the minimum: additive increase, held at k_max.
        for _ in 0..5 {
            assert_eq!(m.observe(1.0), K_MAX);
        }
        // The delay triples (contention): multiplicative decrease.
        let k = m.observe(3.0);
        assert!(k < K_MAX * 0.7, "{k}");
        // Still high and rising: down again, never below k_min.
        let k2 = m.observe(4.0);
        assert!(k2 < k && k2 >= K_MIN, "{k2}");
        for _ in 0..50 {
            assert!(m.observe(100.0) >= K_MIN);
        }
        // Back at the minimum: k_inc per iteration.
        let before = m.k;
        assert!((m.observe(1.0) - (before + K_INC)).abs() < 1e-12);
    }
}
