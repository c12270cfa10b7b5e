//! Learning a job's iterations from its sockets alone (docs/design.md §9, "No progress file"):
//! data-parallel training sends a burst of nearly the same size every iteration, separated by
//! compute, and the driver already counts every socket's bytes each slot. [`Learner`] takes a
//! process's (or a cgroup's) cumulative byte count once per slot and, once the traffic has been
//! periodic for a few iterations, says what a progress file would: the iteration, when it began,
//! the bytes sent in it and the bytes an iteration moves ([`Learned`]). Below its confidence bar
//! it says nothing, and the flows stay with the kernel's CC.
//!
//! How: the period is the lag at which the per-slot byte series (smoothed over three slots)
//! matches itself (autocorrelation over a window, the shortest peak at least 0.6 of the best,
//! so a job is not read at a multiple of its period); an iteration begins where a quiet slot gives way to an active one,
//! at most once per 0.6 periods (a bucket's pause inside an iteration is not a new one) or,
//! once an estimate stands, once all an iteration's bytes but `byte_tolerance` have moved; an
//! estimate stands once `min_iterations` whole iterations in a row (one more while the
//! autocorrelation is below `strong_correlation`) agree on their bytes within
//! `byte_tolerance` and on their length within two slots or `period_tolerance`, or
//! `min_iterations` agree on their bytes exactly (`exact_byte_tolerance`) and on their length
//! loosely (`exact_period_tolerance`; contention stretches iterations, not their bytes). It is
//! withdrawn when the traffic stops for two periods, or an iteration runs far past its bytes
//! and its length.
//!
//! Where no period stands out (contention stretches some iterations twice as long as others),
//! the byte totals at which the traffic pauses may still show the iteration (`pauses.rs`): once
//! `pause_iterations` whole ones agree there, that reading stands in, and it stands while the
//! traffic pauses at each boundary it reaches. An estimate withdrawn stands again, as such a
//! reading, once the traffic pauses at the ends of `resume_iterations` whole iterations of its
//! bytes; so does the estimate of a learned peer (its reports carry its bytes per iteration)
//! once they show over `peer_iterations`.

use std::collections::VecDeque;

use crate::slot::Slot;

pub mod identity;
mod pauses;

use pauses::{ByTotals, Pauses};

/// How far back, and above what share of the busiest slot, an iteration's first slots may be
/// quieter than the active bar ([`Learner::lead_in`]): a slow start spans a slot or two.
const LEAD_IN_SLOTS: usize = 2;
const LEAD_IN_SHARE: f64 = 0.01;
/// A lead-in slot must also move more than `CHATTER_MARGIN` times the most any of the
/// `CHATTER_SLOTS` slots before it moved: a job's chatter between bursts (acks of the last
/// bucket, keepalives, metrics) can pass the share when bursts are small, and a slot of it
/// counted as an iteration's start moves that start by a slot at random.
const CHATTER_SLOTS: usize = 4;
const CHATTER_MARGIN: f64 = 2.0;

/// How near half an iteration's bytes a quiet stretch must fall for the iteration to be read as
/// two ([`Learner::pairs`]): a slot's lead-in either side of it moves the split by a few per cent.
const HALF_TOLERANCE: f64 = 0.05;

/// Slots a peer's bytes per iteration are tried for after its last report said them: a few
/// exchanges may be missed, while a peer whose estimate was withdrawn stops reporting.
const PEER_FRESH_SLOTS: u64 = 8;

/// Whether a peer's bytes heard in slot `heard` are still tried in slot `now`.
fn fresh(heard: Slot, now: Slot) -> bool {
    now.since(heard).is_some_and(|age| age <= PEER_FRESH_SLOTS)
}

/// What the learner needs to call traffic periodic.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnerConfig {
    /// Slots of history kept (and searched for a period).
    pub window_slots: usize,
    /// The shortest and longest periods considered, in slots.
    pub min_period_slots: usize,
    pub max_period_slots: usize,
    /// Whole iterations in a row that must agree before an estimate stands.
    pub min_iterations: usize,
    /// How far an iteration's bytes may stray from the mean (a share of it).
    pub byte_tolerance: f64,
    /// How far an iteration's length may stray from the others' mean and the period (a share of
    /// it; two slots always).
    pub period_tolerance: f64,
    /// The autocorrelation the period's lag must reach.
    pub min_correlation: f64,
    /// The autocorrelation from which `min_iterations` agreeing iterations suffice; below it
    /// one more must agree. Chance agreement of random flows comes with a weak correlation,
    /// and so does a DDP rank's bursts of buckets.
    pub strong_correlation: f64,
    /// Iterations that agree on their bytes within this share need only be `min_iterations`,
    /// from `exact_correlation` up, and their lengths need only be within
    /// `exact_period_tolerance` of their mean (which must still be within `period_tolerance`
    /// of the period), once the window holds one more whole iteration and none moved the same
    /// bytes over a length outside that. A job moves the same bytes every iteration, to the
    /// byte, while the jobs it shares links with come and go and its iterations drift by a
    /// quarter (two-tier: 54, 48, 44, 43 slots). Random flows do not agree this closely by
    /// chance; equal transfers at uneven times do, and are then learned at their true size.
    pub exact_byte_tolerance: f64,
    pub exact_period_tolerance: f64,
    /// The autocorrelation the period's lag must reach for the exact rule to apply: equal
    /// transfers at uneven times agree on their bytes too, and come with a weak one; so do a
    /// DDP rank's iterations read in pairs (one was, at 0.50).
    pub exact_correlation: f64,
    /// A slot is active when it moves at least this share of the window's busiest slot.
    pub active_share: f64,
    /// Whole iterations the byte totals at which the traffic pauses must show before they
    /// stand for an estimate where the per-slot bytes show no period (see `pauses.rs`); 0
    /// reads iterations from the per-slot bytes only.
    pub pause_iterations: usize,
    /// Whole iterations of a withdrawn estimate's bytes the traffic must pause at the ends of
    /// (pauses that many times its bytes apart, to 0.2 % of them) for it to stand again, as a
    /// reading of the pauses; 0 never brings one back. Looked for over `window_slots` after
    /// the withdrawal, for an estimate of the per-slot bytes or a pauses' reading of one
    /// chunk (a ring's reading of several may be a multiple or a part of its iteration).
    /// Withdrawn once (an iteration run into the next with no quiet slot between), a job
    /// under contention may show no period for the rest of its run, its iterations stretched
    /// unevenly and paused mid-way by the jobs given turns before it, while it still pauses
    /// for its compute every so many bytes, to the byte.
    pub resume_iterations: usize,
    /// Whole iterations of the bytes a learned peer's iterations move (as its reports carry
    /// them, [`Learner::hear`]) the traffic must pause at the ends of (to 0.2 % of them, the
    /// pauses there standing out of those between: `pauses.rs`) for that to stand as this
    /// process's estimate, before its own traffic shows one; 0 never takes a peer's bytes. A ring's
    /// ranks move the same bytes, and its last rank is otherwise learned iterations after
    /// its first, each from its own traffic.
    pub peer_iterations: usize,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        Self {
            window_slots: 256,
            min_period_slots: 2,
            max_period_slots: 80,
            min_iterations: 3,
            byte_tolerance: 0.02,
            period_tolerance: 0.10,
            min_correlation: 0.4,
            strong_correlation: 0.8,
            exact_byte_tolerance: 0.002,
            exact_period_tolerance: 0.3,
            exact_correlation: 0.6,
            active_share: 0.1,
            pause_iterations: 4,
            resume_iterations: 2,
            peer_iterations: 2,
        }
    }
}

/// A confident estimate: what a progress file would have said.
#[derive(Clone, Debug, PartialEq)]
pub struct Learned {
    /// Iterations begun since the learner first saw the traffic (counting from 1).
    pub iteration: u64,
    /// The slot the current iteration began in.
    pub iteration_start: Slot,
    /// Bytes sent since it began.
    pub sent_this_iteration: f64,
    /// Bytes an iteration moves (the mean of the iterations that agreed).
    pub bytes_per_iteration: f64,
    /// Bytes the last whole iteration moved.
    pub last_iteration_bytes: f64,
    /// The period, in slots (mean length of the iterations that agreed).
    pub period_slots: f64,
    /// The autocorrelation at the period's lag, 0..1; for a reading of the pauses, how clearly
    /// the points between its boundaries did not pause.
    pub confidence: f64,
    /// Which reading of the traffic this is.
    pub reading: Reading,
}

/// How an estimate was read from the traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reading {
    /// From the bytes per slot: a period that stands out, iterations that agree on it.
    Period,
    /// From the byte totals at which the traffic paused ([`pauses`]): iterations of equal
    /// bytes whose lengths vary.
    Pauses,
    /// From the byte totals at which the traffic paused, at the bytes per iteration a
    /// learned peer's reports carried ([`Learner::hear`]).
    Peer,
}

