//! A job's iterations read from the byte totals at which its traffic pauses.
//!
//! Sharing links stretches a job's iterations unevenly, some twice as long as others, and no
//! period stands out of its per-slot bytes. Its bytes per iteration do not vary, and neither do the totals at which it stops: the compute that ends
//! each iteration is a pause at a total that recurs every B bytes. A ring's steps pause too (a
//! rank waits for its predecessor's chunk), at multiples of the chunk, some briefly, most not at
//! all. So:
//!
//! - the chunk is the difference between consecutive pauses' totals that recurs most;
//! - the chunk points run from the oldest pause in phase with the most others;
//! - the iteration is the smallest multiple of the chunk at every one of whose points the
//!   traffic paused (but one in ten, where a paced rank's compute ended before its last chunk
//!   drained), for alike lengths, while most points between did not pause (or paused shorter
//!   than every one of its points) and no finer lattice through its points paused nearly
//!   everywhere too, or mostly and about as long;
//! - or a multiple of that, where one point in m pauses far longer than the others every time
//!   (a ring whose every step waits waits longest for the compute); until that is known, no
//!   reading.
//!
//! Why each guard is there: docs/notes/2026-12-04-learning-by-byte-totals.md and
//! docs/notes/2026-12-05-pauses-read-sooner.md.

use std::collections::VecDeque;

use crate::slot::Slot;

/// A slot that moves at most this many bytes is quiet: the acks of a chunk's last segments,
/// a framework's chatter.
const QUIET_BYTES: u64 = 16 * 1024;
/// The smallest chunk looked for, and how often the difference must recur.
const MIN_CHUNK: u64 = 256 * 1024;
const MIN_RECURRENCES: usize = 3;
/// Two differences between totals recur when within this share of each other.
const SAME_DIFFERENCE: f64 = 0.001;
/// A pause lies on the chunks' lattice when within this share of a chunk of a point of it.
const ON_LATTICE: f64 = 0.002;
/// The most chunks an iteration is looked for in: a ring of five ranks moves eight.
const MAX_CHUNKS: usize = 8;
/// A boundary's pause lasts at least this share of the boundaries' median pause, and at least
/// `MIN_BOUNDARY_SLOTS`.
const BOUNDARY_SHARE: f64 = 0.2;
const MIN_BOUNDARY_SLOTS: u32 = 2;
/// Every other boundary is the iteration's when its pauses are all this many times the other
/// chunk points' median.
const LONGER: f64 = 2.0;
/// A boundary may pass without its pause once in this many.
const HIDDEN_EVERY: usize = 10;
/// A ring's step may wait as long as its compute once in this many steps: its predecessor held
/// back by other jobs' turns.
const HELD_BACK_EVERY: usize = 10;
/// Pauses are alike when none is more than this many times their median: contention stretches
/// a compute's pause now and then.
const ALIKE: f64 = 3.0;
/// Chunk points (beyond the first) needed before any reading: a ring of three ranks moves four
/// chunks an iteration, and two of its iterations show whether every fourth pause is the
/// compute's rather than a step's.
const MIN_POINTS: usize = 8;
/// Chunk points (beyond the first) enough for an iteration of one chunk (a parameter-server
/// worker's, a DDP rank's), where none of their pauses stands out: a ring of up to four ranks
/// moves at most six chunks an iteration, so six points show its compute at least once, and
/// a ring's compute that stands out rules the one-chunk reading out.
const MIN_POINTS_ONE_CHUNK: usize = 6;
/// Pauses kept, and chunk points looked at.
const MAX_PAUSES: usize = 128;
const MAX_POINTS: u64 = 4096;
/// Boundaries looked at again each slot while a reading stands.
const RECHECKED: u64 = 3;

/// Where the traffic stopped: the cumulative bytes then, the quiet slots, and the slot it
/// moved again in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pause {
    pub total: u64,
    pub slots: u32,
    pub resumed: Slot,
}

/// The pauses of one process's traffic.
#[derive(Clone, Debug, Default)]
pub struct Pauses {
    done: VecDeque<Pause>,
    /// The pause under way: the total it began at and its quiet slots so far.
    current: Option<(u64, u32)>,
}

/// An iteration read from the pauses: `bytes` a multiple of `chunk`, boundaries at
/// `first + j · bytes`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ByTotals {
    pub bytes: u64,
    pub chunk: u64,
    pub first: u64,
    /// Slots per iteration, the mean over the boundaries found.
    pub period_slots: f64,
    /// How far the boundaries' pauses stand out from the chunk points between them, 0..1.
    pub clarity: f64,
}

/// Where a total falls against an iteration read from the pauses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    /// Iterations begun at `first` and after, counting from 1.
    pub iteration: u64,
    /// Bytes of it moved: all of them while the traffic waits at its end.
    pub sent: u64,
    /// The slot the traffic moved again after the boundary it began at, if that pause is
    /// still kept.
    pub began: Option<Slot>,
}

