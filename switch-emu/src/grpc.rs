//! The thin async shell around [`Emulator`]: reads the clock, takes the lock, counts metrics.
//! All decisions are made in `emulator.rs`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Instant;

use mlcc_core::slot::Slot;
use mlcc_daemon::clock::Clock;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::Switch;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::emulator::{Emulator, RequestError};
use crate::metrics::{
    LinkLabels, MethodLabels, Metrics, RejectLabels, RpcLabels, SessionEndLabels,
};

/// Replies a session may leave unread before the switch ends it with RESOURCE_EXHAUSTED: a
/// scheduler has at most two messages in flight per slot, so this many unread means the client
/// stopped reading, and its replies must not pile up in the switch's memory.
pub const SESSION_UNREAD_REPLIES: usize = 64;

/// Links one [`Shared::sweep`] bite catches up.
pub const SWEEP_LINKS: usize = 64;

/// Session messages served in a row before the session's task yields to the rest of the
/// runtime, so a stream with a deep backlog cannot hold up other clients' calls.
pub const SESSION_BATCH: u64 = 8;

/// Session messages all sessions together may take in per round of the runtime's run queue.
/// Past it a session waits for the next round before reading on, so however many sessions flood
/// the switch, every other task (a unary call, a well-behaved session, the slot tick) waits at
/// most about this many messages' work for its turn. What waits stays in the connection's
/// HTTP/2 window (bounded), and its sender is slowed by flow control instead of by the switch
/// falling behind everyone.
pub const SESSION_ROUND_BUDGET: usize = 8;

/// Round-based admission for session messages (see [`SESSION_ROUND_BUDGET`]): a fair (FIFO)
/// semaphore whose permits are spent, not returned, and refilled by a marker task once per
/// round. The marker runs only while the budget is being used up, so an idle or lightly loaded
/// switch pays nothing for it, and only as many waiting sessions as there are permits wake.
struct Admission {
    permits: Semaphore,
    /// A session found the budget spent: the marker should refill it.
    wanted: Notify,
    marker: Once,
}

impl Admission {
    fn new() -> Self {
        Admission {
            permits: Semaphore::new(SESSION_ROUND_BUDGET),
            wanted: Notify::new(),
            marker: Once::new(),
        }
    }

    /// Takes one message's worth of budget, waiting for a later round if it is spent.
    async fn admit(self: &Arc<Self>) {
        self.marker.call_once(|| {
            let me = self.clone();
            tokio::spawn(async move {
                loop {
                    me.wanted.notified().await;
                    loop {
                        // Every task runnable now gets its turn before the refill.
                        tokio::task::yield_now().await;
                        let free = me.permits.available_permits();
                        me.permits
                            .add_permits(SESSION_ROUND_BUDGET.saturating_sub(free));
                        // Budget left over: nobody waited this round (the semaphore hands
                        // permits to waiters first), so sleep until someone asks.
                        if free > 0 {
                            break;
                        }
                    }
                }
            });
        });
        if let Ok(p) = self.permits.try_acquire() {
            p.forget();
            return;
        }
        self.wanted.notify_one();
        if let Ok(p) = self.permits.acquire().await {
            p.forget();
        }
    }
}

/// State shared by the gRPC handlers and the slot ticker.
pub struct Shared {
    emu: Mutex<Emulator>,
    admission: Arc<Admission>,
    clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    /// Per owned link, in `link_stats` order: its entries and load gauges, looked up once so
    /// the tick at each slot boundary allocates and hashes nothing.
    link_gauges: Vec<(Gauge, Gauge<f64, AtomicU64>)>,
}

