//! B_f: the rate a flow can actually achieve (docs/design.md §8), BBR's max filter.
//!
//! Alg. 1 never plans above B_f, so a flow limited elsewhere (a slow receiver, a lossy path)
//! does not book bandwidth it cannot use. B_f is the largest delivery rate seen in the last W
//! slots in which the flow was limited by the path, times a probe gain so it can discover more,
//! capped by the path capacity. Slots in which the flow delivered what it was allowed say
//! nothing about the path (it was limited by its plan) and are ignored; once no path-limited
//! slot is left in the window, B_f returns to the path capacity.
//!
//! B_f never drops below half the path capacity. A flow planned at 0 delivers 0, and a filter
//! that learned "0" from that would starve the flow for good; and a paced flow sharing a link
//! with unscheduled TCP traffic delivers less than planned while the TCP flow fills the queue,
//! so a filter free to follow it ratchets the flow down slot by slot, each plan 1.25x the last
//! slot's share, and hands the link to the TCP flow (measured on the testbed's paper-small,
//! whose iperf3 cross traffic loads every link about half the time: floors of 1/16, 1/4, 1/2
//! and 1 gave 24.0, 23.3, 21.7 and 22.2 s mean JCT). At half, a flow keeps at least what fair
//! sharing with one competitor would give it; a path that really carries less (a slow
//! receiver) keeps up to half the link booked that it cannot use.

use std::collections::VecDeque;

use serde::Serialize;

use crate::slot::Slot;

/// Slots the max filter remembers.
pub const WINDOW_SLOTS: u64 = 4;
/// Head-room over the best delivery seen, so the estimate can grow.
pub const PROBE_GAIN: f64 = 1.25;
/// B_f is at least this fraction of the path capacity.
pub const MIN_FRACTION: f64 = 0.5;

/// One slot's measurement of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Delivery {
    /// Bytes/s delivered (acked) during the slot.
    pub rate: f64,
    /// Whether the flow was limited by the path during the slot: it had bytes waiting the whole
    /// slot and delivered clearly less than the rate it was allowed (callers use ~90 %). Only
    /// then does the delivery rate say what the path allows. A flow that delivered its allowed
    /// rate was limited by its plan: pass `false`.
    pub backlogged: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AchievableRate {
    samples: VecDeque<(Slot, f64)>,
}

impl AchievableRate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what the flow delivered during slot `slot`.
    pub fn observe(&mut self, slot: Slot, d: Delivery) {
        if !d.rate.is_finite() || d.rate <= 0.0 {
            return;
        }
        if !d.backlogged {
            // Limited by its plan, yet it delivered this much: the path carries at least
            // that, and samples below it are refuted. Waiting out the window instead kept a
            // flow at 1.25x a transient dip for W slots after the dip was over (measured on
            // the testbed: a ring step at 25-31 MB/s on an idle 119 MB/s path).
            self.samples.retain(|&(_, r)| r > d.rate);
            return;
        }
        self.samples.push_back((slot, d.rate));
        self.expire(slot);
    }

    fn expire(&mut self, now: Slot) {
        while let Some(&(s, _)) = self.samples.front() {
            if s.0 + WINDOW_SLOTS <= now.0 {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// B_f at slot `now` for a path whose bottleneck is `path_capacity` bytes/s.
    pub fn get(&self, now: Slot, path_capacity: f64) -> f64 {
        let best = self
            .samples
            .iter()
            .filter(|(s, _)| s.0 + WINDOW_SLOTS > now.0)
            .map(|&(_, r)| r)
            .reduce(f64::max);
        match best {
            Some(m) => (m * PROBE_GAIN).clamp(path_capacity * MIN_FRACTION, path_capacity),
            None => path_capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(rate: f64, backlogged: bool) -> Delivery {
        Delivery { rate, backlogged }
    }

    #[test]
    fn starts_at_path_capacity_and_follows_the_window_max() {
        let mut b = AchievableRate::new();
        assert_eq!(b.get(Slot(0), 1000.0), 1000.0);
        b.observe(Slot(1), d(700.0, true));
        assert_eq!(b.get(Slot(1), 1000.0), 875.0);
        b.observe(Slot(2), d(600.0, true));
        b.observe(Slot(3), d(650.0, false)); // limited by its plan: refutes only the 600
        assert_eq!(b.get(Slot(3), 1000.0), 875.0);
        b.observe(Slot(4), d(600.0, true));
        // 700 (slot 1) left the 4-slot window at slot 5.
        b.observe(Slot(5), d(600.0, true));
        assert_eq!(b.get(Slot(5), 1000.0), 750.0);
        b.observe(Slot(6), d(2000.0, true));
        assert_eq!(b.get(Slot(6), 1000.0), 1000.0);
        b.observe(Slot(7), d(f64::NAN, true));
        assert_eq!(b.get(Slot(7), 1000.0), 1000.0);
    }

    #[test]
    fn returns_to_capacity_when_the_path_stops_limiting() {
        let mut b = AchievableRate::new();
        b.observe(Slot(10), d(600.0, true));
        assert_eq!(b.get(Slot(13), 1000.0), 750.0);
        // No path-limited slot since slot 10: back to the path capacity at slot 14.
        assert_eq!(b.get(Slot(14), 1000.0), 1000.0);
    }

    #[test]
    fn a_slot_that_delivered_its_plan_refutes_slower_samples() {
        let mut b = AchievableRate::new();
        b.observe(Slot(1), d(600.0, true));
        assert_eq!(b.get(Slot(2), 1000.0), 750.0);
        // Planned at B_f = 750 and delivered it: the dip is over, back to the capacity now
        // rather than when the sample leaves the window.
        b.observe(Slot(2), d(700.0, false));
        assert_eq!(b.get(Slot(3), 1000.0), 1000.0);
    }

    #[test]
    fn never_starves_a_flow() {
        let mut b = AchievableRate::new();
        b.observe(Slot(1), d(0.0, true));
        assert_eq!(b.get(Slot(1), 1600.0), 1600.0, "a zero sample is ignored");
        b.observe(Slot(2), d(1.0, true));
        assert_eq!(
            b.get(Slot(2), 1600.0),
            800.0,
            "floored at half the capacity"
        );
    }
}