impl Pauses {
    /// The slot `slot` moved `moved` bytes, from `before`, after `skipped` slots not observed
    /// (quiet). Says whether a pause ended.
    pub fn observe(&mut self, slot: Slot, before: u64, moved: u64, skipped: u32) -> bool {
        if skipped > 0 {
            self.quiet(before, skipped);
        }
        if moved <= QUIET_BYTES {
            self.quiet(before, 1);
            return false;
        }
        let Some((total, slots)) = self.current.take() else {
            return false;
        };
        self.done.push_back(Pause {
            total,
            slots,
            resumed: slot,
        });
        while self.done.len() > MAX_PAUSES {
            self.done.pop_front();
        }
        true
    }

    fn quiet(&mut self, total: u64, slots: u32) {
        let (_, n) = self.current.get_or_insert((total, 0));
        *n = n.saturating_add(slots);
    }

    /// Quiet slots of the pause under way (0 while the traffic moves).
    pub fn quiet_now(&self) -> u32 {
        self.current.map_or(0, |c| c.1)
    }

    /// The pause ended nearest `total`, if one lies within `tolerance` bytes of it.
    pub fn at(&self, total: u64, tolerance: u64) -> Option<&Pause> {
        self.done
            .iter()
            .rev()
            .find(|p| p.total.abs_diff(total) <= tolerance)
    }

    /// The iteration the pauses show with at least `whole` whole iterations behind `now`
    /// (the total now), if one stands out.
    pub fn find(&self, now: u64, whole: usize) -> Option<ByTotals> {
        if self.done.len() <= whole {
            return None;
        }
        let lattice = Lattice::new(self, self.chunk()?, now);
        if lattice.points.len() <= MIN_POINTS_ONE_CHUNK {
            return None;
        }
        let (k, r) = lattice.smallest(whole)?;
        if lattice.points.len() <= MIN_POINTS && (k > 1 || lattice.one_stands_out()) {
            return None;
        }
        let (k, r) = match lattice.wider(k, r, whole) {
            Wider::No => (k, r),
            Wider::Yes(k, r) => (k, r),
            Wider::NotYet => return None,
        };
        lattice.reading(k, r, whole)
    }

    /// An iteration of `bytes` known before (an estimate withdrawn lately), if the pause just
    /// ended lies `bytes` after another, and that one after another, `whole` iterations
    /// back in all (to the exact tolerance): the job moving in its iterations again, however
    /// many pauses other jobs' turns put between. `clarity` is the withdrawn estimate's.
    pub fn resume(&self, bytes: u64, whole: usize, clarity: f64) -> Option<ByTotals> {
        let last = self.done.back()?;
        if whole == 0 || bytes < MIN_CHUNK {
            return None;
        }
        let points = self.lattice_to(last.total, bytes, whole)?;
        one_chunk(bytes, &points, clarity)
    }

    /// An iteration of `bytes` heard from elsewhere (the bytes a learned peer's iterations move),
    /// if the traffic paused `whole` + 1 times `bytes` apart, to the exact tolerance, the last
    /// time within the last iteration; where several pauses of the last iteration start such a
    /// lattice (a DDP rank pauses between its buckets at the same totals every iteration), the
    /// one that paused longest at its least (the compute's). Its pauses must be alike, each
    /// under `LONGER` times the shortest (a ring's step waiting briefly among them puts the
    /// lattice at a part of the iteration), and stand apart from those between them
    /// ([`apart`]), and no lattice up to `MAX_CHUNKS` times finer may have paused at every
    /// point (either way the compute's pauses fall between: `bytes` a multiple of the
    /// iteration, as a parameter server's may be of a worker's). `clarity` says how far its
    /// pauses stand out of those between.
    pub fn fit(&self, bytes: u64, whole: usize) -> Option<ByTotals> {
        let last = self.done.back()?;
        if whole == 0 || bytes < MIN_CHUNK {
            return None;
        }
        let tolerance = lattice_tolerance(bytes);
        // The oldest pause kept may have begun before the learner looked: its length says
        // nothing.
        let oldest = self.done.front().map(|p| p.total);
        let lengths = |points: &[&Pause]| -> Vec<u32> {
            points
                .iter()
                .filter(|p| Some(p.total) != oldest)
                .map(|p| p.slots)
                .collect()
        };
        let floor = last.total.saturating_sub(bytes);
        let points = self
            .done
            .iter()
            .rev()
            .take_while(|p| p.total > floor)
            .filter_map(|p| self.lattice_to(p.total, bytes, whole))
            .max_by_key(|points| lengths(points).into_iter().min())?;
        let (first, end) = (points[0], points[whole]);
        let at = lengths(&points);
        let between: Vec<u32> = self
            .done
            .iter()
            .filter(|p| p.total > first.total + tolerance && p.total + tolerance < end.total)
            .filter(|p| points.iter().all(|q| q.total.abs_diff(p.total) > tolerance))
            .map(|p| p.slots)
            .collect();
        if !apart(&at, &between)
            || !near_alike(&at)
            || self.finer_paused(first.total, bytes, whole, tolerance)
        {
            return None;
        }
        let clarity = (1.0 - median(&between) / median(&at)).clamp(0.0, 1.0);
        one_chunk(bytes, &points, clarity)
    }

