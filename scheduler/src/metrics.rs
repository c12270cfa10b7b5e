//! Prometheus metrics of mlccd (`mlcc_` prefix), on their own HTTP port so scraping never waits
//! behind the slot loop.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use mlcc_core::FlowId;
use mlcc_core::hash;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// "fetch_feedback", "update_schedule", "exchange".
    pub method: &'static str,
    /// Switch or peer host name.
    pub target: String,
    /// "ok", "timeout" or "error".
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub flow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    /// "switch_unreachable", "peer_unreachable", "datapath_dry_run", "datapath_error".
    pub mode: &'static str,
}

pub type FloatGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    registry: Registry,
    pub slot: Gauge,
    pub slot_seconds: Histogram,
    pub decision_seconds: Histogram,
    pub slot_late_seconds: Histogram,
    pub rpc_seconds: Family<RpcLabels, Histogram>,
    pub planned: Family<FlowLabels, FloatGauge>,
    pub achieved: Family<FlowLabels, FloatGauge>,
    pub retransmits: Family<FlowLabels, Gauge>,
    pub queue_loss: Family<FlowLabels, Gauge>,
    pub flows: Gauge,
    pub degraded: Family<ModeLabels, Gauge>,
    pub degraded_slots: Family<ModeLabels, Counter>,
    pub skew_slots: Family<TargetLabels, Gauge>,
    pub skew_seconds: Family<TargetLabels, FloatGauge>,
    pub handovers: Counter,
    pub handovers_dropped: Counter,
    pub orders_lapsed: Counter,
    pub orders_lapsed_seconds: Counter<f64, AtomicU64>,
    pub ssthresh_repairs: Gauge,
}