impl Reading {
    /// Its name, as operators see it (`mlccctl jobs`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reading::Period => "period",
            Reading::Pauses => "pauses",
            Reading::Peer => "peer",
        }
    }
}

/// How closely whole iterations must agree: on their bytes (a share of the mean), and on
/// their lengths.
#[derive(Clone, Copy, Debug)]
struct Agreement {
    bytes: f64,
    lengths: Lengths,
}

#[derive(Clone, Copy, Debug)]
enum Lengths {
    /// Each within `each` of the iterations' mean (two slots at least), and the mean within
    /// `period` of the period the autocorrelation found.
    NearTheMean { each: f64, period: f64 },
    /// Within a quarter to two and a half of a standing estimate's period (slots): sharing
    /// links stretches iterations, not their bytes, and an iteration after a stretched one
    /// may be quick.
    NearThePeriod(f64),
}

/// The mean length and mean bytes of whole iterations (none: NaN).
fn means(its: &[(f64, f64)]) -> (f64, f64) {
    let n = its.len() as f64;
    (
        its.iter().map(|w| w.0).sum::<f64>() / n,
        its.iter().map(|w| w.1).sum::<f64>() / n,
    )
}

/// Whether length `l` is within `share` of `to`: slots quantise both the burst and the
/// compute, so two slots of slack at least.
fn near(l: f64, to: f64, share: f64) -> bool {
    (l - to).abs() <= (share * to).max(2.0)
}

/// See [`Learner::inspect`].
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    /// The period in slots and the autocorrelation at its lag, if one stands out.
    pub period: Option<(usize, f64)>,
    /// (length in slots, bytes) of each whole iteration in the window, oldest first.
    pub iterations: Vec<(f64, f64)>,
    /// Why the per-slot bytes give no estimate now (none while they give one).
    pub unlearned: Option<Unlearned>,
}

/// Why the per-slot bytes give no estimate: the step of [`Learner::observe`] that found none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlearned {
    /// No period stands out, and no estimate stood to carry one.
    NoPeriod,
    /// The newest whole iterations do not agree on their bytes or lengths.
    Disagreed,
    /// They agree, but each is two of the job's (read before an estimate stands).
    InPairs,
    /// Nothing active for two periods.
    Quiet,
    /// The current iteration ran well past both its bytes and its length.
    PastItsBytes,
}

impl Unlearned {
    /// Its name, as operators see it (`mlccctl jobs`: `learning:<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Unlearned::NoPeriod => "no-period",
            Unlearned::Disagreed => "iterations-disagree",
            Unlearned::InPairs => "iterations-in-pairs",
            Unlearned::Quiet => "quiet",
            Unlearned::PastItsBytes => "past-its-bytes",
        }
    }
}

/// What the learner keeps of a withdrawn estimate: when it went, its bytes per iteration and
/// its confidence (the confidence it comes back with).
#[derive(Clone, Copy, Debug)]
struct Withdrawn {
    at: Slot,
    bytes: f64,
    confidence: f64,
}

/// One process's (or cgroup's) learner. Feed it every slot with [`Learner::observe`].
#[derive(Clone, Debug)]
pub struct Learner {
    cfg: LearnerConfig,
    /// Bytes per slot, oldest first; `last` is the slot of the newest.
    bytes: VecDeque<f64>,
    last: Option<(Slot, u64)>,
    /// Iteration starts seen (slots), and how many iterations were begun before the oldest.
    onsets: VecDeque<Slot>,
    begun: u64,
    /// The estimate the per-slot bytes gave, or why they gave none.
    by_time: Result<Learned, Unlearned>,
    /// The last estimate withdrawn (the per-slot bytes', or a pauses' reading of one chunk):
    /// what its job moves per iteration if it comes back.
    withdrawn: Option<Withdrawn>,
    /// The pauses' totals, and the iteration they showed if one stands (by themselves, or at
    /// a peer's bytes).
    pauses: Pauses,
    by_totals: Option<(ByTotals, Reading)>,
    /// The bytes per iteration learned peers' reports carried, and the slot each was last heard.
    peers: Vec<(u64, Slot)>,
    estimate: Option<Learned>,
}

impl Learner {
    pub fn new(cfg: LearnerConfig) -> Self {
        Self {
            cfg,
            bytes: VecDeque::new(),
            last: None,
            onsets: VecDeque::new(),
            begun: 0,
            by_time: Err(Unlearned::NoPeriod),
            withdrawn: None,
            pauses: Pauses::default(),
            by_totals: None,
            peers: Vec::new(),
            estimate: None,
        }
    }

    /// Takes the cumulative byte count `total` of the traffic at slot `slot`. A count that went
    /// backwards (sockets closed) counts as nothing moved. In the per-slot bytes, slots not
    /// observed (a driver that fell behind) share what moved evenly while the traffic was
    /// moving before them, and count as quiet up to the one observed while it was paused: the
    /// count says only how much moved over them, and quiet slots with every byte in the last
    /// read as a pause and a burst that were not there (mlccd's loop missed up to 44 % of the
    /// testbed's `paper-small` slots, and a ring rank's steady traffic, read as a quiet slot and
    /// an active one in turn, was learned at a period of two slots). The pauses count them as quiet either
    /// way: a ring rank's short waits at its chunks' ends are what they read, and spread,
    /// those were lost (docs/design.md §9).
    pub fn observe(&mut self, slot: Slot, total: u64) {
        let Some((prev_slot, prev_total)) = self.last else {
            self.last = Some((slot, total));
            return;
        };
        let Some(gap) = slot.since(prev_slot).filter(|&g| g > 0) else {
            return;
        };
        let moved = total.saturating_sub(prev_total);
        let missed = gap > 1 && gap <= self.cfg.window_slots as u64;
        if missed && self.pauses.quiet_now() == 0 {
            self.spread(gap, moved);
        } else {
            for _ in 1..gap.min(self.cfg.window_slots as u64) {
                self.push(0.0);
            }
            self.push(moved as f64);
        }
        let skipped = u32::try_from(gap - 1).unwrap_or(u32::MAX);
        let pause_ended = self.pauses.observe(slot, prev_total, moved, skipped);
        self.last = Some((slot, total));
        self.forget_old_onsets(slot);
        let by_time = self.learn(slot);
        self.remember_withdrawn(slot, &by_time);
        self.by_time = by_time;
        self.estimate = self.choose(slot, total, pause_ended);
    }

    /// The bytes per iteration of the learned processes at the other ends of this one's
    /// connections, as their reports heard in slot `slot` carried them
    /// ([`identity::Identity::take_peer_bytes`]): tried against this process's pauses, the
    /// most first, while no estimate stands and for `PEER_FRESH_SLOTS` after last heard.
    pub fn hear(&mut self, slot: Slot, peers: impl IntoIterator<Item = u64>) {
        // Reports move by a few bytes from slot to slot; bytes that agree to the exact
        // tolerance read the same lattice, so they are tried once, the newest.
        // Sorted first, so which of near-equal bytes stays does not depend on the order heard.
        let same =
            |a: u64, b: u64| a.abs_diff(b) as f64 <= self.cfg.exact_byte_tolerance * b as f64;
        let mut heard: Vec<u64> = peers.into_iter().collect();
        heard.sort_unstable();
        for b in heard {
            match self.peers.iter_mut().find(|p| same(p.0, b)) {
                Some(p) => *p = (b, slot),
                None => self.peers.push((b, slot)),
            }
        }
        self.peers.retain(|p| fresh(p.1, slot));
        self.peers.sort_unstable_by_key(|p| std::cmp::Reverse(p.0));
    }

    /// The estimate, if the traffic has been periodic long enough.
    pub fn estimate(&self) -> Option<&Learned> {
        self.estimate.as_ref()
    }

    /// Why the bytes per slot give no estimate now (none while they give one), without the
    /// work [`Learner::inspect`] does.
    pub fn unlearned(&self) -> Option<Unlearned> {
        self.by_time.as_ref().err().copied()
    }

    /// What the learner reads of the traffic now, for an operator asking why a process is
    /// (not) learned: the period the window shows and its correlation, and the whole
    /// iterations found, oldest first (length in slots, bytes).
    pub fn inspect(&self) -> Inspection {
        let iterations = match self.last {
            Some((now, _)) if !self.bytes.is_empty() => self.whole_iterations(now),
            _ => Vec::new(),
        };
        Inspection {
            period: self.period(),
            iterations,
            unlearned: self.unlearned(),
        }
    }

    /// `moved` bytes over the `gap` slots up to the one observed, in equal shares.
    fn spread(&mut self, gap: u64, moved: u64) {
        for _ in 0..gap {
            self.push(moved as f64 / gap as f64);
        }
    }

    fn push(&mut self, b: f64) {
        self.bytes.push_back(b.max(0.0));
        while self.bytes.len() > self.cfg.window_slots {
            self.bytes.pop_front();
        }
    }

