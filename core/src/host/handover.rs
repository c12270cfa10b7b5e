//! Hand-overs within a slot: a flow that ends in this slot sends its last bytes first, at
//! what its path-mates were given, and hands the path back when it is done.
//!
//! Alg. 1 plans rates per slot, so a flow with x bytes left and a path-mate that booked the
//! rest of the slot is planned at x/τ: its last byte leaves at the slot's end, and its
//! iteration's end (and the next compute) waits for it, up to a whole slot later than the path
//! could have carried it. Every hand-over between two alike jobs costs that (testbed
//! `micro-two-jobs`: each job's last ring bytes spread over the slot beside the other's first,
//! so the iteration ended at the slot's end, 0.72 s against 0.68 s).
//!
//! Local flows on the same links in the same order (a path group) can swap their order within
//! the slot without any link seeing a different load: the group's total stays what the slot's
//! orders gave it. The ending flows take that total first, less a trickle their path-mates keep
//! (Linux stamps each packet's departure at the old rate, so a mate held at the rate floor
//! would leave its first packet ~23 ms after it was raised), then the mates take it all. Each
//! flow's bytes in the slot stay what its slot order gives it, so the load tables and a driver
//! that paces only per slot (the simulator's fluid physics) are unaffected.

use super::config::PolicyConfig;
use super::local::Local;
use super::out::Enforce;
use crate::hash::Map;
use crate::planner::{FlowDecision, FlowInput, LinkFeedback};

/// Share of the path group's orders its mates keep, between them, while the ending flows go
/// first: 5 % of a 1 Gbit/s link is 6 MB/s, a burst of 2 segments every half millisecond, so a
/// mate raised at the hand-over sends within a millisecond.
pub const HANDOVER_TRICKLE_SHARE: f64 = 0.05;

/// The ending flows must be done within this share of the slot for a hand-over to be worth
/// ordering twice in a slot.
const HANDOVER_MAX_SHARE: f64 = 0.9;

/// A flow's orders within one slot: `first` (bytes/s) for `for_secs` after the slot's orders
/// take effect, then `then` for the rest of the slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Handover {
    pub first: f64,
    pub for_secs: f64,
    pub then: f64,
}

/// One local flow as the hand-over sees it.
#[derive(Clone, Debug)]
struct Member<'a> {
    /// Its links in order: flows hand over only to flows on the very same links, and the
    /// group sends at most the narrowest one's capacity.
    path: &'a [LinkFeedback],
    /// Its slot order (bytes/s); `None` where it is released, idle or on standby (it keeps its
    /// order and is no part of a hand-over).
    rate: Option<f64>,
    /// Its plan ends in this slot and it holds all it has left.
    ending: bool,
    remaining: f64,
    /// Its lowest order (the rate floor of its connections).
    floor: f64,
}

/// The hand-overs of this slot's flows ([`PolicyConfig::handover`]), one per flow (`None`: the
/// slot order alone).
pub(super) fn of_flows(
    cfg: &PolicyConfig,
    flows: &[Local<'_>],
    inputs: &[FlowInput],
    decisions: &[FlowDecision],
    enforces: &[Enforce],
    idle: &[bool],
) -> Vec<Option<Handover>> {
    if !cfg.handover {
        return vec![None; flows.len()];
    }
    let members: Vec<Member<'_>> = flows
        .iter()
        .zip(decisions)
        .zip(enforces)
        .enumerate()
        .map(|(i, ((f, d), e))| Member {
            path: &inputs[i].path,
            rate: match e {
                Enforce::Pace(r) if !idle[i] && !d.done => Some(*r),
                _ => None,
            },
            ending: d.ends_this_slot() && f.holds_all(),
            remaining: f.remaining,
            floor: cfg.floor_of(f.obs.connections),
        })
        .collect();
    plan(&members, cfg.slots.tau_secs())
}

/// A path as a map key: its links, compared and hashed without copying them.
struct PathKey<'a>(&'a [LinkFeedback]);

