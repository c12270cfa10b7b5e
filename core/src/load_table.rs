//! The K-slot link load table (docs/design.md §6), kept by `mlcc-switchd` for the links a switch
//! transmits onto, by `mlccd` for its host's uplink, and by `mlcc-sim` for every link.
//!
//! Schedulers republish every flow's whole K-slot plan every slot, so an update *replaces* the
//! flow's entry; counting it again would book the flow K times. Entries are soft state: one not
//! refreshed for K slots expires, so a dead scheduler's bookings vanish within K·τ.
//!
//! Per link the table keeps the sum of all entries per slot and the sum per publisher, so the
//! `all-others` feedback for a flow is O(K) however many entries the link holds. For
//! `precedence` feedback and `committed` it also keeps the entries in an order tree with sums
//! over every subtree ([`order`]): what every flow ranked before (or after) the asker booked is
//! O(K log n), however many flows share the link or one rank.
//!
//! Advancing the table is O(1): each link catches up to the table's slot (history, window
//! shift, expiry) when it is next written or read, or when its owner sweeps it
//! ([`LoadTable::settle_some`]). A switch holding a thousand links used to stall every call for
//! half a millisecond at each slot boundary while the whole table moved at once.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::flow::{FlowId, PrecedenceKey};
use crate::hash::Map;
use crate::slot::Slot;
use crate::topology::LinkId;
use crate::units::BytesPerSec;

mod booked;
mod links;
mod order;
mod pair;
mod prefix;
use booked::Booked;
use links::Links;
use order::{CHUNK, OrderTree, float};
use prefix::Prefix;

/// A link holding this many entries, that is asked for precedence feedback, keeps them in an
/// [`OrderTree`] as well from its next write on; one holding fewer than [`TREE_UNTIL`] drops it.
/// Below that a walk of the sorted entries is cheaper than the tree's larger nodes, and its sums
/// are the same to the bit (both are exact). A link nobody asks (mlccd's own uplink table, which
/// it only writes) never pays for a tree.
const TREE_FROM: usize = 256;
const TREE_UNTIL: usize = 128;

/// A link with at least this many entries (and fewer than [`TREE_FROM`]) answers its second
/// and later precedence questions between changes of its keys or slot from prefix sums
/// ([`prefix::Prefix`]) rather than a walk; below it a walk is as cheap.
const PREFIX_FROM: usize = 16;

/// Set by a read that walked a busy link for want of a tree: the next write builds one. Atomic
/// because reads take `&self`.
#[derive(Debug, Default)]
struct Wanted(std::sync::atomic::AtomicBool);

impl Wanted {
    fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Clone for Wanted {
    fn clone(&self) -> Self {
        let w = Wanted::default();
        if self.get() {
            w.set();
        }
        w
    }
}

/// Which other flows' bookings a flow sees as feedback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeedbackMode {
    /// Every other flow's booking, as in the paper.
    AllOthers,
    /// Only bookings of flows whose precedence key sorts before the asking flow's, so two flows
    /// starting in the same slot do not both grab the same empty slots and then both flee.
    #[default]
    Precedence,
}

impl std::str::FromStr for FeedbackMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all-others" => Ok(FeedbackMode::AllOthers),
            "precedence" => Ok(FeedbackMode::Precedence),
            _ => Err(format!(
                "unknown feedback mode {s:?} (expected all-others or precedence)"
            )),
        }
    }
}

/// A rate may be at most this many times the link capacity; more is a broken scheduler.
pub const MAX_RATE_OVER_CAPACITY: f64 = 4.0;

/// The booked load slots remembered per link for `max_recent_load` (W in docs/design.md §6).
pub const HISTORY_SLOTS: usize = 4;

/// Each link's sums are recomputed from its entries once per this many slots.
const REBUILD_PERIOD: u64 = 64;

/// One flow's booking on one link.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    /// Host whose scheduler published it; feedback to that host can leave its own flows out.
    pub publisher: String,
    pub first_slot: Slot,
    /// Bytes/s for slots `first_slot..first_slot + rates.len()`.
    pub rates: Vec<f64>,
    pub key: PrecedenceKey,
    /// Slot of the last update; the entry expires K slots later.
    pub refreshed: Slot,
}

/// What a scheduler publishes for one flow on one link.
#[derive(Clone, Debug, PartialEq)]
pub struct Update<'a> {
    pub flow: &'a FlowId,
    pub publisher: &'a str,
    pub first_slot: Slot,
    pub rates: &'a [f64],
    pub key: &'a PrecedenceKey,
    /// The flow finished or was withdrawn: its entry goes.
    pub done: bool,
}

/// Who is asking for feedback.
#[derive(Clone, Copy, Debug)]
pub struct Query<'a> {
    pub flow: &'a FlowId,
    pub key: &'a PrecedenceKey,
    /// Leave out every entry this host published: its scheduler accounts for its own flows
    /// itself, with this slot's plans rather than last slot's.
    pub exclude_publisher: Option<&'a str>,
}

impl Query<'_> {
    /// Whether `e` is one of the asking host's entries, which its feedback leaves out.
    fn excludes(&self, e: &Entry) -> bool {
        self.exclude_publisher == Some(e.publisher.as_str())
    }
}

/// Whose an entry a query leaves out is: the asking host's, or the asking flow's own under a
/// key of another publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Own {
    Host,
    Flow,
}

/// Why an update or query was refused. Each names what was wrong so an RPC can say it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TableError {
    #[error("link {0} is not in this table")]
    UnknownLink(LinkId),
    #[error("{got} rates exceed the horizon of {horizon} slots")]
    TooManyRates { got: usize, horizon: usize },
    #[error("rate #{index} is not finite")]
    NotFinite { index: usize },
    #[error("rate #{index} is negative")]
    Negative { index: usize },
    #[error(
        "rate #{index} = {rate} B/s is more than {MAX_RATE_OVER_CAPACITY}x the link capacity {capacity} B/s"
    )]
    TooLarge {
        index: usize,
        rate: f64,
        capacity: f64,
    },
    #[error("first slot {first} is outside the window {lo}..={hi} around the current slot")]
    FirstSlotOutOfWindow { first: Slot, lo: Slot, hi: Slot },
    #[error("precedence key names flow {key_flow}, not {flow}")]
    KeyMismatch { flow: FlowId, key_flow: FlowId },
}

/// Per-slot sums over a set of entries, on the table's window.
#[derive(Clone, Debug)]
struct Sums {
    count: usize,
    sum: Vec<f64>,
}

impl Sums {
    fn new(window: usize) -> Self {
        Sums {
            count: 0,
            sum: vec![0.0; window],
        }
    }
}

/// An entry's place in its link's `slab`.
type Handle = u32;

/// One publisher's entries on a link: their sum (all-others exclusion) and keys (precedence
/// exclusion walks them; a host has few flows).
#[derive(Clone, Debug)]
struct Publisher {
    sums: Sums,
    keys: BTreeMap<PrecedenceKey, Handle>,
}

