//! The async shell of mlccd: the slot loop on the absolute slot grid, switch and peer clients
//! with deadlines, the Peer and Admin services and the metrics endpoint (DESIGN.md §10, §11).
//!
//! All decisions are [`HostScheduler`]'s; this module only times, reads, sends and records.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlcc_core::Slot;
use mlcc_core::topology::{NodeKind, Topology};
use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::admin::AdminService;
use crate::config::Config;
use crate::datapath::{DatapathPort, RateOrder};
use crate::host::{FeedbackAnswers, HostScheduler, Observation, ProcessObs, SlotPlan};
use crate::metrics::{Metrics, ModeLabels, RpcLabels, TargetLabels};
use crate::monitor::ProgressDir;
use crate::session::{Session, SessionFailure, Sessions};
use crate::sockets::SocketSource;
pub use crate::state::{
    HISTORY_SLOTS, LoopStatus, Shared, SlotRecord, SwitchView, now_ns, set_clock_offset,
};
use pb::session_reply::Reply as SessionReply;
use pb::session_request::Request as SessionRequest;

/// A running daemon.
pub struct Running {
    pub peer_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    join: JoinHandle<()>,
}

impl Running {
    /// Stops the loop and the servers. Rate orders are left to expire (≈3τ) so flows fall back
    /// to the CC's Reno gracefully instead of being released all at once.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.join).await;
    }
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Starts everything on already-bound listeners (ephemeral ports in tests).
pub async fn start(
    cfg: Config,
    topo: Topology,
    datapath: DatapathPort,
    sockets: Box<dyn SocketSource>,
    peer_listener: TcpListener,
    admin_listener: Option<UnixListener>,
    metrics_listener: Option<TcpListener>,
) -> Result<Running, String> {
    let hc = cfg.host_config();
    let topo = Arc::new(topo);
    let host = HostScheduler::new(hc, topo.clone()).map_err(|e| e.to_string())?;
    let enforcing = datapath.enforces();
    let metrics = Arc::new(Metrics::new());
    if !enforcing {
        tracing::warn!(
            "DRY RUN: datapath enforces nothing; plans are computed and published, rates are not applied"
        );
        metrics
            .degraded
            .get_or_create(&ModeLabels {
                mode: "datapath_dry_run",
            })
            .set(1);
    }
    let shared = Arc::new(Shared {
        host: Mutex::new(host),
        metrics: metrics.clone(),
        status: Mutex::new(LoopStatus::default()),
        started: Instant::now(),
        enforcing,
    });
    let peer_addr = peer_listener
        .local_addr()
        .map_err(|e| format!("peer listener: {e}"))?;
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (stop, rx) = watch::channel(false);
    let tls = cfg
        .tls
        .as_ref()
        .map(mlcc_daemon::tls::Tls::load)
        .transpose()
        .map_err(|e| format!("mTLS: {e}"))?
        .map(Arc::new);

    let peer = pb::peer_server::PeerServer::new(PeerService(shared.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let incoming =
        tonic::transport::server::TcpIncoming::from(peer_listener).with_nodelay(Some(true));
    let mut peer_server = tonic::transport::Server::builder();
    if let Some(t) = &tls {
        // Peers must present a certificate of the cluster CA; others fail the handshake.
        peer_server = t
            .apply_server(peer_server)
            .map_err(|e| format!("mTLS: {e}"))?;
    }
    let peer_task = tokio::spawn(
        peer_server
            .add_service(peer)
            .serve_with_incoming_shutdown(incoming, stopped(rx.clone())),
    );
    let admin_task = admin_listener.map(|l| {
        let svc = pb::admin_server::AdminServer::new(AdminService::new(shared.clone()));
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(l);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stopped(rx.clone())),
        )
    });
    let metrics_task = metrics_listener.map(|l| {
        let m = metrics.clone();
        tokio::spawn(mlcc_daemon::serve_metrics(
            l,
            move || m.encode(),
            stopped(rx.clone()),
        ))
    });
    let loop_task = tokio::spawn(slot_loop(
        cfg,
        tls.clone(),
        topo,
        shared.clone(),
        datapath,
        sockets,
        rx.clone(),
    ));
    let join = tokio::spawn(async move {
        let _ = loop_task.await;
        if let Ok(Err(e)) = peer_task.await {
            tracing::warn!("peer server: {e}");
        }
        if let Some(t) = admin_task
            && let Ok(Err(e)) = t.await
        {
            tracing::warn!("admin server: {e}");
        }
        if let Some(t) = metrics_task {
            let _ = t.await;
        }
    });
    tracing::info!(%peer_addr, mtls = tls.is_some(), "serving mlcc.v1.Peer");
    Ok(Running {
        peer_addr,
        metrics_addr,
        shared,
        stop,
        join,
    })
}