impl Shared {
    pub fn new(emu: Emulator, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Self {
        let link_gauges = emu
            .link_stats()
            .into_iter()
            .map(|(link, _, _)| {
                let l = LinkLabels {
                    link: link.to_string(),
                };
                (
                    metrics.link_entries.get_or_create(&l).clone(),
                    metrics.link_load.get_or_create(&l).clone(),
                )
            })
            .collect();
        Shared {
            emu: Mutex::new(emu),
            admission: Arc::new(Admission::new()),
            clock,
            metrics,
            link_gauges,
        }
    }

    /// The emulator; a handler that panicked while holding the lock (a bug) must not take the
    /// whole switch down with it, so poisoning is ignored: the table's own updates are atomic.
    pub fn lock(&self) -> MutexGuard<'_, Emulator> {
        self.emu.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The current slot on the absolute grid.
    pub fn now(&self, emu: &Emulator) -> Slot {
        emu.slots().slot_at(self.clock.now_ns())
    }

    /// Advances the table to the clock's slot: O(1), the links catch up when next touched or
    /// swept ([`Self::sweep`]).
    pub fn tick(&self) -> Slot {
        let mut emu = self.lock();
        let now = self.now(&emu);
        emu.advance(now);
        drop(emu);
        self.metrics.slot.set(now.0 as i64);
        now
    }

    /// Catches up at most [`SWEEP_LINKS`] links that no call touched since the slot began (so
    /// that a dead scheduler's entries are freed on time); true when none is left. Each bite
    /// holds the lock for a few tens of µs, so calls queue behind it only that long.
    pub fn sweep(&self) -> bool {
        self.lock().settle_some(SWEEP_LINKS)
    }

    /// Sets the per-link gauges (entries, booked load now); called when the metrics are read,
    /// not every slot: walking a thousand links under the lock is what a scrape may cost, not
    /// what every slot should.
    pub fn refresh_link_gauges(&self) {
        let stats = self.lock().link_stats();
        for ((_, entries, load), (e, l)) in stats.into_iter().zip(&self.link_gauges) {
            e.set(entries as i64);
            l.set(load);
        }
    }
}

/// A method's metrics for the common case (status ok), looked up once instead of hashing the
/// labels under the family's lock on every call.
#[derive(Clone)]
struct MethodMetrics {
    method: &'static str,
    ok: Counter,
    items: Counter,
    seconds: Histogram,
}

impl MethodMetrics {
    fn new(m: &Metrics, method: &'static str) -> Self {
        MethodMetrics {
            method,
            ok: m
                .rpcs
                .get_or_create(&RpcLabels { method, code: "ok" })
                .clone(),
            items: m.items.get_or_create(&MethodLabels { method }).clone(),
            seconds: m
                .rpc_seconds
                .get_or_create(&MethodLabels { method })
                .clone(),
        }
    }
}

/// The `mlcc.v1.Switch` service.
#[derive(Clone)]
pub struct SwitchService {
    shared: Arc<Shared>,
    fetch: MethodMetrics,
    update: MethodMetrics,
    describe: MethodMetrics,
    table: MethodMetrics,
    /// Becomes true when the server stops; open sessions end with UNAVAILABLE.
    stopping: Option<watch::Receiver<bool>>,
}

impl SwitchService {
    pub fn new(shared: Arc<Shared>) -> Self {
        let m = &shared.metrics;
        SwitchService {
            fetch: MethodMetrics::new(m, "fetch_feedback"),
            update: MethodMetrics::new(m, "update_schedule"),
            describe: MethodMetrics::new(m, "describe"),
            table: MethodMetrics::new(m, "table"),
            shared,
            stopping: None,
        }
    }

