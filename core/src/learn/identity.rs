//! Which learned processes are one job (docs/design.md §9, "No progress file"). A process
//! learned from its sockets names no job; each starts as a job of its own, under its own
//! [`Label`], and goes by the least label among its own and those heard from the learned
//! processes at the other ends of its connections. Where a job's processes reach one another
//! through their flows (a ring's cycle, a parameter server's two ways), every one of them holds
//! the job's least label after as many slots as the longest chain between two of them: every
//! host then names the job alike, so its flows follow one another in Alg. 2 and break ties in
//! one order on every link.
//!
//! A label only ever falls, so the names settle and never flap. A process that leaves may
//! leave its label behind among the others: they still agree, under a name nobody owns.
//!
//! The job's processes also count its iterations alike. Each learner counts from the first
//! iteration it saw, and hosts find a process at different times, so their counts differ by a
//! constant; Alg. 2 matches a flow with its upstream's reports of the same iteration, and the
//! rank rules read iterations completed. A process takes the offset between its count and the
//! count heard over the connection its label came from (the most frequent difference of the
//! last [`OFFSET_VOTES`] reports, so a report from either side of an iteration boundary does
//! not move it), and reports its count plus that offset: every process of the job then counts
//! as the label's owner does.

use std::collections::VecDeque;
use std::fmt;
use std::hash::Hash;

use crate::hash::Map;

/// What a learned job's id starts with; the rest is its [`Label`].
pub const JOB_PREFIX: &str = "learned-";

/// A learned process's name for its job: at first its own (its host and pid, unique in a
/// cluster at any time), later the least of those heard.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label(Box<str>);

impl Label {
    /// The label a process starts with.
    pub fn own(host: &str, pid: u32) -> Label {
        Label(format!("{host}-{pid}").into())
    }

    /// The label of a learned job's id; `None` for a job that writes a progress file (or an
    /// id that names no label).
    pub fn of_job(job: &str) -> Option<Label> {
        job.strip_prefix(JOB_PREFIX)
            .filter(|l| !l.is_empty())
            .map(|l| Label(l.into()))
    }

    /// The id of the job this label names.
    pub fn job_id(&self) -> String {
        format!("{JOB_PREFIX}{}", self.0)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The label a learned process goes by: the least of its own and those `heard` from the
/// learned processes its connections lead to.
pub fn agree<'a>(own: &'a Label, heard: impl IntoIterator<Item = &'a Label>) -> &'a Label {
    heard.into_iter().fold(own, |least, l| least.min(l))
}

/// Reports whose count differences vote on a connection's iteration offset.
pub const OFFSET_VOTES: usize = 8;

/// One learned process's name for its job and its iteration offset, from what it heard over
/// its connections (`C`: however the driver names a connection).
#[derive(Clone, Debug)]
pub struct Identity<C> {
    own: Label,
    heard: Map<C, Heard>,
}

/// What a report of a learned flow says of its sender: the job it goes by, its iteration as
/// the job counts it, and the bytes its iterations move (0: not said).
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub label: Label,
    pub iteration: u64,
    pub bytes_per_iteration: u64,
}

#[derive(Clone, Debug)]
struct Heard {
    label: Label,
    /// The bytes per iteration the last report said, until taken.
    bytes_per_iteration: Option<u64>,
    /// Their count minus ours, per report, newest last.
    diffs: VecDeque<i64>,
}

impl Heard {
    /// The most frequent difference (the newest among equals).
    fn offset(&self) -> i64 {
        let mut best = (0, 0);
        for &d in &self.diffs {
            let n = self.diffs.iter().filter(|&&x| x == d).count();
            if n >= best.0 {
                best = (n, d);
            }
        }
        best.1
    }
}

impl<C: Clone + Eq + Hash> Identity<C> {
    pub fn new(own: Label) -> Self {
        Identity {
            own,
            heard: Map::default(),
        }
    }

    /// A report over `conn` of a learned flow; `mine` is this process's own count now, if it
    /// has one.
    pub fn hear(&mut self, conn: C, report: Report, mine: Option<u64>) {
        let h = self.heard.entry(conn).or_insert_with(|| Heard {
            label: report.label.clone(),
            bytes_per_iteration: None,
            diffs: VecDeque::new(),
        });
        if h.label != report.label {
            h.label = report.label;
            h.diffs.clear();
        }
        h.bytes_per_iteration = Some(report.bytes_per_iteration).filter(|&b| b > 0);
        if let Some(mine) = mine {
            h.diffs.push_back(report.iteration as i64 - mine as i64);
            if h.diffs.len() > OFFSET_VOTES {
                h.diffs.pop_front();
            }
        }
    }

    /// The bytes per iteration heard since the last call, one per connection: a peer that
    /// stops reporting (its estimate withdrawn) is not heard again, where its label stays.
    pub fn take_peer_bytes(&mut self) -> Vec<u64> {
        self.heard
            .values_mut()
            .filter_map(|h| h.bytes_per_iteration.take())
            .collect()
    }

    /// Forgets what was heard over the connections `open` says are closed.
    pub fn retain(&mut self, open: impl Fn(&C) -> bool) {
        self.heard.retain(|c, _| open(c));
    }

