//! A flow's precedence key: its rank rule ([`super::RankRule`]) and the one builder of the key
//! it claims bandwidth with, in its bookings and in the feedback queries its driver makes
//! before the step ([`PolicyConfig::key_of`]).

pub use crate::flow::Rank;

use super::config::{PolicyConfig, RankRule};
use super::obs::FlowObs;
use crate::flow::PrecedenceKey;
use crate::slot::Slot;

/// Rank of a job that has `bytes` in some measure (sent so far, or left), whose current
/// iteration started in slot `since`: the size class (quarter octaves of bytes, so a job
/// changes class a few times in its life, not every slot) in the high bits, the iteration
/// start below it (first come, first served within a class). A rank that changed every slot
/// would move every entry in every load table every slot.
pub fn size_class_rank(bytes: f64, since: u64) -> Rank {
    class_rank(bytes, since, 4.0)
}

/// [`size_class_rank`] with `per_octave` classes in each doubling of bytes.
fn class_rank(bytes: f64, since: u64, per_octave: f64) -> Rank {
    let class = (per_octave * bytes.max(1.0).log2())
        .floor()
        .clamp(0.0, 4095.0) as u64;
    Rank((class << 40) | (since & ((1 << 40) - 1)))
}

/// Jobs whose size is unknown go after every job whose size is known.
const UNKNOWN_SIZE: Rank = Rank(u64::MAX >> 1);

/// What the rank rules read of a flow (the fields of [`FlowObs`] they depend on).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankBasis {
    pub iteration_start: Slot,
    pub job_bytes: u64,
    pub job_attained_bytes: Option<f64>,
    pub job_remaining_bytes: Option<f64>,
    /// The flow can finish its iteration within one slot at its path's rate
    /// ([`finishes_in_a_slot`]).
    pub last_slot: bool,
}

/// Whether a flow with `remaining_bytes` of its iteration left finishes it within one slot
/// of `tau` seconds at `bottleneck` bytes/s, its path's slowest link.
pub fn finishes_in_a_slot(remaining_bytes: f64, bottleneck: f64, tau: f64) -> bool {
    remaining_bytes > 0.0 && remaining_bytes <= bottleneck * tau
}

impl PolicyConfig {
    /// The key `f` claims bandwidth with this slot. Every host, switch query and simulated
    /// table calls this, so a flow carries one key everywhere: it reads only what the driver
    /// knows before the switches answer (the topology's capacities, not a switch's report).
    pub fn key_of(&self, f: &FlowObs) -> PrecedenceKey {
        PrecedenceKey::new(self.rank_of(self.rank_basis(f)), f.id.clone())
    }

    /// What the rank rules read of `f`.
    pub fn rank_basis(&self, f: &FlowObs) -> RankBasis {
        let job = &f.job_progress;
        RankBasis {
            iteration_start: f.iteration_start,
            job_bytes: job.model_bytes,
            job_attained_bytes: job.attained_bytes(),
            job_remaining_bytes: job.remaining_bytes(),
            last_slot: finishes_in_a_slot(
                self.remaining_of(f),
                f.bottleneck(),
                self.slots.tau_secs(),
            ),
        }
    }

    /// G: the bytes `f` has left in its iteration. Where nothing tells how much an iteration
    /// moves, a horizon's worth at its path's rate: planned as a bulk transfer that always has
    /// more, it books what its path carries and competes by its rank like any flow.
    pub fn remaining_of(&self, f: &FlowObs) -> f64 {
        f.remaining_bytes
            .unwrap_or_else(|| f.bottleneck() * self.slots.tau_secs() * self.slots.horizon() as f64)
    }

    /// The first component of a flow's precedence key: its rank rule's, or, with
    /// [`PolicyConfig::last_slot_first`] and a size-class rule, the lowest class for a flow in
    /// its last slot (first come, first served among those).
    pub fn rank_of(&self, b: RankBasis) -> Rank {
        let size_classes = matches!(
            self.rank,
            RankRule::AttainedService | RankRule::RemainingBytes | RankRule::RemainingOctaves
        );
        if self.last_slot_first && size_classes && b.last_slot {
            // Class 0 is below every job's: it would take fewer than 2 bytes left.
            return class_rank(0.0, b.iteration_start.0, 1.0);
        }
        self.rank.rank(b)
    }
}