    /// The pauses at `whole` + 1 totals `bytes` apart ending at `end`, oldest first, if the
    /// traffic paused at each (to the exact tolerance).
    fn lattice_to(&self, end: u64, bytes: u64, whole: usize) -> Option<Vec<&Pause>> {
        let tolerance = lattice_tolerance(bytes);
        (0..=whole as u64)
            .rev()
            .map(|j| self.at(end.checked_sub(j * bytes)?, tolerance))
            .collect()
    }

    /// Whether the traffic paused at every point of a lattice `d` times finer than `bytes`
    /// between `first` and `whole` iterations on, for some `d`: `bytes` is then a multiple
    /// of the iteration.
    fn finer_paused(&self, first: u64, bytes: u64, whole: usize, tolerance: u64) -> bool {
        (2..=MAX_CHUNKS as u64).any(|d| {
            let step = bytes / d;
            (1..whole as u64 * d)
                .filter(|j| j % d != 0)
                .all(|j| self.at(first + j * step, tolerance).is_some())
        })
    }

    /// The difference between consecutive pauses' totals that recurs most (at least
    /// `MIN_RECURRENCES` times; the smallest of equals): a stall inside a chunk pauses at a
    /// total no other pause shares, and two such may differ alike once by chance.
    fn chunk(&self) -> Option<u64> {
        let mut d: Vec<u64> = self
            .done
            .iter()
            .zip(self.done.iter().skip(1))
            .filter_map(|(a, b)| b.total.checked_sub(a.total))
            .filter(|&x| x >= MIN_CHUNK)
            .collect();
        d.sort_unstable();
        let near = |x: u64, y: u64| y.abs_diff(x) as f64 <= SAME_DIFFERENCE * x as f64;
        let (n, x) = d
            .iter()
            .map(|&x| (d.iter().filter(|&&y| near(x, y)).count(), x))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))?;
        // The median of the differences that recur: a lattice of many chunks drifts off the
        // pauses by any error in the one it steps by, and `d` is sorted.
        let alike: Vec<u64> = d.iter().copied().filter(|&y| near(x, y)).collect();
        (n >= MIN_RECURRENCES).then(|| alike[alike.len() / 2])
    }
}

/// Whether an iteration is wider than the smallest multiple of the chunk that pauses at each
/// of its points.
enum Wider {
    No,
    Yes(usize, usize),
    NotYet,
}

/// The chunk points from the oldest pause kept up to the total now, and how long the traffic
/// paused at each (0 where it did not).
struct Lattice {
    chunk: u64,
    base: u64,
    /// Per point: the longest pause on it, and the slot the traffic moved again after it.
    points: Vec<(u32, Option<Slot>)>,
}

impl Lattice {
    /// The lattice starts at the oldest pause in phase with the most others: the first pauses
    /// seen may fall anywhere (a process found mid-chunk, quiet before it sent anything).
    fn new(pauses: &Pauses, chunk: u64, now: u64) -> Self {
        let tolerance = ON_LATTICE * chunk as f64;
        let in_phase = |a: u64, b: u64| {
            let d = a.abs_diff(b) % chunk;
            d.min(chunk - d) as f64 <= tolerance
        };
        let phase = pauses
            .done
            .iter()
            .map(|p| {
                let n = pauses
                    .done
                    .iter()
                    .filter(|q| in_phase(p.total, q.total))
                    .count();
                (n, p.total)
            })
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .map_or(0, |(_, t)| t);
        let base = pauses
            .done
            .iter()
            .map(|p| p.total)
            .find(|&t| in_phase(t, phase))
            .unwrap_or(phase);
        // The point reached now is left out: its pause, if any, has not ended.
        let n = (now.saturating_sub(base) / chunk).min(MAX_POINTS) as usize;
        let mut points = vec![(0, None); n];
        for p in pauses.done.iter().filter(|p| p.total >= base) {
            let q = (p.total - base) as f64 / chunk as f64;
            let j = q.round() as usize;
            if (q - q.round()).abs() <= ON_LATTICE && j < n && p.slots >= points[j].0 {
                points[j] = (p.slots, Some(p.resumed));
            }
        }
        Self {
            chunk,
            base,
            points,
        }
    }

