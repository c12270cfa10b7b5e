//! Peers' progress (the RPC form of the paper's ACK piggyback) and the Alg. 2 dependency it
//! gives a flow.

use serde::Serialize;

use super::config::PolicyConfig;
use super::idle;
use super::local::Local;
use crate::dependency::Dependency;
use crate::flow::FlowRole;
use crate::slot::Slot;

/// Progress of another host's flow, as its daemon reported it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PeerProgress {
    /// S: bytes sent in its iteration.
    pub sent: f64,
    /// F = S + r·τ: where it will be at the end of the slot it reported from.
    pub finish: f64,
    pub iteration: u64,
    /// The slot the report arrived in.
    pub seen: Slot,
    /// The slot the report was made in (F is where the flow will be at its end), where the
    /// reporter said; else the slot it arrived in stands for it.
    pub reported_in: Option<Slot>,
    /// The rate the flow booked for the slot after the one it reported from (bytes/s; 0 where
    /// the reporter did not say): with it, a report one slot old still tells where the flow
    /// will be at the end of the slot being planned.
    pub next_rate: f64,
}

impl PeerProgress {
    /// Where the flow will be at the end of slot `slot`, as far as the report tells: F, moved
    /// on by the next slot's booking (over a slot of `project` seconds) when the report is
    /// from the slot before; F alone without `project`.
    pub fn expected_at_end_of(&self, slot: Slot, project: Option<f64>) -> f64 {
        let from = self.reported_in.unwrap_or(self.seen);
        match project {
            Some(tau) if slot.since(from) == Some(1) && self.next_rate.is_finite() => {
                self.finish + self.next_rate.max(0.0) * tau
            }
            _ => self.finish,
        }
    }
}

