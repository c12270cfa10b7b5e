//! mlccd's slot loop on the absolute slot grid, one slot as a sequence of named steps in the
//! manner of quinn's `ConnectionDriver::poll`: observe (progress files, sockets, datapath
//! counters) → fetch (the switches' feedback) → decide ([`HostScheduler::plan`]) → enforce
//! (orders to the datapath) → publish (schedules to the switches) and exchange (progress with
//! the peers), concurrently → record (switch views, degraded modes, metrics, history). The
//! publishes and exchanges are settled as their answers come, while the loop waits for the next
//! slot: a slot ends once they are sent, so a switch or peer slow to answer holds up neither
//! the next slot nor this slot's hand-overs.
//!
//! All decisions are [`crate::host::HostScheduler`]'s; this module only times, reads, sends and
//! records.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlcc_core::topology::Topology;
use mlcc_core::{Slot, SlotConfig};
use mlcc_proto::v1 as pb;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};

use crate::config::Config;
use crate::daemon::{Channels, Outcome, clock_offset, outcome_name, peer_address};
use crate::datapath::{DatapathPort, RateOrder, SocketKey, SocketStats};
use crate::host::{
    FeedbackAnswers, FeedbackRequests, Observation, ProcessObs, SlotPlan, SwitchBatch,
};
use crate::learned::{LearnedProcesses, LearnedStatus};
use crate::metrics::{ModeLabels, RpcLabels, TargetLabels};
use crate::monitor::ProgressDir;
use crate::peers::{self, PeerStreams};
use crate::session::{Session, SessionFailure, Sessions};
use crate::sockets::{DatapathSockets, SocketSource};
use crate::state::{HISTORY_SLOTS, Shared, SlotRecord, SwitchView, now_ns};
use mlcc_core::learn::LearnerConfig;
use pb::session_reply::Reply as SessionReply;
use pb::session_request::Request as SessionRequest;

/// A switch's FetchFeedback this slot: name, address, outcome (its slot), round trip, and its
/// clock minus ours if the reply said.
type SwitchCall = (String, String, Outcome<u64>, Duration, Option<i64>);

/// The loop and what it keeps from one slot to the next.
pub(crate) struct SlotLoop {
    cfg: Config,
    topo: Arc<Topology>,
    shared: Arc<Shared>,
    datapath: DatapathPort,
    sockets: Box<dyn SocketSource>,
    progress: ProgressDir,
    /// `None` with --learn off.
    learned: Option<LearnedProcesses>,
    channels: Channels,
    sessions: Sessions,
    peers: PeerStreams,
    last_slot: Option<Slot>,
    datapath_failed: bool,
    /// Last slot's datapath sockets, as [`DatapathSockets::since`] sums them.
    datapath_print: Option<u64>,
    /// Each switch's clock minus ours, as last measured.
    clock_offsets: HashMap<String, i64>,
    /// This slot's hand-overs not yet carried out: when, and the orders then.
    handovers: Vec<(Instant, Vec<RateOrder>)>,
    /// UpdateSchedule and Exchange calls sent and not yet settled, of this slot or earlier ones.
    in_flight: JoinSet<Answer>,
    /// Until when the rate orders written last hold.
    orders_hold: OrderClock,
    flow_gauges: crate::metrics::FlowGauges,
}

/// Where a slot's time went: `work` excludes the waits on the network, `decide` is the
/// scheduler's own share of it.
#[derive(Default)]
struct Work {
    work: Duration,
    decide: Duration,
}

/// What a slot's FetchFeedback calls brought back.
struct Fetched {
    answers: FeedbackAnswers,
    switches: Vec<SwitchCall>,
    /// When the calls went out and when the last one was settled (realtime ns).
    window: (u64, u64),
}

/// What a call the loop did not wait for brought back.
enum Answer {
    /// One switch's UpdateSchedule of `slot`, and when the reply came back (realtime ns).
    Published {
        slot: Slot,
        switch: String,
        outcome: Outcome<pb::UpdateScheduleReply>,
        rtt: Duration,
        at_ns: u64,
    },
    /// One peer's Exchange.
    Exchanged {
        peer: String,
        outcome: Outcome<pb::ExchangeReply>,
        rtt: Duration,
    },
}

