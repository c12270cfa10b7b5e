//! A precedence query's two answers from one walk of a link's entries.
//!
//! A flow that asks for precedence feedback with `committed` (every mlccd and simulated host in
//! the default policy) wants, per link, the load ranked before it and the first rates ranked
//! after it that start this slot. On a link below [`super::TREE_FROM`] entries each answer is a
//! walk of the sorted entries, one from the front to the asker's key and one from the back to it
//! (and a range search for the hidden ones after it). Here one walk in key order gives both, with
//! the same exact sums and the same float subtractions in the same order, so the answers are
//! equal to the bit to [`LoadTable::feedback`]'s and [`LoadTable::committed`]'s.

use std::cmp::Ordering;

use super::order::{CHUNK, float};
use super::{
    FeedbackMode, Handle, LinkLoad, LoadTable, Own, Query, TableError, add_cells, publisher_tag,
    rate_at,
};
use crate::slot::Slot;
use crate::topology::LinkId;

/// How many of the asker's own entries (its host's, its flow's) one walk remembers on each side
/// of its key; a host with more on the link is answered by the two walks instead.
const HIDDEN: usize = 16;

/// Entries to take out of one answer, in the order the separate walks take them out: the
/// asking host's in key order, then the asking flow's own under another key.
#[derive(Default)]
struct Hidden {
    host: [Handle; HIDDEN],
    /// The asking host's entries seen, kept or not: past [`HIDDEN`] the walk's answer is void.
    len: usize,
    own: Option<Handle>,
}

impl Hidden {
    fn push(&mut self, h: Handle) {
        if let Some(slot) = self.host.get_mut(self.len) {
            *slot = h;
        }
        self.len += 1;
    }

    fn full(&self) -> bool {
        self.len > HIDDEN
    }

    fn in_order(&self) -> impl Iterator<Item = Handle> + '_ {
        self.host[..self.len.min(HIDDEN)]
            .iter()
            .copied()
            .chain(self.own)
    }
}

/// What one walk found: exact sums and the entries to take out of each.
#[derive(Default)]
struct Walk {
    before: [i128; CHUNK],
    hidden_before: Hidden,
    after: i128,
    hidden_after: Hidden,
}

impl LoadTable {
    /// [`Self::feedback`] into `out` and [`Self::committed`] in `from`, for one flow on one
    /// link: the same answers to the bit, from one walk of a small link's entries where the two
    /// would walk it twice, or from its prefix sums where it is asked often between changes.
    pub fn feedback_committed(
        &mut self,
        link: LinkId,
        q: &Query<'_>,
        mode: FeedbackMode,
        from: Slot,
        out: &mut [f64],
    ) -> Result<f64, TableError> {
        if mode == FeedbackMode::Precedence
            && let Some(committed) = self.both_at_once(link, q, from, out)?
        {
            return Ok(committed);
        }
        self.feedback(link, q, mode, from, out)?;
        self.committed(link, q, from)
    }

    /// Both precedence answers from the link's prefix sums (built if it is asked often enough)
    /// or from one walk, or `None` where neither applies: see [`LinkLoad::prefix_walk`] and
    /// [`LinkLoad::walk`]; a link with an order tree, whose sums are logarithmic already; `out`
    /// spanning more than one chunk; a link that lags the table.
    fn both_at_once(
        &mut self,
        link: LinkId,
        q: &Query<'_>,
        from: Slot,
        out: &mut [f64],
    ) -> Result<Option<f64>, TableError> {
        let (now, horizon) = (self.now, self.horizon as u64);
        let l = (self.links.get_mut(&link)).ok_or(TableError::UnknownLink(link))?;
        // A link that lags the table may hold lapsed entries, which both answers take out
        // separately, by float subtraction, and which catching it up would drop; a current
        // link holds none, and answers the same caught up or not, to the bit.
        if l.expiry_floor <= now.0 || out.len() > CHUNK {
            return Ok(None);
        }
        if (super::PREFIX_FROM..super::TREE_FROM).contains(&l.entries.len()) {
            // The sums are on the link's slot: it catches up first, as a write to it would.
            l.catch_up(link, now);
            let mut w = Walk::default();
            if l.prefix_walk(q, from, out.len(), &mut w) {
                return Ok(Some(l.answers(horizon, &w, from, out)));
            }
        }
        Ok(l.one_walk(horizon, q, from, out))
    }
}