/// Alg. 2's dependency of each flow at `slot`, from its peers' reports; with
/// [`PolicyConfig::project_upstream`], a broadcast's is where its aggregation will be at the
/// end of this slot.
pub(super) fn dependencies(cfg: &PolicyConfig, slot: Slot, flows: &[Local<'_>]) -> Vec<Dependency> {
    let tau = cfg.slots.tau_secs();
    flows
        .iter()
        .map(|f| {
            dependency(
                f.obs.role,
                f.obs.iteration,
                f.obs.slack_bytes,
                &f.obs.upstream,
                slot,
                cfg.peer_stale_slots,
                idle::projects(cfg, f).then_some(tau),
            )
        })
        .collect()
}

/// The dependency of a flow of `role` in `iteration` at `slot`, from the reports of the flows
/// it depends on: only reports of the same iteration that are at most `stale_slots` old count
/// (an older one speaks of a past the flow has left). No report: no dependency.
fn dependency(
    role: FlowRole,
    iteration: u64,
    slack_bytes: f64,
    upstream: &[PeerProgress],
    slot: Slot,
    stale_slots: u64,
    // Some(τ): judge reports by where their flows will be at the end of `slot`.
    project: Option<f64>,
) -> Dependency {
    let values: Vec<f64> = upstream
        .iter()
        .filter(|p| {
            p.iteration == iteration && slot.since(p.seen).is_some_and(|d| d <= stale_slots)
        })
        .map(|p| p.expected_at_end_of(slot, project))
        .collect();
    if values.is_empty() {
        return Dependency::None;
    }
    match role {
        FlowRole::Ring => Dependency::Ring {
            predecessor_progress: values.iter().copied().fold(f64::INFINITY, f64::min),
            slack_bytes,
        },
        FlowRole::Agg => Dependency::Aggregation {
            broadcast_progress: values,
        },
        FlowRole::Bcast => Dependency::Broadcast {
            aggregation_progress: values,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    fn p(finish: f64, iteration: u64, seen: u64) -> PeerProgress {
        PeerProgress {
            sent: 0.0,
            finish,
            iteration,
            seen: Slot(seen),
            reported_in: None,
            next_rate: 0.0,
        }
    }

    #[test]
    fn a_report_from_the_slot_before_is_moved_on_by_its_next_booking() {
        let mut r = p(10.0, 3, 9);
        r.next_rate = 100.0;
        assert_eq!(r.expected_at_end_of(Slot(10), Some(0.5)), 60.0);
        assert_eq!(r.expected_at_end_of(Slot(10), None), 10.0);
        // Older, or already of this slot: F as reported.
        assert_eq!(r.expected_at_end_of(Slot(11), Some(0.5)), 10.0);
        r.reported_in = Some(Slot(10));
        assert_eq!(r.expected_at_end_of(Slot(10), Some(0.5)), 10.0);
        r.next_rate = f64::NAN;
        r.reported_in = None;
        assert_eq!(r.expected_at_end_of(Slot(10), Some(0.5)), 10.0);
    }

    #[test]
    fn only_fresh_reports_of_the_same_iteration_count() {
        let up = [p(10.0, 3, 9), p(20.0, 3, 7), p(30.0, 2, 10)];
        // At slot 10 with 2 slots of tolerance: the report seen in slot 7 is stale and the one
        // of iteration 2 is of the past.
        assert_eq!(
            dependency(FlowRole::Bcast, 3, 0.0, &up, Slot(10), 2, None),
            Dependency::Broadcast {
                aggregation_progress: vec![10.0]
            }
        );
        assert_eq!(
            dependency(FlowRole::Ring, 3, 5.0, &up, Slot(10), 3, None),
            Dependency::Ring {
                predecessor_progress: 10.0,
                slack_bytes: 5.0
            }
        );
        assert_eq!(
            dependency(FlowRole::Agg, 4, 0.0, &up, Slot(10), 2, None),
            Dependency::None
        );
    }

    #[test]
    fn peer_progress_counts_only_while_fresh_and_of_the_same_iteration() {
        let t = topo();
        let mut f = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
        f.app_backlog = None;
        let report = |iteration, seen| PeerProgress {
            sent: 0.0,
            finish: 0.0,
            iteration,
            seen: Slot(seen),
            reported_in: None,
            next_rate: 0.0,
        };
        for (up, held) in [
            (report(0, 9), true),
            (report(0, 8), true),
            (report(0, 7), false), // 3 slots old
            (report(1, 9), false), // of another iteration
        ] {
            f.upstream = vec![up];
            let d = one(cfg(), 10, &f).decision;
            assert_eq!(d.reduction > 0.0, held, "{up:?}");
        }
    }

    #[test]
    fn a_broadcast_whose_pushes_arrive_this_slot_books_them_ahead_of_a_lower_ranked_local_flow() {
        let t = topo();
        // A PS server on h3: its broadcast holds nothing yet, but the worker's push into it
        // reported last slot that it books half a link for this one.
        let mut b = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
        b.app_backlog = Some(0.0);
        b.job_progress = job(100_000_000, 0, 1);
        b.upstream = vec![PeerProgress {
            sent: 0.0,
            finish: 0.0,
            iteration: 0,
            seen: Slot(9),
            reported_in: Some(Slot(9)),
            next_rate: 0.5 * CAP,
        }];
        // A larger job's ring flow from the same host, with data waiting.
        let mut r = flow(&t, "big", "h3", "h2", FlowRole::Ring, 500.0 * MB);
        r.job_progress = job(100_000_000, 0, 100);
        let run = |cfg: PolicyConfig| {
            let cfg = PolicyConfig {
                mode: FeedbackMode::Precedence,
                ..cfg
            };
            HostPolicy::new(cfg)
                .step(Slot(10), &[b.clone(), r.clone()])
                .flows
        };
        let on = run(cfg());
        assert!(!on[0].idle);
        // It books what will arrive (Alg. 2 holds it to the push's projected progress) ...
        assert!(
            (on[0].decision.rate - 0.5 * CAP).abs() < 0.01 * CAP,
            "{}",
            on[0].decision.rate
        );
        assert!(!on[0].booking.is_withdraw());
        // ... and the ring flow plans around it.
        assert!(
            on[1].decision.rate <= 0.5 * CAP + 1.0,
            "{}",
            on[1].decision.rate
        );
        let off = run(without("project-upstream"));
        assert!(off[0].idle);
        assert!(off[0].booking.is_withdraw());
        assert!(
            off[1].decision.rate > 0.99 * CAP,
            "{}",
            off[1].decision.rate
        );
        // A report two slots old is not moved on: nothing is known of the slot in between.
        let mut stale = b.clone();
        stale.upstream[0].reported_in = Some(Slot(8));
        let out = HostPolicy::new(cfg()).step(Slot(10), &[stale]).flows;
        assert!(out[0].idle);
    }
}