#[derive(Clone, Debug)]
struct LinkLoad {
    capacity: f64,
    /// The slot this link has caught up to: index 0 of every per-slot sum. At most the table's.
    now: Slot,
    /// No entry expires before this slot (a lower bound of min(refreshed) + K, exact after each
    /// expiry scan), so catching up skips the scan while every entry is fresh.
    expiry_floor: u64,
    /// The entries, in no order; `entries`, `index` and the publishers' keys name them by
    /// place, so that finding a flow's entry (every update, every feedback) is one hash
    /// lookup rather than a search of the ordered tree as well.
    slab: Vec<Entry>,
    /// The slab's entries' rates in fixed point, for the exact sums (converted once, when
    /// written), in the slab's order.
    booked: Booked,
    /// Entries in precedence order.
    entries: BTreeMap<PrecedenceKey, Handle>,
    /// Flow → its entry.
    index: Map<FlowId, Handle>,
    /// Σ of all entries for slots `window_start..window_start + 2K`.
    total: Vec<f64>,
    by_publisher: Map<String, Publisher>,
    /// Whether each publisher's per-slot sum is kept (see
    /// [`LoadTable::without_publisher_sums`]); its keys are kept either way.
    publisher_sums: bool,
    /// The entries again, with sums over every prefix of the precedence order, while the link
    /// holds many and is asked (see [`TREE_FROM`]).
    order: Option<OrderTree>,
    tree_wanted: Wanted,
    /// The entries' prefix sums, while the link holds between [`PREFIX_FROM`] and
    /// [`TREE_FROM`] entries and is asked more than once between changes of its keys or slot.
    prefix: Prefix,
    /// Precedence questions since the prefix sums were last dropped.
    asked: u32,
    /// Booked load of the last W slots that passed, oldest first.
    history: VecDeque<f64>,
}

impl LinkLoad {
    fn new(capacity: f64, window: usize, now: Slot, publisher_sums: bool) -> Self {
        LinkLoad {
            publisher_sums,
            capacity,
            now,
            expiry_floor: u64::MAX,
            slab: Vec::new(),
            booked: Booked::new(window / 2),
            entries: BTreeMap::new(),
            index: Map::default(),
            total: vec![0.0; window],
            by_publisher: Map::default(),
            order: None,
            tree_wanted: Wanted::default(),
            prefix: Prefix::default(),
            asked: 0,
            history: VecDeque::with_capacity(HISTORY_SLOTS),
        }
    }

    /// Adds (`sign` = 1, with the entry's handle) or removes (−1) an entry's contribution to
    /// every sum.
    fn account(&mut self, window_start: Slot, e: &Entry, sign: f64, h: Handle) {
        // A publisher's sum not kept is an empty one: `accumulate` adds nothing to it.
        let window = if self.publisher_sums {
            self.total.len()
        } else {
            0
        };
        accumulate(&mut self.total, window_start, e, sign);
        // Allocate the publisher's name only the first time it is seen on this link; a known
        // publisher (the common case) costs one hash lookup.
        let p = match self.by_publisher.get_mut(&e.publisher) {
            Some(p) => p,
            None => self
                .by_publisher
                .entry(e.publisher.clone())
                .or_insert_with(|| Publisher {
                    sums: Sums::new(window),
                    keys: BTreeMap::new(),
                }),
        };
        accumulate(&mut p.sums.sum, window_start, e, sign);
        if sign > 0.0 {
            p.sums.count += 1;
            p.keys.insert(e.key.clone(), h);
        } else {
            p.sums.count -= 1;
            p.keys.remove(&e.key);
            if p.sums.count == 0 {
                self.by_publisher.remove(&e.publisher);
            }
        }
    }

    /// K: the window holds 2K slots.
    fn horizon(&self) -> u64 {
        (self.total.len() / 2) as u64
    }

    fn insert(&mut self, window_start: Slot, e: Entry) {
        let h = Handle::try_from(self.slab.len()).expect("a link holds fewer than 2^32 entries");
        self.expiry_floor = self.expiry_floor.min(e.refreshed.0 + self.horizon());
        self.account(window_start, &e, 1.0, h);
        self.booked
            .push(e.first_slot.0, &e.rates, publisher_tag(&e.publisher));
        if let Some(t) = &mut self.order {
            t.insert(e.key.clone(), e.first_slot, self.booked.get(h as usize).1);
        }
        self.index.insert(e.key.flow.clone(), h);
        self.entries.insert(e.key.clone(), h);
        self.slab.push(e);
        self.drop_prefix();
    }

    fn entry(&self, h: Handle) -> &Entry {
        &self.slab[h as usize]
    }

    /// Forgets the prefix sums: the keys or the window changed.
    fn drop_prefix(&mut self) {
        self.prefix.drop_sums();
        self.asked = 0;
    }

    /// The entries in precedence order.
    fn ordered(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.entries.values().map(|&h| self.entry(h))
    }

    /// Builds the order tree if a read wanted one and the link is still busy.
    fn build_wanted_tree(&mut self) {
        if self.order.is_some() || self.entries.len() < TREE_FROM || !self.tree_wanted.get() {
            return;
        }
        let mut t = OrderTree::new(self.horizon() as usize);
        for (k, &h) in &self.entries {
            let (first, fixed) = self.booked.get(h as usize);
            t.insert(k.clone(), Slot(first), fixed);
        }
        self.order = Some(t);
    }

    /// Removes `flow`'s entry, if the link holds one, at the table's slot `now`. Only then
    /// does the link catch up (removal works on the current window); otherwise it catches up
    /// when next touched or swept.
    fn withdraw(&mut self, id: LinkId, now: Slot, flow: &FlowId) {
        if self.index.contains_key(flow) {
            self.catch_up(id, now);
            self.remove(now, flow);
        }
    }

    fn remove(&mut self, window_start: Slot, flow: &FlowId) -> Option<Entry> {
        let h = self.index.remove(flow)?;
        self.drop_prefix();
        let e = self.take(h);
        self.entries.remove(&e.key);
        self.account(window_start, &e, -1.0, h);
        if let Some(t) = &mut self.order {
            t.remove(&e.key);
        }
        if self.entries.len() < TREE_UNTIL {
            self.order = None;
            self.tree_wanted = Wanted::default();
        }
        Some(e)
    }

    /// Takes entry `h` out of the slab; the last entry moves into its place and is renamed
    /// wherever it is named.
    fn take(&mut self, h: Handle) -> Entry {
        let e = self.slab.swap_remove(h as usize);
        self.booked.swap_remove(h as usize);
        if let Some(moved) = self.slab.get(h as usize) {
            let names = [
                self.entries.get_mut(&moved.key),
                self.index.get_mut(&moved.key.flow),
                self.by_publisher
                    .get_mut(&moved.publisher)
                    .and_then(|p| p.keys.get_mut(&moved.key)),
            ];
            for name in names.into_iter().flatten() {
                *name = h;
            }
        }
        e
    }

    /// The common update: a scheduler republishing a flow under the same key and publisher.
    /// Rewrites the entry where it is instead of removing and reinserting it, which would
    /// rebalance two trees, rehash the flow twice and reallocate its publisher and rates. The
    /// sums end up bit-identical to remove + insert: the entry is subtracted and added in the
    /// same order, and a publisher that held only this entry restarts from zero, as the removal
    /// would have dropped it. Returns false (nothing changed) otherwise.
    fn replace_in_place(&mut self, window_start: Slot, u: &Update<'_>) -> bool {
        let Some(&h) = self.index.get(u.flow) else {
            return false;
        };
        let e = &mut self.slab[h as usize];
        if e.key != *u.key || e.publisher != u.publisher {
            return false;
        }
        // The publisher's sum, when kept; not even looked up otherwise.
        let mut p = None;
        if self.publisher_sums {
            let Some(found) = self.by_publisher.get_mut(&e.publisher) else {
                return false;
            };
            p = Some(&mut found.sums);
        }
        accumulate(&mut self.total, window_start, e, -1.0);
        self.prefix.add(h, self.booked.get(h as usize), -1);
        if let Some(p) = &mut p {
            if p.count == 1 {
                p.sum.fill(0.0);
            } else {
                accumulate(&mut p.sum, window_start, e, -1.0);
            }
        }
        e.first_slot = u.first_slot;
        e.rates.clear();
        e.rates.extend_from_slice(u.rates);
        self.booked.set(h as usize, u.first_slot.0, u.rates);
        self.prefix.add(h, self.booked.get(h as usize), 1);
        e.refreshed = window_start;
        accumulate(&mut self.total, window_start, e, 1.0);
        if let Some(p) = p {
            accumulate(&mut p.sum, window_start, e, 1.0);
        }
        if let Some(t) = &mut self.order {
            t.replace(&e.key, e.first_slot, self.booked.get(h as usize).1);
        }
        true
    }