/// One switch's FetchFeedback: name, address, outcome and round trip, and its clock minus ours
/// where the reply said.
type FetchedOne = (
    String,
    String,
    (Outcome<pb::FetchFeedbackReply>, Duration),
    Option<i64>,
);

impl SlotLoop {
    pub(crate) fn new(
        cfg: Config,
        channels: Channels,
        topo: Arc<Topology>,
        shared: Arc<Shared>,
        datapath: DatapathPort,
        sockets: Box<dyn SocketSource>,
    ) -> Self {
        SlotLoop {
            progress: ProgressDir::with_policy(cfg.shm_dir.clone(), cfg.progress.clone()),
            learned: cfg.learn.then(|| {
                LearnedProcesses::new(
                    LearnerConfig::default(),
                    &cfg.host,
                    cfg.policy.slots.tau_ns(),
                )
                .reading_environ(cfg.learn_environ)
            }),
            cfg,
            topo,
            shared,
            datapath,
            sockets,
            channels,
            sessions: Sessions::default(),
            peers: PeerStreams::default(),
            last_slot: None,
            datapath_failed: false,
            datapath_print: None,
            clock_offsets: HashMap::new(),
            handovers: Vec::new(),
            in_flight: JoinSet::new(),
            orders_hold: OrderClock::default(),
            flow_gauges: Default::default(),
        }
    }

    fn slots(&self) -> SlotConfig {
        self.cfg.policy.slots
    }

