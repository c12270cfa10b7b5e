//! Slot allocation: the initial K-slot schedule of one flow, the paper's Algorithm 1
//! (docs/design.md §7).
//!
//! The flow looks at the next K slots of its path, each with a price (booked load over capacity,
//! summed over the path's links, so links of different speed add up fairly) and a cap (the
//! residual capacity of the tightest link, at most the flow's achievable rate). For every
//! candidate completion slot β̂ it fills the cheapest slots before β̂ first and keeps the schedule
//! whose cost — its own completion plus η times the delay it imposes on others — is lowest. This
//! is the right-hand side of the paper's dual constraint (11) with λ_l(t) = b_l(t)/c_l.

use serde::Serialize;

/// A flow's remaining bytes are considered delivered when less than this is left: bytes are
/// whole, and float sums of rate × τ leave crumbs.
pub const BYTE_EPSILON: f64 = 0.5;

/// One slot of a flow's path as seen by Alg. 1.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SlotPrice {
    /// P(t) = Σ_l b_l(t) / c_l.
    pub price: f64,
    /// A(t) = max(0, min(B_f, min_l (c_l − b_l(t)))), bytes/s.
    pub cap: f64,
}

/// What Alg. 1 decided for one flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    /// Bytes/s for each of the K slots, slot 0 first.
    pub rates: Vec<f64>,
    /// β: the number of slots until the flow completes, if it completes within the horizon.
    pub completion: Option<usize>,
    /// The winning cost (β + η·price term); `None` when no β̂ could finish.
    pub cost: Option<f64>,
}

impl Schedule {
    /// Bytes this schedule moves in the horizon.
    pub fn bytes(&self, tau_secs: f64) -> f64 {
        self.rates.iter().sum::<f64>() * tau_secs
    }
}

/// Builds the per-slot prices and caps of a path from each link's capacity and the load
/// booked on it by others for slots `0..K`.
///
/// `links` yields `(capacity, load)` pairs, with `load.len() >= out.len()`.
pub fn path_prices<'a>(
    links: impl IntoIterator<Item = (f64, &'a [f64])>,
    achievable: f64,
    out: &mut [SlotPrice],
) {
    for p in out.iter_mut() {
        *p = SlotPrice {
            price: 0.0,
            cap: achievable.max(0.0),
        };
    }
    for (capacity, load) in links {
        for (p, &b) in out.iter_mut().zip(load) {
            let b = if b.is_finite() { b.max(0.0) } else { 0.0 };
            if capacity > 0.0 {
                p.price += b / capacity;
            }
            p.cap = p.cap.min((capacity - b).max(0.0));
        }
    }
}

/// Alg. 1. `remaining` bytes over `slots.len()` slots of `tau_secs` each; `bottleneck` is the
/// smallest capacity on the path (normalizes the price term); `eta` weighs it.
///
/// O(K²) after one O(K log K) sort: the cheapest-first order of the first β̂ slots is the
/// global order restricted to t < β̂. O(K) for a flow beyond the horizon.
pub fn schedule(
    remaining: f64,
    tau_secs: f64,
    slots: &[SlotPrice],
    bottleneck: f64,
    eta: f64,
) -> Schedule {
    let k = slots.len();
    if remaining <= BYTE_EPSILON || k == 0 {
        return Schedule {
            rates: vec![0.0; k],
            completion: Some(0),
            cost: Some(0.0),
        };
    }
    if beyond_horizon(remaining, tau_secs, slots) {
        return take_everything(slots);
    }
    trials(remaining, tau_secs, slots, bottleneck, eta)
}

/// Every candidate completion slot β̂ tried in turn; the cheapest schedule that finishes.
fn trials(
    remaining: f64,
    tau_secs: f64,
    slots: &[SlotPrice],
    bottleneck: f64,
    eta: f64,
) -> Schedule {
    let k = slots.len();
    // Cheapest first; where prices do not count (η = 0) or tie, earliest first: of two plans
    // that finish together, the one that sends sooner lets what depends on its bytes (a PS
    // broadcast, the next ring step) start sooner and leaves the later slots to others.
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| {
        (eta * slots[a].price)
            .total_cmp(&(eta * slots[b].price))
            .then(a.cmp(&b))
    });

    // The winner's cost, β and β̂; its rates are filled again once it is known rather than
    // copied at every improvement.
    let mut best: Option<(f64, usize, usize)> = None;
    let mut rates = vec![0.0; k];
    for beta_hat in 1..=k {
        if !fill(remaining, tau_secs, slots, &order, beta_hat, &mut rates) {
            continue;
        }
        let beta = 1 + rates.iter().rposition(|&r| r > 0.0).unwrap_or(0);
        let price_term: f64 = rates
            .iter()
            .zip(slots)
            .map(|(r, s)| r / bottleneck * s.price)
            .sum();
        let cost = beta as f64 + eta * price_term;
        let better = match best {
            None => true,
            Some((c, b, _)) => cost < c || (cost == c && beta < b),
        };
        if better {
            best = Some((cost, beta, beta_hat));
        }
    }
    match best {
        Some((cost, beta, beta_hat)) => {
            fill(remaining, tau_secs, slots, &order, beta_hat, &mut rates);
            Schedule {
                rates,
                completion: Some(beta),
                cost: Some(cost),
            }
        }
        None => take_everything(slots),
    }
}

