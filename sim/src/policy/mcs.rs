//! `mcs`: multi-stage coflow scheduling with start-after dependencies (Tian et al., INFOCOM'18,
//! "Scheduling coflows of multi-stage jobs to minimize the total weighted job completion
//! time"), as the paper used it as a baseline.
//!
//! - A job is a chain of coflows. PS: all aggregation flows, then all broadcast flows (a
//!   broadcast starts after the aggregation coflow completes). Ring all-reduce of N workers:
//!   2(N−1) steps, step s being every worker's s-th chunk (M/N) to its successor; a step
//!   starts after the previous step has fully arrived.
//! - Centralized, the fabric as one big switch: only host uplink (ingress port) and downlink
//!   (egress port) capacities exist for it; the routing inside the fabric is ignored.
//! - Order: jobs by Smith's rule on the remaining bottleneck — smallest (sum over remaining
//!   stages of the stage's most loaded port time) first; equal weights (the paper's jobs have
//!   none). This is the ordering step of the paper's heuristic; their LP-based ordering
//!   reduces to it for chains with unit weights up to the approximation they prove.
//! - Rates: in that order, each job's current coflow gets MADD rates (Varys): every flow at
//!   remaining/Γ, Γ the coflow's bottleneck time on the residual ports, so all its flows finish
//!   together; then leftover port capacity is handed out greedily in the same order
//!   (work conservation).

use mlcc_core::flow::FlowRole;
use mlcc_core::job::Arch;

use super::{Context, Policy, View};
use crate::state::BYTE_EPSILON;

pub struct Mcs {
    up: Vec<f64>,
    down: Vec<f64>,
    res_up: Vec<f64>,
    res_down: Vec<f64>,
}

struct JobPlan {
    job: u32,
    score: f64,
    /// (active index, bytes left in the current stage)
    flows: Vec<(usize, f64)>,
}

impl Mcs {
    pub fn new(c: &Context<'_>) -> Self {
        let n = c.topo.nodes().len();
        let mut up = vec![0.0; n];
        let mut down = vec![0.0; n];
        for h in c.topo.hosts() {
            up[h.index()] = c
                .topo
                .out_links(h)
                .iter()
                .map(|&l| c.topo.link(l).capacity.0)
                .sum();
            down[h.index()] = c
                .topo
                .in_links(h)
                .iter()
                .map(|&l| c.topo.link(l).capacity.0)
                .sum();
        }
        Mcs {
            res_up: up.clone(),
            res_down: down.clone(),
            up,
            down,
        }
    }

    /// Seconds the most loaded port needs for `(src, dst, bytes)` transfers on full ports.
    fn bottleneck(&self, transfers: impl Iterator<Item = (usize, usize, f64)>) -> f64 {
        let mut ports: Vec<(usize, bool, f64)> = Vec::new();
        for (s, d, b) in transfers {
            for key in [(s, true), (d, false)] {
                match ports.iter_mut().find(|p| (p.0, p.1) == key) {
                    Some(p) => p.2 += b,
                    None => ports.push((key.0, key.1, b)),
                }
            }
        }
        ports
            .iter()
            .map(|&(n, is_up, b)| {
                let c = if is_up { self.up[n] } else { self.down[n] };
                if c > 0.0 { b / c } else { f64::INFINITY }
            })
            .fold(0.0, f64::max)
    }
}

