//! Prometheus metrics of mlccd (`mlcc_` prefix), on their own HTTP port so scraping never waits
//! behind the slot loop.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
