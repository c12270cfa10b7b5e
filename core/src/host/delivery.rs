//! What B_f learns from last slot's delivery ([`PolicyConfig::delivery_samples`]):
//! under-delivery is the path's doing only if the sender had data waiting at both ends of the
//! slot. A ring step waiting for its predecessor or a PS reply waiting for the pushes says
//! nothing about the path (without a backlog count, assume it had data).

use super::config::PolicyConfig;
use super::holder::has_data_waiting;
use super::obs::FlowObs;
use crate::estimator::Delivery;

/// Last slot's delivery of `f` as B_f's filter takes it, or none; `last_rate` and
/// `last_backlog` are last slot's plan and backlog.
pub(super) fn sample(
    cfg: &PolicyConfig,
    f: &FlowObs,
    last_rate: f64,
    last_backlog: Option<f64>,
) -> Option<Delivery> {
    let ready = has_data_waiting(f.app_backlog, last_rate);
    let was_ready = has_data_waiting(last_backlog, last_rate);
    f.achieved
        .filter(|_| cfg.delivery_samples)
        .map(|a| Delivery {
            rate: a,
            backlogged: last_rate > 0.0
                && a < cfg.path_limited_share * last_rate
                && (f.app_backlog.is_none() || (ready && was_ready)),
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
}