impl LinkLoad {
    /// Both answers from one walk, or `None` where it does not apply: the link keeps an order
    /// tree, `out` spans more than one chunk, or the asker has more entries on the link than
    /// [`HIDDEN`].
    fn one_walk(&self, horizon: u64, q: &Query<'_>, from: Slot, out: &mut [f64]) -> Option<f64> {
        if self.order.is_some() || out.len() > CHUNK {
            return None;
        }
        let mut w = Walk::default();
        (self.walk(q, from, out.len(), &mut w)).then(|| self.answers(horizon, &w, from, out))
    }

    /// Feedback into `out` and the committed load, from what a walk (or the prefix sums) found.
    fn answers(&self, horizon: u64, w: &Walk, from: Slot, out: &mut [f64]) -> f64 {
        // Feedback: the exact sum, then what the asker must not see, then no negative load.
        for (cell, &s) in out.iter_mut().zip(&w.before) {
            *cell = 0.0;
            *cell += float(s);
        }
        for h in w.hidden_before.in_order() {
            let e = self.entry(h);
            for (i, cell) in out.iter_mut().enumerate() {
                *cell -= rate_at(e, from.plus(i as u64));
            }
        }
        out.iter_mut().for_each(|x| *x = x.max(0.0));
        // Committed: as `committed`, which answers 0 for a slot no entry can start in.
        let k = horizon;
        if from.0 + 2 * k <= self.now.0 || from.0 >= self.now.0 + 2 * k {
            return 0.0;
        }
        let mut sum = float(w.after);
        for h in w.hidden_after.in_order() {
            sum -= rate_at(self.entry(h), from);
        }
        sum.max(0.0)
    }

    /// What [`Self::walk`] finds, from the prefix sums: false where they do not apply (the
    /// link's slot is not `from`, whose plans the committed load adds up; the first question
    /// since its keys or slot changed, which walks; more than [`HIDDEN`] entries hidden on a
    /// side). Builds them for the second question.
    fn prefix_walk(&mut self, q: &Query<'_>, from: Slot, len: usize, w: &mut Walk) -> bool {
        // The sums cover the K slots from the link's: what a flow asks about.
        let width = self.total.len() / 2;
        if from != self.now || len > width {
            return false;
        }
        if !self.prefix.is_built() {
            self.asked += 1;
            if self.asked < 2 {
                return false;
            }
            (self.prefix).build(self.now.0, width, &self.entries, &self.booked);
        }
        let p = &self.prefix;
        debug_assert_eq!(p.frame(), self.now.0);
        let (count, equal) = p.position(q.key, |h| &self.slab[h as usize].key);
        p.add_before(count, from.0, &mut w.before[..len]);
        w.after = p.first_from(count + usize::from(equal));
        self.hidden_of(q, from, w);
        !(w.hidden_before.full() || w.hidden_after.full())
    }

    /// The entries `q` hides on each side of its key, in the order [`Self::walk`] finds them:
    /// the asking host's in key order, then the asking flow's own under another key; after the
    /// key, only those whose plans start in `from`.
    fn hidden_of(&self, q: &Query<'_>, from: Slot, w: &mut Walk) {
        let starts = |h: Handle| self.booked.get(h as usize).0 == from.0;
        for (side, h, own) in self.own_entries(q) {
            let hidden = match side {
                Ordering::Less => &mut w.hidden_before,
                _ if starts(h) => &mut w.hidden_after,
                _ => continue,
            };
            match own {
                Own::Host => hidden.push(h),
                Own::Flow => hidden.own = Some(h),
            }
        }
    }

