//! Starts and stops a switch emulator: the gRPC services, the metrics endpoint and the slot
//! ticker, all sharing one [`Shared`]. Used by `main.rs` and by the tests (on ephemeral ports).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mlcc_daemon::clock::Clock;
use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_server::SwitchServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use crate::emulator::Emulator;
use crate::grpc::{Shared, SwitchService};
use crate::metrics::Metrics;

/// Unary calls one connection may have in flight; past it the switch refuses new ones at once
/// (RESOURCE_EXHAUSTED, load shedding) instead of queueing them: a scheduler has at most a few
/// calls per slot in flight, so this many is a flood, and queueing it would delay everyone.
pub const CALLS_PER_CONNECTION: usize = 256;

/// HTTP/2 keepalive: a peer that stops answering pings for this long (a dead host, a stalled
/// client) loses its connection and whatever it held.
pub const KEEPALIVE: Duration = Duration::from_secs(10);

/// Floor of the server-side deadline, so that scheduling jitter on a loaded machine with a
/// short τ does not turn into refused calls; clients ask for tighter ones with grpc-timeout.
pub const MIN_SERVER_DEADLINE: Duration = Duration::from_millis(200);

/// How long shutdown waits for open calls and connections before giving up on them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("gRPC reflection: {0}")]
    Reflection(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("server task failed: {0}")]
    Task(String),
    #[error("mTLS: {0}")]
    Tls(#[from] mlcc_daemon::tls::TlsError),
}

/// A running emulator.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    join: JoinHandle<Result<(), ServeError>>,
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = rx.wait_for(|s| *s).await;
}

impl Running {
    /// Stops accepting calls, lets open ones finish (up to [`SHUTDOWN_GRACE`]) and returns.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(true);
        match tokio::time::timeout(SHUTDOWN_GRACE, self.join).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(ServeError::Task(e.to_string())),
            Err(_) => {
                tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; exiting anyway");
                Ok(())
            }
        }
    }

    /// Resolves if the server ends by itself (an error); used to exit instead of hanging.
    pub async fn failed(&mut self) -> Result<(), ServeError> {
        match (&mut self.join).await {
            Ok(r) => r,
            Err(e) => Err(ServeError::Task(e.to_string())),
        }
    }
}

/// Serves `emu` on `listener` (and metrics on `metrics_listener`) until [`Running::stop`].
pub async fn start(
    emu: Emulator,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
) -> Result<Running, ServeError> {
    start_with_tls(emu, clock, listener, metrics_listener, None).await
}

/// [`start`], with the gRPC port behind mTLS when `tls` is given: every client must present a
/// certificate signed by its CA, or the handshake fails before any call is read. The metrics
/// port stays plaintext HTTP (it only exports, and Prometheus scrapes it).
pub async fn start_with_tls(
    emu: Emulator,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    tls: Option<&mlcc_daemon::tls::Tls>,
) -> Result<Running, ServeError> {
    let io = |what| move |source| ServeError::Io { what, source };
    let addr = listener.local_addr().map_err(io("gRPC listener"))?;
    let metrics_addr = match &metrics_listener {
        Some(l) => Some(l.local_addr().map_err(io("metrics listener"))?),
        None => None,
    };
    let metrics = Arc::new(Metrics::new());
    let shared = Arc::new(Shared::new(emu, clock, metrics.clone()));
    shared.tick();
    let (stop, rx) = watch::channel(false);

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SwitchServer<SwitchService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    let switch = SwitchServer::new(SwitchService::new(shared.clone()).with_shutdown(rx.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let tau = shared.lock().slots().tau();
    let mut builder = transport(tau);
    if let Some(t) = tls {
        builder = t.apply_server(builder)?;
    }
    let grpc = builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(switch)
        .serve_with_incoming_shutdown(incoming, stopped(rx.clone()));

    let ticker = tokio::spawn(tick(shared.clone(), rx.clone()));
    let scraped = shared.clone();
    let metrics_task = metrics_listener.map(|l| {
        tokio::spawn(mlcc_daemon::serve_metrics(
            l,
            move || {
                scraped.refresh_link_gauges();
                metrics.encode()
            },
            stopped(rx.clone()),
        ))
    });
    let join = tokio::spawn(async move {
        let served = grpc.await;
        let _ = ticker.await;
        if let Some(m) = metrics_task {
            match m.await {
                Ok(Err(e)) => tracing::warn!("metrics endpoint: {e}"),
                Err(e) => tracing::warn!("metrics task: {e}"),
                Ok(Ok(())) => {}
            }
        }
        served.map_err(ServeError::from)
    });
    tracing::info!(%addr, "serving mlcc.v1.Switch");
    Ok(Running {
        addr,
        metrics_addr,
        shared,
        stop,
        join,
    })
}

/// The gRPC server's settings, shared by the switch and `bench-baseline` so that the bench's
/// ratio compares like with like. A unary answer two slots late is useless to its scheduler
/// (that slot's plan is made), so a call not answered by then — or within the client's own
/// grpc-timeout, which tonic applies too, queueing for the connection's limit included — is
/// dropped with DEADLINE_EXCEEDED rather than served late. Sessions return their stream at once
/// and are bounded by SESSION_UNREAD_REPLIES.
pub fn transport(tau: Duration) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout((2 * tau).max(MIN_SERVER_DEADLINE))
        .concurrency_limit_per_connection(CALLS_PER_CONNECTION)
        .load_shed(true)
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
}

/// At every slot boundary: advance the table. Half a slot later, when the schedulers' own
/// updates have caught up the links they use (each while its data was being touched anyway),
/// sweep the rest a bite at a time, so a quiet switch still drops dead schedulers' bookings on
/// time and no call waits behind a walk of the whole table.
async fn tick(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let slots = shared.lock().slots();
    loop {
        let now_ns = shared.clock().now_ns();
        let next = slots.start_ns(slots.slot_at(now_ns).plus(1));
        let wait = Duration::from_nanos(next.saturating_sub(now_ns)).min(slots.tau());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let late = shared.clock().now_ns().saturating_sub(next);
        shared.metrics.tick_late_seconds.observe(late as f64 * 1e-9);
        shared.tick();
        tokio::select! {
            _ = tokio::time::sleep(slots.tau() / 2) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while !shared.sweep() {
            tokio::task::yield_now().await;
        }
    }
}
