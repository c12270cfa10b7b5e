//! mlccd's side of the kernel datapath (docs/design.md §12): an adapter over mlcc-bpf's
//! [`mlcc_bpf::Datapath`] (the BPF implementation, or its in-memory one in tests and dry runs).
//!
//! The pure per-slot logic ([`crate::host`]) works on the plain value types below (public
//! fields, serializable for the Admin API); [`DatapathPort`] converts them to and from mlcc-bpf's
//! `SocketKey`, `RateOrder` (a non-zero [`mlcc_bpf::Rate`] and an [`mlcc_bpf::Expiry`]) and
//! `SocketStats` at the boundary.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mlcc_bpf::Datapath as _;
use serde::Serialize;

pub use mlcc_bpf::{DatapathError, SocketInode};

/// A map keyed by sockets, with a fast hasher seeded per process: mlccd looks sockets up several
/// times per flow per slot.
pub type SocketMap<V> = mlcc_core::hash::Map<SocketKey, V>;

/// A TCP socket as the kernel sees it: namespace plus 4-tuple. IPv4-mapped IPv6 addresses are
/// stored as IPv4 so that dual-stack sockets match the IPv4 peer they talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SocketKey {
    pub netns_cookie: u64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// Three words instead of `SocketAddr`'s field-by-field hash: a busy host looks sockets up
/// several times per flow per slot. Equal keys hash alike (IPv6 flow labels and scope ids,
/// which equality compares, are left out, which only makes such keys collide).
impl Hash for SocketKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        fn word(a: &SocketAddr) -> u64 {
            let ip = match a.ip() {
                IpAddr::V4(v4) => u64::from(v4.to_bits()),
                IpAddr::V6(v6) => {
                    let b = v6.to_bits();
                    (b as u64) ^ ((b >> 64) as u64).rotate_left(17) ^ (1 << 63)
                }
            };
            ip.rotate_left(16) ^ u64::from(a.port())
        }
        state.write_u64(self.netns_cookie);
        state.write_u64(word(&self.src));
        state.write_u64(word(&self.dst));
    }
}

impl SocketKey {
    pub fn new(netns_cookie: u64, src: SocketAddr, dst: SocketAddr) -> Self {
        SocketKey {
            netns_cookie,
            src: canonical(src),
            dst: canonical(dst),
        }
    }
}

/// `a` with an IPv4-mapped IPv6 address as IPv4, as [`SocketKey`] stores it, so that a
/// connection /proc lists matches the datapath's socket by 4-tuple.
pub fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
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
    /// Bytes the process wrote that the peer has not acknowledged (`write_seq - snd_una`), as
    /// of the last ACK or the last send after idle; `None` where the datapath does not say.
    pub queued_bytes: Option<u64>,
    /// Which file the socket is, for finding the process that holds it.
    pub inode: SocketInode,
}

/// One socket's order. `bytes_per_sec` is the rate it is paced at, or, with `fill`, the rate
/// guaranteed in the network's default class, what it sends beyond it going in fill class
/// `fill` (0 is served first among them). The datapath never hands the kernel less than
/// [`MIN_ORDER_BYTES_PER_SEC`]; "no order" is a cleared entry. `expiry` is how long the order
/// holds before the CC falls back to the kernel's CC, so a dead daemon releases its flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RateOrder {
    pub key: SocketKey,
    pub bytes_per_sec: u64,
    pub expiry: Duration,
    pub fill: Option<u8>,
}

/// The datapath the daemon drives: any [`mlcc_bpf::Datapath`], and whether it enforces.
pub struct DatapathPort {
    inner: Box<dyn mlcc_bpf::Datapath + Send>,
    enforcing: bool,
    name: &'static str,
}

impl std::fmt::Debug for DatapathPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatapathPort")
            .field("name", &self.name)
            .field("enforcing", &self.enforcing)
            .finish_non_exhaustive()
    }
}

/// The lowest rate handed to the kernel: a safety clamp, not a policy. The policy decides each
/// connection's floor (`PolicyConfig::rate_floor_per_connection`, 125 kB/s by default; 0 in
/// the paper's variant); this only keeps an order the kernel would take as "freeze" from
/// reaching it. Linux stamps each packet's earliest departure at `previous + len / rate` and
/// a later rate does not move a stamp already taken: at 100 kbit/s a minimum TSO burst
/// (2 segments, ~2.9 kB) waits at most ~0.23 s, so a socket whose order fell to the clamp —
/// and whose mlccd then died — resumes within the orders' expiry plus that, where 1 B/s would
/// hold it ~3000 s.
pub const MIN_ORDER_BYTES_PER_SEC: u64 = 12_500;