    /// Adds to `out[i]` what every entry ranked before `key` booked for slot `from + i`, for
    /// the slots in the link's window; returns the entries or tree nodes visited. Exact, from
    /// the tree or a walk alike.
    fn add_before(&self, key: &PrecedenceKey, from: Slot, out: &mut [f64]) -> usize {
        let (lo, hi) = (self.now.0, self.now.0 + self.total.len() as u64);
        if let Some(t) = &self.order {
            return t.add_before(key, from, |s| (lo..hi).contains(&s), out);
        }
        if self.entries.len() >= TREE_FROM {
            self.tree_wanted.set();
        }
        let mut visited = 0;
        for (c, chunk) in out.chunks_mut(CHUNK).enumerate() {
            let start = from.0 + (c * CHUNK) as u64;
            // The slots this chunk may count: inside both the chunk and the link's window.
            let (a, b) = (start.max(lo), (start + chunk.len() as u64).min(hi));
            let mut sum = [0i128; CHUNK];
            // From the first entry on, rather than `range(..key)`: a link holds few entries
            // here, and finding the range's end costs a second descent with its key compares.
            for (_, &h) in self.entries.iter().take_while(|(k, _)| *k < key) {
                visited += 1;
                let (first, fixed) = self.booked.get(h as usize);
                add_cells(&mut sum, start, (a, b), first, fixed);
            }
            for (cell, s) in chunk.iter_mut().zip(sum) {
                *cell += float(s);
            }
        }
        visited
    }

    /// The first rates of the entries ranked after `key` whose plans start in `slot`; exact.
    fn first_after(&self, key: &PrecedenceKey, slot: Slot) -> f64 {
        if let Some(t) = &self.order {
            return t.first_after(key, slot);
        }
        if self.entries.len() >= TREE_FROM {
            self.tree_wanted.set();
        }
        // From the last entry back, for the reason `add_before` walks from the first.
        let sum: i128 = self
            .entries
            .iter()
            .rev()
            .take_while(|(k, _)| *k > key)
            .map(|(_, &h)| self.booked.get(h as usize))
            .filter(|&(first, _)| first == slot.0)
            .map(|(_, fixed)| fixed.first().copied().unwrap_or(0))
            .sum();
        float(sum)
    }

    /// Calls `hide` with each entry ranked before `q`'s key that `q`'s flow must not count:
    /// the asking host's entries in key order, then its flow's own entry under another key.
    /// Feedback has always taken them out in that order, so the float result stays the same
    /// to the bit.
    fn hidden_before(&self, q: &Query<'_>, mut hide: impl FnMut(&Entry)) {
        if self.order.is_some() {
            // A busy link: the asking host's few keys rather than every entry before `q`.
            for (side, h, _) in self.own_entries(q) {
                if side.is_lt() {
                    hide(self.entry(h));
                }
            }
            return;
        }
        // The entries `add_before` just walked, whose nodes and spans are still in cache.
        let before = self.entries.iter().take_while(|(k, _)| *k < q.key);
        self.hide_among(q, before.map(|(k, &h)| (k, h)), hide);
    }

    /// Calls `hide` with each entry ranked after `q`'s key, with a plan starting in `slot`,
    /// that `q`'s flow must not count (see [`Self::hidden_before`]), in the same order.
    fn hidden_after(&self, q: &Query<'_>, slot: Slot, mut hide: impl FnMut(&Entry)) {
        use std::ops::Bound::{Excluded, Unbounded};
        if self.order.is_some() {
            for (side, h, _) in self.own_entries(q) {
                let e = self.entry(h);
                if side.is_gt() && e.first_slot == slot {
                    hide(e);
                }
            }
            return;
        }
        // The entries `first_after` just walked from the back, now from the front, as the
        // subtractions have always come.
        let starting = self
            .entries
            .range((Excluded(q.key), Unbounded))
            .map(|(k, &h)| (k, h))
            .filter(|&(_, h)| self.booked.get(h as usize).0 == slot.0);
        self.hide_among(q, starting, hide);
    }

    /// The entries `q` must not count, each with the side of `q`'s key it is on, in the order
    /// feedback has always taken them out: the asking host's in key order, then the asking
    /// flow's own under another key. Looked up in the link's publisher keys and flow index, so
    /// the cost is the host's entries here, not the link's.
    fn own_entries<'a>(
        &'a self,
        q: &'a Query<'_>,
    ) -> impl Iterator<Item = (std::cmp::Ordering, Handle, Own)> + 'a {
        let host = (q.exclude_publisher.and_then(|p| self.by_publisher.get(p)))
            .into_iter()
            .flat_map(|p| &p.keys)
            .map(|(k, &h)| (k.cmp(q.key), h, Own::Host));
        let flow = (self.index.get(q.flow).copied())
            .filter(|&h| !q.excludes(self.entry(h)))
            .map(|h| (self.entry(h).key.cmp(q.key), h, Own::Flow));
        host.chain(flow).filter(|(side, _, _)| side.is_ne())
    }

    /// Hides, of `walked` (entries in key order), the asking host's, then the asking flow's
    /// own: a compare of tags (and of the name only where they match) against the spans the
    /// walk already read, rather than lookups in this link's cold publisher and flow maps.
    fn hide_among<'a>(
        &'a self,
        q: &Query<'_>,
        walked: impl Iterator<Item = (&'a PrecedenceKey, Handle)>,
        mut hide: impl FnMut(&Entry),
    ) {
        let tag = q.exclude_publisher.map(publisher_tag);
        let mut own = None;
        for (k, h) in walked {
            if tag == Some(self.booked.tag(h as usize)) && q.excludes(self.entry(h)) {
                hide(self.entry(h));
            } else if k.flow == *q.flow {
                own = Some(h);
            }
        }
        if let Some(h) = own {
            hide(self.entry(h));
        }
    }

    fn get(&self, flow: &FlowId) -> Option<&Entry> {
        self.index.get(flow).map(|&h| self.entry(h))
    }

    /// Moves every per-slot sum `by` slots earlier (the window's start advanced by `by`).
    fn shift(&mut self, by: usize) {
        fn slide(v: &mut [f64], by: usize) {
            let n = v.len();
            if by >= n {
                v.fill(0.0);
            } else {
                v.copy_within(by.., 0);
                v[n - by..].fill(0.0);
            }
        }
        slide(&mut self.total, by);
        if self.publisher_sums {
            for p in self.by_publisher.values_mut() {
                slide(&mut p.sums.sum, by);
            }
        }
    }

    /// Brings the link from its slot to `to` as if the table had advanced one slot at a time:
    /// each slot that passed goes into the history with the entries alive in it, entries not
    /// refreshed for K slots go, and the sums slide onto the new window.
    fn catch_up(&mut self, id: LinkId, to: Slot) {
        while self.now < to {
            // Stop where an entry may expire, so that the slots after it are recorded without
            // it. The floor is a lower bound: stopping short of the real expiry only splits
            // the jump, and the scan there makes the floor exact.
            let step = Slot(self.expiry_floor.clamp(self.now.0 + 1, to.0));
            self.jump(id, step);
        }
    }

    fn next_expiry(&self, k: u64) -> u64 {
        self.slab
            .iter()
            .map(|e| e.refreshed.0 + k)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Moves the link to `to` with no entry expiring before it (see [`Self::catch_up`]).
    fn jump(&mut self, id: LinkId, to: Slot) {
        let (from, by) = (self.now.0, to.0 - self.now.0);
        // Slots passing from..to; at most W matter for the history.
        let passed = by.min(HISTORY_SLOTS as u64);
        for s in (to.0 - passed)..to.0 {
            let load = self.total.get((s - from) as usize).copied().unwrap_or(0.0);
            if self.history.len() == HISTORY_SLOTS {
                self.history.pop_front();
            }
            self.history.push_back(load.max(0.0));
        }
        // Slide every sum onto the new window instead of recomputing it from all entries.
        self.shift(by.min(usize::MAX as u64) as usize);
        self.drop_prefix();
        if self.expiry_floor <= to.0 {
            self.expire(to);
        }
        // Shed the float drift of incremental add/subtract: each link is rebuilt from its
        // entries once every REBUILD_PERIOD slots, links spread over different slots.
        let phase = u64::from(id.0) % REBUILD_PERIOD;
        if by >= REBUILD_PERIOD || (from + 1..=to.0).any(|s| s % REBUILD_PERIOD == phase) {
            self.rebuild(to);
        }
        self.now = to;
    }

    /// Drops the entries not refreshed for K slots by `at` (the link's new window start) and
    /// makes the expiry floor exact, in one pass over the entries.
    fn expire(&mut self, at: Slot) {
        let k = self.horizon();
        let mut expired = Vec::new();
        let mut floor = u64::MAX;
        for e in self.ordered() {
            let x = e.refreshed.0 + k;
            if x <= at.0 {
                expired.push(e.key.flow.clone());
            } else {
                floor = floor.min(x);
            }
        }
        for f in expired {
            self.remove(at, &f);
        }
        self.expiry_floor = floor;
    }

    /// Recomputes every sum from the entries on a window starting at `window_start`; sheds the
    /// float drift of incremental add/subtract.
    fn rebuild(&mut self, window_start: Slot) {
        let window = self.total.len();
        self.total = vec![0.0; window];
        self.by_publisher.clear();
        // The order tree's sums are exact: it has no drift to shed.
        let slab = std::mem::take(&mut self.slab);
        let entries = std::mem::take(&mut self.entries);
        for &h in entries.values() {
            self.account(window_start, &slab[h as usize], 1.0, h);
        }
        self.slab = slab;
        self.entries = entries;
    }
}

