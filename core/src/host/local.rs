//! The local flows of one step as the rules read them: each observation once (the first of an
//! id wins, as in the planner), with the bytes it has left resolved.

use super::config::PolicyConfig;
use super::obs::FlowObs;
use crate::flow::FlowId;
use crate::hash::{self, Set};

/// One local flow in this step.
#[derive(Clone, Copy, Debug)]
pub(super) struct Local<'a> {
    pub obs: &'a FlowObs,
    /// G: bytes left in its iteration ([`PolicyConfig::remaining_of`]).
    pub remaining: f64,
}

impl Local<'_> {
    /// Whether its sockets hold all it has left in its iteration (no backlog count: assume so).
    pub fn holds_all(&self) -> bool {
        self.obs.app_backlog.unwrap_or(self.remaining) + 0.5 >= self.remaining
    }
}

/// The distinct flows of `flows`, in order, and their ids.
pub(super) fn distinct<'a>(
    cfg: &PolicyConfig,
    flows: &'a [FlowObs],
) -> (Vec<Local<'a>>, Set<&'a FlowId>) {
    let mut seen = hash::set_with_capacity(flows.len());
    let local = flows
        .iter()
        .filter(|f| seen.insert(&f.id))
        .map(|obs| Local {
            obs,
            remaining: cfg.remaining_of(obs),
        })
        .collect();
    (local, seen)
}
