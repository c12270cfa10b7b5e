//! `mlcc-switchd bench-baseline`: the transport alone, for `scripts/bench-switchd.sh` to report
//! the switch's cost as a ratio to it. It serves the same `mlcc.v1.Switch` service on the same
//! tonic/HTTP/2 stack with the same server settings, decodes every request in full, and answers
//! each with an empty reply (an update's items all counted as accepted), touching no table, no
//! lock and no metric. What the real server spends above this is the switch's own work.

use std::net::SocketAddr;
use std::time::Duration;

use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::{Switch, SwitchServer};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

use crate::emulator::Emulator;
use crate::grpc::{SESSION_BATCH, SESSION_UNREAD_REPLIES};

/// The bare service: `Describe` from the emulator it was built with (so the generator sees the
/// same links, τ and K), everything else an empty answer.
pub struct Baseline {
    describe: pb::DescribeReply,
}

impl Baseline {
    pub fn new(emu: &Emulator, now: mlcc_core::slot::Slot) -> Self {
        Baseline {
            describe: emu.describe(now),
        }
    }
}

fn reply_to(msg: pb::SessionRequest) -> pb::SessionReply {
    use pb::session_reply::Reply;
    use pb::session_request::Request as Req;
    let reply = match msg.request {
        Some(Req::FetchFeedback(_)) => Reply::FetchFeedback(pb::FetchFeedbackReply::default()),
        Some(Req::UpdateSchedule(r)) => Reply::UpdateSchedule(pb::UpdateScheduleReply {
            accepted: r.flows.len() as u32,
            ..Default::default()
        }),
        None => Reply::Error(pb::SessionError::default()),
    };
    pb::SessionReply {
        seq: msg.seq,
        reply: Some(reply),
    }
}

#[tonic::async_trait]
impl Switch for Baseline {
    async fn fetch_feedback(
        &self,
        _request: Request<pb::FetchFeedbackRequest>,
    ) -> Result<Response<pb::FetchFeedbackReply>, Status> {
        Ok(Response::new(pb::FetchFeedbackReply::default()))
    }

    async fn update_schedule(
        &self,
        request: Request<pb::UpdateScheduleRequest>,
    ) -> Result<Response<pb::UpdateScheduleReply>, Status> {
        Ok(Response::new(pb::UpdateScheduleReply {
            accepted: request.get_ref().flows.len() as u32,
            ..Default::default()
        }))
    }

    type SessionStream = ReceiverStream<Result<pb::SessionReply, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<pb::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(SESSION_UNREAD_REPLIES + 1);
        // The same loop shape as the switch's session (a reply channel, a yield every
        // SESSION_BATCH messages), without its admission, deadlines or table.
        tokio::spawn(async move {
            let mut served = 0u64;
            while let Ok(Some(msg)) = inbound.message().await {
                if tx.try_send(Ok(reply_to(msg))).is_err() {
                    return;
                }
                served += 1;
                if served.is_multiple_of(SESSION_BATCH) {
                    tokio::task::yield_now().await;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn describe(
        &self,
        _request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeReply>, Status> {
        Ok(Response::new(self.describe.clone()))
    }

    async fn table(
        &self,
        _request: Request<pb::TableRequest>,
    ) -> Result<Response<pb::TableReply>, Status> {
        Ok(Response::new(pb::TableReply::default()))
    }
}

/// Serves the baseline on `listen` until SIGINT/SIGTERM ends the process.
pub async fn serve(baseline: Baseline, listen: SocketAddr) -> Result<(), String> {
    let tau = Duration::from_nanos(baseline.describe.slot_ns);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("gRPC listener: {e}"))?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let switch = SwitchServer::new(baseline)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    tracing::info!(%addr, "serving mlcc.v1.Switch (transport baseline: no table)");
    crate::server::transport(tau)
        .add_service(switch)
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| e.to_string())
}
