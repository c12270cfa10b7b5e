//! The rank rules: what goes first in a flow's precedence key ([`super::RankRule`]).

pub use crate::flow::Rank;

use super::config::{PolicyConfig, RankRule};
use super::obs::FlowObs;
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

impl RankBasis {
    /// `f`'s basis, its path's slowest link carrying `bottleneck` bytes/s in slots of `tau`
    /// seconds.
    pub fn of(f: &FlowObs, bottleneck: f64, tau: f64) -> Self {
        RankBasis {
            iteration_start: f.iteration_start,
            job_bytes: f.job_bytes,
            job_attained_bytes: f.job_attained_bytes,
            job_remaining_bytes: f.job_remaining_bytes,
            last_slot: finishes_in_a_slot(f.remaining_bytes, bottleneck, tau),
        }
    }
}

impl PolicyConfig {
    /// The first component of a flow's precedence key: its rank rule's, or, with
    /// [`PolicyConfig::last_slot_first`] and a size-class rule, the lowest class for a flow in
    /// its last slot (first come, first served among those). Every host, switch query and
    /// simulated table calls this, so a flow carries one key everywhere.
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
    /// [`PolicyConfig::rank_of`] instead, with the same basis the policy will see, so the
    /// config's rules on top of the rank rule apply there too.
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
            RankRule::RemainingOctaves => match b.job_remaining_bytes.or(b.job_attained_bytes) {
                Some(x) => class_rank(x, since, 1.0),
                None => UNKNOWN_SIZE,
            },
        }
    }
}

/// The rank of `f` under `cfg`, its path's capacity read from its links (none: 0, as
/// [`crate::topology::Topology::bottleneck`] has it).
pub(crate) fn rank_of(cfg: &PolicyConfig, f: &FlowObs) -> Rank {
    let bottleneck = f.links.iter().map(|l| l.capacity).reduce(f64::min);
    cfg.rank_of(RankBasis::of(
        f,
        bottleneck.unwrap_or(0.0),
        cfg.slots.tau_secs(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Without a total, what it sent so far stands in (same scale), as for remaining-bytes.
        let unknown = RankBasis {
            job_remaining_bytes: None,
            ..basis(0.0, 3)
        };
        assert_eq!(
            RankRule::RemainingOctaves.rank(unknown),
            class_rank(1.0, 3, 1.0)
        );
    }
}
