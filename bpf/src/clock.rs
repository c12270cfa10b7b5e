//! The kernel's clock for order expiry: CLOCK_MONOTONIC, which is what `bpf_ktime_get_ns`
//! reads, so a deadline written by user space compares directly in the BPF program.

use std::time::Duration;

use crate::sys;

/// Nanoseconds of CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct MonotonicNs(pub u64);

impl MonotonicNs {
    pub fn now() -> Self {
        Self(sys::monotonic_ns())
    }

    pub fn saturating_since(self, earlier: MonotonicNs) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Deadline {
    Never,
    At(MonotonicNs),
}

impl Deadline {
    pub fn after(d: Duration) -> Self {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match sys::monotonic_ns().checked_add(ns) {
            Some(at) if at < u64::MAX => Deadline::At(MonotonicNs(at)),
            _ => Deadline::Never,
        }
    }

    /// The BPF side's encoding: it compares `now < expires_ns`, so never is `u64::MAX`.
    pub fn as_raw_ns(self) -> u64 {
        match self {
            Deadline::Never => u64::MAX,
            Deadline::At(t) => t.0,
        }
    }

    pub fn passed(self, now: MonotonicNs) -> bool {
        match self {
            Deadline::Never => false,
            Deadline::At(t) => now >= t,
        }
    }
}
