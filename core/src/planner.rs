//! The per-host planner: one slot's inputs for all local flows in, each flow's rate and K-slot
//! plan out (docs/design.md §7, §8, §11 step 3).
//!
//! Flows are planned in precedence order. The feedback a caller passes in is the load booked by
//! *other hosts* (switches leave out the asking host's entries); the planner adds its own flows'
//! bookings itself, so a local flow sees the plans made earlier in the same slot at once instead
//! of last slot's. In `all-others` mode a local flow also sees the previous plans of local flows
//! not yet re-planned, mirroring what a switch would report.
//!
//! Deterministic: the same sequence of inputs gives the same outputs. The only state is each
//! flow's last plan (for `all-others` bookings) and its achievable-rate filter (B_f).

use serde::Serialize;

use crate::dependency::{self, Dependency};
use crate::estimator::{AchievableRate, Delivery};
use crate::flow::{FlowId, PrecedenceKey, Rank};
use crate::hash::{self, Map};
use crate::load_table::FeedbackMode;
use crate::slot::{Slot, SlotConfig};
use crate::slot_allocation::{self, BYTE_EPSILON, SlotPrice};
use crate::topology::LinkId;

/// Knobs of the planner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannerConfig {
    pub slots: SlotConfig,
    /// η: weight of the delay a plan imposes on others, against its own completion.
    pub eta: f64,
    pub mode: FeedbackMode,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            slots: SlotConfig::paper(),
            eta: 1.0,
            mode: FeedbackMode::default(),
        }
    }
}

/// One link of a flow's path with the load others booked on it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkFeedback {
    pub link: LinkId,
    /// c_l in bytes/s. A link with a capacity that is not a positive finite number is ignored
    /// (it cannot constrain anything meaningfully, and a bad value must not freeze a flow).
    pub capacity: f64,
    /// Bytes/s booked by other hosts for slots n..n+K (missing slots count as unbooked).
    pub load: Vec<f64>,
}

/// One flow's inputs for this slot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowInput {
    pub id: FlowId,
    /// The first part of its precedence key (see `host::RankRule`).
    pub rank: Rank,
    /// G: bytes the flow still has to send in this iteration.
    pub remaining_bytes: f64,
    /// S: bytes sent so far in this iteration.
    pub sent_bytes: f64,
    pub path: Vec<LinkFeedback>,
    pub dependency: Dependency,
    /// What the datapath measured for the flow during the previous slot.
    pub delivery: Option<Delivery>,
    /// A ceiling the caller puts on the flow's rate in every slot, on top of B_f and the path
    /// (`f64::INFINITY`: none) — e.g. its share of a link it splits with flows of the same job
    /// that must all finish before the job goes on.
    pub rate_cap: f64,
}

/// What the planner decided for one flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowDecision {
    pub id: FlowId,
    pub key: PrecedenceKey,
    /// Bytes/s to enforce during slot n.
    pub rate: f64,
    /// Bytes/s for slots n..n+K (`plan[0] == rate`); what gets published to load tables.
    pub plan: Vec<f64>,
    /// r_f: Alg. 1's rate for slot n, before dependency adjustment.
    pub planned_rate: f64,
    /// F_f = S + rate·τ: what peers compare against.
    pub progress: f64,
    /// B_f used for this slot.
    pub achievable: f64,
    /// Δ (bytes) the flow was sped up by, and bytes it was held back by.
    pub boost: f64,
    pub reduction: f64,
    /// Slots until completion according to the plan, if within the horizon.
    pub completion: Option<usize>,
    /// G = 0: the flow publishes an empty schedule and withdraws.
    pub done: bool,
}

impl FlowDecision {
    /// The rate booked for the slot after this one (bytes/s), 0 beyond the plan: what peers
    /// need to tell where the flow will be a slot from now.
    pub fn next_rate(&self) -> f64 {
        self.plan.get(1).copied().unwrap_or(0.0).max(0.0)
    }

    /// Whether Alg. 1 planned the flow's last bytes into this slot.
    pub fn ends_this_slot(&self) -> bool {
        !self.done && self.rate > 0.0 && self.plan.iter().skip(1).all(|&r| r <= 0.0)
    }
}

/// The planner's answer for one slot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlotOutput {
    pub slot: Slot,
    /// One decision per distinct input flow, in input order.
    pub decisions: Vec<FlowDecision>,
    /// Flows planned last slot that are gone now: publish them as done.
    pub withdrawn: Vec<FlowId>,
}

