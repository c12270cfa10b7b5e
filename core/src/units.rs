//! Units used everywhere in mlcc: bytes, bytes per second and durations.
//!
//! Code and wire carry plain bytes and bytes/s (docs/design.md §3). Human spellings such as
//! `"25Gbit"`, `"1.2GB"` or `"60ms"` are accepted only at the edges (config files, CLI flags)
//! through the `parse_*` functions here, which reject anything ambiguous with a clear message.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A byte count (sizes, cumulative counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

/// A rate in bytes per second. A float because plans split bytes across slots and fractions
/// matter there; it is always finite and non-negative when produced by this crate.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct BytesPerSec(pub f64);

impl Bytes {
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
}

impl BytesPerSec {
    pub const ZERO: BytesPerSec = BytesPerSec(0.0);

    /// From bits per second, the unit operators think of link speeds in.
    pub fn from_bits_per_sec(bits: f64) -> Self {
        BytesPerSec(bits / 8.0)
    }

    pub fn bits_per_sec(self) -> f64 {
        self.0 * 8.0
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// Why a human-spelled quantity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("empty value (expected something like {example:?})")]
    Empty { example: &'static str },
    #[error("{input:?}: no number found (expected something like {example:?})")]
    NoNumber {
        input: String,
        example: &'static str,
    },
    #[error("{input:?}: unknown unit {unit:?} (accepted: {accepted})")]
    UnknownUnit {
        input: String,
        unit: String,
        accepted: &'static str,
    },
    #[error("{input:?}: value must be finite and not negative")]
    OutOfRange { input: String },
}

fn split_number(input: &str, example: &'static str) -> Result<(f64, String), UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty { example });
    }
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    if num.is_empty() {
        return Err(UnitError::NoNumber {
            input: input.to_string(),
            example,
        });
    }
    let value: f64 = num.parse().map_err(|_| UnitError::NoNumber {
        input: input.to_string(),
        example,
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(UnitError::OutOfRange {
            input: input.to_string(),
        });
    }
    Ok((value, unit.trim().to_string()))
}

const BYTE_UNITS: &str = "B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024)";

/// Parses a size such as `"1.2GB"`, `"528MiB"`, `"4096"` (bytes).
pub fn parse_bytes(input: &str) -> Result<Bytes, UnitError> {
    let (v, unit) = split_number(input, "1.2GB")?;
    let mult: f64 = match unit.as_str() {
        "" | "B" | "b" => 1.0,
        "K" | "KB" | "kB" | "k" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit,
                accepted: BYTE_UNITS,
            });
        }
    };
    let bytes = (v * mult).round();
    if bytes > u64::MAX as f64 {
        return Err(UnitError::OutOfRange {
            input: input.to_string(),
        });
    }
    Ok(Bytes(bytes as u64))
}

const RATE_UNITS: &str = "bit, Kbit, Mbit, Gbit, Tbit (also bps, Kbps, ...), B/s, KB/s, MB/s, GB/s";

/// Parses a rate such as `"25Gbit"`, `"10Gbps"`, `"1.5GB/s"`. A bare number is refused:
/// bits versus bytes is the one mistake an operator must never make silently.
pub fn parse_rate(input: &str) -> Result<BytesPerSec, UnitError> {
    let (v, unit) = split_number(input, "25Gbit")?;
    // A finite number times a unit can still overflow to infinity ("1e308" digits and "Kbit"),
    // and an infinite capacity would swallow every booking on the link.
    let finite = |r: BytesPerSec| {
        if r.0.is_finite() {
            Ok(r)
        } else {
            Err(UnitError::OutOfRange {
                input: input.to_string(),
            })
        }
    };
    let bits = |m: f64| finite(BytesPerSec::from_bits_per_sec(v * m));
    let bytes = |m: f64| finite(BytesPerSec(v * m));
    match unit.as_str() {
        "bit" | "bps" | "bit/s" => bits(1.0),
        "Kbit" | "kbit" | "Kbps" | "kbps" | "Kbit/s" => bits(1e3),
        "Mbit" | "mbit" | "Mbps" | "mbps" | "Mbit/s" => bits(1e6),
        "Gbit" | "gbit" | "Gbps" | "gbps" | "Gbit/s" => bits(1e9),
        "Tbit" | "tbit" | "Tbps" | "tbps" | "Tbit/s" => bits(1e12),
        "B/s" | "Bps" => bytes(1.0),
        "KB/s" | "kB/s" => bytes(1e3),
        "MB/s" => bytes(1e6),
        "GB/s" => bytes(1e9),
        _ => Err(UnitError::UnknownUnit {
            input: input.to_string(),
            unit,
            accepted: RATE_UNITS,
        }),
    }
}