    /// The label the process goes by ([`agree`]).
    pub fn label(&self) -> &Label {
        agree(&self.own, self.heard.values().map(|h| &h.label))
    }

    /// The process's count `mine` as the job counts: plus the offset of the connection its
    /// label came from (the least offset among several), unchanged where the label is its own.
    pub fn iteration(&self, mine: u64) -> u64 {
        let label = self.label();
        let offset = self
            .heard
            .values()
            .filter(|h| &h.label == label && !h.diffs.is_empty())
            .map(Heard::offset)
            .min()
            .unwrap_or(0);
        mine.saturating_add_signed(offset).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(label: Label, iteration: u64) -> Report {
        Report {
            label,
            iteration,
            bytes_per_iteration: 0,
        }
    }

    #[test]
    fn a_label_names_its_job_and_is_read_back_from_it() {
        let l = Label::own("h1", 10);
        assert_eq!(l.job_id(), "learned-h1-10");
        assert_eq!(Label::of_job(&l.job_id()), Some(l));
        assert_eq!(Label::of_job("resnet"), None);
        assert_eq!(Label::of_job("learned-"), None);
    }

    #[test]
    fn a_process_goes_by_the_least_label_it_knows() {
        let (a, b, c) = (
            Label::own("h2", 7),
            Label::own("h1", 30),
            Label::own("h3", 1),
        );
        assert_eq!(agree(&a, []), &a);
        assert_eq!(agree(&a, [&c]), &a);
        assert_eq!(agree(&a, [&c, &b]), &b);
    }

    /// Rings of `n` processes, each hearing only its predecessor's label (a ring's flows go
    /// one way), the labels exchanged once per round: every process agrees within n - 1 rounds,
    /// and two rings keep two names.
    #[test]
    fn every_rank_of_a_ring_agrees_within_its_length_and_two_rings_stay_apart() {
        for n in 2..9u32 {
            let own: Vec<Label> = (0..2 * n)
                .map(|i| Label::own(&format!("h{}", (i * 7919) % 97), i))
                .collect();
            let mut now = own.clone();
            let pred = |i: u32| {
                if i.is_multiple_of(n) {
                    i + n - 1
                } else {
                    i - 1
                }
            };
            for _ in 0..n - 1 {
                now = (0..2 * n)
                    .map(|i| agree(&own[i as usize], [&now[pred(i) as usize]]).clone())
                    .collect();
            }
            for ring in [0..n, n..2 * n] {
                let least = own[ring.start as usize..ring.end as usize].iter().min();
                for i in ring {
                    assert_eq!(Some(&now[i as usize]), least, "ring of {n}, rank {i}");
                }
            }
            assert_ne!(now[0], now[n as usize]);
        }
    }

    #[test]
    fn a_process_counts_iterations_as_the_owner_of_its_label_does() {
        let mut id: Identity<u8> = Identity::new(Label::own("h5", 1));
        assert_eq!(id.iteration(7), 7, "its own label: its own count");
        // The upstream counts 3 ahead; one report from across an iteration boundary (4 ahead)
        // does not move the offset.
        for (theirs, mine) in [(10, 7), (11, 7), (10, 7), (11, 8), (12, 9)] {
            id.hear(1, report(Label::own("h1", 9), theirs), Some(mine));
        }
        assert_eq!(id.label(), &Label::own("h1", 9));
        assert_eq!(id.iteration(9), 12);
        // A greater label over another connection says nothing about the count.
        id.hear(2, report(Label::own("h7", 1), 100), Some(9));
        assert_eq!(id.iteration(9), 12);
        // Heard before it had a count of its own: the label, but no offset yet.
        let mut fresh: Identity<u8> = Identity::new(Label::own("h5", 2));
        fresh.hear(1, report(Label::own("h1", 9), 10), None);
        assert_eq!(fresh.label(), &Label::own("h1", 9));
        assert_eq!(fresh.iteration(4), 4);
        // The connection closes: its own label and count again.
        id.retain(|&c| c != 1);
        assert_eq!(id.label(), &Label::own("h5", 1));
        assert_eq!(id.iteration(9), 9);
    }

    /// Along a chain (a ring's ranks, each hearing its predecessor), every process ends up
    /// counting as the first does, whatever its own count started from.
    #[test]
    fn counts_agree_along_a_chain() {
        let starts = [0u64, 3, 1, 6, 2];
        let mut ids: Vec<Identity<u8>> = (0..5)
            .map(|i| Identity::new(Label::own(&format!("h{i}"), 1)))
            .collect();
        // Round after round, each process hears its predecessor's count as the job's.
        for round in 1..=10u64 {
            let reported: Vec<(Label, u64)> = (0..5)
                .map(|i| {
                    let mine = round + 20 - starts[i];
                    (ids[i].label().clone(), ids[i].iteration(mine))
                })
                .collect();
            for i in 1..5 {
                let mine = round + 20 - starts[i];
                let (l, it) = reported[i - 1].clone();
                ids[i].hear(0, report(l, it), Some(mine));
            }
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(id.label(), &Label::own("h0", 1));
            assert_eq!(id.iteration(30 - starts[i]), 30, "rank {i}");
        }
    }
}
