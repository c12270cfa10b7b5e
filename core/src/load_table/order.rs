//! The entries of one link in precedence order, with per-slot sums over every subtree, so the
//! load of all entries ranked before a key (precedence feedback) and the first-slot rates of all
//! entries ranked after it (`committed`) are O(log n) however many flows share the link and
//! however many share one rank.
//!
//! A treap in an arena: each node is one entry, ordered by key, heap-ordered by a priority
//! hashed from the flow id (deterministic, so every driver builds the same tree from the same
//! bookings). Each node keeps, for its subtree, the sum of every entry's rates per slot, and the
//! sum of every entry's first rate at the slot it starts in. Slots live in a ring of `R ≥ 4K`
//! cells indexed by `slot mod R`: an entry still held by a link books slots within `(now − 2K,
//! now + 2K)` of the link's slot, so no two of them share a cell and nothing ever has to slide
//! when the window moves.
//!
//! The sums are kept in fixed point (integers of 2⁻²⁴ B/s), so they are exact: a prefix sum is
//! the same to the bit whatever order the entries came in, were replaced in place or removed
//! and added again, and never drifts; it is rounded to `f64` once, when read.

use crate::flow::PrecedenceKey;
use crate::slot::Slot;

const NIL: u32 = u32::MAX;

/// Fixed-point units per byte/s.
const SCALE: f64 = (1u64 << 24) as f64;

/// A rate in fixed point (truncated: the same conversion everywhere, so sums stay exact).
/// Rates are checked finite, non-negative and bounded before they reach the table; every real
/// rate takes the one-instruction `i64` conversion, and `as` saturates anything else rather
/// than wrapping.
pub(super) fn fixed(rate: f64) -> i128 {
    let x = rate * SCALE;
    if x.abs() < 9.0e18 {
        i128::from(x as i64)
    } else {
        x as i128
    }
}

/// A fixed-point sum as bytes/s; through `i64` where it fits (a conversion as exact, and a
/// single instruction).
pub(super) fn float(sum: i128) -> f64 {
    match i64::try_from(sum) {
        Ok(v) => v as f64 / SCALE,
        Err(_) => float_wide(sum),
    }
}

/// The `i128` conversion, a libcall, kept out of line: inlined, the compiler computed it
/// speculatively for every sum, before the branch that makes it needless.
#[cold]
#[inline(never)]
fn float_wide(sum: i128) -> f64 {
    sum as f64 / SCALE
}

/// Cells of a query's answer summed at once on the stack.
pub(super) const CHUNK: usize = 32;

#[derive(Clone, Debug)]
struct Node {
    key: PrecedenceKey,
    prio: u64,
    left: u32,
    right: u32,
    first_slot: u64,
    /// The entry's rates, in fixed point.
    rates: Vec<i128>,
    /// Σ over the subtree of each entry's rate, per ring cell.
    load: Box<[i128]>,
    /// Σ over the subtree of each entry's first rate, at the ring cell of its first slot.
    first: Box<[i128]>,
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub(super) struct OrderTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    mask: u64,
    /// Scratch for [`Self::replace`], kept so that a replacement allocates nothing.
    delta: Vec<(usize, i128)>,
}

