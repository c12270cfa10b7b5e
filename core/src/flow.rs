//! Flow identity and precedence (docs/design.md §5, §6).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest flow id accepted anywhere (docs/design.md §10).
pub const MAX_ID_BYTES: usize = 128;

/// A flow group's id: one job's traffic from one host to another in one role, e.g.
/// `"job7/h1>h2/agg"`. Cheap to clone, hash and compare, because load tables and planners key
/// maps by it: the text is shared, its hash is computed once, when the id is made, and clones of
/// one id compare equal without reading the text. Ids order as their texts do.
#[derive(Clone)]
pub struct FlowId {
    text: Arc<str>,
    hash: u64,
}

impl PartialEq for FlowId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.text, &other.text) || (self.hash == other.hash && self.text == other.text)
    }
}

impl Eq for FlowId {}

impl Ord for FlowId {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.text, &other.text) {
            return Ordering::Equal;
        }
        self.text.cmp(&other.text)
    }
}

impl PartialOrd for FlowId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for FlowId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Why a string cannot be a flow id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("empty id")]
    Empty,
    #[error("id of {0} bytes exceeds the {MAX_ID_BYTES}-byte limit")]
    TooLong(usize),
    #[error("id contains a control character")]
    Control,
}

impl FlowId {
    /// Validates and wraps an id received from outside.
    pub fn new(s: &str) -> Result<Self, IdError> {
        validate_id(s)?;
        Ok(FlowId::from_text(Arc::from(s)))
    }

    fn from_text(text: Arc<str>) -> Self {
        let hash = crate::hash::of_str(&text);
        FlowId { text, hash }
    }

    /// The canonical id of a job's flow group from `src` to `dst` in `role`.
    pub fn for_group(job: &str, src: &str, dst: &str, role: FlowRole) -> Self {
        FlowId::from_text(Arc::from(format!("{job}/{src}>{dst}/{}", role.as_str())))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The job, hosts and role of a canonical group id ([`Self::for_group`]); `None` for an id
    /// of another form.
    pub fn parts(&self) -> Option<FlowParts<'_>> {
        FlowParts::parse(&self.text)
    }
}

/// What a canonical flow group id names: `job/src>dst/role`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowParts<'a> {
    pub job: &'a str,
    pub src: &'a str,
    pub dst: &'a str,
    pub role: FlowRole,
}

impl<'a> FlowParts<'a> {
    /// `id` is `job/src>dst/role` of these parts: [`FlowId::for_group`] of them would equal it.
    /// Compared piece by piece, without splitting `id` or building another.
    pub fn name(&self, id: &str) -> bool {
        let rest = id
            .strip_prefix(self.job)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|r| r.strip_prefix(self.src))
            .and_then(|r| r.strip_prefix('>'))
            .and_then(|r| r.strip_prefix(self.dst))
            .and_then(|r| r.strip_prefix('/'));
        rest == Some(self.role.as_str())
    }

    /// Splits `job/src>dst/role`; `None` for any other form.
    pub fn parse(id: &'a str) -> Option<Self> {
        let mut it = id.split('/');
        let job = it.next()?;
        let (src, dst) = it.next()?.split_once('>')?;
        let role = FlowRole::from_name(it.next()?)?;
        it.next().is_none().then_some(FlowParts {
            job,
            src,
            dst,
            role,
        })
    }
}

/// Shared validation of ids that arrive from the network or from files.
pub fn validate_id(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong(s.len()));
    }
    if s.chars().any(char::is_control) {
        return Err(IdError::Control);
    }
    Ok(())
}

impl fmt::Debug for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.text)
    }
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for FlowId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for FlowId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FlowId::new(&s).map_err(serde::de::Error::custom)
    }
}

/// What a flow carries, which decides its dependency rule in Alg. 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowRole {
    /// PS: worker → parameter server (gradient push).
    Agg,
    /// PS: parameter server → worker (parameter pull / broadcast).
    Bcast,
    /// Ring all-reduce: worker → next worker.
    Ring,
}

impl FlowRole {
    pub const ALL: [FlowRole; 3] = [FlowRole::Agg, FlowRole::Bcast, FlowRole::Ring];

    pub fn as_str(self) -> &'static str {
        match self {
            FlowRole::Agg => "agg",
            FlowRole::Bcast => "bcast",
            FlowRole::Ring => "ring",
        }
    }

    /// The role named `s` ([`Self::as_str`]).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The first component of a precedence key: lower claims bandwidth first. What it measures
