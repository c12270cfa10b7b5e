//! Links and data as a fluid, one slot at a time.
//!
//! Links: where the bytes flows offer add up to more than a link carries in the slot, the link
//! delivers in proportion (every flow on it scaled by capacity / offered load; a flow gets the
//! smallest scale along its path). That is a fluid model of a drop-tail queue shared by paced
//! senders; it is not work-conserving, exactly like a real overbooked link whose senders do not
//! re-probe within the slot.
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
    load: Vec<f64>,
    capacity: Vec<f64>,
    touched: Vec<usize>,
}

impl Links {
    pub fn new(topo: &Topology) -> Self {
        Links {
            load: vec![0.0; topo.links().len()],
            capacity: topo.links().iter().map(|l| l.capacity.0).collect(),
            touched: vec![],
        }
    }

    /// Shares the links among the flows `range`, each offering `wanted[i]` bytes this slot of
    /// `tau` seconds over `path(i)`: sets `moved[i]` and whether a link held the flow below
    /// its offer (`scaled[i]`).
    pub fn share<'p>(
        &mut self,
        tau: f64,
        range: std::ops::Range<usize>,
        path: impl Fn(usize) -> &'p [LinkId],
        wanted: &[f64],
        moved: &mut [f64],
        scaled: &mut [bool],
    ) {
        for i in range.clone() {
            for &l in path(i) {
                if self.load[l.index()] == 0.0 {
                    self.touched.push(l.index());
                }
                self.load[l.index()] += wanted[i];
            }
        }
        for i in range {
            let scale = path(i)
                .iter()
                .map(|l| {
                    let load = self.load[l.index()];
                    let cap = self.capacity[l.index()] * tau;
                    if load > cap { cap / load } else { 1.0 }
                })
                .fold(1.0, f64::min);
            moved[i] = wanted[i] * scale;
            scaled[i] = scale < 1.0 - 1e-9;
        }
        for &l in &self.touched {
            self.load[l] = 0.0;
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
        links.share(
            1.0,
            0..3,
            |i| &paths[i],
            &[100.0, 50.0, 50.0],
            &mut moved,
            &mut scaled,
        );
        assert!((moved[0] - 200.0 / 3.0).abs() < 1e-9 && (moved[1] - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!((moved[2], &scaled[..]), (50.0, &[true, true, false][..]));
        // Nothing lingers from the last slot.
        links.share(1.0, 0..1, |i| &paths[i], &[80.0], &mut moved, &mut scaled);
        assert_eq!((moved[0], scaled[0]), (80.0, false));
    }
}
