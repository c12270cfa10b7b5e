//! Dependencies: which flows a flow depends on, and the dependency-aware rate of the current
//! slot, the paper's Algorithm 2 (docs/design.md §8).
//!
//! Every flow's progress is `F = S + r·τ`: bytes it will have sent by the end of this slot if it
//! runs at its planned rate. A flow that lags the flows feeding it (its *upstream*) speeds up by
//! the gap; a flow that runs ahead of what it can have received slows down by the gap, which
//! frees bandwidth for co-located jobs in the same slot.

use serde::{Deserialize, Serialize};

use crate::flow::{FlowParts, FlowRole};

/// Whether `down` follows `up`'s progress in Alg. 2: within one job, a PS push follows the
/// broadcasts leaving the server it feeds, a broadcast the pushes into the server it leaves,
/// and a ring flow the ring flows into its sender. The job model ([`crate::job`]) names a
/// flow's upstream by it, and mlccd picks its peers' reports by it.
pub fn follows(down: &FlowParts<'_>, up: &FlowParts<'_>) -> bool {
    down.job == up.job
        && match down.role {
            FlowRole::Agg => up.role == FlowRole::Bcast && up.src == down.dst,
            FlowRole::Bcast => up.role == FlowRole::Agg && up.dst == down.src,
            FlowRole::Ring => up.role == FlowRole::Ring && up.dst == down.src,
        }
}

/// Of `candidates`, the flows Alg. 2 reads for `down`: those it [`follows`], except that a ring
/// flow's predecessors from its own receiver are dropped while another predecessor is there.
/// In a ring of more than two hosts the flow into a sender never comes from that sender's
/// successor; a library that sends both ways over one connection per pair of ranks (Gloo,
/// docs/design.md §5) makes such a flow anyway, carrying next to nothing, and followed it held
/// its ring back to one chunk ahead of nothing. In a ring of two it is the only predecessor.
pub fn upstream<'a, T>(
    down: &FlowParts<'_>,
    candidates: impl IntoIterator<Item = (FlowParts<'a>, T)>,
) -> Vec<T> {
    let (from_receiver, others): (Vec<_>, Vec<_>) = candidates
        .into_iter()
        .filter(|(up, _)| follows(down, up))
        .partition(|(up, _)| down.role == FlowRole::Ring && up.src == down.dst);
    let chosen = if others.is_empty() {
        from_receiver
    } else {
        others
    };
    chosen.into_iter().map(|(_, t)| t).collect()
}

/// The dependency rule of one flow, with the latest progress values of the flows it depends on
/// (from peers, one slot stale as in the real system).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Dependency {
    /// No dependency known (e.g. a peer that did not answer): plan with Alg. 1 only.
    #[default]
    None,
    /// PS aggregation flow (worker → PS p): keep up with p's fastest broadcast flow.
    Aggregation { broadcast_progress: Vec<f64> },
    /// PS broadcast flow (PS p → worker): follow p's slowest aggregation flow — never ahead of
    /// it (nothing to broadcast yet), never needlessly behind.
    Broadcast { aggregation_progress: Vec<f64> },
    /// Ring flow: follow the predecessor flow into this flow's sender, ahead of it by at most
    /// `slack_bytes` (one chunk: each worker sends its own chunk first, so without slack the
    /// ring deadlocks).
    Ring {
        predecessor_progress: f64,
        slack_bytes: f64,
    },
}

