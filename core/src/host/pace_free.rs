//! Pacing beyond the plan, up to what is free in slot n ([`PolicyConfig::pace_free_capacity`]):
//! an idle flow (it books nothing), a flow whose plan ends in this slot (Alg. 1 spreads its
//! last bytes over the whole slot, which holds the iteration's end — and the next compute —
//! back by up to τ) and, on standby ([`PolicyConfig::standby_pace`]), a finished flow (its next
//! iteration may start before the next slot). Bookings stay as planned: what others plan
//! around is unchanged, and the extra only uses capacity nobody booked for slot n. Such flows
//! share each link's free capacity evenly: an idle PS worker's pushes to both servers start
//! together, and each taking the whole free uplink would overrun it twice over (paced flows do
//! not back off on loss). With [`Fill::Scavenge`] every flow holding bytes beyond its plan does
//! the same.

use std::sync::Arc;

use super::config::{Fill, PolicyConfig};
use super::local::Local;
use crate::hash::Map;
use crate::planner::{FlowDecision, FlowInput, LinkFeedback, links_crossed};
use crate::topology::LinkId;

/// What this host's flows do on each link this slot.
struct LocalLoad<'a> {
    /// Per link: what local flows planned for slot n, and how many local flows use it.
    now: Map<LinkId, f64>,
    flows: Map<LinkId, f64>,
    /// Per link, the flows pacing into its free capacity; per (job, link), the bytes its
    /// finished flows on standby moved in their iteration.
    sharing: Map<LinkId, f64>,
    standby_sharing: Map<(&'a Arc<str>, LinkId), f64>,
}

