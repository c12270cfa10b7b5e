//! The local flow groups, in id order, found by id through a hash of positions: a slot looks
//! each group up twice (its split basis, its update) and walks them all in order (the policy
//! is asked in id order); a search tree made each lookup a dozen text compares. The order and
//! the positions are rebuilt only when a group came or went.

use mlcc_core::{FlowId, hash};

use super::flow_state::FlowState;

#[derive(Default)]
pub(super) struct Flows {
    /// In id order, except for groups added since the last [`Self::end`], at the back.
    states: Vec<FlowState>,
    /// Each group's position in `states`.
    at: hash::Map<FlowId, usize>,
    /// Per position, whether the current observation touched the group.
    touched: Vec<bool>,
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

    /// `id`'s group, touched: kept at the observation's end.
    pub fn touch(&mut self, id: &FlowId) -> Option<&mut FlowState> {
        let &i = self.at.get(id)?;
        self.touched[i] = true;
        Some(&mut self.states[i])
    }

    /// Adds a group, touched. One already there under its id is replaced.
    pub fn insert(&mut self, f: FlowState) {
        if let Some(&i) = self.at.get(&f.id) {
            self.touched[i] = true;
            self.states[i] = f;
            return;
        }
        self.at.insert(f.id.clone(), self.states.len());
        self.states.push(f);
        self.touched.push(true);
        self.added = true;
    }

    /// Starts an observation: groups it does not touch are dropped at its end.
    pub fn begin(&mut self) {
        self.touched.iter_mut().for_each(|t| *t = false);
    }

    /// Ends an observation: hands each group it did not touch to `gone`, in id order, and
    /// restores the order if groups came.
    pub fn end(&mut self, mut gone: impl FnMut(FlowState)) {
        let before = self.states.len();
        if self.touched.iter().any(|t| !t) {
            let states = std::mem::take(&mut self.states);
            for (f, touched) in states.into_iter().zip(&self.touched) {
                if *touched {
                    self.states.push(f);
                } else {
                    gone(f);
                }
            }
        }
        if std::mem::take(&mut self.added) {
            self.states.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        } else if self.states.len() == before {
            return;
        }
        self.touched = vec![true; self.states.len()];
        self.at = hash::map_with_capacity(self.states.len());
        for (i, f) in self.states.iter().enumerate() {
            self.at.insert(f.id.clone(), i);
        }
    }

    /// Every group, leaving none (a new topology re-routes them all).
    pub fn take_all(&mut self) -> Vec<FlowState> {
        self.at.clear();
        self.touched.clear();
        self.added = false;
        std::mem::take(&mut self.states)
    }

    /// In id order once the observation has ended.
    pub fn iter(&self) -> std::slice::Iter<'_, FlowState> {
        self.states.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, FlowState> {
        self.states.iter_mut()
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
