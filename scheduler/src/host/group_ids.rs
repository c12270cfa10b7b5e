//! The ids of each process's flow groups, kept from one observation to the next: an id is a
//! formatted, hashed string, and building every group's again each slot was a sixth of a busy
//! host's observation.

use std::collections::hash_map::Entry;

use mlcc_core::FlowId;
use mlcc_core::flow::FlowParts;
use mlcc_core::hash;
use mlcc_core::topology::NodeId;

#[derive(Default)]
pub(super) struct GroupIds {
    /// Per process id and remote host: the group's id, and the observation that last asked.
    by_process: hash::Map<(u32, NodeId), (FlowId, u64)>,
    round: u64,
}

impl GroupIds {
    /// Starts an observation: ids not asked for again before [`Self::end`] are dropped then.
    pub fn begin(&mut self) {
        self.round += 1;
    }

    /// The id of the group `parts` names, sent by process `pid` to host `remote`.
    pub fn of(&mut self, pid: u32, remote: NodeId, parts: FlowParts<'_>) -> FlowId {
        let round = self.round;
        let new = || {
            let FlowParts {
                job,
                src,
                dst,
                role,
            } = parts;
            FlowId::for_group(job, src, dst, role)
        };
        match self.by_process.entry((pid, remote)) {
            // The pid may be another job's now, or the host renamed: the id must say so.
            Entry::Occupied(mut e) if parts.name(e.get().0.as_str()) => {
                e.get_mut().1 = round;
                e.get().0.clone()
            }
            Entry::Occupied(mut e) => {
                let id = new();
                *e.get_mut() = (id.clone(), round);
                id
            }
            Entry::Vacant(e) => e.insert((new(), round)).0.clone(),
        }
    }

    /// Ends an observation: the ids of processes and groups gone are forgotten.
    pub fn end(&mut self) {
        let round = self.round;
        self.by_process.retain(|_, (_, seen)| *seen == round);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlcc_core::flow::FlowRole;

    fn parts<'a>(job: &'a str, dst: &'a str) -> FlowParts<'a> {
        FlowParts {
            job,
            src: "h0",
            dst,
            role: FlowRole::Ring,
        }
    }

    #[test]
    fn an_id_is_kept_while_asked_for_and_follows_what_it_names() {
        let mut ids = GroupIds::default();
        ids.begin();
        let a = ids.of(7, NodeId(1), parts("j", "h1"));
        ids.end();
        ids.begin();
        let again = ids.of(7, NodeId(1), parts("j", "h1"));
        assert!(
            std::ptr::eq(a.as_str(), again.as_str()),
            "kept, not rebuilt"
        );
        // The pid reused by another job.
        let other = ids.of(7, NodeId(1), parts("k", "h1"));
        assert_eq!(other.as_str(), "k/h0>h1/ring");
        ids.end();
        ids.begin();
        ids.end();
        assert!(ids.by_process.is_empty());
    }
}
