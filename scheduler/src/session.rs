//! The client side of a switch's `Session` stream (proto/mlcc.proto): one long-lived
//! bidirectional stream per switch that carries the per-slot FetchFeedback and UpdateSchedule as
//! single messages instead of one HTTP/2 call each.
//!
//! Requests are numbered (crate::stream); the caller enforces its own deadline (τ/3). Each
//! message also carries a deadline, so an overloaded switch sheds it unapplied instead of doing
//! work nobody waits for (a read at that deadline, a plan when the next one is due). When the
//! stream ends every waiting request fails at once and the next request opens a new stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use pb::session_reply::Reply;
use pb::session_request::Request;
use tonic::transport::Channel;

use crate::stream::{Numbered, NumberedStream, StreamFailure};

impl Numbered for pb::SessionReply {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// One open (or opening) session with one switch.
pub struct Session {
    stream: NumberedStream<pb::SessionRequest, pb::SessionReply>,
    /// The switch's clock minus ours (ns) as last measured: message deadlines are stated on
    /// the switch's clock, so a host whose clock lags does not have every message shed.
    clock_offset_ns: AtomicI64,
}

/// Why a session request got no answer.
#[derive(Debug)]
pub enum SessionFailure {
    Timeout,
    Error(String),
    /// The switch read the message after its deadline and did not apply it; `switch_unix_ns`
    /// is its clock then (0 if it did not say).
    Shed {
        why: String,
        switch_unix_ns: u64,
    },
}

impl Session {
    /// Starts a session on `channel` (lazily connected); requests may be sent at once.
    pub fn open(channel: Channel) -> Self {
        let stream = NumberedStream::open("session", move |requests| async move {
            pb::switch_client::SwitchClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
                .session(requests)
                .await
        });
        Session {
            stream,
            clock_offset_ns: AtomicI64::new(0),
        }
    }

    /// False once the stream ended; open a new one.
    pub fn is_alive(&self) -> bool {
        self.stream.is_alive()
    }

    /// Sends one request and waits for its reply at most `deadline`.
    pub async fn request(
        &self,
        request: Request,
        deadline: Duration,
    ) -> Result<Reply, SessionFailure> {
        // The switch sheds a message it reads after this. A feedback read nobody waits for is
        // worthless at once; a plan read late still books the rest of its K slots for everyone
        // else, so it is shed only when it is as old as the next slot's plan, which replaces it
        // (three wait deadlines: τ by default).
        let shed_after = match &request {
            Request::UpdateSchedule(_) => deadline.saturating_mul(3),
            _ => deadline,
        };
        let offset = self.clock_offset_ns.load(Ordering::Relaxed);
        let deadline_unix_ns = crate::state::now_ns()
            .saturating_add_signed(offset)
            .saturating_add(shed_after.as_nanos().min(u64::MAX as u128) as u64);
        let reply = self
            .stream
            .request(deadline, |seq| pb::SessionRequest {
                seq,
                request: Some(request),
                deadline_unix_ns,
            })
            .await;
        match reply {
            Err(StreamFailure::Timeout) => Err(SessionFailure::Timeout),
            Err(StreamFailure::Ended(why)) => Err(SessionFailure::Error(why)),
            Ok(pb::SessionReply { reply: None, .. }) => Err(SessionFailure::Error(
                "the switch answered with an empty reply".into(),
            )),
            Ok(pb::SessionReply {
                reply: Some(Reply::Error(e)),
                ..
            }) if e.code == tonic::Code::DeadlineExceeded as i32 => Err(SessionFailure::Shed {
                why: format!("switch shed the message: {}", e.message),
                switch_unix_ns: e.switch_unix_ns,
            }),
            Ok(pb::SessionReply {
                reply: Some(Reply::Error(e)),
                ..
            }) => Err(SessionFailure::Error(format!(
                "switch refused the message (code {}): {}",
                e.code, e.message
            ))),
            Ok(pb::SessionReply { reply: Some(r), .. }) => Ok(r),
        }
    }

    /// Records the switch's clock minus ours, for the deadlines of the next messages.
    pub fn set_clock_offset(&self, ns: i64) {
        self.clock_offset_ns.store(ns, Ordering::Relaxed);
    }

    fn clock_offset(&self) -> i64 {
        self.clock_offset_ns.load(Ordering::Relaxed)
    }
}

/// Sessions by switch address, reopened when they end.
#[derive(Default)]
pub struct Sessions(HashMap<String, Arc<Session>>);

impl Sessions {
    pub fn get(
        &mut self,
        addr: &str,
        channel: impl FnOnce() -> Option<Channel>,
    ) -> Option<Arc<Session>> {
        if let Some(s) = self.0.get(addr)
            && s.is_alive()
        {
            return Some(s.clone());
        }
        // A reopened stream keeps the measured clock offset: the clocks did not change.
        let offset = self.0.get(addr).map_or(0, |old| old.clock_offset());
        let s = Arc::new(Session::open(channel()?));
        s.set_clock_offset(offset);
        self.0.insert(addr.to_string(), s.clone());
        Some(s)
    }
}
