//! The ids of each process's flow groups, kept from one observation to the next: an id is a
//! formatted, hashed string, and building every group's again each slot was a sixth of a busy
//! host's observation.

use mlcc_core::FlowId;
use mlcc_core::flow::FlowParts;
use mlcc_core::topology::NodeId;

use super::kept::Kept;

/// Per process id and remote host: the group's id.
#[derive(Default)]
pub(super) struct GroupIds(Kept<(u32, NodeId), FlowId>);

impl GroupIds {
    /// Starts an observation: ids not asked for again before [`Self::end`] are dropped then.
    pub fn begin(&mut self) {
        self.0.begin();
    }

    /// The id of the group `parts` names, sent by process `pid` to host `remote`.
    pub fn of(&mut self, pid: u32, remote: NodeId, parts: FlowParts<'_>) -> FlowId {
        // The pid may be another job's now, or the host renamed: the id must say so.
        if let Some(id) = self
            .0
            .get_mut(&(pid, remote))
            .filter(|id| parts.name(id.as_str()))
        {
            return id.clone();
        }
        let FlowParts {
            job,
            src,
            dst,
            role,
        } = parts;
        let id = FlowId::for_group(job, src, dst, role);
        self.0.insert((pid, remote), id).clone()
    }

    /// Ends an observation: the ids of processes and groups gone are forgotten.
    pub fn end(&mut self) {
        self.0.end(|_, _| {});
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
        assert_eq!(ids.0.len(), 0);
    }
}