/// Lazily connected channels by address; a channel reconnects by itself after a failure.
/// With mTLS every channel presents this host's certificate and verifies the other side's.
#[derive(Default)]
struct Channels {
    by_addr: HashMap<String, Channel>,
    tls: Option<Arc<mlcc_daemon::tls::Tls>>,
}

impl Channels {
    fn get(&mut self, addr: &str, deadline: Duration) -> Option<Channel> {
        if let Some(c) = self.by_addr.get(addr) {
            return Some(c.clone());
        }
        let ep = match mlcc_daemon::tls::endpoint(addr, self.tls.as_deref()) {
            Ok(ep) => ep,
            Err(e) => {
                tracing::warn!("cannot dial {addr}: {e}");
                return None;
            }
        };
        let c = ep
            .connect_timeout(deadline)
            .tcp_nodelay(true)
            .connect_lazy();
        self.by_addr.insert(addr.to_string(), c.clone());
        Some(c)
    }
}

fn peer_address(cfg: &Config, topo: &Topology, host: &str) -> Option<String> {
    if let Some(a) = cfg.peers.get(host) {
        return Some(a.to_string());
    }
    let n = topo.node_by_name(host)?;
    match &topo.node(n).kind {
        NodeKind::Host { ip: Some(ip), .. } => {
            Some(SocketAddr::new(*ip, cfg.peer_port).to_string())
        }
        _ => None,
    }
}

enum Outcome<T> {
    Ok(T),
    Timeout,
    Error(String),
}

async fn call<T, F>(deadline: Duration, f: F) -> (Outcome<T>, Duration)
where
    F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let t0 = Instant::now();
    let r = match tokio::time::timeout(deadline, f).await {
        Ok(Ok(r)) => Outcome::Ok(r.into_inner()),
        Ok(Err(s)) => Outcome::Error(s.message().to_string()),
        Err(_) => Outcome::Timeout,
    };
    (r, t0.elapsed())
}

/// [`call`] over a switch's Session stream: one request, timed; a reply of another kind than
/// `pick` accepts is an error.
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

/// The switch's clock minus ours (ns) from a reply stamped `switch_ns` (0: not stamped) to a
/// call sent at `sent` and answered at `received` on our clock: exact to within half the round
/// trip, assuming the switch stamped it halfway.
fn clock_offset(switch_ns: u64, sent: u64, received: u64) -> Option<i64> {
    (switch_ns != 0).then(|| {
        let mid = sent / 2 + received / 2 + (sent % 2 + received % 2) / 2;
        (i128::from(switch_ns) - i128::from(mid)).clamp(i64::MIN.into(), i64::MAX.into()) as i64
    })
}

/// A switch's FetchFeedback this slot: name, address, outcome (its slot), round trip, and its
/// clock minus ours if the reply said.
type SwitchCall = (String, String, Outcome<u64>, Duration, Option<i64>);

fn outcome_name<T>(o: &Outcome<T>) -> &'static str {
    match o {
        Outcome::Ok(_) => "ok",
        Outcome::Timeout => "timeout",
        Outcome::Error(_) => "error",
    }
}

