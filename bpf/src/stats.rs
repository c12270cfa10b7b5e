//! What the CC measured on a socket, as of its last ACK.

use std::time::Duration;

use serde::Serialize;

use crate::clock::MonotonicNs;

/// Whether the CC was holding a rate order at the socket's last ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Paced at the ordered rate (clamped to the socket's SO_MAX_PACING_RATE).
    Paced { bytes_per_sec: u64 },
    /// No order, or an expired one: plain Reno, unpaced.
    Fallback,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SocketStats {
    /// Includes retransmitted bytes (`tcp_info.tcpi_bytes_sent`).
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    /// Segments retransmitted over the socket's life.
    pub retransmits: u32,
    pub srtt: Duration,
    /// `None` before the first RTT sample.
    pub min_rtt: Option<Duration>,
    /// From the kernel's latest rate sample (delivered segments x MSS over the sample interval).
    pub delivery_rate_bytes_per_sec: u64,
    pub pacing: Pacing,
    pub cwnd_segments: u32,
    /// Segments delivered to the receiver, SACKed ones included (`tcpi_delivered`; wraps at
    /// 2^32): unlike `bytes_acked`, it does not wait for a hole's retransmission to be filled.
    pub delivered_segments: u32,
    /// When these values were taken (CLOCK_MONOTONIC); deltas of `bytes_acked` over deltas of
    /// `updated` give the achieved rate without user-space timer jitter.
    pub updated: MonotonicNs,
    /// Bytes the application wrote that the peer has not acknowledged (`write_seq - snd_una`),
    /// as of the last ACK or the last start of transmission after idle. `None` from a datapath
    /// pinned by an mlcc that did not record it.
    pub queued_bytes: Option<u32>,
    /// The socket's inode number, as `/proc/<pid>/fd` links name it (`socket:[N]`).
    pub inode: SocketInode,
}

/// Which file a socket is, as the CC recorded it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketInode {
    /// The inode number, seen at an ACK once a process held the socket.
    Is(u64),
    /// No ACK since a process held it: a connection not accepted yet, or one closed whose
    /// bytes are still draining.
    NotYet,
    /// A datapath pinned by an mlcc that did not record inodes.
    #[default]
    Unrecorded,
}

/// Layout of `struct mlcc_sock_stats`.
pub(crate) mod layout {
    pub const SIZE: usize = 80;
    /// The layout before `queued_bytes`, as a datapath pinned by an older mlcc has it.
    pub const SIZE_V1: usize = 64;
    /// The layout before `sock_ino`.
    pub const SIZE_V2: usize = 72;
    pub const BYTES_SENT: usize = 0;
    pub const BYTES_ACKED: usize = 8;
    pub const DELIVERY_RATE: usize = 16;
    pub const PACING_RATE: usize = 24;
    pub const UPDATED_NS: usize = 32;
    pub const RETRANSMITS: usize = 40;
    pub const SRTT_US: usize = 44;
    pub const MIN_RTT_US: usize = 48;
    pub const SND_CWND: usize = 52;
    pub const MODE: usize = 56;
    pub const DELIVERED: usize = 60;
    pub const QUEUED: usize = 64;
    pub const SOCK_INO: usize = 72;
}

const MODE_PACED: u32 = 1;

fn u64_at(raw: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[at..at + 8]);
    u64::from_ne_bytes(b)
}

fn u32_at(raw: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&raw[at..at + 4]);
    u32::from_ne_bytes(b)
}

impl SocketStats {
    /// `None` when `raw` is not a stats value's size (this layout's or one of the two before).
    pub(crate) fn from_raw(raw: &[u8]) -> Option<Self> {
        if ![layout::SIZE, layout::SIZE_V2, layout::SIZE_V1].contains(&raw.len()) {
            return None;
        }
        let min_rtt_us = u32_at(raw, layout::MIN_RTT_US);
        Some(Self {
            bytes_sent: u64_at(raw, layout::BYTES_SENT),
            bytes_acked: u64_at(raw, layout::BYTES_ACKED),
            retransmits: u32_at(raw, layout::RETRANSMITS),
            srtt: Duration::from_micros(u32_at(raw, layout::SRTT_US).into()),
            min_rtt: (min_rtt_us != u32::MAX && min_rtt_us != 0)
                .then(|| Duration::from_micros(min_rtt_us.into())),
            delivery_rate_bytes_per_sec: u64_at(raw, layout::DELIVERY_RATE),
            pacing: if u32_at(raw, layout::MODE) == MODE_PACED {
                Pacing::Paced {
                    bytes_per_sec: u64_at(raw, layout::PACING_RATE),
                }
            } else {
                Pacing::Fallback
            },
            cwnd_segments: u32_at(raw, layout::SND_CWND),
            delivered_segments: u32_at(raw, layout::DELIVERED),
            updated: MonotonicNs(u64_at(raw, layout::UPDATED_NS)),
            queued_bytes: (raw.len() >= layout::SIZE_V2).then(|| u32_at(raw, layout::QUEUED)),
            inode: match raw.len() {
                layout::SIZE => match u64_at(raw, layout::SOCK_INO) {
                    0 => SocketInode::NotYet,
                    n => SocketInode::Is(n),
                },
                _ => SocketInode::Unrecorded,
            },
        })
    }