fn to_bpf_key(k: &SocketKey) -> mlcc_bpf::SocketKey {
    mlcc_bpf::SocketKey::new(k.netns_cookie, k.src, k.dst)
}

fn from_bpf_key(k: &mlcc_bpf::SocketKey) -> SocketKey {
    SocketKey::new(k.netns_cookie(), k.src(), k.dst())
}

/// An order in mlcc-bpf's terms, clamped to [`MIN_ORDER_BYTES_PER_SEC`]; a fill class becomes
/// its DSCP ([`mlcc_bpf::classes::fill_dscp`]).
pub fn to_bpf_order(o: &RateOrder) -> mlcc_bpf::RateOrder {
    mlcc_bpf::RateOrder {
        key: to_bpf_key(&o.key),
        rate: mlcc_bpf::Rate::from_bytes_per_sec(o.bytes_per_sec.max(MIN_ORDER_BYTES_PER_SEC))
            .expect("clamped above zero"),
        expiry: mlcc_bpf::Expiry::After(o.expiry),
        fill: o.fill.and_then(mlcc_bpf::classes::fill_dscp),
    }
}

fn from_bpf_stats(s: &mlcc_bpf::SocketStats) -> SocketStats {
    SocketStats {
        bytes_sent: s.bytes_sent,
        bytes_acked: s.bytes_acked,
        retransmits: s.retransmits,
        srtt: s.srtt,
        min_rtt: s.min_rtt,
        delivery_rate_bytes_per_sec: s.delivery_rate_bytes_per_sec,
        queued_bytes: s.queued_bytes.map(u64::from),
        inode: s.inode,
    }
}

impl DatapathPort {
    /// A datapath that enforces the orders (the BPF one).
    pub fn enforcing(name: &'static str, dp: impl mlcc_bpf::Datapath + Send + 'static) -> Self {
        DatapathPort {
            inner: Box::new(dp),
            enforcing: true,
            name,
        }
    }

    /// `--datapath dry-run`: plans are computed and published, orders only remembered.
    pub fn dry_run() -> Self {
        DatapathPort {
            inner: Box::new(MemoryDatapath::new()),
            enforcing: false,
            name: "dry-run",
        }
    }

