//! `isolated`: every job has the fabric to itself — the lower bound on JCT for this
//! placement and arrival order. Within a job, flows share max-min; the physics shares links
//! job by job ([`Sharing::PerJob`]).

use super::fair::Fair;
use super::{Policy, View};
use crate::model::Sharing;

#[derive(Default)]
pub struct Isolated {
    fair: Fair,
    out: Vec<f64>,
}

impl Policy for Isolated {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        // One max-min problem per job (`active` is ordered by job).
        let mut start = 0;
        while start < view.active.len() {
            let job = view.active[start].job;
            let end = start
                + view.active[start..]
                    .iter()
                    .take_while(|r| r.job == job)
                    .count();
            let sub = View {
                slot: view.slot,
                tau: view.tau,
                slots: view.slots,
                topo: view.topo,
                jobs: view.jobs,
                active: &view.active[start..end],
                sendable: &view.sendable[start..end],
            };
            self.out.clear();
            self.out.resize(end - start, 0.0);
            self.fair.solve_capped(&sub, None, &mut self.out);
            out[start..end].copy_from_slice(&self.out);
            start = end;
        }
    }

    fn sharing(&self) -> Sharing {
        Sharing::PerJob
    }
}