impl Dependency {
    /// The upstream progress this flow should reach, if any value is known.
    pub fn target(&self) -> Option<f64> {
        fn finite(v: &[f64]) -> impl Iterator<Item = f64> + '_ {
            v.iter().copied().filter(|x| x.is_finite())
        }
        match self {
            Dependency::None => None,
            Dependency::Aggregation { broadcast_progress } => {
                finite(broadcast_progress).reduce(f64::max)
            }
            Dependency::Broadcast {
                aggregation_progress,
            } => finite(aggregation_progress).reduce(f64::min),
            Dependency::Ring {
                predecessor_progress,
                ..
            } => predecessor_progress
                .is_finite()
                .then_some(*predecessor_progress),
        }
    }

    /// Δ: bytes this flow lags its upstream by, `(target − F)⁺`.
    pub fn boost(&self, progress: f64) -> f64 {
        self.target().map_or(0.0, |t| (t - progress).max(0.0))
    }

    /// Bytes this flow runs ahead of what it can have received: `(F − target − slack)⁺`.
    /// Aggregation flows carry the worker's own gradients and are never held back.
    pub fn reduction(&self, progress: f64) -> f64 {
        let slack = match self {
            Dependency::None | Dependency::Aggregation { .. } => return 0.0,
            Dependency::Broadcast { .. } => 0.0,
            Dependency::Ring { slack_bytes, .. } => slack_bytes.max(0.0),
        };
        self.target()
            .map_or(0.0, |t| (progress - t - slack).max(0.0))
    }
}

/// The outcome of Alg. 2 for one flow in one slot.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Adjusted {
    /// Bytes/s to send in the current slot.
    pub rate: f64,
    /// Δ applied (bytes), 0 when the flow was not behind.
    pub boost: f64,
    /// Bytes the flow was held back by, 0 when it was not ahead.
    pub reduction: f64,
}