    /// The slot of the `i`-th entry of `bytes`.
    fn slot_of(&self, now: Slot, i: usize) -> Slot {
        Slot(now.0 - (self.bytes.len() - 1 - i) as u64)
    }

    fn learn(&mut self, now: Slot) -> Result<Learned, Unlearned> {
        // Once an estimate stands, contention may stretch iterations and blur the period: it
        // stands while the bytes agree.
        let standing = self
            .by_time
            .as_ref()
            .ok()
            .map(|e| (e.period_slots, e.confidence));
        let (period, confidence) = match (self.period(), standing) {
            (Some(p), _) => p,
            (None, Some((len, c))) => (len.round() as usize, c),
            (None, None) => return Err(Unlearned::NoPeriod),
        };
        let threshold = self.threshold();
        let per_iteration = self.by_time.as_ref().ok().map(|e| e.bytes_per_iteration);
        self.track_onsets(now, period, threshold, per_iteration);
        let iterations = self.whole_iterations(now);
        let agreed = self
            .agreed(&iterations, period, confidence, standing.map(|s| s.0))
            .ok_or(Unlearned::Disagreed)?;
        if standing.is_none() && self.pairs(now, agreed.len(), threshold) {
            return Err(Unlearned::InPairs);
        }
        // Agreeing iterations end at an onset, and onsets are never after `now`.
        let start = *self.onsets.back().ok_or(Unlearned::Disagreed)?;
        let since = now.since(start).ok_or(Unlearned::Disagreed)? as usize;
        let sent: f64 = self.bytes.iter().rev().take(since + 1).sum();
        let (mean_len, mean_bytes) = means(&agreed);
        self.stalled(since, sent, mean_bytes, mean_len, threshold)?;
        Ok(Learned {
            iteration: self.begun + self.onsets.len() as u64,
            iteration_start: start,
            sent_this_iteration: sent,
            bytes_per_iteration: mean_bytes,
            last_iteration_bytes: iterations.last().map_or(mean_bytes, |w| w.1),
            period_slots: mean_len,
            confidence,
            reading: Reading::Period,
        })
    }

    /// Keeps the estimate the per-slot bytes withdraw (`by_time`: their reading now) until
    /// one of theirs stands again.
    fn remember_withdrawn(&mut self, now: Slot, by_time: &Result<Learned, Unlearned>) {
        match (&self.by_time, by_time) {
            (_, Ok(_)) => self.withdrawn = None,
            (Ok(was), Err(_)) => {
                self.withdrawn = Some(Withdrawn {
                    at: now,
                    bytes: was.bytes_per_iteration,
                    confidence: was.confidence,
                })
            }
            (Err(_), Err(_)) => {}
        }
    }

    /// The estimate withdrawn within the window before `now`, while it may come back.
    fn withdrawn(&self, now: Slot) -> Option<Withdrawn> {
        self.withdrawn.filter(|w| {
            now.since(w.at)
                .is_some_and(|d| d < self.cfg.window_slots as u64)
        })
    }

    /// The estimate to stand by: the pauses' reading while it holds (once one stands, so the
    /// iteration count does not jump between two readings), else the per-slot bytes' estimate,
    /// else a reading of the pauses where they show one, or show a withdrawn estimate's
    /// iterations again, or a peer's.
    fn choose(&mut self, now: Slot, total: u64, pause_ended: bool) -> Option<Learned> {
        if let Some((b, reading)) = self.by_totals {
            if b.holds(&self.pauses, total) {
                return Some(self.read_totals(&b, reading, now, total));
            }
            self.by_totals = None;
            // A ring's reading (several chunks an iteration) may be a multiple of its
            // iteration, or a part: only one of a single chunk is looked for again.
            if self.by_time.is_err() && b.chunk == b.bytes {
                self.withdrawn = Some(Withdrawn {
                    at: now,
                    bytes: b.bytes as f64,
                    confidence: b.clarity,
                });
            }
        }
        if let Ok(e) = &self.by_time {
            return Some(e.clone());
        }
        if pause_ended {
            self.by_totals = self.read_pauses(now, total);
        }
        self.by_totals
            .map(|(b, reading)| self.read_totals(&b, reading, now, total))
    }

    /// A reading of the pauses, where a pause just ended: the iteration they show by
    /// themselves, or a withdrawn estimate's iterations again, or a peer's.
    fn read_pauses(&self, now: Slot, total: u64) -> Option<(ByTotals, Reading)> {
        let own = (self.cfg.pause_iterations > 0)
            .then(|| self.pauses.find(total, self.cfg.pause_iterations))
            .flatten();
        let resumed = || {
            self.withdrawn(now).and_then(|w| {
                self.pauses.resume(
                    w.bytes.round() as u64,
                    self.cfg.resume_iterations,
                    w.confidence,
                )
            })
        };
        let peer = || {
            self.peers
                .iter()
                .filter(|p| fresh(p.1, now))
                .find_map(|&(b, _)| self.pauses.fit(b, self.cfg.peer_iterations))
        };
        own.or_else(resumed)
            .map(|b| (b, Reading::Pauses))
            .or_else(|| peer().map(|b| (b, Reading::Peer)))
    }

    /// What a reading of the pauses says at total `total`, as a progress file would.
    fn read_totals(&self, b: &ByTotals, reading: Reading, now: Slot, total: u64) -> Learned {
        let place = b.place(&self.pauses, total);
        Learned {
            iteration: place.iteration,
            iteration_start: place.began.unwrap_or(now),
            sent_this_iteration: place.sent as f64,
            bytes_per_iteration: b.bytes as f64,
            last_iteration_bytes: b.bytes as f64,
            period_slots: b.period_slots,
            confidence: b.clarity,
            reading,
        }
    }

    /// The period (slots) and its autocorrelation, if one stands out.
    fn period(&self) -> Option<(usize, f64)> {
        // Smoothed over three slots, so a burst a slot early or late still lines up.
        let n = self.bytes.len();
        let x: Vec<f64> = (0..n)
            .map(|t| {
                (t.saturating_sub(1)..(t + 2).min(n))
                    .map(|i| self.bytes[i])
                    .sum()
            })
            .collect();
        let longest = self.cfg.max_period_slots.min(n / self.cfg.min_iterations);
        let lo = self.cfg.min_period_slots.max(1);
        if longest < lo {
            return None;
        }
        let mean = x.iter().sum::<f64>() / n as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        if var <= 0.0 {
            return None;
        }
        let r = |lag: usize| {
            let s: f64 = (0..n - lag)
                .map(|t| (x[t] - mean) * (x[t + lag] - mean))
                .sum();
            s / ((n - lag) as f64 * var)
        };
        // `rs[i]` is the correlation at lag `lo - 1 + i`: the candidates and one lag either side.
        let rs: Vec<f64> = (lo - 1..=longest + 1).map(r).collect();
        let best = rs[1..rs.len() - 1]
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        if best < self.cfg.min_correlation {
            return None;
        }
        // The shortest peak nearly as good: a period's multiples match about as well, and a
        // jitter that repeats every few iterations can make a multiple match a little better.
        let bar = self.cfg.min_correlation.max(0.6 * best);
        (1..rs.len() - 1)
            .find(|&i| rs[i] >= bar && rs[i - 1] < rs[i] && rs[i + 1] <= rs[i])
            .map(|i| (lo - 1 + i, rs[i]))
    }

    /// Adds the iteration starts in the window not seen yet: a quiet slot then an active one,
    /// at least 0.6 periods after the last start; or, once an estimate of `per_iteration`
    /// bytes stands, once the last iteration has moved all its bytes but the tolerance (an
    /// iteration short of that would disagree with the estimate anyway), however long that
    /// took. A scheduled job pauses mid-iteration while another takes its turn, and that
    /// pause would otherwise split the iteration the schedule was planned from.
    fn track_onsets(
        &mut self,
        now: Slot,
        period: usize,
        threshold: f64,
        per_iteration: Option<f64>,
    ) {
        let active = |b: f64| b >= threshold && b > 0.0;
        let min_gap = ((period as f64) * 0.6).ceil() as u64;
        let lead_floor = LEAD_IN_SHARE * self.busiest();
        for i in 1..self.bytes.len() {
            let onset = active(self.bytes[i]) && !active(self.bytes[i - 1]);
            if !onset {
                continue;
            }
            let first = self.lead_in(i, lead_floor, threshold);
            let s = self.slot_of(now, first);
            let early = |last: Slot| match per_iteration {
                Some(b) => {
                    let moved: f64 = self.bytes.range(self.index_of(now, last)..first).sum();
                    moved < (1.0 - self.cfg.byte_tolerance) * b
                }
                None => s.0 - last.0 < min_gap,
            };
            match self.onsets.back() {
                Some(&last) if s.0 <= last.0 => continue,
                Some(&last) if early(last) => continue,
                _ => self.onsets.push_back(s),
            }
        }
    }