    /// The points `r`, `r + k`, … and their pauses. The first point is the oldest pause kept,
    /// which may have begun before the learner looked: its length says nothing.
    fn every(&self, k: usize, r: usize) -> impl Iterator<Item = (usize, u32)> + '_ {
        (r..self.points.len())
            .step_by(k)
            .filter(|&j| j > 0)
            .map(|j| (j, self.points[j].0))
    }

    /// The pauses' lengths at the points of `every(k, r)`.
    fn lengths(&self, k: usize, r: usize) -> Vec<u32> {
        self.every(k, r).map(|(_, s)| s).collect()
    }

    /// The pauses at the points of `every(f, rf)` off the lattice `(k, r)`; `(1, 0)` for
    /// every point between those of `(k, r)`.
    fn off(&self, (f, rf): (usize, usize), (k, r): (usize, usize)) -> Vec<u32> {
        self.every(f, rf)
            .filter(|&(j, _)| j % k != r % k)
            .map(|(_, s)| s)
            .collect()
    }

    /// The pauses at the points of `every(k, r)` that paused (at least `MIN_BOUNDARY_SLOTS`),
    /// and how many points did not.
    fn paused(&self, k: usize, r: usize) -> Paused {
        let mut missed = 0;
        let lengths = self
            .every(k, r)
            .map(|(_, s)| s)
            .filter(|&s| {
                missed += usize::from(s < MIN_BOUNDARY_SLOTS);
                s >= MIN_BOUNDARY_SLOTS
            })
            .collect();
        Paused { lengths, missed }
    }

    /// How many points `r + j·k` did not pause (under `MIN_BOUNDARY_SLOTS`).
    fn missed(&self, k: usize, r: usize) -> usize {
        self.every(k, r)
            .filter(|&(_, s)| s < MIN_BOUNDARY_SLOTS)
            .count()
    }

    /// Whether all points `r + j·k` but one paused (a boundary may pass with a slot's trickle).
    fn mostly_paused(&self, k: usize, r: usize) -> bool {
        self.missed(k, r) <= 1
    }

    /// The smallest multiple of the chunk (and the point it starts at) at every point of which
    /// the traffic paused, over `whole` iterations at least.
    /// Its pauses must be alike, and a lattice wider than the chunk is read only where the
    /// points between its points did not pause, mostly, or stood apart from them
    /// ([`Self::quiet_between`]; equal transfers at random times would otherwise be read at
    /// any of their spacings) and no finer lattice through its points
    /// paused at each of its points too, but perhaps one (two iterations read as one where a
    /// boundary passed without its pause, or one stretched beyond alike).
    fn smallest(&self, whole: usize) -> Option<(usize, usize)> {
        (1..=MAX_CHUNKS)
            .flat_map(|k| (0..k).map(move |r| (k, r)))
            .filter(|&(k, r)| self.every(k, r).count() > whole)
            .find(|&(k, r)| {
                let at = self.paused(k, r);
                let finer_paused = || {
                    (1..k).filter(|f| k % f == 0).any(|f| {
                        self.mostly_paused(f, r % f) || self.finer_alike(f, k, r, &at.lengths)
                    })
                };
                at.all_but_hidden(k, 0)
                    && alike(&at.lengths)
                    && (k == 1 || self.quiet_between(k, r, &at.lengths))
                    && !finer_paused()
            })
    }

    /// Whether the points of the finer lattice `(f, r)` off `(k, r)` (`f` > 1) paused, mostly,
    /// and ours not twice as long (their medians): two iterations read as one where a ring's
    /// compute, hidden now and then, was hidden at every other boundary only.
    fn finer_alike(&self, f: usize, k: usize, r: usize, at: &[u32]) -> bool {
        if f == 1 {
            return false;
        }
        let off = median(&self.off((f, r % f), (k, r)));
        off > 0.0 && LONGER * off > median(at)
    }

    /// Whether the points between those of `(k, r)` did not pause, mostly, or most of them
    /// paused less than half as long as every one of its points, and at most one in
    /// `HELD_BACK_EVERY` as long as their median (a ring's steps wait a few slots for a
    /// predecessor that other jobs hold back, now and then as long as its compute, which is
    /// long every time). Equal transfers at uneven times pause at random: many of those between
    /// pause as long as those on a lattice.
    fn quiet_between(&self, k: usize, r: usize, at: &[u32]) -> bool {
        let between = self.off((1, 0), (k, r));
        median(&between) == 0.0 || apart(at, &between)
    }

    /// Whether the iteration is a wider multiple of the chunk than `(k, r)`: one of its points
    /// in m pausing far longer than the others, each time but perhaps the first seen (a ring
    /// that waits at each of its steps waits longest for the compute), where it paused (it may
    /// miss what `(k, r)` missed: a compute hidden), and no lattice between pauses about as
    /// long off its points. Known once it has done so over `whole` iterations; until then, not
    /// yet known.
    fn wider(&self, k: usize, r: usize, whole: usize) -> Wider {
        let mut not_yet = false;
        let missed = self.missed(k, r);
        for m in 2..=MAX_CHUNKS / k {
            for r2 in (0..m).map(|t| r + t * k) {
                // A boundary whose compute was hidden is not one of the lattice's pauses.
                let at = self.paused(m * k, r2);
                let rest = self.off((k, r), (m * k, r2));
                if at.lengths.is_empty() || rest.is_empty() {
                    continue;
                }
                let finer_alike = || {
                    (2..m)
                        .filter(|d| m % d == 0)
                        .any(|d| self.finer_alike(d * k, m * k, r2, &at.lengths))
                };
                let longer = stand_out(&at.lengths, &rest)
                    && alike(&at.lengths)
                    && alike(&rest)
                    && at.all_but_hidden(m * k, missed)
                    && !finer_alike();
                match at.lengths.len() {
                    n if longer && n > whole => return Wider::Yes(m * k, r2),
                    2.. if longer => not_yet = true,
                    _ => {}
                }
            }
        }
        if not_yet { Wider::NotYet } else { Wider::No }
    }

    /// Whether one point (but the first) paused at least `LONGER` times the others' median: a
    /// ring's compute among its steps' waits.
    fn one_stands_out(&self) -> bool {
        let p = self.lengths(1, 0);
        (0..p.len()).any(|i| {
            let mut rest = p.clone();
            rest.remove(i);
            stand_out(&p[i..=i], &rest)
        })
    }

    /// The iteration of `k` chunks from point `r`, if `whole` iterations lie behind.
    fn reading(&self, k: usize, r: usize, whole: usize) -> Option<ByTotals> {
        let bounds: Vec<(usize, u32)> = self.every(k, r).collect();
        if bounds.len() <= whole {
            return None;
        }
        let resumed = |j: usize| self.points[j].1;
        let (first, last) = (bounds[0].0, bounds[bounds.len() - 1].0);
        let span = resumed(last)?.since(resumed(first)?)? as f64;
        let at: Vec<u32> = bounds.iter().map(|b| b.1).collect();
        let between = self.off((1, 0), (k, r));
        let clarity = if between.is_empty() {
            1.0
        } else {
            (1.0 - median(&between) / median(&at)).clamp(0.0, 1.0)
        };
        Some(ByTotals {
            bytes: k as u64 * self.chunk,
            chunk: self.chunk,
            first: self.base + first as u64 * self.chunk,
            period_slots: span / (bounds.len() - 1) as f64,
            clarity,
        })
    }
}