    /// A test's shared in-memory datapath, counted as enforcing.
    pub fn memory(dp: MemoryDatapath) -> Self {
        Self::enforcing("memory", dp)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// False when orders are remembered but not enforced (dry run): shown in status and metrics.
    pub fn enforces(&self) -> bool {
        self.enforcing
    }

    pub fn set_rates(&mut self, orders: &[RateOrder]) -> Result<(), DatapathError> {
        let v: Vec<mlcc_bpf::RateOrder> = orders.iter().map(to_bpf_order).collect();
        self.inner.set_rates(&v)
    }

    /// Removes orders; the sockets fall back to Reno. Unknown keys are ignored.
    pub fn clear_rates(&mut self, keys: &[SocketKey]) -> Result<(), DatapathError> {
        let v: Vec<mlcc_bpf::SocketKey> = keys.iter().map(to_bpf_key).collect();
        self.inner.clear_rates(&v)
    }

    /// Stale ssthresh values the CC repaired since it was loaded; None where not counted.
    pub fn ssthresh_repairs(&self) -> Result<Option<u64>, DatapathError> {
        self.inner.ssthresh_repairs()
    }

    /// Measurements of every socket the CC manages.
    pub fn read_stats(&self) -> Result<Vec<(SocketKey, SocketStats)>, DatapathError> {
        Ok(self
            .inner
            .read_stats()?
            .iter()
            .map(|(k, s)| (from_bpf_key(k), from_bpf_stats(s)))
            .collect())
    }
}

#[derive(Debug, Default)]
struct MemoryState {
    dp: mlcc_bpf::MemoryDatapath,
    /// The orders as given, for tests to inspect (mlcc-bpf keeps only rate and deadline).
    orders: BTreeMap<SocketKey, RateOrder>,
    fail: Option<String>,
}

/// mlcc-bpf's in-memory datapath, shared: a test keeps a clone to play the kernel (sockets,
/// counters) and read the orders while the daemon owns another.
#[derive(Clone, Debug, Default)]
pub struct MemoryDatapath {
    state: Arc<Mutex<MemoryState>>,
}

fn stats_zero() -> mlcc_bpf::SocketStats {
    mlcc_bpf::SocketStats {
        bytes_sent: 0,
        bytes_acked: 0,
        retransmits: 0,
        srtt: Duration::ZERO,
        min_rtt: None,
        delivery_rate_bytes_per_sec: 0,
        pacing: mlcc_bpf::Pacing::Fallback,
        cwnd_segments: 10,
        delivered_segments: 0,
        updated: mlcc_bpf::MonotonicNs(0),
        queued_bytes: None,
        inode: mlcc_bpf::SocketInode::Unrecorded,
    }
}

impl MemoryDatapath {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        // A test that panicked while holding the lock poisoned it; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(s: &MemoryState) -> Result<(), DatapathError> {
        match &s.fail {
            Some(f) => Err(DatapathError::Io {
                what: "memory datapath".into(),
                source: std::io::Error::other(f.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Adds or replaces a socket's counters.
    pub fn set_stats(&self, key: SocketKey, stats: SocketStats) {
        let mut st = stats_zero();
        st.bytes_sent = stats.bytes_sent;
        st.bytes_acked = stats.bytes_acked;
        st.retransmits = stats.retransmits;
        st.srtt = stats.srtt;
        st.min_rtt = stats.min_rtt;
        st.delivery_rate_bytes_per_sec = stats.delivery_rate_bytes_per_sec;
        st.queued_bytes = stats
            .queued_bytes
            .map(|q| u32::try_from(q).unwrap_or(u32::MAX));
        st.inode = stats.inode;
        self.lock().dp.upsert_socket(to_bpf_key(&key), st);
    }

    /// Adds `bytes` to a socket's sent and acked counters (creating it).
    pub fn deliver(&self, key: SocketKey, bytes: u64) {
        let mut s = self.lock();
        let k = to_bpf_key(&key);
        let mut st =
            s.dp.read_stats()
                .ok()
                .and_then(|v| v.into_iter().find(|(x, _)| *x == k).map(|(_, st)| st))
                .unwrap_or_else(stats_zero);
        st.bytes_sent += bytes;
        st.bytes_acked += bytes;
        s.dp.upsert_socket(k, st);
    }

    pub fn remove_socket(&self, key: &SocketKey) {
        let mut s = self.lock();
        s.dp.close_socket(&to_bpf_key(key));
        s.orders.remove(key);
    }

    /// Makes every call fail with `reason` (None: work again).
    pub fn set_failure(&self, reason: Option<&str>) {
        self.lock().fail = reason.map(str::to_string);
    }

    /// The last order given for `key`, if not cleared since.
    pub fn order(&self, key: &SocketKey) -> Option<RateOrder> {
        self.lock().orders.get(key).copied()
    }

    pub fn orders(&self) -> Vec<RateOrder> {
        self.lock().orders.values().copied().collect()
    }

    /// The rate the CC would pace `key` at now (`None`: the fallback CC, e.g. after expiry).
    pub fn effective_rate(&self, key: &SocketKey) -> Option<u64> {
        self.lock()
            .dp
            .effective_rate(&to_bpf_key(key))
            .map(mlcc_bpf::Rate::bytes_per_sec)
    }
}

impl mlcc_bpf::Datapath for MemoryDatapath {
    fn set_rates(&mut self, orders: &[mlcc_bpf::RateOrder]) -> Result<(), DatapathError> {
        let mut s = self.lock();
        Self::fail(&s)?;
        for o in orders {
            let key = from_bpf_key(&o.key);
            let expiry = match o.expiry {
                mlcc_bpf::Expiry::After(d) => d,
                mlcc_bpf::Expiry::Never => Duration::MAX,
            };
            s.orders.insert(
                key,
                RateOrder {
                    key,
                    bytes_per_sec: o.rate.bytes_per_sec(),
                    expiry,
                    fill: o.fill.map(mlcc_bpf::classes::fill_class),
                },
            );
        }
        s.dp.set_rates(orders)
    }

    fn clear_rates(&mut self, keys: &[mlcc_bpf::SocketKey]) -> Result<(), DatapathError> {
        let mut s = self.lock();
        Self::fail(&s)?;
        for k in keys {
            s.orders.remove(&from_bpf_key(k));
        }
        s.dp.clear_rates(keys)
    }

    fn read_stats(
        &self,
    ) -> Result<Vec<(mlcc_bpf::SocketKey, mlcc_bpf::SocketStats)>, DatapathError> {
        let s = self.lock();
        Self::fail(&s)?;
        s.dp.read_stats()
    }

    fn sockets(&self) -> Result<Vec<mlcc_bpf::SocketKey>, DatapathError> {
        let s = self.lock();
        Self::fail(&s)?;
        s.dp.sockets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_converts_and_the_shared_memory_datapath_remembers_and_fails_on_demand() {
        let mem = MemoryDatapath::new();
        let mut d = DatapathPort::memory(mem.clone());
        let k = SocketKey::new(
            1,
            "[::ffff:10.0.0.1]:5000".parse().unwrap(),
            "10.0.0.2:80".parse().unwrap(),
        );
        assert_eq!(k.src, "10.0.0.1:5000".parse().unwrap());
        mem.deliver(k, 100);
        mem.deliver(k, 50);
        let stats = d.read_stats().unwrap();
        assert_eq!((stats[0].0, stats[0].1.bytes_acked), (k, 150));
        let o = RateOrder {
            key: k,
            bytes_per_sec: 5_000_000,
            expiry: Duration::from_millis(180),
            fill: None,
        };
        d.set_rates(&[o]).unwrap();
        assert_eq!(mem.order(&k), Some(o));
        assert_eq!(mem.effective_rate(&k), Some(5_000_000));
        // A zero (or tiny) rate is paced at the safety clamp, never handed to the kernel as 0;
        // a rate above it, however low for a policy, is the policy's to give.
        d.set_rates(&[RateOrder {
            bytes_per_sec: 0,
            ..o
        }])
        .unwrap();
        assert_eq!(mem.effective_rate(&k), Some(MIN_ORDER_BYTES_PER_SEC));
        d.set_rates(&[RateOrder {
            bytes_per_sec: 20_000,
            ..o
        }])
        .unwrap();
        assert_eq!(mem.effective_rate(&k), Some(20_000));
        mem.set_failure(Some("gone"));
        assert!(d.read_stats().unwrap_err().to_string().contains("gone"));
        mem.set_failure(None);
        d.clear_rates(&[k]).unwrap();
        assert!(mem.orders().is_empty());
        assert_eq!(mem.effective_rate(&k), None);
        assert!(!DatapathPort::dry_run().enforces());
        // Orders expire in the datapath: a dead daemon releases its flows.
        d.set_rates(&[RateOrder {
            expiry: Duration::ZERO,
            ..o
        }])
        .unwrap();
        assert_eq!(mem.effective_rate(&k), None);
    }

    #[test]
    fn equal_keys_hash_alike_and_keys_that_differ_in_any_part_are_told_apart() {
        use std::hash::BuildHasher;
        let h = std::collections::hash_map::RandomState::new();
        let key = |ns: u64, src: &str, dst: &str| {
            SocketKey::new(ns, src.parse().unwrap(), dst.parse().unwrap())
        };
        let k = key(1, "10.0.0.1:5000", "10.0.0.2:80");
        // An IPv4-mapped address is the same socket as its IPv4 form.
        let mapped = key(1, "[::ffff:10.0.0.1]:5000", "10.0.0.2:80");
        assert_eq!((k, h.hash_one(k)), (mapped, h.hash_one(mapped)));
        let others = [
            key(2, "10.0.0.1:5000", "10.0.0.2:80"),
            key(1, "10.0.0.3:5000", "10.0.0.2:80"),
            key(1, "10.0.0.1:5001", "10.0.0.2:80"),
            key(1, "10.0.0.1:5000", "10.0.0.4:80"),
            key(1, "10.0.0.1:5000", "10.0.0.2:81"),
            key(1, "10.0.0.2:80", "10.0.0.1:5000"),
            key(1, "[fd00::1]:5000", "10.0.0.2:80"),
        ];
        let mut hashes: Vec<u64> = others.iter().map(|o| h.hash_one(o)).collect();
        hashes.push(h.hash_one(k));
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), others.len() + 1, "a hash collides");
        assert!(others.iter().all(|o| *o != k));
    }

    /// The kernel datapath must move into the daemon's tokio task.
    #[test]
    fn kernel_datapath_is_send() {
        fn send<T: Send + 'static>() {}
        send::<mlcc_bpf::KernelDatapath>();
    }
}
