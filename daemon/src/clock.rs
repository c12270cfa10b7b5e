//! Where the daemons' async shells get the realtime clock: the one place mlcc reads it (slots
//! are absolute, docs/design.md §3). The sans-IO parts are told the slot and never read a clock.
//! Tests swap in a [`ManualClock`] so expiry and restarts can be exercised slot by slot
//! without sleeping; mlccd adds its rehearsal offset to [`SystemClock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ns(&self) -> u64;
}

/// The system's realtime clock: slots are absolute (docs/design.md §3), so hosts and switches agree
/// through chrony/PTP without talking.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            // A clock before 1970 is a broken host; slot 0 is as good an answer as any.
            .unwrap_or(0)
    }
}

/// A clock the test moves by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(ns: u64) -> Self {
        ManualClock(AtomicU64::new(ns))
    }

    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}