    /// Runs slots until `stop` is set, settling the calls in flight as their answers come.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            let wait = self.until_next_event();
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                Some(answer) = self.in_flight.join_next(), if !self.in_flight.is_empty() => {
                    self.settle(answer);
                    continue;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            let woke = now_ns();
            let slot = self.slots().slot_at(woke);
            if self.last_slot == Some(slot) {
                self.hand_over();
                continue;
            }
            self.start_slot(slot, woke);
            self.slot(slot).await;
        }
    }

    /// Until the next slot boundary or the next hand-over due.
    fn until_next_event(&self) -> Duration {
        let now = now_ns();
        let slots = self.slots();
        let next = slots.start_ns(slots.slot_at(now).plus(1));
        let mut wait = Duration::from_nanos(next.saturating_sub(now));
        if let Some(at) = self.handovers.iter().map(|(at, _)| *at).min() {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        wait
    }

    /// Carries out the hand-overs due by now.
    fn hand_over(&mut self) {
        let now = Instant::now();
        let due: Vec<RateOrder> = self
            .handovers
            .extract_if(.., |(at, _)| *at <= now)
            .flat_map(|(_, orders)| orders)
            .collect();
        if !due.is_empty() {
            self.shared.metrics.handovers.inc();
            if let Err(e) = self.datapath.set_rates(&due) {
                tracing::warn!("datapath set (hand-over): {e}");
            }
        }
    }

    /// A new slot: last slot's hand-overs are dropped, a late wake-up is counted.
    fn start_slot(&mut self, slot: Slot, woke: u64) {
        let m = &self.shared.metrics;
        if !self.handovers.is_empty() {
            m.handovers_dropped.inc();
            self.handovers.clear();
        }
        if let Some(prev) = self.last_slot
            && slot.0 > prev.0 + 1
        {
            tracing::warn!(missed = slot.0 - prev.0 - 1, "slot loop fell behind");
        }
        self.last_slot = Some(slot);
        m.slot.set(slot.0 as i64);
        let late = woke.saturating_sub(self.slots().start_ns(slot));
        m.slot_late_seconds.observe(late as f64 * 1e-9);
    }

    /// One slot, step by step; its publishes and exchanges are settled later, in [`Self::run`].
    async fn slot(&mut self, slot: Slot) {
        let mut w = Work::default();
        let t = Instant::now();
        let req = self.observe(slot, &mut w);
        w.work += t.elapsed();
        let fetched = self.fetch(slot, req).await;
        let t = Instant::now();
        let mut plan = self.decide(&fetched);
        w.decide += t.elapsed();
        self.enforce(&mut plan);
        // The schedules are kept in the slot's record as published; the batches themselves,
        // and the peers' progress, go out without another copy.
        let schedules = std::mem::take(&mut plan.schedules);
        let published_items = schedules
            .iter()
            .map(|(k, b)| (k.clone(), b.items.clone()))
            .collect();
        let publish_ns = self.publish(slot, schedules);
        self.exchange(slot, std::mem::take(&mut plan.peers));
        w.work += t.elapsed();
        // On a current-thread runtime (mlccd's default) the calls go out only once this task
        // yields: before the records, not after them.
        tokio::task::yield_now().await;
        let t = Instant::now();
        self.record_switches(slot, fetched.switches, fetched.window);
        self.record_degraded(&plan);
        self.record_flows();
        self.record_repairs();
        w.work += t.elapsed();
        let record = SlotRecord {
            slot,
            answers: fetched.answers,
            silent_switches: plan.silent_switches,
            schedules: published_items,
            published: Vec::new(),
            fetch_ns: fetched.window,
            publish_ns,
        };
        self.record_slot(w, record);
    }

    /// Progress files, their processes' connections and the datapath's counters, into the
    /// scheduler: the feedback to fetch.
    fn observe(&mut self, slot: Slot, w: &mut Work) -> FeedbackRequests {
        self.poll_progress_dir();
        let stats = self.read_stats();
        let keys = stats.as_deref().map(|s| s.iter().map(|(k, _)| k));
        self.sockets
            .next_slot(DatapathSockets::since(&mut self.datapath_print, keys));
        self.sockets.datapath_stats(stats.as_deref());
        let mut processes = self.read_processes();
        let (learned, learning) = self.learn(slot, &processes, stats.as_deref());
        {
            let mut status = self.shared.status();
            // Copied for operators only when a process came, went or changed.
            let headers = processes.iter().map(|p| &p.header);
            if !headers.clone().eq(&status.local_processes) {
                status.local_processes = headers.cloned().collect();
            }
            status.learned = learning;
        }
        processes.extend(learned);
        let t = Instant::now();
        let req = self
            .shared
            .host()
            .observe(slot, &Observation { processes, stats });
        w.decide += t.elapsed();
        req
    }

    /// The processes with no progress file learned with confidence, as if they had one, and
    /// every process followed, for operators.
    fn learn(
        &mut self,
        slot: Slot,
        known: &[ProcessObs],
        stats: Option<&[(SocketKey, SocketStats)]>,
    ) -> (Vec<ProcessObs>, Vec<LearnedStatus>) {
        let Some(learned) = self.learned.as_mut() else {
            return (Vec::new(), Vec::new());
        };
        let me = self.topo.node_by_name(&self.cfg.host);
        let topo = &self.topo;
        let mine = |a: &std::net::SocketAddr| me.is_some() && topo.host_by_ip(a.ip()) == me;
        let heard = self.shared.host().take_heard_labels();
        let out = learned.step(slot, known, stats, &mine, self.sockets.as_ref(), &heard);
        (out, learned.status())
    }

    fn poll_progress_dir(&mut self) {
        match self.progress.poll() {
            Ok(r) => {
                for p in &r.added {
                    tracing::info!(path = %p.display(), "following progress file");
                }
                for p in &r.removed {
                    tracing::info!(path = %p.display(), "progress file gone");
                }
                for e in &r.refused {
                    tracing::warn!("skipping progress file: {e}");
                }
            }
            Err(e) => {
                let dir = self.progress.dir().display();
                tracing::warn!(%dir, "cannot list progress files: {e}")
            }
        }
    }

    /// Every readable progress file with its process's connections.
    fn read_processes(&mut self) -> Vec<ProcessObs> {
        let mut processes = Vec::new();
        for r in self.progress.read() {
            match r {
                Ok(p) => {
                    if p.stale {
                        tracing::debug!(path = %p.path.display(), "writer busy: last slot's counters");
                    }
                    let conns = self.sockets.connections(p.header.pid).unwrap_or_else(|e| {
                        tracing::debug!(pid = p.header.pid, "cannot list sockets: {e}");
                        Vec::new()
                    });
                    processes.push(ProcessObs {
                        header: p.header.clone(),
                        snapshot: p.snapshot,
                        conns,
                    });
                }
                Err(e) => tracing::debug!("{e}"),
            }
        }
        processes
    }

    /// The datapath's counters, or none where it cannot be read (planning goes on from the
    /// progress files alone).
    fn read_stats(&mut self) -> Option<Vec<(SocketKey, SocketStats)>> {
        match self.datapath.read_stats() {
            Ok(s) => {
                if self.datapath_failed {
                    tracing::info!("datapath readable again");
                    self.datapath_failed = false;
                }
                Some(s)
            }
            Err(e) => {
                if !self.datapath_failed {
                    tracing::error!("datapath: {e}; planning from progress files only");
                    self.datapath_failed = true;
                }
                None
            }
        }
    }

    /// FetchFeedback from every switch on active paths, in parallel, each with its deadline,
    /// and an empty one to each silent switch whose probe is due.
    async fn fetch(&mut self, slot: Slot, mut req: FeedbackRequests) -> Fetched {
        let deadline = self.cfg.rpc_deadline;
        let start = now_ns();
        self.probe_unreachable(slot, &mut req);
        let mut calls = Vec::new();
        for (name, batch) in req.per_switch {
            let addr = batch.address.clone();
            let channels = &mut self.channels;
            let Some(sess) = self.sessions.get(&addr, || channels.get(&addr, deadline)) else {
                continue;
            };
            let req = SessionRequest::FetchFeedback(pb::FetchFeedbackRequest {
                host: self.cfg.host.clone(),
                slot: slot.0,
                flows: batch.items,
            });
            calls.push(tokio::spawn(fetch_one(sess, req, deadline, name, addr)));
        }
        let mut fetched = Fetched {
            answers: HashMap::new(),
            switches: Vec::new(),
            window: (start, start),
        };
        for c in calls {
            let Ok((name, addr, (out, rtt), offset)) = c.await else {
                continue;
            };
            self.observe_rpc("fetch_feedback", &name, outcome_name(&out), rtt);
            let o = match out {
                Outcome::Ok(r) => {
                    let s = r.switch_slot;
                    fetched.answers.insert(name.clone(), r);
                    Outcome::Ok(s)
                }
                Outcome::Timeout => Outcome::Timeout,
                Outcome::Error(e) => Outcome::Error(e),
            };
            if let Some(o) = offset {
                self.clock_offsets.insert(name.clone(), o);
            }
            fetched.switches.push((name, addr, o, rtt, offset));
        }
        fetched.window.1 = now_ns();
        fetched
    }

    /// An empty call to each switch whose last call failed and that no flow asks this slot, so
    /// that its return is seen when it answers, not when a flow next needs it.
    fn probe_unreachable(&self, slot: Slot, req: &mut FeedbackRequests) {
        let status = self.shared.status();
        let due = |v: &SwitchView| v.silent_since.is_some_and(|since| probe_due(since, slot));
        for (name, v) in status.switches.iter().filter(|(_, v)| due(v)) {
            req.per_switch
                .entry(name.clone())
                .or_insert_with(|| SwitchBatch {
                    address: v.address.clone(),
                    items: Vec::new(),
                });
        }
    }

    /// The scheduler's plan with the switches' answers. Plans are booked by slot number: with a
    /// switch whose clock is off by more than τ/4, this host's slots and everyone else's no
    /// longer line up.
    fn decide(&mut self, fetched: &Fetched) -> SlotPlan {
        let slots = self.slots();
        let unsynced: BTreeSet<String> = self
            .clock_offsets
            .iter()
            .filter(|(_, o)| slots.is_skewed(**o))
            .map(|(n, _)| n.clone())
            .collect();
        let mut host = self.shared.host();
        host.set_unsynced_switches(unsynced);
        host.plan(&fetched.answers)
    }

    /// Rate orders to the datapath; the plan's hand-overs are due from now.
    fn enforce(&mut self, plan: &mut SlotPlan) {
        if !plan.clear.is_empty()
            && let Err(e) = self.datapath.clear_rates(&plan.clear)
        {
            tracing::warn!("datapath clear: {e}");
        }
        if !plan.orders.is_empty()
            && let Err(e) = self.datapath.set_rates(&plan.orders)
        {
            tracing::warn!("datapath set: {e}");
        }
        let ordered = Instant::now();
        if let Some(lapsed) = self.orders_hold.renewed(ordered, &plan.orders) {
            let m = &self.shared.metrics;
            m.orders_lapsed.inc();
            m.orders_lapsed_seconds.inc_by(lapsed.as_secs_f64());
            let lapsed_ms = lapsed.as_secs_f64() * 1e3;
            tracing::warn!(
                lapsed_ms,
                "rate orders renewed after they expired: the flows ran on the fallback CC meanwhile"
            );
        }
        self.handovers = std::mem::take(&mut plan.handovers)
            .into_iter()
            .map(|(after, orders)| (ordered + after, orders))
            .collect();
    }

    /// UpdateSchedule to every switch the plan books on, in parallel; when they went out.
    fn publish(
        &mut self,
        slot: Slot,
        schedules: BTreeMap<String, SwitchBatch<pb::ScheduleItem>>,
    ) -> u64 {
        let deadline = self.cfg.rpc_deadline;
        let at_ns = now_ns();
        for (switch, batch) in schedules {
            let addr = batch.address.clone();
            let channels = &mut self.channels;
            let Some(sess) = self.sessions.get(&addr, || channels.get(&addr, deadline)) else {
                continue;
            };
            let req = SessionRequest::UpdateSchedule(pb::UpdateScheduleRequest {
                host: self.cfg.host.clone(),
                slot: slot.0,
                flows: batch.items,
            });
            self.in_flight.spawn(async move {
                let (outcome, rtt, _) = session_call(&sess, req, deadline, |r| match r {
                    SessionReply::UpdateSchedule(r) => Some(r),
                    _ => None,
                })
                .await;
                Answer::Published {
                    slot,
                    switch,
                    outcome,
                    rtt,
                    at_ns: now_ns(),
                }
            });
        }
        at_ns
    }

    /// Exchange with every peer this host's flows go to, in parallel, each on its stream.
    fn exchange(&mut self, slot: Slot, peers: Vec<(String, Vec<pb::FlowProgress>)>) {
        let deadline = self.cfg.rpc_deadline;
        for (peer, flows) in peers {
            let Some(addr) = peer_address(&self.cfg, &self.topo, &peer) else {
                continue;
            };
            let Some(ch) = self.channels.get(&addr, deadline) else {
                continue;
            };
            let route = self.peers.route(&addr, slot.0, ch);
            let req = pb::ExchangeRequest {
                sender_host: self.cfg.host.clone(),
                slot: slot.0,
                flows,
            };
            self.in_flight.spawn(async move {
                let (outcome, rtt) = peers::exchange(route, req, deadline).await;
                Answer::Exchanged { peer, outcome, rtt }
            });
        }
    }

    /// A call's answer, as it comes: a peer's progress into the scheduler (or the peer marked
    /// silent), a switch's acknowledgement into its slot's record.
    fn settle(&mut self, answer: Result<Answer, JoinError>) {
        match answer {
            Ok(Answer::Published {
                slot,
                switch,
                outcome,
                rtt,
                at_ns,
            }) => {
                self.observe_rpc("update_schedule", &switch, outcome_name(&outcome), rtt);
                if let Outcome::Ok(r) = &outcome {
                    if let Some(first) = r.rejected.first() {
                        let rejected = r.rejected.len();
                        tracing::warn!(%switch, rejected, first = %first.message, "schedule items refused");
                    }
                    if let Some(rec) = self.shared.status().record_of_mut(slot) {
                        rec.published.push((switch, at_ns));
                    }
                }
            }
            Ok(Answer::Exchanged { peer, outcome, rtt }) => {
                self.observe_rpc("exchange", &peer, outcome_name(&outcome), rtt);
                match outcome {
                    Outcome::Ok(r) => self.shared.host().on_exchange_reply(&peer, &r.flows),
                    _ => self.shared.host().on_exchange_failed(&peer),
                }
            }
            Err(e) => tracing::error!("a call to a switch or peer failed to finish: {e}"),
        }
    }

    fn observe_rpc(
        &self,
        method: &'static str,
        target: &str,
        outcome: &'static str,
        rtt: Duration,
    ) {
        self.shared
            .metrics
            .rpc_seconds
            .get_or_create(&RpcLabels {
                method,
                target: target.to_string(),
                outcome,
            })
            .observe(rtt.as_secs_f64());
    }

    /// Each switch's view from this slot's calls: reachable or not, its slot and clock skew.
    fn record_switches(&self, slot: Slot, switches: Vec<SwitchCall>, window: (u64, u64)) {
        let m = &self.shared.metrics;
        let slots = self.slots();
        let mut st = self.shared.status();
        for (name, addr, out, rtt, offset) in switches {
            let v = st.switches.entry(name.clone()).or_default();
            v.address = addr;
            v.last_rtt = rtt;
            let was_skewed = slots.is_skewed(v.skew_ns);
            if let Some(o) = offset {
                v.skew_ns = o;
            }
            match out {
                Outcome::Ok(switch_slot) => {
                    if v.silent_since.take().is_some() {
                        tracing::info!(switch = %name, "switch answers again");
                    }
                    v.last_reply_slot = switch_slot;
                    v.skew_slots = switch_slot as i64 - slot.0 as i64;
                    let target = TargetLabels {
                        target: name.clone(),
                    };
                    m.skew_slots.get_or_create(&target).set(v.skew_slots);
                    // A switch that does not stamp its replies bounds the skew by its slot only.
                    if offset.is_none() {
                        v.skew_ns = skew_from_slot(slots, switch_slot, window);
                    }
                }
                Outcome::Timeout | Outcome::Error(_) => {
                    if v.silent_since.is_none() {
                        let why = match &out {
                            Outcome::Error(e) => e.clone(),
                            _ => format!("no answer within {:?}", self.cfg.rpc_deadline),
                        };
                        tracing::warn!(switch = %name, "switch unreachable ({why}): planning its links as unbooked");
                    }
                    v.silent_since.get_or_insert(slot);
                    v.failed_calls += 1;
                }
            }
            let skewed = slots.is_skewed(v.skew_ns);
            let skew_ms = v.skew_ns as f64 / 1e6;
            if skewed && !was_skewed {
                tracing::warn!(switch = %name, skew_ms, "clock skew above τ/4: flows through this switch fall back to kernel TCP; check chrony/PTP");
            } else if was_skewed && !skewed {
                tracing::info!(switch = %name, skew_ms, "clock skew back within τ/4: scheduling resumes");
            }
            let target = TargetLabels { target: name };
            m.skew_seconds
                .get_or_create(&target)
                .set(v.skew_ns as f64 * 1e-9);
        }
    }

    /// The degraded modes in force this slot, for `mlccctl status` and the metrics.
    fn record_degraded(&self, plan: &SlotPlan) {
        let m = &self.shared.metrics;
        let mut degraded = plan.degraded.clone();
        let enforcing = self.shared.enforcing;
        if !enforcing {
            degraded.push("datapath: dry run, nothing enforced".into());
        }
        if self.datapath_failed {
            degraded.push("datapath: unreadable, S from progress files".into());
        }
        let mut status = self.shared.status();
        let idle_silent = unreachable_unplanned(&status.switches, &plan.silent_switches);
        degraded.extend(idle_silent.iter().map(|s| {
            format!("switch {s} unreachable at its last call: no flow through it planned now")
        }));
        let modes = [
            (
                "switch_unreachable",
                !plan.silent_switches.is_empty() || !idle_silent.is_empty(),
            ),
            ("clock_skew", !plan.unsynced_switches.is_empty()),
            ("peer_unreachable", !plan.silent_peers.is_empty()),
            ("datapath_dry_run", !enforcing),
            ("datapath_error", self.datapath_failed),
        ];
        for (mode, on) in modes {
            m.degraded
                .get_or_create(&ModeLabels { mode })
                .set(i64::from(on));
            if on {
                m.degraded_slots.get_or_create(&ModeLabels { mode }).inc();
            }
        }
        status.degraded = degraded;
    }

    /// Per flow: planned and achieved rates, retransmissions.
    fn record_flows(&mut self) {
        let host = self.shared.host();
        let readings = host.flows().map(|f| {
            let reading = crate::metrics::FlowReading {
                planned: f.last_rate(),
                achieved: f.achieved,
                retransmits: f.retransmits,
                queue_loss: f.queue_loss,
            };
            (&f.id, reading)
        });
        self.flow_gauges.record(&self.shared.metrics, readings);
    }

    /// The datapath's count of stale ssthresh values repaired, with a warning when it grew: a
    /// kernel that does this sends a burst from every socket it happens to.
    fn record_repairs(&self) {
        let Ok(Some(n)) = self.datapath.ssthresh_repairs() else {
            return;
        };
        let gauge = &self.shared.metrics.ssthresh_repairs;
        let before = gauge.get();
        let now = i64::try_from(n).unwrap_or(i64::MAX);
        if now > before {
            tracing::warn!(
                "datapath repaired {} stale ssthresh value(s) ({now} since it was loaded): the \
                 kernel handed a socket an ssthresh no program returned",
                now - before
            );
        }
        gauge.set(now);
    }

    /// The slot's work and its record in the history.
    fn record_slot(&self, w: Work, record: SlotRecord) {
        let m = &self.shared.metrics;
        m.decision_seconds.observe(w.decide.as_secs_f64());
        m.slot_seconds.observe(w.work.as_secs_f64());
        let mut st = self.shared.status();
        st.last_work = w.work;
        st.recent_work.push_back(w.work);
        let keep = (60_000_000_000 / self.slots().tau_ns().max(1)) as usize;
        while st.recent_work.len() > keep.max(1) {
            st.recent_work.pop_front();
        }
        st.history.push_back(record);
        while st.history.len() > HISTORY_SLOTS {
            st.history.pop_front();
        }
    }
}