const DURATION_UNITS: &str = "ns, us, ms, s, m";

/// Parses a duration such as `"60ms"`, `"1.5s"`, `"250us"`. A bare number is refused.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let (v, unit) = split_number(input, "60ms")?;
    let secs = match unit.as_str() {
        "ns" => v * 1e-9,
        "us" | "µs" => v * 1e-6,
        "ms" => v * 1e-3,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit,
                accepted: DURATION_UNITS,
            });
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| UnitError::OutOfRange {
        input: input.to_string(),
    })
}

impl FromStr for Bytes {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_bytes(s)
    }
}

impl FromStr for BytesPerSec {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_rate(s)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if b >= 1e9 {
            write!(f, "{:.2}GB", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{:.2}MB", b / 1e6)
        } else if b >= 1e3 {
            write!(f, "{:.2}KB", b / 1e3)
        } else {
            write!(f, "{}B", self.0)
        }
    }
}

impl fmt::Display for BytesPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.bits_per_sec();
        if bits >= 1e9 {
            write!(f, "{:.3}Gbit", bits / 1e9)
        } else if bits >= 1e6 {
            write!(f, "{:.3}Mbit", bits / 1e6)
        } else if bits >= 1e3 {
            write!(f, "{:.3}Kbit", bits / 1e3)
        } else {
            write!(f, "{:.0}bit", bits)
        }
    }
}

/// Serialized as a number of bytes; deserialized from a number or a human string.
impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Bytes(n)),
            Raw::S(s) => parse_bytes(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Serialized as bytes/s; deserialized from a number of bytes/s or a human string.
impl Serialize for BytesPerSec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for BytesPerSec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        let v = match Raw::deserialize(d)? {
            Raw::N(n) => BytesPerSec(n),
            Raw::S(s) => parse_rate(&s).map_err(serde::de::Error::custom)?,
        };
        if !v.0.is_finite() || v.0 < 0.0 {
            return Err(serde::de::Error::custom(
                "rate must be finite and not negative",
            ));
        }
        Ok(v)
    }
}

/// Serde helper for `Duration` fields spelled like `"60ms"` in config files.
pub mod human_duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1e3))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1.2GB").unwrap(), Bytes(1_200_000_000));
        assert_eq!(parse_bytes("528MiB").unwrap(), Bytes(528 * 1024 * 1024));
        assert_eq!(parse_bytes("4096").unwrap(), Bytes(4096));
        assert_eq!(parse_bytes(" 98 MB ").unwrap(), Bytes(98_000_000));
        assert_eq!(parse_bytes("1_000B").unwrap(), Bytes(1000));
    }

    #[test]
    fn parses_rates() {
        assert_eq!(parse_rate("25Gbit").unwrap(), BytesPerSec(25e9 / 8.0));
        assert_eq!(parse_rate("10Gbps").unwrap(), BytesPerSec(1.25e9));
        assert_eq!(parse_rate("1.5GB/s").unwrap(), BytesPerSec(1.5e9));
        assert_eq!(parse_rate("100Mbit").unwrap(), BytesPerSec(12.5e6));
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("60ms").unwrap(), Duration::from_millis(60));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
    }

    #[test]
    fn refuses_bad_input_with_reasons() {
        let e = parse_rate("25").unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
        let e = parse_rate("25Gbyte").unwrap_err();
        assert!(e.to_string().contains("\"Gbyte\""), "{e}");
        assert!(matches!(parse_bytes(""), Err(UnitError::Empty { .. })));
        assert!(matches!(parse_bytes("GB"), Err(UnitError::NoNumber { .. })));
        assert!(matches!(
            parse_bytes("-5GB"),
            Err(UnitError::NoNumber { .. })
        ));
        assert!(matches!(
            parse_bytes("1.2.3GB"),
            Err(UnitError::NoNumber { .. })
        ));
        assert!(parse_duration("60").is_err());
        assert!(parse_bytes("99999999999999TB").is_err());
    }

    /// Found by the `units_text` fuzz target: the number is finite, the rate overflowed.
    #[test]
    fn a_rate_that_overflows_is_refused() {
        let huge = format!("1797{}Kbit", "0".repeat(305));
        assert!(matches!(
            parse_rate(&huge),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!(parse_rate(&format!("1797{}GB/s", "0".repeat(300))).is_err());
    }

    #[test]
    fn display_round_trips_roughly() {
        assert_eq!(
            BytesPerSec::from_bits_per_sec(25e9).to_string(),
            "25.000Gbit"
        );
        assert_eq!(Bytes(1_200_000_000).to_string(), "1.20GB");
    }
}