/// (an iteration's start slot, a job's bytes, ...) is the cluster's rank rule
/// (`host::RankRule`); tables and switches only compare it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Rank(pub u64);

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The order in which flows claim bandwidth in `precedence` feedback mode: lower rank first,
/// flow id as the tie-break, so every scheduler and switch sorts flows identically.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PrecedenceKey {
    pub rank: Rank,
    pub flow: FlowId,
}

impl PrecedenceKey {
    pub fn new(rank: Rank, flow: FlowId) -> Self {
        PrecedenceKey { rank, flow }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_made_apart_with_one_text_are_one_id_and_order_by_their_text() {
        use std::collections::BTreeSet;
        use std::hash::BuildHasher;
        let a = FlowId::new("job/h1>h2/agg").unwrap();
        let same = FlowId::for_group("job", "h1", "h2", FlowRole::Agg);
        assert!(!Arc::ptr_eq(&a.text, &same.text));
        assert_eq!(a, same);
        assert_eq!(a.cmp(&same), Ordering::Equal);
        let h = foldhash::fast::FixedState::with_seed(7);
        assert_eq!(h.hash_one(&a), h.hash_one(&same));
        let b = FlowId::new("job/h1>h2/bcast").unwrap();
        assert_ne!(a, b);
        assert_ne!(h.hash_one(&a), h.hash_one(&b));
        // Order is the text's, so every driver sorts precedence ties alike.
        let ids: BTreeSet<FlowId> = ["b", "a/x", "a", "ab"]
            .into_iter()
            .map(|s| FlowId::new(s).unwrap())
            .collect();
        let texts: Vec<&str> = ids.iter().map(FlowId::as_str).collect();
        assert_eq!(texts, ["a", "a/x", "ab", "b"]);
    }

    #[test]
    fn ids_are_validated() {
        assert!(FlowId::new("job/h1>h2/agg").is_ok());
        assert_eq!(FlowId::new(""), Err(IdError::Empty));
        assert_eq!(FlowId::new(&"x".repeat(129)), Err(IdError::TooLong(129)));
        assert_eq!(FlowId::new("a\nb"), Err(IdError::Control));
        assert_eq!(
            FlowId::for_group("j", "h1", "h2", FlowRole::Bcast).as_str(),
            "j/h1>h2/bcast"
        );
    }

    #[test]
    fn group_ids_split_into_their_parts_and_other_forms_do_not() {
        let id = FlowId::for_group("j", "h1", "h2", FlowRole::Ring);
        assert_eq!(
            id.parts(),
            Some(FlowParts {
                job: "j",
                src: "h1",
                dst: "h2",
                role: FlowRole::Ring
            })
        );
        for bad in [
            "j/h1>h2",
            "j/h1h2/ring",
            "j/h1>h2/tcp",
            "j/h1>h2/ring/x",
            "x",
        ] {
            assert_eq!(FlowParts::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn parts_name_exactly_the_id_built_of_them() {
        let p = FlowParts {
            job: "j/x",
            src: "h1",
            dst: "h2",
            role: FlowRole::Agg,
        };
        assert!(p.name(FlowId::for_group("j/x", "h1", "h2", FlowRole::Agg).as_str()));
        for other in [
            FlowId::for_group("j", "h1", "h2", FlowRole::Agg),
            FlowId::for_group("j/x", "h1", "h22", FlowRole::Agg),
            FlowId::for_group("j/x", "h", "h2", FlowRole::Agg),
            FlowId::for_group("j/x", "h1", "h2", FlowRole::Ring),
        ] {
            assert!(!p.name(other.as_str()), "{other}");
        }
        assert!(!p.name("j/x/h1>h2/agg/"));
    }

    #[test]
    fn precedence_sorts_by_rank_then_id() {
        let a = PrecedenceKey::new(Rank(5), FlowId::new("b").unwrap());
        let b = PrecedenceKey::new(Rank(5), FlowId::new("c").unwrap());
        let c = PrecedenceKey::new(Rank(4), FlowId::new("z").unwrap());
        let mut v = vec![a.clone(), b.clone(), c.clone()];
        v.sort();
        assert_eq!(v, vec![c, a, b]);
    }
}
