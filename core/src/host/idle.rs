//! Idle flows ([`PolicyConfig::idle_books_nothing`]): a flow whose application has handed over
//! (almost) nothing that is still unacknowledged while its iteration is not over books nothing
//! — its bookings would only keep others off links it cannot use (measured on the testbed: a
//! PS server's broadcast booked two downlinks at line rate for seconds while it waited) — and
//! is paced at what its path has free, so bytes that arrive mid-slot leave at once.

use super::config::PolicyConfig;
use super::local::Local;
use super::obs::FlowObs;
use super::policy::Memory;
use crate::dependency::Dependency;
use crate::flow::FlowRole;

impl PolicyConfig {
    /// What `f`'s application holds, as far as the policy can tell: its count, or, without one
    /// and under [`PolicyConfig::quiet_is_idle`], nothing where every connection was quiet
    /// last slot; with one, nothing it can send where its library waits (`last`: what the
    /// rules remember of it from last slot; [`PolicyConfig::library_waits_idle`]).
    pub(super) fn known_backlog(&self, f: &FlowObs, last: &Memory) -> Option<f64> {
        let quiet = f.connections > 0 && f.quiet_connections >= f.connections;
        match f.app_backlog {
            Some(_) if self.library_waits_idle && self.library_waits(f, quiet, last) => Some(0.0),
            Some(b) => Some(b),
            None => (self.quiet_is_idle && quiet).then_some(0.0),
        }
    }

    /// Whether what `f`'s library holds waits inside it: last slot `f` could send (it was
    /// planned at least twice [`Self::idle_backlog_bytes`] in the slot, or was idle and paced
    /// into what was free), its connections stood still (quiet, or they moved less than
    /// `idle_backlog_bytes` — a library's control messages may still pass — and have less than
    /// that on the wire: a flow the path holds back has its window out), and the library's
    /// count did not grow (a bucket handed over during the slot has not had a slot to be
    /// written yet).
    fn library_waits(&self, f: &FlowObs, quiet: bool, last: &Memory) -> bool {
        let tau = self.slots.tau_secs();
        let little = |bytes: f64| bytes < self.idle_backlog_bytes;
        let could_send = last.last_rate * tau >= 2.0 * self.idle_backlog_bytes || last.last_idle;
        let moved_little = f.achieved.is_some_and(|a| little(a * tau));
        let stood_still = quiet || (moved_little && f.in_flight.is_some_and(little));
        let grew = match (f.app_backlog, last.last_backlog) {
            (Some(now), Some(before)) => now > before,
            _ => true,
        };
        could_send && stood_still && !grew
    }

    /// Whether a flow with `remaining_bytes` left in its iteration and `app_backlog` handed
    /// over but unacknowledged is idle.
    pub fn is_idle(&self, remaining_bytes: f64, app_backlog: Option<f64>) -> bool {
        self.idle_books_nothing
            && remaining_bytes > 0.0
            && app_backlog.is_some_and(|b| b < self.idle_backlog_bytes)
    }
}