impl RankRule {
    /// The rank of a flow under this rule alone. A driver that must name a flow's key before
    /// it plans (mlccd's feedback queries, the simulator's tables) calls
    /// [`PolicyConfig::key_of`] instead, so the config's rules on top of the rank rule apply
    /// there too.
    pub fn rank(self, b: RankBasis) -> Rank {
        let since = b.iteration_start.0;
        match self {
            RankRule::IterationStart => Rank(since),
            // kB, so a 1.2 GB model is 1.2e6.
            RankRule::JobBytes if b.job_bytes > 0 => Rank(b.job_bytes / 1000),
            RankRule::JobBytes => UNKNOWN_SIZE,
            RankRule::AttainedService => match b.job_attained_bytes {
                Some(x) => size_class_rank(x, since),
                None => UNKNOWN_SIZE,
            },
            // A job that did not say how long it runs is ranked by what it has sent so far
            // (least attained service), on the same scale: its rank grows as it runs, as its
            // remaining bytes would shrink if it had said.
            RankRule::RemainingBytes => match b.job_remaining_bytes {
                Some(x) => size_class_rank(x, since),
                None => RankRule::AttainedService.rank(b),
            },
            // A job that did not say how long it runs is ranked as though the iteration it is
            // in were its last: by the one thing known of what it has left, smallest first.
            RankRule::RemainingOctaves => match b
                .job_remaining_bytes
                .or((b.job_bytes > 0).then_some(b.job_bytes as f64))
            {
                Some(x) => class_rank(x, since, 1.0),
                None => UNKNOWN_SIZE,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn size_classes_sort_by_bytes_then_by_iteration_start() {
        let small_late = size_class_rank(1e6, 900);
        let big_early = size_class_rank(1e9, 1);
        assert!(small_late < big_early);
        assert!(size_class_rank(1e6, 1) < small_late);
        // Within a quarter octave the class does not move.
        assert_eq!(size_class_rank(1.00e9, 5), size_class_rank(1.05e9, 5));
        assert!(size_class_rank(0.0, 0) < size_class_rank(2.0, 0));
    }

    #[test]
    fn a_flow_in_its_last_slot_ranks_below_every_size_class_and_only_under_size_classes() {
        let basis = |left: f64, last_slot: bool| RankBasis {
            iteration_start: Slot(40),
            job_bytes: 1_000_000,
            job_attained_bytes: Some(5e6),
            job_remaining_bytes: Some(left),
            last_slot,
        };
        let cfg = PolicyConfig::default();
        assert!(cfg.last_slot_first);
        // Below a job with 2 bytes left that is not in its last slot, whatever its own size.
        assert!(cfg.rank_of(basis(1e12, true)) < cfg.rank_of(basis(2.0, false)));
        // First come, first served among flows in their last slot.
        let early = RankBasis {
            iteration_start: Slot(39),
            ..basis(1e12, true)
        };
        assert!(cfg.rank_of(early) < cfg.rank_of(basis(1.0, true)));
        // Off, or under a rule without size classes, the rank rule's own rank.
        let off = PolicyConfig {
            last_slot_first: false,
            ..cfg
        };
        assert_eq!(
            off.rank_of(basis(1e12, true)),
            off.rank_of(basis(1e12, false))
        );
        for rank in [RankRule::IterationStart, RankRule::JobBytes] {
            let c = PolicyConfig { rank, ..cfg };
            assert_eq!(c.rank_of(basis(1e12, true)), rank.rank(basis(1e12, true)));
        }
        // A slot's bytes at the bottleneck, not one more; nothing left is not a last slot.
        assert!(finishes_in_a_slot(6e6, 100e6, 0.06));
        assert!(!finishes_in_a_slot(6e6 + 1.0, 100e6, 0.06));
        assert!(!finishes_in_a_slot(0.0, 100e6, 0.06));
    }

    #[test]
    fn remaining_octaves_serve_alike_jobs_first_come_and_much_shorter_ones_first() {
        let basis = |left: f64, since: u64| RankBasis {
            iteration_start: Slot(since),
            job_bytes: 1,
            job_attained_bytes: Some(1.0),
            job_remaining_bytes: Some(left),
            last_slot: false,
        };
        let rank = |left, since| RankRule::RemainingOctaves.rank(basis(left, since));
        // 11 and 13 iterations of 100 MB left: one octave, the earlier iteration first...
        assert!(rank(1.3e9, 10) < rank(1.1e9, 11));
        // ...where quarter octaves put the one with less left first whatever its start.
        let quarter = |left, since| RankRule::RemainingBytes.rank(basis(left, since));
        assert!(quarter(1.1e9, 11) < quarter(1.3e9, 10));
        // A job with under half the bytes left goes first.
        assert!(rank(0.5e9, 11) < rank(1.3e9, 10));
        // Without a total, as though its current iteration were its last: one iteration's
        // bytes, whatever it sent so far, so a long-running job does not sink below the
        // young ones; and with nothing known, after every job whose size is known.
        let unknown = |job_bytes: u64, attained: f64, since: u64| RankBasis {
            job_bytes,
            job_attained_bytes: Some(attained),
            job_remaining_bytes: None,
            ..basis(0.0, since)
        };
        let octaves = RankRule::RemainingOctaves;
        let long_running = octaves.rank(unknown(100_000_000, 50e9, 3));
        assert_eq!(long_running, class_rank(1e8, 3, 1.0));
        assert!(long_running < octaves.rank(unknown(1_000_000_000, 1e9, 1)));
        assert!(long_running < rank(0.3e9, 1));
        assert_eq!(octaves.rank(unknown(0, 0.0, 3)), UNKNOWN_SIZE);
    }

    #[test]
    fn each_rank_rule_decides_which_job_claims_a_shared_uplink_first() {
        let t = topo();
        // Job a: a big model, first to start, in its first iteration, many iterations left.
        let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
        a.job_progress = job(500_000_000, 0, 20);
        a.iteration_start = Slot(5);
        // Job b: a small model, started later, three iterations done, one left.
        let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 30.0 * MB);
        b.job_progress = job(50_000_000, 3, 4);
        b.iteration_start = Slot(9);
        for (rule, first) in [
            (RankRule::IterationStart, "a"),
            (RankRule::JobBytes, "b"),
            (RankRule::AttainedService, "a"),
            (RankRule::RemainingBytes, "b"),
            (RankRule::RemainingOctaves, "b"),
        ] {
            let cfg = PolicyConfig {
                rank: rule,
                mode: FeedbackMode::Precedence,
                ..cfg()
            };
            let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone()]);
            let got: Vec<&str> = out
                .flows
                .iter()
                .filter(|f| f.decision.rate > 0.0)
                .map(|f| &f.id.as_str()[..1])
                .collect();
            assert_eq!(got, vec![first], "{rule}");
        }
    }

