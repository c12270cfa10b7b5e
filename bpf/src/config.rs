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
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(invalid("only ASCII letters, digits, '_' and '-'"));
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

pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/mlcc";

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub cc_name: CcName,
    /// A directory on a bpffs; created if missing (and /sys/fs/bpf mounted if it is not).
    pub pin_dir: PathBuf,
    pub cwnd: CwndPolicy,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            cc_name: CcName::default(),
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            cwnd: CwndPolicy::default(),
        }
    }
}

/// Layout of `struct mlcc_config`.
pub(crate) mod layout {
    pub const SIZE: usize = 32;
    pub const CC_NAME: usize = 0;
    pub const CWND_GAIN_PCT: usize = 16;
    pub const MIN_CWND_SEGS: usize = 20;
    pub const RTT_FLOOR_US: usize = 24;
}

pub(crate) fn config_to_raw(name: &CcName, cwnd: CwndPolicy) -> [u8; layout::SIZE] {
    let mut raw = [0u8; layout::SIZE];
    let mut put = |at: usize, b: &[u8]| raw[at..at + b.len()].copy_from_slice(b);
    put(layout::CC_NAME, &name.to_c());
    put(layout::CWND_GAIN_PCT, &cwnd.gain_pct.to_ne_bytes());
    put(layout::MIN_CWND_SEGS, &cwnd.min_segments.to_ne_bytes());
    put(layout::RTT_FLOOR_US, &cwnd.rtt_floor_us.to_ne_bytes());
    raw
}

pub(crate) fn config_from_raw(raw: &[u8]) -> Option<(CcName, CwndPolicy)> {
    let raw: &[u8; layout::SIZE] = raw.try_into().ok()?;
    let name = CcName::from_c(&raw[layout::CC_NAME..layout::CC_NAME + CC_NAME_MAX])?;
    let word = |at: usize| u32::from_ne_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    let floor = Duration::from_micros(word(layout::RTT_FLOOR_US).into());
    let cwnd = CwndPolicy::new(
        word(layout::CWND_GAIN_PCT),
        word(layout::MIN_CWND_SEGS),
        floor,
    )
    .ok()?;
    Some((name, cwnd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_fit_the_kernel() {
        assert!(CcName::new("mlcc").is_ok());
        assert!(CcName::new("mlcc_t12345_678").is_ok());
        assert!(CcName::new("").is_err());
        assert!(CcName::new("0123456789abcdef").is_err());
        assert!(CcName::new("a/b").is_err());
    }

    #[test]
    fn config_round_trip() {
        let n = CcName::new("x-1").unwrap();
        let c = CwndPolicy::new(150, 8, Duration::from_micros(250)).unwrap();
        assert_eq!(config_from_raw(&config_to_raw(&n, c)), Some((n, c)));
        let ms = Duration::from_millis(1);
        assert!(CwndPolicy::new(50, 4, ms).is_err());
        assert!(CwndPolicy::new(200, 1, ms).is_err());
        assert!(CwndPolicy::new(200, 4, Duration::from_secs(1)).is_err());
    }
}