/// Per flow, whether it is idle this slot (`memory`: what the rules remember of each flow): a
/// broadcast whose pushes will deliver it data during the slot is not
/// ([`PolicyConfig::project_upstream`]).
pub(super) fn flags(
    cfg: &PolicyConfig,
    flows: &[Local<'_>],
    memory: &[Memory],
    deps: &[Dependency],
) -> Vec<bool> {
    flows
        .iter()
        .zip(memory)
        .zip(deps)
        .map(|((f, last), dep)| {
            cfg.is_idle(f.remaining, cfg.known_backlog(f.obs, last))
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

    /// Steps `f` through a fresh policy, one slot per `(library's count, quiet connections,
    /// delivered)`, and says in which it was idle.
    fn idle_per_slot(cfg: PolicyConfig, f: &FlowObs, slots: &[(f64, usize, f64)]) -> Vec<bool> {
        let mut p = HostPolicy::new(cfg);
        let mut f = f.clone();
        let mut idle = Vec::new();
        for (n, &(backlog, quiet, achieved)) in slots.iter().enumerate() {
            f.app_backlog = Some(backlog);
            f.quiet_connections = quiet;
            f.achieved = Some(achieved);
            let out = p.step(Slot(1 + n as u64), std::slice::from_ref(&f));
            assert_eq!(out.flows[0].booking.is_withdraw(), out.flows[0].idle);
            idle.push(out.flows[0].idle);
        }
        idle
    }

    /// A ring step whose library was handed a 27 MB bucket but writes nothing (Gloo waits for
    /// the predecessor's chunk) books its link once, then is idle while it stands still.
    #[test]
    fn a_flow_whose_library_holds_its_bytes_but_sends_nothing_is_idle_until_it_moves() {
        let t = topo();
        let mut f = flow(&t, "torch", "h1", "h2", FlowRole::Ring, 27.0 * MB);
        f.connections = 1;
        let b = 27.0 * MB;
        // Handed over, quiet from the first slot on: booked once (nothing was known of the
        // slot before), then idle for as long as nothing moves, at any rate it was paced at.
        let waits = [(b, 1, 0.0); 4];
        assert_eq!(idle_per_slot(cfg(), &f, &waits), [false, true, true, true]);
        let off = without("library-waits");
        assert_eq!(idle_per_slot(off, &f, &waits), [false; 4]);
        // Control messages of a few kilobytes a slot, nothing on the wire, are standing still
        // too; a flow that moved as little with its window out is the path's to judge.
        let control = [(b, 0, 100e3); 3];
        f.in_flight = Some(1000.0);
        assert_eq!(idle_per_slot(cfg(), &f, &control), [false, true, true]);
        f.in_flight = Some(2.0 * MB);
        assert_eq!(idle_per_slot(cfg(), &f, &control), [false; 3]);
        f.in_flight = None;
        assert_eq!(idle_per_slot(cfg(), &f, &control), [false; 3]);
        // Once it moves it books again.
        let c = CAP / 2.0;
        let moves = [
            (b, 0, c),
            (b, 1, 0.0),
            (b - 1.5e6, 0, c),
            (b - 1.5e6, 1, 0.0),
        ];
        assert_eq!(idle_per_slot(cfg(), &f, &moves), [false, true, false, true]);
        // A count that grew while the connections stood still is a bucket handed over during
        // the slot: it has not had a slot to write it yet.
        let grows = [
            (0.0, 1, 0.0),
            (b, 1, 0.0),
            (b + 1e6, 1, 0.0),
            (b + 1e6, 1, 0.0),
        ];
        assert_eq!(idle_per_slot(cfg(), &f, &grows), [true, false, false, true]);
        // Planned too little to tell a standing library from a slow path: it books.
        let mut slow = f.clone();
        slow.links[0].capacity = 1e6;
        assert_eq!(idle_per_slot(cfg(), &slow, &waits[..2]), [false; 2]);
        // Without a count of what the library holds (a learned job), quiet-idle decides alone.
        let mut learned = f.clone();
        learned.app_backlog = None;
        learned.quiet_connections = 1;
        assert!(one(without("library-waits"), 1, &learned).idle);
    }

    /// Two jobs' ring steps share h1's uplink: `a`, ranked first, has its bucket in a library
    /// that waits for its predecessor; `b` has bytes it can send. Once `a` has stood still for a
    /// slot, `b` gets the link; without the rule `a` keeps it, and `b` trickles at its floor
    /// (the testbed's `torch-two-jobs` stall, one host of the cycle).
    #[test]
    fn a_waiting_library_gives_the_link_to_a_lower_ranked_flow_that_can_send() {
        let t = topo();
        let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 27.0 * MB);
        a.job_progress = job(100_000_000, 9, 10);
        a.app_backlog = Some(27.0 * MB);
        a.connections = 1;
        let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 28.0 * MB);
        b.job_progress = job(100_000_000, 0, 10);
        b.app_backlog = Some(28.0 * MB);
        b.connections = 1;
        let b_rate = |cfg: PolicyConfig| {
            let mut p = HostPolicy::new(cfg);
            let first = p.step(Slot(1), &[a.clone(), b.clone()]);
            assert!(first.flows[0].decision.rate > 0.9 * USABLE, "{first:?}");
            let (mut a, mut b) = (a.clone(), b.clone());
            (a.quiet_connections, a.achieved) = (1, Some(0.0));
            b.achieved = Some(first.flows[1].decision.rate.max(1e6));
            let second = p.step(Slot(2), &[a, b]);
            second.flows[1].decision.rate
        };
        assert!(b_rate(cfg()) > 0.9 * USABLE);
        assert!(b_rate(without("library-waits")) < 0.1 * USABLE);
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
