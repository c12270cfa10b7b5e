//! Work conservation beneath the plan ([`PolicyConfig::fill`]): which flows send bytes in a
//! fill class this slot, and in which one. The switches serve the default class first and the
//! fill classes in order after it, so what a flow sends there takes only capacity nobody's
//! plan is using at that moment, and yields at once when a planned flow needs it.

use super::config::{Fill, MAX_FILL_CLASSES, PolicyConfig, RankRule};
use crate::flow::Rank;
use crate::planner::FlowDecision;

/// Ranks of this many bytes left or fewer share the first ranked fill class after the one of
/// flows in their last slot ([`PolicyConfig::last_slot_first`]).
const FILL_BASE_OCTAVE: u64 = 20;

/// Octaves of bytes left per ranked fill class beyond the first.
const FILL_OCTAVES_PER_CLASS: u64 = 3;

impl PolicyConfig {
    /// The fill class of a flow of rank `rank`: 0 with one class; with more, its size class
    /// compressed onto them, as PIAS compresses flow sizes onto a switch's queues (a flow in
    /// its last slot first, then one class per [`FILL_OCTAVES_PER_CLASS`] octaves of bytes
    /// left above 2^[`FILL_BASE_OCTAVE`], the last class for the rest). Rank rules without
    /// size classes use one class.
    pub fn fill_class_of(&self, rank: Rank) -> u8 {
        let n = u64::from(self.fill_classes.clamp(1, MAX_FILL_CLASSES));
        let per_octave = match self.rank {
            RankRule::RemainingOctaves => 1,
            RankRule::RemainingBytes | RankRule::AttainedService => 4,
            RankRule::IterationStart | RankRule::JobBytes => return 0,
        };
        if n == 1 {
            return 0;
        }
        let octave = (rank.0 >> 40) / per_octave;
        if octave == 0 {
            return 0;
        }
        let k = 1 + octave.saturating_sub(FILL_BASE_OCTAVE) / FILL_OCTAVES_PER_CLASS;
        k.min(n - 1) as u8
    }
}

/// Per flow, its fill class this slot, or none where its bytes all go in the default class:
/// with [`Fill::Excess`] every flow whose slots line up with the switches' (`unsynced`: they
/// do not) sends beyond its plan in one; with [`Fill::Unbooked`] every such flow the plan holds
/// back (no rate this slot though it has bytes left and is not `idle`).
pub(super) fn classes(
    cfg: &PolicyConfig,
    decisions: &[FlowDecision],
    idle: &[bool],
    unsynced: &[bool],
) -> Vec<Option<u8>> {
    decisions
        .iter()
        .zip(idle.iter().zip(unsynced))
        .map(|(d, (&idle, &unsynced))| {
            let fills = match cfg.fill {
                Fill::Off | Fill::Scavenge => false,
                Fill::Excess => true,
                Fill::Unbooked => d.rate <= 0.0 && !d.done && !idle,
            };
            (fills && !unsynced).then(|| cfg.fill_class_of(d.key.rank))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    fn with_fill(fill: Fill) -> PolicyConfig {
        PolicyConfig { fill, ..cfg() }
    }

    #[test]
    fn with_fill_the_plan_goes_in_the_default_class_and_the_rest_beneath_it() {
        let t = topo();
        // Held back all horizon: its downlink is booked full by others.
        let mut held = flow(&t, "b", "h1", "h2", FlowRole::Agg, 50.0 * MB);
        held.links[1].answer = Answer::Load(vec![CAP; 10]);
        let off = one(cfg(), 1, &held);
        assert_eq!(off.fill, None);
        assert!(paced(off.enforce) > 0.0, "held at the floor or warm");
        for fill in [Fill::Excess, Fill::Unbooked] {
            let on = one(with_fill(fill), 1, &held);
            assert_eq!(on.decision.rate, 0.0);
            assert_eq!(on.fill, Some(0), "{fill}");
            // Nothing guaranteed: every byte it sends waits for capacity nobody uses.
            assert_eq!(paced(on.enforce), 0.0, "{fill}");
            assert!(on.booking.is_withdraw() || on.decision.plan.iter().all(|&r| r == 0.0));
        }
        // A flow with a plan: its rate in the default class; beyond it, fill only with Excess.
        let free = flow(&t, "a", "h1", "h3", FlowRole::Agg, 50.0 * MB);
        let ex = one(with_fill(Fill::Excess), 1, &free);
        assert_eq!((paced(ex.enforce), ex.fill), (ex.decision.rate, Some(0)));
        let unb = one(with_fill(Fill::Unbooked), 1, &free);
        assert_eq!(unb.fill, None);
        assert_eq!(unb.enforce, one(cfg(), 1, &free).enforce);
    }

    #[test]
    fn a_finished_flow_waits_in_the_fill_class_and_a_skewed_one_is_released() {
        let t = topo();
        let mut done = flow(&t, "b", "h1", "h3", FlowRole::Ring, 0.0);
        done.app_backlog = Some(0.0);
        let on = one(with_fill(Fill::Excess), 1, &done);
        assert_eq!((on.enforce, on.fill), (Enforce::Pace(0.0), Some(0)));
        assert!(on.booking.is_withdraw());
        let sw = t.node_by_name("sw").unwrap();
        let mut skewed = flow(&t, "a", "h1", "h2", FlowRole::Ring, 50.0 * MB);
        skewed.links[1].unsynced_switch = Some(sw);
        let out = one(with_fill(Fill::Excess), 1, &skewed);
        assert_eq!((out.enforce, out.fill), (Enforce::Release, None));
    }

    #[test]
    fn scavenging_paces_a_flow_with_data_beyond_its_plan_into_what_is_free() {
        let t = topo();
        // Half its downlink booked by others for slot n: planned at half, scavenging the rest
        // of nothing (the uplink is its own, the downlink half free only).
        let mut f = flow(&t, "a", "h1", "h2", FlowRole::Agg, 500.0 * MB);
        let mut load = vec![0.5 * CAP; 10];
        load[0] = 0.5 * CAP;
        f.links[1].answer = Answer::Load(load);
        let sc = one(with_fill(Fill::Scavenge), 1, &f);
        let off = one(cfg(), 1, &f);
        assert_eq!(sc.fill, None);
        assert!((sc.decision.rate - off.decision.rate).abs() < 1.0);
        assert!(paced(sc.enforce) >= paced(off.enforce));
    }

    #[test]
    fn ranked_fill_compresses_size_classes_onto_the_classes() {
        let c = PolicyConfig {
            fill: Fill::Excess,
            fill_classes: 4,
            ..cfg()
        };
        // remaining-octaves: one class per octave; a flow in its last slot has class 0.
        let rank = |bytes: f64| {
            let class = bytes.max(1.0).log2().floor() as u64;
            Rank((class << 40) | 7)
        };
        assert_eq!(c.fill_class_of(Rank(7)), 0);
        assert_eq!(c.fill_class_of(rank(1e6)), 1);
        assert!(c.fill_class_of(rank(1e7)) <= c.fill_class_of(rank(1e9)));
        assert_eq!(
            c.fill_class_of(rank(1e15)),
            3,
            "the last class takes the rest"
        );
        // One class, or a rank without sizes: class 0.
        assert_eq!(
            PolicyConfig {
                fill_classes: 1,
                ..c
            }
            .fill_class_of(rank(1e9)),
            0
        );
        let starts = PolicyConfig {
            rank: RankRule::IterationStart,
            ..c
        };
        assert_eq!(starts.fill_class_of(Rank(12345)), 0);
    }
}
