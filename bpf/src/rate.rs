//! What mlccd orders for a socket: a pacing rate and how long the order holds.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::clock::Deadline;
use crate::key::SocketKey;

/// A pacing rate in bytes per second (docs/design.md §3). Never zero: a zero rate would freeze the
/// flow, and "no order" is expressed by clearing the entry instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Rate(NonZeroU64);

impl Rate {
    pub fn from_bytes_per_sec(bytes_per_sec: u64) -> Option<Self> {
        NonZeroU64::new(bytes_per_sec).map(Self)
    }

    /// Rounds down to whole bytes; `None` below 8 bit/s.
    pub fn from_bits_per_sec(bits_per_sec: u64) -> Option<Self> {
        Self::from_bytes_per_sec(bits_per_sec / 8)
    }

    pub fn bytes_per_sec(self) -> u64 {
        self.0.get()
    }

    pub fn bits_per_sec(self) -> u64 {
        self.0.get().saturating_mul(8)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}Mbit", self.bits_per_sec() as f64 / 1e6)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate {input:?}: {why} (examples: 300Mbit, 1.5Gbit, 25MB, 12500000)")]
pub struct ParseRateError {
    input: String,
    why: &'static str,
}

/// Human input at the CLI edge: `<number><unit>`, units bit|Kbit|Mbit|Gbit|Tbit (bits per
/// second, powers of 1000) or B|KB|MB|GB (bytes per second); a bare number is bytes per second.
impl FromStr for Rate {
    type Err = ParseRateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| ParseRateError {
            input: s.to_owned(),
            why,
        };
        let lower = s.trim().to_ascii_lowercase();
        let t = lower.strip_suffix("/s").unwrap_or(&lower);
        // "Mbps" is megabits: rewrite the suffix to the "bit" spelling.
        let t = match t.strip_suffix("bps") {
            Some(prefix) => format!("{prefix}bit"),
            None => t.to_owned(),
        };
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| err("not a number"))?;
        let bytes_per_unit = match unit.trim() {
            "" | "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "bit" => 1.0 / 8.0,
            "kbit" => 1e3 / 8.0,
            "mbit" => 1e6 / 8.0,
            "gbit" => 1e9 / 8.0,
            "tbit" => 1e12 / 8.0,
            _ => return Err(err("unknown unit")),
        };
        let bytes = value * bytes_per_unit;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(err("too large"));
        }
        Rate::from_bytes_per_sec(bytes as u64).ok_or_else(|| err("must be at least 1 byte/s"))
    }
}

/// How long an order holds. The CC falls back to its fallback (Cubic or Reno) once it passes, so a daemon that stops
/// renewing its orders (crash, hang) releases its flows instead of pinning stale rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expiry {
    Never,
    After(Duration),
}

impl Expiry {
    pub(crate) fn deadline(self) -> Deadline {
        match self {
            Expiry::Never => Deadline::Never,
            Expiry::After(d) => Deadline::after(d),
        }
    }
}

/// A DSCP (1..=63) a socket's bytes beyond its guaranteed rate are marked with: the fill class
/// switches serve only with what the default class (DSCP 0) leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Dscp(u8);

impl Dscp {
    /// `None` for 0 (the default class, never a fill class) and above 63.
    pub fn new(dscp: u8) -> Option<Self> {
        (1..=63).contains(&dscp).then_some(Dscp(dscp))
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

/// One socket's order: paced at `rate`; or, with `fill`, guaranteed `rate` in the default class
/// and loss-reactive beyond it, the bytes beyond marked with the fill class's DSCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateOrder {
    pub key: SocketKey,
    pub rate: Rate,
    pub expiry: Expiry,
    pub fill: Option<Dscp>,
}

/// Layout of `struct mlcc_rate`.
pub(crate) mod layout {
    pub const SIZE: usize = 24;
    pub const BYTES_PER_SEC: usize = 0;
    pub const EXPIRES_NS: usize = 8;
    pub const FILL_DSCP: usize = 16;
}

pub(crate) fn to_raw(order: &RateOrder, deadline: Deadline) -> [u8; layout::SIZE] {
    let mut raw = [0u8; layout::SIZE];
    raw[layout::BYTES_PER_SEC..layout::BYTES_PER_SEC + 8]
        .copy_from_slice(&order.rate.bytes_per_sec().to_ne_bytes());
    raw[layout::EXPIRES_NS..layout::EXPIRES_NS + 8]
        .copy_from_slice(&deadline.as_raw_ns().to_ne_bytes());
    let dscp = u32::from(order.fill.map_or(0, Dscp::get));
    raw[layout::FILL_DSCP..layout::FILL_DSCP + 4].copy_from_slice(&dscp.to_ne_bytes());
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_human_rates() {
        assert_eq!(
            "300Mbit".parse::<Rate>().unwrap().bytes_per_sec(),
            37_500_000
        );
        assert_eq!(
            "1.5Gbit".parse::<Rate>().unwrap().bits_per_sec(),
            1_500_000_000
        );
        assert_eq!(
            "25MB/s".parse::<Rate>().unwrap().bytes_per_sec(),
            25_000_000
        );
        assert_eq!(
            "12500000".parse::<Rate>().unwrap().bytes_per_sec(),
            12_500_000
        );
        assert_eq!(
            "100mbps".parse::<Rate>().unwrap().bytes_per_sec(),
            12_500_000
        );
    }

    #[test]
    fn a_fill_dscp_is_never_the_default_class() {
        assert_eq!(Dscp::new(0), None);
        assert_eq!(Dscp::new(64), None);
        assert_eq!(Dscp::new(1).map(Dscp::get), Some(1));
        assert_eq!(Dscp::new(63).map(Dscp::get), Some(63));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["", "fast", "0", "3furlongs", "1e400Gbit", "-5Mbit", "4bit"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad} parsed");
        }
    }
}
