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
use crate::state::job_runs;

#[derive(Default)]
pub struct Sincronia {
    fair: Fair,
    residual: Vec<f64>,
    out: Vec<f64>,
    runs: Vec<std::ops::Range<usize>>,
    /// Per coflow (job run of `active`): its load per link it uses, (link index, bytes).
    load: Vec<Vec<(usize, f64)>>,
    /// Per link: the unordered coflows' load on it, and (coflow, its load) for each user.
    total: Vec<f64>,
    users: Vec<Vec<(usize, f64)>>,
    touched: Vec<usize>,
    weight: Vec<f64>,
    left: Vec<bool>,
    /// Coflow indices, first served first.
    order: Vec<usize>,
}

impl Sincronia {
    /// BSSI over `self.load`: fills `self.order`, first served first. Sparse: a step costs the
    /// links in use plus the users of the bottleneck, not coflows × links (1000 hosts).
    fn order(&mut self, links: usize) {
        let n = self.load.len();
        self.total.clear();
        self.total.resize(links, 0.0);
        self.users.resize_with(links, Vec::new);
        for &l in &self.touched {
            self.users[l].clear();
        }
        self.touched.clear();
        for (c, load) in self.load.iter().enumerate() {
            for &(l, b) in load {
                if self.users[l].is_empty() {
                    self.touched.push(l);
                }
                self.total[l] += b;
                self.users[l].push((c, b));
            }
        }
        self.touched.sort_unstable();
        self.weight.clear();
        self.weight.resize(n, 1.0);
        self.left.clear();
        self.left.resize(n, true);
        let mut last_first = Vec::with_capacity(n);
        while last_first.len() < n {
            // The bottleneck: the link with the most bytes of the coflows still unordered
            // (ties: the lowest link).
            let b = self
                .touched
                .iter()
                .copied()
                .filter(|&l| self.total[l] > 0.0)
                .fold(None, |best: Option<usize>, l| match best {
                    Some(x) if self.total[x] >= self.total[l] => Some(x),
                    _ => Some(l),
                });
            let Some(b) = b else {
                // Nothing left on any link: the rest in job order.
                last_first.extend((0..n).rev().filter(|&c| self.left[c]));
                break;
            };
            // Of its coflows, the one with the largest load per weight goes last (Smith's rule
            // backwards); ties: the later job last.
            let Some((c, pc)) = self.users[b]
                .iter()
                .copied()
                .filter(|&(c, p)| self.left[c] && p > 0.0)
                .max_by(|&(x, px), &(y, py)| {
                    let rx = px / self.weight[x].max(f64::MIN_POSITIVE);
                    let ry = py / self.weight[y].max(f64::MIN_POSITIVE);
                    rx.total_cmp(&ry).then(x.cmp(&y))
                })
            else {
                // Rounding left a little on a link whose coflows are all ordered.
                self.total[b] = 0.0;
                continue;
            };
            self.left[c] = false;
            let wc = self.weight[c];
            for &(o, p) in &self.users[b] {
                if self.left[o] {
                    self.weight[o] -= wc * p / pc;
                }
            }
            for &(l, p) in &self.load[c] {
                self.total[l] = (self.total[l] - p).max(0.0);
            }
            last_first.push(c);
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
            for &r in &view.active[run.clone()] {
                let f = view.flow(r);
                for l in &f.path {
                    load.push((l.index(), f.remaining()));
                }
            }
            // One entry per link.
            load.sort_unstable_by_key(|e| e.0);
            load.dedup_by(|a, b| {
                if a.0 == b.0 {
                    b.1 += a.1;
                    true
                } else {
                    false
                }
            });
        }
        self.order(nlinks);
        self.residual.clear();
        self.residual
            .extend(view.topo.links().iter().map(|l| l.capacity.0));
        super::priority::serve_in_order(
            &mut self.fair,
            view,
            self.order.iter().map(|&c| self.runs[c].clone()),
            &mut self.residual,
            &mut self.out,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BSSI's order for dense loads (coflows × links).
    fn order(load: Vec<Vec<f64>>) -> Vec<usize> {
        let links = load.first().map_or(0, Vec::len);
        let mut s = Sincronia {
            load: load
                .into_iter()
                .map(|l| l.into_iter().enumerate().filter(|e| e.1 > 0.0).collect())
                .collect(),
            ..Default::default()
        };
        s.order(links);
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
