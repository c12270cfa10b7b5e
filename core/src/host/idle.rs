//! Idle flows ([`PolicyConfig::idle_books_nothing`]): a flow whose application has handed over
//! (almost) nothing that is still unacknowledged while its iteration is not over books nothing
//! — its bookings would only keep others off links it cannot use (measured on the testbed: a
//! PS server's broadcast booked two downlinks at line rate for seconds while it waited) — and
//! is paced at what its path has free, so bytes that arrive mid-slot leave at once.

use super::config::PolicyConfig;
use super::local::Local;
use super::obs::FlowObs;
use crate::dependency::Dependency;
use crate::flow::FlowRole;

impl PolicyConfig {
    /// What `f`'s application holds, as far as the policy can tell: its count, or, without one
    /// and under [`PolicyConfig::quiet_is_idle`], nothing where every connection was quiet
    /// last slot.
    pub(super) fn known_backlog(&self, f: &FlowObs) -> Option<f64> {
        let quiet = f.connections > 0 && f.quiet_connections >= f.connections;
        f.app_backlog
            .or_else(|| (self.quiet_is_idle && quiet).then_some(0.0))
    }

    /// Whether a flow with `remaining_bytes` left in its iteration and `app_backlog` handed
    /// over but unacknowledged is idle.
    pub fn is_idle(&self, remaining_bytes: f64, app_backlog: Option<f64>) -> bool {
        self.idle_books_nothing
            && remaining_bytes > 0.0
            && app_backlog.is_some_and(|b| b < self.idle_backlog_bytes)
    }
}

/// Per flow, whether it is idle this slot: a broadcast whose pushes will deliver it data during
/// the slot is not ([`PolicyConfig::project_upstream`]).
pub(super) fn flags(cfg: &PolicyConfig, flows: &[Local<'_>], deps: &[Dependency]) -> Vec<bool> {
    flows
        .iter()
        .zip(deps)
        .map(|(f, dep)| {
            cfg.is_idle(f.remaining, cfg.known_backlog(f.obs))
                && !(projects(cfg, f) && expects_data(f, dep, cfg.idle_backlog_bytes))
        })
        .collect()
}

/// Whether `f`'s dependency is judged by where its upstream will be at the end of this slot.
pub(super) fn projects(cfg: &PolicyConfig, f: &Local<'_>) -> bool {
    cfg.project_upstream && f.obs.role == FlowRole::Bcast
}

/// Whether a broadcast flow's aggregation (`dep`, its Alg. 2 dependency) will have delivered
/// it, by the end of this slot, at least `idle_backlog` bytes beyond what it has sent and
/// holds: data arrives during the slot, so the flow is not idle.
fn expects_data(f: &Local<'_>, dep: &Dependency, idle_backlog: f64) -> bool {
    let Some(target) = dep.target() else {
        return false;
    };
    let can_send = target.min(f.obs.sent_bytes + f.remaining);
    let held = f.obs.app_backlog.unwrap_or(0.0).max(0.0);
    can_send - f.obs.sent_bytes.max(0.0) - held >= idle_backlog
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn an_idle_flow_books_nothing_and_paces_into_what_is_free() {
        let t = topo();
        let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
        f.app_backlog = Some(10_000.0); // waiting for its predecessor
        let on = one(cfg(), 1, &f);
        assert!(on.idle);
        assert!(on.booking.is_withdraw(), "{:?}", on.booking);
        assert_eq!(paced(on.enforce), USABLE);
        let off = one(without("idle"), 1, &f);
        assert!(!off.idle);
        match &off.booking {
            Booking::Plan { rates, .. } => assert!(rates[0] > 0.0, "{rates:?}"),
            b => panic!("{b:?}"),
        }
    }

    #[test]
    fn without_a_backlog_count_a_flow_whose_connections_were_all_quiet_is_idle() {
        let t = topo();
        let mut f = flow(&t, "learned", "h1", "h2", FlowRole::Ring, 50.0 * MB);
        f.app_backlog = None;
        f.connections = 2;
        // One connection moved bytes last slot: it may hold more; it books.
        f.quiet_connections = 1;
        let busy = one(cfg(), 1, &f);
        assert!(!busy.idle);
        assert!(
            matches!(busy.booking, Booking::Plan { .. }),
            "{:?}",
            busy.booking
        );
        // Neither moved a byte at the rate floor: nothing to send, nothing booked.
        f.quiet_connections = 2;
        let quiet = one(cfg(), 1, &f);
        assert!(quiet.idle);
        assert!(quiet.booking.is_withdraw(), "{:?}", quiet.booking);
        assert_eq!(paced(quiet.enforce), USABLE);
        assert!(!one(without("quiet-idle"), 1, &f).idle);
        // A backlog count, where there is one, is what decides.
        f.app_backlog = Some(20.0 * MB);
        assert!(!one(cfg(), 1, &f).idle);
    }

    #[test]
    fn only_a_flow_with_bytes_left_and_little_handed_over_is_idle() {
        let c = cfg();
        assert!(c.is_idle(1.0, Some(0.0)));
        assert!(!c.is_idle(0.0, Some(0.0)), "done, not idle");
        assert!(!c.is_idle(1.0, Some(c.idle_backlog_bytes)));
        assert!(
            !c.is_idle(1.0, None),
            "no backlog count: assume it has data"
        );
        assert!(!without("idle").is_idle(1.0, Some(0.0)));
    }
}
