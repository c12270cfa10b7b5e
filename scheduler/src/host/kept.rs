//! A map whose entries last while each observation sets them: what is worked out once per
//! process or flow (its group ids, its notes) is kept from slot to slot, and what an
//! observation no longer touches is dropped at its end.

use std::borrow::Borrow;
use std::hash::Hash;

use mlcc_core::hash;

pub(super) struct Kept<K, V> {
    /// Each entry, and the observation that last touched it.
    entries: hash::Map<K, (V, u64)>,
    /// The observation being taken (one per slot, counted rather than read from the slot so
    /// that a slot observed twice still drops what it no longer touches).
    round: u64,
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Kept {
            entries: hash::Map::default(),
            round: 0,
        }
    }
}

impl<K: Hash + Eq, V> Kept<K, V> {
    /// Starts an observation: entries not touched before [`Self::end`] are dropped then.
    pub fn begin(&mut self) {
        self.round += 1;
    }

    /// `k`'s entry, not touched.
    pub fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(k).map(|(v, _)| v)
    }

    /// `k`'s entry, touched.
    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let round = self.round;
        let (v, seen) = self.entries.get_mut(k)?;
        *seen = round;
        Some(v)
    }

    /// Sets `k`'s entry, touched, and returns it.
    pub fn insert(&mut self, k: K, v: V) -> &mut V {
        let round = self.round;
        match self.entries.entry(k) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                *e.get_mut() = (v, round);
                &mut e.into_mut().0
            }
            std::collections::hash_map::Entry::Vacant(e) => &mut e.insert((v, round)).0,
        }
    }

    /// Ends an observation: drops every entry it did not touch, each shown to `gone` first.
    pub fn end(&mut self, mut gone: impl FnMut(&K, &V)) {
        let round = self.round;
        self.entries.retain(|k, (v, seen)| {
            let kept = *seen == round;
            if !kept {
                gone(k, v);
            }
            kept
        });
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, (v, _))| (k, v))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lasts_while_each_observation_touches_it() {
        let mut k: Kept<u32, &str> = Kept::default();
        k.begin();
        k.insert(1, "a");
        k.insert(2, "b");
        k.end(|_, _| panic!("nothing is gone yet"));
        k.begin();
        *k.get_mut(&1).unwrap() = "c";
        let mut gone = Vec::new();
        k.end(|key, v| gone.push((*key, *v)));
        assert_eq!(gone, [(2, "b")]);
        assert_eq!(k.iter().collect::<Vec<_>>(), [(&1, &"c")]);
        // Observed twice in one slot: the second observation still drops what it skips.
        k.begin();
        k.end(|_, _| {});
        assert_eq!(k.len(), 0);
    }
}