/// Until when a slot's rate orders hold in the datapath (its hand-overs, renewing some of them
/// later in the slot, are left out).
#[derive(Default)]
struct OrderClock(Option<Instant>);

impl OrderClock {
    /// A slot's `orders` written at `at`: how long the last slot's had expired by then, if they
    /// had (the loop late by more than their expiry). No orders: nothing holds.
    fn renewed(&mut self, at: Instant, orders: &[RateOrder]) -> Option<Duration> {
        let lapsed = self.0.filter(|until| at > *until).map(|until| at - until);
        self.0 = orders.iter().map(|o| o.expiry).max().map(|e| at + e);
        lapsed
    }
}

/// One switch's FetchFeedback over its session, with the switch's clock measured from the
/// reply's stamp (or a shed message's).
async fn fetch_one(
    sess: Arc<Session>,
    req: SessionRequest,
    deadline: Duration,
    name: String,
    addr: String,
) -> FetchedOne {
    let sent = now_ns();
    let (out, rtt, shed_at) = session_call(&sess, req, deadline, |r| match r {
        SessionReply::FetchFeedback(r) => Some(r),
        _ => None,
    })
    .await;
    let stamp = match &out {
        Outcome::Ok(r) => r.switch_unix_ns,
        _ => shed_at,
    };
    let offset = clock_offset(stamp, sent, now_ns());
    if let Some(o) = offset {
        sess.set_clock_offset(o);
    }
    (name, addr, (out, rtt), offset)
}