    /// Open sessions end (UNAVAILABLE) when `stopping` turns true, so a graceful shutdown does
    /// not wait for long-lived streams.
    pub fn with_shutdown(mut self, stopping: watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    fn record(
        &self,
        mm: &MethodMetrics,
        started: Instant,
        items: usize,
        code: &'static str,
        rejected: &[pb::Rejection],
    ) {
        let m = &self.shared.metrics;
        let method = mm.method;
        if code == "ok" {
            mm.ok.inc();
        } else {
            m.rpcs.get_or_create(&RpcLabels { method, code }).inc();
        }
        mm.items.inc_by(items as u64);
        for r in rejected {
            let reason = pb::RejectReason::try_from(r.reason)
                .map(|r| r.as_str_name())
                .unwrap_or("REJECT_REASON_UNSPECIFIED");
            m.rejected
                .get_or_create(&RejectLabels {
                    method,
                    reason: reason
                        .trim_start_matches("REJECT_REASON_")
                        .to_ascii_lowercase(),
                })
                .inc();
        }
        mm.seconds.observe(started.elapsed().as_secs_f64());
    }

    /// FetchFeedback, shared by the unary call and the session: one lock acquisition.
    fn do_fetch(&self, req: pb::FetchFeedbackRequest) -> Result<pb::FetchFeedbackReply, Status> {
        let started = Instant::now();
        let items = req.flows.len();
        let result = {
            let mut emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.fetch_feedback(now, req)
        }
        .map(|mut r| {
            r.switch_unix_ns = self.shared.clock().now_ns();
            r
        })
        .map_err(status_of);
        let (code, rejected) = outcome(&result);
        self.record(&self.fetch, started, items, code, rejected);
        result
    }

    /// UpdateSchedule, shared by the unary call and the session: one lock acquisition.
    fn do_update(
        &self,
        req: &pb::UpdateScheduleRequest,
    ) -> Result<pb::UpdateScheduleReply, Status> {
        let started = Instant::now();
        let result = {
            let mut emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.update_schedule(now, req)
        }
        .map_err(status_of);
        let (code, rejected) = outcome(&result);
        self.record(&self.update, started, req.flows.len(), code, rejected);
        result
    }

    /// One session message: the reply, or the message's own fault as a `SessionError`.
    fn session_message(&self, msg: pb::SessionRequest) -> pb::SessionReply {
        use pb::session_reply::Reply;
        use pb::session_request::Request as Req;
        if let Some(late) = self.expired(&msg) {
            return pb::SessionReply {
                seq: msg.seq,
                reply: Some(Reply::Error(pb::SessionError {
                    code: tonic::Code::DeadlineExceeded as i32,
                    message: format!(
                        "read {:.3} ms after the message's deadline; not applied",
                        late as f64 * 1e-6
                    ),
                    switch_unix_ns: self.shared.clock().now_ns(),
                })),
            };
        }
        let reply = match msg.request {
            Some(Req::FetchFeedback(r)) => self.do_fetch(r).map(Reply::FetchFeedback),
            Some(Req::UpdateSchedule(r)) => self.do_update(&r).map(Reply::UpdateSchedule),
            None => Err(Status::invalid_argument(
                "session message carries no request (set fetch_feedback or update_schedule)",
            )),
        };
        pb::SessionReply {
            seq: msg.seq,
            reply: Some(reply.unwrap_or_else(|s| Reply::Error(s.into()))),
        }
    }

    /// How late (ns) the switch reads a message whose deadline has passed, counted by method;
    /// `None` if it is on time or has none.
    fn expired(&self, msg: &pb::SessionRequest) -> Option<u64> {
        use pb::session_request::Request as Req;
        if msg.deadline_unix_ns == 0 {
            return None;
        }
        let late = self
            .shared
            .clock()
            .now_ns()
            .checked_sub(msg.deadline_unix_ns)
            .filter(|&l| l > 0)?;
        let method = match msg.request {
            Some(Req::FetchFeedback(_)) => self.fetch.method,
            Some(Req::UpdateSchedule(_)) => self.update.method,
            None => "none",
        };
        self.shared
            .metrics
            .session_expired
            .get_or_create(&MethodLabels { method })
            .inc();
        Some(late)
    }

    /// Reads a session's messages in order and queues each reply; returns why it ended and
    /// the status to end the reply stream with, if any.
    async fn run_session(
        &self,
        mut inbound: Streaming<pb::SessionRequest>,
        tx: &mpsc::Sender<Result<pb::SessionReply, Status>>,
    ) -> (&'static str, Option<Status>) {
        let mut stopping = self.stopping.clone();
        let mut served = 0u64;
        loop {
            self.shared.admission.admit().await;
            let next = async {
                match &mut stopping {
                    Some(s) => tokio::select! {
                        m = inbound.message() => Some(m),
                        _ = s.wait_for(|s| *s) => None,
                    },
                    None => Some(inbound.message().await),
                }
            };
            let msg = match next.await {
                None => {
                    return (
                        "shutdown",
                        Some(Status::unavailable("the switch is shutting down")),
                    );
                }
                Some(Ok(Some(m))) => m,
                Some(Ok(None)) => return ("closed", None),
                // Malformed or oversized: tonic could not decode it. The stream cannot be
                // resynchronized, so it ends; the server and other streams are unaffected.
                Some(Err(s)) => return ("malformed", Some(s)),
            };
            // One slot of the channel stays free for the final status.
            if tx.capacity() <= 1 {
                return (
                    "unread",
                    Some(Status::resource_exhausted(format!(
                        "session ended: {SESSION_UNREAD_REPLIES} replies left unread; read \
                         replies as they come"
                    ))),
                );
            }
            let reply = self.session_message(msg);
            if tx.try_send(Ok(reply)).is_err() {
                // The reply stream was dropped: the client went away.
                return ("closed", None);
            }
            // A stream with many messages buffered would otherwise be served to the end before
            // any other task runs (the runtime has one thread): give the others a turn.
            served += 1;
            if served.is_multiple_of(SESSION_BATCH) {
                tokio::task::yield_now().await;
            }
        }
    }
}

/// The metrics' status label and the refused items of a batched reply.
fn outcome(result: &Result<impl Batched, Status>) -> (&'static str, &[pb::Rejection]) {
    match result {
        Ok(r) => ("ok", r.rejected()),
        Err(s) => (code_name(s.code()), &[]),
    }
}

trait Batched {
    fn rejected(&self) -> &[pb::Rejection];
}

impl Batched for pb::FetchFeedbackReply {
    fn rejected(&self) -> &[pb::Rejection] {
        &self.rejected
    }
}

impl Batched for pb::UpdateScheduleReply {
    fn rejected(&self) -> &[pb::Rejection] {
        &self.rejected
    }
}

impl Batched for pb::DescribeReply {
    fn rejected(&self) -> &[pb::Rejection] {
        &[]
    }
}

impl Batched for pb::TableReply {
    fn rejected(&self) -> &[pb::Rejection] {
        &[]
    }
}

fn status_of(e: RequestError) -> Status {
    match e {
        RequestError::UnknownLink(_) => Status::not_found(e.to_string()),
        _ => Status::invalid_argument(e.to_string()),
    }
}

fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "ok",
        InvalidArgument => "invalid_argument",
        NotFound => "not_found",
        ResourceExhausted => "resource_exhausted",
        OutOfRange => "out_of_range",
        Internal => "internal",
        Unavailable => "unavailable",
        _ => "other",
    }
}

