//! Settings chosen when the datapath is loaded.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::DatapathError;
use crate::sys::CC_NAME_MAX;

/// The congestion-control name the kernel registers. Names are global in the kernel (one per
/// machine, across namespaces), hence configurable: tests and a second datapath pick others.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CcName(String);

impl CcName {
    pub fn new(name: &str) -> Result<Self, DatapathError> {
        let invalid = |why: &str| DatapathError::Invalid {
            what: "congestion control name",
            why: format!("{name:?}: {why}"),
        };
        if name.is_empty() || name.len() >= CC_NAME_MAX {
            return Err(invalid("must be 1 to 15 bytes"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            // The kernel copies the name with bpf_obj_name_cpy (kernel/bpf/syscall.c), which
            // takes nothing else: a '-' made the struct_ops attach fail with a bare EINVAL.
            return Err(invalid("only ASCII letters, digits, '_' and '.'"));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// NUL-padded, as `tcp_congestion_ops.name` and `mlcc_config.cc_name` hold it.
    pub(crate) fn to_c(&self) -> [u8; CC_NAME_MAX] {
        let mut c = [0u8; CC_NAME_MAX];
        c[..self.0.len()].copy_from_slice(self.0.as_bytes());
        c
    }

    pub(crate) fn from_c(c: &[u8]) -> Option<Self> {
        let end = c.iter().position(|&b| b == 0)?;
        Self::new(std::str::from_utf8(&c[..end]).ok()?).ok()
    }
}

impl Default for CcName {
    fn default() -> Self {
        Self("mlcc".to_owned())
    }
}

impl fmt::Display for CcName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for CcName {
    type Err = DatapathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// How far cwnd may run ahead of the pacer: `gain x rate x max(min_rtt, rtt_floor) / mss`
/// (+ three TSO bursts), never below `min_segments`. Too small and cwnd, not the pacer, limits
/// the flow (ACKs from busy hosts arrive late); too large and a flow whose path is slower than
/// its order queues up to that much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CwndPolicy {
    gain_pct: u32,
    min_segments: u32,
    rtt_floor_us: u32,
}

impl CwndPolicy {
    /// `gain_pct` in 100..=1000 (1x to 10x the BDP), `min_segments` in 2..=10000, `rtt_floor`
    /// at most 100 ms.
    pub fn new(
        gain_pct: u32,
        min_segments: u32,
        rtt_floor: Duration,
    ) -> Result<Self, DatapathError> {
        if !(100..=1000).contains(&gain_pct) {
            return Err(DatapathError::Invalid {
                what: "cwnd gain",
                why: format!("{gain_pct}% is outside 100..=1000%"),
            });
        }
        if !(2..=10_000).contains(&min_segments) {
            return Err(DatapathError::Invalid {
                what: "minimum cwnd",
                why: format!("{min_segments} segments is outside 2..=10000"),
            });
        }
        let rtt_floor_us = u32::try_from(rtt_floor.as_micros())
            .ok()
            .filter(|&us| us <= 100_000)
            .ok_or_else(|| DatapathError::Invalid {
                what: "cwnd RTT floor",
                why: format!("{rtt_floor:?} is above 100 ms"),
            })?;
        Ok(Self {
            gain_pct,
            min_segments,
            rtt_floor_us,
        })
    }

    pub fn rtt_floor(self) -> Duration {
        Duration::from_micros(self.rtt_floor_us.into())
    }

    pub fn gain_pct(self) -> u32 {
        self.gain_pct
    }

    pub fn min_segments(self) -> u32 {
        self.min_segments
    }
}

impl Default for CwndPolicy {
    /// BBR's steady-state cwnd gain and minimum cwnd; an RTT floor of 1 ms, which on the 2-core
    /// testbed keeps a 100 Mbit/s flow at its rate through the ACK delays of a loaded CPU.
    fn default() -> Self {
        Self {
            gain_pct: 200,
            min_segments: 4,
            rtt_floor_us: 1000,
        }
    }
}

/// The least retransmission timeout of a socket on the CC. The kernel's 200 ms is meant for
/// the WAN; in a data centre it is 50-200 RTTs, and under random loss a single lost
/// retransmission then stalls a whole collective that long (measured on the testbed: VGG16 PS at
/// 1 % loss, the iterations that ran 0.2 s long). Applied when a socket joins the CC; the kernel
/// takes no less than two timer ticks (8 ms at HZ=250), so smaller floors are raised to that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoFloor {
    us: u32,
}

impl RtoFloor {
    /// The kernel's own floor (`net.ipv4.tcp_rto_min_us`, the route's `rto_min`).
    pub const KERNEL: Self = Self { us: 0 };
    const MAX: Duration = Duration::from_millis(200);

    /// At most 200 ms, the most the kernel takes; zero means [`Self::KERNEL`].
    pub fn new(floor: Duration) -> Result<Self, DatapathError> {
        if floor > Self::MAX {
            return Err(DatapathError::Invalid {
                what: "RTO floor",
                why: format!("{floor:?} is above the kernel's 200 ms"),
            });
        }
        Ok(Self {
            us: floor.as_micros() as u32,
        })
    }

    /// `None` for the kernel's.
    pub fn get(self) -> Option<Duration> {
        (self.us > 0).then(|| Duration::from_micros(self.us.into()))
    }
}

impl Default for RtoFloor {
    /// 10 ms: above every RTT the testbed's 5 ms queues allow, and 20x below the kernel's.
    fn default() -> Self {
        Self { us: 10_000 }
    }
}

/// The kernel CC a socket runs while it has no order (none yet, its order lapsed, or its job is
/// not scheduled), through the kernel's own functions. Cubic by default, the kernel's own
/// default, so a job mlcc does not schedule runs as it would without mlcc; Reno is what the
/// datapath ran before it could choose. BBR keeps queues short where only its own flows share a
/// link. The fallback is written before the CC is attached and never changes for a datapath:
/// each keeps its state where the others would read theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fallback {
    Reno,
    #[default]
    Cubic,
    Bbr,
}

impl Fallback {
    fn to_raw(self) -> u32 {
        match self {
            Fallback::Reno => 0,
            Fallback::Cubic => 1,
            Fallback::Bbr => 2,
        }
    }

    fn from_raw(v: u32) -> Option<Self> {
        match v {
            0 => Some(Fallback::Reno),
            1 => Some(Fallback::Cubic),
            2 => Some(Fallback::Bbr),
            _ => None,
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fallback::Reno => "reno",
            Fallback::Cubic => "cubic",
            Fallback::Bbr => "bbr",
        })
    }
}

impl FromStr for Fallback {
    type Err = DatapathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "reno" => Ok(Fallback::Reno),
            "cubic" => Ok(Fallback::Cubic),
            "bbr" => Ok(Fallback::Bbr),
            _ => Err(DatapathError::Invalid {
                what: "fallback congestion control",
                why: format!("{s:?}: say cubic, reno or bbr"),
            }),
        }
    }
}

pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/mlcc";

/// How many sockets the datapath keeps counters and orders for at once: the size of its
/// per-socket maps. mlccd reads the counters each slot with one batch lookup, which walks every
/// bucket of the map whether used or not, so the size is what a slot's read costs: at 65,536 it
/// was a tenth of mlccd's CPU with 32 flows. Past the size the least recently updated entries
/// are evicted (idle sockets'; an active one's counters come back on its next ACK, its order at
/// the next slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaxSockets(u32);

impl MaxSockets {
    pub const MIN: u32 = 256;
    pub const MAX: u32 = 1 << 20;

    pub fn new(n: u32) -> Result<Self, DatapathError> {
        if (Self::MIN..=Self::MAX).contains(&n) {
            Ok(MaxSockets(n))
        } else {
            Err(DatapathError::Invalid {
                what: "max sockets",
                why: format!("{n}: from {} to {}", Self::MIN, Self::MAX),
            })
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for MaxSockets {
    /// Room for every training socket of a busy host; a quarter of what the BPF object
    /// declares.
    fn default() -> Self {
        MaxSockets(16384)
    }
}

impl fmt::Display for MaxSockets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for MaxSockets {
    type Err = DatapathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n = s.parse().map_err(|_| DatapathError::Invalid {
            what: "max sockets",
            why: format!("{s:?} is not a number"),
        })?;
        Self::new(n)
    }
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub cc_name: CcName,
    /// A directory on a bpffs; created if missing (and /sys/fs/bpf mounted if it is not).
    pub pin_dir: PathBuf,
    pub cwnd: CwndPolicy,
    pub rto_floor: RtoFloor,
    pub fallback: Fallback,
    pub max_sockets: MaxSockets,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            cc_name: CcName::default(),
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            cwnd: CwndPolicy::default(),
            rto_floor: RtoFloor::default(),
            fallback: Fallback::default(),
            max_sockets: MaxSockets::default(),
        }
    }
}

/// What `struct mlcc_config` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawConfig {
    pub cc_name: CcName,
    pub cwnd: CwndPolicy,
    pub rto_floor: RtoFloor,
    pub fallback: Fallback,
}

/// Layout of `struct mlcc_config`.
pub(crate) mod layout {
    pub const SIZE: usize = 36;
    /// A datapath pinned before the fallback could be chosen: the same fields up to here, and
    /// Reno.
    pub const SIZE_RENO_ONLY: usize = 32;
    pub const CC_NAME: usize = 0;
    pub const CWND_GAIN_PCT: usize = 16;
    pub const MIN_CWND_SEGS: usize = 20;
    pub const RTT_FLOOR_US: usize = 24;
    pub const RTO_MIN_US: usize = 28;
    pub const FALLBACK: usize = 32;
}

impl RawConfig {
    pub(crate) fn to_raw(&self) -> [u8; layout::SIZE] {
        let mut raw = [0u8; layout::SIZE];
        let mut put = |at: usize, b: &[u8]| raw[at..at + b.len()].copy_from_slice(b);
        put(layout::CC_NAME, &self.cc_name.to_c());
        put(layout::CWND_GAIN_PCT, &self.cwnd.gain_pct.to_ne_bytes());
        put(layout::MIN_CWND_SEGS, &self.cwnd.min_segments.to_ne_bytes());
        put(layout::RTT_FLOOR_US, &self.cwnd.rtt_floor_us.to_ne_bytes());
        put(layout::RTO_MIN_US, &self.rto_floor.us.to_ne_bytes());
        put(layout::FALLBACK, &self.fallback.to_raw().to_ne_bytes());
        raw
    }

