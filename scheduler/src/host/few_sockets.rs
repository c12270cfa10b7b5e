//! [`FewSockets`]: a map from a flow's own sockets to what it remembers of each. A flow group
//! has a handful of sockets (one to a few dozen); a vector searched in order costs less than a
//! hash table per remembered counter, and a busy host updates several per flow every slot.

use crate::datapath::SocketKey;

#[derive(Clone, Debug)]
pub(super) struct FewSockets<V>(Vec<(SocketKey, V)>);

impl<V> Default for FewSockets<V> {
    fn default() -> Self {
        FewSockets(Vec::new())
    }
}

impl<V> FewSockets<V> {
    fn position(&self, k: &SocketKey) -> Option<usize> {
        self.0.iter().position(|(key, _)| key == k)
    }

    pub fn get(&self, k: &SocketKey) -> Option<&V> {
        self.position(k).map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, k: &SocketKey) -> Option<&mut V> {
        self.position(k).map(|i| &mut self.0[i].1)
    }

    /// Sets `k`'s value; returns the one it replaces.
    pub fn insert(&mut self, k: SocketKey, v: V) -> Option<V> {
        match self.position(&k) {
            Some(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            None => {
                self.0.push((k, v));
                None
            }
        }
    }

    /// Sets `k`'s value unless it has one.
    pub fn or_insert(&mut self, k: SocketKey, v: V) {
        if self.position(&k).is_none() {
            self.0.push((k, v));
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&SocketKey, &V) -> bool) {
        self.0.retain(|(k, v)| keep(k, v));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&SocketKey, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

/// Later values of a key replace earlier ones, as a map's would.
impl<V> FromIterator<(SocketKey, V)> for FewSockets<V> {
    fn from_iter<I: IntoIterator<Item = (SocketKey, V)>>(it: I) -> Self {
        let mut m = FewSockets::default();
        for (k, v) in it {
            m.insert(k, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> SocketKey {
        SocketKey::new(
            1,
            "10.0.0.1:40000".parse().unwrap(),
            format!("10.0.0.2:{port}").parse().unwrap(),
        )
    }

    #[test]
    fn behaves_as_a_map() {
        let mut m: FewSockets<u64> = [(key(1), 1), (key(2), 2), (key(1), 3)]
            .into_iter()
            .collect();
        assert_eq!(m.get(&key(1)), Some(&3));
        assert_eq!(m.iter().count(), 2);
        m.or_insert(key(2), 9);
        m.or_insert(key(3), 4);
        assert_eq!((m.get(&key(2)), m.get(&key(3))), (Some(&2), Some(&4)));
        assert_eq!(m.insert(key(3), 5), Some(4));
        *m.get_mut(&key(3)).unwrap() += 1;
        assert_eq!(m.get(&key(3)), Some(&6));
        m.retain(|k, _| *k != key(1));
        assert_eq!(m.get(&key(1)), None);
        assert_eq!(m.iter().count(), 2);
    }
}