    /// Drops the iteration starts that fell out of the window, counting them as begun. Done
    /// every slot, whether or not a period stands: every reader of `onsets` indexes `bytes`.
    fn forget_old_onsets(&mut self, now: Slot) {
        let oldest = self.slot_of(now, 0);
        while self.onsets.front().is_some_and(|s| s.0 < oldest.0) {
            self.onsets.pop_front();
            self.begun += 1;
        }
    }

    /// The first slot of the burst whose first active slot is `i`: a burst that begins late in
    /// a slot moves a little in it, below the active bar, and those bytes are the new
    /// iteration's. Counted in the last one instead, they make two iterations in a row disagree
    /// on their bytes by twice that much. Up to [`LEAD_IN_SLOTS`] slots back, each moving at
    /// least `floor` ([`LEAD_IN_SHARE`] of the busiest slot, so background chatter does not
    /// count), more than the chatter before it, and less than the active `threshold`.
    fn lead_in(&self, i: usize, floor: f64, threshold: f64) -> usize {
        let mut first = i;
        while first > 0 && i - first < LEAD_IN_SLOTS {
            let k = first - 1;
            let b = self.bytes[k];
            let chatter = self
                .bytes
                .range(k.saturating_sub(CHATTER_SLOTS)..k)
                .copied()
                .fold(0.0, f64::max);
            if b < floor || b >= threshold || b <= CHATTER_MARGIN * chatter {
                break;
            }
            first -= 1;
        }
        first
    }

    /// Whether the newest `agreed` whole iterations are each two of the job's: a quiet stretch
    /// inside each, at least half as long as the one that ends it, after about half its bytes.
    /// Iterations merged in pairs agree on their bytes as single ones do, and a period read at
    /// twice the job's would plan twice its bytes per iteration. Checked only before an
    /// estimate stands: a scheduled job may pause half-way for another's turn.
    fn pairs(&self, now: Slot, agreed: usize, threshold: f64) -> bool {
        let starts: Vec<Slot> = self.onsets.iter().copied().collect();
        let Some(from) = starts.len().checked_sub(agreed + 1) else {
            return false;
        };
        agreed > 0
            && starts[from..]
                .windows(2)
                .all(|w| self.split_in_half(now, w[0], w[1], threshold))
    }

    fn split_in_half(&self, now: Slot, from: Slot, to: Slot, threshold: f64) -> bool {
        let x: Vec<f64> = self
            .bytes
            .range(self.index_of(now, from)..self.index_of(now, to))
            .copied()
            .collect();
        let total: f64 = x.iter().sum();
        let active = |b: f64| b >= threshold && b > 0.0;
        let quiet_before = |end: usize| x[..end].iter().rev().take_while(|&&b| !active(b)).count();
        let tail = quiet_before(x.len());
        tail > 0
            && total > 0.0
            && (1..x.len()).any(|i| {
                let before: f64 = x[..i].iter().sum();
                active(x[i])
                    && !active(x[i - 1])
                    && 2 * quiet_before(i) >= tail
                    && (before / total - 0.5).abs() <= HALF_TOLERANCE
            })
    }

    /// (length in slots, bytes) of each whole iteration in the window, oldest first.
    fn whole_iterations(&self, now: Slot) -> Vec<(f64, f64)> {
        let starts: Vec<Slot> = self.onsets.iter().copied().collect();
        starts
            .windows(2)
            .map(|w| {
                let len = w[1].0 - w[0].0;
                let from = self.index_of(now, w[0]);
                let bytes = (from..from + len as usize)
                    .filter_map(|i| self.bytes.get(i))
                    .sum::<f64>();
                (len as f64, bytes)
            })
            .collect()
    }

    fn index_of(&self, now: Slot, s: Slot) -> usize {
        self.bytes.len() - 1 - (now.0 - s.0) as usize
    }

    /// The whole iterations that an estimate can be made of (see [`Self::agreeing`]): with one
    /// standing, `min_iterations` that agree on their bytes as usual, their lengths near its
    /// period; before, `min_iterations` that agree on their bytes exactly where the correlation
    /// allows it, or as many as the correlation asks for that agree as usual.
    fn agreed(
        &self,
        its: &[(f64, f64)],
        period: usize,
        confidence: f64,
        standing: Option<f64>,
    ) -> Option<Vec<(f64, f64)>> {
        let min = self.cfg.min_iterations;
        let usual = |lengths| Agreement {
            bytes: self.cfg.byte_tolerance,
            lengths,
        };
        if let Some(p) = standing {
            return self.agreeing(its, min, period, usual(Lengths::NearThePeriod(p)));
        }
        let exact = Agreement {
            bytes: self.cfg.exact_byte_tolerance,
            lengths: Lengths::NearTheMean {
                each: self.cfg.exact_period_tolerance,
                period: self.cfg.period_tolerance,
            },
        };
        let needed = if confidence < self.cfg.strong_correlation {
            min + 1
        } else {
            min
        };
        // The first three of a ring's chunks look like three iterations, as the first three of
        // anything periodic look alike: the window must hold more whole iterations than agree.
        let exact_ok = confidence >= self.cfg.exact_correlation && its.len() > min;
        exact_ok
            .then(|| self.agreeing(its, min, period, exact))
            .flatten()
            .filter(|agreed| !self.same_bytes_other_lengths(its, agreed))
            .or_else(|| {
                let near_the_mean = usual(Lengths::NearTheMean {
                    each: self.cfg.period_tolerance,
                    period: self.cfg.period_tolerance,
                });
                self.agreeing(its, needed, period, near_the_mean)
            })
    }

    /// Whether a whole iteration in the window moved the bytes `agreed` agree on (within the
    /// exact tolerance) over a length they do not agree with: a ring's chunks move equal bytes
    /// over equal stretches but for the one the compute follows, and three chunks in a row
    /// read as three iterations would plan a quarter of the job's.
    fn same_bytes_other_lengths(&self, its: &[(f64, f64)], agreed: &[(f64, f64)]) -> bool {
        let (len, bytes) = means(agreed);
        its.iter().any(|&(l, b)| {
            (b - bytes).abs() <= self.cfg.exact_byte_tolerance * bytes
                && !near(l, len, self.cfg.exact_period_tolerance)
        })
    }

    /// The whole iterations, newest back, that agree with each other and the period as `tol`
    /// asks: at least the last `k` or none. Those before them count while they agree too (up
    /// to the window), so the figures are means over as many iterations as the job has shown.
    fn agreeing(
        &self,
        its: &[(f64, f64)],
        k: usize,
        period: usize,
        tol: Agreement,
    ) -> Option<Vec<(f64, f64)>> {
        let last = its.get(its.len().checked_sub(k)?..)?;
        let (mean_len, mean) = means(last);
        let period_ok = match tol.lengths {
            Lengths::NearTheMean { period: share, .. } => near(period as f64, mean_len, share),
            Lengths::NearThePeriod(_) => true,
        };
        let len_ok = |l: f64| match tol.lengths {
            Lengths::NearTheMean { each, .. } => near(l, mean_len, each),
            Lengths::NearThePeriod(p) => (0.25 * p..=2.5 * p).contains(&l),
        };
        let bytes_ok = |b: f64| mean > 0.0 && (b - mean).abs() <= tol.bytes * mean;
        let agrees = |&&(l, b): &&(f64, f64)| len_ok(l) && bytes_ok(b);
        if !period_ok || !last.iter().all(|w| agrees(&w)) {
            return None;
        }
        Some(its.iter().rev().take_while(agrees).copied().collect())
    }

    /// Bytes a slot must move to count as active.
    fn threshold(&self) -> f64 {
        self.cfg.active_share * self.busiest()
    }

    /// Bytes of the window's busiest slot.
    fn busiest(&self) -> f64 {
        self.bytes.iter().copied().fold(0.0, f64::max)
    }