/// Fills the cheapest of the slots before `beta_hat` (in `order`) with `remaining` bytes into
/// `rates`; whether they hold it all.
fn fill(
    remaining: f64,
    tau_secs: f64,
    slots: &[SlotPrice],
    order: &[usize],
    beta_hat: usize,
    rates: &mut [f64],
) -> bool {
    rates.iter_mut().for_each(|r| *r = 0.0);
    let mut g = remaining;
    for &t in order.iter().filter(|&&t| t < beta_hat) {
        if g <= BYTE_EPSILON {
            break;
        }
        let r = slots[t].cap.min(g / tau_secs);
        rates[t] = r;
        g -= r * tau_secs;
    }
    g <= BYTE_EPSILON
}

/// Whether `remaining` is more than every slot's cap together carries, so that no β̂ finishes
/// (the common case of a large model's flow and a short horizon). The margin, a billionth of
/// the bytes involved, is far above the rounding of [`fill`]'s K steps, so this answers as
/// trying every β̂ would; a flow near the line is left to the trials.
fn beyond_horizon(remaining: f64, tau_secs: f64, slots: &[SlotPrice]) -> bool {
    let most: f64 = slots.iter().map(|s| s.cap * tau_secs).sum();
    most.is_finite() && remaining - BYTE_EPSILON > most + (most + remaining) * 1e-9
}

