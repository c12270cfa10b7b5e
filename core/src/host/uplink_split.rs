//! A job's flows leaving this host over the same first link split it in proportion to what
//! each has left ([`PolicyConfig::split_uplink`]), as Varys does within a coflow (MADD), so
//! they finish together. Planned one after the other, every PS worker sends to the same server
//! first — each host plans with last slot's bookings — and that server's downlink is overrun
//! while the next one idles (measured on the testbed: a PS push took 5-6 slots where 3 carry
//! it).

use std::sync::Arc;

use super::config::PolicyConfig;
use super::local::Local;
use crate::hash::Map;
use crate::planner::LinkFeedback;
use crate::topology::LinkId;

/// Bytes left per (job, first link) among the flows that are not idle.
pub(super) struct UplinkSplit<'a> {
    left: Map<(&'a Arc<str>, LinkId), f64>,
}

impl<'a> UplinkSplit<'a> {
    pub fn new(cfg: &PolicyConfig, flows: &[Local<'a>], idle: &[bool]) -> Self {
        let mut left = Map::default();
        if cfg.split_uplink {
            left.reserve(flows.len());
            for (f, &idle) in flows.iter().zip(idle) {
                if let Some(first) = f.obs.links.first()
                    && !idle
                    && f.remaining > 0.0
                {
                    *left.entry((&f.obs.job, first.link)).or_default() += f.remaining;
                }
            }
        }
        UplinkSplit { left }
    }

    /// The ceiling on `f`'s rate (over `path`, as planned): its share of its first link, or
    /// none (infinite) where it shares it with no flow of its job.
    pub fn cap(&self, f: &Local<'_>, path: &[LinkFeedback], idle: bool) -> f64 {
        let Some(first) = path.first().filter(|_| !idle) else {
            return f64::INFINITY;
        };
        match self.left.get(&(&f.obs.job, first.link)) {
            Some(&all) if all > f.remaining => first.capacity * f.remaining / all,
            _ => f64::INFINITY,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::host::testing::*;

    #[test]
    fn a_jobs_flows_from_one_host_split_the_uplink_by_what_they_have_left() {
        let t = topo();
        let flows = [
            flow(&t, "p", "h1", "h3", FlowRole::Agg, 30.0 * MB),
            flow(&t, "p", "h1", "h4", FlowRole::Agg, 10.0 * MB),
        ];
        let on = HostPolicy::new(cfg()).step(Slot(1), &flows);
        let (a, b) = (on.flows[0].decision.rate, on.flows[1].decision.rate);
        assert!(
            (a - 0.75 * USABLE).abs() < 1.0 && (b - 0.25 * USABLE).abs() < 1.0,
            "{a} {b}"
        );
        let off = HostPolicy::new(without("split-uplink")).step(Slot(1), &flows);
        // One after the other: the first takes the uplink, the second waits a slot.
        assert_eq!(off.flows[0].decision.rate, USABLE);
        assert_eq!(off.flows[1].decision.rate, 0.0);
    }
}