/// The load table of one owner (a switch, a host, or the simulator's whole fabric).
#[derive(Clone, Debug)]
pub struct LoadTable {
    horizon: usize,
    now: Slot,
    links: Links,
    /// Links before this position in id order are caught up ([`LoadTable::settle_some`]).
    sweep_at: usize,
}

/// A publisher's name, hashed for [`Booked`]'s spans: equal names have equal tags, and a tag
/// match is confirmed on the name.
fn publisher_tag(name: &str) -> u64 {
    crate::hash::of_str(name)
}

/// Adds `sign × rates` of an entry to a per-slot sum whose index 0 is `window_start`.
fn accumulate(sum: &mut [f64], window_start: Slot, e: &Entry, sign: f64) {
    for (i, r) in e.rates.iter().enumerate() {
        let slot = e.first_slot.0 + i as u64;
        if let Some(cell) = slot
            .checked_sub(window_start.0)
            .and_then(|idx| sum.get_mut(idx as usize))
        {
            *cell += sign * r;
        }
    }
}

/// Adds an entry's booked cells (`fixed`, from slot `first` on) that fall in slots `a..b` to
/// `sum`, whose index 0 is slot `start` (at most `a`).
#[inline]
fn add_cells(sum: &mut [i128], start: u64, (a, b): (u64, u64), first: u64, fixed: &[i128]) {
    let (ea, eb) = (a.max(first), b.min(first + fixed.len() as u64));
    if ea >= eb {
        return;
    }
    let rates = &fixed[(ea - first) as usize..(eb - first) as usize];
    let cells = &mut sum[(ea - start) as usize..(eb - start) as usize];
    for (cell, r) in cells.iter_mut().zip(rates) {
        *cell += r;
    }
}

/// The rate an entry books for absolute slot `slot` (0 outside its window).
fn rate_at(e: &Entry, slot: Slot) -> f64 {
    slot.0
        .checked_sub(e.first_slot.0)
        .and_then(|i| e.rates.get(i as usize).copied())
        .unwrap_or(0.0)
}

impl LoadTable {
    /// A table over `links` (id, capacity) with horizon K, starting at slot `now`.
    pub fn new(
        horizon: usize,
        now: Slot,
        links: impl IntoIterator<Item = (LinkId, BytesPerSec)>,
    ) -> Self {
        let window = 2 * horizon;
        let links = Links::new(
            (links.into_iter()).map(|(id, c)| (id, LinkLoad::new(c.0, window, now, true))),
        );
        LoadTable {
            horizon,
            now,
            sweep_at: links.len(),
            links,
        }
    }

    /// The table keeps no per-slot sum per publisher: every update then skips a lookup, and
    /// every slot a slide per publisher of each link. For tables never asked for `all-others`
    /// feedback: mlccd's own uplinks, and `precedence` switches. `all-others` feedback stays
    /// exact, but takes out the asking host's entries one by one, so its last bits can differ
    /// from a table keeping sums.
    pub fn without_publisher_sums(mut self) -> Self {
        for l in self.links.values_mut() {
            l.publisher_sums = false;
            for p in l.by_publisher.values_mut() {
                p.sums.sum = Vec::new();
            }
        }
        self
    }

    /// The table keeping only what feedback in `mode` needs, as every switch's is.
    pub fn answering(self, mode: FeedbackMode) -> Self {
        match mode {
            FeedbackMode::AllOthers => self,
            FeedbackMode::Precedence => self.without_publisher_sums(),
        }
    }

    pub fn horizon(&self) -> usize {
        self.horizon
    }

    pub fn now(&self) -> Slot {
        self.now
    }

    pub fn contains(&self, link: LinkId) -> bool {
        self.links.contains_key(&link)
    }

    pub fn links(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.links.keys().copied()
    }

    pub fn capacity(&self, link: LinkId) -> Result<BytesPerSec, TableError> {
        self.link(link).map(|l| BytesPerSec(l.capacity))
    }

    fn link(&self, link: LinkId) -> Result<&LinkLoad, TableError> {
        self.links.get(&link).ok_or(TableError::UnknownLink(link))
    }

    /// The link, caught up to the table's slot.
    fn link_mut(&mut self, link: LinkId) -> Result<&mut LinkLoad, TableError> {
        let now = self.now;
        let l = self
            .links
            .get_mut(&link)
            .ok_or(TableError::UnknownLink(link))?;
        l.catch_up(link, now);
        Ok(l)
    }

    /// Moves the table to slot `to`. O(1): each link records the slots that passed and drops
    /// entries not refreshed for K slots when it is next touched or swept; every read answers
    /// as of `to` either way. Going backwards is ignored (a clock step back must not resurrect
    /// expired state).
    pub fn advance(&mut self, to: Slot) {
        if to <= self.now {
            return;
        }
        self.now = to;
        self.sweep_at = 0;
    }