#[derive(Clone, Debug)]
struct PrevPlan {
    first_slot: Slot,
    rates: Vec<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct Planner {
    config: PlannerConfig,
    prev: Map<FlowId, PrevPlan>,
    estimators: Map<FlowId, AchievableRate>,
}

/// Per-link sums of the local flows' bookings for slots n..n+K: each link's K sums side by
/// side in one buffer, found by the link's place, so a pass allocates once rather than per
/// link.
struct LocalBookings {
    at: Map<LinkId, usize>,
    sums: Vec<f64>,
    k: usize,
}

impl LocalBookings {
    /// Room for `links` links' sums.
    fn new(links: usize, k: usize) -> Self {
        LocalBookings {
            at: hash::map_with_capacity(links),
            sums: Vec::with_capacity(links * k),
            k,
        }
    }

    fn get(&self, link: LinkId) -> Option<&[f64]> {
        let &i = self.at.get(&link)?;
        Some(&self.sums[i * self.k..(i + 1) * self.k])
    }

    fn get_or_zero(&mut self, link: LinkId) -> &mut [f64] {
        let n = self.at.len();
        let i = *self.at.entry(link).or_insert(n);
        if i == n {
            self.sums.resize((n + 1) * self.k, 0.0);
        }
        &mut self.sums[i * self.k..(i + 1) * self.k]
    }
}

/// How many links one host's flows, with paths of these lengths, cross at most: their shared
/// uplink and the rest of each path. A per-link map sized so never grows while filled.
pub(crate) fn links_crossed(path_lengths: impl Iterator<Item = usize>) -> usize {
    1 + path_lengths.map(|n| n.saturating_sub(1)).sum::<usize>()
}

/// Buffers reused across the flows of a pass.
struct Scratch {
    /// Alg. 1's price and cap per slot of the flow being planned.
    slots: Vec<SlotPrice>,
    /// Per usable link of its path, the load it plans around per slot: K per link, side by
    /// side.
    view: Vec<f64>,
}

impl Scratch {
    fn new(k: usize) -> Self {
        Scratch {
            slots: vec![
                SlotPrice {
                    price: 0.0,
                    cap: 0.0
                };
                k
            ],
            view: Vec::new(),
        }
    }

    /// The load `f` plans around on each usable link: other hosts' bookings plus local ones.
    fn view_of(&mut self, f: &FlowInput, local: &LocalBookings) {
        let k = self.slots.len();
        self.view.clear();
        // Sized for the path at once: grown push by push it reallocated several times a pass.
        self.view.reserve(k * f.path.len());
        for l in f.path.iter().filter(|l| usable(l)) {
            let mine = local.get(l.link);
            self.view.extend((0..k).map(|t| {
                let ext = l.load.get(t).copied().filter(|x| x.is_finite());
                ext.unwrap_or(0.0).max(0.0) + mine.map_or(0.0, |m| m[t].max(0.0))
            }));
        }
    }
}

fn usable(l: &LinkFeedback) -> bool {
    l.capacity.is_finite() && l.capacity > 0.0
}

fn book(local: &mut LocalBookings, path: &[LinkFeedback], plan: &[f64], sign: f64) {
    for l in path.iter().filter(|l| usable(l)) {
        let sums = local.get_or_zero(l.link);
        for (s, r) in sums.iter_mut().zip(plan) {
            *s += sign * r;
        }
    }
}

impl Planner {
    pub fn new(config: PlannerConfig) -> Self {
        Planner {
            config,
            prev: Map::default(),
            estimators: Map::default(),
        }
    }

    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// Plans slot `slot` for every local flow.
    pub fn plan(&mut self, slot: Slot, flows: &[FlowInput]) -> SlotOutput {
        // First occurrence of an id wins; a duplicate would double-book the flow.
        let mut seen = hash::set_with_capacity(flows.len());
        let inputs: Vec<&FlowInput> = flows.iter().filter(|f| seen.insert(&f.id)).collect();

        let achievable = self.achievable(slot, &inputs);
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        let keys: Vec<PrecedenceKey> = inputs
            .iter()
            .map(|f| PrecedenceKey::new(f.rank, f.id.clone()))
            .collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let initial = self.booked_before(slot, &inputs);

        let none = vec![None; inputs.len()];
        let mut decisions = self.pass(&inputs, &keys, &achievable, &order, initial, &none);
        self.release_held_back(&inputs, &keys, &achievable, &order, &mut decisions);

        // Remember plans; forget flows that are done or gone.
        let mut withdrawn: Vec<FlowId> = self
            .prev
            .keys()
            .filter(|id| !seen.contains(id))
            .cloned()
            .collect();
        withdrawn.sort();
        for id in &withdrawn {
            self.prev.remove(id);
            self.estimators.remove(id);
        }
        self.estimators.retain(|id, _| seen.contains(id));
        for d in &decisions {
            if d.done {
                self.prev.remove(&d.id);
            } else if let Some(p) = self.prev.get_mut(&d.id) {
                // In place: a busy host re-plans every flow every slot.
                p.first_slot = slot;
                p.rates.clone_from(&d.plan);
            } else {
                self.prev.insert(
                    d.id.clone(),
                    PrevPlan {
                        first_slot: slot,
                        rates: d.plan.clone(),
                    },
                );
            }
        }
        SlotOutput {
            slot,
            decisions,
            withdrawn,
        }
    }

