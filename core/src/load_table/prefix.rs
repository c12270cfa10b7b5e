//! [`Prefix`]: a link's booked cells summed over every prefix of its precedence order, in a
//! Fenwick tree over the entries' positions, for the links a precedence query would otherwise
//! walk entry by entry.
//!
//! Every flow on a link asks it once per slot for what the flows ranked before it booked, so a
//! walk per question costs the link n² a slot: paper-fig15's parameter servers' downlinks, with
//! 30–60 entries each, took most of the simulator's walks. Here a question is log n nodes of
//! cells, and the common write (a flow republishing under its key) is log n nodes too. A write
//! that changes the set of keys, or a link moving to a new slot, drops the tree, and the next
//! questions build it again (see [`super::LinkLoad`]'s `asked`).
//!
//! The sums are the walk's exact fixed-point sums, whatever order they are added in, so an
//! answer from the tree is the walk's to the bit.

use std::collections::BTreeMap;

use super::Handle;
use super::booked::Booked;
use crate::flow::PrecedenceKey;

/// Prefix sums over a link's entries in key order, for a window of `width` slots from `frame`,
/// while built; dropped, it keeps its buffers for the next build.
#[derive(Clone, Debug, Default)]
pub(super) struct Prefix {
    built: bool,
    /// The first slot of the window: the link's slot when the tree was built.
    frame: u64,
    width: usize,
    /// Handles in key order: position → entry.
    order: Vec<Handle>,
    /// Entry (by handle) → its position.
    position: Vec<u32>,
    /// Fenwick nodes 1..=n, `width` cells each: node i sums positions (i − lowbit(i), i].
    cells: Vec<i128>,
    /// The same over one cell: each entry's first booked cell where its plan starts in `frame`
    /// (what [`super::LoadTable::committed`] adds up), else 0.
    first: Vec<i128>,
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

impl Prefix {
    /// Whether the sums stand (see [`Self::build`], [`Self::drop_sums`]).
    pub fn is_built(&self) -> bool {
        self.built
    }

    /// Forgets the sums: the keys or the window changed.
    pub fn drop_sums(&mut self) {
        self.built = false;
    }

    /// The tree of `entries` (a link's keys and their handles), their cells in `booked`, on
    /// the window of `width` slots from `frame`.
    pub fn build(
        &mut self,
        frame: u64,
        width: usize,
        entries: &BTreeMap<PrecedenceKey, Handle>,
        booked: &Booked,
    ) {
        let n = entries.len();
        let p = self;
        (p.built, p.frame, p.width) = (true, frame, width);
        p.order.clear();
        p.position.clear();
        p.position.resize(n, 0);
        p.cells.clear();
        p.cells.resize(n * width, 0);
        p.first.clear();
        p.first.resize(n, 0);
        for (i, &h) in entries.values().enumerate() {
            p.order.push(h);
            p.position[h as usize] = i as u32;
            let (first, fixed) = booked.get(h as usize);
            p.place(i + 1, first, fixed, 1);
        }
        // Linear build: each node passes its sum on to its parent.
        for i in 1..=n {
            let parent = i + lowbit(i);
            if parent <= n {
                let (lo, hi) = p.cells.split_at_mut((parent - 1) * width);
                for (to, from) in hi[..width].iter_mut().zip(&lo[(i - 1) * width..i * width]) {
                    *to += from;
                }
                p.first[parent - 1] += p.first[i - 1];
            }
        }
    }

    /// Adds `sign` × an entry's cells (`fixed` from slot `first`) to node `i` alone.
    fn place(&mut self, i: usize, first: u64, fixed: &[i128], sign: i128) {
        let (frame, width) = (self.frame, self.width as u64);
        let node = &mut self.cells[(i - 1) * self.width..i * self.width];
        for (s, &r) in (first..).zip(fixed) {
            if s >= frame && s < frame + width {
                node[(s - frame) as usize] += sign * r;
            }
        }
        if first == frame {
            self.first[i - 1] += sign * fixed.first().copied().unwrap_or(0);
        }
    }

    /// The slot the window starts in.
    pub fn frame(&self) -> u64 {
        self.frame
    }

    /// How many entries are ranked before `key`, and whether one has `key` itself; `key_of`
    /// names each handle's key.
    pub fn position<'a>(
        &self,
        key: &PrecedenceKey,
        key_of: impl Fn(Handle) -> &'a PrecedenceKey,
    ) -> (usize, bool) {
        let before = self.order.partition_point(|&h| key_of(h) < key);
        let equal = self.order.get(before).is_some_and(|&h| key_of(h) == key);
        (before, equal)
    }

    /// Adds to `sum[c]` the cells of slot `from + c` of the first `count` entries in key
    /// order, for the slots in the window. Returns the nodes it read: at most log2(n) + 1.
    pub fn add_before(&self, count: usize, from: u64, sum: &mut [i128]) -> usize {
        let lo = from.max(self.frame);
        let hi = (from + sum.len() as u64).min(self.frame + self.width as u64);
        if lo >= hi {
            return 0;
        }
        let (a, b) = ((lo - self.frame) as usize, (hi - self.frame) as usize);
        let out = &mut sum[(lo - from) as usize..(hi - from) as usize];
        let (mut i, mut read) = (count, 0);
        while i > 0 {
            let node = &self.cells[(i - 1) * self.width..i * self.width];
            for (o, c) in out.iter_mut().zip(&node[a..b]) {
                *o += c;
            }
            i -= lowbit(i);
            read += 1;
        }
        read
    }

