//! `cassini`: Cassini (Rajasekaran et al., NSDI'24) as the simulator can run it. Cassini gives
//! each job a time shift so that the communication phases of jobs sharing a link interleave
//! instead of colliding, and leaves the network as it is (fair sharing underneath); the job
//! scheduler applies the shift by delaying the job's start.
//!
//! Here, when a job is placed, its shift is the delay (0 to one period, whole slots) that
//! minimises the overlap of its communication windows with those of the running jobs it shares
//! a link with, over a horizon of several periods — Cassini's per-link rotation, solved greedily
//! for the newcomer against the running jobs' current phases. Our choices where the paper's
//! mechanism does not carry over: running jobs are not shifted again (that would pause them),
//! and a job's period and communication length are its isolated ones (compute + its bytes on
//! its most loaded link alone), which is what Cassini profiles.

use mlcc_core::SlotConfig;
use mlcc_core::hash::Set;
use mlcc_core::topology::Topology;

use super::fair::Fair;
use super::{Policy, View};
use crate::state::{Job, Phase};

/// Periods of the longest period the overlap is counted over.
const HORIZON_PERIODS: u64 = 8;

/// A job's communication slots per iteration when alone ([`Job::comm_secs_alone`]).
fn comm_slots(job: &Job, topo: &Topology, tau: f64) -> u64 {
    (job.comm_secs_alone(topo) / tau).ceil() as u64
}

/// Slots of overlap between two periodic windows over `[0, horizon)`: windows of length `la`
/// starting at `a0 + m·pa`, and of length `lb` at `b0 + m·pb` (m ≥ 0). Window by window, so a
/// call costs the number of windows, not of slots.
pub fn overlap(a0: u64, pa: u64, la: u64, b0: u64, pb: u64, lb: u64, horizon: u64) -> u64 {
    if pa == 0 || pb == 0 || la == 0 || lb == 0 {
        return 0;
    }
    let mut total = 0;
    let mut a = a0;
    while a < horizon {
        let a_end = (a + la).min(horizon);
        // b's windows that can reach [a, a_end): from the one starting at or before a.
        let mut b = if a > b0 { b0 + (a - b0) / pb * pb } else { b0 };
        while b < a_end {
            let lo = a.max(b);
            let hi = a_end.min(b + lb);
            total += hi.saturating_sub(lo);
            b += pb;
        }
        a += pa;
    }
    total
}

#[derive(Default)]
pub struct Cassini {
    fair: Fair,
}

impl Policy for Cassini {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.fair.solve_capped(view, None, out);
    }

    fn start_shift(
        &mut self,
        jobs: &[Job],
        job: usize,
        now: u64,
        topo: &Topology,
        slots: SlotConfig,
    ) -> u64 {
        let tau = slots.tau_secs();
        let me = &jobs[job];
        let links: Set<usize> = me
            .flows
            .iter()
            .flat_map(|f| f.path.iter().map(|l| l.index()))
            .collect();
        let my_comm = comm_slots(me, topo, tau);
        let my_period = me.compute_slots + my_comm;
        if my_comm == 0 || my_period == 0 {
            return 0;
        }
        // The running jobs this one shares a link with: their next (or current) communication
        // start, period and length, relative to now.
        let mut others = Vec::new();
        for (k, j) in jobs.iter().enumerate() {
            if k == job
                || !j
                    .flows
                    .iter()
                    .any(|f| f.path.iter().any(|l| links.contains(&l.index())))
            {
                continue;
            }
            let comm = comm_slots(j, topo, tau);
            let start = match j.phase {
                Phase::Compute { until } if until >= now => until - now,
                // Communicating since `since`: its window began in the past; place it one
                // period later minus what has passed, so the windows line up.
                Phase::Comm { since } => {
                    let period = j.compute_slots + comm;
                    (since + period).saturating_sub(now)
                }
                _ => continue,
            };
            others.push((start, j.compute_slots + comm, comm));
        }
        if others.is_empty() {
            return 0;
        }
        let horizon = HORIZON_PERIODS
            * others
                .iter()
                .map(|o| o.1)
                .chain([my_period])
                .max()
                .unwrap_or(1);
        (0..my_period)
            .min_by_key(|&shift| {
                let mine = shift + me.compute_slots;
                let cost: u64 = others
                    .iter()
                    .map(|&(s, p, l)| overlap(mine, my_period, my_comm, s, p, l, horizon))
                    .sum();
                (cost, shift)
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_shared_busy_slots_of_two_periodic_windows() {
        // Same period 10, windows of 4: aligned they overlap 4 per period, shifted by 4 not at all.
        assert_eq!(overlap(0, 10, 4, 0, 10, 4, 20), 8);
        assert_eq!(overlap(0, 10, 4, 4, 10, 4, 20), 0);
        assert_eq!(overlap(0, 10, 4, 2, 10, 4, 20), 4);
        // Nothing before a window's first start.
        assert_eq!(overlap(10, 10, 4, 0, 10, 4, 10), 0);
        // Windows longer than the other's period, and unequal periods, against a slot count.
        let slow = |a0, pa, la, b0, pb, lb, h| {
            let busy = |t: u64, s0: u64, p: u64, l: u64| t >= s0 && (t - s0) % p < l;
            (0..h)
                .filter(|&t| busy(t, a0, pa, la) && busy(t, b0, pb, lb))
                .count() as u64
        };
        for (a0, pa, la, b0, pb, lb, h) in [
            (3, 7, 5, 1, 3, 2, 50),
            (0, 5, 5, 2, 9, 4, 61),
            (11, 13, 2, 0, 4, 3, 100),
        ] {
            assert_eq!(
                overlap(a0, pa, la, b0, pb, lb, h),
                slow(a0, pa, la, b0, pb, lb, h)
            );
        }
    }
}