/// Applies Alg. 2 to a flow whose Alg. 1 rate for this slot is `planned`, which has sent `sent`
/// bytes this iteration, may send at most `cap` bytes/s this slot (A(0): residual capacity
/// and achievable rate), and has `remaining` bytes left.
pub fn adjust(
    dep: &Dependency,
    sent: f64,
    planned: f64,
    cap: f64,
    remaining: f64,
    tau_secs: f64,
) -> Adjusted {
    let progress = sent + planned * tau_secs;
    let boost = dep.boost(progress);
    let reduction = dep.reduction(progress);
    let mut rate = planned;
    if boost > 0.0 {
        // docs/design.md caps the boosted rate by B_f; we cap by A(0) ≤ B_f so that catching up
        // never books a link beyond what others left free.
        rate = (planned + boost / tau_secs).min(cap.max(planned));
    }
    if reduction > 0.0 {
        rate = (rate - reduction / tau_secs).max(0.0);
    }
    // Never more than what is left to send.
    rate = rate.min(remaining.max(0.0) / tau_secs).max(0.0);
    Adjusted {
        rate,
        boost,
        reduction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAU: f64 = 0.1;

    fn parts(id: &str) -> FlowParts<'_> {
        FlowParts::parse(id).unwrap()
    }

    #[test]
    fn a_ring_flow_follows_the_flow_into_its_sender_not_back_from_its_receiver() {
        let ids = [
            "j/h2>h1/ring",
            "j/h3>h2/ring",
            "j/h1>h3/ring",
            "j/h1>h2/ring",
        ];
        let all = || ids.iter().map(|id| (parts(id), *id));
        // Gloo's rank 0 on h1 sends to rank 2 on h3 and receives from rank 1 on h2, over its
        // two pair connections: the one to h2 makes a flow h1>h2 that carries nothing.
        assert_eq!(upstream(&parts("j/h1>h3/ring"), all()), ["j/h2>h1/ring"]);
        // h2>h1 follows the flows into h2: h3>h2, not h1>h2 from its own receiver.
        assert_eq!(upstream(&parts("j/h2>h1/ring"), all()), ["j/h3>h2/ring"]);
        // A ring of two: the flow back from the receiver is the predecessor.
        let two = ["k/a>b/ring", "k/b>a/ring"];
        let two = two.iter().map(|id| (parts(id), *id));
        assert_eq!(upstream(&parts("k/a>b/ring"), two), ["k/b>a/ring"]);
        // PS flows are untouched: a push follows the broadcasts leaving its server.
        let ps = ["p/s>w/bcast", "p/w>s/agg", "p/s>x/bcast"];
        let ps = ps.iter().map(|id| (parts(id), *id));
        assert_eq!(
            upstream(&parts("p/w>s/agg"), ps),
            ["p/s>w/bcast", "p/s>x/bcast"]
        );
    }

    #[test]
    fn ring_flow_behind_its_predecessor_speeds_up_to_the_cap() {
        // F = 100 + 100·0.1 = 110; predecessor at 150 → Δ = 40 bytes → +400 B/s, capped at 300.
        let dep = Dependency::Ring {
            predecessor_progress: 150.0,
            slack_bytes: 20.0,
        };
        let a = adjust(&dep, 100.0, 100.0, 300.0, 1e9, TAU);
        assert_eq!(a.boost, 40.0);
        assert_eq!(a.rate, 300.0);
        // With room it takes exactly r + Δ/τ.
        let a = adjust(&dep, 100.0, 100.0, 1000.0, 1e9, TAU);
        assert!((a.rate - 500.0).abs() < 1e-9);
    }

    #[test]
    fn ring_flow_ahead_of_slow_predecessor_slows_down_beyond_slack() {
        // Predecessor slow: F_q = 50. F = 100 + 100·0.1 = 110. Slack 20 → reduce by 40 bytes
        // → 400 B/s off a 100 B/s plan → 0.
        let dep = Dependency::Ring {
            predecessor_progress: 50.0,
            slack_bytes: 20.0,
        };
        let a = adjust(&dep, 100.0, 100.0, 1000.0, 1e9, TAU);
        assert_eq!(a.reduction, 40.0);
        assert_eq!(a.rate, 0.0);
        // Within slack nothing happens.
        let dep = Dependency::Ring {
            predecessor_progress: 95.0,
            slack_bytes: 20.0,
        };
        let a = adjust(&dep, 100.0, 100.0, 1000.0, 1e9, TAU);
        assert_eq!((a.boost, a.reduction, a.rate), (0.0, 0.0, 100.0));
    }

    #[test]
    fn ps_broadcast_running_ahead_is_held_to_slowest_aggregation() {
        // Broadcast F = 0 + 1000·0.1 = 100; aggregations at 60 and 80 → min 60 → hold back 40
        // bytes = 400 B/s.
        let dep = Dependency::Broadcast {
            aggregation_progress: vec![80.0, 60.0],
        };
        let a = adjust(&dep, 0.0, 1000.0, 1000.0, 1e9, TAU);
        assert_eq!(a.reduction, 40.0);
        assert!((a.rate - 600.0).abs() < 1e-9);
        // Broadcast behind the slowest aggregation catches up.
        let a = adjust(&dep, 0.0, 100.0, 1000.0, 1e9, TAU);
        assert!((a.boost - 50.0).abs() < 1e-9);
        assert!((a.rate - 600.0).abs() < 1e-9);
    }

    #[test]
    fn ps_aggregation_follows_fastest_broadcast_and_is_never_held() {
        let dep = Dependency::Aggregation {
            broadcast_progress: vec![10.0, 30.0],
        };
        let a = adjust(&dep, 0.0, 100.0, 1000.0, 1e9, TAU);
        assert_eq!((a.boost, a.reduction, a.rate), (20.0, 0.0, 300.0));
        let a = adjust(&dep, 100.0, 100.0, 1000.0, 1e9, TAU);
        assert_eq!((a.boost, a.reduction, a.rate), (0.0, 0.0, 100.0));
    }

    #[test]
    fn unknown_upstream_changes_nothing_and_nan_is_ignored() {
        let a = adjust(&Dependency::None, 0.0, 100.0, 1000.0, 1e9, TAU);
        assert_eq!(a.rate, 100.0);
        let dep = Dependency::Broadcast {
            aggregation_progress: vec![f64::NAN],
        };
        assert_eq!(dep.target(), None);
        assert_eq!(adjust(&dep, 0.0, 100.0, 1000.0, 1e9, TAU).rate, 100.0);
    }

    #[test]
    fn never_sends_more_than_remains() {
        let dep = Dependency::Ring {
            predecessor_progress: 1e6,
            slack_bytes: 0.0,
        };
        let a = adjust(&dep, 0.0, 100.0, 1e9, 30.0, TAU);
        assert!((a.rate - 300.0).abs() < 1e-9);
    }
}