/// One session request; also the switch's clock if it shed the message (0 otherwise).
async fn session_call<T>(
    sess: &Session,
    req: SessionRequest,
    deadline: Duration,
    pick: impl FnOnce(SessionReply) -> Option<T>,
) -> (Outcome<T>, Duration, u64) {
    let t0 = Instant::now();
    let mut shed_at = 0;
    let out = match sess.request(req, deadline).await {
        Ok(r) => pick(r).map_or_else(
            || Outcome::Error("a reply of the wrong kind".into()),
            Outcome::Ok,
        ),
        Err(SessionFailure::Shed {
            why,
            switch_unix_ns,
        }) => {
            shed_at = switch_unix_ns;
            Outcome::Error(why)
        }
        Err(SessionFailure::Timeout) => Outcome::Timeout,
        Err(SessionFailure::Error(e)) => Outcome::Error(e),
    };
    (out, t0.elapsed(), shed_at)
}

/// The least clock skew (switch minus here, ns) consistent with a switch answering with slot
/// `switch_slot` at some instant of a call that ran from `sent` to `received` on our clock:
/// only a slot outside the ones this host's clock passed through in that window shows skew.
fn skew_from_slot(slots: SlotConfig, switch_slot: u64, (sent, received): (u64, u64)) -> i64 {
    let (first, last) = (slots.slot_at(sent), slots.slot_at(received));
    if switch_slot > last.0 {
        slots.start_ns(Slot(switch_slot)) as i64 - received as i64
    } else if switch_slot < first.0 {
        slots.start_ns(Slot(switch_slot + 1)) as i64 - sent as i64
    } else {
        0
    }
}

