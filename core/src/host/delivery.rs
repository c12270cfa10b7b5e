//! What B_f learns from last slot's delivery ([`PolicyConfig::delivery_samples`]):
//! under-delivery is the path's doing only if the sender had data waiting at both ends of the
//! slot, and at its start some of it on the wire. A ring step waiting for its predecessor or a
//! PS reply waiting for the pushes says nothing about the path; nor does a bucket Gloo holds
//! until its peer posts the receive, which the progress file already counts as handed over
//! (with nothing in flight, the application still had it; without a count, assume it was out).
//! Without a backlog count (a learned job: its counters are of bytes acked), the slot counts
//! only where the sockets had bytes on the wire at both its ends: a ring step that emptied
//! its window and waited for its predecessor had none at one end or the other, and that wait
//! says nothing about the path either.

use super::config::PolicyConfig;
use super::holder::has_data_waiting;
use super::obs::FlowObs;
use super::policy::Memory;
use crate::estimator::Delivery;

/// Last slot's delivery of `f` as B_f's filter takes it, or none; `last` holds last slot's
/// plan, backlog and bytes in flight.
pub(super) fn sample(cfg: &PolicyConfig, f: &FlowObs, last: &Memory) -> Option<Delivery> {
    let last_rate = last.last_rate;
    let ready = has_data_waiting(f.app_backlog, last_rate);
    let on_the_wire = |b: Option<f64>| b.is_none_or(|b| b > 0.0);
    let was_ready =
        has_data_waiting(last.last_backlog, last_rate) && on_the_wire(last.last_in_flight);
    let had_data = match f.app_backlog {
        Some(_) => ready && was_ready,
        None => on_the_wire(last.last_in_flight) && on_the_wire(f.in_flight),
    };
    f.achieved
        .filter(|_| cfg.delivery_samples)
        .map(|a| Delivery {
            rate: a,
            backlogged: last_rate > 0.0 && a < cfg.path_limited_share * last_rate && had_data,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn b_f_learns_from_a_slot_where_data_waited_at_both_ends_and_the_path_held_it() {
        let t = topo();
        let f = flow(&t, "p", "h1", "h3", FlowRole::Agg, 500.0 * MB);
        let run = |cfg: PolicyConfig| {
            let mut p = HostPolicy::new(cfg);
            p.step(Slot(1), std::slice::from_ref(&f));
            let mut f = f.clone();
            f.achieved = Some(0.3 * CAP);
            p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
        };
        // 0.3 × 1.25 is below the floor of half the path.
        assert_eq!(run(cfg()).decision.achievable, 0.5 * USABLE);
        assert_eq!(run(without("delivery-samples")).decision.achievable, USABLE);
        // Where the data did not wait (under a flow in flight's worth), the application, not the
        // path, held the flow back: the slot teaches B_f nothing.
        let mut unknown = f.clone();
        unknown.app_backlog = Some(0.5 * MB);
        let mut p = HostPolicy::new(cfg());
        p.step(Slot(1), std::slice::from_ref(&unknown));
        unknown.achieved = Some(0.3 * CAP);
        let d = p
            .step(Slot(2), std::slice::from_ref(&unknown))
            .flows
            .remove(0);
        assert_eq!(d.decision.achievable, USABLE);
    }

    #[test]
    fn a_slot_that_began_with_nothing_on_the_wire_teaches_b_f_nothing() {
        let t = topo();
        let f = flow(&t, "g", "h1", "h3", FlowRole::Ring, 20.0 * MB);
        let run = |in_flight: Option<f64>| {
            let mut p = HostPolicy::new(cfg());
            let mut f = f.clone();
            f.in_flight = in_flight;
            p.step(Slot(1), std::slice::from_ref(&f));
            f.achieved = Some(0.3 * CAP);
            p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
        };
        // A bucket handed over but held by the library (its peer not ready): the slot began
        // with nothing in flight, and its slow start says nothing about the path.
        assert_eq!(run(Some(0.0)).decision.achievable, USABLE);
        // On the wire at the start and still slow: the path held it.
        assert_eq!(run(Some(64.0 * 1024.0)).decision.achievable, 0.5 * USABLE);
        assert_eq!(run(None).decision.achievable, 0.5 * USABLE);
    }

    #[test]
    fn without_a_backlog_count_a_slot_teaches_b_f_only_with_bytes_on_the_wire_at_both_ends() {
        let t = topo();
        let mut f = flow(&t, "learned", "h1", "h3", FlowRole::Ring, 20.0 * MB);
        f.app_backlog = None;
        let run = |before: Option<f64>, after: Option<f64>| {
            let mut p = HostPolicy::new(cfg());
            let mut f = f.clone();
            f.in_flight = before;
            p.step(Slot(1), std::slice::from_ref(&f));
            f.achieved = Some(0.3 * CAP);
            f.in_flight = after;
            p.step(Slot(2), std::slice::from_ref(&f)).flows.remove(0)
        };
        let window = Some(64.0 * 1024.0);
        // Sending all slot long and still slow: the path held it.
        assert_eq!(run(window, window).decision.achievable, 0.5 * USABLE);
        // Its window empty at the start or at the end: it waited for data part of the slot.
        assert_eq!(run(Some(0.0), window).decision.achievable, USABLE);
        assert_eq!(run(window, Some(0.0)).decision.achievable, USABLE);
        // Nothing known of the sockets either: assume the path, as before.
        assert_eq!(run(None, None).decision.achievable, 0.5 * USABLE);
    }
}