    /// Held-back flows released bandwidth: a second pass gives it to the others in the same
    /// slot. In precedence mode that pass would change nothing: it plans each flow around the
    /// flows ranked before it alone, as the first did, and those (held back or not) book in it
    /// what they booked in the first, in the same order, so every decision comes out the same
    /// to the bit. There it runs only in debug builds, to check that.
    fn release_held_back(
        &self,
        inputs: &[&FlowInput],
        keys: &[PrecedenceKey],
        achievable: &[f64],
        order: &[usize],
        decisions: &mut [FlowDecision],
    ) {
        let precedence = self.config.mode == FeedbackMode::Precedence;
        if precedence && !cfg!(debug_assertions) {
            return;
        }
        let frozen: Vec<Option<Vec<f64>>> = decisions
            .iter()
            .map(|d| (d.reduction > 0.0).then(|| d.plan.clone()))
            .collect();
        if frozen.iter().all(Option::is_none) {
            return;
        }
        let current = match self.config.mode {
            FeedbackMode::Precedence => vec![None; inputs.len()],
            FeedbackMode::AllOthers => decisions.iter().map(|d| Some(d.plan.clone())).collect(),
        };
        let second = self.pass(inputs, keys, achievable, order, current, &frozen);
        for (i, d) in second.into_iter().enumerate() {
            if frozen[i].is_some() {
                continue;
            }
            if precedence {
                debug_assert_eq!(
                    decisions[i], d,
                    "precedence mode's second pass moved a flow"
                );
            } else {
                decisions[i] = d;
            }
        }
    }

    /// B_f per flow, after folding in last slot's measurement, within its rate cap.
    fn achievable(&mut self, slot: Slot, inputs: &[&FlowInput]) -> Vec<f64> {
        inputs
            .iter()
            .map(|f| {
                let est = self.estimators.entry(f.id.clone()).or_default();
                if let Some(d) = f.delivery {
                    // The measurement is of the slot that just ended.
                    est.observe(Slot(slot.0.saturating_sub(1)), d);
                }
                let bottleneck = f
                    .path
                    .iter()
                    .filter(|l| usable(l))
                    .map(|l| l.capacity)
                    .fold(f64::INFINITY, f64::min);
                let cap = if f.rate_cap.is_nan() || f.rate_cap <= 0.0 {
                    f64::INFINITY
                } else {
                    f.rate_cap
                };
                est.get(slot, bottleneck).min(cap)
            })
            .collect()
    }

    /// What each flow has booked locally when planning starts: in all-others mode its last
    /// plan, shifted onto this slot's window; in precedence mode nothing.
    fn booked_before(&self, slot: Slot, inputs: &[&FlowInput]) -> Vec<Option<Vec<f64>>> {
        let k = self.config.slots.horizon();
        inputs
            .iter()
            .map(|f| match self.config.mode {
                FeedbackMode::Precedence => None,
                FeedbackMode::AllOthers => self.prev.get(&f.id).map(|p| {
                    (0..k)
                        .map(|t| {
                            slot.plus(t as u64)
                                .since(p.first_slot)
                                .and_then(|i| p.rates.get(i as usize).copied())
                                .unwrap_or(0.0)
                        })
                        .collect()
                }),
            })
            .collect()
    }