    #[test]
    fn a_flow_that_finishes_in_this_slot_goes_before_a_job_of_a_lower_size_class() {
        let t = topo();
        let cfg = PolicyConfig {
            mode: FeedbackMode::Precedence,
            ..cfg()
        };
        // Job a: 100 MB left to its end, so the lower class, and a whole step (30 MB) to send.
        let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
        a.iteration_start = Slot(5);
        a.job_progress = job(100_000_000, 0, 1);
        // Job b: alike but an octave behind, with the last 3 MB of its step: half a slot's bytes.
        let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 3.0 * MB);
        b.iteration_start = Slot(9);
        b.job_progress = job(100_000_000, 0, 3);
        let rates = |cfg: PolicyConfig, b: &FlowObs| {
            let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone()]);
            (out.flows[0].decision.rate, out.flows[1].decision.rate)
        };
        // b's last bytes leave in this slot, a takes the rest of the uplink.
        let (ra, rb) = rates(cfg, &b);
        assert!(rb * TAU >= 3.0 * MB - 1.0, "b {rb}");
        assert!((ra + rb - USABLE).abs() < 1.0, "a {ra} b {rb}");
        // Without the rule a's class takes the whole uplink and b's 3 MB wait behind its 30 MB.
        let (ra, rb) = rates(cfg.with_rule("last-slot-first", false).unwrap(), &b);
        assert!((ra - USABLE).abs() < 1.0, "a {ra}");
        assert!(rb * TAU < 0.1 * MB, "b {rb}");
        // More than a slot's bytes left (6 MB at 100 MB/s): b is not in its last slot.
        b.remaining_bytes = Some(7.0 * MB);
        let (ra, _) = rates(cfg, &b);
        assert!((ra - USABLE).abs() < 1.0, "a {ra}");
    }

    #[test]
    fn remaining_bytes_rank_falls_back_to_attained_service_on_the_same_scale() {
        let basis = |remaining: Option<f64>, attained: Option<f64>| RankBasis {
            iteration_start: Slot(7),
            job_bytes: 100_000_000,
            job_attained_bytes: attained,
            job_remaining_bytes: remaining,
            last_slot: false,
        };
        let r = RankRule::RemainingBytes;
        // A job that said it has 1 GB left goes before one that has sent 10 GB and did not say,
        // and after one that has sent only 100 MB: all three on the size-class scale.
        let said = r.rank(basis(Some(1e9), Some(5e9)));
        let old_unsaid = r.rank(basis(None, Some(10e9)));
        let young_unsaid = r.rank(basis(None, Some(1e8)));
        assert!(young_unsaid < said && said < old_unsaid);
        assert_eq!(
            old_unsaid,
            RankRule::AttainedService.rank(basis(None, Some(10e9)))
        );
    }
}