    /// Catches up to `max` links that lag the table's slot and returns whether all are now
    /// current. An owner that must free expired entries without waiting for a link to be
    /// touched calls this a bounded bite at a time, so no single call holds the table long.
    pub fn settle_some(&mut self, max: usize) -> bool {
        let now = self.now;
        let end = self.sweep_at.saturating_add(max).min(self.links.len());
        for (id, l) in self.links.range_mut(self.sweep_at..end) {
            l.catch_up(*id, now);
        }
        self.sweep_at = end;
        end == self.links.len()
    }

    /// Catches up every link (see [`Self::settle_some`]).
    pub fn settle_all(&mut self) {
        self.settle_some(usize::MAX);
    }

    /// Checks an update without applying it.
    pub fn validate(&self, link: LinkId, u: &Update<'_>) -> Result<(), TableError> {
        let l = self.link(link)?;
        if u.key.flow != *u.flow {
            return Err(TableError::KeyMismatch {
                flow: u.flow.clone(),
                key_flow: u.key.flow.clone(),
            });
        }
        if u.done {
            return Ok(());
        }
        if u.rates.len() > self.horizon {
            return Err(TableError::TooManyRates {
                got: u.rates.len(),
                horizon: self.horizon,
            });
        }
        for (index, &rate) in u.rates.iter().enumerate() {
            if !rate.is_finite() {
                return Err(TableError::NotFinite { index });
            }
            if rate < 0.0 {
                return Err(TableError::Negative { index });
            }
            if rate > MAX_RATE_OVER_CAPACITY * l.capacity {
                return Err(TableError::TooLarge {
                    index,
                    rate,
                    capacity: l.capacity,
                });
            }
        }
        let k = self.horizon as u64;
        let lo = Slot(self.now.0.saturating_sub(k));
        let hi = self.now.plus(k);
        if u.first_slot < lo || u.first_slot > hi {
            return Err(TableError::FirstSlotOutOfWindow {
                first: u.first_slot,
                lo,
                hi,
            });
        }
        Ok(())
    }

    /// Replaces (or, with `done`, removes) the flow's entry on `link`. Invalid updates change
    /// nothing.
    pub fn update(&mut self, link: LinkId, u: &Update<'_>) -> Result<(), TableError> {
        self.validate(link, u)?;
        let window_start = self.now;
        let l = self.link_mut(link)?;
        l.build_wanted_tree();
        if !u.done && l.replace_in_place(window_start, u) {
            return Ok(());
        }
        l.remove(window_start, u.flow);
        if !u.done {
            l.insert(
                window_start,
                Entry {
                    publisher: u.publisher.to_string(),
                    first_slot: u.first_slot,
                    rates: u.rates.to_vec(),
                    key: u.key.clone(),
                    refreshed: window_start,
                },
            );
        }
        Ok(())
    }

    /// Removes `flow`'s entry on `link`, if it has one there: [`Self::withdraw`] for a caller
    /// that knows where the flow booked, without a lookup in each of the table's links.
    pub fn withdraw_from(&mut self, link: LinkId, flow: &FlowId) -> Result<(), TableError> {
        let now = self.now;
        let l = self
            .links
            .get_mut(&link)
            .ok_or(TableError::UnknownLink(link))?;
        l.withdraw(link, now, flow);
        Ok(())
    }

    /// Removes every entry of `flow` on every link (a flow that finished everywhere at once).
    pub fn withdraw(&mut self, flow: &FlowId) {
        let now = self.now;
        for (id, l) in self.links.iter_mut() {
            l.withdraw(*id, now, flow);
        }
    }

    /// Bytes/s that flows ranked after `q`'s key (and not published by the asking host)
    /// committed for `slot` in `slot` itself — entries whose plan starts there, i.e. published in
    /// that slot by hosts that planned before the asker. They are sending at it now and can only
    /// yield from the next slot on: a flow that plans slot n around them does not overbook it
    /// (`host::PolicyConfig::committed_now`). O(log n) in the link's entries, plus the asking
    /// host's own entries on the link.
    pub fn committed(&self, link: LinkId, q: &Query<'_>, slot: Slot) -> Result<f64, TableError> {
        let l = self.link(link)?;
        // Entries a link holds start within 2K slots of its own slot; no other slot has any.
        let k = self.horizon as u64;
        if slot.0 + 2 * k <= l.now.0 || slot.0 >= l.now.0 + 2 * k {
            return Ok(0.0);
        }
        let mut sum = l.first_after(q.key, slot);
        // Take out what the asker must not count: its host's entries, its own flow's under
        // another key, and entries that lapsed on a link not yet caught up.
        l.hidden_after(q, slot, |e| sum -= rate_at(e, slot));
        for e in self.expired(l) {
            if e.key > *q.key && e.key.flow != *q.flow && !q.excludes(e) && e.first_slot == slot {
                sum -= rate_at(e, slot);
            }
        }
        Ok(sum.max(0.0))
    }

    /// Load on `link` for slots `from..from + out.len()` that `q`'s flow must plan around:
    /// everything booked except its own entry (and its publisher's, if asked), restricted in
    /// `precedence` mode to flows that sort before it.
    pub fn feedback(
        &self,
        link: LinkId,
        q: &Query<'_>,
        mode: FeedbackMode,
        from: Slot,
        out: &mut [f64],
    ) -> Result<(), TableError> {
        self.feedback_visits(link, q, mode, from, out).map(|_| ())
    }

    /// [`Self::feedback`], returning how many nodes of the link's order tree it visited: the
    /// work that could grow with the flows on the link, for tests that hold it logarithmic.
    pub fn feedback_visits(
        &self,
        link: LinkId,
        q: &Query<'_>,
        mode: FeedbackMode,
        from: Slot,
        out: &mut [f64],
    ) -> Result<usize, TableError> {
        let l = self.link(link)?;
        let mut visited = 0;
        // The sums are on the link's window, which may start before the table's slot; slots
        // beyond that window have nothing booked (no entry reaches past it).
        let now = l.now;
        out.iter_mut().for_each(|x| *x = 0.0);
        // Window index of out[0]; slots before the window (the past) or beyond it read as 0.
        let offset = from.0 as i128 - now.0 as i128;
        let add_sums = |out: &mut [f64], sums: &[f64], sign: f64| {
            for (i, cell) in out.iter_mut().enumerate() {
                let idx = offset + i as i128;
                if let Some(v) = usize::try_from(idx).ok().and_then(|i| sums.get(i)) {
                    *cell += sign * v;
                }
            }
        };
        let add_entry = |out: &mut [f64], e: &Entry, sign: f64| {
            for (i, cell) in out.iter_mut().enumerate() {
                *cell += sign * rate_at(e, from.plus(i as u64));
            }
        };
        // A link not caught up may still count entries that expired since: take out the ones
        // the sums below let through.
        for e in self.expired(l) {
            if e.key.flow != *q.flow
                && !q.excludes(e)
                && (mode == FeedbackMode::AllOthers || e.key < *q.key)
            {
                add_entry(out, e, -1.0);
            }
        }
        match mode {
            FeedbackMode::AllOthers => {
                add_sums(out, &l.total, 1.0);
                if let Some(p) = q.exclude_publisher.and_then(|p| l.by_publisher.get(p)) {
                    if l.publisher_sums {
                        add_sums(out, &p.sums.sum, -1.0);
                    } else {
                        for &h in p.keys.values() {
                            add_entry(out, l.entry(h), -1.0);
                        }
                    }
                }
                if let Some(e) = l.get(q.flow).filter(|e| !q.excludes(e)) {
                    add_entry(out, e, -1.0);
                }
            }
            FeedbackMode::Precedence => {
                // Everything ranked before the asker: O(log n) subtree sums on a busy link.
                visited += l.add_before(q.key, from, out);
                // Then take out what this flow must not see among those.
                l.hidden_before(q, |e| add_entry(out, e, -1.0));
                // Float cancellation must not report a negative load.
                out.iter_mut().for_each(|x| *x = x.max(0.0));
            }
        }
        if mode == FeedbackMode::AllOthers {
            out.iter_mut().for_each(|x| *x = x.max(0.0));
        }
        Ok(visited)
    }