/// Switches whose last call failed and that no flow planned this slot went through: a flow
/// between its bursts asks its switches nothing, so without these an operator (or a status
/// poll) would see a dead switch only in the slots a flow happened to be planned across it.
fn unreachable_unplanned(
    switches: &BTreeMap<String, SwitchView>,
    planned_silent: &[String],
) -> Vec<String> {
    switches
        .iter()
        .filter(|(name, v)| !v.reachable() && !planned_silent.contains(name))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Slots a silent switch is probed every slot, then every [`PROBE_EVERY`]-th: a switch gone
/// for good (or on no active path any more) costs the slot's fetch a deadline's wait only now
/// and then.
const PROBE_EVERY_SLOT_FOR: u64 = 100;
const PROBE_EVERY: u64 = 32;

/// Whether a switch silent since `since` is probed in `slot`.
fn probe_due(since: Slot, slot: Slot) -> bool {
    let silent_for = slot.0.saturating_sub(since.0);
    silent_for < PROBE_EVERY_SLOT_FOR || silent_for.is_multiple_of(PROBE_EVERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_switch_is_probed_every_slot_at_first_then_now_and_then() {
        let since = Slot(1000);
        let probed = |n: u64| (0..n).filter(|i| probe_due(since, Slot(1000 + i))).count();
        assert_eq!(probed(PROBE_EVERY_SLOT_FOR), PROBE_EVERY_SLOT_FOR as usize);
        let later = probed(PROBE_EVERY_SLOT_FOR + 10 * PROBE_EVERY) - probed(PROBE_EVERY_SLOT_FOR);
        assert_eq!(
            later, 10,
            "one probe in every {PROBE_EVERY} slots after the first ones"
        );
    }

    #[test]
    fn a_switch_whose_last_call_failed_stays_degraded_while_no_flow_asks_it() {
        let view = |reachable: bool| SwitchView {
            silent_since: (!reachable).then_some(Slot(7)),
            failed_calls: 1,
            ..SwitchView::default()
        };
        let switches: BTreeMap<String, SwitchView> = [
            ("tor1".to_string(), view(false)),
            ("tor2".to_string(), view(true)),
            ("agg1".to_string(), view(false)),
        ]
        .into();
        // agg1 is already reported by the plan; tor2 answered; tor1 is silent and unplanned.
        assert_eq!(unreachable_unplanned(&switches, &["agg1".into()]), ["tor1"]);
        assert!(unreachable_unplanned(&switches, &["agg1".into(), "tor1".into()]).is_empty());
    }

    fn order(expiry_ms: u64) -> RateOrder {
        RateOrder {
            key: SocketKey::new(
                1,
                "10.0.0.1:40000".parse().unwrap(),
                "10.0.0.2:5000".parse().unwrap(),
            ),
            bytes_per_sec: 1_000_000,
            expiry: Duration::from_millis(expiry_ms),
            fill: None,
        }
    }

    #[test]
    fn orders_renewed_in_time_never_lapse_and_late_ones_lapse_by_the_time_past_their_expiry() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut clock = OrderClock::default();
        assert_eq!(clock.renewed(t0, &[order(90)]), None, "nothing held before");
        // Renewed every slot (30 ms), or late by up to the expiry: held throughout.
        assert_eq!(clock.renewed(t0 + ms(30), &[order(90)]), None);
        assert_eq!(clock.renewed(t0 + ms(120), &[order(90)]), None);
        // Four slots late: the orders written at 120 ms held until 210 ms.
        assert_eq!(clock.renewed(t0 + ms(250), &[order(90)]), Some(ms(40)));
        // The longest expiry among a slot's orders counts.
        assert_eq!(clock.renewed(t0 + ms(280), &[order(30), order(300)]), None);
        assert_eq!(clock.renewed(t0 + ms(570), &[]), None);
        // A slot with no orders leaves nothing to lapse.
        assert_eq!(clock.renewed(t0 + ms(2000), &[order(90)]), None);
    }
}