    /// One planning pass in precedence order. `booked[i]` is what flow i has booked locally
    /// when the pass starts; a flow with a `frozen` plan keeps it and is not re-planned.
    fn pass(
        &self,
        inputs: &[&FlowInput],
        keys: &[PrecedenceKey],
        achievable: &[f64],
        order: &[usize],
        mut booked: Vec<Option<Vec<f64>>>,
        frozen: &[Option<Vec<f64>>],
    ) -> Vec<FlowDecision> {
        let k = self.config.slots.horizon();
        let links = links_crossed(inputs.iter().map(|f| f.path.len()));
        let mut local = LocalBookings::new(links, k);
        for (i, b) in booked.iter().enumerate() {
            if let Some(plan) = b {
                book(&mut local, &inputs[i].path, plan, 1.0);
            }
        }
        let mut out: Vec<Option<FlowDecision>> = vec![None; inputs.len()];
        let mut scratch = Scratch::new(k);
        for &i in order {
            let f = inputs[i];
            if let Some(plan) = &frozen[i] {
                // Keep the decision made earlier; book it if the pass started without it.
                if booked[i].is_none() {
                    book(&mut local, &f.path, plan, 1.0);
                }
                continue;
            }
            if let Some(old) = booked[i].take() {
                book(&mut local, &f.path, &old, -1.0);
            }
            let d = self.decide(f, &keys[i], achievable[i], &local, &mut scratch);
            // `order` visits each flow once: what it books here is not looked at again.
            if !d.done {
                book(&mut local, &f.path, &d.plan, 1.0);
            }
            out[i] = Some(d);
        }
        out.into_iter()
            .enumerate()
            .map(|(i, d)| {
                // Frozen: the caller overwrites it with the earlier decision.
                d.unwrap_or_else(|| self.idle(inputs[i], &keys[i], achievable[i], None, 0.0))
            })
            .collect()
    }

    /// Alg. 1 and Alg. 2 for flow `f` (key `key`, B_f `b`) around the bookings of other hosts
    /// (its path's feedback) and of the local flows planned before it (`local`).
    fn decide(
        &self,
        f: &FlowInput,
        key: &PrecedenceKey,
        b: f64,
        local: &LocalBookings,
        scratch: &mut Scratch,
    ) -> FlowDecision {
        let tau = self.config.slots.tau_secs();
        let remaining = f.remaining_bytes.max(0.0);
        if remaining <= BYTE_EPSILON || !remaining.is_finite() {
            return self.idle(f, key, b, Some(0), f.sent_bytes);
        }
        scratch.view_of(f, local);
        let k = scratch.slots.len().max(1);
        let usable_links = f.path.iter().filter(|l| usable(l));
        slot_allocation::path_prices(
            usable_links
                .clone()
                .zip(scratch.view.chunks_exact(k))
                .map(|(l, v)| (l.capacity, v)),
            b,
            &mut scratch.slots,
        );
        let slots = &scratch.slots;
        let bottleneck = usable_links.map(|l| l.capacity).fold(b, f64::min);
        let eta = self.config.eta;
        let sched = slot_allocation::schedule(remaining, tau, slots, bottleneck, eta);
        let planned = sched.rates[0];
        let sent = f.sent_bytes.max(0.0);
        let adj = dependency::adjust(&f.dependency, sent, planned, slots[0].cap, remaining, tau);
        let (plan, completion) = if adj.rate == planned {
            (sched.rates, sched.completion)
        } else {
            // Alg. 2 moved slot n: Alg. 1 plans the rest over the slots after it.
            let left = remaining - adj.rate * tau;
            let rest = slot_allocation::schedule(left, tau, &slots[1..], bottleneck, eta);
            let mut plan = Vec::with_capacity(slots.len());
            plan.push(adj.rate);
            plan.extend_from_slice(&rest.rates);
            let completion = if rest.completion == Some(0) {
                Some(usize::from(adj.rate > 0.0))
            } else {
                rest.completion.map(|c| c + 1)
            };
            (plan, completion)
        };
        FlowDecision {
            id: f.id.clone(),
            key: key.clone(),
            rate: adj.rate,
            progress: sent + adj.rate * tau,
            plan,
            planned_rate: planned,
            achievable: b,
            boost: adj.boost,
            reduction: adj.reduction,
            completion,
            done: false,
        }
    }

    /// A decision that sends nothing: done (`completion` `Some(0)`) or a placeholder.
    fn idle(
        &self,
        f: &FlowInput,
        key: &PrecedenceKey,
        b: f64,
        completion: Option<usize>,
        progress: f64,
    ) -> FlowDecision {
        FlowDecision {
            id: f.id.clone(),
            key: key.clone(),
            rate: 0.0,
            plan: vec![0.0; self.config.slots.horizon()],
            planned_rate: 0.0,
            progress,
            achievable: b,
            boost: 0.0,
            reduction: 0.0,
            completion,
            done: completion == Some(0),
        }
    }
}
