//! The maps and sets every driver keys by flow ids, links and sockets: foldhash, seeded per
//! process. SipHash (std's default) was a tenth of the simulator's time and of a busy host's
//! slot; the seed still keeps a switch's tables, keyed by ids its clients choose, from being
//! flooded into one bucket. No decision depends on a map's iteration order (the simulator's
//! runs are reproducible although each process draws its own seed).

/// A hash map with foldhash's per-process random seed.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set with foldhash's per-process random seed.
pub type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A string's hash under one seed drawn per process: equal strings hash alike within the
/// process (flow ids carry theirs; the load table tags each entry with its publisher's), and
/// clients cannot predict it.
pub fn of_str(s: &str) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::LazyLock<foldhash::fast::RandomState> =
        std::sync::LazyLock::new(Default::default);
    SEED.hash_one(s)
}

/// An empty [`Map`] with room for `n` entries.
pub fn map_with_capacity<K, V>(n: usize) -> Map<K, V> {
    Map::with_capacity_and_hasher(n, Default::default())
}

/// An empty [`Set`] with room for `n` entries.
pub fn set_with_capacity<K>(n: usize) -> Set<K> {
    Set::with_capacity_and_hasher(n, Default::default())
}
