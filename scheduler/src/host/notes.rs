//! Why each process's connections group as they do (or why a flow has no path), for
//! operators. It changes rarely — a process starts, connects, exits, a connection is not
//! resolved yet — and each change is logged, so an operator sees why a flow is missing or has a
//! connection less. Kept from one observation to the next and looked up by pid, so that an
//! unchanged note costs a lookup rather than a key formatted and stored per process per slot.

use mlcc_core::job::Role;

use super::accounts::Note;
use super::kept::Kept;
use crate::progress::ProgressHeader;

#[derive(Default)]
pub(super) struct Notes {
    /// Per process id: whose it is, and its note.
    processes: Kept<u32, ProcessNote>,
    /// Per flow id with no path: why.
    flows: Kept<String, Note>,
}

struct ProcessNote {
    job: String,
    role: Role,
    rank: u32,
    note: Note,
}

impl ProcessNote {
    fn is_of(&self, h: &ProgressHeader) -> bool {
        (self.role, self.rank, self.job.as_str()) == (h.role, h.rank, h.job_id.as_str())
    }
}

/// A process as its notes name it: `job.Role.rank.pid`.
struct Who<'a>(&'a str, Role, u32, u32);

impl std::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:?}.{}.{}", self.0, self.1, self.2, self.3)
    }
}

impl Notes {
    /// Starts an observation: notes not set again before [`Self::end`] are dropped then.
    pub fn begin(&mut self) {
        self.processes.begin();
        self.flows.begin();
    }

    /// The note of `h`'s process this observation; logged when it is new or differs from the
    /// last (a pid now another job's is new).
    pub fn process(&mut self, h: &ProgressHeader, note: Note) {
        let who = Who(&h.job_id, h.role, h.rank, h.pid);
        match self.processes.get_mut(&h.pid) {
            Some(p) if p.is_of(h) && p.note == note => {}
            Some(p) if p.is_of(h) => {
                tracing::info!(target: "mlcc_groups", "{who}: {note}");
                p.note = note;
            }
            _ => {
                tracing::info!(target: "mlcc_groups", "{who}: {note}");
                let p = ProcessNote {
                    job: h.job_id.clone(),
                    role: h.role,
                    rank: h.rank,
                    note,
                };
                self.processes.insert(h.pid, p);
            }
        }
    }

    /// Why flow `id` has no path this observation; logged when it is new or changed.
    pub fn flow(&mut self, id: &str, note: Note) {
        if self.flows.get_mut(id).is_some_and(|old| *old == note) {
            return;
        }
        let note = self.flows.insert(id.to_string(), note);
        tracing::info!(target: "mlcc_groups", "{id}: {note}");
    }

    /// Ends an observation: who was not noted in it is no longer observed.
    pub fn end(&mut self) {
        self.processes.end(|&pid, p| {
            let who = Who(&p.job, p.role, p.rank, pid);
            tracing::info!(target: "mlcc_groups", "{who}: no longer observed");
        });
        self.flows.end(|id, _| {
            tracing::info!(target: "mlcc_groups", "{id}: no longer observed");
        });
    }

    /// Every note, by who it is for, in order.
    pub fn all(&self) -> Vec<(String, &Note)> {
        let processes = self.processes.iter().map(|(&pid, p)| {
            let who = Who(&p.job, p.role, p.rank, pid);
            (who.to_string(), &p.note)
        });
        let flows = self.flows.iter().map(|(id, note)| (id.clone(), note));
        let mut all: Vec<_> = processes.chain(flows).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(job: &str, pid: u32) -> ProgressHeader {
        ProgressHeader {
            job_id: job.into(),
            arch: None,
            role: Role::Worker,
            rank: 0,
            world_size: 2,
            model_bytes: 0,
            pid,
            start_time_ns: 0,
            cc_name: String::new(),
            total_iterations: 0,
        }
    }

    fn text(t: &str) -> Note {
        Note::Text(t.into())
    }

    fn all(n: &Notes) -> Vec<(String, String)> {
        n.all()
            .into_iter()
            .map(|(w, note)| (w, note.to_string()))
            .collect()
    }

    #[test]
    fn a_note_lasts_while_it_is_set_and_goes_when_it_is_not() {
        let mut n = Notes::default();
        n.begin();
        n.process(&header("a", 1), text("x"));
        n.flow("a/h0>h1/ring", text("no path"));
        n.end();
        assert_eq!(all(&n).len(), 2);
        n.begin();
        n.process(&header("a", 1), text("z"));
        n.end();
        assert_eq!(all(&n), [("a.Worker.0.1".to_string(), "z".to_string())]);
    }

    #[test]
    fn a_pid_taken_by_another_job_is_that_job_s() {
        let mut n = Notes::default();
        n.begin();
        n.process(&header("a", 1), text("x"));
        n.end();
        n.begin();
        n.process(&header("b", 1), text("x"));
        n.end();
        assert_eq!(all(&n), [("b.Worker.0.1".to_string(), "x".to_string())]);
    }
}