    /// Total booked load on `link` in absolute slot `slot`.
    pub fn load(&self, link: LinkId, slot: Slot) -> Result<f64, TableError> {
        let l = self.link(link)?;
        if slot < self.now {
            return Ok(0.0);
        }
        let booked = slot
            .since(l.now)
            .and_then(|i| l.total.get(i as usize).copied())
            .unwrap_or(0.0);
        // A link not caught up may still count entries that expired since.
        let expired: f64 = self.expired(l).map(|e| rate_at(e, slot)).sum();
        Ok((booked - expired).max(0.0))
    }

    /// The highest load booked on `link` in the last W slots that passed.
    pub fn max_recent_load(&self, link: LinkId) -> Result<f64, TableError> {
        let l = self.link(link)?;
        let max = |l: &LinkLoad| l.history.iter().copied().fold(0.0, f64::max);
        if l.now == self.now {
            return Ok(max(l));
        }
        // Rare (an operator's read of a link nobody touched this slot): catch up a copy.
        let mut copy = l.clone();
        copy.catch_up(link, self.now);
        Ok(max(&copy))
    }

    /// Whether an entry expired by the table's slot. Only a link that lags the table can
    /// still hold one; no read may count it.
    fn lapsed(&self, e: &Entry) -> bool {
        e.refreshed.0 + self.horizon as u64 <= self.now.0
    }

