//! The slot's order for each flow: released to kernel TCP where a switch on its path is
//! skewed (its slots no longer line up with ours) or where it is done and not paced on standby;
//! in a fill class ([`super::fill`]) at its plan's rate or none; else paced at its plan (or at
//! what [`super::pace_free`] found free), never below the rate floor of its connections, kept
//! warm ([`PolicyConfig::warm_resume`], [`PolicyConfig::warm_held`]), and with a tail it holds
//! flushed at its path's rate ([`PolicyConfig::flush_tail`]).

use super::config::{Fill, PolicyConfig, WARM_MAX_PER_CONNECTION, WARM_SHARE};
use super::degraded::Degraded;
use super::key::finishes_in_a_slot;
use super::local::Local;
use super::out::Enforce;
use crate::planner::FlowDecision;

impl PolicyConfig {
    /// The lowest rate `connections` connections are ordered in all.
    pub(super) fn floor_of(&self, connections: usize) -> f64 {
        self.rate_floor_per_connection.max(0.0) * connections.max(1) as f64
    }
}

/// Whether a switch on each flow's path is skewed (noted in `notes`): its slots no longer
/// line up with ours.
pub(super) fn unsynced(flows: &[Local<'_>], notes: &mut [Vec<Degraded>]) -> Vec<bool> {
    let mut unsynced = vec![false; flows.len()];
    for (i, f) in flows.iter().enumerate() {
        for l in &f.obs.links {
            if let Some(switch) = l.unsynced_switch {
                unsynced[i] = true;
                notes[i].push(Degraded::ClockSkew { switch });
            }
        }
    }
    unsynced
}

/// Each flow's order: released where it is `unsynced`; in a fill class (`fill`), its plan's
/// rate with [`Fill::Excess`] and nothing guaranteed with [`Fill::Unbooked`]; else paced.
pub(super) fn orders(
    cfg: &PolicyConfig,
    flows: &[Local<'_>],
    decisions: &[FlowDecision],
    pace_at: &[Option<f64>],
    unsynced: &[bool],
    fill: &[Option<u8>],
) -> Vec<Enforce> {
    let per_flow = decisions.iter().zip(pace_at).zip(unsynced.iter().zip(fill));
    flows
        .iter()
        .zip(per_flow)
        .map(|(f, ((d, pace), (&unsynced, fill)))| {
            if unsynced {
                return Enforce::Release;
            }
            match (fill, cfg.fill) {
                (Some(_), Fill::Excess) => Enforce::Pace(d.rate.max(0.0)),
                (Some(_), _) => Enforce::Pace(0.0),
                (None, _) if d.done && pace.is_none() => Enforce::Release,
                (None, _) => Enforce::Pace(pace_rate(cfg, f, d, *pace)),
            }
        })
        .collect()
}

/// The rate `f` is paced at: its plan's (`d`) or `pace`, raised by the floor, warmth and tail
/// rules.
fn pace_rate(cfg: &PolicyConfig, f: &Local<'_>, d: &FlowDecision, pace: Option<f64>) -> f64 {
    let mut rate = pace.unwrap_or(d.rate).max(cfg.floor_of(f.obs.connections));
    // Kept warm (never above a few MB/s per connection, see WARM_SHARE): its next packets
    // leave a millisecond apart, not 23 ms at the floor.
    let warm_cap = WARM_MAX_PER_CONNECTION * f.obs.connections.max(1) as f64;
    if cfg.warm_resume {
        let next = d.plan.get(1).copied().unwrap_or(0.0);
        rate = rate.max((WARM_SHARE * next).min(warm_cap));
    }
    if cfg.warm_held && f.remaining > 0.0 {
        rate = rate.max((WARM_SHARE * d.achievable).min(warm_cap));
    }
    if cfg.flush_tail && is_tail(f, d.achievable, cfg.slots.tau_secs()) {
        rate = rate.max(d.achievable);
    }
    rate
}

/// Whether `f` holds all it has left and that is a tail: what `rate` moves in a slot of `tau`.
fn is_tail(f: &Local<'_>, rate: f64, tau: f64) -> bool {
    f.holds_all() && finishes_in_a_slot(f.remaining, rate, tau)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn a_held_back_flow_keeps_the_rate_floor_per_connection() {
        let t = topo();
        let mut f = flow(&t, "p", "h3", "h1", FlowRole::Bcast, 50.0 * MB);
        f.links = vec![
            LinkObs::unasked(link(&t, "h3->sw"), CAP),
            LinkObs::unasked(link(&t, "sw->h1"), CAP),
        ];
        f.app_backlog = None; // nothing says the server holds the bytes
        f.connections = 2;
        f.upstream = vec![PeerProgress {
            sent: 0.0,
            finish: 0.0,
            iteration: 0,
            seen: Slot(1),
            reported_in: None,
            next_rate: 0.0,
        }];
        // The floor alone (warm, it would be paced at a share of its path: a cap on data it does
        // not have yet).
        let cold = without("warm-resume")
            .with_rule("warm-held", false)
            .unwrap();
        let on = one(cold, 1, &f);
        assert_eq!(on.decision.rate, 0.0, "nothing aggregated yet");
        assert_eq!(paced(on.enforce), 2.0 * 125_000.0);
        let no_floor = cold.with_rule("rate-floor", false).unwrap();
        assert_eq!(paced(one(no_floor, 1, &f).enforce), 0.0);
    }

    #[test]
    fn a_held_flow_whose_plan_resumes_it_next_slot_is_kept_warm() {
        let t = topo();
        let mut f = flow(&t, "b", "h1", "h2", FlowRole::Agg, 50.0 * MB);
        // Its downlink is booked full by others in this slot and free from the next.
        let mut load = vec![0.0; 10];
        load[0] = CAP;
        f.links[1].answer = Answer::Load(load);
        let floor = 125_000.0;
        let resume_only = without("warm-held");
        let on = one(resume_only, 1, &f);
        assert_eq!(on.decision.rate, 0.0);
        let next = on.decision.plan[1];
        assert!(next > 0.9 * USABLE, "{:?}", on.decision.plan);
        // A 2-segment burst every ~1.5 ms at 100 MB/s, not every 23 ms at the floor.
        assert_eq!(paced(on.enforce), WARM_SHARE * next);
        assert!(paced(on.enforce) > 10.0 * floor);
        let cold = resume_only.with_rule("warm-resume", false).unwrap();
        assert_eq!(paced(one(cold, 1, &f).enforce), floor);
        // Held in the next slot too: the floor, unless every held flow is kept warm.
        f.links[1].answer = Answer::Load(vec![CAP; 10]);
        assert_eq!(paced(one(resume_only, 1, &f).enforce), floor);
    }

    #[test]
    fn every_flow_with_bytes_left_is_kept_warm_at_a_share_of_its_path() {
        let t = topo();
        let mut f = flow(&t, "b", "h1", "h2", FlowRole::Agg, 50.0 * MB);
        f.links[1].answer = Answer::Load(vec![CAP; 10]); // held all horizon
        let floor = 125_000.0;
        let on = one(cfg(), 1, &f);
        assert_eq!(on.decision.rate, 0.0);
        let warm = WARM_SHARE * on.decision.achievable;
        assert_eq!(paced(on.enforce), warm);
        assert_eq!(paced(one(without("warm-held"), 1, &f).enforce), floor);
        // Waiting for data (idle: paced into what is free, here nothing) or not knowing what it
        // holds: warm too, for when its data arrives mid-slot.
        for backlog in [Some(1000.0), None] {
            let mut g = f.clone();
            g.app_backlog = backlog;
            assert_eq!(paced(one(cfg(), 1, &g).enforce), warm, "{backlog:?}");
        }
        // On a 10 Gbit/s path the share would be 25 MB/s unbooked: a few MB/s per connection
        // already space the stamps.
        let mut fast = f.clone();
        for l in &mut fast.links {
            l.capacity = 1.25e9;
        }
        fast.links[1].answer = Answer::Load(vec![1.25e9; 10]);
        fast.connections = 2;
        assert_eq!(
            paced(one(cfg(), 1, &fast).enforce),
            2.0 * WARM_MAX_PER_CONNECTION
        );
    }

    #[test]
    fn a_silent_or_skewed_switch_is_reported_and_a_skewed_one_releases_the_flow() {
        let t = topo();
        let sw = t.node_by_name("sw").unwrap();
        let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 50.0 * MB);
        f.links[1].answer = Answer::Silent { switch: sw };
        let out = one(cfg(), 1, &f);
        assert_eq!(out.degraded, vec![Degraded::SwitchSilent { switch: sw }]);
        assert!(matches!(out.enforce, Enforce::Pace(_)));
        f.links[1].unsynced_switch = Some(sw);
        let out = one(cfg(), 1, &f);
        assert!(out.degraded.contains(&Degraded::ClockSkew { switch: sw }));
        assert_eq!(out.enforce, Enforce::Release);
        assert!(out.booking.is_withdraw());
    }

    #[test]
    fn a_tail_the_sender_holds_is_flushed_at_the_path_rate() {
        let t = topo();
        // 200 kB left, all of it handed over; the downlink is booked to 70 % by others now.
        let mut f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 0.2 * MB);
        f.app_backlog = Some(0.2 * MB);
        let mut load = vec![0.0; 10];
        load[0] = 0.7 * CAP;
        f.links[1].answer = Answer::Load(load);
        // Planned to spread the 200 kB over the slot (3.3 MB/s); flushed, it leaves at the
        // path's rate and is done 2 ms into the slot.
        let on = one(cfg(), 1, &f);
        assert_eq!(paced(on.enforce), on.decision.achievable);
        let off = one(without("flush-tail"), 1, &f);
        assert!(paced(off.enforce) < 0.35 * CAP, "{:?}", off.enforce);
        // Not a tail: more than a slot's bytes at the path's rate, or bytes the sender does not
        // hold yet.
        let slot_bytes = on.decision.achievable * cfg().slots.tau_secs();
        let mut big = f.clone();
        big.remaining_bytes = Some(1.5 * slot_bytes);
        big.app_backlog = Some(1.5 * slot_bytes);
        assert!(paced(one(cfg(), 1, &big).enforce) < 0.35 * CAP);
        let mut waiting = f.clone();
        waiting.app_backlog = Some(0.1 * MB);
        assert!(paced(one(cfg(), 1, &waiting).enforce) < 0.35 * CAP);
    }
}
