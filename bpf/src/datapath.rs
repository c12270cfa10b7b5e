//! The interface mlccd codes against, so its control loop is tested without a kernel.

use crate::error::DatapathError;
use crate::key::SocketKey;
use crate::rate::RateOrder;
use crate::stats::SocketStats;

/// A place that enforces per-socket rate orders and reports per-socket measurements.
///
/// Batch calls are the unit of work because mlccd touches every local flow once per slot.
pub trait Datapath {
    /// Writes (or replaces) the orders of these sockets. A socket not yet on the CC keeps its
    /// order until it joins.
    fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError>;

    /// Removes orders; the sockets fall back to Reno. Keys without an order are ignored.
    fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError>;

    /// Measurements of every socket the CC manages.
    fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError>;

    /// The sockets the CC manages (those with at least one ACK on it, until they close).
    fn sockets(&self) -> Result<Vec<SocketKey>, DatapathError>;

    /// Stale ssthresh values the CC repaired since it was loaded (`bpf/src/bpf/window.h`); None
    /// where the datapath does not count them.
    fn ssthresh_repairs(&self) -> Result<Option<u64>, DatapathError> {
        Ok(None)
    }
}
