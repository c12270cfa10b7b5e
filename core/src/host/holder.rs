//! A sender that holds its bytes is not held back ([`PolicyConfig::holder_not_held_back`]):
//! Alg. 2 holds back a ring or broadcast flow that seems ahead of its upstream, but upstream
//! values are a slot stale, a sender that already holds the bytes cannot be ahead, and holding
//! it would only idle the link (measured on the testbed: PS replies waited two slots per
//! iteration).

use super::config::PolicyConfig;
use super::degraded::Degraded;
use super::obs::FlowObs;
use crate::dependency::Dependency;
use crate::flow::FlowRole;

/// Whether the sockets hold more unacknowledged data than a paced flow keeps in flight (cwnd
/// allows ~2 × rate × 1 ms plus bursts; 4 ms of the rate plus 256 KiB is above it).
pub(super) fn has_data_waiting(backlog: Option<f64>, last_rate: f64) -> bool {
    backlog.is_some_and(|b| b >= 256.0 * 1024.0 + last_rate * 0.004)
}

/// `dependency`, or none where the rule lets `f` go (noted in `degraded`): it holds data now,
/// and at last slot's rate (`last_rate`) Alg. 2 would hold it back.
pub(super) fn dependency(
    cfg: &PolicyConfig,
    f: &FlowObs,
    dependency: Dependency,
    last_rate: f64,
    degraded: &mut Vec<Degraded>,
) -> Dependency {
    if cfg.holder_not_held_back
        && has_data_waiting(f.app_backlog, last_rate)
        && matches!(f.role, FlowRole::Ring | FlowRole::Bcast)
        && dependency.reduction(f.sent_bytes + last_rate * cfg.slots.tau_secs()) > 0.0
    {
        degraded.push(Degraded::HolderNotHeldBack);
        return Dependency::None;
    }
    dependency
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn a_sender_that_holds_its_bytes_is_not_held_back_by_stale_upstream_progress() {
        let t = topo();
        let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
        f.slack_bytes = 1.0 * MB;
        let run = |cfg: PolicyConfig| {
            let mut p = HostPolicy::new(cfg);
            let mut f = f.clone();
            // The predecessor reported F = 0 for this iteration, every slot.
            f.upstream = vec![PeerProgress {
                sent: 0.0,
                finish: 0.0,
                iteration: 0,
                seen: Slot(1),
                reported_in: None,
                next_rate: 0.0,
            }];
            p.step(Slot(1), std::slice::from_ref(&f));
            f.sent_bytes = 1.0 * MB;
            f.upstream[0].seen = Slot(2);
            p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
        };
        let on = run(cfg());
        assert_eq!(on.decision.reduction, 0.0);
        assert!(on.degraded.contains(&Degraded::HolderNotHeldBack));
        assert!(on.decision.rate > 0.9 * CAP, "{}", on.decision.rate);
        let off = run(without("holder"));
        assert!(off.decision.reduction > 0.0);
        assert!(off.decision.rate < 0.5 * CAP, "{}", off.decision.rate);
    }
}
