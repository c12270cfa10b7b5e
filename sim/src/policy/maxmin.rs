//! Max-min fair rates over shared links (progressive filling / water-filling), the allocation
//! TCP-like sharing converges to and the building block of `fair`, `ccml` and `isolated`.
//!
//! All unfrozen flows rise together; link l saturates at level (c_l − frozen load on l) / (its
//! unfrozen flows), which changes only when one of its flows freezes, so events come from a
//! heap in increasing level order: O(F·P·log L) per call instead of re-scanning every link.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use mlcc_core::topology::LinkId;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Event {
    level: f64,
    link: u32,
    version: u32,
}

impl Eq for Event {}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on level, ties by link index (deterministic).
        o.level
            .total_cmp(&self.level)
            .then(o.link.cmp(&self.link))
            .then(o.version.cmp(&self.version))
    }
}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Buffers reused across calls.
#[derive(Clone, Debug, Default)]
pub struct MaxMin {
    incidence: Vec<(u32, u32)>,
    /// Per used link: (link index, start, end) into `incidence`.
    used: Vec<(u32, u32, u32)>,
    frozen_load: Vec<f64>,
    count: Vec<u32>,
    /// Per used link: the summed weight of its unfrozen flows.
    weight: Vec<f64>,
    version: Vec<u32>,
    frozen: Vec<bool>,
    by_demand: Vec<u32>,
    heap: BinaryHeap<Event>,
}

impl MaxMin {
    /// Rates (same unit as `capacity`) for flows with the given paths and demands; a flow
    /// never gets more than its demand, and no link carries more than its capacity.
    /// `capacity` is indexed by link index.
    pub fn solve(
        &mut self,
        paths: &[&[LinkId]],
        demand: &[f64],
        capacity: &[f64],
        out: &mut Vec<f64>,
    ) {
        self.solve_weighted(paths, demand, None, capacity, out);
    }

    /// Weighted max-min: every unfrozen flow rises at `weight[f]` times a common level, so on
    /// a shared bottleneck flows get capacity in proportion to their weights (none: all 1,
    /// plain max-min, to the last bit). Weights must be finite and > 0.
    pub fn solve_weighted(
        &mut self,
        paths: &[&[LinkId]],
        demand: &[f64],
        weight: Option<&[f64]>,
        capacity: &[f64],
        out: &mut Vec<f64>,
    ) {
        let w = |f: usize| weight.map_or(1.0, |w| w[f]);
        let n = paths.len();
        out.clear();
        out.resize(n, 0.0);
        self.frozen.clear();
        self.frozen.resize(n, false);
        self.incidence.clear();
        let mut unfrozen = 0usize;
        for (f, p) in paths.iter().enumerate() {
            let d = demand[f];
            if d.is_nan() || d <= 0.0 || p.is_empty() {
                self.frozen[f] = true;
                continue;
            }
            unfrozen += 1;
            for l in p.iter() {
                self.incidence.push((l.0, f as u32));
            }
        }
        self.incidence.sort_unstable();
        self.used.clear();
        let mut i = 0;
        while i < self.incidence.len() {
            let l = self.incidence[i].0;
            let start = i;
            while i < self.incidence.len() && self.incidence[i].0 == l {
                i += 1;
            }
            self.used.push((l, start as u32, i as u32));
        }
        let m = self.used.len();
        self.frozen_load.clear();
        self.frozen_load.resize(m, 0.0);
        self.count.clear();
        self.count.extend(self.used.iter().map(|&(_, s, e)| e - s));
        self.weight.clear();
        self.weight.extend(self.used.iter().map(|&(_, s, e)| {
            (s..e)
                .map(|i| w(self.incidence[i as usize].1 as usize))
                .sum::<f64>()
        }));
        self.version.clear();
        self.version.resize(m, 0);
        self.heap.clear();
        for (k, &(l, _, _)) in self.used.iter().enumerate() {
            self.heap.push(Event {
                level: (capacity[l as usize] / self.weight[k]).max(0.0),
                link: k as u32,
                version: 0,
            });
        }
        self.by_demand.clear();
        self.by_demand
            .extend((0..n as u32).filter(|&f| !self.frozen[f as usize]));
        // A flow's demand is met at level demand / weight.
        self.by_demand.sort_by(|&a, &b| {
            (demand[a as usize] / w(a as usize))
                .total_cmp(&(demand[b as usize] / w(b as usize)))
                .then(a.cmp(&b))
        });
        let mut next_demand = 0usize;
        while unfrozen > 0 {
            while next_demand < self.by_demand.len()
                && self.frozen[self.by_demand[next_demand] as usize]
            {
                next_demand += 1;
            }
            while let Some(e) = self.heap.peek() {
                let k = e.link as usize;
                if e.version != self.version[k] || self.count[k] == 0 {
                    self.heap.pop();
                } else {
                    break;
                }
            }
            let link_level = self.heap.peek().map(|e| (e.level, e.link as usize));
            let demand_level = self
                .by_demand
                .get(next_demand)
                .map(|&f| (demand[f as usize] / w(f as usize), f as usize));
            match (link_level, demand_level) {
                (Some((lv, _)), Some((dv, f))) if dv <= lv => {
                    unfrozen -= self.freeze(f, demand[f], w(f), paths, capacity, out);
                }
                (Some((lv, k)), _) => {
                    self.heap.pop();
                    let (_, s, e) = self.used[k];
                    for idx in s..e {
                        let f = self.incidence[idx as usize].1 as usize;
                        if !self.frozen[f] {
                            unfrozen -= self.freeze(f, w(f) * lv, w(f), paths, capacity, out);
                        }
                    }
                }
                (None, Some((_, f))) => {
                    let d = demand[f];
                    let r = if d.is_finite() { d } else { 0.0 };
                    unfrozen -= self.freeze(f, r, w(f), paths, capacity, out);
                }
                (None, None) => break,
            }
        }
    }