/// The pauses at a lattice's points that paused, and how many of its points did not.
struct Paused {
    lengths: Vec<u32>,
    missed: usize,
}

impl Paused {
    /// Whether every point paused for a while (at least two slots and a share of their
    /// median), but one in `HIDDEN_EVERY` of a lattice of `k` chunks, `k` > 1, or as many as a
    /// finer lattice through them missed (`missed_finer`): a ring rank paced below what it
    /// writes still drains its iteration's last chunk while it computes, and a short compute
    /// ends first. (An iteration of one chunk whose boundary passes without a pause is two
    /// read as one: see `ByTotals::holds`.)
    fn all_but_hidden(&self, k: usize, missed_finer: usize) -> bool {
        let least = self.lengths.iter().copied().min().unwrap_or(0);
        let hidden = if k == 1 {
            0
        } else {
            (self.lengths.len() + self.missed) / HIDDEN_EVERY
        };
        self.missed <= hidden.max(missed_finer)
            && least >= MIN_BOUNDARY_SLOTS
            && f64::from(least) >= BOUNDARY_SHARE * median(&self.lengths)
    }
}

impl ByTotals {
    /// How near a pause's total must lie to a boundary to be its pause.
    fn tolerance(&self) -> u64 {
        lattice_tolerance(self.chunk)
    }

    /// Where total `now` falls: the iteration under way and what it has moved, or the one just
    /// ended while the traffic waits at its end; and when it began, by `pauses`.
    pub fn place(&self, pauses: &Pauses, now: u64) -> Place {
        let d = now.saturating_sub(self.first);
        let j = d / self.bytes;
        let into = d - j * self.bytes;
        let (iteration, sent) = if j > 0 && into <= self.tolerance() {
            (j, self.bytes)
        } else {
            (j + 1, into)
        };
        let began_at = self.first + (iteration - 1) * self.bytes;
        Place {
            iteration,
            sent,
            began: pauses.at(began_at, self.tolerance()).map(|p| p.resumed),
        }
    }

    /// Whether the traffic still moves in these iterations at total `now`: it paused at
    /// every boundary it passed since `first` (the ones the pauses kept still remember), but
    /// perhaps one of the last few where the iteration is wider than the chunk (a ring's
    /// compute hidden while its last chunk drains: `Paused::all_but_hidden`), and it has not been
    /// quiet for more than two iterations' time.
    pub fn holds(&self, pauses: &Pauses, now: u64) -> bool {
        let tolerance = self.tolerance();
        let passed = now.saturating_sub(self.first + tolerance) / self.bytes;
        let oldest = pauses.done.front().map_or(u64::MAX, |p| p.total);
        // The boundaries passed since the last few pauses ended: a pause at each.
        let missed = (passed.saturating_sub(RECHECKED)..=passed)
            .map(|j| self.first + j * self.bytes)
            .filter(|&b| b + tolerance >= oldest && b + tolerance < now)
            .filter(|&b| pauses.at(b, tolerance).is_none())
            .count();
        let hidden = usize::from(self.bytes > self.chunk);
        missed <= hidden && f64::from(pauses.quiet_now()) <= 2.0 * self.period_slots.max(1.0)
    }
}

/// How near a pause's total must lie to a point of a lattice of `chunk` bytes to be on it.
fn lattice_tolerance(chunk: u64) -> u64 {
    (ON_LATTICE * chunk as f64) as u64
}

