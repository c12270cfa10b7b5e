//! Links and data as a fluid, one slot at a time.
//!
//! Links: a flow offers `wanted` bytes in the slot, sent at its paced `rate` (≥ wanted / τ).
//! Where the rates on a link add up to more than its capacity, the link serves each flow in
//! proportion to its rate — a drop-tail queue fed by paced senders — until one has sent what it
//! offered; the others then share what it leaves, each never above its own rate. So a flow
//! paced faster than it needs finishes within the slot on an overbooked link, while flows paced
//! exactly at wanted / τ are all scaled by capacity / offered load. A flow gets the smallest
//! delivered share along its path. Not work-conserving beyond the rates, exactly like a real
//! overbooked link whose paced senders do not re-probe within the slot.
//!
//! Data: a flow cannot send bytes its application does not hold yet — a ring worker holds its
//! own chunk plus what its predecessor delivered to it; a parameter server holds the fraction
//! of the model it has aggregated from every worker.

use mlcc_core::topology::{LinkId, Topology};

/// Bytes a ring flow may have sent in all: what its predecessor delivered plus its own chunk.
pub fn ring_allows(predecessor_sent: f64, slack: f64) -> f64 {
    predecessor_sent + slack
}

/// Bytes a broadcast flow of `bytes` per iteration may have sent in all, when the slowest of
/// the aggregation flows into its server has moved `aggregated` of its iteration (0..=1).
pub fn bcast_allows(aggregated: f64, bytes: f64) -> f64 {
    aggregated.clamp(0.0, 1.0) * bytes
}

/// Per-link scratch of the sharing computation, reused across slots.
#[derive(Clone, Debug)]
pub struct Links {
    /// Per link: offered bytes and the sum of the offering flows' rates.
    load: Vec<f64>,
    rate: Vec<f64>,
    capacity: Vec<f64>,
    touched: Vec<usize>,
    /// Per overbooked link: its flows (index, T_i = wanted / rate), and the virtual time at
    /// which the slot ends for them.
    members: Vec<Vec<(usize, f64)>>,
    end: Vec<f64>,
}

impl Links {
    pub fn new(topo: &Topology) -> Self {
        let n = topo.links().len();
        Links {
            load: vec![0.0; n],
            rate: vec![0.0; n],
            capacity: topo.links().iter().map(|l| l.capacity.0).collect(),
            touched: vec![],
            members: vec![Vec::new(); n],
            end: vec![f64::INFINITY; n],
        }
    }

