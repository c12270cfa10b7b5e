//! What each link of a flow's path offers its plan this slot: the owning switch's answer (or
//! its silence), the load lower-ranked flows already committed in slot n
//! ([`PolicyConfig::committed_now`]), and the capacity less the headroom the rate floors of
//! held-back flows take ([`PolicyConfig::link_headroom`]).

use super::config::PolicyConfig;
use super::degraded::Degraded;
use super::obs::{Answer, FlowObs, LinkObs};
use crate::load_table::FeedbackMode;
use crate::planner::LinkFeedback;

/// The share of a link's capacity a plan may fill: what the rate floors of held-back flows,
/// which nobody books, leave.
fn usable_share(cfg: &PolicyConfig) -> f64 {
    1.0 - cfg.link_headroom.clamp(0.0, 1.0)
}

/// The path of `f` as its plan sees it, noting in `degraded` the links planned as unbooked
/// because their switch was silent or gave no load.
pub(super) fn path(
    cfg: &PolicyConfig,
    f: &FlowObs,
    degraded: &mut Vec<Degraded>,
) -> Vec<LinkFeedback> {
    let share = usable_share(cfg);
    f.links
        .iter()
        .map(|l| LinkFeedback {
            link: l.link,
            capacity: l.reported_capacity.unwrap_or(l.capacity) * share,
            load: load(cfg, l, degraded),
        })
        .collect()
}

/// What others booked on `l` for slots n..n+K, with slot n's committed load where it counts.
fn load(cfg: &PolicyConfig, l: &LinkObs, degraded: &mut Vec<Degraded>) -> Vec<f64> {
    let mut load = match &l.answer {
        Answer::Load(v) => v.clone(),
        Answer::Unasked => Vec::new(),
        Answer::Silent { switch } => {
            degraded.push(Degraded::SwitchSilent { switch: *switch });
            Vec::new()
        }
        Answer::Missing { switch } => {
            degraded.push(Degraded::FeedbackMissing {
                switch: *switch,
                link: l.link,
            });
            Vec::new()
        }
    };
    if cfg.committed_now
        && cfg.mode == FeedbackMode::Precedence
        && let Some(c) = l.committed_now.filter(|c| c.is_finite() && *c > 0.0)
    {
        if load.is_empty() {
            load.resize(cfg.slots.horizon(), 0.0);
        }
        load[0] = load[0].max(0.0) + c;
    }
    load
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn plans_leave_the_rate_floors_of_held_back_flows_room_on_a_full_link() {
        let t = topo();
        // A flow that could fill its path, and one of another job held back behind it on the
        // same uplink (its downlink fully booked by others): it still sends at the floor.
        let big = flow(&t, "a", "h1", "h2", FlowRole::Agg, 50.0 * MB);
        let mut held = flow(&t, "b", "h1", "h3", FlowRole::Agg, 50.0 * MB);
        held.iteration_start = Slot(200); // ranked after `big`
        held.links[1].answer = Answer::Load(vec![CAP; 10]);
        let floor = 125_000.0;
        let run =
            |cfg: PolicyConfig| HostPolicy::new(cfg).step(Slot(1), &[big.clone(), held.clone()]);
        // The rate floor alone: a warm flow sends more, by design unbooked too.
        let cold = without("warm-held")
            .with_rule("warm-resume", false)
            .unwrap();
        let on = run(cold);
        assert_eq!(on.flows[1].decision.rate, 0.0);
        assert_eq!(paced(on.flows[1].enforce), floor);
        // What both send fits the uplink, so neither is squeezed below its plan.
        let sent = on.flows[0].decision.rate + floor;
        assert!(sent <= CAP, "{sent}");
        assert!((on.flows[0].decision.rate - USABLE).abs() < 1.0);
        // Without the headroom the plan fills the link and the floor overbooks it.
        let off = run(cold.with_rule("headroom", false).unwrap());
        assert_eq!(off.flows[0].decision.rate, CAP);
        assert!(off.flows[0].decision.rate + paced(off.flows[1].enforce) > CAP);
    }

    #[test]
    fn slot_n_is_planned_around_what_lower_ranked_flows_committed_in_it() {
        let t = topo();
        // More than the horizon carries: Alg. 1 fills every slot with what it may.
        let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 200.0 * MB);
        f.links[1].committed_now = Some(0.6 * CAP);
        let with = PolicyConfig {
            committed_now: true,
            mode: FeedbackMode::Precedence,
            ..cfg()
        };
        assert!((one(with, 1, &f).decision.rate - (USABLE - 0.6 * CAP)).abs() < 1.0);
        let without = PolicyConfig {
            committed_now: false,
            ..with
        };
        assert_eq!(one(without, 1, &f).decision.rate, USABLE);
    }
}