/// An iteration of one chunk of `bytes`, its boundaries the lattice's `points` (oldest first,
/// at least two): slots per iteration their mean spacing.
fn one_chunk(bytes: u64, points: &[&Pause], clarity: f64) -> Option<ByTotals> {
    let (first, end) = (points.first()?, points.last()?);
    let span = end.resumed.since(first.resumed)? as f64;
    (span > 0.0).then(|| ByTotals {
        bytes,
        chunk: bytes,
        first: first.total,
        period_slots: span / (points.len() - 1) as f64,
        clarity,
    })
}

/// Whether every pause of `at` is at least `LONGER` times the median of `rest` (a slot at
/// least): a ring's compute among its steps' waits.
fn stand_out(at: &[u32], rest: &[u32]) -> bool {
    let bar = LONGER * median(rest).max(1.0);
    at.iter().all(|&s| f64::from(s) >= bar)
}

/// Whether the pauses `at` a lattice's points stand out of those `between` them, and at most
/// one in `HELD_BACK_EVERY` between pauses as long as theirs (their median): a ring's step
/// waits for its predecessor now and then as long as its compute.
fn apart(at: &[u32], between: &[u32]) -> bool {
    let typical = median(at);
    let long = between.iter().filter(|&&s| f64::from(s) >= typical).count();
    stand_out(at, between) && long * HELD_BACK_EVERY <= between.len()
}

/// Whether an iteration's boundaries paused alike, each less than `LONGER` times the shortest:
/// they are its compute's, where a ring's step among them (a lattice at a part of the
/// iteration) waits briefly.
fn near_alike(at: &[u32]) -> bool {
    let least = at.iter().copied().min().unwrap_or(0);
    at.iter().all(|&s| f64::from(s) < LONGER * f64::from(least))
}

/// Whether pauses are alike: none more than `ALIKE` times their median.
fn alike(x: &[u32]) -> bool {
    let bar = ALIKE * median(x);
    x.iter().all(|&s| f64::from(s) <= bar)
}

