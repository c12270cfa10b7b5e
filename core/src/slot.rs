//! Slots: the absolute time grid every host and switch plans on (docs/design.md §3).
//!
//! The slot index is `floor(realtime_ns / τ_ns)`, so two processes with synchronized clocks agree
//! on "slot n" without talking. This module has no clock of its own: callers pass the time.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{Bytes, BytesPerSec};

/// An absolute slot index on the `realtime / τ` grid.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Slot(pub u64);

impl Slot {
    /// The slot `k` slots after this one.
    pub fn plus(self, k: u64) -> Slot {
        Slot(self.0.saturating_add(k))
    }

    /// Slots from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn since(self, earlier: Slot) -> Option<u64> {
        self.0.checked_sub(earlier.0)
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Slot length τ and planning horizon K, validated once so the rest of the code can trust them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotConfig {
    tau: Duration,
    horizon: usize,
}

/// Why a slot configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotConfigError {
    #[error("slot length {0:?} is outside 10ms..=1s")]
    Tau(Duration),
    #[error("horizon K = {0} is outside 1..=64 slots")]
    Horizon(usize),
}

impl SlotConfig {
    pub const MIN_TAU: Duration = Duration::from_millis(10);
    pub const MAX_TAU: Duration = Duration::from_secs(1);
    pub const MAX_HORIZON: usize = 64;

    pub fn new(tau: Duration, horizon: usize) -> Result<Self, SlotConfigError> {
        if !(Self::MIN_TAU..=Self::MAX_TAU).contains(&tau) {
            return Err(SlotConfigError::Tau(tau));
        }
        if !(1..=Self::MAX_HORIZON).contains(&horizon) {
            return Err(SlotConfigError::Horizon(horizon));
        }
        Ok(SlotConfig { tau, horizon })
    }

    /// The paper's setting: τ = 60 ms, K = 10.
    pub fn paper() -> Self {
        SlotConfig {
            tau: Duration::from_millis(60),
            horizon: 10,
        }
    }

    /// mlccd's and mlcc-switchd's default: τ = 30 ms, K = 10. Each slot boundary costs a flow
    /// that starts or ends inside the slot up to a slot: its last bytes are spread to the
    /// slot's end, its next hop (a PS broadcast after the pushes, the next ring step) waits
    /// for the next plan. Halving τ halves that (docs/design.md §17 has the figures). K stays
    /// 10: a horizon of 20 slots planned no better in mlcc-sim.
    pub fn mlccd() -> Self {
        SlotConfig {
            tau: Duration::from_millis(30),
            horizon: 10,
        }
    }

    pub fn tau(&self) -> Duration {
        self.tau
    }

    pub fn tau_secs(&self) -> f64 {
        self.tau.as_secs_f64()
    }

    pub fn tau_ns(&self) -> u64 {
        self.tau.as_nanos() as u64
    }

    /// K, the number of slots a plan covers.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// How far another clock may be off ours before our slots no longer line up with its:
    /// τ/4 (docs/design.md §3). A flow through a switch skewed beyond it is left to kernel TCP and
    /// its bookings withdrawn.
    pub fn skew_tolerance_ns(&self) -> u64 {
        self.tau_ns() / 4
    }

    /// Whether a clock `offset_ns` off ours is beyond [`Self::skew_tolerance_ns`].
    pub fn is_skewed(&self, offset_ns: i64) -> bool {
        offset_ns.unsigned_abs() > self.skew_tolerance_ns()
    }

    /// The slot containing the instant `realtime_ns` (nanoseconds since the Unix epoch).
    pub fn slot_at(&self, realtime_ns: u64) -> Slot {
        Slot(realtime_ns / self.tau_ns())
    }

    /// When slot `s` begins, in nanoseconds since the Unix epoch.
    pub fn start_ns(&self, s: Slot) -> u64 {
        s.0.saturating_mul(self.tau_ns())
    }

    /// Bytes a rate moves in one slot.
    pub fn bytes_in_slot(&self, r: BytesPerSec) -> f64 {
        r.0 * self.tau_secs()
    }

    /// The rate that moves `b` bytes in one slot.
    pub fn rate_for(&self, b: Bytes) -> BytesPerSec {
        BytesPerSec(b.as_f64() / self.tau_secs())
    }
}

impl Default for SlotConfig {
    fn default() -> Self {
        Self::paper()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_absolute() {
        let c = SlotConfig::paper();
        assert_eq!(c.slot_at(0), Slot(0));
        assert_eq!(c.slot_at(59_999_999), Slot(0));
        assert_eq!(c.slot_at(60_000_000), Slot(1));
        assert_eq!(c.start_ns(Slot(3)), 180_000_000);
        assert_eq!(c.slot_at(c.start_ns(Slot(123_456))), Slot(123_456));
    }

    #[test]
    fn a_clock_is_skewed_beyond_a_quarter_slot_either_way() {
        let c = SlotConfig::mlccd();
        assert_eq!(c.skew_tolerance_ns(), 7_500_000);
        assert!(!c.is_skewed(7_500_000) && !c.is_skewed(-7_500_000));
        assert!(c.is_skewed(7_500_001) && c.is_skewed(-7_500_001));
        assert!(c.is_skewed(i64::MIN));
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(SlotConfig::new(Duration::from_millis(9), 10).is_err());
        assert!(SlotConfig::new(Duration::from_millis(1001), 10).is_err());
        assert!(SlotConfig::new(Duration::from_millis(60), 0).is_err());
        assert!(SlotConfig::new(Duration::from_millis(60), 65).is_err());
        assert!(SlotConfig::new(Duration::from_millis(10), 64).is_ok());
    }

    #[test]
    fn bytes_and_rates_convert() {
        let c = SlotConfig::paper();
        assert!((c.bytes_in_slot(BytesPerSec(1e6)) - 60_000.0).abs() < 1e-6);
        assert!((c.rate_for(Bytes(60_000)).0 - 1e6).abs() < 1e-6);
        assert_eq!(Slot(5).since(Slot(3)), Some(2));
        assert_eq!(Slot(3).since(Slot(5)), None);
    }
}