    /// Shares the links among the flows `range`, each offering `wanted[i]` bytes this slot of
    /// `tau` seconds at `rate[i]` bytes/s over `path(i)`: sets `moved[i]` and whether a link held
    /// the flow below its offer (`scaled[i]`). A rate below wanted / τ counts as wanted / τ.
    #[allow(clippy::too_many_arguments)]
    pub fn share<'p>(
        &mut self,
        tau: f64,
        range: std::ops::Range<usize>,
        path: impl Fn(usize) -> &'p [LinkId],
        wanted: &[f64],
        rate: &[f64],
        moved: &mut [f64],
        scaled: &mut [bool],
    ) {
        let capacity = std::mem::take(&mut self.capacity);
        self.share_within(&capacity, tau, range, path, wanted, rate, moved, scaled);
        self.capacity = capacity;
    }

    /// Each link's capacity (bytes/s), as [`Self::share`] starts from.
    pub fn capacities(&self) -> &[f64] {
        &self.capacity
    }

    /// [`Self::share`] on links of `capacity[l]` bytes/s each: what a lower priority class gets
    /// of what the classes above it left.
    #[allow(clippy::too_many_arguments)]
    pub fn share_within<'p>(
        &mut self,
        capacity: &[f64],
        tau: f64,
        range: std::ops::Range<usize>,
        path: impl Fn(usize) -> &'p [LinkId],
        wanted: &[f64],
        rate: &[f64],
        moved: &mut [f64],
        scaled: &mut [bool],
    ) {
        let pace = |i: usize| {
            let r = if rate[i].is_finite() { rate[i] } else { 0.0 };
            r.max(wanted[i] / tau)
        };
        for i in range.clone() {
            if wanted[i] <= 0.0 {
                continue;
            }
            for &l in path(i) {
                let l = l.index();
                if self.load[l] == 0.0 {
                    self.touched.push(l);
                }
                self.load[l] += wanted[i];
                self.rate[l] += pace(i);
                self.members[l].push((i, wanted[i] / pace(i)));
            }
        }
        // Each overbooked link in virtual time V (seconds at full rate): all its active flows
        // progress at rate × C / R, so they finish in the order of T_i = wanted / rate, and
        // the slot's τ of real time ends at the V where the link leaves its flows.
        for &l in &self.touched {
            let cap = capacity[l].max(0.0);
            if self.load[l] <= cap * tau {
                continue;
            }
            let m = &mut self.members[l];
            m.sort_by(|a, b| a.1.total_cmp(&b.1));
            let (mut v, mut t, mut r) = (0.0_f64, 0.0_f64, self.rate[l]);
            let mut end = f64::INFINITY;
            for &(i, ti) in m.iter() {
                let stretch = (r / cap).max(1.0);
                let dt = (ti - v) * stretch;
                if t + dt >= tau {
                    end = v + (tau - t) / stretch;
                    break;
                }
                t += dt;
                v = ti;
                r -= pace(i);
            }
            self.end[l] = end;
        }
        for i in range {
            if wanted[i] <= 0.0 {
                moved[i] = 0.0;
                scaled[i] = false;
                continue;
            }
            let ti = wanted[i] / pace(i);
            let share = path(i)
                .iter()
                .map(|l| (self.end[l.index()] / ti).min(1.0))
                .fold(1.0, f64::min);
            moved[i] = wanted[i] * share;
            scaled[i] = share < 1.0 - 1e-9;
        }
        for &l in &self.touched {
            self.load[l] = 0.0;
            self.rate[l] = 0.0;
            self.members[l].clear();
            self.end[l] = f64::INFINITY;
        }
        self.touched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlcc_core::units::BytesPerSec;

    #[test]
    fn an_overbooked_link_delivers_in_proportion_and_a_free_one_in_full() {
        let t = Topology::single_switch(3, BytesPerSec(100.0)).unwrap();
        let up = |h: usize| t.hosts().nth(h).map(|n| t.links_owned_by(n)[0]).unwrap();
        let paths = [vec![up(0)], vec![up(0)], vec![up(1)]];
        let mut links = Links::new(&t);
        let (mut moved, mut scaled) = (vec![0.0; 3], vec![false; 3]);
        // 1 s slot: h0's uplink is offered 150 for 100, h1's 50.
        // Paced at exactly what they offer: the link scales both alike.
        links.share(
            1.0,
            0..3,
            |i| &paths[i],
            &[100.0, 50.0, 50.0],
            &[100.0, 50.0, 50.0],
            &mut moved,
            &mut scaled,
        );
        assert!((moved[0] - 200.0 / 3.0).abs() < 1e-9 && (moved[1] - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!((moved[2], &scaled[..]), (50.0, &[true, true, false][..]));
        // Nothing lingers from the last slot.
        links.share(
            1.0,
            0..1,
            |i| &paths[i],
            &[80.0],
            &[80.0],
            &mut moved,
            &mut scaled,
        );
        assert_eq!((moved[0], scaled[0]), (80.0, false));
    }

    #[test]
    fn a_flow_paced_above_its_offer_finishes_and_leaves_the_rest_to_the_others() {
        let t = Topology::single_switch(2, BytesPerSec(100.0)).unwrap();
        let up = t.hosts().next().map(|n| t.links_owned_by(n)[0]).unwrap();
        let paths = [vec![up], vec![up]];
        let mut links = Links::new(&t);
        let (mut moved, mut scaled) = (vec![0.0; 2], vec![false; 2]);
        // Flow 0 offers 30 at 100/s, flow 1 offers 90 at 90/s: 190/s on a 100/s link. Both
        // run at rate × 100/190 until flow 0 has sent its 30 (V = 0.3, t = 0.57 s); flow 1
        // then runs alone at its 90/s for the remaining 0.43 s: 27 + 38.7 = 65.7.
        links.share(
            1.0,
            0..2,
            |i| &paths[i],
            &[30.0, 90.0],
            &[100.0, 90.0],
            &mut moved,
            &mut scaled,
        );
        assert!((moved[0] - 30.0).abs() < 1e-9, "{moved:?}");
        assert!(!scaled[0] && scaled[1]);
        let t0 = 0.3 * 190.0 / 100.0;
        assert!(
            (moved[1] - (27.0 + 90.0 * (1.0 - t0))).abs() < 1e-9,
            "{moved:?}"
        );
        // The link never carries more than its capacity.
        assert!(moved.iter().sum::<f64>() <= 100.0 + 1e-9);
    }
}