    /// Walks the entries once in key order: the booked cells of those ranked before `q`'s key
    /// in slots `from..from + len` (inside the link's window), the first cells of those ranked
    /// after it whose plans start in `from`, and on each side the entries `q` hides. False where
    /// `q` hides more than [`HIDDEN`] on a side.
    fn walk(&self, q: &Query<'_>, from: Slot, len: usize, w: &mut Walk) -> bool {
        if self.entries.len() >= super::TREE_FROM {
            self.tree_wanted.set();
        }
        let (lo, hi) = (self.now.0, self.now.0 + self.total.len() as u64);
        let (a, b) = (from.0.max(lo), (from.0 + len as u64).min(hi));
        let tag = q.exclude_publisher.map(publisher_tag);
        // Keys are sorted: past the asker's, no entry needs comparing with it.
        let mut past = false;
        for (k, &h) in &self.entries {
            let (first, fixed) = self.booked.get(h as usize);
            let side = if past {
                Ordering::Greater
            } else {
                k.cmp(q.key)
            };
            let hidden = match side {
                Ordering::Less => {
                    add_cells(&mut w.before, from.0, (a, b), first, fixed);
                    &mut w.hidden_before
                }
                Ordering::Equal => {
                    past = true;
                    continue;
                }
                Ordering::Greater => {
                    past = true;
                    if first != from.0 {
                        continue;
                    }
                    w.after += fixed.first().copied().unwrap_or(0);
                    &mut w.hidden_after
                }
            };
            if tag == Some(self.booked.tag(h as usize)) && q.excludes(self.entry(h)) {
                hidden.push(h);
            } else if k.flow == *q.flow {
                hidden.own = Some(h);
            }
        }
        !(w.hidden_before.full() || w.hidden_after.full())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fid, put};
    use super::*;
    use crate::flow::{PrecedenceKey, Rank};
    use crate::units::BytesPerSec;

