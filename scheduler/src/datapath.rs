//! What mlccd needs from the kernel datapath (DESIGN.md §12): rate orders with an expiry per
//! socket, and per-socket measurements.
//!
//! This mirrors the `Datapath` trait mlcc-bpf is about to export (same operations, same key) so
//! the control loop and its tests do not wait for the BPF crate; when mlcc-bpf lands in git this
//! module becomes an adapter over it. The in-memory implementation is what every test and
//! `--datapath dry-run` use: it enforces nothing, it only remembers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

/// A TCP socket as the kernel sees it: namespace plus 4-tuple. IPv4-mapped IPv6 addresses are
/// stored as IPv4 so that dual-stack sockets match the IPv4 peer they talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SocketKey {
    pub netns_cookie: u64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

impl SocketKey {
    pub fn new(netns_cookie: u64, src: SocketAddr, dst: SocketAddr) -> Self {
        let canon = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        SocketKey {
            netns_cookie,
            src: canon(src),
            dst: canon(dst),
        }
    }
}

impl std::fmt::Display for SocketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} (netns {})",
            self.src, self.dst, self.netns_cookie
        )
    }
}

/// What the congestion control measured on one socket (cumulative counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SocketStats {
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub retransmits: u32,
    pub srtt: Duration,
    pub min_rtt: Option<Duration>,
    pub delivery_rate_bytes_per_sec: u64,
}

/// One socket's pacing order. `bytes_per_sec` is never 0 (a zero rate would freeze the socket
/// for good if mlccd died; "no order" is a cleared entry); `expiry` is how long the order holds
/// before the CC falls back to Reno, so a dead daemon releases its flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RateOrder {
    pub key: SocketKey,
    pub bytes_per_sec: u64,
    pub expiry: Duration,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum DatapathError {
    #[error("datapath unavailable: {0}")]
    Unavailable(String),
    #[error("datapath map operation failed: {0}")]
    Map(String),
}

/// A place that enforces rate orders and reports measurements. Batched: mlccd touches every
/// local flow once per slot.
pub trait Datapath: Send {
    fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError>;
    /// Removes orders; the sockets fall back to Reno. Unknown keys are ignored.
    fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError>;
    /// Measurements of every socket the CC manages.
    fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError>;
    /// The sockets the CC manages.
    fn sockets(&self) -> Result<Vec<SocketKey>, DatapathError>;
    /// False when orders are remembered but not enforced (dry run): shown in status and metrics.
    fn enforces(&self) -> bool {
        true
    }
}

#[derive(Debug, Default)]
struct MemoryState {
    stats: BTreeMap<SocketKey, SocketStats>,
    orders: BTreeMap<SocketKey, RateOrder>,
    fail: Option<String>,
}

/// An in-memory datapath: sockets and their counters are set by the caller (a test, or nobody in
/// dry-run mode); orders are remembered for inspection. Cloning shares the state, so a test can
/// keep a handle while the daemon owns another.
#[derive(Clone, Debug, Default)]
pub struct MemoryDatapath {
    state: Arc<Mutex<MemoryState>>,
    enforcing: bool,
}

impl MemoryDatapath {
    /// A datapath for tests: reports itself as enforcing.
    pub fn new() -> Self {
        MemoryDatapath {
            state: Arc::default(),
            enforcing: true,
        }
    }

    /// `--datapath dry-run`: plans are computed and published, nothing is enforced.
    pub fn dry_run() -> Self {
        MemoryDatapath {
            state: Arc::default(),
            enforcing: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A test that panicked while holding the lock poisoned it; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a socket's counters.
    pub fn set_stats(&self, key: SocketKey, stats: SocketStats) {
        self.lock().stats.insert(key, stats);
    }

    /// Adds `bytes` to a socket's sent and acked counters (creating it).
    pub fn deliver(&self, key: SocketKey, bytes: u64) {
        let mut s = self.lock();
        let st = s.stats.entry(key).or_default();
        st.bytes_sent += bytes;
        st.bytes_acked += bytes;
    }

    pub fn remove_socket(&self, key: &SocketKey) {
        let mut s = self.lock();
        s.stats.remove(key);
        s.orders.remove(key);
    }

    /// Makes every call fail with `reason` (None: work again).
    pub fn set_failure(&self, reason: Option<&str>) {
        self.lock().fail = reason.map(str::to_string);
    }

    pub fn order(&self, key: &SocketKey) -> Option<RateOrder> {
        self.lock().orders.get(key).copied()
    }

    pub fn orders(&self) -> Vec<RateOrder> {
        self.lock().orders.values().copied().collect()
    }
}

impl Datapath for MemoryDatapath {
    fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError> {
        let mut s = self.lock();
        if let Some(f) = &s.fail {
            return Err(DatapathError::Unavailable(f.clone()));
        }
        for o in orders {
            s.orders.insert(o.key, *o);
        }
        Ok(())
    }

    fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError> {
        let mut s = self.lock();
        if let Some(f) = &s.fail {
            return Err(DatapathError::Unavailable(f.clone()));
        }
        for k in keys {
            s.orders.remove(k);
        }
        Ok(())
    }

    fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError> {
        let s = self.lock();
        if let Some(f) = &s.fail {
            return Err(DatapathError::Unavailable(f.clone()));
        }
        Ok(s.stats.iter().map(|(k, v)| (*k, *v)).collect())
    }

    fn sockets(&self) -> Result<Vec<SocketKey>, DatapathError> {
        let s = self.lock();
        if let Some(f) = &s.fail {
            return Err(DatapathError::Unavailable(f.clone()));
        }
        Ok(s.stats.keys().copied().collect())
    }

    fn enforces(&self) -> bool {
        self.enforcing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_datapath_remembers_and_fails_on_demand() {
        let mut d = MemoryDatapath::new();
        let k = SocketKey::new(
            1,
            "[::ffff:10.0.0.1]:5000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        );
        assert_eq!(k.src, "10.0.0.1:5000".parse().unwrap());
        d.deliver(k, 100);
        assert_eq!(d.read_stats().unwrap()[0].1.bytes_acked, 100);
        let o = RateOrder {
            key: k,
            bytes_per_sec: 5,
            expiry: Duration::from_millis(180),
        };
        d.set_rates(&[o]).unwrap();
        assert_eq!(d.order(&k), Some(o));
        d.set_failure(Some("gone"));
        assert!(d.read_stats().unwrap_err().to_string().contains("gone"));
        d.set_failure(None);
        d.clear_rates(&[k]).unwrap();
        assert!(d.orders().is_empty());
        assert!(!MemoryDatapath::dry_run().enforces());
    }
}
