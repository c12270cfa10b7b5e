//! `mlcc`: the system itself — mlcc-harness's [`ControlPlane`] (core's per-host policy on every host,
//! the very code mlccd runs, and one load table per link owner) on the simulator's physics.
//!
//! The simulator differs from mlccd only in where observations come from: bytes sent, the
//! application's backlog and last slot's delivery from the physics instead of sockets and
//! progress files, feedback from the tables in this process instead of switch sessions, and
//! peers' progress from the previous slot's exchange (one slot stale, as the daemon sees it).

use std::collections::HashMap;

use mlcc_core::Slot;
use mlcc_core::flow::FlowRole;
use mlcc_core::host::{Enforce, PolicyConfig};
use mlcc_core::topology::{LinkId, Topology};
use mlcc_harness::control_plane::{Active, ControlPlane, Order, Recorded, Training};

pub use mlcc_harness::control_plane::Visibility;

use super::{Context, Policy, View};
use crate::physics;
use crate::state::Phase;

pub struct Mlcc {
    cluster: ControlPlane,
    /// Per reply flow of a PS that replies only to a whole aggregate: the iteration its
    /// replies are in and the slot they began, which its progress file gives as the
    /// iteration's start (the testbed's trainer calls `iteration_begin` when the aggregate is
    /// whole, not when the pushes began).
    replies_began: HashMap<(u32, u32), (u32, u64)>,
    /// This slot's orders, in the order of the active flows.
    orders: Vec<Order>,
}

/// The rate a flow sends at under `e`: its paced rate, or, released to kernel TCP (unpaced),
/// its path's bottleneck, sharing the rest with whoever else offers.
pub fn offered_rate(e: Enforce, topo: &Topology, path: &[LinkId]) -> f64 {
    match e {
        Enforce::Pace(r) if r.is_finite() => r.max(0.0),
        Enforce::Pace(_) => 0.0,
        Enforce::Release => topo.bottleneck(path).0,
    }
}

impl Mlcc {
    pub fn new(c: &Context<'_>, cfg: PolicyConfig, visibility: Visibility) -> Self {
        let cfg = PolicyConfig {
            slots: c.slots,
            ..cfg
        };
        let cluster = ControlPlane::new(c.topo, cfg, visibility);
        Mlcc {
            cluster: if c.switch_tables {
                cluster
            } else {
                cluster.without_switch_tables(c.topo)
            },
            replies_began: HashMap::new(),
            orders: Vec::new(),
        }
    }

    /// Records every host's policy step from now on.
    pub fn record(&mut self) {
        self.cluster.record();
    }

    pub fn recorded(&self) -> &[Recorded] {
        self.cluster.recorded()
    }

    /// What active flow `i`'s host observes of it this slot, before the network's answers.
    fn observe(&mut self, view: &View<'_>, i: usize) -> Active {
        let r = view.active[i];
        let j = view.job(r);
        let f = view.flow(r);
        let mut since = match j.phase {
            Phase::Comm { since } => since,
            _ => view.slot,
        };
        let held = physics::held(j, f);
        // A PS that replies only to a whole aggregate (the testbed's trainer) begins its
        // replies' iteration only then, so until then mlccd sees the reply flow done with its
        // last iteration, on standby; and it reads that moment as the iteration's start (what
        // its rank's first-come-first-served part orders by), on standby too.
        let replies = f.role == FlowRole::Bcast && j.whole_aggregate();
        let waiting = replies && f.sent <= 0.0 && held <= 0.0;
        let (iteration, sent) = if waiting {
            (j.iteration.saturating_sub(1), f.bytes)
        } else {
            (j.iteration, f.sent)
        };
        if replies {
            let key = (r.job, r.flow);
            let known = self.replies_began.get(&key).map(|&(it, _)| it);
            if !waiting && known != Some(j.iteration) {
                // Replies whose aggregate became whole during the last slot began in it.
                let began = view.slot.saturating_sub(u64::from(f.last_data_late));
                self.replies_began.insert(key, (j.iteration, began));
            }
            if let Some(&(it, began)) = self.replies_began.get(&key)
                && it == iteration
            {
                since = began;
            }
        }
        Training {
            id: &f.id,
            job: &j.name,
            role: f.role,
            src: f.src,
            dst: f.dst,
            path: &f.path,
            iteration,
            iterations: j.spec.iterations,
            comm_since: since,
            model_bytes: j.spec.model_bytes() as f64,
            bytes: f.bytes,
            sent,
            slack: f.slack,
            held,
            last_achieved: f.last_achieved,
            upstream: f.upstream.iter().map(|&u| j.flows[u].id.clone()).collect(),
        }
        .active()
    }
}

impl Policy for Mlcc {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        let actives = (0..view.active.len())
            .map(|i| self.observe(view, i))
            .collect();
        self.orders = self.cluster.step(Slot(view.slot), actives);
        for (i, o) in self.orders.iter().enumerate() {
            out[i] = offered_rate(o.enforce, view.topo, &view.flow(view.active[i]).path);
        }
    }

    fn fill(&self, out: &mut [Option<u8>]) {
        for (o, f) in self.orders.iter().zip(out) {
            *f = o.fill;
        }
    }

    fn paced_by_linux(&self) -> bool {
        true
    }

    fn wants_idle_slot(&self) -> bool {
        self.cluster.has_plans()
    }

    fn decision_latencies_us(&self) -> &[f32] {
        self.cluster.latencies_us()
    }
}