    /// Either layout: a datapath pinned by an older mlcc has no fallback field and runs Reno.
    pub(crate) fn from_raw(raw: &[u8]) -> Option<Self> {
        let fallback = match raw.len() {
            layout::SIZE => {
                let at = layout::FALLBACK;
                Fallback::from_raw(u32::from_ne_bytes(raw[at..at + 4].try_into().ok()?))?
            }
            layout::SIZE_RENO_ONLY => Fallback::Reno,
            _ => return None,
        };
        let cc_name = CcName::from_c(&raw[layout::CC_NAME..layout::CC_NAME + CC_NAME_MAX])?;
        let word = |at: usize| u32::from_ne_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let us = |at: usize| Duration::from_micros(word(at).into());
        let cwnd = CwndPolicy::new(
            word(layout::CWND_GAIN_PCT),
            word(layout::MIN_CWND_SEGS),
            us(layout::RTT_FLOOR_US),
        )
        .ok()?;
        let rto_floor = RtoFloor::new(us(layout::RTO_MIN_US)).ok()?;
        Some(Self {
            cc_name,
            cwnd,
            rto_floor,
            fallback,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_sockets_takes_256_to_a_million_and_names_the_range_otherwise() {
        assert_eq!(MaxSockets::default().get(), 16384);
        assert_eq!("4096".parse::<MaxSockets>().unwrap().get(), 4096);
        assert_eq!(MaxSockets::new(MaxSockets::MIN).unwrap().get(), 256);
        assert_eq!(MaxSockets::new(MaxSockets::MAX).unwrap().get(), 1 << 20);
        for bad in ["255", "1048577", "0", "-1", "many"] {
            let e = bad.parse::<MaxSockets>().unwrap_err().to_string();
            assert!(e.contains("max sockets"), "{bad}: {e}");
        }
        assert!(
            "100"
                .parse::<MaxSockets>()
                .unwrap_err()
                .to_string()
                .contains("256")
        );
    }

    #[test]
    fn names_must_fit_the_kernel() {
        assert!(CcName::new("mlcc").is_ok());
        assert!(CcName::new("mlcc_t12345_678").is_ok());
        assert!(CcName::new("").is_err());
        assert!(CcName::new("0123456789abcdef").is_err());
        assert!(CcName::new("a/b").is_err());
        assert!(CcName::new("mlcc.t1").is_ok());
        // The kernel refuses these (EINVAL at attach): say so before loading.
        assert!(CcName::new("mlcc-t1").is_err());
    }

    #[test]
    fn config_round_trip() {
        let config = RawConfig {
            cc_name: CcName::new("x_1").unwrap(),
            cwnd: CwndPolicy::new(150, 8, Duration::from_micros(250)).unwrap(),
            rto_floor: RtoFloor::new(Duration::from_millis(12)).unwrap(),
            fallback: Fallback::Reno,
        };
        assert_eq!(RawConfig::from_raw(&config.to_raw()), Some(config.clone()));
        let cubic = RawConfig {
            fallback: Fallback::Cubic,
            ..config.clone()
        };
        assert_eq!(RawConfig::from_raw(&cubic.to_raw()), Some(cubic.clone()));
        // An older datapath's config ends before the fallback and runs Reno.
        let old = &cubic.to_raw()[..layout::SIZE_RENO_ONLY];
        assert_eq!(RawConfig::from_raw(old), Some(config));
        let mut unknown = cubic.to_raw();
        unknown[layout::FALLBACK] = 7;
        assert_eq!(RawConfig::from_raw(&unknown), None);
        assert_eq!("cubic".parse::<Fallback>().unwrap(), Fallback::Cubic);
        assert_eq!("reno".parse::<Fallback>().unwrap().to_string(), "reno");
        assert_eq!("bbr".parse::<Fallback>().unwrap(), Fallback::Bbr);
        assert!("vegas".parse::<Fallback>().is_err());
        for f in [Fallback::Reno, Fallback::Cubic, Fallback::Bbr] {
            assert_eq!(Fallback::from_raw(f.to_raw()), Some(f));
            assert_eq!(f.to_string().parse::<Fallback>().unwrap(), f);
        }
        assert_eq!(RtoFloor::new(Duration::ZERO).unwrap(), RtoFloor::KERNEL);
        assert_eq!(RtoFloor::KERNEL.get(), None);
        assert!(RtoFloor::new(Duration::from_millis(201)).is_err());
        let ms = Duration::from_millis(1);
        assert!(CwndPolicy::new(50, 4, ms).is_err());
        assert!(CwndPolicy::new(200, 1, ms).is_err());
        assert!(CwndPolicy::new(200, 4, Duration::from_secs(1)).is_err());
    }
}
