//! The client side of a long-lived bidirectional gRPC stream that carries numbered requests,
//! each answered by the reply that echoes its seq: a switch's `Session` and a peer's
//! `ExchangeStream` (proto/mlcc.proto). Per slot each request is one HTTP/2 DATA frame instead of
//! a call with its own stream, headers and trailers.
//!
//! A reader task hands each reply to the request with the same seq. The caller enforces its own
//! deadline and forgets a request it gave up on, so a late reply is dropped. When the stream ends
//! (the other side restarted or stopping, a network fault, a message it could not decode) every
//! waiting request fails at once with why, and the owner opens a new stream.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

/// Requests a stream buffers before it is up; a scheduler sends at most two per slot on one.
const QUEUE: usize = 16;

/// A reply that names the request it answers.
pub trait Numbered {
    fn seq(&self) -> u64;
}

/// Why a request on a stream got no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamFailure {
    Timeout,
    /// The stream ended, or never opened, before the reply came.
    Ended(String),
}

type Waiter<In> = oneshot::Sender<Result<In, String>>;

/// Shared between the stream's owner and its reader task.
struct State<In> {
    pending: Mutex<HashMap<u64, Waiter<In>>>,
    alive: AtomicBool,
    /// Set when a reply came: the other side speaks the stream.
    answered: AtomicBool,
    /// The status the other side refused to open the stream with.
    refused: OnceLock<Code>,
}

/// One open (or opening) stream.
pub struct NumberedStream<Out, In> {
    tx: mpsc::Sender<Out>,
    state: Arc<State<In>>,
    next: AtomicU64,
}

impl<In> State<In> {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter<In>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail_all(&self, why: &str) {
        self.alive.store(false, Ordering::Release);
        let waiting: Vec<_> = self.waiting().drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(why.to_string()));
        }
    }
}

impl<Out, In> NumberedStream<Out, In>
where
    Out: Send + 'static,
    In: Numbered + Send + 'static,
{
    /// Starts a stream with `start` (the generated client's streaming call on a lazily
    /// connected channel); requests may be sent at once. `what` names it in failures.
    pub fn open<F, Fut>(what: &'static str, start: F) -> Self
    where
        F: FnOnce(ReceiverStream<Out>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<tonic::Response<Streaming<In>>, Status>> + Send,
    {
        let (tx, rx) = mpsc::channel::<Out>(QUEUE);
        let state = Arc::new(State {
            pending: Mutex::default(),
            alive: AtomicBool::new(true),
            answered: AtomicBool::new(false),
            refused: OnceLock::new(),
        });
        let s = state.clone();
        tokio::spawn(async move {
            let why = match start(ReceiverStream::new(rx)).await {
                Err(status) => {
                    let _ = s.refused.set(status.code());
                    format!("{what} refused: {}", status.message())
                }
                Ok(resp) => read_replies(what, resp.into_inner(), &s).await,
            };
            s.fail_all(&why);
        });
        NumberedStream {
            tx,
            state,
            next: AtomicU64::new(1),
        }
    }

    /// False once the stream ended; open a new one.
    pub fn is_alive(&self) -> bool {
        self.state.alive.load(Ordering::Acquire) && !self.tx.is_closed()
    }

    /// Whether any reply came on this stream.
    pub fn answered(&self) -> bool {
        self.state.answered.load(Ordering::Acquire)
    }

    /// The status the other side refused to open the stream with, once it did.
    pub fn refused(&self) -> Option<Code> {
        self.state.refused.get().copied()
    }

    /// Sends the request `message` builds with its seq and waits for its reply at most
    /// `deadline`, queueing and sending included.
    pub async fn request(
        &self,
        deadline: Duration,
        message: impl FnOnce(u64) -> Out,
    ) -> Result<In, StreamFailure> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let (wtx, wrx) = oneshot::channel();
        self.state.waiting().insert(seq, wtx);
        let msg = message(seq);
        let exchange = async {
            if self.tx.send(msg).await.is_err() {
                self.state.alive.store(false, Ordering::Release);
                return Err(StreamFailure::Ended("stream closed".into()));
            }
            match wrx.await {
                Err(_) => Err(StreamFailure::Ended("stream closed".into())),
                Ok(r) => r.map_err(StreamFailure::Ended),
            }
        };
        let r = tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or(Err(StreamFailure::Timeout));
        if r.is_err() {
            self.state.waiting().remove(&seq);
        }
        r
    }
}

/// Hands each reply to its waiter until the stream ends; returns why it ended.
async fn read_replies<In: Numbered>(
    what: &str,
    mut inbound: Streaming<In>,
    s: &State<In>,
) -> String {
    loop {
        match inbound.message().await {
            Ok(Some(m)) => {
                s.answered.store(true, Ordering::Release);
                // No waiter: a reply to a request that timed out.
                if let Some(w) = s.waiting().remove(&m.seq()) {
                    let _ = w.send(Ok(m));
                }
            }
            Ok(None) => return format!("{what} closed by the other side"),
            Err(status) => return format!("{what} ended: {}", status.message()),
        }
    }
}