/// A deterministic priority from the key's flow id (FNV-1a, then a finalizer so that ids that
/// differ in their last byte still land far apart).
fn priority(key: &PrecedenceKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.flow.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= key.rank.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl OrderTree {
    /// A tree for a table of horizon `k`.
    pub(super) fn new(k: usize) -> Self {
        let ring = (4 * k.max(1)).next_power_of_two() as u64;
        OrderTree {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            mask: ring - 1,
            delta: Vec::new(),
        }
    }

    fn ring(&self) -> usize {
        (self.mask + 1) as usize
    }

    fn cell(&self, slot: u64) -> usize {
        (slot & self.mask) as usize
    }

    /// Adds `sign ×` node `n`'s own contribution to the sums of node `to`.
    fn add_own(&mut self, to: u32, n: u32, sign: i128) {
        let (first, mask) = (self.nodes[n as usize].first_slot, self.mask);
        let rates = std::mem::take(&mut self.nodes[n as usize].rates);
        let t = &mut self.nodes[to as usize];
        for (i, r) in rates.iter().enumerate() {
            t.load[((first + i as u64) & mask) as usize] += sign * r;
        }
        if let Some(r) = rates.first() {
            t.first[(first & mask) as usize] += sign * r;
        }
        self.nodes[n as usize].rates = rates;
    }

    /// Recomputes node `n`'s sums from its children and itself.
    fn pull(&mut self, n: u32) {
        let (l, r) = (self.nodes[n as usize].left, self.nodes[n as usize].right);
        let mut load = std::mem::take(&mut self.nodes[n as usize].load);
        let mut first = std::mem::take(&mut self.nodes[n as usize].first);
        load.fill(0);
        first.fill(0);
        for c in [l, r] {
            if c != NIL {
                let child = &self.nodes[c as usize];
                load.iter_mut()
                    .zip(&child.load[..])
                    .for_each(|(a, b)| *a += b);
                first
                    .iter_mut()
                    .zip(&child.first[..])
                    .for_each(|(a, b)| *a += b);
            }
        }
        let node = &mut self.nodes[n as usize];
        node.load = load;
        node.first = first;
        self.add_own(n, n, 1);
    }

    /// A node for a new entry; a freed node's buffers are reused, so a link whose flows come
    /// and go allocates nothing once it has held as many as it holds now.
    fn alloc(&mut self, key: PrecedenceKey, first_slot: Slot, rates: &[i128]) -> u32 {
        let prio = priority(&key);
        let n = match self.free.pop() {
            Some(n) => {
                let node = &mut self.nodes[n as usize];
                node.key = key;
                node.prio = prio;
                node.left = NIL;
                node.right = NIL;
                node.rates.clear();
                node.load.fill(0);
                node.first.fill(0);
                n
            }
            None => {
                let ring = self.ring();
                self.nodes.push(Node {
                    key,
                    prio,
                    left: NIL,
                    right: NIL,
                    first_slot: 0,
                    rates: Vec::with_capacity(rates.len()),
                    load: vec![0; ring].into_boxed_slice(),
                    first: vec![0; ring].into_boxed_slice(),
                });
                (self.nodes.len() - 1) as u32
            }
        };
        let node = &mut self.nodes[n as usize];
        node.first_slot = first_slot.0;
        node.rates.extend_from_slice(rates);
        self.add_own(n, n, 1);
        n
    }

    /// Rotates the child `c` of `p` above it; returns `c`.
    fn rotate_up(&mut self, p: u32, c: u32) -> u32 {
        if self.nodes[p as usize].left == c {
            self.nodes[p as usize].left = self.nodes[c as usize].right;
            self.nodes[c as usize].right = p;
        } else {
            self.nodes[p as usize].right = self.nodes[c as usize].left;
            self.nodes[c as usize].left = p;
        }
        self.pull(p);
        self.pull(c);
        c
    }

    /// Inserts an entry whose key is not in the tree; `rates` in fixed point ([`fixed`]).
    pub(super) fn insert(&mut self, key: PrecedenceKey, first_slot: Slot, rates: &[i128]) {
        let n = self.alloc(key, first_slot, rates);
        self.root = self.insert_at(self.root, n);
    }

    fn insert_at(&mut self, at: u32, n: u32) -> u32 {
        if at == NIL {
            return n;
        }
        self.add_own(at, n, 1);
        let go_left = self.nodes[n as usize].key < self.nodes[at as usize].key;
        let child = if go_left {
            let c = self.insert_at(self.nodes[at as usize].left, n);
            self.nodes[at as usize].left = c;
            c
        } else {
            let c = self.insert_at(self.nodes[at as usize].right, n);
            self.nodes[at as usize].right = c;
            c
        };
        if self.nodes[child as usize].prio > self.nodes[at as usize].prio {
            self.rotate_up(at, child)
        } else {
            at
        }
    }

    /// Removes the entry with `key`; false if there is none.
    pub(super) fn remove(&mut self, key: &PrecedenceKey) -> bool {
        let before = self.len();
        self.root = self.remove_at(self.root, key);
        self.len() < before
    }

    fn find(&self, key: &PrecedenceKey) -> Option<u32> {
        let mut at = self.root;
        while at != NIL {
            let node = &self.nodes[at as usize];
            at = match key.cmp(&node.key) {
                std::cmp::Ordering::Less => node.left,
                std::cmp::Ordering::Greater => node.right,
                std::cmp::Ordering::Equal => return Some(at),
            };
        }
        None
    }

    /// Removes `key` from the subtree at `at`, if there; returns the subtree's new root.
    fn remove_at(&mut self, at: u32, key: &PrecedenceKey) -> u32 {
        if at == NIL {
            return NIL;
        }
        let node = &self.nodes[at as usize];
        match key.cmp(&node.key) {
            std::cmp::Ordering::Less => {
                let c = self.remove_at(node.left, key);
                self.nodes[at as usize].left = c;
                self.pull(at);
                at
            }
            std::cmp::Ordering::Greater => {
                let c = self.remove_at(node.right, key);
                self.nodes[at as usize].right = c;
                self.pull(at);
                at
            }
            std::cmp::Ordering::Equal => {
                let merged = self.merge(node.left, node.right);
                self.free.push(at);
                merged
            }
        }
    }

    /// Joins two subtrees whose keys are all `a`'s below all `b`'s.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let c = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = c;
            self.pull(a);
            a
        } else {
            let c = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = c;
            self.pull(b);
            b
        }
    }

    /// Replaces the rates of the entry with `key` (present) in place: the sums on its path
    /// take the difference, nothing is rebalanced.
    pub(super) fn replace(&mut self, key: &PrecedenceKey, first_slot: Slot, rates: &[i128]) {
        let Some(n) = self.find(key) else {
            return;
        };
        // The change per ring cell, old plan out and new plan in, applied to every node from
        // the root down to the entry's in one walk.
        let mut delta = std::mem::take(&mut self.delta);
        delta.clear();
        let node = &mut self.nodes[n as usize];
        let cell = |s: u64| (s & self.mask) as usize;
        for (i, r) in node.rates.iter().enumerate() {
            delta.push((cell(node.first_slot + i as u64), -r));
        }
        let old_first = node.rates.first().map(|r| (cell(node.first_slot), -r));
        node.first_slot = first_slot.0;
        node.rates.clear();
        node.rates.extend_from_slice(rates);
        for (i, r) in node.rates.iter().enumerate() {
            delta.push((cell(node.first_slot + i as u64), *r));
        }
        let new_first = node.rates.first().map(|r| (cell(node.first_slot), *r));
        let mut at = self.root;
        while at != NIL {
            let node = &mut self.nodes[at as usize];
            for &(c, d) in &delta {
                node.load[c] += d;
            }
            for &(c, d) in old_first.iter().chain(&new_first) {
                node.first[c] += d;
            }
            if at == n {
                break;
            }
            at = if *key < node.key {
                node.left
            } else {
                node.right
            };
        }
        self.delta = delta;
    }

    /// Adds to `out[i]` the booked load in slot `from + i` of every entry whose key sorts
    /// before `key`, for the `i` where `valid(from + i)`. Returns the nodes visited.
    pub(super) fn add_before(
        &self,
        key: &PrecedenceKey,
        from: Slot,
        valid: impl Fn(u64) -> bool,
        out: &mut [f64],
    ) -> usize {
        let mut visited = 0;
        for (c, chunk) in out.chunks_mut(CHUNK).enumerate() {
            let start = from.0 + (c * CHUNK) as u64;
            let slots = (start..start + chunk.len() as u64).enumerate();
            let mut sum = [0i128; CHUNK];
            let mut at = self.root;
            while at != NIL {
                visited += 1;
                let node = &self.nodes[at as usize];
                if node.key < *key {
                    let left = (node.left != NIL).then(|| &self.nodes[node.left as usize].load);
                    for (i, s) in slots.clone() {
                        if valid(s) {
                            sum[i] += left.map_or(0, |l| l[self.cell(s)]) + rate_at(node, s);
                        }
                    }
                    at = node.right;
                } else {
                    at = node.left;
                }
            }
            for (cell, s) in chunk.iter_mut().zip(sum) {
                *cell += float(s);
            }
        }
        visited
    }

    /// The sum of the first rates of every entry whose key sorts after `key` and whose plan
    /// starts in `slot`.
    pub(super) fn first_after(&self, key: &PrecedenceKey, slot: Slot) -> f64 {
        let c = self.cell(slot.0);
        let mut sum = 0i128;
        let mut at = self.root;
        while at != NIL {
            let node = &self.nodes[at as usize];
            if node.key > *key {
                if node.right != NIL {
                    sum += self.nodes[node.right as usize].first[c];
                }
                if node.first_slot == slot.0 {
                    sum += node.rates.first().copied().unwrap_or(0);
                }
                at = node.left;
            } else {
                at = node.right;
            }
        }
        float(sum)
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Checks the order, heap and sum invariants; for `LoadTable::check_invariants`.
    pub(super) fn check(&self) -> Result<(), String> {
        let mut keys = Vec::new();
        self.check_at(self.root, &mut keys)?;
        if keys.len() != self.len() {
            return Err(format!(
                "order tree reaches {} of its {} entries",
                keys.len(),
                self.len()
            ));
        }
        if keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err("order tree keys are not in order".into());
        }
        Ok(())
    }

    /// Checks the subtree at `at`; returns its sums recomputed from its entries.
    fn check_at<'a>(
        &'a self,
        at: u32,
        keys: &mut Vec<&'a PrecedenceKey>,
    ) -> Result<(Vec<i128>, Vec<i128>), String> {
        let mut sums = (vec![0; self.ring()], vec![0; self.ring()]);
        if at == NIL {
            return Ok(sums);
        }
        let node = &self.nodes[at as usize];
        for c in [node.left, node.right] {
            if c != NIL && self.nodes[c as usize].prio > node.prio {
                return Err(format!("order tree heap violated at {}", node.key.flow));
            }
        }
        let left = self.check_at(node.left, keys)?;
        keys.push(&node.key);
        let right = self.check_at(node.right, keys)?;
        for (i, r) in node.rates.iter().enumerate() {
            sums.0[self.cell(node.first_slot + i as u64)] += r;
        }
        if let Some(r) = node.rates.first() {
            sums.1[self.cell(node.first_slot)] += r;
        }
        for child in [&left, &right] {
            sums.0.iter_mut().zip(&child.0).for_each(|(a, b)| *a += b);
            sums.1.iter_mut().zip(&child.1).for_each(|(a, b)| *a += b);
        }
        if sums.0[..] != node.load[..] || sums.1[..] != node.first[..] {
            return Err(format!("order tree sums disagree at {}", node.key.flow));
        }
        Ok(sums)
    }
}