    fn freeze(
        &mut self,
        f: usize,
        rate: f64,
        weight: f64,
        paths: &[&[LinkId]],
        capacity: &[f64],
        out: &mut [f64],
    ) -> usize {
        self.frozen[f] = true;
        out[f] = rate.max(0.0);
        for l in paths[f] {
            // `used` is sorted by link index.
            let Ok(k) = self.used.binary_search_by(|u| u.0.cmp(&l.0)) else {
                continue;
            };
            self.frozen_load[k] += out[f];
            self.count[k] -= 1;
            self.weight[k] -= weight;
            self.version[k] += 1;
            if self.count[k] > 0 {
                let level = ((capacity[l.index()] - self.frozen_load[k]) / self.weight[k]).max(0.0);
                self.heap.push(Event {
                    level,
                    link: k as u32,
                    version: self.version[k],
                });
            }
        }
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(i: u32) -> LinkId {
        LinkId(i)
    }

    #[test]
    fn classic_parking_lot() {
        // Links 0 and 1 of capacity 10; flow a crosses both, b only 0, c only 1.
        let (a, b, c) = ([l(0), l(1)], [l(0)], [l(1)]);
        let paths: Vec<&[LinkId]> = vec![&a, &b, &c];
        let mut out = vec![];
        MaxMin::default().solve(&paths, &[f64::INFINITY; 3], &[10.0, 10.0], &mut out);
        assert_eq!(out, vec![5.0, 5.0, 5.0]);
        // With c limited to 2, a and b split link 0; a gets 5, link 1 has 3 left unused.
        MaxMin::default().solve(
            &paths,
            &[f64::INFINITY, f64::INFINITY, 2.0],
            &[10.0, 10.0],
            &mut out,
        );
        assert_eq!(out, vec![5.0, 5.0, 2.0]);
    }

    #[test]
    fn weights_share_a_bottleneck_in_proportion_and_unit_weights_are_plain_max_min() {
        let (a, b, c) = ([l(0), l(1)], [l(0)], [l(1)]);
        let paths: Vec<&[LinkId]> = vec![&a, &b, &c];
        let mut out = vec![];
        // a weighs 3, b 1 on link 0 (cap 8): 6 and 2; c takes what a leaves on link 1.
        MaxMin::default().solve_weighted(
            &paths,
            &[f64::INFINITY; 3],
            Some(&[3.0, 1.0, 1.0]),
            &[8.0, 10.0],
            &mut out,
        );
        assert_eq!(out, vec![6.0, 2.0, 4.0]);
        // A heavy flow limited by its demand leaves the rest to the others.
        MaxMin::default().solve_weighted(
            &paths,
            &[1.0, f64::INFINITY, f64::INFINITY],
            Some(&[3.0, 1.0, 1.0]),
            &[8.0, 10.0],
            &mut out,
        );
        assert_eq!(out, vec![1.0, 7.0, 9.0]);
        let mut plain = vec![];
        let d = [f64::INFINITY, 4.0, 2.5];
        MaxMin::default().solve(&paths, &d, &[10.0, 7.0], &mut plain);
        MaxMin::default().solve_weighted(&paths, &d, Some(&[1.0; 3]), &[10.0, 7.0], &mut out);
        assert_eq!(out, plain);
    }

    #[test]
    fn bottleneck_elsewhere_frees_capacity() {
        // a: link 0 (cap 1) and link 1 (cap 10); b: link 1 only. a is held to 1, b takes 9.
        let (a, b) = ([l(0), l(1)], [l(1)]);
        let paths: Vec<&[LinkId]> = vec![&a, &b];
        let mut out = vec![];
        MaxMin::default().solve(&paths, &[f64::INFINITY; 2], &[1.0, 10.0], &mut out);
        assert_eq!(out, vec![1.0, 9.0]);
        // Zero demand gets nothing and takes nothing.
        MaxMin::default().solve(&paths, &[0.0, f64::INFINITY], &[1.0, 10.0], &mut out);
        assert_eq!(out, vec![0.0, 10.0]);
    }
}
