//! Prometheus metrics of mlcc-switchd (`mlcc_` prefix), served as text on their own HTTP port
//! so that scraping never queues behind gRPC traffic.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: &'static str,
    /// gRPC status code name, "ok" on success.
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub method: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SessionEndLabels {
    /// "closed" (the client ended it), "malformed", "unread" (too many replies unread),
    /// "shutdown".
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LinkLabels {
    pub link: String,
}

/// Every metric the switch exports.
pub struct Metrics {
    registry: Registry,
    pub rpcs: Family<RpcLabels, Counter>,
    pub rpc_seconds: Family<MethodLabels, Histogram>,
    pub items: Family<MethodLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub link_entries: Family<LinkLabels, Gauge>,
    pub link_load: Family<LinkLabels, Gauge<f64, AtomicU64>>,
    pub slot: Gauge,
    pub tick_late_seconds: Histogram,
    pub sessions_open: Gauge,
    pub sessions_ended: Family<SessionEndLabels, Counter>,
    pub session_expired: Family<MethodLabels, Counter>,
}

fn latency_histogram() -> Histogram {
    // 10 µs .. ~0.3 s: a slot's whole budget is 60 ms; the target for one call is < 1 ms.
    Histogram::new(exponential_buckets(1e-5, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mlcc");
        let rpcs = Family::<RpcLabels, Counter>::default();
        let rpc_seconds = Family::<MethodLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let items = Family::<MethodLabels, Counter>::default();
        let rejected = Family::<RejectLabels, Counter>::default();
        let link_entries = Family::<LinkLabels, Gauge>::default();
        let link_load = Family::<LinkLabels, Gauge<f64, AtomicU64>>::default();
        let slot = Gauge::default();
        let tick_late_seconds = latency_histogram();
        let sessions_open = Gauge::default();
        let sessions_ended = Family::<SessionEndLabels, Counter>::default();
        let session_expired = Family::<MethodLabels, Counter>::default();
        registry.register(
            "switch_rpcs",
            "gRPC calls served, by method and status",
            rpcs.clone(),
        );
        registry.register(
            "switch_rpc_duration_seconds",
            "Time spent handling a call or session message (decode to reply), by method",
            rpc_seconds.clone(),
        );
        registry.register(
            "switch_items",
            "Flow items carried by calls, by method",
            items.clone(),
        );
        registry.register(
            "switch_rejected_items",
            "Flow items refused, by method and reason",
            rejected.clone(),
        );
        registry.register(
            "switch_link_entries",
            "Flows booked on a link",
            link_entries.clone(),
        );
        registry.register(
            "switch_link_load_bytes_per_sec",
            "Load booked on a link for the current slot",
            link_load.clone(),
        );
        registry.register(
            "switch_slot",
            "The switch's current slot index",
            slot.clone(),
        );
        registry.register(
            "switch_tick_late_seconds",
            "How late the slot tick ran after the slot boundary",
            tick_late_seconds.clone(),
        );
        registry.register(
            "switch_sessions_open",
            "Session streams open now",
            sessions_open.clone(),
        );
        registry.register(
            "switch_sessions_ended",
            "Session streams ended, by reason",
            sessions_ended.clone(),
        );
        registry.register(
            "switch_session_expired_messages",
            "Session messages read after their deadline, answered DEADLINE_EXCEEDED and not \
             applied, by method",
            session_expired.clone(),
        );
        Metrics {
            registry,
            rpcs,
            rpc_seconds,
            items,
            rejected,
            link_entries,
            link_load,
            slot,
            tick_late_seconds,
            sessions_open,
            sessions_ended,
            session_expired,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