fn rate_at(node: &Node, slot: u64) -> i128 {
    slot.checked_sub(node.first_slot)
        .and_then(|i| node.rates.get(i as usize).copied())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{FlowId, Rank};

    fn fixed_of(rates: &[f64]) -> Vec<i128> {
        rates.iter().map(|&r| fixed(r)).collect()
    }

    fn key(rank: u64, id: &str) -> PrecedenceKey {
        PrecedenceKey::new(Rank(rank), FlowId::new(id).unwrap())
    }

    /// The same sums by brute force over a list of (key, first, rates).
    fn brute_before(
        all: &[(PrecedenceKey, u64, Vec<f64>)],
        k: &PrecedenceKey,
        from: u64,
    ) -> Vec<f64> {
        (0..4)
            .map(|i| {
                all.iter()
                    .filter(|(key, _, _)| key < k)
                    .map(|(_, f, r)| {
                        (from + i)
                            .checked_sub(*f)
                            .and_then(|j| r.get(j as usize).copied())
                            .unwrap_or(0.0)
                    })
                    .sum()
            })
            .collect()
    }

    #[test]
    fn prefix_and_suffix_sums_match_brute_force_through_inserts_replaces_and_removes() {
        let mut t = OrderTree::new(4);
        let mut all: Vec<(PrecedenceKey, u64, Vec<f64>)> = Vec::new();
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..2000 {
            let id = format!("f{}", next() % 64);
            let k = key(next() % 5, &id);
            let first = 100 + next() % 4;
            let rates: Vec<f64> = (0..1 + next() % 4).map(|_| (next() % 100) as f64).collect();
            match all.iter().position(|(kk, _, _)| *kk == k) {
                Some(i) if step % 3 == 0 => {
                    assert!(t.remove(&k));
                    all.remove(i);
                }
                Some(i) => {
                    t.replace(&k, Slot(first), &fixed_of(&rates));
                    all[i] = (k, first, rates);
                }
                None => {
                    t.insert(k.clone(), Slot(first), &fixed_of(&rates));
                    all.push((k, first, rates));
                }
            }
            let q = key(next() % 5, &format!("f{}", next() % 64));
            let mut out = vec![0.0; 4];
            t.add_before(&q, Slot(101), |_| true, &mut out);
            let want = brute_before(&all, &q, 101);
            for (a, b) in out.iter().zip(&want) {
                assert!((a - b).abs() < 1e-6, "step {step}: {out:?} != {want:?}");
            }
            let s = 100 + next() % 4;
            let after: f64 = all
                .iter()
                .filter(|(kk, f, _)| *kk > q && *f == s)
                .map(|(_, _, r)| r[0])
                .sum();
            assert!((t.first_after(&q, Slot(s)) - after).abs() < 1e-6);
        }
        assert_eq!(t.len(), all.len());
        assert!(!t.remove(&key(9, "absent")));
        assert_eq!(t.len(), all.len());
        t.check().unwrap();
    }
}