/// The rate each flow is paced at beyond its plan, or `None` where it keeps its plan.
pub(super) fn rates(
    cfg: &PolicyConfig,
    flows: &[Local<'_>],
    inputs: &[FlowInput],
    decisions: &[FlowDecision],
    idle: &[bool],
) -> Vec<Option<f64>> {
    let mut pace_at = vec![None; inputs.len()];
    if !cfg.pace_free_capacity {
        return pace_at;
    }
    // Idle flows are planned as done (they book nothing): standby is the finished rest.
    let standby: Vec<bool> = decisions
        .iter()
        .zip(idle)
        .map(|(d, &idle)| cfg.standby_pace && d.done && !idle)
        .collect();
    let tau = cfg.slots.tau_secs();
    let wider: Vec<bool> = decisions
        .iter()
        .zip(flows)
        .zip(idle.iter().zip(&standby))
        .map(|((d, f), (&idle, &standby))| {
            idle || d.ends_this_slot() || standby || scavenges(cfg, f, d, tau)
        })
        .collect();
    let load = LocalLoad::new(flows, inputs, decisions, &wider, &standby);
    for (i, _) in wider.iter().enumerate().filter(|(_, w)| **w) {
        let d = &decisions[i];
        let own = d.plan.first().copied().unwrap_or(0.0).max(0.0);
        let extra = inputs[i]
            .path
            .iter()
            .map(|l| {
                if standby[i] {
                    load.standby_room(flows, decisions, i, l)
                } else {
                    load.free_share(l)
                }
            })
            .fold(f64::INFINITY, f64::min);
        pace_at[i] = Some((own + extra).min(d.achievable).max(d.rate).max(0.0));
    }
    pace_at
}

/// Whether `f` scavenges beyond its plan `d` ([`Fill::Scavenge`]): it holds more than the plan
/// sends this slot (without a backlog count, assume so).
fn scavenges(cfg: &PolicyConfig, f: &Local<'_>, d: &FlowDecision, tau: f64) -> bool {
    cfg.fill == Fill::Scavenge
        && !d.done
        && f.obs.app_backlog.is_none_or(|b| b > d.rate.max(0.0) * tau)
}

impl<'a> LocalLoad<'a> {
    fn new(
        flows: &[Local<'a>],
        inputs: &[FlowInput],
        decisions: &[FlowDecision],
        wider: &[bool],
        standby: &[bool],
    ) -> Self {
        let links = links_crossed(flows.iter().map(|f| f.obs.links.len()));
        let mut load = LocalLoad {
            now: crate::hash::map_with_capacity(links),
            flows: crate::hash::map_with_capacity(links),
            sharing: crate::hash::map_with_capacity(links),
            standby_sharing: Map::default(),
        };
        for (f, d) in flows.iter().zip(decisions) {
            let r = d.plan.first().copied().unwrap_or(0.0).max(0.0);
            for l in &f.obs.links {
                *load.now.entry(l.link).or_default() += r;
                *load.flows.entry(l.link).or_default() += 1.0;
            }
        }
        for (i, _) in wider.iter().enumerate().filter(|(_, w)| **w) {
            for l in &inputs[i].path {
                if standby[i] {
                    let job = &flows[i].obs.job;
                    *load.standby_sharing.entry((job, l.link)).or_default() +=
                        standby_weight(&flows[i]);
                } else {
                    *load.sharing.entry(l.link).or_default() += 1.0;
                }
            }
        }
        load
    }

    /// What `l` has free in slot n, evenly shared among the flows pacing into it.
    fn free_share(&self, l: &LinkFeedback) -> f64 {
        let booked = external_now(l) + self.now.get(&l.link).copied().unwrap_or(0.0);
        (l.capacity - booked).max(0.0) / self.sharing.get(&l.link).copied().unwrap_or(1.0)
    }

    /// What `l` leaves finished flow `i` on standby: what remains after the local flows that
    /// outrank it, as the next plan would give it (split among its job's finished flows on the
    /// link by the bytes each moved in its iteration: a flow Gloo's connection makes back from
    /// a ring's receiver moves next to nothing, and an even split halved the ring flow's restart
    /// beside it). Lower-ranked flows yield from the next slot; until then the restart overbooks
    /// them by this much, paced, where released it burst at line rate. Never below an even
    /// share of the link among this host's flows on it, what kernel TCP would give the
    /// restart: at the leftover alone, a job whose own flows held the link restarted at the
    /// rate floor, and PS-Lite's request/response rounds crawled behind it.
    fn standby_room(
        &self,
        flows: &[Local<'_>],
        decisions: &[FlowDecision],
        i: usize,
        l: &LinkFeedback,
    ) -> f64 {
        let d = &decisions[i];
        let higher: f64 = flows
            .iter()
            .zip(decisions)
            .filter(|(g, e)| e.key < d.key && g.obs.links.iter().any(|x| x.link == l.link))
            .map(|(_, e)| e.plan.first().copied().unwrap_or(0.0).max(0.0))
            .sum();
        let w = standby_weight(&flows[i]);
        let all = self
            .standby_sharing
            .get(&(&flows[i].obs.job, l.link))
            .copied()
            .unwrap_or(w);
        let even = l.capacity / self.flows.get(&l.link).copied().unwrap_or(1.0);
        let left = (l.capacity - external_now(l) - higher).max(0.0);
        (left * w / all).max(even)
    }
}

/// A finished flow's claim on its job's standby room: the bytes it moved in its iteration (at
/// least one, so that flows that moved nothing share evenly among themselves).
fn standby_weight(f: &Local<'_>) -> f64 {
    f.obs.sent_bytes.max(1.0)
}

/// What other hosts booked (and committed) on `l` for slot n.
fn external_now(l: &LinkFeedback) -> f64 {
    l.load
        .first()
        .copied()
        .filter(|x| x.is_finite())
        .unwrap_or(0.0)
        .max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    #[test]
    fn a_flow_whose_plan_ends_this_slot_paces_into_what_is_free() {
        let t = topo();
        let f = flow(&t, "r", "h1", "h2", FlowRole::Ring, 3.0 * MB);
        let on = one(cfg(), 1, &f);
        let planned = 3.0 * MB / TAU;
        assert!((on.decision.rate - planned).abs() < 1.0);
        assert_eq!(paced(on.enforce), USABLE);
        // Off (and flush-tail off, which would order the held 3 MB at the path's rate itself).
        let off = without("pace-free").with_rule("flush-tail", false).unwrap();
        assert!((paced(one(off, 1, &f).enforce) - planned).abs() < 1.0);
    }

    #[test]
    fn a_finished_flow_stands_by_at_what_higher_ranked_flows_leave_instead_of_being_released() {
        let t = topo();
        // Job b is between iterations (done); job a, which outranks it, gets 40 % of the uplink
        // (its downlink is 60 % booked); job c, ranked below b, books the rest.
        let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 30.0 * MB);
        a.job_progress = job(10_000_000, 0, 3);
        a.links[1].answer = Answer::Load(vec![0.6 * CAP; 10]);
        let mut b = flow(&t, "b", "h1", "h3", FlowRole::Ring, 0.0);
        b.app_backlog = Some(0.0);
        b.job_progress = job(100_000_000, 0, 3);
        let mut c = flow(&t, "c", "h1", "h4", FlowRole::Ring, 30.0 * MB);
        c.job_progress = job(100_000_000, 0, 30);
        let run = |cfg: PolicyConfig| {
            let out = HostPolicy::new(cfg).step(Slot(10), &[a.clone(), b.clone(), c.clone()]);
            let a_rate = out.flows[0].decision.rate;
            (a_rate, out.flows[1].enforce, out.flows[1].booking.clone())
        };
        let (a_rate, on, booking) = run(cfg());
        assert!(
            a_rate > 0.0 && a_rate < CAP,
            "a gets part of the uplink: {a_rate}"
        );
        assert!(
            booking.is_withdraw(),
            "a finished flow books nothing: {booking:?}"
        );
        // Standing by, b may restart at what a leaves, not at what a and c leave (nothing).
        assert!(
            (paced(on) - (USABLE - a_rate)).abs() < 1.0,
            "{on:?}, a at {a_rate}"
        );
        let (_, off, _) = run(without("standby"));
        assert_eq!(
            off,
            Enforce::Release,
            "without standby a finished flow is released"
        );
        // Where a takes the whole uplink, b stands by at an even share of it (three flows), not at
        // the rate floor.
        let mut a = a.clone();
        a.links[1].answer = Answer::Load(vec![0.0; 10]);
        let out = HostPolicy::new(cfg()).step(Slot(10), &[a, b.clone(), c.clone()]);
        assert!(
            (out.flows[0].decision.rate - USABLE).abs() < 1.0,
            "a takes the uplink"
        );
        let even = paced(out.flows[1].enforce);
        assert!((even - USABLE / 3.0).abs() < 1.0, "b stands by at {even}");
    }

    #[test]
    fn a_finished_flow_that_moved_nothing_leaves_its_jobs_standby_room_to_the_one_that_did() {
        let t = topo();
        // Gloo's rank on h1 sends its ring to h3 and only receives from h2 over the connection
        // it opened there: both groups are flows of the job, between iterations.
        let finished = |dst: &str, sent: f64| {
            let mut f = flow(&t, "g", "h1", dst, FlowRole::Ring, 0.0);
            f.app_backlog = Some(0.0);
            f.sent_bytes = sent;
            f
        };
        let ring = finished("h3", 29.0 * MB);
        let back = finished("h2", 1500.0);
        let out = HostPolicy::new(cfg()).step(Slot(10), &[ring.clone(), back.clone()]);
        let (r, b) = (paced(out.flows[0].enforce), paced(out.flows[1].enforce));
        assert!(
            r > 0.99 * USABLE,
            "the ring flow restarts at the uplink: {r}"
        );
        // The other keeps the even share any flow gets (it sends nothing with it).
        assert!((b - USABLE / 2.0).abs() < 1.0, "{b}");
        // Two flows that moved the same share the room evenly, as before.
        let out = HostPolicy::new(cfg()).step(Slot(10), &[ring.clone(), finished("h2", 29.0 * MB)]);
        assert!((paced(out.flows[0].enforce) - USABLE / 2.0).abs() < 1.0);
    }
}