impl Policy for Mcs {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        out.iter_mut().for_each(|r| *r = 0.0);
        let mut plans: Vec<JobPlan> = Vec::new();
        let mut start = 0;
        while start < view.active.len() {
            let ji = view.active[start].job;
            let end = start
                + view.active[start..]
                    .iter()
                    .take_while(|r| r.job == ji)
                    .count();
            let j = &view.jobs[ji as usize];
            let idx = |fi: usize| j.flows[fi].active_idx.map(|i| i as usize);
            let mut flows = Vec::new();
            let score = match j.spec.arch {
                Arch::Ps => {
                    let agg_left = j
                        .flows
                        .iter()
                        .any(|f| f.role == FlowRole::Agg && !f.is_done());
                    let stage = if agg_left {
                        FlowRole::Agg
                    } else {
                        FlowRole::Bcast
                    };
                    for (fi, f) in j.flows.iter().enumerate() {
                        if f.role == stage
                            && let Some(i) = idx(fi)
                        {
                            flows.push((i, f.remaining()));
                        }
                    }
                    let now = self.bottleneck(flows.iter().map(|&(i, b)| {
                        let f = view.flow(view.active[i]);
                        (f.src.index(), f.dst.index(), b)
                    }));
                    let later = if agg_left {
                        self.bottleneck(
                            j.flows
                                .iter()
                                .filter(|f| f.role == FlowRole::Bcast)
                                .map(|f| (f.src.index(), f.dst.index(), f.bytes)),
                        )
                    } else {
                        0.0
                    };
                    now + later
                }
                Arch::Allreduce => {
                    let chunk = j.flows.first().map_or(1.0, |f| f.slack.max(1.0));
                    let steps = j.flows.first().map_or(0.0, |f| (f.bytes / chunk).round());
                    let step = j
                        .flows
                        .iter()
                        .map(|f| ((f.sent + BYTE_EPSILON) / chunk).floor())
                        .fold(f64::INFINITY, f64::min);
                    let step_end = (step + 1.0) * chunk;
                    for (fi, f) in j.flows.iter().enumerate() {
                        if let Some(i) = idx(fi) {
                            let left = (step_end.min(f.bytes) - f.sent).max(0.0);
                            if left > BYTE_EPSILON {
                                flows.push((i, left));
                            }
                        }
                    }
                    let now = self.bottleneck(flows.iter().map(|&(i, b)| {
                        let f = view.flow(view.active[i]);
                        (f.src.index(), f.dst.index(), b)
                    }));
                    let per_step = self.bottleneck(
                        j.flows
                            .iter()
                            .map(|f| (f.src.index(), f.dst.index(), chunk)),
                    );
                    now + (steps - step - 1.0).max(0.0) * per_step
                }
            };
            plans.push(JobPlan {
                job: ji,
                score,
                flows,
            });
            start = end;
        }
        plans.sort_by(|a, b| a.score.total_cmp(&b.score).then(a.job.cmp(&b.job)));

        self.res_up.copy_from_slice(&self.up);
        self.res_down.copy_from_slice(&self.down);
        let tau = view.tau;
        for p in &plans {
            // MADD: Γ = max over ports of stage bytes / residual port capacity.
            let mut ports: Vec<(usize, bool, f64)> = Vec::new();
            for &(i, b) in &p.flows {
                let f = view.flow(view.active[i]);
                for key in [(f.src.index(), true), (f.dst.index(), false)] {
                    match ports.iter_mut().find(|x| (x.0, x.1) == key) {
                        Some(x) => x.2 += b,
                        None => ports.push((key.0, key.1, b)),
                    }
                }
            }
            let gamma = ports
                .iter()
                .map(|&(n, is_up, b)| {
                    let c = if is_up {
                        self.res_up[n]
                    } else {
                        self.res_down[n]
                    };
                    if c > 1e-9 { b / c } else { f64::INFINITY }
                })
                .fold(0.0, f64::max);
            if !gamma.is_finite() {
                continue;
            }
            for &(i, b) in &p.flows {
                let f = view.flow(view.active[i]);
                let r = (b / gamma.max(tau))
                    .min(self.res_up[f.src.index()])
                    .min(self.res_down[f.dst.index()])
                    .max(0.0);
                out[i] = r;
                self.res_up[f.src.index()] -= r;
                self.res_down[f.dst.index()] -= r;
            }
        }
        // Backfill leftover port capacity in the same order.
        for p in &plans {
            for &(i, b) in &p.flows {
                let f = view.flow(view.active[i]);
                let extra = (b / tau - out[i])
                    .min(self.res_up[f.src.index()])
                    .min(self.res_down[f.dst.index()])
                    .max(0.0);
                out[i] += extra;
                self.res_up[f.src.index()] -= extra;
                self.res_down[f.dst.index()] -= extra;
            }
        }
    }
}