async fn slot_loop(
    cfg: Config,
    tls: Option<Arc<mlcc_daemon::tls::Tls>>,
    topo: Arc<Topology>,
    shared: Arc<Shared>,
    mut datapath: DatapathPort,
    sockets: Box<dyn SocketSource>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = cfg.policy.slots;
    let deadline = cfg.rpc_deadline;
    let mut progress = ProgressDir::with_policy(cfg.shm_dir.clone(), cfg.progress.clone());
    let mut channels = Channels {
        tls,
        ..Default::default()
    };
    let mut sessions = Sessions::default();
    let mut last_slot: Option<Slot> = None;
    let mut datapath_failed = false;
    // Each switch's clock minus ours, as last measured.
    let mut clock_offsets: HashMap<String, i64> = HashMap::new();
    // This slot's hand-overs not yet carried out: when, and the orders then.
    let mut handovers: Vec<(Instant, Vec<RateOrder>)> = Vec::new();
    loop {
        let now = now_ns();
        let next = slots.start_ns(slots.slot_at(now).plus(1));
        let mut wait = Duration::from_nanos(next.saturating_sub(now));
        if let Some(at) = handovers.iter().map(|(at, _)| *at).min() {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let woke = now_ns();
        let slot = slots.slot_at(woke);
        if last_slot == Some(slot) {
            let now = Instant::now();
            let due: Vec<RateOrder> = handovers
                .extract_if(.., |(at, _)| *at <= now)
                .flat_map(|(_, orders)| orders)
                .collect();
            if !due.is_empty() {
                shared.metrics.handovers.inc();
                if let Err(e) = datapath.set_rates(&due) {
                    tracing::warn!("datapath set (hand-over): {e}");
                }
            }
            continue;
        }
        if !handovers.is_empty() {
            shared.metrics.handovers_dropped.inc();
            handovers.clear();
        }
        if let Some(prev) = last_slot
            && slot.0 > prev.0 + 1
        {
            tracing::warn!(missed = slot.0 - prev.0 - 1, "slot loop fell behind");
        }
        last_slot = Some(slot);
        let m = &shared.metrics;
        m.slot.set(slot.0 as i64);
        m.slot_late_seconds
            .observe(woke.saturating_sub(slots.start_ns(slot)) as f64 * 1e-9);
        let t_work = Instant::now();

        // 1. progress files, their connections, datapath counters.
        match progress.poll() {
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
                tracing::warn!(dir = %progress.dir().display(), "cannot list progress files: {e}")
            }
        }
        sockets.next_slot();
        let mut processes = Vec::new();
        for r in progress.read() {
            match r {
                Ok(p) => {
                    if p.stale {
                        tracing::debug!(path = %p.path.display(), "writer busy: last slot's counters");
                    }
                    let conns = sockets.connections(p.header.pid).unwrap_or_else(|e| {
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
        let stats = match datapath.read_stats() {
            Ok(s) => {
                if datapath_failed {
                    tracing::info!("datapath readable again");
                    datapath_failed = false;
                }
                Some(s)
            }
            Err(e) => {
                if !datapath_failed {
                    tracing::error!("datapath: {e}; planning from progress files only");
                    datapath_failed = true;
                }
                None
            }
        };
        shared.status().local_processes = processes.iter().map(|p| p.header.clone()).collect();
        let t_decide = Instant::now();
        let req = shared.host().observe(
            slot,
            &Observation {
                processes,
                stats: stats.clone(),
            },
        );
        let mut decide = t_decide.elapsed();
        let mut work = t_work.elapsed();

        // 2. feedback from every switch on active paths, in parallel, each with its deadline.
        let fetch_start = now_ns();
        let mut calls = Vec::new();
        for (name, batch) in req.per_switch {
            let addr = batch.address.clone();
            let Some(sess) = sessions.get(&addr, || channels.get(&addr, deadline)) else {
                continue;
            };
            let host = cfg.host.clone();
            calls.push(tokio::spawn(async move {
                let req = SessionRequest::FetchFeedback(pb::FetchFeedbackRequest {
                    host,
                    slot: slot.0,
                    flows: batch.items,
                });
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
                (name, batch.address, (out, rtt), offset)
            }));
        }
        let mut answers: FeedbackAnswers = HashMap::new();
        let mut switch_updates: Vec<SwitchCall> = Vec::new();
        for c in calls {
            let Ok((name, addr, (out, rtt), offset)) = c.await else {
                continue;
            };
            m.rpc_seconds
                .get_or_create(&RpcLabels {
                    method: "fetch_feedback",
                    target: name.clone(),
                    outcome: outcome_name(&out),
                })
                .observe(rtt.as_secs_f64());
            let o = match out {
                Outcome::Ok(r) => {
                    let s = r.switch_slot;
                    answers.insert(name.clone(), r);
                    Outcome::Ok(s)
                }
                Outcome::Timeout => Outcome::Timeout,
                Outcome::Error(e) => Outcome::Error(e),
            };
            if let Some(o) = offset {
                clock_offsets.insert(name.clone(), o);
            }
            switch_updates.push((name, addr, o, rtt, offset));
        }
        let fetch_ns = (fetch_start, now_ns());
        let t_plan = Instant::now();
        // Plans are booked by slot number: with a switch whose clock is off by more than τ/4,
        // this host's slots and everyone else's no longer line up.
        let unsynced: std::collections::BTreeSet<String> = clock_offsets
            .iter()
            .filter(|(_, o)| o.unsigned_abs() > slots.tau_ns() / 4)
            .map(|(n, _)| n.clone())
            .collect();
        shared.host().set_unsynced_switches(unsynced);
        let mut plan = shared.host().plan(&answers);
        decide += t_plan.elapsed();

        // 3. rates to the datapath.
        let t_io = Instant::now();
        if !plan.clear.is_empty()
            && let Err(e) = datapath.clear_rates(&plan.clear)
        {
            tracing::warn!("datapath clear: {e}");
        }
        if !plan.orders.is_empty()
            && let Err(e) = datapath.set_rates(&plan.orders)
        {
            tracing::warn!("datapath set: {e}");
        }
        let ordered = Instant::now();
        handovers = std::mem::take(&mut plan.handovers)
            .into_iter()
            .map(|(after, orders)| (ordered + after, orders))
            .collect();
        work += t_plan.elapsed() + t_io.elapsed();

        // 4. schedules to switches and progress to peers, in parallel.
        let publish_ns = now_ns();
        let mut pubs = Vec::new();
        for (name, batch) in plan.schedules.clone() {
            let addr = batch.address.clone();
            let Some(sess) = sessions.get(&addr, || channels.get(&addr, deadline)) else {
                continue;
            };
            let host = cfg.host.clone();
            pubs.push(tokio::spawn(async move {
                let req = SessionRequest::UpdateSchedule(pb::UpdateScheduleRequest {
                    host,
                    slot: slot.0,
                    flows: batch.items,
                });
                let (out, rtt, _) = session_call(&sess, req, deadline, |r| match r {
                    SessionReply::UpdateSchedule(r) => Some(r),
                    _ => None,
                })
                .await;
                (name, (out, rtt), now_ns())
            }));
        }
        let mut exchanges = Vec::new();
        for (peer, flows) in plan.peers.clone() {
            let Some(addr) = peer_address(&cfg, &topo, &peer) else {
                continue;
            };
            let Some(ch) = channels.get(&addr, deadline) else {
                continue;
            };
            let host = cfg.host.clone();
            exchanges.push(tokio::spawn(async move {
                let mut c = pb::peer_client::PeerClient::new(ch)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                let r = call(
                    deadline,
                    c.exchange(pb::ExchangeRequest {
                        sender_host: host,
                        slot: slot.0,
                        flows,
                    }),
                )
                .await;
                (peer, r)
            }));
        }
        let mut published = Vec::new();
        for p in pubs {
            if let Ok((name, (out, rtt), acked)) = p.await {
                m.rpc_seconds
                    .get_or_create(&RpcLabels {
                        method: "update_schedule",
                        target: name.clone(),
                        outcome: outcome_name(&out),
                    })
                    .observe(rtt.as_secs_f64());
                if let Outcome::Ok(r) = &out
                    && !r.rejected.is_empty()
                {
                    tracing::warn!(switch = %name, rejected = r.rejected.len(), first = %r.rejected[0].message, "schedule items refused");
                }
                if let Outcome::Ok(_) = &out {
                    published.push((name, acked));
                }
            }
        }
        let mut silent_peers = Vec::new();
        for e in exchanges {
            if let Ok((peer, (out, rtt))) = e.await {
                m.rpc_seconds
                    .get_or_create(&RpcLabels {
                        method: "exchange",
                        target: peer.clone(),
                        outcome: outcome_name(&out),
                    })
                    .observe(rtt.as_secs_f64());
                let t = Instant::now();
                match out {
                    Outcome::Ok(r) => shared.host().on_exchange_reply(&peer, &r.flows),
                    _ => {
                        shared.host().on_exchange_failed(&peer);
                        silent_peers.push(peer);
                    }
                }
                work += t.elapsed();
            }
        }

        // Bookkeeping: switch views, degraded modes, metrics, logs.
        let t = Instant::now();
        record(
            &shared,
            &cfg,
            slot,
            &plan,
            switch_updates,
            fetch_ns,
            &silent_peers,
            datapath_failed,
            stats.is_some(),
        );
        work += t.elapsed();
        m.decision_seconds.observe(decide.as_secs_f64());
        m.slot_seconds.observe(work.as_secs_f64());
        let mut st = shared.status();
        st.last_work = work;
        st.recent_work.push_back(work);
        let keep = (60_000_000_000 / slots.tau_ns().max(1)) as usize;
        while st.recent_work.len() > keep.max(1) {
            st.recent_work.pop_front();
        }
        st.history.push_back(SlotRecord {
            slot,
            answers,
            silent_switches: plan.silent_switches.clone(),
            schedules: plan
                .schedules
                .iter()
                .map(|(k, b)| (k.clone(), b.items.clone()))
                .collect(),
            published,
            fetch_ns,
            publish_ns,
        });
        while st.history.len() > HISTORY_SLOTS {
            st.history.pop_front();
        }
        st.last_plan = Some(plan);
    }
}

#[allow(clippy::too_many_arguments)]
fn record(
    shared: &Shared,
    cfg: &Config,
    slot: Slot,
    plan: &SlotPlan,
    switches: Vec<SwitchCall>,
    fetch_ns: (u64, u64),
    silent_peers: &[String],
    datapath_failed: bool,
    _have_stats: bool,
) {
    let m = &shared.metrics;
    let tau_ns = cfg.policy.slots.tau_ns() as i64;
    let mut st = shared.status();
    for (name, addr, out, rtt, offset) in switches {
        let v = st.switches.entry(name.clone()).or_default();
        v.address = addr;
        v.last_rtt = rtt;
        let was_skewed = v.skew_ns.unsigned_abs() > tau_ns.unsigned_abs() / 4;
        if let Some(o) = offset {
            v.skew_ns = o;
        }
        match out {
            Outcome::Ok(switch_slot) => {
                if !v.reachable && v.failed_calls > 0 {
                    tracing::info!(switch = %name, "switch answers again");
                }
                v.reachable = true;
                v.last_reply_slot = switch_slot;
                v.skew_slots = switch_slot as i64 - slot.0 as i64;
                m.skew_slots
                    .get_or_create(&TargetLabels {
                        target: name.clone(),
                    })
                    .set(v.skew_slots);
                // The switch answered with the slot of its clock at some instant of the call
                // (sent..received here): only a slot outside the ones this host's clock passed
                // through in that window shows skew, and at least this much.
                // A switch that does not stamp its replies bounds the skew by its slot only.
                let (sent, received) = fetch_ns;
                let (first, last) = (
                    cfg.policy.slots.slot_at(sent),
                    cfg.policy.slots.slot_at(received),
                );
                if offset.is_none() {
                    v.skew_ns = if switch_slot > last.0 {
                        cfg.policy.slots.start_ns(Slot(switch_slot)) as i64 - received as i64
                    } else if switch_slot < first.0 {
                        cfg.policy.slots.start_ns(Slot(switch_slot + 1)) as i64 - sent as i64
                    } else {
                        0
                    };
                }
            }
            Outcome::Timeout | Outcome::Error(_) => {
                if v.reachable || v.failed_calls == 0 {
                    let why = match &out {
                        Outcome::Error(e) => e.clone(),
                        _ => format!("no answer within {:?}", cfg.rpc_deadline),
                    };
                    tracing::warn!(switch = %name, "switch unreachable ({why}): planning its links as unbooked");
                }
                v.reachable = false;
                v.failed_calls += 1;
            }
        }
        let skewed = v.skew_ns.unsigned_abs() > tau_ns.unsigned_abs() / 4;
        if skewed && !was_skewed {
            tracing::warn!(switch = %name, skew_ms = v.skew_ns as f64 / 1e6, "clock skew above τ/4: flows through this switch fall back to kernel TCP; check chrony/PTP");
        } else if was_skewed && !skewed {
            tracing::info!(switch = %name, skew_ms = v.skew_ns as f64 / 1e6, "clock skew back within τ/4: scheduling resumes");
        }
        m.skew_seconds
            .get_or_create(&TargetLabels {
                target: name.clone(),
            })
            .set(v.skew_ns as f64 * 1e-9);
    }
    let mut degraded = plan.degraded.clone();
    for p in silent_peers {
        if !degraded.iter().any(|d| d.contains(&format!("peer {p} "))) {
            degraded.push(format!("peer {p} unreachable: no dependency adjustment"));
        }
    }
    if !shared.enforcing {
        degraded.push("datapath: dry run, nothing enforced".into());
    }
    if datapath_failed {
        degraded.push("datapath: unreadable, S from progress files".into());
    }
    let modes = [
        ("switch_unreachable", !plan.silent_switches.is_empty()),
        ("clock_skew", !plan.unsynced_switches.is_empty()),
        ("peer_unreachable", !silent_peers.is_empty()),
        ("datapath_dry_run", !shared.enforcing),
        ("datapath_error", datapath_failed),
    ];
    for (mode, on) in modes {
        m.degraded
            .get_or_create(&ModeLabels { mode })
            .set(i64::from(on));
        if on {
            m.degraded_slots.get_or_create(&ModeLabels { mode }).inc();
        }
    }
    st.degraded = degraded;
    drop(st);
    let host = shared.host();
    let mut n = 0;
    for f in host.flows() {
        n += 1;
        let labels = crate::metrics::FlowLabels {
            flow: f.id.to_string(),
        };
        m.planned.get_or_create(&labels).set(f.last_rate());
        if let Some(a) = f.achieved {
            m.achieved.get_or_create(&labels).set(a);
        }
        let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        m.retransmits
            .get_or_create(&labels)
            .set(count(f.retransmits));
        m.queue_loss.get_or_create(&labels).set(count(f.queue_loss));
    }
    m.flows.set(n);
}

/// The Peer service: a flow's sender tells us its progress, we answer with ours.
pub struct PeerService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn exchange(
        &self,
        req: tonic::Request<pb::ExchangeRequest>,
    ) -> Result<tonic::Response<pb::ExchangeReply>, tonic::Status> {
        let r = req.into_inner();
        if r.flows.len() > mlcc_proto::MAX_FLOWS_PER_CALL {
            return Err(tonic::Status::invalid_argument(format!(
                "{} flows in one call; at most {}",
                r.flows.len(),
                mlcc_proto::MAX_FLOWS_PER_CALL
            )));
        }
        let mut host = self.0.host();
        let flows = host.on_exchange(&r.sender_host, &r.flows);
        Ok(tonic::Response::new(pb::ExchangeReply {
            receiver_host: host.config().host.clone(),
            slot: host.slot().0,
            flows,
        }))
    }
}

/// Binds the admin socket with mode 0660, replacing a stale socket file.
pub fn bind_admin(path: &PathBuf) -> std::io::Result<UnixListener> {
    bind_admin_as(path, None)
}

/// [`bind_admin`], giving the socket to `group` (a name or gid) so its members may run mlccctl.
pub fn bind_admin_as(path: &PathBuf, group: Option<&str>) -> std::io::Result<UnixListener> {
    let gid = group.map(mlcc_daemon::unix::resolve_group).transpose()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        // A live daemon answers on it; a stale file from a crash is removed.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by a running mlccd", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    mlcc_daemon::unix::restrict_socket(path, gid)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::clock_offset;

    #[test]
    fn clock_offset_is_the_switch_stamp_minus_the_call_midpoint() {
        assert_eq!(clock_offset(0, 100, 200), None, "unstamped reply");
        assert_eq!(clock_offset(150, 100, 200), Some(0));
        // Switch 40 ms behind: stamped 40 ms before our midpoint.
        assert_eq!(
            clock_offset(1_000_000_000, 1_040_000_000, 1_040_000_000),
            Some(-40_000_000)
        );
        assert_eq!(clock_offset(1_060, 1_001, 1_002), Some(59));
        // Extremes saturate instead of overflowing.
        assert_eq!(clock_offset(u64::MAX, 0, 0), Some(i64::MAX));
        assert_eq!(clock_offset(1, u64::MAX, u64::MAX), Some(i64::MIN));
    }
}
