//! A table's links in id order, found by id through an index of positions.
//!
//! Every update and every question starts by finding its link. In a hash map holding the links
//! themselves that is a probe of a cold control group and then of a cold bucket, once per link
//! of a flow's path, for each of a slot's flows. Link ids index a topology's links, so a table
//! holding many of them holds them densely: an array of positions, 4 bytes per id up to the
//! largest, finds a link with one read of a small hot array. A table of a few links whose ids
//! are spread thin (a host's uplink; a switch's, in the simulator, which gives every switch a
//! table) compares the ids, kept together, one after the other; a table of many spread thin, a
//! map of positions.

use super::LinkLoad;
use crate::hash::Map;
use crate::topology::LinkId;

/// Marks an id the dense index does not hold.
const ABSENT: u32 = u32::MAX;

/// How many ids per link held the dense index may span, above a small floor.
const DENSE_SPREAD: usize = 16;
const DENSE_FLOOR: usize = 64;
/// Up to how many links spread thin are found by comparing ids: a cache line or two of them.
const FEW: usize = 32;

#[derive(Clone, Debug)]
enum Positions {
    /// The position of each id below the largest held, or [`ABSENT`].
    Dense(Vec<u32>),
    /// The ids in position order.
    Few(Vec<LinkId>),
    Sparse(Map<LinkId, u32>),
}

/// The links, in id order, and where each id is.
#[derive(Clone, Debug)]
pub(super) struct Links {
    positions: Positions,
    all: Vec<(LinkId, LinkLoad)>,
}

impl Links {
    /// The links given; of an id given twice, the last.
    pub(super) fn new(links: impl IntoIterator<Item = (LinkId, LinkLoad)>) -> Self {
        let unique: Map<LinkId, LinkLoad> = links.into_iter().collect();
        let mut all: Vec<(LinkId, LinkLoad)> = unique.into_iter().collect();
        all.sort_unstable_by_key(|(id, _)| id.0);
        let span = all.last().map_or(0, |(id, _)| id.0 as usize + 1);
        let positions = if span <= all.len() * DENSE_SPREAD + DENSE_FLOOR {
            let mut at = vec![ABSENT; span];
            for (i, (id, _)) in all.iter().enumerate() {
                at[id.0 as usize] = i as u32;
            }
            Positions::Dense(at)
        } else if all.len() <= FEW {
            Positions::Few(all.iter().map(|(id, _)| *id).collect())
        } else {
            let at = all.iter().enumerate();
            Positions::Sparse(at.map(|(i, (id, _))| (*id, i as u32)).collect())
        };
        Links { positions, all }
    }

    fn position(&self, id: LinkId) -> Option<usize> {
        let at = match &self.positions {
            Positions::Dense(at) => at.get(id.0 as usize).copied().filter(|&i| i != ABSENT),
            Positions::Few(ids) => return ids.iter().position(|&i| i == id),
            Positions::Sparse(at) => at.get(&id).copied(),
        };
        at.map(|i| i as usize)
    }

    pub(super) fn get(&self, id: &LinkId) -> Option<&LinkLoad> {
        self.position(*id).map(|i| &self.all[i].1)
    }

    pub(super) fn get_mut(&mut self, id: &LinkId) -> Option<&mut LinkLoad> {
        self.position(*id).map(|i| &mut self.all[i].1)
    }

    pub(super) fn contains_key(&self, id: &LinkId) -> bool {
        self.position(*id).is_some()
    }

    pub(super) fn len(&self) -> usize {
        self.all.len()
    }

    /// The ids, in order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &LinkId> {
        self.all.iter().map(|(id, _)| id)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut LinkLoad> {
        self.all.iter_mut().map(|(_, l)| l)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&LinkId, &mut LinkLoad)> {
        self.all.iter_mut().map(|(id, l)| (&*id, l))
    }

    /// The links at positions `range` in id order.
    pub(super) fn range_mut(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (&LinkId, &mut LinkLoad)> {
        self.all[range].iter_mut().map(|(id, l)| (&*id, l))
    }
}

impl<'a> IntoIterator for &'a Links {
    type Item = (&'a LinkId, &'a LinkLoad);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (LinkId, LinkLoad)>,
        fn(&'a (LinkId, LinkLoad)) -> (&'a LinkId, &'a LinkLoad),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.all.iter().map(|(id, l)| (id, l))
    }
}

impl std::ops::Index<&LinkId> for Links {
    type Output = LinkLoad;

    fn index(&self, id: &LinkId) -> &LinkLoad {
        self.get(id).expect("a link of the table")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(ids: &[u32]) -> Links {
        Links::new(ids.iter().map(|&i| {
            (
                LinkId(i),
                LinkLoad::new(i as f64, 4, crate::slot::Slot(0), true),
            )
        }))
    }

    #[test]
    fn links_are_found_by_id_in_dense_and_sparse_tables() {
        let many: Vec<u32> = (0..=FEW as u32).map(|i| 1000 * i + 7).collect();
        for ids in [&[3, 0, 7, 5][..], &[4_000_000_000, 12, 900_000], &many] {
            let t = links(ids);
            for &i in ids {
                assert_eq!(t.get(&LinkId(i)).map(|l| l.capacity), Some(i as f64));
            }
            for absent in [1, 6, 8, 13, 1008, 4_000_000_001, u32::MAX] {
                assert!(!t.contains_key(&LinkId(absent)), "{absent} of {ids:?}");
            }
            let mut sorted = ids.to_vec();
            sorted.sort();
            assert_eq!(t.keys().map(|l| l.0).collect::<Vec<_>>(), sorted);
            assert_eq!(t.len(), ids.len());
        }
        assert!(matches!(
            links(&[3, 0, 7, 5]).positions,
            Positions::Dense(_)
        ));
        assert!(matches!(
            links(&[4_000_000_000, 12]).positions,
            Positions::Few(_)
        ));
        assert!(matches!(links(&many).positions, Positions::Sparse(_)));
    }

    #[test]
    fn an_id_given_twice_keeps_the_last() {
        let l = |c| LinkLoad::new(c, 4, crate::slot::Slot(0), true);
        let t = Links::new([(LinkId(2), l(1.0)), (LinkId(2), l(2.0))]);
        assert_eq!((t.len(), t[&LinkId(2)].capacity), (1, 2.0));
    }
}