fn median(x: &[u32]) -> f64 {
    let mut v = x.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => f64::from(v[n / 2]),
        n => f64::from(v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// Feeds per-slot bytes; returns the pauses.
    fn paused(per_slot: &[u64]) -> (Pauses, u64) {
        let mut p = Pauses::default();
        let mut total = 0;
        for (i, &b) in per_slot.iter().enumerate() {
            p.observe(Slot(100 + i as u64), total, b, 0);
            total += b;
        }
        (p, total)
    }

    /// A ring rank's iterations: `chunks` chunks of `chunk` bytes over two slots each, the
    /// pause after chunk i `waits[i]` slots (the last one the compute).
    fn ring(iterations: usize, chunk: u64, waits: &[usize]) -> Vec<u64> {
        let mut x = vec![0; 3];
        for _ in 0..iterations {
            for &w in waits {
                x.extend([chunk / 2; 2]);
                x.extend(std::iter::repeat_n(0, w));
            }
        }
        x
    }

    /// Never read but at a ring of three's iteration of 7.32 MB chunks, from any slot of `x`.
    fn never_misread(x: &[u64], what: &str) {
        for end in 1..=x.len() {
            let (p, now) = paused(&x[..end]);
            if let Some(b) = p.find(now, 4) {
                assert_eq!(b.bytes, 29_280_000, "{what}, slot {end}: {b:?}");
            }
        }
    }

    #[test]
    fn a_ring_whose_steps_flow_on_is_read_at_its_iteration() {
        // Four chunks; the steps do not wait, the compute does.
        let (p, now) = paused(&ring(10, 7_320_000, &[0, 0, 0, 10]));
        let b = p.find(now, 4).expect("read");
        assert_eq!(b.bytes, 29_280_000, "{b:?}");
        assert_eq!(b.period_slots, 18.0, "{b:?}");
        assert_eq!(b.first % 29_280_000, 0, "{b:?}");
        assert_eq!(b.clarity, 1.0, "{b:?}");
    }

    #[test]
    fn a_ring_that_waits_at_every_step_is_never_read_at_its_chunk() {
        // Every step waits a little, the compute longer: read at its iteration or not at all.
        for waits in [[2, 3, 2, 12], [2, 2, 2, 4], [1, 2, 1, 6]] {
            never_misread(&ring(10, 7_320_000, &waits), &format!("waits {waits:?}"));
        }
    }

    #[test]
    fn a_ring_whose_steps_wait_a_little_is_read_at_its_iteration() {
        // Each step waits for the predecessor, briefly; the compute far longer.
        let (p, now) = paused(&ring(10, 7_320_000, &[2, 1, 3, 12]));
        assert_eq!(p.find(now, 4).map(|b| b.bytes), Some(29_280_000));
        // A step that waits as long as the compute once in the 27 between is one of those
        // held back by other jobs now and then: still read at its iteration.
        let mut x = ring(9, 7_320_000, &[2, 1, 3, 12]);
        x.extend(ring(1, 7_320_000, &[12, 1, 3, 12]).split_off(3));
        let (p, now) = paused(&x);
        assert_eq!(p.find(now, 4).map(|b| b.bytes), Some(29_280_000));
        // One in every other iteration leaves it unread: the compute no longer stands apart.
        let mut x = vec![0; 3];
        for i in 0..10 {
            let first = if i % 2 == 1 { 12 } else { 2 };
            x.extend(ring(1, 7_320_000, &[first, 1, 3, 12]).split_off(3));
        }
        let (p, now) = paused(&x);
        assert_eq!(p.find(now, 4), None);
    }

    /// A ring of three's iterations (four chunks, the steps waiting `steps` slots, the
    /// compute's pause last), its compute hidden at the iterations in `hidden`: the rank,
    /// paced below what it writes, still drains the last chunk when the compute ends, and
    /// sends on.
    fn ring_hiding_its_compute(iterations: usize, steps: [usize; 3], hidden: &[usize]) -> Vec<u64> {
        ring_hiding_its_compute_for(iterations, steps, 10, hidden)
    }

    /// The same with a compute of `slots`.
    fn ring_hiding_its_compute_for(
        iterations: usize,
        steps: [usize; 3],
        slots: usize,
        hidden: &[usize],
    ) -> Vec<u64> {
        let mut x = vec![0; 3];
        for i in 0..iterations {
            let compute = if hidden.contains(&i) { 0 } else { slots };
            let [a, b, c] = steps;
            x.extend(ring(1, 7_320_000, &[a, b, c, compute]).split_off(3));
        }
        x
    }

    #[test]
    fn a_ring_whose_compute_is_hidden_now_and_then_is_read_at_its_iteration() {
        // Hidden at every other boundary only (iterations 5, 9 and 15 end at chunk points 23,
        // 39 and 63 from the first pause, all off every eighth point from 3): never read at
        // two iterations, whether most points between waited a slot or none did.
        never_misread(
            &ring_hiding_its_compute(24, [1, 0, 1], &[5, 15]),
            "two steps waiting",
        );
        never_misread(
            &ring_hiding_its_compute(12, [1, 0, 0], &[5, 9]),
            "one step waiting",
        );
        // Nor at half, where the middle step always waits a while.
        never_misread(
            &ring_hiding_its_compute(24, [1, 3, 1], &[5, 15]),
            "middle step waiting",
        );
        let x = ring_hiding_its_compute_for(24, [1, 3, 1], 8, &[5, 15]);
        never_misread(&x, "middle step waiting, a shorter compute");
        // Twice in twenty-odd iterations is read, at its iteration.
        let (p, now) = paused(&ring_hiding_its_compute(24, [1, 0, 1], &[5, 15]));
        assert_eq!(p.find(now, 4).map(|b| b.bytes), Some(29_280_000));
        // Hidden more often than one boundary in ten: not read.
        let (p, now) = paused(&ring_hiding_its_compute(24, [1, 0, 1], &[5, 9, 15]));
        assert_eq!(p.find(now, 4), None);
        // A reading holds across one hidden compute, not across two in a row.
        let (p, now) = paused(&ring_hiding_its_compute(10, [1, 0, 1], &[]));
        let b = p.find(now, 4).expect("read");
        let (p, now) = paused(&ring_hiding_its_compute(13, [1, 0, 1], &[10]));
        assert!(b.holds(&p, now));
        let (p, now) = paused(&ring_hiding_its_compute(13, [1, 0, 1], &[10, 11]));
        assert!(!b.holds(&p, now));
    }

    #[test]
    fn a_ring_of_four_that_waits_at_every_step_is_not_read_at_its_chunk_from_few_points() {
        // Six chunks an iteration, so six points show the compute once; it stands out, if
        // only twice as long as a step's wait. Past eight points (`MIN_POINTS`) a compute
        // less than three times a step's, seen once, is not ruled out yet: a known limit.
        for (waits, chunks_seen) in [([2, 2, 2, 2, 2, 5], MIN_POINTS), ([3, 2, 3, 2, 3, 10], 60)] {
            let x = ring(10, 5_000_000, &waits);
            for end in 1..=x.len() {
                let (p, now) = paused(&x[..end]);
                if now > chunks_seen as u64 * 5_000_000 {
                    break;
                }
                if let Some(b) = p.find(now, 4) {
                    assert_eq!(b.bytes, 30_000_000, "waits {waits:?}, slot {end}: {b:?}");
                }
            }
        }
    }

    #[test]
    fn an_iteration_of_one_chunk_is_read_after_six_points() {
        // A parameter-server worker: one push and pull an iteration, a compute of 8–14 slots
        // (contention stretches some). Read once its seventh iteration has ended, not its
        // ninth.
        let computes = [9, 12, 8, 14, 10, 9, 13, 11, 8, 12];
        let mut x = vec![0; 3];
        let mut read_after = None;
        for (i, &c) in computes.iter().enumerate() {
            x.extend([1_960_000; 2]);
            x.extend(std::iter::repeat_n(0, c));
            // The pause at the end of this iteration ends when the next one sends.
            let mut next = x.clone();
            next.push(1_960_000);
            let (p, now) = paused(&next);
            if let (None, Some(b)) = (read_after, p.find(now, 4)) {
                read_after = Some(i + 1);
                assert_eq!(b.bytes, 3_920_000, "{b:?}");
            }
        }
        assert_eq!(read_after, Some(7));
    }

    #[test]
    fn uneven_iterations_of_equal_bytes_are_read() {
        // The compute and the waits vary threefold from one iteration to the next; the bytes
        // do not.
        let mut x = vec![0; 2];
        for (i, c) in [6, 9, 18, 7, 14, 20, 8, 11, 16, 9, 12]
            .into_iter()
            .enumerate()
        {
            x.extend([16 * MB / 4; 4]);
            // Now and then the step between the two chunks waits for the peer.
            x.extend(std::iter::repeat_n(0, usize::from(i % 4 == 1) * 3));
            x.extend([16 * MB / 4; 4]);
            x.extend(std::iter::repeat_n(0, c));
        }
        let (p, now) = paused(&x);
        assert_eq!(p.find(now, 4).map(|b| b.bytes), Some(32 * MB));
    }

    #[test]
    fn too_few_iterations_are_not_read() {
        let (p, now) = paused(&ring(4, 7_320_000, &[0, 0, 0, 10]));
        assert_eq!(p.find(now, 4), None);
    }

    #[test]
    fn the_place_of_a_total_reads_like_a_progress_file() {
        let b = ByTotals {
            bytes: 100,
            chunk: 25,
            first: 1_000,
            period_slots: 10.0,
            clarity: 1.0,
        };
        // A pause at each boundary, the traffic moving again in slot 10 + j after the j-th:
        // the slot an iteration began in names the boundary it began at.
        let pauses = Pauses {
            done: (0..4)
                .map(|j| Pause {
                    total: 1_000 + 100 * j,
                    slots: 5,
                    resumed: Slot(10 + j),
                })
                .collect(),
            current: None,
        };
        let at = |now| {
            let p = b.place(&pauses, now);
            let began_at = p.began.map(|s| 1_000 + (s.0 - 10) * 100);
            (
                p.iteration,
                p.sent,
                began_at.expect("a pause at the boundary"),
            )
        };
        assert_eq!(at(1_000), (1, 0, 1_000));
        assert_eq!(at(1_040), (1, 40, 1_000));
        // Waiting at the end of the first: it is done, not the second begun.
        assert_eq!(at(1_100), (1, 100, 1_000));
        assert_eq!(at(1_101), (2, 1, 1_100));
        assert_eq!(at(1_350), (4, 50, 1_300));
    }

    #[test]
    fn an_iteration_run_through_without_a_pause_withdraws_the_reading() {
        let mut x = ring(10, 7_320_000, &[0, 0, 0, 10]);
        let (p, now) = paused(&x);
        let b = p.find(now, 4).expect("read");
        assert!(b.holds(&p, now));
        // Two more iterations' bytes with no compute between them.
        x.extend([7_320_000 / 2; 16]);
        let (p, now) = paused(&x);
        assert!(!b.holds(&p, now));
    }

    #[test]
    fn a_withdrawn_iteration_is_resumed_where_the_pauses_lie_its_bytes_apart() {
        // 20-MB iterations over uneven stretches, paused mid-way at other totals each time
        // (other jobs' turns), the compute's pause ending each.
        let per = 20 * MB;
        let mut x = vec![0; 3];
        for (i, &(a, b)) in [(3usize, 5usize), (6, 2), (1, 9), (4, 4)]
            .iter()
            .enumerate()
        {
            let slots = (a + b) as u64;
            x.extend(std::iter::repeat_n(per / slots, a));
            x.extend(std::iter::repeat_n(0, 1 + i % 3));
            x.extend(std::iter::repeat_n(per / slots, b));
            x.extend(std::iter::repeat_n(0, 4));
        }
        // The fifth iteration begins: the fourth's pause has ended.
        x.push(per / 8);
        let (p, now) = paused(&x);
        assert!(
            p.resume(per, 4, 0.9).is_some(),
            "from the first pause, at 0"
        );
        assert_eq!(p.resume(per, 5, 0.9), None, "not that many seen");
        let b = p.resume(per, 2, 0.9).expect("back");
        assert_eq!(
            (b.bytes, b.chunk, b.first, b.clarity),
            (per, per, 2 * per, 0.9)
        );
        assert!(b.holds(&p, now));
        let place = b.place(&p, now);
        assert_eq!((place.iteration, place.sent), (3, per / 8), "{b:?}");
        // Not at other bytes, nor from no iterations.
        assert_eq!(p.resume(per / 2 + MB, 2, 0.9), None);
        assert_eq!(p.resume(per, 0, 0.9), None);
    }

    #[test]
    fn quiet_for_long_withdraws_the_reading() {
        let mut x = ring(10, 7_320_000, &[0, 0, 0, 10]);
        let (p, now) = paused(&x);
        let b = p.find(now, 4).expect("read");
        x.extend([0; 40]);
        let (p, _) = paused(&x);
        assert!(!b.holds(&p, now));
    }
}