    /// The two separate answers and, where one walk applies, its answers: equal to the bit.
    fn both_ways(t: &mut LoadTable, flow: &str, rank: u64, host: &str, from: Slot) -> Option<f64> {
        let f = fid(flow);
        let key = PrecedenceKey::new(Rank(rank), f.clone());
        let q = Query {
            flow: &f,
            key: &key,
            exclude_publisher: Some(host),
        };
        let mode = FeedbackMode::Precedence;
        let mut sep = vec![0.0; 4];
        t.feedback(LinkId(0), &q, mode, from, &mut sep).unwrap();
        let committed = t.committed(LinkId(0), &q, from).unwrap();
        let mut pair = vec![0.0; 4];
        let c = t
            .feedback_committed(LinkId(0), &q, mode, from, &mut pair)
            .unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&pair),
            bits(&sep),
            "{flow} at rank {rank} from {from:?}"
        );
        assert_eq!(c.to_bits(), committed.to_bits(), "{flow} at rank {rank}");
        let mut walked = vec![0.0; 4];
        let one = t.links[&LinkId(0)].one_walk(t.horizon as u64, &q, from, &mut walked);
        if one.is_some() {
            assert_eq!(bits(&walked), bits(&sep));
        }
        one
    }

    fn busy_table(flows: u64) -> LoadTable {
        let mut t = LoadTable::new(4, Slot(100), [(LinkId(0), BytesPerSec(1e9))]);
        for i in 0..flows {
            // Rates that do not add up exactly in floats, plans starting in three slots, four
            // hosts and four ranks, so askers hide entries on both sides of their key.
            let rates: Vec<f64> = (0..4)
                .map(|j| 1e6 / 3.0 * ((i * 7 + j) % 5) as f64)
                .collect();
            let host = format!("h{}", i % 4);
            put(
                &mut t,
                &format!("f{i}"),
                &host,
                (i / 4) % 4,
                99 + i % 3,
                &rates,
            );
        }
        t
    }

    #[test]
    fn one_walk_answers_as_the_two_walks_do() {
        let mut t = busy_table(40);
        let mut walked = 0;
        for i in 0..40u64 {
            for from in [Slot(100), Slot(101)] {
                // The asker's own entry under its rank, or under another one before or after it.
                for rank in [i % 4, (i + 1) % 4, (i + 3) % 4] {
                    walked += usize::from(
                        both_ways(&mut t, &format!("f{i}"), rank, "h1", from).is_some(),
                    );
                }
            }
        }
        assert_eq!(
            walked,
            40 * 2 * 3,
            "every question of a small link in one walk"
        );
        // A flow the link has never seen, from a host with no entries.
        assert!(both_ways(&mut t, "new", 2, "h9", Slot(100)).is_some());
    }

    #[test]
    fn a_host_with_more_entries_than_it_remembers_is_answered_by_two_walks() {
        let mut t = busy_table(40);
        for j in 0..=HIDDEN {
            put(&mut t, &format!("b{j}"), "hb", 0, 100, &[1e6 / 3.0; 4]);
            put(&mut t, &format!("a{j}"), "ha", 3, 100, &[1e6 / 7.0; 4]);
        }
        // Too many of its host's entries before its key, or after it starting in the slot.
        assert_eq!(both_ways(&mut t, "f1", 3, "hb", Slot(100)), None);
        assert_eq!(both_ways(&mut t, "f1", 0, "ha", Slot(100)), None);
        // Where they do not start in the slot asked, the walk keeps none of them.
        assert!(both_ways(&mut t, "f1", 0, "ha", Slot(101)).is_some());
        // Another asker on the same link hides few of them.
        assert!(both_ways(&mut t, "x", 2, "h1", Slot(100)).is_some());
    }

    #[test]
    fn a_link_with_an_order_tree_is_answered_from_the_tree() {
        let mut t = busy_table(super::super::TREE_FROM as u64 + 8);
        // The first read wants a tree, the next write builds it.
        both_ways(&mut t, "f3", 1, "h9", Slot(100));
        assert!(
            !t.links[&LinkId(0)].prefix.is_built(),
            "a big link keeps no prefix sums"
        );
        put(&mut t, "f0", "h0", 0, 99, &[1.0; 4]);
        assert!(t.links[&LinkId(0)].order.is_some());
        assert_eq!(both_ways(&mut t, "f3", 1, "h9", Slot(100)), None);
    }

    /// The prefix sums answer as the two walks do, through rewrites under the same key (which
    /// keep them), and are dropped when the keys or the link's slot change.
    #[test]
    fn prefix_sums_answer_as_the_walks_do_and_follow_rewrites() {
        let mut t = busy_table(40);
        let prefix = |t: &LoadTable| t.links[&LinkId(0)].prefix.is_built();
        let ask_all = |t: &mut LoadTable| {
            for i in 0..40u64 {
                for rank in [i % 4, (i + 1) % 4] {
                    both_ways(t, &format!("f{i}"), rank, &format!("h{}", i % 4), Slot(100));
                }
            }
            both_ways(t, "new", 2, "h9", Slot(100));
        };
        both_ways(&mut t, "f1", 0, "h1", Slot(100));
        assert!(!prefix(&t), "the first question walks");
        ask_all(&mut t);
        assert!(prefix(&t), "later ones build the prefix sums");
        // Same keys (rank (i / 4) % 4), new plans starting in other slots: kept, and right.
        for (n, i) in [3u64, 17, 17, 38, 0].into_iter().enumerate() {
            let rates = [1e6 / 7.0 * n as f64, 2.5e5, 0.0, 1e6 / 3.0];
            put(
                &mut t,
                &format!("f{i}"),
                &format!("h{}", i % 4),
                (i / 4) % 4,
                99 + n as u64 % 3,
                &rates,
            );
            assert!(prefix(&t), "a rewrite under the same key keeps them");
            ask_all(&mut t);
        }
        // Another rank: the keys change.
        put(&mut t, "f5", "h1", 3, 100, &[1.0; 4]);
        assert!(!prefix(&t), "a new key drops them");
        ask_all(&mut t);
        assert!(prefix(&t));
        // Another slot: the window moves.
        t.advance(Slot(101));
        both_ways(&mut t, "f1", 0, "h1", Slot(101));
        assert!(!prefix(&t), "a new slot drops them");
        both_ways(&mut t, "f2", 0, "h2", Slot(101));
        assert!(prefix(&t));
        // A question about another slot than the link's is walked, and answered alike.
        both_ways(&mut t, "f2", 0, "h2", Slot(102));
    }
}
