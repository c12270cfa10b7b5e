//! `sincronia`: Sincronia (Agarwal et al., SIGCOMM'18) as a fluid. Each job's current iteration
//! is one coflow; Sincronia orders coflows with BSSI (Bottleneck-Select-Scale-Iterate) and the
//! network serves them in that order, work-conserving. BSSI, as the paper gives it: find the
//! most loaded port b over the coflows not yet ordered; of the coflows on b, the one with the
//! largest load on b per unit of weight goes last; scale the others' weights down by what it
//! costs on b; repeat. The paper's ports are the hosts' links into one big switch; here every
//! link of the fabric is a port (a core link can be the bottleneck too). All weights start at
//! 1 (Sincronia's unweighted case: average coflow completion time). Recomputed every slot from
//! the bytes each coflow has left, as Sincronia re-orders at arrivals and departures; strict
//! priority in that order, max-min within a coflow. The order is what Sincronia decides; its
//! priority queues and end-host pacing are approximated by strict, exact, instant priority.

use super::fair::Fair;
use super::{Policy, View};
use crate::model::job_runs;

#[derive(Default)]
pub struct Sincronia {
    fair: Fair,
    residual: Vec<f64>,
    out: Vec<f64>,
    /// Per coflow (job run of `active`): its load on every link.
    load: Vec<Vec<f64>>,
    runs: Vec<std::ops::Range<usize>>,
    weight: Vec<f64>,
    /// Coflow indices, first served first.
    order: Vec<usize>,
}

impl Sincronia {
    /// BSSI over `self.load` (coflows × links): fills `self.order`, first served first.
    fn order(&mut self) {
        let n = self.load.len();
        let links = self.load.first().map_or(0, Vec::len);
        self.weight.clear();
        self.weight.resize(n, 1.0);
        let mut left: Vec<usize> = (0..n).collect();
        let mut last_first = Vec::with_capacity(n);
        while !left.is_empty() {
            // The bottleneck: the link with the most bytes of the coflows still unordered.
            let b = (0..links)
                .map(|l| (l, left.iter().map(|&c| self.load[c][l]).sum::<f64>()))
                .max_by(|x, y| x.1.total_cmp(&y.1).then(y.0.cmp(&x.0)))
                .map(|(l, _)| l);
            // Of its coflows, the one with the largest load per weight goes last (Smith's rule
            // backwards); ties: the later job last. Without any load left, keep job order.
            let pick = b
                .filter(|&b| left.iter().any(|&c| self.load[c][b] > 0.0))
                .map(|b| {
                    let (pos, _) = left
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| self.load[**c][b] > 0.0)
                        .max_by(|&(_, &x), &(_, &y)| {
                            let rx = self.load[x][b] / self.weight[x].max(f64::MIN_POSITIVE);
                            let ry = self.load[y][b] / self.weight[y].max(f64::MIN_POSITIVE);
                            rx.total_cmp(&ry).then(x.cmp(&y))
                        })
                        .expect("some coflow has load on b");
                    (pos, b)
                });
            let Some((pos, b)) = pick else {
                // Nothing left on any link: the rest in job order.
                last_first.extend(left.iter().rev());
                break;
            };
            let c = left.swap_remove(pos);
            let (wc, pc) = (self.weight[c], self.load[c][b]);
            for &o in &left {
                self.weight[o] -= wc * self.load[o][b] / pc;
            }
            last_first.push(c);
            // Keep `left` in job order, as the tie-breaks assume.
            left.sort_unstable();
        }
        self.order.clear();
        self.order.extend(last_first.into_iter().rev());
    }
}

impl Policy for Sincronia {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        let nlinks = view.topo.links().len();
        self.runs.clear();
        self.runs.extend(job_runs(view.active));
        self.load.resize_with(self.runs.len(), Vec::new);
        self.load.truncate(self.runs.len());
        for (load, run) in self.load.iter_mut().zip(&self.runs) {
            load.clear();
            load.resize(nlinks, 0.0);
            for &r in &view.active[run.clone()] {
                let f = view.flow(r);
                for l in &f.path {
                    load[l.index()] += f.remaining();
                }
            }
        }
        self.order();
        self.residual.clear();
        self.residual
            .extend(view.topo.links().iter().map(|l| l.capacity.0));
        for &c in &self.order {
            let run = self.runs[c].clone();
            self.out.clear();
            self.out.resize(run.len(), 0.0);
            self.fair.solve_within(
                &view.restricted(run.clone()),
                None,
                &self.residual,
                &mut self.out,
            );
            for (i, &rate) in self.out.iter().enumerate() {
                for l in &view.flow(view.active[run.start + i]).path {
                    let cap = &mut self.residual[l.index()];
                    *cap = (*cap - rate).max(0.0);
                }
            }
            out[run].copy_from_slice(&self.out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(load: Vec<Vec<f64>>) -> Vec<usize> {
        let mut s = Sincronia {
            load,
            ..Default::default()
        };
        s.order();
        s.order.clone()
    }

    #[test]
    fn bssi_puts_the_largest_coflow_on_the_bottleneck_last() {
        // One port: shortest first.
        assert_eq!(
            order(vec![vec![30.0], vec![10.0], vec![20.0]]),
            vec![1, 2, 0]
        );
        // Link 0 is the bottleneck (40 + 15 against 5 + 45): coflow 0, the largest on it, goes
        // last although coflow 2 is larger; then link 1, where coflow 2 outweighs coflow 1.
        assert_eq!(
            order(vec![vec![40.0, 0.0], vec![15.0, 5.0], vec![0.0, 45.0],]),
            vec![1, 2, 0]
        );
        // Nothing left anywhere: job order.
        assert_eq!(order(vec![vec![0.0], vec![0.0]]), vec![0, 1]);
        assert_eq!(order(vec![]), Vec::<usize>::new());
    }

    #[test]
    fn scaling_weights_lets_a_coflow_small_elsewhere_go_first() {
        // Port 0 (20 against 6): A and B tie at 10 and B, the later, goes last; A's weight
        // scales to 0, and port 0, still the bottleneck, now holds only A: A before B, and C,
        // alone on port 1 once A and B are ordered, first.
        assert_eq!(
            order(vec![vec![10.0, 1.0], vec![10.0, 0.0], vec![0.0, 5.0]]),
            vec![2, 0, 1]
        );
    }
}
