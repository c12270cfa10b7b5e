//! The local flow groups, in id order, found by id through a hash of positions: a slot looks
//! each group up twice (its split basis, its update) and walks them all in order (the policy
//! is asked in id order); a search tree made each lookup a dozen text compares. The order and
//! the positions are rebuilt only when a group came or went.

use mlcc_core::FlowId;

use super::flow_state::FlowState;
use super::kept::Kept;

#[derive(Default)]
pub(super) struct Flows {
    /// In id order, except for groups added since the last [`Self::end`], at the back.
    states: Vec<FlowState>,
    /// Each group's position in `states`, touched by each observation that sees the group.
    at: Kept<FlowId, usize>,
    /// A group was added since the last [`Self::end`]: the order is to be restored.
    added: bool,
}

impl Flows {
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn get(&self, id: &FlowId) -> Option<&FlowState> {
        self.at.get(id).map(|&i| &self.states[i])
    }

    /// `id`'s group, not touched.
    pub fn get_mut(&mut self, id: &FlowId) -> Option<&mut FlowState> {
        let &i = self.at.get(id)?;
        Some(&mut self.states[i])
    }

    /// `id`'s group, touched: kept at the observation's end.
    pub fn touch(&mut self, id: &FlowId) -> Option<&mut FlowState> {
        let &mut i = self.at.get_mut(id)?;
        Some(&mut self.states[i])
    }

    /// Adds a group, touched. One already there under its id is replaced.
    pub fn insert(&mut self, f: FlowState) {
        if let Some(&mut i) = self.at.get_mut(&f.id) {
            self.states[i] = f;
            return;
        }
        self.at.insert(f.id.clone(), self.states.len());
        self.states.push(f);
        self.added = true;
    }

    /// Starts an observation: groups it does not touch are dropped at its end.
    pub fn begin(&mut self) {
        self.at.begin();
    }

    /// Ends an observation: hands each group it did not touch to `gone`, in id order, and
    /// restores the order and the positions if groups came or went.
    pub fn end(&mut self, mut gone: impl FnMut(FlowState)) {
        // Which positions went; left empty (no allocation) in the usual slot where none did.
        let n = self.states.len();
        let mut dropped: Vec<bool> = Vec::new();
        self.at.end(|_, &i| {
            dropped.resize(n, false);
            dropped[i] = true;
        });
        if dropped.is_empty() && !std::mem::take(&mut self.added) {
            return;
        }
        dropped.resize(n, false);
        // Groups that went were in place, in id order; the ones added this time are touched.
        let states = std::mem::take(&mut self.states);
        for (f, dropped) in states.into_iter().zip(dropped) {
            if dropped {
                gone(f);
            } else {
                self.states.push(f);
            }
        }
        self.states.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        for (i, f) in self.states.iter().enumerate() {
            self.at.insert(f.id.clone(), i);
        }
    }

    /// Every group, leaving none (a new topology re-routes them all).
    pub fn take_all(&mut self) -> Vec<FlowState> {
        self.at = Kept::default();
        self.added = false;
        std::mem::take(&mut self.states)
    }

    /// In id order once the observation has ended.
    pub fn iter(&self) -> std::slice::Iter<'_, FlowState> {
        self.states.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Source;
    use crate::host::flow_state::FlowSpec;
    use mlcc_core::Slot;
    use mlcc_core::flow::FlowRole;
    use mlcc_core::topology::NodeId;

    fn flow_state(id: &str) -> FlowState {
        let spec = FlowSpec {
            job: "j".into(),
            role: FlowRole::Ring,
            dst: NodeId(1),
            source: Source::Progress,
            sockets: Vec::new(),
            conns: 1,
            expected: 0.0,
            expected_from: "",
            sent_share: None,
            iteration: None,
            start: Slot(0),
            slack: 0.0,
            last_iteration_bytes: 0,
            job_bytes: 0,
            job_total_iterations: 0,
        };
        let id = FlowId::new(id).unwrap();
        FlowState::new(id, &spec, "h1".into(), vec![], vec![], vec![], Slot(0))
    }

    fn id(s: &str) -> FlowId {
        FlowId::new(s).unwrap()
    }

    fn ids(f: &Flows) -> Vec<&str> {
        f.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn groups_last_while_touched_and_walk_in_id_order() {
        let mut f = Flows::default();
        f.begin();
        for id in ["j/b", "j/c", "j/a"] {
            f.insert(flow_state(id));
        }
        f.end(|g| panic!("{} is not gone", g.id.as_str()));
        assert_eq!(ids(&f), ["j/a", "j/b", "j/c"]);
        f.begin();
        assert!(f.touch(&id("j/c")).is_some());
        f.insert(flow_state("j/0"));
        assert!(f.touch(&id("j/x")).is_none());
        let mut gone = Vec::new();
        f.end(|g| gone.push(g.id.as_str().to_string()));
        assert_eq!(gone, ["j/a", "j/b"]);
        assert_eq!(ids(&f), ["j/0", "j/c"]);
        // Positions follow the order once rebuilt.
        assert_eq!(f.get(&id("j/c")).unwrap().id.as_str(), "j/c");
        assert_eq!(f.get(&id("j/0")).unwrap().id.as_str(), "j/0");
        assert!(f.get(&id("j/a")).is_none());
        assert_eq!(f.take_all().len(), 2);
        assert_eq!(f.len(), 0);
    }
}
