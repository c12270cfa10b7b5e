//! An in-memory datapath for unit tests of mlccd: same contract, no kernel.

use std::collections::HashMap;

use crate::clock::{Deadline, MonotonicNs};
use crate::datapath::Datapath;
use crate::error::DatapathError;
use crate::key::SocketKey;
use crate::rate::{Rate, RateOrder};
use crate::stats::SocketStats;

/// Orders expire against the same clock as the kernel's, so a test can check that a caller
/// renews them in time.
#[derive(Debug, Default)]
pub struct MemoryDatapath {
    orders: HashMap<SocketKey, (Rate, Deadline)>,
    sockets: HashMap<SocketKey, SocketStats>,
}

impl MemoryDatapath {
    pub fn new() -> Self {
        Self::default()
    }

    /// Plays the kernel: the socket appears (or its measurements change).
    pub fn upsert_socket(&mut self, key: SocketKey, stats: SocketStats) {
        self.sockets.insert(key, stats);
    }

    /// Plays the kernel's `release`: the socket closed, its measurements and order go.
    pub fn close_socket(&mut self, key: &SocketKey) {
        self.sockets.remove(key);
        self.orders.remove(key);
    }

    /// The rate the CC would pace `key` at now; `None` means the fallback CC.
    pub fn effective_rate(&self, key: &SocketKey) -> Option<Rate> {
        let now = MonotonicNs::now();
        self.orders
            .get(key)
            .filter(|(_, deadline)| !deadline.passed(now))
            .map(|&(rate, _)| rate)
    }

    /// Orders held, expired or not.
    pub fn order_count(&self) -> usize {
        self.orders.len()
    }
}

impl Datapath for MemoryDatapath {
    fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError> {
        for o in orders {
            self.orders.insert(o.key, (o.rate, o.expiry.deadline()));
        }
        Ok(())
    }

    fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError> {
        for k in keys {
            self.orders.remove(k);
        }
        Ok(())
    }

    fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError> {
        Ok(self.sockets.iter().map(|(k, s)| (*k, *s)).collect())
    }

    fn sockets(&self) -> Result<Vec<SocketKey>, DatapathError> {
        Ok(self.sockets.keys().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Expiry;
    use crate::stats::Pacing;
    use std::time::Duration;

    fn key(port: u16) -> SocketKey {
        SocketKey::new(
            1,
            format!("10.0.0.1:{port}").parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        )
    }

    #[test]
    fn orders_expire_and_clear() {
        let mut dp = MemoryDatapath::new();
        let rate = Rate::from_bytes_per_sec(1000).unwrap();
        dp.set_rates(&[
            RateOrder {
                key: key(1),
                rate,
                expiry: Expiry::Never,
                fill: None,
            },
            RateOrder {
                key: key(2),
                rate,
                expiry: Expiry::After(Duration::ZERO),
                fill: None,
            },
        ])
        .unwrap();
        assert_eq!(dp.effective_rate(&key(1)), Some(rate));
        assert_eq!(dp.effective_rate(&key(2)), None);
        dp.clear_rates(&[key(1), key(3)]).unwrap();
        assert_eq!(dp.effective_rate(&key(1)), None);
    }

    #[test]
    fn closing_a_socket_drops_its_stats_and_order() {
        let mut dp = MemoryDatapath::new();
        let stats = SocketStats {
            bytes_sent: 0,
            bytes_acked: 0,
            retransmits: 0,
            srtt: Duration::ZERO,
            min_rtt: None,
            delivery_rate_bytes_per_sec: 0,
            pacing: Pacing::Fallback,
            cwnd_segments: 10,
            delivered_segments: 0,
            updated: MonotonicNs(0),
            queued_bytes: Some(0),
            inode: crate::SocketInode::NotYet,
        };
        dp.upsert_socket(key(1), stats);
        let rate = Rate::from_bytes_per_sec(1).unwrap();
        dp.set_rates(&[RateOrder {
            key: key(1),
            rate,
            expiry: Expiry::Never,
            fill: None,
        }])
        .unwrap();
        assert_eq!(dp.sockets().unwrap(), vec![key(1)]);
        dp.close_socket(&key(1));
        assert!(dp.sockets().unwrap().is_empty());
        assert_eq!(dp.order_count(), 0);
    }
}