#[tonic::async_trait]
impl Switch for SwitchService {
    async fn fetch_feedback(
        &self,
        request: Request<pb::FetchFeedbackRequest>,
    ) -> Result<Response<pb::FetchFeedbackReply>, Status> {
        self.do_fetch(request.into_inner()).map(Response::new)
    }

    async fn update_schedule(
        &self,
        request: Request<pb::UpdateScheduleRequest>,
    ) -> Result<Response<pb::UpdateScheduleReply>, Status> {
        self.do_update(&request.into_inner()).map(Response::new)
    }

    type SessionStream = ReceiverStream<Result<pb::SessionReply, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<pb::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let inbound = request.into_inner();
        // Bounded: a client that stops reading fills it and its session ends (run_session),
        // so its replies cannot grow the switch's memory.
        let (tx, rx) = mpsc::channel(SESSION_UNREAD_REPLIES + 1);
        let svc = self.clone();
        let m = self.shared.metrics.clone();
        m.sessions_open.inc();
        tokio::spawn(async move {
            let (reason, status) = svc.run_session(inbound, &tx).await;
            if let Some(s) = status {
                tracing::debug!(reason, "session ended: {s}");
                let _ = tx.try_send(Err(s));
            }
            m.sessions_open.dec();
            m.sessions_ended
                .get_or_create(&SessionEndLabels { reason })
                .inc();
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn describe(
        &self,
        _request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeReply>, Status> {
        let started = Instant::now();
        let reply = {
            let emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.describe(now)
        };
        self.record(&self.describe, started, 0, "ok", &[]);
        Ok(Response::new(reply))
    }

    async fn table(
        &self,
        request: Request<pb::TableRequest>,
    ) -> Result<Response<pb::TableReply>, Status> {
        let started = Instant::now();
        let req = request.into_inner();
        let result = {
            let mut emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.table_rows(now, &req)
        }
        .map_err(status_of);
        let (code, rejected) = outcome(&result);
        self.record(&self.table, started, 0, code, rejected);
        result.map(Response::new)
    }
}