fn latency() -> Histogram {
    // 10 µs .. ~0.3 s: the slot is 60 ms, the per-slot work budget 5 ms.
    Histogram::new(exponential_buckets(1e-5, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("mlcc");
        let m = Metrics {
            slot: Gauge::default(),
            slot_seconds: latency(),
            decision_seconds: latency(),
            slot_late_seconds: latency(),
            rpc_seconds: Family::new_with_constructor(latency as fn() -> Histogram),
            planned: Family::default(),
            achieved: Family::default(),
            retransmits: Family::default(),
            queue_loss: Family::default(),
            flows: Gauge::default(),
            degraded: Family::default(),
            degraded_slots: Family::default(),
            skew_slots: Family::default(),
            skew_seconds: Family::default(),
            handovers: Counter::default(),
            handovers_dropped: Counter::default(),
            orders_lapsed: Counter::default(),
            orders_lapsed_seconds: Counter::default(),
            ssthresh_repairs: Gauge::default(),
            registry: Registry::default(),
        };
        r.register("sched_slot", "Current slot index", m.slot.clone());
        r.register(
            "sched_slot_work_seconds",
            "Slot loop work excluding waits on the network",
            m.slot_seconds.clone(),
        );
        r.register(
            "sched_decision_seconds",
            "Observe + plan time of one slot",
            m.decision_seconds.clone(),
        );
        r.register(
            "sched_slot_late_seconds",
            "How late the slot loop woke after the slot boundary",
            m.slot_late_seconds.clone(),
        );
        r.register(
            "sched_rpc_seconds",
            "Switch and peer call latency by method, target and outcome",
            m.rpc_seconds.clone(),
        );
        r.register(
            "sched_flow_planned_bytes_per_sec",
            "Rate ordered for the current slot, per flow",
            m.planned.clone(),
        );
        r.register(
            "sched_flow_achieved_bytes_per_sec",
            "Rate acked over the last slot, per flow",
            m.achieved.clone(),
        );
        r.register(
            "sched_flow_retransmitted_segments",
            "Segments retransmitted since mlccd first saw the flow's sockets, per flow",
            m.retransmits.clone(),
        );
        r.register(
            "sched_flow_queue_loss_segments",
            "Of those, segments lost while a queue stood on the path (srtt >= 2 ms above its \
             minimum): under mlcc, loss from an overbooked link",
            m.queue_loss.clone(),
        );
        r.register("sched_flows", "Local flow groups", m.flows.clone());
        r.register(
            "sched_degraded",
            "Degraded modes in force (1) by mode",
            m.degraded.clone(),
        );
        r.register(
            "sched_degraded_slots",
            "Slots planned in a degraded mode, by mode",
            m.degraded_slots.clone(),
        );
        r.register(
            "sched_clock_skew_slots",
            "Switch slot minus this host's slot in the last reply",
            m.skew_slots.clone(),
        );
        r.register(
            "sched_clock_skew_seconds",
            "Switch clock minus this host's, from the last stamped reply (within half its RTT); \
             beyond τ/4 the flows through that switch are left to kernel TCP",
            m.skew_seconds.clone(),
        );
        r.register(
            "sched_handovers",
            "Times a slot's orders changed mid-slot: flows that end in the slot went first and \
             gave their path back to the local flows on the same links",
            m.handovers.clone(),
        );
        r.register(
            "sched_handovers_dropped",
            "Slots that ended before their hand-overs were due (the next slot's orders replaced \
             them)",
            m.handovers_dropped.clone(),
        );
        r.register(
            "sched_orders_lapsed",
            "Times the slot loop renewed its rate orders only after they had expired (it fell \
             behind by more than order_expiry slots): the flows ran on the fallback CC meanwhile",
            m.orders_lapsed.clone(),
        );
        r.register(
            "sched_orders_lapsed_seconds",
            "Time the flows' rate orders had expired before the slot loop renewed them",
            m.orders_lapsed_seconds.clone(),
        );
        r.register(
            "datapath_ssthresh_repairs",
            "Sockets' ssthresh values the CC found above anything the kernel sets (a stale word \
             the struct_ops trampoline handed back instead of the ssthresh program's answer) and \
             repaired, since the datapath was loaded",
            m.ssthresh_repairs.clone(),
        );
        Metrics { registry: r, ..m }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What one local flow's gauges show for the slot just planned.
pub struct FlowReading {
    pub planned: f64,
    /// None until a slot's delivery has been measured: the gauge appears only then.
    pub achieved: Option<f64>,
    pub retransmits: u64,
    pub queue_loss: u64,
}

/// Each local flow's gauges, looked up in their families once, when the flow first appears, and
/// removed from them once it is gone: a scrape lists the flows the host has now (not every flow
/// it ever had, which on a cluster running jobs for weeks grew without end), and a slot sets the
/// gauges without building and hashing a label per flow and family.
#[derive(Default)]
pub struct FlowGauges {
    by_flow: hash::Map<FlowId, OneFlow>,
}

struct OneFlow {
    labels: FlowLabels,
    planned: FloatGauge,
    achieved: Option<FloatGauge>,
    retransmits: Gauge,
    queue_loss: Gauge,
    seen: bool,
}

impl OneFlow {
    fn of(m: &Metrics, id: &FlowId) -> Self {
        let labels = FlowLabels {
            flow: id.to_string(),
        };
        OneFlow {
            planned: m.planned.get_or_create(&labels).clone(),
            achieved: None,
            retransmits: m.retransmits.get_or_create(&labels).clone(),
            queue_loss: m.queue_loss.get_or_create(&labels).clone(),
            labels,
            seen: true,
        }
    }

    fn set(&mut self, m: &Metrics, r: &FlowReading) {
        let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.planned.set(r.planned);
        if let Some(a) = r.achieved {
            self.achieved
                .get_or_insert_with(|| m.achieved.get_or_create(&self.labels).clone())
                .set(a);
        }
        self.retransmits.set(count(r.retransmits));
        self.queue_loss.set(count(r.queue_loss));
    }

    fn remove(&self, m: &Metrics) {
        m.planned.remove(&self.labels);
        m.achieved.remove(&self.labels);
        m.retransmits.remove(&self.labels);
        m.queue_loss.remove(&self.labels);
    }
}

impl FlowGauges {
    /// Sets the gauges of this slot's flows, removes those of flows no longer there, and sets
    /// the flow count.
    pub fn record<'a>(
        &mut self,
        m: &Metrics,
        flows: impl IntoIterator<Item = (&'a FlowId, FlowReading)>,
    ) {
        for one in self.by_flow.values_mut() {
            one.seen = false;
        }
        for (id, reading) in flows {
            let one = self
                .by_flow
                .entry(id.clone())
                .or_insert_with(|| OneFlow::of(m, id));
            one.seen = true;
            one.set(m, &reading);
        }
        self.by_flow.retain(|_, one| {
            if !one.seen {
                one.remove(m);
            }
            one.seen
        });
        m.flows
            .set(i64::try_from(self.by_flow.len()).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(planned: f64, achieved: Option<f64>) -> FlowReading {
        FlowReading {
            planned,
            achieved,
            retransmits: 3,
            queue_loss: 1,
        }
    }

    #[test]
    fn a_gone_flows_series_leave_the_scrape_and_a_flows_achieved_rate_appears_once_measured() {
        let m = Metrics::new();
        let mut gauges = FlowGauges::default();
        let (a, b) = (
            FlowId::new("job-a/h0>h1/ring").unwrap(),
            FlowId::new("job-b/h0>h2/ring").unwrap(),
        );
        gauges.record(
            &m,
            [(&a, reading(1e6, None)), (&b, reading(2e6, Some(1.5e6)))],
        );
        let text = m.encode();
        assert!(text.contains("mlcc_sched_flows 2"), "{text}");
        assert!(
            text.contains(
                r#"mlcc_sched_flow_planned_bytes_per_sec{flow="job-a/h0>h1/ring"} 1000000"#
            ),
            "{text}"
        );
        assert!(
            !text.contains(r#"achieved_bytes_per_sec{flow="job-a"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"mlcc_sched_flow_achieved_bytes_per_sec{flow="job-b/h0>h2/ring"} 1500000"#
            ),
            "{text}"
        );

        gauges.record(&m, [(&a, reading(4e6, Some(3e6)))]);
        let text = m.encode();
        assert!(text.contains("mlcc_sched_flows 1"), "{text}");
        assert!(
            !text.contains("job-b"),
            "a gone flow is still scraped:\n{text}"
        );
        assert!(
            text.contains(
                r#"mlcc_sched_flow_planned_bytes_per_sec{flow="job-a/h0>h1/ring"} 4000000"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"mlcc_sched_flow_achieved_bytes_per_sec{flow="job-a/h0>h1/ring"} 3000000"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"mlcc_sched_flow_retransmitted_segments{flow="job-a/h0>h1/ring"} 3"#),
            "{text}"
        );
    }
}
