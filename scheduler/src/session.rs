//! The client side of a switch's `Session` stream (proto/mlcc.proto): one long-lived
//! bidirectional stream per switch that carries the per-slot FetchFeedback and UpdateSchedule as
//! single messages instead of one HTTP/2 call each.
//!
//! Requests are numbered; a reader task hands each reply to the request with the same seq. The
//! caller enforces its own deadline (τ/3) and forgets a request it gave up on, so a late reply is
//! dropped; the message carries a deadline, so an overloaded switch sheds it unapplied instead of
//! doing work nobody waits for (a read at that deadline, a plan when the next one is due). When
//! the stream ends (switch restarted, network fault, a message it could not decode)
//! every waiting request fails at once and the next request opens a new stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use pb::session_reply::Reply;
use pb::session_request::Request;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

/// Requests a session buffers before the stream is up; a scheduler sends two per slot.
const QUEUE: usize = 16;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Reply, String>>>>>;

/// One open (or opening) session with one switch.
pub struct Session {
    tx: mpsc::Sender<pb::SessionRequest>,
    pending: Pending,
    next: AtomicU64,
    alive: Arc<AtomicBool>,
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

fn fail_all(pending: &Pending, why: &str) {
    let waiting: Vec<_> = pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain()
        .collect();
    for (_, tx) in waiting {
        let _ = tx.send(Err(why.to_string()));
    }
}

impl Session {
    /// Starts a session on `channel` (lazily connected); requests may be sent at once.
    pub fn open(channel: Channel) -> Self {
        let (tx, rx) = mpsc::channel::<pb::SessionRequest>(QUEUE);
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (p, a) = (pending.clone(), alive.clone());
        tokio::spawn(async move {
            let mut client = pb::switch_client::SwitchClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let why = match client
                .session(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
            {
                Err(s) => format!("session refused: {}", s.message()),
                Ok(resp) => {
                    let mut inbound = resp.into_inner();
                    loop {
                        match inbound.message().await {
                            Ok(Some(m)) => {
                                let waiter =
                                    p.lock().unwrap_or_else(|e| e.into_inner()).remove(&m.seq);
                                // No waiter: a reply to a request that timed out.
                                if let (Some(w), Some(r)) = (waiter, m.reply) {
                                    let _ = w.send(Ok(r));
                                }
                            }
                            Ok(None) => break "session closed by the switch".to_string(),
                            Err(s) => break format!("session ended: {}", s.message()),
                        }
                    }
                }
            };
            a.store(false, Ordering::Release);
            fail_all(&p, &why);
        });
        Session {
            tx,
            pending,
            next: AtomicU64::new(1),
            alive,
            clock_offset_ns: AtomicI64::new(0),
        }
    }

    /// False once the stream ended; open a new one.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.tx.is_closed()
    }

    /// Sends one request and waits for its reply at most `deadline`.
    pub async fn request(
        &self,
        request: Request,
        deadline: Duration,
    ) -> Result<Reply, SessionFailure> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let (wtx, wrx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(seq, wtx);
        let forget = || {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&seq);
        };
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
        let msg = pb::SessionRequest {
            seq,
            request: Some(request),
            deadline_unix_ns,
        };
        let exchange = async {
            if self.tx.send(msg).await.is_err() {
                self.alive.store(false, Ordering::Release);
                return Err(SessionFailure::Error("session closed".into()));
            }
            match wrx.await {
                Err(_) => Err(SessionFailure::Error("session closed".into())),
                Ok(Err(why)) => Err(SessionFailure::Error(why)),
                Ok(Ok(Reply::Error(e))) if e.code == tonic::Code::DeadlineExceeded as i32 => {
                    Err(SessionFailure::Shed {
                        why: format!("switch shed the message: {}", e.message),
                        switch_unix_ns: e.switch_unix_ns,
                    })
                }
                Ok(Ok(Reply::Error(e))) => Err(SessionFailure::Error(format!(
                    "switch refused the message (code {}): {}",
                    e.code, e.message
                ))),
                Ok(Ok(r)) => Ok(r),
            }
        };
        // One deadline for queueing, sending and the reply together.
        let r = tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or(Err(SessionFailure::Timeout));
        if r.is_err() {
            forget();
        }
        r
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