impl PartialEq for PathKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(other.0).all(|(x, y)| x.link == y.link)
    }
}

impl Eq for PathKey<'_> {}

impl std::hash::Hash for PathKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.iter().for_each(|l| l.link.hash(state));
    }
}

/// The members that send (a positive rate on a known path), grouped by the links of their
/// paths, groups in order of first appearance; a map finds each member's group (a scan of the
/// groups was quadratic in a host's flows when each is on its own path).
fn path_groups<'a>(members: &[Member<'a>]) -> Vec<(&'a [LinkFeedback], Vec<usize>)> {
    let mut groups: Vec<(&'a [LinkFeedback], Vec<usize>)> = Vec::new();
    let mut group_of: Map<PathKey<'a>, usize> = crate::hash::map_with_capacity(members.len());
    for (i, m) in members.iter().enumerate() {
        if m.rate.is_none_or(|r| r <= 0.0) || m.path.is_empty() {
            continue;
        }
        match group_of.get(&PathKey(m.path)) {
            Some(&g) => groups[g].1.push(i),
            None => {
                group_of.insert(PathKey(m.path), groups.len());
                groups.push((m.path, vec![i]));
            }
        }
    }
    groups
}

/// The hand-overs of one host's flows this slot, one per member (`None`: the slot order alone).
fn plan(members: &[Member<'_>], tau: f64) -> Vec<Option<Handover>> {
    let mut out = vec![None; members.len()];
    let groups = path_groups(members);
    // A hand-over needs a flow that ends and a mate on its path: a flow alone on its path has
    // none, and is passed over before its group is split.
    for (path, g) in groups.into_iter().filter(|(_, g)| g.len() > 1) {
        let rate = |i: usize| members[i].rate.unwrap_or(0.0);
        let (ending, mates): (Vec<usize>, Vec<usize>) =
            g.into_iter().partition(|&i| members[i].ending);
        if ending.is_empty() || mates.is_empty() {
            continue;
        }
        let capacity = path
            .iter()
            .map(|l| l.capacity)
            .fold(f64::INFINITY, f64::min);
        let total = ending
            .iter()
            .chain(&mates)
            .map(|&i| rate(i))
            .sum::<f64>()
            .min(capacity);
        let each = HANDOVER_TRICKLE_SHARE * total / mates.len() as f64;
        let trickle = |i: usize| each.max(members[i].floor).min(rate(i));
        let kept: f64 = mates.iter().map(|&i| trickle(i)).sum();
        let first = total - kept;
        let left: f64 = ending.iter().map(|&i| members[i].remaining.max(0.0)).sum();
        if !(first > 0.0 && left > 0.0) {
            continue;
        }
        let for_secs = left / first;
        if for_secs >= HANDOVER_MAX_SHARE * tau {
            continue;
        }
        let mates_rate: f64 = mates.iter().map(|&i| rate(i)).sum();
        for &i in &ending {
            out[i] = Some(Handover {
                first: first * members[i].remaining.max(0.0) / left,
                for_secs,
                // Not done when the slot's orders said (the path delivered less): the rest
                // leaves at the slot order, as it would have without the hand-over.
                then: rate(i),
            });
        }
        for &i in &mates {
            out[i] = Some(Handover {
                first: trickle(i),
                for_secs,
                then: total * rate(i) / mates_rate,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::*;

    const TAU: f64 = 0.06;

    fn member(path: &[LinkFeedback], rate: f64, ending: bool, remaining: f64) -> Member<'_> {
        Member {
            path,
            rate: Some(rate),
            ending,
            remaining,
            floor: 125e3,
        }
    }

    /// A path over `links`, each of 100 MB/s.
    fn path(links: &[u32]) -> Vec<LinkFeedback> {
        links
            .iter()
            .map(|&l| LinkFeedback {
                link: LinkId(l),
                capacity: 100e6,
                load: Vec::new(),
            })
            .collect()
    }

    /// The map finds the groups a scan would, in the same order: 40 paths, every fourth flow
    /// back on the first path or on the one before it.
    #[test]
    fn many_paths_group_as_a_scan_would() {
        let paths: Vec<Vec<LinkFeedback>> = (0..40).map(|i| path(&[0, i])).collect();
        let mut order = Vec::new();
        for i in 0..40usize {
            order.push(i);
            if i % 4 == 3 {
                order.push(if i % 8 == 3 { 0 } else { i - 1 });
            }
        }
        let members: Vec<Member<'_>> = order
            .iter()
            .map(|&p| member(&paths[p], 1e6, false, 1e6))
            .collect();
        let got = path_groups(&members);
        let mut want: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, &p) in order.iter().enumerate() {
            match want.iter_mut().find(|(q, _)| *q == p as u32) {
                Some((_, g)) => g.push(i),
                None => want.push((p as u32, vec![i])),
            }
        }
        assert_eq!(want.len(), 40);
        let got: Vec<(u32, Vec<usize>)> = got.into_iter().map(|(p, g)| (p[1].link.0, g)).collect();
        assert_eq!(got, want);
    }

    /// Bytes a flow sends in the slot at its hand-over orders.
    fn bytes(h: &Handover) -> f64 {
        h.first * h.for_secs + h.then * (TAU - h.for_secs)
    }

    #[test]
    fn the_ending_flow_goes_first_and_every_flow_keeps_its_slot_bytes() {
        let p = path(&[1, 2]);
        // a: 3 MB left, planned at 50 MB/s; b booked the other 50 MB/s of a 100 MB/s path.
        let h = plan(
            &[member(&p, 50e6, true, 3e6), member(&p, 50e6, false, 20e6)],
            TAU,
        );
        let (a, b) = (h[0].unwrap(), h[1].unwrap());
        // a at 95 MB/s is done in 31.6 ms, not 60.
        assert!((a.first - 95e6).abs() < 1.0, "{a:?}");
        assert!((a.for_secs - 3e6 / 95e6).abs() < 1e-9, "{a:?}");
        assert!(
            (b.first - 5e6).abs() < 1.0 && (b.then - 100e6).abs() < 1.0,
            "{b:?}"
        );
        // The path carries 100 MB/s throughout, and b sends its 3 MB in the slot as before.
        assert!((a.first + b.first - 100e6).abs() < 1.0);
        assert!((a.first * a.for_secs - 3e6).abs() < 1.0);
        assert!((bytes(&b) - 50e6 * TAU).abs() < 1.0, "{}", bytes(&b));
    }

    #[test]
    fn flows_on_other_links_and_slots_without_an_ending_flow_keep_their_orders() {
        let (p, q) = (path(&[1, 2]), path(&[1, 3]));
        // Same uplink, other downlink: swapping would overrun the mate's downlink.
        let h = plan(
            &[member(&q, 50e6, true, 3e6), member(&p, 50e6, false, 20e6)],
            TAU,
        );
        assert_eq!(h, vec![None, None]);
        // Nobody ends this slot.
        let h = plan(
            &[member(&p, 50e6, false, 3e6), member(&p, 50e6, false, 20e6)],
            TAU,
        );
        assert_eq!(h, vec![None, None]);
        // The ending flow would not be done much before the slot's end anyway.
        let h = plan(
            &[member(&p, 90e6, true, 5.4e6), member(&p, 10e6, false, 20e6)],
            TAU,
        );
        assert_eq!(h, vec![None, None]);
        // A flow without an order (released, idle, on standby) is no part of it.
        let mut idle = member(&p, 50e6, false, 20e6);
        idle.rate = None;
        assert_eq!(
            plan(&[member(&p, 50e6, true, 3e6), idle], TAU),
            vec![None, None]
        );
    }

    #[test]
    fn two_ending_flows_share_the_path_by_what_they_have_left_and_finish_together() {
        let p = path(&[7]);
        let h = plan(
            &[
                member(&p, 20e6, true, 1e6),
                member(&p, 40e6, true, 2e6),
                member(&p, 40e6, false, 9e6),
            ],
            TAU,
        );
        let (a, b, c) = (h[0].unwrap(), h[1].unwrap(), h[2].unwrap());
        assert_eq!(a.for_secs, b.for_secs);
        assert!((a.first * a.for_secs - 1e6).abs() < 1.0);
        assert!((b.first * b.for_secs - 2e6).abs() < 1.0);
        assert!((c.then - 100e6).abs() < 1.0, "{c:?}");
        // A path whose orders exceed its capacity (a flushed tail) is handed over at capacity.
        let h = plan(
            &[member(&p, 100e6, true, 1e6), member(&p, 60e6, false, 9e6)],
            TAU,
        );
        let (a, b) = (h[0].unwrap(), h[1].unwrap());
        assert!((a.first + b.first - 100e6).abs() < 1.0 && (b.then - 100e6).abs() < 1.0);
    }

    #[test]
    fn a_flow_ending_this_slot_goes_first_on_its_path_and_hands_it_back() {
        let t = topo();
        // Two jobs' ring flows on the same links, h1 -> h2: a holds its last 2 MB, b has 30 MB.
        let mut a = flow(&t, "a", "h1", "h2", FlowRole::Ring, 2.0 * MB);
        a.app_backlog = Some(2.0 * MB);
        let b = flow(&t, "b", "h1", "h2", FlowRole::Ring, 30.0 * MB);
        let step = |cfg: PolicyConfig, b: &FlowObs| {
            HostPolicy::new(cfg)
                .step(Slot(1), &[a.clone(), b.clone()])
                .flows
        };
        // Without flush-tail, which would order a's tail at the path's rate on its own.
        let base = without("flush-tail");
        let on = step(base, &b);
        let (ha, hb) = (on[0].handover.unwrap(), on[1].handover.unwrap());
        // The slot orders share the path as Alg. 1 planned it: a spread over the whole slot.
        let (ra, rb) = (paced(on[0].enforce), paced(on[1].enforce));
        assert!((ra * TAU - 2.0 * MB).abs() < 1.0, "a {ra}");
        // a goes first at nearly all of it and is through in 21 ms; b keeps a trickle, then has
        // the whole path; each sends in the slot what its slot order gives it.
        assert!((ha.first + hb.first - (ra + rb)).abs() < 1.0);
        assert!((ha.first * ha.for_secs - 2.0 * MB).abs() < 1.0);
        assert!(ha.for_secs < 0.022, "{ha:?}");
        assert_eq!(ha.for_secs, hb.for_secs);
        assert!(
            hb.first < 0.06 * (ra + rb) && (hb.then - (ra + rb)).abs() < 1.0,
            "{hb:?}"
        );
        let bytes = |h: Handover| h.first * h.for_secs + h.then * (TAU - h.for_secs);
        assert!((bytes(hb) - rb * TAU).abs() < 1.0, "{}", bytes(hb));
        // Off, or on another downlink (swapping would move load between downlinks): no hand-over.
        let off = step(base.with_rule("handover", false).unwrap(), &b);
        assert!(off.iter().all(|f| f.handover.is_none()));
        assert_eq!(paced(off[0].enforce), ra);
        let other = flow(&t, "b", "h1", "h3", FlowRole::Ring, 30.0 * MB);
        assert!(step(base, &other).iter().all(|f| f.handover.is_none()));
        // Not ending: bytes the sender does not hold yet.
        let mut waiting = a.clone();
        waiting.app_backlog = Some(1.0 * MB);
        let out = HostPolicy::new(cfg())
            .step(Slot(1), &[waiting, b.clone()])
            .flows;
        assert!(out.iter().all(|f| f.handover.is_none()));
    }
}
