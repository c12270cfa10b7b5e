//! What trainers send each other: framed transfers whose payload every receiver verifies byte
//! for byte against the pattern the sender must have used (stronger than a checksum: any lost,
//! duplicated, reordered or corrupted byte fails the job).

use std::io::{self, Read, Write};
use std::sync::OnceLock;

const MAGIC: u32 = 0x4d4c_4343; // "MLCC"
const HEADER: usize = 24;
/// Length of the shared pattern; a prime so offsets of different transfers rarely line up.
const PATTERN_LEN: usize = (1 << 20) + 7;

/// The same pseudo-random bytes in every process (splitmix64 from a fixed seed).
fn pattern() -> &'static [u8] {
    static P: OnceLock<Vec<u8>> = OnceLock::new();
    P.get_or_init(|| {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut v = Vec::with_capacity(2 * PATTERN_LEN + 8);
        while v.len() < PATTERN_LEN {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            v.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        v.truncate(PATTERN_LEN);
        // Stored twice, so any window of up to PATTERN_LEN bytes, wrapped or not, is one slice.
        v.extend_from_within(..);
        v
    })
}

/// Identifies one transfer; the payload's offset into the pattern derives from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub job: u32,
    pub iteration: u32,
    pub step: u32,
    pub sender: u32,
}

impl Tag {
    fn offset(&self) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in [self.job, self.iteration, self.step, self.sender] {
            h = (h ^ u64::from(v)).wrapping_mul(0x0100_0000_01b3);
        }
        (h % PATTERN_LEN as u64) as usize
    }
}

/// A stable 32-bit id for a job name (part of every tag).
pub fn job_hash(job: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Sends one transfer of `len` payload bytes; `on_sent` is told each piece as it is enqueued.
pub fn send(
    w: &mut impl Write,
    tag: Tag,
    len: u64,
    mut on_sent: impl FnMut(u64),
) -> io::Result<()> {
    let len32 = u32::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "transfer over 4 GiB"))?;
    let mut head = [0u8; HEADER];
    head[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    head[4..8].copy_from_slice(&tag.job.to_le_bytes());
    head[8..12].copy_from_slice(&tag.iteration.to_le_bytes());
    head[12..16].copy_from_slice(&tag.step.to_le_bytes());
    head[16..20].copy_from_slice(&tag.sender.to_le_bytes());
    head[20..24].copy_from_slice(&len32.to_le_bytes());
    w.write_all(&head)?;
    let p = pattern();
    let mut off = tag.offset();
    let mut left = len as usize;
    while left > 0 {
        let n = left.min(256 * 1024).min(PATTERN_LEN);
        w.write_all(&p[off..off + n])?;
        on_sent(n as u64);
        off = (off + n) % PATTERN_LEN;
        left -= n;
    }
    Ok(())
}

/// Receives one transfer and checks its header against `want` and every payload byte against
/// the pattern. Returns the payload length; `on_recv` is told each piece as it arrives.
pub fn recv(r: &mut impl Read, want: Tag, mut on_recv: impl FnMut(u64)) -> io::Result<u64> {
    let mut head = [0u8; HEADER];
    r.read_exact(&mut head)?;
    let u = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    if u(0) != MAGIC {
        return Err(corrupt(format!("bad magic {:#x}", u(0))));
    }
    let got = Tag {
        job: u(4),
        iteration: u(8),
        step: u(12),
        sender: u(16),
    };
    if got != want {
        return Err(corrupt(format!("expected transfer {want:?}, got {got:?}")));
    }
    let len = u64::from(u(20));
    let p = pattern();
    let mut off = want.offset();
    let mut left = len as usize;
    let mut buf = vec![0u8; 256 * 1024];
    let mut at = 0u64;
    while left > 0 {
        let want_n = left.min(buf.len());
        let n = r.read(&mut buf[..want_n])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("transfer {want:?} ended after {at} of {len} bytes"),
            ));
        }
        // The window may wrap the pattern: the doubled pattern makes it one slice.
        if buf[..n] != p[off..off + n] {
            let i = buf[..n]
                .iter()
                .zip(&p[off..off + n])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(corrupt(format!(
                "transfer {want:?}: byte {} of {len} differs",
                at + i as u64
            )));
        }
        on_recv(n as u64);
        at += n as u64;
        off = (off + n) % PATTERN_LEN;
        left -= n;
    }
    Ok(len)
}

fn corrupt(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(step: u32) -> Tag {
        Tag {
            job: job_hash("j"),
            iteration: 3,
            step,
            sender: 1,
        }
    }

    #[test]
    fn a_transfer_round_trips_across_the_pattern_wrap() {
        let mut wire = Vec::new();
        let len = 3 * PATTERN_LEN as u64 + 12345;
        let mut sent = 0;
        send(&mut wire, tag(7), len, |n| sent += n).unwrap();
        assert_eq!(sent, len);
        let mut got = 0;
        assert_eq!(
            recv(&mut wire.as_slice(), tag(7), |n| got += n).unwrap(),
            len
        );
        assert_eq!(got, len);
    }

    /// A reader that hands out pieces of awkward sizes, as sockets do.
    struct Dribble<'a>(&'a [u8], usize);

    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = self.1 * 7 % 65_521 + 1;
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn pieces_of_any_size_verify_across_the_wrap() {
        let mut wire = Vec::new();
        let len = 2 * PATTERN_LEN as u64 + 999;
        send(&mut wire, tag(9), len, |_| {}).unwrap();
        assert_eq!(recv(&mut Dribble(&wire, 1), tag(9), |_| {}).unwrap(), len);
    }

    #[test]
    fn a_flipped_byte_a_wrong_tag_or_a_short_stream_fails() {
        let mut wire = Vec::new();
        send(&mut wire, tag(1), 100_000, |_| {}).unwrap();
        let mut bad = wire.clone();
        bad[HEADER + 50_000] ^= 1;
        let e = recv(&mut bad.as_slice(), tag(1), |_| {}).unwrap_err();
        assert!(e.to_string().contains("byte 50000"), "{e}");
        let e = recv(&mut wire.as_slice(), tag(2), |_| {}).unwrap_err();
        assert!(e.to_string().contains("expected transfer"), "{e}");
        let e = recv(&mut &wire[..wire.len() - 1], tag(1), |_| {}).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn transfers_of_different_steps_carry_different_bytes() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        send(&mut a, tag(1), 4096, |_| {}).unwrap();
        send(&mut b, tag(2), 4096, |_| {}).unwrap();
        assert_ne!(a[HEADER..], b[HEADER..]);
    }
}