    /// Whether the traffic stopped (nothing active for two periods) or the current iteration
    /// ran well past both its bytes and its length: no longer the job learned.
    fn stalled(
        &self,
        since: usize,
        sent: f64,
        bytes: f64,
        len: f64,
        threshold: f64,
    ) -> Result<(), Unlearned> {
        let quiet = self
            .bytes
            .iter()
            .rev()
            .take_while(|&&b| b < threshold)
            .count();
        if quiet as f64 > 2.0 * len {
            return Err(Unlearned::Quiet);
        }
        if since as f64 > 1.5 * len && sent > (1.0 + 2.0 * self.cfg.byte_tolerance) * bytes {
            return Err(Unlearned::PastItsBytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: deterministic noise for the tests.
    struct Noise(u64);
    impl Noise {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
        /// Uniform in [a, b).
        fn in_range(&mut self, a: f64, b: f64) -> f64 {
            a + (b - a) * self.next()
        }
    }

    const MB: f64 = 1e6;

    /// A training job's per-slot bytes: each iteration `active` slots of communication
    /// (`per_iteration` bytes in all) then `compute` quiet slots, both jittered, with a
    /// little background noise.
    fn ddp(
        iterations: usize,
        active: usize,
        compute: usize,
        per_iteration: f64,
        seed: u64,
    ) -> Vec<f64> {
        let mut n = Noise(seed | 1);
        let mut out = Vec::new();
        for _ in 0..iterations {
            let bytes = per_iteration * n.in_range(0.995, 1.005);
            let a = active + (n.next() < 0.3) as usize;
            for _ in 0..a {
                out.push(bytes / a as f64);
            }
            let c = compute + (n.next() < 0.3) as usize;
            for _ in 0..c {
                out.push(n.in_range(0.0, 2000.0));
            }
        }
        out
    }

    /// 500 slots or more of flows of random size, rate and spacing: no period to find.
    fn random_flows(seed: u64) -> Vec<f64> {
        let mut n = Noise(seed | 1);
        let mut x = Vec::new();
        while x.len() < 500 {
            x.extend(std::iter::repeat_n(0.0, n.in_range(0.0, 30.0) as usize));
            let len = n.in_range(1.0, 40.0) as usize;
            x.extend(std::iter::repeat_n(n.in_range(0.1, 3.6) * MB, len));
        }
        x
    }

    /// Slots without an estimate.
    fn slots_unlearned(seen: &[Option<Learned>]) -> usize {
        seen.iter().filter(|e| e.is_none()).count()
    }

    /// Slots with one.
    fn slots_learned(seen: &[Option<Learned>]) -> usize {
        seen.len() - slots_unlearned(seen)
    }

    fn feed(l: &mut Learner, per_slot: &[f64]) -> Vec<Option<Learned>> {
        feed_hearing(l, per_slot, |_| Vec::new())
    }

    /// `feed`, the learner hearing `peers(i)` before slot `i`.
    fn feed_hearing(
        l: &mut Learner,
        per_slot: &[f64],
        peers: impl Fn(usize) -> Vec<u64>,
    ) -> Vec<Option<Learned>> {
        let mut total = 0.0;
        let mut seen = Vec::new();
        for (i, b) in per_slot.iter().enumerate() {
            total += b;
            l.hear(Slot(1000 + i as u64), peers(i));
            l.observe(Slot(1000 + i as u64), total as u64);
            seen.push(l.estimate().cloned());
        }
        seen
    }

    /// `feed`, the learner observing only the slots `seen(i)` says (a driver that fell
    /// behind): the total reached by then, as a socket counter would report it.
    fn feed_missing(
        l: &mut Learner,
        per_slot: &[f64],
        seen: impl Fn(usize) -> bool,
    ) -> Vec<Option<Learned>> {
        let mut total = 0.0;
        let mut out = Vec::new();
        for (i, b) in per_slot.iter().enumerate() {
            total += b;
            if seen(i) {
                l.observe(Slot(1000 + i as u64), total as u64);
            }
            out.push(l.estimate().cloned());
        }
        out
    }

    #[test]
    fn steady_traffic_observed_every_other_slot_is_not_read_as_a_period_of_two() {
        // A ring rank's traffic under contention (paper-small, 2026-12-07): 0.3-1.7 MB a slot,
        // with mlccd's loop observing every other slot. Counted as a quiet slot and an active
        // one in turn, it was learned at two slots and a fiftieth of its iteration's bytes.
        for seed in 1..=20 {
            let mut n = Noise(seed);
            let x: Vec<f64> = (0..600).map(|_| n.in_range(0.3, 1.7) * MB).collect();
            let mut l = Learner::new(LearnerConfig::default());
            let learned = feed_missing(&mut l, &x, |i| i % 2 == 0);
            assert!(
                learned.iter().all(Option::is_none),
                "seed {seed}: learned {:?}",
                learned.iter().flatten().next()
            );
        }
    }

    #[test]
    fn periodic_traffic_is_learned_at_its_bytes_though_slots_go_unobserved() {
        for seed in 1..=20 {
            let x = ddp(14, 10, 3, 29.0 * MB, seed);
            let mut n = Noise(seed ^ 0x5555);
            // A fifth of the slots missed, as mlccd's on the testbed's paper-small.
            let missed: Vec<bool> = (0..x.len()).map(|_| n.next() < 0.2).collect();
            let mut l = Learner::new(LearnerConfig::default());
            let seen = feed_missing(&mut l, &x, |i| !missed[i]);
            let e = seen.iter().flatten().next().expect("learned");
            assert!(
                (e.bytes_per_iteration / (29.0 * MB) - 1.0).abs() <= 0.05,
                "seed {seed}: {e:?}"
            );
        }
    }

    #[test]
    fn periodic_traffic_with_jitter_and_noise_is_learned_within_a_few_iterations() {
        for seed in 1..=20 {
            // torch-solo's shape: ~10 slots of 29 MB, 3 of compute.
            let x = ddp(12, 10, 3, 29.0 * MB, seed);
            let mut l = Learner::new(LearnerConfig::default());
            let seen = feed(&mut l, &x);
            let first = seen.iter().position(Option::is_some).expect("learned");
            // After at most 3 whole iterations (plus the one in progress), i.e. 4 × 14 slots.
            assert!(
                first <= 4 * 14 + 2,
                "seed {seed}: learned only at slot {first}"
            );
            let e = seen
                .last()
                .unwrap()
                .clone()
                .expect("still learned at the end");
            assert!(
                (e.bytes_per_iteration / (29.0 * MB) - 1.0).abs() <= 0.05,
                "seed {seed}: {e:?}"
            );
            assert!((e.period_slots - 13.6).abs() <= 1.0, "seed {seed}: {e:?}");
        }
    }

    #[test]
    fn an_iteration_with_a_pause_between_its_buckets_is_one_iteration() {
        // Two buckets: 3 slots, a one-slot pause, 6 slots; then 4 slots of compute.
        let mut x = Vec::new();
        for _ in 0..10 {
            x.extend([2.0 * MB; 3]);
            x.push(0.0);
            x.extend([4.0 * MB; 6]);
            x.extend([0.0; 4]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        let e = feed(&mut l, &x).pop().unwrap().expect("learned");
        assert!((e.period_slots - 14.0).abs() < 0.5, "{e:?}");
        assert!(
            (e.bytes_per_iteration - 30.0 * MB).abs() < 0.01 * MB,
            "{e:?}"
        );
    }

    #[test]
    fn inspection_shows_the_period_and_the_iterations_found() {
        let mut l = Learner::new(LearnerConfig::default());
        assert_eq!(
            l.inspect(),
            Inspection {
                period: None,
                iterations: vec![],
                unlearned: Some(Unlearned::NoPeriod),
            }
        );
        // 8 slots of 1 MB, 6 quiet: 14-slot iterations of 8 MB.
        let mut x = Vec::new();
        for _ in 0..10 {
            x.extend([MB; 8]);
            x.extend([0.0; 6]);
        }
        feed(&mut l, &x);
        let i = l.inspect();
        let (period, correlation) = i.period.expect("a period");
        assert_eq!(period, 14);
        assert!(correlation > 0.8, "{i:?}");
        assert!(i.iterations.len() >= 3, "{i:?}");
        assert!(
            i.iterations
                .iter()
                .all(|&(len, b)| len == 14.0 && b == 8.0 * MB),
            "{i:?}"
        );
        assert_eq!(i.unlearned, None, "learned");
        // Quiet for good: withdrawn, and said why.
        let total = 80 * MB as u64;
        for t in 0..40 {
            l.observe(Slot(1000 + x.len() as u64 + t), total);
        }
        assert_eq!(l.inspect().unlearned, Some(Unlearned::Quiet));
    }

    #[test]
    fn aperiodic_traffic_never_crosses_the_bar() {
        for seed in 1..=30 {
            let mut n = Noise(seed);
            // iperf3-like: flows of random size and length at random times, or bulk.
            let mut x = Vec::new();
            while x.len() < 600 {
                let gap = n.in_range(0.0, 40.0) as usize;
                x.extend(std::iter::repeat_n(0.0, gap));
                let len = n.in_range(1.0, 60.0) as usize;
                let rate = n.in_range(0.1, 3.6) * MB;
                x.extend(std::iter::repeat_n(rate, len));
            }
            let mut l = Learner::new(LearnerConfig::default());
            let learned = feed(&mut l, &x).iter().filter(|e| e.is_some()).count();
            assert_eq!(learned, 0, "seed {seed}: learned random traffic");
        }
        // A bulk transfer at a steady rate has no period.
        let mut l = Learner::new(LearnerConfig::default());
        assert!(feed(&mut l, &[3.5 * MB; 400]).iter().all(Option::is_none));
    }

    #[test]
    fn iterations_that_shrink_as_other_jobs_finish_are_learned_by_their_exact_bytes() {
        // two-tier's 21.12-MB job: the same bytes every iteration, to the byte, while the jobs
        // sharing its links finish one by one and its iterations shrink from 54 slots to 43 —
        // never within 10 % of their mean four in a row.
        let lengths = [54, 48, 44, 43, 43, 43];
        // Quiet before the first iteration, as a job starting up is.
        let mut x = vec![0.0; 10];
        let mut starts = Vec::new();
        for len in lengths {
            starts.push(x.len());
            let active = len - 8;
            x.extend(std::iter::repeat_n(21.12 * MB / active as f64, active));
            x.extend([0.0; 8]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        // Learned once three whole iterations agree and a fourth has been seen: as the fifth
        // begins.
        let first = seen.iter().position(Option::is_some).expect("learned");
        assert!(
            (starts[4]..starts[4] + 2).contains(&first),
            "learned only at slot {first} (iterations begin at {starts:?})"
        );
        let e = seen.last().unwrap().as_ref().expect("still learned");
        assert!(
            (e.bytes_per_iteration / (21.12 * MB) - 1.0).abs() < 1e-6,
            "{e:?}"
        );
    }

    #[test]
    fn a_ring_s_chunks_are_not_read_as_its_iterations() {
        // A ring all-reduce moves its iteration in chunks of equal bytes, pausing at each for
        // the peer's: four chunks of 7.32 MB, three slots each and two quiet after, then the
        // compute. Three chunks in a row agree on their bytes exactly and on their length; the
        // fourth, its compute appended, moves the same bytes over a longer stretch.
        for compute in [6, 8, 12, 20] {
            let mut x = vec![0.0; 10];
            for _ in 0..12 {
                for chunk in 0..4 {
                    x.extend([7.32 * MB / 3.0; 3]);
                    x.extend(std::iter::repeat_n(
                        0.0,
                        if chunk == 3 { compute } else { 2 },
                    ));
                }
            }
            let mut l = Learner::new(LearnerConfig::default());
            for e in feed(&mut l, &x).iter().flatten() {
                assert!(
                    (e.bytes_per_iteration / (29.28 * MB) - 1.0).abs() < 0.05,
                    "compute {compute}: a chunk read as an iteration: {e:?}"
                );
            }
        }
    }

    #[test]
    fn equal_transfers_at_uneven_times_are_learned_only_at_their_true_size() {
        // A process that ships the same 4 MB every 6 to 64 slots (a checkpoint shard, a metrics
        // dump) agrees on its bytes exactly, and three transfers in a row may come at lengths
        // within the exact rule's 30 % (and with a correlation reaching its bar). Learned then,
        // it must be learned right: 4 MB an "iteration", each beginning where a transfer does,
        // never two transfers read as one iteration.
        let mut learned_seeds = 0;
        for seed in 1..=50 {
            let mut n = Noise(seed);
            let mut x = Vec::new();
            while x.len() < 600 {
                let gap = n.in_range(2.0, 60.0) as usize;
                x.extend(std::iter::repeat_n(0.0, gap));
                x.extend([MB; 4]);
            }
            let mut l = Learner::new(LearnerConfig::default());
            let seen = feed(&mut l, &x);
            learned_seeds += usize::from(slots_learned(&seen) > 0);
            for (slot, e) in seen.iter().enumerate() {
                let Some(e) = e else { continue };
                assert!(
                    (e.bytes_per_iteration / (4.0 * MB) - 1.0).abs() < 1e-9,
                    "seed {seed}: {e:?}"
                );
                let start = (e.iteration_start.0 - 1000) as usize;
                assert!(
                    x[start] == MB && (start == 0 || x[start - 1] == 0.0),
                    "seed {seed}, slot {slot}: the iteration begins mid-transfer: {e:?}"
                );
            }
        }
        // Some seeds come even enough to be learned, so the checks above were made.
        assert!(learned_seeds > 0, "no seed learned: nothing was checked");
    }

    #[test]
    fn inspecting_a_process_whose_period_faded_reads_only_the_window() {
        // Periodic, then long enough aperiodic that every iteration start seen has left the
        // window while no period stood.
        let mut x = ddp(10, 6, 4, 8.0 * MB, 3);
        let mut n = Noise(5);
        while x.len() < 100 + 2 * LearnerConfig::default().window_slots {
            x.extend(std::iter::repeat_n(0.0, n.in_range(0.0, 30.0) as usize));
            x.extend(std::iter::repeat_n(
                n.in_range(0.1, 3.6) * MB,
                n.in_range(1.0, 40.0) as usize,
            ));
        }
        let mut l = Learner::new(LearnerConfig::default());
        feed(&mut l, &x);
        let i = l.inspect();
        let window: f64 = LearnerConfig::default().window_slots as f64;
        assert!(
            i.iterations.iter().map(|w| w.0).sum::<f64>() <= window,
            "{i:?}"
        );
        assert!(i.iterations.iter().all(|w| w.1 > 0.0), "{i:?}");
    }

    #[test]
    fn a_job_that_stops_or_changes_its_batch_is_withdrawn_then_relearned() {
        let mut x = ddp(8, 8, 4, 20.0 * MB, 7);
        let learned_at = x.len();
        x.extend([0.0; 40]);
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[learned_at - 1].is_some());
        assert!(seen.last().unwrap().is_none(), "stopped: withdrawn");

        // Twice the bytes per iteration from iteration 9 on: withdrawn, then learned anew.
        let mut x = ddp(8, 8, 4, 20.0 * MB, 8);
        let change = x.len();
        x.extend(ddp(10, 8, 4, 40.0 * MB, 9));
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[change - 1].is_some());
        assert!(
            seen[change..change + 30].iter().any(Option::is_none),
            "a changed job is not scheduled on the old guess"
        );
        let e = seen.last().unwrap().clone().expect("relearned");
        assert!(
            (e.bytes_per_iteration / (40.0 * MB) - 1.0).abs() <= 0.05,
            "{e:?}"
        );
    }

    /// A job learned, then shared with jobs given turns before it: one iteration runs into the
    /// next with no quiet slot (the estimate is withdrawn), and the rest are stretched unevenly,
    /// paused mid-way at random, so no period stands out, while each moves the same bytes.
    fn learned_then_stretched(seed: u64) -> (Vec<f64>, usize, f64) {
        let per = 20.0 * MB;
        let mut n = Noise(seed | 1);
        let mut x = Vec::new();
        for _ in 0..8 {
            x.extend([per / 8.0; 8]);
            x.extend([0.0; 4]);
        }
        let merged = x.len();
        x.extend([per / 8.0; 16]);
        x.extend([0.0; 4]);
        for _ in 0..14 {
            let active = n.in_range(6.0, 30.0) as usize;
            let mut left = per;
            for i in 0..active {
                if n.next() < 0.15 {
                    x.extend(std::iter::repeat_n(0.0, n.in_range(1.0, 4.0) as usize));
                }
                let b = if i + 1 == active {
                    left
                } else {
                    per / active as f64
                };
                x.push(b);
                left -= b;
            }
            x.extend([0.0; 4]);
        }
        (x, merged, per)
    }

    #[test]
    fn a_withdrawn_estimate_comes_back_when_its_bytes_recur_though_no_period_stands_out() {
        for seed in 1..=5 {
            let (x, merged, per) = learned_then_stretched(seed);
            let mut l = Learner::new(LearnerConfig::default());
            let seen = feed(&mut l, &x);
            assert!(seen[merged - 1].is_some(), "seed {seed}: learned first");
            let gone = (merged..x.len())
                .find(|&i| seen[i].is_none())
                .unwrap_or_else(|| panic!("seed {seed}: the merged iterations withdrew nothing"));
            // Back within three iterations of the stretched ones (at most 42 slots each).
            let back = (gone..x.len())
                .find(|&i| seen[i].is_some())
                .unwrap_or_else(|| panic!("seed {seed}: never back"));
            assert!(
                back - gone <= 3 * 42,
                "seed {seed}: back after {} slots",
                back - gone
            );
            for e in seen[back..].iter().flatten() {
                assert!((e.bytes_per_iteration / per - 1.0).abs() < 0.002, "{e:?}");
            }
            let resumed = slots_learned(&seen[gone..]);
            // Without the rule, the same traffic is hardly learned again.
            let cfg = LearnerConfig {
                resume_iterations: 0,
                ..LearnerConfig::default()
            };
            let seen = feed(&mut Learner::new(cfg), &x);
            assert!(
                slots_learned(&seen[gone..]) < resumed / 2,
                "seed {seed}: {} slots learned without resuming, {resumed} with",
                slots_learned(&seen[gone..])
            );
        }
    }

    /// A ring rank under contention from its start: each iteration moves `per` bytes over
    /// 6 to 30 slots, paused mid-way now and then for 1 to 2 slots (other jobs' turns), then
    /// computes for 4: no period stands out for many iterations.
    fn stretched_rank(seed: u64, iterations: usize, per: f64) -> Vec<f64> {
        let mut n = Noise(seed | 1);
        let mut x = Vec::new();
        for _ in 0..iterations {
            let active = n.in_range(6.0, 30.0) as usize;
            for _ in 0..active {
                if n.next() < 0.15 {
                    x.extend(std::iter::repeat_n(0.0, n.in_range(1.0, 3.0) as usize));
                }
                x.push(per / active as f64);
            }
            x.extend([0.0; 4]);
        }
        x
    }

    /// The slot of the first estimate, and the estimate.
    fn first_learned(seen: &[Option<Learned>]) -> Option<(usize, &Learned)> {
        seen.iter()
            .enumerate()
            .find_map(|(i, e)| e.as_ref().map(|e| (i, e)))
    }

    #[test]
    fn a_rank_is_learned_at_its_peers_bytes_once_its_own_pauses_show_two_iterations_of_them() {
        let per = 20.0 * MB;
        for seed in 1..=10 {
            let x = stretched_rank(seed, 14, per);
            let own = feed(&mut Learner::new(LearnerConfig::default()), &x);
            let mut l = Learner::new(LearnerConfig::default());
            let heard = feed_hearing(&mut l, &x, |_| vec![per as u64]);
            let (at, e) = first_learned(&heard).expect("learned");
            // Two whole iterations of at most 30 + 4 + 30 slots of pauses mid-way, and a slot
            // into the third.
            assert!(at <= 2 * 64 + 1, "seed {seed}: learned at slot {at}");
            assert_eq!((e.reading, e.bytes_per_iteration), (Reading::Peer, per));
            assert!(
                first_learned(&own).is_none_or(|(o, _)| o > at),
                "seed {seed}: learned as soon without the peer's bytes"
            );
            assert!(
                heard[at..]
                    .iter()
                    .flatten()
                    .all(|e| e.bytes_per_iteration == per),
                "seed {seed}: its estimate moved off the peer's bytes"
            );
        }
    }

    /// A peer's bytes that are not this process's iterations: half of them (its pauses fall
    /// on every other point only), one and a half, or twice (a parameter server moving half
    /// a worker's bytes: its compute pauses between the points as long as on them).
    #[test]
    fn a_peers_bytes_its_own_pauses_do_not_show_are_not_taken() {
        let per = 20.0 * MB;
        for seed in 1..=10 {
            let x = stretched_rank(seed, 14, per);
            for wrong in [0.5, 1.5, 2.0] {
                let mut l = Learner::new(LearnerConfig::default());
                let seen = feed_hearing(&mut l, &x, |_| vec![(wrong * per) as u64]);
                assert!(
                    seen.iter().flatten().all(|e| e.reading != Reading::Peer),
                    "seed {seed}: learned at {wrong} times its bytes"
                );
            }
        }
    }

    #[test]
    fn aperiodic_traffic_never_crosses_the_bar_whatever_its_peers_say() {
        for seed in 1..=100 {
            let x = random_flows(seed);
            for peer in [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0] {
                let mut l = Learner::new(LearnerConfig::default());
                let seen = feed_hearing(&mut l, &x, |_| vec![(peer * MB) as u64]);
                assert_eq!(
                    slots_learned(&seen),
                    0,
                    "seed {seed}: learned at a peer's {peer} MB"
                );
            }
        }
    }

    #[test]
    fn no_peers_bytes_are_taken_with_the_rule_off() {
        let per = 20.0 * MB;
        let cfg = LearnerConfig {
            peer_iterations: 0,
            ..LearnerConfig::default()
        };
        let x = stretched_rank(1, 14, per);
        let seen = feed_hearing(&mut Learner::new(cfg), &x, |_| vec![per as u64]);
        assert!(seen.iter().flatten().all(|e| e.reading != Reading::Peer));
    }

    /// A peer heard no more (its estimate withdrawn, its reports stopped) is not taken once
    /// its last report is `PEER_FRESH_SLOTS` old; one heard now and then still is.
    #[test]
    fn a_peers_bytes_are_tried_while_it_reports_them() {
        let per = 20.0 * MB;
        let x = stretched_rank(1, 14, per);
        let with = feed_hearing(&mut Learner::new(LearnerConfig::default()), &x, |_| {
            vec![per as u64]
        });
        let (at, _) = first_learned(&with).expect("learned while heard");
        let stopped = at - PEER_FRESH_SLOTS as usize - 1;
        let heard_until = |i: usize| {
            if i < stopped {
                vec![per as u64]
            } else {
                Vec::new()
            }
        };
        let seen = feed_hearing(&mut Learner::new(LearnerConfig::default()), &x, heard_until);
        assert!(seen.iter().flatten().all(|e| e.reading != Reading::Peer));
        let every_fourth = |i: usize| {
            if i.is_multiple_of(4) {
                vec![per as u64]
            } else {
                Vec::new()
            }
        };
        let seen = feed_hearing(
            &mut Learner::new(LearnerConfig::default()),
            &x,
            every_fourth,
        );
        assert_eq!(
            first_learned(&seen).map(|(i, e)| (i, e.reading)),
            Some((at, Reading::Peer))
        );
    }

    #[test]
    fn sharing_links_stretches_iterations_without_withdrawing_the_estimate() {
        // Learned alone (8 slots of comm), then the same bytes over 16 slots, a competitor
        // sharing the link, then alone again.
        let mut x = ddp(6, 8, 4, 16.0 * MB, 11);
        let learned_at = x.len();
        x.extend(ddp(4, 16, 4, 16.0 * MB, 12));
        x.extend(ddp(4, 8, 4, 16.0 * MB, 13));
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[learned_at - 1].is_some());
        let lost = slots_unlearned(&seen[learned_at..]);
        assert_eq!(lost, 0, "withdrawn while the bytes per iteration held");
    }

    #[test]
    fn a_turn_given_mid_iteration_neither_splits_the_iteration_nor_withdraws_the_estimate() {
        // Learned alone (8 slots of comm, 4 of compute); then scheduled beside another job:
        // half its comm, a pause as long as the other's turn, the other half.
        let mut x = ddp(6, 8, 4, 16.0 * MB, 21);
        let learned_at = x.len();
        for _ in 0..12 {
            x.extend([2.0 * MB; 4]);
            x.extend([0.0; 10]);
            x.extend([2.0 * MB; 4]);
            x.extend([0.0; 4]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[learned_at - 1].is_some());
        let lost = slots_unlearned(&seen[learned_at..]);
        assert_eq!(lost, 0, "withdrawn when the schedule paused it");
        let e = seen.last().unwrap().clone().unwrap();
        assert!(
            (e.bytes_per_iteration / (16.0 * MB) - 1.0).abs() <= 0.02,
            "{e:?}"
        );
        assert!((e.period_slots - 22.0).abs() <= 1.0, "{e:?}");
    }

    #[test]
    fn a_burst_that_begins_late_in_a_slot_is_counted_in_its_own_iteration() {
        // Each iteration's burst begins late in a slot: 1-8 % of a slot's bytes before its
        // first full slot, below the active bar. Those bytes are the new iteration's; counted
        // in the last one, two iterations in a row disagree by twice as much as 2 % allows.
        let mut n = Noise(5);
        let mut x = Vec::new();
        for _ in 0..14 {
            let lead = n.in_range(0.01, 0.08) * 3.0 * MB;
            x.push(lead);
            x.extend([3.0 * MB; 6]);
            x.push(3.0 * MB - lead);
            x.extend([0.0; 5]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        let first = seen.iter().position(Option::is_some).expect("learned");
        // The first burst has no quiet before it: three whole iterations after the second.
        assert!(first <= 4 * 13 + 2, "learned only at slot {first}");
        let lost = slots_unlearned(&seen[first..]);
        assert_eq!(lost, 0, "withdrawn");
        let e = seen.last().unwrap().clone().unwrap();
        assert!(
            (e.last_iteration_bytes / (21.0 * MB) - 1.0).abs() < 1e-9,
            "{e:?}"
        );
    }

    #[test]
    fn a_pause_near_the_end_of_an_iteration_does_not_end_it() {
        // Learned alone; then a turn given after 95 % of each iteration's bytes.
        let mut x = ddp(6, 10, 4, 20.0 * MB, 31);
        let learned_at = x.len();
        for _ in 0..10 {
            x.extend([1.9 * MB; 10]);
            x.extend([0.0; 6]);
            x.push(1.0 * MB);
            x.extend([0.0; 4]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[learned_at - 1].is_some());
        let lost = slots_unlearned(&seen[learned_at..]);
        assert_eq!(lost, 0, "withdrawn when a turn came late in the iteration");
        let e = seen.last().unwrap().clone().unwrap();
        assert!(
            (e.last_iteration_bytes / (20.0 * MB) - 1.0).abs() <= 0.02,
            "{e:?}"
        );
    }

    #[test]
    fn a_quick_iteration_after_a_stretched_one_keeps_the_estimate() {
        // 12-slot iterations; one stretched to 30 slots by a competitor, the next done in 4
        // (3 at a rate the competitor left free, and compute that overlapped the wait).
        let mut x = ddp(6, 8, 4, 16.0 * MB, 41);
        let learned_at = x.len();
        x.extend([1.0 * MB; 16]);
        x.extend([0.0; 14]);
        x.extend([16.0 / 3.0 * MB; 3]);
        x.push(0.0);
        x.extend(ddp(4, 8, 4, 16.0 * MB, 42));
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        assert!(seen[learned_at - 1].is_some());
        let lost = slots_unlearned(&seen[learned_at..]);
        assert_eq!(lost, 0, "withdrawn after a quick iteration");
    }

    #[test]
    fn iterations_read_in_pairs_are_not_stood_behind() {
        // 12 MB an iteration, alternately in 2 slots and in 12, 4 of compute each: the shapes
        // repeat every two iterations, so the period found is two iterations long, and pairs
        // of them agree on their 24 MB as single ones would.
        let mut x = Vec::new();
        for _ in 0..12 {
            x.extend([6.0 * MB; 2]);
            x.extend([0.0; 4]);
            x.extend([1.0 * MB; 12]);
            x.extend([0.0; 4]);
        }
        let mut l = Learner::new(LearnerConfig::default());
        for e in feed(&mut l, &x).into_iter().flatten() {
            assert!(
                (e.bytes_per_iteration / (12.0 * MB) - 1.0).abs() <= 0.05,
                "learned at twice the job's iteration: {e:?}"
            );
        }
    }

    #[test]
    fn the_estimate_reads_like_a_progress_file() {
        let x = ddp(10, 6, 6, 12.0 * MB, 3);
        let mut l = Learner::new(LearnerConfig::default());
        let mut total = 0.0;
        let mut last_iteration = 0;
        for (i, b) in x.iter().enumerate() {
            total += b;
            l.observe(Slot(i as u64 + 1), total as u64);
            if let Some(e) = l.estimate() {
                assert!(e.iteration >= last_iteration, "iterations only move on");
                last_iteration = e.iteration;
                assert!(
                    e.sent_this_iteration <= 1.1 * e.bytes_per_iteration,
                    "{e:?}"
                );
                assert!(e.iteration_start.0 <= i as u64 + 1);
            }
        }
        assert!(last_iteration >= 8, "{last_iteration}");
    }

    /// Random flows (the property test's generator) whose sizes happen to repeat: three "iterations"
    /// in a row agree on their bytes and length, at a correlation of 0.52–0.79. Found by the
    /// property test at about one seed in ten thousand; one more agreeing iteration, asked of
    /// any correlation below `strong_correlation`, turns them down.
    #[test]
    fn random_flows_that_agree_by_chance_are_not_learned() {
        for seed in [10313869666080028998u64, 1241409636326270154] {
            let x = random_flows(seed);
            let learned = |cfg: LearnerConfig| feed(&mut Learner::new(cfg), &x);
            let weak = LearnerConfig {
                strong_correlation: 0.0,
                ..LearnerConfig::default()
            };
            assert!(
                learned(weak).iter().any(Option::is_some),
                "seed {seed}: the chance agreement this test is about is gone"
            );
            assert!(
                learned(LearnerConfig::default())
                    .iter()
                    .all(Option::is_none),
                "seed {seed}: random flows learned"
            );
        }
    }

    /// Chatter between small bursts (up to 1.4 % of the busiest slot here) passes the lead-in's
    /// share; counted as an iteration's first slot, it moved starts by a slot at random, three
    /// iterations disagreed on their length, and the job was learned after six.
    #[test]
    fn a_ring_whose_iterations_vary_twofold_is_learned_by_the_totals_it_pauses_at() {
        // paper-small's VGG19 rank under contention: four 7.32-MB chunks an iteration, the
        // steps mostly flowing on (now and then one waits for its peer), the compute 6 to 20
        // slots: iterations of 14 to 33 slots, no period.
        let chunk = 7.32 * MB;
        let mut n = Noise(7);
        let mut x = vec![0.0; 5];
        let mut ends = Vec::new();
        for _ in 0..16 {
            for step in 0..4 {
                let slots = 2 + (n.next() < 0.5) as usize;
                x.extend(std::iter::repeat_n(chunk / slots as f64, slots));
                if step < 3 && n.next() < 0.2 {
                    x.extend(std::iter::repeat_n(0.0, n.in_range(1.0, 8.0) as usize));
                }
            }
            ends.push(x.len());
            x.extend(std::iter::repeat_n(0.0, n.in_range(6.0, 21.0) as usize));
        }
        let mut l = Learner::new(LearnerConfig::default());
        let seen = feed(&mut l, &x);
        let first = seen.iter().position(Option::is_some).expect("learned");
        // Eight chunk points after the first: where the steps rarely wait, the difference that
        // recurs most may be the iteration itself, and eight of it end with the ninth.
        assert!(
            first <= ends[8],
            "learned only at slot {first} (iterations end at {ends:?})"
        );
        for (slot, e) in seen.iter().enumerate().skip(first) {
            let e = e.as_ref().expect("withdrawn");
            assert!(
                (e.bytes_per_iteration / (4.0 * chunk) - 1.0).abs() < 1e-6,
                "slot {slot}: {e:?}"
            );
            assert_eq!(e.reading, Reading::Pauses, "slot {slot}");
        }
        // In the compute after an iteration, that iteration is done, and the next one's bytes
        // count from zero once it moves.
        let end = ends[10];
        let done = seen[end].as_ref().unwrap();
        let next = seen[ends[10] + (x[end..].iter().take_while(|&&b| b == 0.0).count())]
            .as_ref()
            .unwrap();
        assert!(
            (done.sent_this_iteration - 4.0 * chunk).abs() < 1.0,
            "{done:?}"
        );
        assert_eq!(next.iteration, done.iteration + 1, "{next:?}");
        assert!(next.sent_this_iteration < chunk, "{next:?}");
    }

    #[test]
    fn chatter_before_a_burst_is_not_its_lead_in() {
        let x = ddp(10, 7, 16, MB, 17391861635743164792);
        let seen = feed(&mut Learner::new(LearnerConfig::default()), &x);
        let first = seen.iter().position(Option::is_some);
        assert!(first.is_some_and(|f| f <= 4 * 25), "learned at {first:?}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Any burst-then-compute shape of six slots or more, jittered: learned after at
            /// most four whole iterations (three where the correlation is strong from the
            /// start; the jitter of the shortest shapes weakens it), bytes within 5 %, period
            /// within a slot of the one drawn. (Shorter iterations are below what 30 ms slots resolve.)
            /// Drawn afresh each run: none of 200,000 draws failed (a release build with the
            /// case count raised), so 64 a run fail well under one run in a thousand.
            #[test]
            fn periodic_shapes_are_learned(
                active in 2usize..12,
                compute in 4usize..20,
                mb in 1.0f64..200.0,
                seed in any::<u64>(),
            ) {
                let x = ddp(10, active, compute, mb * MB, seed);
                let mut l = Learner::new(LearnerConfig::default());
                let seen = feed(&mut l, &x);
                // The first burst has no quiet before it: four whole iterations after the
                // first start seen is the end of the fifth, at most this long each.
                let per = active + compute + 2;
                let first = seen.iter().position(Option::is_some);
                prop_assert!(first.is_some_and(|f| f <= 5 * per), "learned at {first:?}");
                let e = seen.last().unwrap().clone();
                prop_assert!(e.is_some(), "withdrawn at the end");
                let e = e.unwrap();
                prop_assert!((e.bytes_per_iteration / (mb * MB) - 1.0).abs() <= 0.05, "{e:?}");
                // The period the jitter drew: ten iterations fill the series.
                let true_period = x.len() as f64 / 10.0;
                prop_assert!((e.period_slots - true_period).abs() <= 1.0, "{e:?}");
            }
        }
    }

    /// Flows of random size, rate and spacing do not cross the bar: 512 series, the same in
    /// every run. Not drawn afresh each run, because the bar is not proof against chance:
    /// about one series in 10,000 to 40,000 of this generator shows three or four "iterations"
    /// agreeing within 2 % at an autocorrelation just over 0.8 and is learned (seeds
    /// 3460541110678476754 and 17749575565837323598, at slots 350 and 330 of 500;
    /// docs/notes/2026-12-06-two-exact-iterations.md), so 64 fresh draws a run would fail
    /// about one CI run in a few hundred on a learner that did not change.
    #[test]
    fn random_flows_are_never_learned() {
        for i in 0..512u64 {
            let seed = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let x = random_flows(seed);
            let mut l = Learner::new(LearnerConfig::default());
            let learned = feed(&mut l, &x).iter().position(Option::is_some);
            assert!(learned.is_none(), "seed {seed} learned at slot {learned:?}");
        }
    }
}
