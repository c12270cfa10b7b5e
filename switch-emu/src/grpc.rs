//! The thin async shell around [`Emulator`]: reads the clock, takes the lock, counts metrics.
//! All decisions are made in `emulator.rs`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use mlcc_core::slot::Slot;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::Switch;
use tonic::{Request, Response, Status};

use crate::clock::Clock;
use crate::emulator::{Emulator, RequestError};
use crate::metrics::{LinkLabels, MethodLabels, Metrics, RejectLabels, RpcLabels};

/// State shared by the gRPC handlers and the slot ticker.
pub struct Shared {
    emu: Mutex<Emulator>,
    clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
}

impl Shared {
    pub fn new(emu: Emulator, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Self {
        Shared {
            emu: Mutex::new(emu),
            clock,
            metrics,
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

    /// Advances the table to the clock's slot and refreshes the per-link gauges.
    pub fn tick(&self) -> Slot {
        let mut emu = self.lock();
        let now = self.now(&emu);
        emu.advance(now);
        let stats = emu.link_stats();
        drop(emu);
        let m = &self.metrics;
        m.slot.set(now.0 as i64);
        for (link, entries, load) in stats {
            let l = LinkLabels {
                link: link.to_string(),
            };
            m.link_entries.get_or_create(&l).set(entries as i64);
            m.link_load.get_or_create(&l).set(load);
        }
        now
    }
}

/// The `mlcc.v1.Switch` service.
#[derive(Clone)]
pub struct SwitchService {
    shared: Arc<Shared>,
}

impl SwitchService {
    pub fn new(shared: Arc<Shared>) -> Self {
        SwitchService { shared }
    }

    fn record(
        &self,
        method: &'static str,
        started: Instant,
        items: usize,
        code: &'static str,
        rejected: &[pb::Rejection],
    ) {
        let m = &self.shared.metrics;
        m.rpcs.get_or_create(&RpcLabels { method, code }).inc();
        m.items
            .get_or_create(&MethodLabels { method })
            .inc_by(items as u64);
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
        m.rpc_seconds
            .get_or_create(&MethodLabels { method })
            .observe(started.elapsed().as_secs_f64());
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
        let started = Instant::now();
        let req = request.into_inner();
        let result = {
            let mut emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.fetch_feedback(now, &req)
        }
        .map_err(status_of);
        let (code, rejected) = outcome(&result);
        self.record("fetch_feedback", started, req.flows.len(), code, rejected);
        result.map(Response::new)
    }

    async fn update_schedule(
        &self,
        request: Request<pb::UpdateScheduleRequest>,
    ) -> Result<Response<pb::UpdateScheduleReply>, Status> {
        let started = Instant::now();
        let req = request.into_inner();
        let result = {
            let mut emu = self.shared.lock();
            let now = self.shared.now(&emu);
            emu.update_schedule(now, &req)
        }
        .map_err(status_of);
        let (code, rejected) = outcome(&result);
        self.record("update_schedule", started, req.flows.len(), code, rejected);
        result.map(Response::new)
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
        self.record("describe", started, 0, "ok", &[]);
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
        self.record("table", started, 0, code, rejected);
        result.map(Response::new)
    }
}
