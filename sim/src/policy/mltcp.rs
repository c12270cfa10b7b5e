//! `mltcp`: MLTCP (Rajasekaran et al., HotNets'24, arXiv 2402.09589) as a fluid model. MLTCP
//! scales each flow's congestion-window increase by F(r) = SLOPE · r + INTERCEPT, where r is
//! the share of its iteration's bytes the flow has already sent; flows that share a bottleneck
//! then get bandwidth in the ratio of their F (the MLTCP shift equation's premise), so the job
//! further into its communication phase finishes first and co-located jobs drift into an
//! interleaved schedule over a few iterations. Here: weighted max-min each slot with weight
//! F(r) at the slot's start, everything else as `fair` (what the Reno/CUBIC underneath would
//! converge to with equal weights).

use super::fair::Fair;
use super::{Policy, View};

/// F(r) = SLOPE · r + INTERCEPT. The paper's text gives the form, not the constants; these are
/// our choice: a flow about to finish gets 8× the share of one just starting (F from 0.25 to
/// 2), enough for the shift to converge within a few iterations, never starving a newcomer.
/// The testbed's BPF CC uses the same (`mlcc_bpf::mltcp`); a test in mlcc-testbed
/// (`mltcp_constants_agree_between_the_simulator_and_the_bpf_cc`) fails if they part.
pub const SLOPE: f64 = 1.75;
pub const INTERCEPT: f64 = 0.25;

/// MLTCP's bandwidth aggressiveness for a flow that has sent `sent` of `bytes` this iteration.
pub fn aggressiveness(sent: f64, bytes: f64) -> f64 {
    let r = if bytes > 0.0 {
        (sent / bytes).clamp(0.0, 1.0)
    } else {
        0.0
    };
    SLOPE * r + INTERCEPT
}

#[derive(Default)]
pub struct Mltcp {
    fair: Fair,
    weight: Vec<f64>,
    capacity: Vec<f64>,
}

impl Policy for Mltcp {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.weight.clear();
        self.weight.extend(view.active.iter().map(|&r| {
            let f = view.flow(r);
            aggressiveness(f.sent, f.bytes)
        }));
        if self.capacity.len() != view.topo.links().len() {
            self.capacity = view.topo.links().iter().map(|l| l.capacity.0).collect();
        }
        self.fair
            .solve_weighted(view, None, Some(&self.weight), &self.capacity, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggressiveness_grows_with_the_share_sent_and_stays_bounded() {
        assert_eq!(aggressiveness(0.0, 100.0), INTERCEPT);
        assert_eq!(aggressiveness(100.0, 100.0), SLOPE + INTERCEPT);
        assert!(aggressiveness(30.0, 100.0) < aggressiveness(60.0, 100.0));
        // Overshoot and empty iterations stay in range.
        assert_eq!(aggressiveness(150.0, 100.0), SLOPE + INTERCEPT);
        assert_eq!(aggressiveness(5.0, 0.0), INTERCEPT);
    }
}