    /// The first cells of the entries from position `count` on whose plans start in the
    /// window's first slot.
    pub fn first_from(&self, count: usize) -> i128 {
        self.first_before(self.order.len()) - self.first_before(count)
    }

    fn first_before(&self, count: usize) -> i128 {
        let (mut i, mut sum) = (count, 0);
        while i > 0 {
            sum += self.first[i - 1];
            i -= lowbit(i);
        }
        sum
    }

    /// Adds `sign` × entry `h`'s cells (`first`, `fixed`) to every node that sums its
    /// position: a rewrite under the same key takes the old cells out, then puts the new in.
    pub fn add(&mut self, h: Handle, (first, fixed): (u64, &[i128]), sign: i128) {
        if !self.built {
            return;
        }
        let n = self.order.len();
        let mut i = self.position[h as usize] as usize + 1;
        while i <= n {
            self.place(i, first, fixed, sign);
            i += lowbit(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::order::fixed;
    use super::*;
    use crate::flow::{FlowId, Rank};

    fn key(rank: u64, id: &str) -> PrecedenceKey {
        PrecedenceKey::new(Rank(rank), FlowId::new(id).unwrap())
    }

    /// Every prefix, every window of slots and every first-cell suffix, against plain sums,
    /// before and after rewrites.
    #[test]
    fn every_prefix_sums_what_the_entries_before_it_booked() {
        let width = 6;
        let mut booked = Booked::new(3);
        let mut entries = BTreeMap::new();
        let plans: [(u64, &[f64]); 7] = [
            (10, &[1.0, 2.0, 3.0]),
            (9, &[4.0, 5.0]),
            (10, &[6.0]),
            (12, &[7.0, 8.0, 9.0]),
            (15, &[10.0, 11.0, 12.0]),
            (10, &[13.0, 14.0]),
            (8, &[15.0, 16.0, 17.0]),
        ];
        for (h, (first, rates)) in plans.iter().enumerate() {
            booked.push(*first, rates, 0);
            // Keys in another order than the handles.
            entries.insert(key((h as u64 * 5) % 7, &format!("f{h}")), h as Handle);
        }
        let mut p = Prefix::default();
        p.build(10, width, &entries, &booked);
        let check = |p: &Prefix, booked: &Booked| {
            let order: Vec<Handle> = entries.values().copied().collect();
            for count in 0..=order.len() {
                for from in 8..18 {
                    let mut got = [0i128; 4];
                    p.add_before(count, from, &mut got);
                    let mut want = [0i128; 4];
                    for &h in &order[..count] {
                        let (first, cells) = booked.get(h as usize);
                        for (c, w) in want.iter_mut().enumerate() {
                            let s = from + c as u64;
                            if (10..16).contains(&s) && s >= first && s < first + cells.len() as u64
                            {
                                *w += cells[(s - first) as usize];
                            }
                        }
                    }
                    assert_eq!(got, want, "{count} entries from slot {from}");
                }
                let want: i128 = order[count..]
                    .iter()
                    .map(|&h| booked.get(h as usize))
                    .filter(|(first, _)| *first == 10)
                    .map(|(_, c)| c[0])
                    .sum();
                assert_eq!(p.first_from(count), want, "first cells from {count}");
            }
        };
        check(&p, &booked);
        for (h, first, rates) in [(0, 11, &[20.0][..]), (4, 10, &[21.0, 22.0]), (6, 14, &[])] {
            p.add(h as Handle, booked.get(h), -1);
            booked.set(h, first, rates);
            p.add(h as Handle, booked.get(h), 1);
            check(&p, &booked);
        }
        assert_eq!(p.first_from(0), fixed(6.0) + fixed(13.0) + fixed(21.0));
    }

    /// A question reads log n nodes, however many entries come before it: not a walk.
    #[test]
    fn a_question_reads_logarithmically_many_nodes() {
        for n in [16usize, 100, 255, 4096] {
            let mut booked = Booked::new(4);
            let mut entries = BTreeMap::new();
            for h in 0..n {
                booked.push(10, &[1.0, 2.0, 3.0, 4.0], 0);
                entries.insert(key(h as u64, &format!("f{h}")), h as Handle);
            }
            let mut p = Prefix::default();
            p.build(10, 4, &entries, &booked);
            let bound = (usize::BITS - n.leading_zeros()) as usize;
            for count in 0..=n {
                let mut sum = [0i128; 4];
                let read = p.add_before(count, 10, &mut sum);
                assert!(
                    read <= bound,
                    "{read} nodes read for {count} of {n} entries"
                );
                assert_eq!(sum[3], fixed(4.0) * count as i128);
            }
        }
    }
}
