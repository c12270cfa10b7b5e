//! What mlccd's services read and its slot loop writes, and the daemon's clock: kept apart
//! from the loop (`daemon`) so that the Admin service and the switch sessions depend on this
//! state, not on the loop that owns them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlcc_core::Slot;
use mlcc_core::topology::{NodeKind, Topology};
use mlcc_daemon::clock::{Clock, SystemClock};
use mlcc_proto::v1 as pb;

use crate::host::{FeedbackAnswers, HostScheduler};
use crate::metrics::Metrics;

/// Added to this daemon's clock: `--clock-offset-ms`, to rehearse a host with a skewed clock
/// (CLOCK_REALTIME cannot be set per network namespace).
static CLOCK_OFFSET_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Shifts [`now_ns`] by `ns` for the rest of the process: fault rehearsal only.
pub fn set_clock_offset(ns: i64) {
    CLOCK_OFFSET_NS.store(ns, std::sync::atomic::Ordering::Relaxed);
}

/// Realtime nanoseconds, shifted by the rehearsal offset: slots are absolute (docs/design.md §3).
pub fn now_ns() -> u64 {
    SystemClock
        .now_ns()
        .saturating_add_signed(CLOCK_OFFSET_NS.load(std::sync::atomic::Ordering::Relaxed))
}

/// What one switch looked like from here.
#[derive(Clone, Debug, Default)]
pub struct SwitchView {
    pub address: String,
    pub skew_slots: i64,
    /// The least clock difference (switch minus here, ns) consistent with the last reply: 0
    /// when the switch's slot was one this host's clock passed through while the call ran.
    pub skew_ns: i64,
    pub last_reply_slot: u64,
    pub failed_calls: u64,
    /// The slot of the first call of the current outage that failed; `None` while it answers.
    pub silent_since: Option<Slot>,
    pub last_rtt: Duration,
}

impl SwitchView {
    /// Whether the last call answered.
    pub fn reachable(&self) -> bool {
        self.silent_since.is_none()
    }
}

/// State the services read and the loop writes.
pub struct Shared {
    pub host: Mutex<HostScheduler>,
    pub metrics: Arc<Metrics>,
    pub status: Mutex<LoopStatus>,
    pub started: Instant,
    pub enforcing: bool,
}

#[derive(Default)]
pub struct LoopStatus {
    pub last_work: Duration,
    /// Work of the last minute of slots, for the p99 in `mlccctl status`.
    pub recent_work: VecDeque<Duration>,
    pub degraded: Vec<String>,
    pub switches: BTreeMap<String, SwitchView>,
    /// The headers of this slot's readable progress files: the local members of each job,
    /// listed by `ListJobs` even before (or without) any flow.
    pub local_processes: Vec<crate::progress::ProgressHeader>,
    /// The processes with no progress file being learned, with their confidence.
    pub learned: Vec<crate::learned::LearnedStatus>,
    /// The last [`HISTORY_SLOTS`] slots: what the switches answered and what was published, so
    /// an overbooked link can be traced to a degraded slot, a race, or a fault.
    pub history: VecDeque<SlotRecord>,
}

impl LoopStatus {
    /// After a topology change: forgets the switches `topo` no longer has (or no longer
    /// emulates), so none is reported or probed as silent, and takes each kept one's address
    /// from it.
    pub fn keep_switches_of(&mut self, topo: &Topology) {
        self.switches.retain(|name, v| {
            let node = topo.node_by_name(name).map(|n| &topo.node(n).kind);
            match node {
                Some(NodeKind::Switch {
                    emulator: Some(address),
                    ..
                }) => {
                    v.address.clone_from(address);
                    true
                }
                _ => false,
            }
        });
    }
}

/// How many slots of [`SlotRecord`] are kept.
pub const HISTORY_SLOTS: usize = 32;

/// One slot as this host lived it.
#[derive(Clone, Debug)]
pub struct SlotRecord {
    pub slot: Slot,
    /// Switches that answered FetchFeedback in time, with their answers.
    pub answers: FeedbackAnswers,
    /// Switches on active paths that did not answer in time (planned as unbooked: degraded).
    pub silent_switches: Vec<String>,
    /// What was published per switch this slot.
    pub schedules: BTreeMap<String, Vec<pb::ScheduleItem>>,
    /// Switches that acknowledged this slot's UpdateSchedule in time, with the realtime (ns) the
    /// acknowledgement came back; to the others, the update may have arrived late or not at all.
    /// Filled in as the acknowledgements come, after the record is made.
    pub published: Vec<(String, u64)>,
    /// Realtime (ns) when the FetchFeedback calls went out and when the last one was settled:
    /// the switches served them in between. A late loop runs a slot's work after its end.
    pub fetch_ns: (u64, u64),
    /// Realtime (ns) when the UpdateSchedule calls went out.
    pub publish_ns: u64,
}

impl LoopStatus {
    /// The record of `slot`, if still kept.
    pub fn record_of(&self, slot: Slot) -> Option<&SlotRecord> {
        self.history.iter().rev().find(|r| r.slot == slot)
    }

    /// The record of `slot`, if still kept, to complete as the slot's calls are answered.
    pub fn record_of_mut(&mut self, slot: Slot) -> Option<&mut SlotRecord> {
        self.history.iter_mut().rev().find(|r| r.slot == slot)
    }
}

impl Shared {
    pub fn host(&self) -> MutexGuard<'_, HostScheduler> {
        self.host.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn status(&self) -> MutexGuard<'_, LoopStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlcc_core::topology::TopologyBuilder;
    use mlcc_core::units::parse_rate;

    #[test]
    fn a_new_topology_forgets_the_switches_it_dropped_and_moves_the_ones_it_readdressed() {
        let mut b = TopologyBuilder::new();
        b.add_switch("tor1", 0, Some("10.9.0.1:50070".into()));
        b.add_switch("tor2", 0, None);
        b.add_host("h1", Some("10.0.0.1".parse().unwrap()), None);
        b.add_duplex("h1", "tor1", parse_rate("1Gbit").unwrap());
        b.add_duplex("h1", "tor2", parse_rate("1Gbit").unwrap());
        let topo = b.build().unwrap();
        let mut st = LoopStatus::default();
        for (name, address) in [("tor1", "10.9.0.9:1"), ("tor2", "x:1"), ("gone", "y:1")] {
            let v = SwitchView {
                address: address.into(),
                silent_since: Some(Slot(7)),
                ..SwitchView::default()
            };
            st.switches.insert(name.into(), v);
        }
        st.keep_switches_of(&topo);
        // tor2 is no longer emulated, "gone" no longer exists; tor1 moved.
        assert_eq!(st.switches.keys().collect::<Vec<_>>(), ["tor1"]);
        assert_eq!(st.switches["tor1"].address, "10.9.0.1:50070");
        assert_eq!(st.switches["tor1"].silent_since, Some(Slot(7)));
    }
}