    /// A raw value as the BPF program writes it (for benches that fill the map from user space).
    pub(crate) fn to_raw(self) -> [u8; layout::SIZE] {
        let mut raw = [0u8; layout::SIZE];
        let mut put = |at: usize, b: &[u8]| raw[at..at + b.len()].copy_from_slice(b);
        put(layout::BYTES_SENT, &self.bytes_sent.to_ne_bytes());
        put(layout::BYTES_ACKED, &self.bytes_acked.to_ne_bytes());
        put(
            layout::DELIVERY_RATE,
            &self.delivery_rate_bytes_per_sec.to_ne_bytes(),
        );
        let (mode, pacing) = match self.pacing {
            Pacing::Paced { bytes_per_sec } => (MODE_PACED, bytes_per_sec),
            Pacing::Fallback => (0, 0),
        };
        put(layout::PACING_RATE, &pacing.to_ne_bytes());
        put(layout::UPDATED_NS, &self.updated.0.to_ne_bytes());
        put(layout::RETRANSMITS, &self.retransmits.to_ne_bytes());
        let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        put(layout::SRTT_US, &us(self.srtt).to_ne_bytes());
        put(
            layout::MIN_RTT_US,
            &self.min_rtt.map_or(u32::MAX, us).to_ne_bytes(),
        );
        put(layout::SND_CWND, &self.cwnd_segments.to_ne_bytes());
        put(layout::MODE, &mode.to_ne_bytes());
        put(layout::DELIVERED, &self.delivered_segments.to_ne_bytes());
        put(
            layout::QUEUED,
            &self.queued_bytes.unwrap_or(0).to_ne_bytes(),
        );
        let inode = match self.inode {
            SocketInode::Is(n) => n,
            SocketInode::NotYet | SocketInode::Unrecorded => 0,
        };
        put(layout::SOCK_INO, &inode.to_ne_bytes());
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip() {
        let s = SocketStats {
            bytes_sent: 1,
            bytes_acked: 2,
            retransmits: 3,
            srtt: Duration::from_micros(40),
            min_rtt: Some(Duration::from_micros(20)),
            delivery_rate_bytes_per_sec: 5,
            pacing: Pacing::Paced { bytes_per_sec: 6 },
            cwnd_segments: 7,
            delivered_segments: 9,
            updated: MonotonicNs(8),
            queued_bytes: Some(10),
            inode: SocketInode::Is(11),
        };
        assert_eq!(SocketStats::from_raw(&s.to_raw()), Some(s));
        // A datapath pinned before sock_ino: the rest reads the same, the inode unrecorded.
        let v2 = &s.to_raw()[..layout::SIZE_V2];
        let older = SocketStats {
            inode: SocketInode::Unrecorded,
            ..s
        };
        assert_eq!(SocketStats::from_raw(v2), Some(older));
        // Before queued_bytes: the queue unknown too.
        let v1 = &s.to_raw()[..layout::SIZE_V1];
        let old = SocketStats {
            queued_bytes: None,
            ..older
        };
        assert_eq!(SocketStats::from_raw(v1), Some(old));
        let pending = SocketStats {
            inode: SocketInode::NotYet,
            ..s
        };
        assert_eq!(SocketStats::from_raw(&pending.to_raw()), Some(pending));
        assert_eq!(SocketStats::from_raw(&s.to_raw()[..60]), None);
        let f = SocketStats {
            pacing: Pacing::Fallback,
            min_rtt: None,
            ..s
        };
        assert_eq!(SocketStats::from_raw(&f.to_raw()), Some(f));
    }
}