/// Cannot finish within K: take everything offered; the rest is re-planned next slot.
fn take_everything(slots: &[SlotPrice]) -> Schedule {
    Schedule {
        rates: slots.iter().map(|s| s.cap).collect(),
        completion: None,
        cost: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAU: f64 = 0.1;

    /// Slot 0 half booked (price 0.5, cap 50), slots 1 and 2 free.
    fn half_booked_then_free() -> [SlotPrice; 3] {
        let mut s = [SlotPrice {
            price: 0.0,
            cap: 100.0,
        }; 3];
        s[0] = SlotPrice {
            price: 0.5,
            cap: 50.0,
        };
        s
    }

    fn free(k: usize, cap: f64) -> Vec<SlotPrice> {
        vec![SlotPrice { price: 0.0, cap }; k]
    }

    #[test]
    fn empty_path_finishes_in_as_few_slots_as_possible() {
        // 25 bytes at 100 B/s, τ = 0.1 s: 10 bytes per slot → 3 slots (10, 10, 5).
        let s = schedule(25.0, TAU, &free(5, 100.0), 100.0, 1.0);
        assert_eq!(s.completion, Some(3));
        assert_eq!(s.rates, vec![100.0, 100.0, 50.0, 0.0, 0.0]);
        assert_eq!(s.cost, Some(3.0));
    }

    #[test]
    fn staggers_behind_a_booked_flow() {
        // Another flow booked slots 0 and 1 fully (price 1, cap 0): we go after it.
        let mut slots = free(5, 100.0);
        for s in &mut slots[..2] {
            *s = SlotPrice {
                price: 1.0,
                cap: 0.0,
            };
        }
        let s = schedule(20.0, TAU, &slots, 100.0, 1.0);
        assert_eq!(s.rates, vec![0.0, 0.0, 100.0, 100.0, 0.0]);
        assert_eq!(s.completion, Some(4));
    }

    #[test]
    fn waits_for_a_cheap_slot_when_price_outweighs_delay() {
        // Slot 0 is half booked (price 0.5, cap 50); slot 1 free. 10 bytes:
        // β̂=1: 5 bytes max in slot 0 → cannot finish. β̂=2: slot 1 first (cheaper), 10 bytes
        // there → β=2, cost 2. Using slot 0 would cost 1 + 0.5·0.5 + ... but cannot finish alone.
        let slots = half_booked_then_free();
        let s = schedule(10.0, TAU, &slots, 100.0, 1.0);
        assert_eq!(s.rates, vec![0.0, 100.0, 0.0]);
        assert_eq!(s.completion, Some(2));
        // With 15 bytes: β̂=2 puts 10 in slot 1, 5 in slot 0 → cost 2 + 0.5·0.5 = 2.25;
        // β̂=3 puts 10 in slot 1, 5 in slot 2 → cost 3. Finishing earlier wins.
        let s = schedule(15.0, TAU, &slots, 100.0, 1.0);
        assert_eq!(s.rates, vec![50.0, 100.0, 0.0]);
        assert_eq!(s.cost, Some(2.25));
        // A heavy η makes the flow avoid the shared slot: cost 2 + 10·0.25 = 4.5 vs 3.
        let s = schedule(15.0, TAU, &slots, 100.0, 10.0);
        assert_eq!(s.rates, vec![0.0, 100.0, 50.0]);
        assert_eq!(s.completion, Some(3));
    }

    #[test]
    fn without_a_price_weight_the_earliest_slots_fill_first() {
        // Slot 0 is half booked (cap 50), slot 1 free: 8 bytes finish in 2 slots either way.
        // Priced (η = 1), the cheap slot 1 fills first and slot 0 takes the rest; at η = 0 the
        // price does not count, and sending sooner lets what depends on the bytes start sooner.
        let slots = half_booked_then_free();
        let s = schedule(8.0, TAU, &slots, 100.0, 1.0);
        assert_eq!(s.rates, vec![0.0, 80.0, 0.0]);
        let s = schedule(8.0, TAU, &slots, 100.0, 0.0);
        assert_eq!(s.rates, vec![50.0, 30.0, 0.0]);
        assert_eq!(s.completion, Some(2));
    }

    #[test]
    fn cannot_finish_takes_everything_offered() {
        let s = schedule(1000.0, TAU, &free(3, 100.0), 100.0, 1.0);
        assert_eq!(s.completion, None);
        assert_eq!(s.rates, vec![100.0; 3]);
    }

    proptest::proptest! {
        /// The shortcut for flows beyond the horizon answers, to the bit, what trying every
        /// β̂ answers, on both sides of the line.
        #[test]
        fn beyond_the_horizon_answers_as_the_trials_do(
            caps in proptest::collection::vec(0.0f64..2e9, 1..12),
            prices in proptest::collection::vec(0.0f64..3.0, 12),
            scale in 0.5f64..1.5,
            nudge in -3.0f64..3.0,
            eta in 0.0f64..2.0,
        ) {
            let slots: Vec<SlotPrice> = caps
                .iter()
                .zip(&prices)
                .map(|(&cap, &price)| SlotPrice { price, cap })
                .collect();
            let most: f64 = slots.iter().map(|s| s.cap * TAU).sum();
            for remaining in [most * scale, most + nudge, most + BYTE_EPSILON + nudge.abs()] {
                if remaining <= BYTE_EPSILON {
                    continue;
                }
                let by_trials = trials(remaining, TAU, &slots, 2e9, eta);
                proptest::prop_assert_eq!(schedule(remaining, TAU, &slots, 2e9, eta), by_trials);
            }
        }
    }

    #[test]
    fn zero_remaining_is_an_empty_schedule() {
        let s = schedule(0.0, TAU, &free(3, 100.0), 100.0, 1.0);
        assert_eq!(s.rates, vec![0.0; 3]);
        assert_eq!(s.completion, Some(0));
    }

    #[test]
    fn path_prices_sum_prices_and_take_tightest_cap() {
        let mut out = [SlotPrice {
            price: 0.0,
            cap: 0.0,
        }; 2];
        let l1 = [50.0, 0.0];
        let l2 = [100.0, 300.0];
        path_prices([(100.0, &l1[..]), (400.0, &l2[..])], 80.0, &mut out);
        assert_eq!(
            out[0],
            SlotPrice {
                price: 0.75,
                cap: 50.0
            }
        );
        assert_eq!(
            out[1],
            SlotPrice {
                price: 0.75,
                cap: 80.0
            }
        );
        // Overbooked links give a zero cap, never negative; NaN load counts as unbooked.
        let l3 = [500.0, f64::NAN];
        path_prices([(100.0, &l3[..])], 80.0, &mut out);
        assert_eq!(out[0].cap, 0.0);
        assert_eq!(
            out[1],
            SlotPrice {
                price: 0.0,
                cap: 80.0
            }
        );
    }
}
