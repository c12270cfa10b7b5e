//! B_f: the rate a flow can actually achieve (DESIGN.md §8), BBR's max filter.
//!
//! Alg. 1 never plans above B_f, so a flow limited elsewhere (a slow receiver, a lossy path)
//! does not book bandwidth it cannot use. B_f is the largest delivery rate seen over the last W
//! slots in which the flow was backlogged, times a probe gain so it can discover more, capped by
//! the path capacity. Slots where the flow had nothing to send say nothing about the path and
//! are ignored.

use std::collections::VecDeque;

use serde::Serialize;

/// Slots the max filter remembers.
pub const WINDOW_SLOTS: usize = 4;
/// Head-room over the best delivery seen, so the estimate can grow.
pub const PROBE_GAIN: f64 = 1.25;

/// One slot's measurement of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Delivery {
    /// Bytes/s delivered (acked) during the slot.
    pub rate: f64,
    /// Whether the flow had data queued for the whole slot — only then does the delivery rate
    /// say what the path allows. A flow sending below its planned rate because the plan said
    /// so is *not* limited by the path: callers pass `backlogged = true` only if the flow sent
    /// at (or tried to send above) the rate it was given.
    pub backlogged: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AchievableRate {
    samples: VecDeque<f64>,
}

impl AchievableRate {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn observe(&mut self, d: Delivery) {
        if !d.backlogged || !d.rate.is_finite() || d.rate < 0.0 {
            return;
        }
        if self.samples.len() == WINDOW_SLOTS {
            self.samples.pop_front();
        }
        self.samples.push_back(d.rate);
    }

    /// B_f for a path whose bottleneck is `path_capacity` bytes/s; the path capacity until the
    /// flow has been measured.
    pub fn get(&self, path_capacity: f64) -> f64 {
        match self.samples.iter().copied().reduce(f64::max) {
            Some(m) => (m * PROBE_GAIN).min(path_capacity),
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
        assert_eq!(b.get(1000.0), 1000.0);
        b.observe(d(400.0, true));
        assert_eq!(b.get(1000.0), 500.0);
        b.observe(d(100.0, true));
        b.observe(d(200.0, false)); // ignored: not backlogged
        assert_eq!(b.get(1000.0), 500.0);
        for _ in 0..3 {
            b.observe(d(100.0, true));
        }
        // 400 left the 4-slot window.
        assert_eq!(b.get(1000.0), 125.0);
        b.observe(d(2000.0, true));
        assert_eq!(b.get(1000.0), 1000.0);
        b.observe(d(f64::NAN, true));
        assert_eq!(b.get(1000.0), 1000.0);
    }
}