    /// The lapsed entries of `l`. Feedback asks for them on every call, so while the link's
    /// expiry floor is ahead of the table (always, for a current link) the entries are not
    /// even walked.
    fn expired<'a>(&'a self, l: &'a LinkLoad) -> impl Iterator<Item = &'a Entry> + 'a {
        let walk = if l.expiry_floor <= self.now.0 {
            usize::MAX
        } else {
            0
        };
        l.ordered().take(walk).filter(|e| self.lapsed(e))
    }

    /// Entries on a link, in precedence order (for operators and tests).
    pub fn entries(&self, link: LinkId) -> Result<Vec<(&FlowId, &Entry)>, TableError> {
        let l = self.link(link)?;
        Ok(l.ordered()
            .filter(|e| !self.lapsed(e))
            .map(|e| (&e.key.flow, e))
            .collect())
    }

    pub fn entry_count(&self, link: LinkId) -> Result<usize, TableError> {
        let l = self.link(link)?;
        Ok(l.entries.len() - self.expired(l).count())
    }

    /// Checks the internal invariants; for tests and debug assertions.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, l) in &self.links {
            if l.entries.len() != l.index.len() {
                return Err(format!("link {id}: entries and flow index disagree"));
            }
            if l.now > self.now {
                return Err(format!(
                    "link {id} is at slot {}, ahead of the table",
                    l.now
                ));
            }
            let floor = l.next_expiry(self.horizon as u64);
            if l.expiry_floor > floor {
                return Err(format!(
                    "link {id}: expiry floor {} is above the next expiry {floor}",
                    l.expiry_floor
                ));
            }
            let mut fresh = LinkLoad::new(l.capacity, l.total.len(), l.now, l.publisher_sums);
            if l.slab.len() != l.entries.len() {
                return Err(format!("link {id}: entries and slab disagree"));
            }
            for (k, &h) in &l.entries {
                let Some(e) = l.slab.get(h as usize) else {
                    return Err(format!("link {id}: entry {} names no slab place", k.flow));
                };
                if &e.key != k {
                    return Err(format!(
                        "link {id}: entry {} stored under another key",
                        e.key.flow
                    ));
                }
                if l.index.get(&k.flow) != Some(&h)
                    || l.by_publisher.get(&e.publisher).and_then(|p| p.keys.get(k)) != Some(&h)
                {
                    return Err(format!(
                        "link {id}: entry {} missing from flow index",
                        k.flow
                    ));
                }
                if e.refreshed.0 + self.horizon as u64 <= l.now.0 {
                    return Err(format!("link {id}: entry {} should have expired", k.flow));
                }
                fresh.insert(l.now, e.clone());
                let last = fresh.slab.len() - 1;
                if l.booked.get(h as usize) != fresh.booked.get(last)
                    || l.booked.tag(h as usize) != fresh.booked.tag(last)
                {
                    return Err(format!(
                        "link {id}: entry {}'s booking is not its rates'",
                        k.flow
                    ));
                }
            }
            let same = |a: &[f64], b: &[f64]| {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| (x - y).abs() <= 1e-6 * x.abs().max(1.0))
            };
            if !same(&fresh.total, &l.total) {
                return Err(format!(
                    "link {id}: slot sums {:?}, entries add to {:?}",
                    l.total, fresh.total
                ));
            }
            if let Some(t) = &l.order {
                if t.len() != l.entries.len() {
                    return Err(format!("link {id}: order tree and entries disagree"));
                }
                t.check().map_err(|e| format!("link {id}: {e}"))?;
            }
            // Between the two marks either is right (hysteresis); outside them only one is.
            let n = l.entries.len();
            if n < TREE_UNTIL && l.order.is_some() {
                return Err(format!(
                    "link {id}: order tree kept wrongly for {n} entries"
                ));
            }
            if fresh.by_publisher.len() != l.by_publisher.len()
                || fresh.by_publisher.iter().any(|(p, a)| {
                    l.by_publisher.get(p).is_none_or(|b| {
                        a.sums.count != b.sums.count
                            || !a.keys.keys().eq(b.keys.keys())
                            || !same(&a.sums.sum, &b.sums.sum)
                    })
                })
            {
                return Err(format!("link {id}: publisher sums disagree with entries"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Rank;

    pub(super) fn fid(s: &str) -> FlowId {
        FlowId::new(s).unwrap()
    }

    fn table() -> LoadTable {
        LoadTable::new(4, Slot(100), [(LinkId(0), BytesPerSec(100.0))])
    }

    pub(super) fn put(
        t: &mut LoadTable,
        flow: &str,
        host: &str,
        start: u64,
        first: u64,
        rates: &[f64],
    ) {
        let f = fid(flow);
        let key = PrecedenceKey::new(Rank(start), f.clone());
        t.update(
            LinkId(0),
            &Update {
                flow: &f,
                publisher: host,
                first_slot: Slot(first),
                rates,
                key: &key,
                done: false,
            },
        )
        .unwrap();
    }

    fn fb(
        t: &LoadTable,
        flow: &str,
        start: u64,
        host: Option<&str>,
        mode: FeedbackMode,
    ) -> Vec<f64> {
        let f = fid(flow);
        let key = PrecedenceKey::new(Rank(start), f.clone());
        let mut out = vec![0.0; 4];
        t.feedback(
            LinkId(0),
            &Query {
                flow: &f,
                key: &key,
                exclude_publisher: host,
            },
            mode,
            t.now(),
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn committed_counts_lower_ranked_plans_of_other_hosts_published_for_this_slot() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0; 4]); // ranked before the query
        put(&mut t, "c", "h2", 9, 100, &[20.0; 4]); // after it, another host: counts
        put(&mut t, "d", "h3", 9, 100, &[0.0, 40.0]); // after it, nothing for slot 100
        put(&mut t, "e", "h4", 9, 99, &[50.0; 4]); // published last slot: not committed now
        put(&mut t, "f", "h5", 9, 100, &[7.0; 4]); // the asker's own host: left out
        let (q, key) = (fid("b"), PrecedenceKey::new(Rank(5), fid("b")));
        let query = Query {
            flow: &q,
            key: &key,
            exclude_publisher: Some("h5"),
        };
        assert_eq!(t.committed(LinkId(0), &query, Slot(100)).unwrap(), 20.0);
        assert_eq!(t.committed(LinkId(0), &query, Slot(101)).unwrap(), 0.0);
        assert!(t.committed(LinkId(9), &query, Slot(100)).is_err());
    }

    #[test]
    fn update_replaces_not_adds() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0, 10.0, 10.0, 10.0]);
        put(&mut t, "a", "h1", 1, 100, &[20.0, 0.0, 0.0, 0.0]);
        assert_eq!(t.load(LinkId(0), Slot(100)).unwrap(), 20.0);
        assert_eq!(t.load(LinkId(0), Slot(101)).unwrap(), 0.0);
        assert_eq!(t.entry_count(LinkId(0)).unwrap(), 1);
        t.check_invariants().unwrap();
    }

    #[test]
    fn an_entry_moved_in_the_slab_by_a_removal_is_still_found_and_rewritten() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0; 4]);
        put(&mut t, "b", "h2", 2, 100, &[20.0; 4]);
        put(&mut t, "c", "h1", 3, 100, &[40.0; 4]);
        // Removing the first entry moves the last into its place.
        let a = fid("a");
        let done = Update {
            flow: &a,
            publisher: "h1",
            first_slot: Slot(100),
            rates: &[],
            key: &PrecedenceKey::new(Rank(1), a.clone()),
            done: true,
        };
        t.update(LinkId(0), &done).unwrap();
        t.check_invariants().unwrap();
        // The moved entry is rewritten in place, under its own name.
        put(&mut t, "c", "h1", 3, 100, &[5.0, 5.0, 0.0, 0.0]);
        t.check_invariants().unwrap();
        assert_eq!(t.load(LinkId(0), Slot(100)).unwrap(), 25.0);
        assert_eq!(t.load(LinkId(0), Slot(102)).unwrap(), 20.0);
        // Whatever ranks before a late flow, less its host's.
        let late = fb(&t, "z", 9, Some("h2"), FeedbackMode::Precedence);
        assert_eq!(late, vec![5.0, 5.0, 0.0, 0.0]);
        let mut fresh = table();
        put(&mut fresh, "b", "h2", 2, 100, &[20.0; 4]);
        put(&mut fresh, "c", "h1", 3, 100, &[5.0, 5.0, 0.0, 0.0]);
        for mode in [FeedbackMode::Precedence, FeedbackMode::AllOthers] {
            assert_eq!(fb(&t, "z", 9, None, mode), fb(&fresh, "z", 9, None, mode));
        }
    }

    #[test]
    fn feedback_excludes_the_asking_flow_and_its_host() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0, 10.0, 0.0, 0.0]);
        put(&mut t, "b", "h2", 2, 100, &[0.0, 30.0, 30.0, 0.0]);
        put(&mut t, "c", "h1", 3, 101, &[5.0, 5.0, 5.0]);
        let all = FeedbackMode::AllOthers;
        assert_eq!(fb(&t, "a", 1, None, all), vec![0.0, 35.0, 35.0, 5.0]);
        assert_eq!(fb(&t, "a", 1, Some("h1"), all), vec![0.0, 30.0, 30.0, 0.0]);
        assert_eq!(fb(&t, "b", 2, None, all), vec![10.0, 15.0, 5.0, 5.0]);
        // A flow the table has never seen gets everything.
        assert_eq!(fb(&t, "new", 9, None, all), vec![10.0, 45.0, 35.0, 5.0]);
    }

    #[test]
    fn precedence_only_counts_earlier_flows() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0, 10.0, 0.0, 0.0]);
        put(&mut t, "b", "h2", 2, 100, &[0.0, 30.0, 30.0, 0.0]);
        put(&mut t, "c", "h3", 2, 100, &[1.0, 1.0, 1.0, 1.0]);
        let p = FeedbackMode::Precedence;
        assert_eq!(fb(&t, "a", 1, None, p), vec![0.0; 4]);
        assert_eq!(fb(&t, "b", 2, None, p), vec![10.0, 10.0, 0.0, 0.0]);
        // Same iteration start: the id breaks the tie ("b" < "c").
        assert_eq!(fb(&t, "c", 2, None, p), vec![10.0, 40.0, 30.0, 0.0]);
        assert_eq!(fb(&t, "c", 2, Some("h1"), p), vec![0.0, 30.0, 30.0, 0.0]);
    }

    /// Precedence feedback walks one path of the link's order tree, not the flows ranked
    /// before the asker: with every flow in one rank (the worst case for a walk of the rank's
    /// bucket) the nodes it visits grow with log n, and `committed` agrees with a brute sum.
    #[test]
    fn feedback_cost_is_logarithmic_in_the_flows_sharing_a_rank() {
        let worst_visits = |n: usize| {
            let mut t = LoadTable::new(4, Slot(100), [(LinkId(0), BytesPerSec(1e9))]);
            for i in 0..n {
                put(
                    &mut t,
                    &format!("job/h{i}>h0/agg"),
                    &format!("h{i}"),
                    7,
                    100,
                    &[1.0; 4],
                );
            }
            // A busy link's first precedence read walks it and asks for a tree, which its next
            // write builds.
            let _ = fb(&t, "job/h0>h0/agg", 7, None, FeedbackMode::Precedence);
            put(&mut t, "job/h0>h0/agg", "h0", 7, 100, &[1.0; 4]);
            let mut worst = 0;
            for i in (0..n).step_by((n / 64).max(1)) {
                let f = fid(&format!("job/h{i}>h0/agg"));
                let key = PrecedenceKey::new(Rank(7), f.clone());
                let q = Query {
                    flow: &f,
                    key: &key,
                    exclude_publisher: Some("nobody"),
                };
                let mut out = vec![0.0; 4];
                let v = t
                    .feedback_visits(LinkId(0), &q, FeedbackMode::Precedence, Slot(100), &mut out)
                    .unwrap();
                let before = t
                    .entries(LinkId(0))
                    .unwrap()
                    .iter()
                    .take_while(|(_, e)| e.key < key)
                    .count();
                assert_eq!(out, vec![before as f64; 4]);
                assert_eq!(
                    t.committed(LinkId(0), &q, Slot(100)).unwrap(),
                    (n - before - 1) as f64
                );
                worst = worst.max(v);
            }
            t.check_invariants().unwrap();
            worst
        };
        let (small, large) = (worst_visits(512), worst_visits(8192));
        // A walk of the bucket would visit up to 8192 entries, 16 times the small case.
        assert!(large <= 4 * 13, "{large} nodes visited among 8192 flows");
        assert!(
            large <= 4 * small,
            "{small} nodes for 512 flows, {large} for 8192"
        );
    }

    /// A busy link answers from its order tree, a quiet one by walking its entries: the two
    /// agree to the bit, so which one a link uses never shows in a decision.
    #[test]
    fn the_order_tree_and_the_walk_agree_to_the_bit() {
        let mut t = LoadTable::new(4, Slot(100), [(LinkId(0), BytesPerSec(1e9))]);
        for i in 0..(TREE_FROM as u64 + 44) {
            let rates: Vec<f64> = (0..4)
                .map(|j| 1e6 / 3.0 * ((i * 7 + j) % 5) as f64)
                .collect();
            let first = 99 + i % 3;
            put(
                &mut t,
                &format!("f{i}"),
                &format!("h{}", i % 9),
                i % 4,
                first,
                &rates,
            );
        }
        let answers = |t: &LoadTable| {
            let mut v = Vec::new();
            for i in (0..TREE_FROM as u64 + 44).step_by(7) {
                let f = fid(&format!("f{i}"));
                // Some askers' own entries sit under another rank, before or after the key.
                let key = PrecedenceKey::new(Rank((i + i / 21) % 4), f.clone());
                let q = Query {
                    flow: &f,
                    key: &key,
                    exclude_publisher: Some("h2"),
                };
                let mut out = vec![0.0; 4];
                t.feedback(LinkId(0), &q, FeedbackMode::Precedence, Slot(100), &mut out)
                    .unwrap();
                v.extend(out.iter().map(|x| x.to_bits()));
                v.push(t.committed(LinkId(0), &q, Slot(100)).unwrap().to_bits());
            }
            v
        };
        assert!(
            t.links[&LinkId(0)].order.is_none(),
            "no tree before a read wants one"
        );
        let walked = answers(&t);
        put(&mut t, "f0", "h0", 0, 99, &[0.0; 4]);
        assert!(
            t.links[&LinkId(0)].order.is_some(),
            "a read asked for a tree"
        );
        let f0: Vec<f64> = (0..4).map(|j| 1e6 / 3.0 * (j % 5) as f64).collect();
        put(&mut t, "f0", "h0", 0, 99, &f0);
        t.check_invariants().unwrap();
        let from_tree = answers(&t);
        assert_eq!(from_tree, walked);
        t.links.get_mut(&LinkId(0)).unwrap().order = None;
        assert_eq!(answers(&t), from_tree);
    }

    #[test]
    fn entries_expire_after_k_slots_without_refresh() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0; 4]);
        t.advance(Slot(103));
        assert_eq!(t.entry_count(LinkId(0)).unwrap(), 1);
        assert_eq!(t.load(LinkId(0), Slot(103)).unwrap(), 10.0);
        t.advance(Slot(104));
        assert_eq!(t.entry_count(LinkId(0)).unwrap(), 0);
        assert_eq!(t.load(LinkId(0), Slot(104)).unwrap(), 0.0);
        t.check_invariants().unwrap();
    }

    /// A table over links 0 and 1 at slot 100, flow `a` booked on both.
    fn one_flow_on_two_links() -> (LoadTable, FlowId) {
        let links = [LinkId(0), LinkId(1)];
        let mut t = LoadTable::new(4, Slot(100), links.map(|l| (l, BytesPerSec(100.0))));
        let f = fid("a");
        let key = PrecedenceKey::new(Rank(1), f.clone());
        for l in links {
            let u = Update {
                flow: &f,
                publisher: "h1",
                first_slot: Slot(100),
                rates: &[10.0; 4],
                key: &key,
                done: false,
            };
            t.update(l, &u).unwrap();
        }
        (t, f)
    }

    #[test]
    fn withdrawing_from_a_link_leaves_the_flow_on_the_others() {
        let (mut t, f) = one_flow_on_two_links();
        t.withdraw_from(LinkId(0), &f).unwrap();
        assert_eq!(t.entry_count(LinkId(0)).unwrap(), 0);
        assert_eq!(t.load(LinkId(0), Slot(100)).unwrap(), 0.0);
        assert_eq!(t.entry_count(LinkId(1)).unwrap(), 1);
        // A flow with no entry there, again: nothing to do.
        t.withdraw_from(LinkId(0), &f).unwrap();
        assert_eq!(
            t.withdraw_from(LinkId(7), &f),
            Err(TableError::UnknownLink(LinkId(7)))
        );
        t.check_invariants().unwrap();
    }

    #[test]
    fn done_withdraws_and_history_keeps_max() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0, 50.0, 20.0, 0.0]);
        t.advance(Slot(103));
        assert_eq!(t.max_recent_load(LinkId(0)).unwrap(), 50.0);
        let f = fid("a");
        let key = PrecedenceKey::new(Rank(1), f.clone());
        t.update(
            LinkId(0),
            &Update {
                flow: &f,
                publisher: "h1",
                first_slot: Slot(103),
                rates: &[],
                key: &key,
                done: true,
            },
        )
        .unwrap();
        assert_eq!(t.entry_count(LinkId(0)).unwrap(), 0);
        t.advance(Slot(110));
        assert_eq!(t.max_recent_load(LinkId(0)).unwrap(), 0.0);
    }

    #[test]
    fn advancing_is_lazy_and_sweeping_frees_expired_entries_a_bite_at_a_time() {
        let links = [LinkId(0), LinkId(1)];
        let (mut t, _) = one_flow_on_two_links();
        t.advance(Slot(110));
        for l in links {
            // Still stored, but no read sees it.
            assert_eq!(t.links[&l].entries.len(), 1);
            assert_eq!(t.entry_count(l).unwrap(), 0);
            assert!(t.entries(l).unwrap().is_empty());
            assert_eq!(t.max_recent_load(l).unwrap(), 0.0);
        }
        assert!(!t.settle_some(1));
        assert_eq!(t.links[&LinkId(0)].entries.len(), 0);
        assert_eq!(t.links[&LinkId(1)].entries.len(), 1);
        assert!(t.settle_some(1));
        assert_eq!(t.links[&LinkId(1)].entries.len(), 0);
        assert_eq!(t.links[&LinkId(1)].now, Slot(110));
        t.check_invariants().unwrap();
    }

    #[test]
    fn invalid_updates_change_nothing() {
        let mut t = table();
        put(&mut t, "a", "h1", 1, 100, &[10.0; 4]);
        let f = fid("a");
        let key = PrecedenceKey::new(Rank(1), f.clone());
        let bad = |rates: &'static [f64], first: u64| Update {
            flow: &f,
            publisher: "h1",
            first_slot: Slot(first),
            rates,
            key: &key,
            done: false,
        };
        type Case<'a> = (Update<'a>, fn(&TableError) -> bool);
        let cases: Vec<Case> = vec![
            (bad(&[1.0; 5], 100), |e| {
                matches!(e, TableError::TooManyRates { .. })
            }),
            (bad(&[f64::NAN], 100), |e| {
                matches!(e, TableError::NotFinite { index: 0 })
            }),
            (bad(&[1.0, -1.0], 100), |e| {
                matches!(e, TableError::Negative { index: 1 })
            }),
            (bad(&[401.0], 100), |e| {
                matches!(e, TableError::TooLarge { .. })
            }),
            (bad(&[1.0], 200), |e| {
                matches!(e, TableError::FirstSlotOutOfWindow { .. })
            }),
        ];
        for (u, is) in cases {
            let e = t.update(LinkId(0), &u).unwrap_err();
            assert!(is(&e), "{e}");
        }
        assert!(matches!(
            t.update(LinkId(9), &bad(&[1.0], 100)),
            Err(TableError::UnknownLink(LinkId(9)))
        ));
        assert_eq!(t.load(LinkId(0), Slot(100)).unwrap(), 10.0);
        t.check_invariants().unwrap();
    }
}
