//! The async shell of mlccd: the services (Peer, Admin, metrics), the clients of the switches
//! and peers with their deadlines, and the slot loop ([`crate::slot_loop`]) they serve
//! (docs/design.md §10, §11).
//!
//! All decisions are [`HostScheduler`]'s; this module only times, reads, sends and records.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlcc_core::topology::{NodeKind, Topology};
use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::admin::AdminService;
use crate::config::Config;
use crate::datapath::DatapathPort;
use crate::host::HostScheduler;
use crate::metrics::{Metrics, ModeLabels};
use crate::slot_loop::SlotLoop;
use crate::sockets::SocketSource;
pub use crate::state::{
    HISTORY_SLOTS, LoopStatus, Shared, SlotRecord, SwitchView, now_ns, set_clock_offset,
};

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

    let peer = pb::peer_server::PeerServer::new(PeerService::new(shared.clone(), rx.clone()))
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
    let channels = Channels {
        tls: tls.clone(),
        ..Default::default()
    };
    let slot_loop = SlotLoop::new(cfg, channels, topo, shared.clone(), datapath, sockets);
    let loop_task = tokio::spawn(slot_loop.run(rx.clone()));
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
pub(crate) struct Channels {
    by_addr: HashMap<String, Channel>,
    tls: Option<Arc<mlcc_daemon::tls::Tls>>,
}

impl Channels {
    pub(crate) fn get(&mut self, addr: &str, deadline: Duration) -> Option<Channel> {
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

pub(crate) fn peer_address(cfg: &Config, topo: &Topology, host: &str) -> Option<String> {
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

pub(crate) enum Outcome<T> {
    Ok(T),
    Timeout,
    Error(String),
}

pub(crate) async fn call<T, F>(deadline: Duration, f: F) -> (Outcome<T>, Duration)
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

/// The switch's clock minus ours (ns) from a reply stamped `switch_ns` (0: not stamped) to a
/// call sent at `sent` and answered at `received` on our clock: exact to within half the round
/// trip, assuming the switch stamped it halfway.
pub(crate) fn clock_offset(switch_ns: u64, sent: u64, received: u64) -> Option<i64> {
    (switch_ns != 0).then(|| {
        let mid = sent / 2 + received / 2 + (sent % 2 + received % 2) / 2;
        (i128::from(switch_ns) - i128::from(mid)).clamp(i64::MIN.into(), i64::MAX.into()) as i64
    })
}

pub(crate) fn outcome_name<T>(o: &Outcome<T>) -> &'static str {
    match o {
        Outcome::Ok(_) => "ok",
        Outcome::Timeout => "timeout",
        Outcome::Error(_) => "error",
    }
}

/// Replies a peer's exchange stream may leave unread before it is ended: a sender has at most
/// one request a slot outstanding.
pub const PEER_UNREAD_REPLIES: usize = 16;

/// The Peer service: a flow's sender tells us its progress, we answer with ours.
#[derive(Clone)]
pub struct PeerService {
    shared: Arc<Shared>,
    /// Ends the open exchange streams when mlccd stops (the server's graceful shutdown waits
    /// for them).
    stopping: watch::Receiver<bool>,
}

impl PeerService {
    /// A service whose streams end when `stopping` turns true.
    pub fn new(shared: Arc<Shared>, stopping: watch::Receiver<bool>) -> Self {
        PeerService { shared, stopping }
    }

    /// One exchange: the sender's progress in, ours back.
    fn answer(&self, r: &pb::ExchangeRequest) -> Result<pb::ExchangeReply, tonic::Status> {
        if r.flows.len() > mlcc_proto::MAX_FLOWS_PER_CALL {
            return Err(tonic::Status::invalid_argument(format!(
                "{} flows in one call; at most {}",
                r.flows.len(),
                mlcc_proto::MAX_FLOWS_PER_CALL
            )));
        }
        let mut host = self.shared.host();
        let flows = host.on_exchange(&r.sender_host, &r.flows);
        Ok(pb::ExchangeReply {
            receiver_host: host.config().host.clone(),
            slot: host.slot().0,
            flows,
        })
    }

    /// One stream message's reply: the exchange's, or the fault that refused it.
    fn answer_message(&self, m: pb::PeerRequest) -> pb::PeerReply {
        use pb::peer_reply::Reply;
        let reply = match &m.exchange {
            Some(r) => self.answer(r).map(Reply::Exchange),
            None => Err(tonic::Status::invalid_argument(
                "stream message carries no exchange",
            )),
        };
        pb::PeerReply {
            seq: m.seq,
            reply: Some(reply.unwrap_or_else(|s| Reply::Error(s.into()))),
        }
    }

    /// Answers a stream's messages in order until it ends; the status to end it with, if any.
    async fn serve_stream(
        &self,
        mut inbound: tonic::Streaming<pb::PeerRequest>,
        tx: &tokio::sync::mpsc::Sender<Result<pb::PeerReply, tonic::Status>>,
    ) -> Option<tonic::Status> {
        let mut stopping = self.stopping.clone();
        loop {
            let msg = tokio::select! {
                m = inbound.message() => m,
                _ = stopping.wait_for(|s| *s) => {
                    return Some(tonic::Status::unavailable("mlccd is stopping"));
                }
            };
            let msg = match msg {
                Ok(Some(m)) => m,
                Ok(None) => return None,
                // Malformed or oversized: the stream cannot be resynchronized.
                Err(s) => return Some(s),
            };
            // One place in the channel stays free for the final status.
            if tx.capacity() <= 1 {
                return Some(tonic::Status::resource_exhausted(format!(
                    "{PEER_UNREAD_REPLIES} replies left unread; read replies as they come"
                )));
            }
            if tx.try_send(Ok(self.answer_message(msg))).is_err() {
                return None;
            }
        }
    }
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn exchange(
        &self,
        req: tonic::Request<pb::ExchangeRequest>,
    ) -> Result<tonic::Response<pb::ExchangeReply>, tonic::Status> {
        self.answer(&req.into_inner()).map(tonic::Response::new)
    }

    type ExchangeStreamStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::PeerReply, tonic::Status>>;

    async fn exchange_stream(
        &self,
        req: tonic::Request<tonic::Streaming<pb::PeerRequest>>,
    ) -> Result<tonic::Response<Self::ExchangeStreamStream>, tonic::Status> {
        let inbound = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(PEER_UNREAD_REPLIES + 1);
        let svc = self.clone();
        tokio::spawn(async move {
            if let Some(status) = svc.serve_stream(inbound, &tx).await {
                tracing::debug!("peer exchange stream ended: {status}");
                let _ = tx.try_send(Err(status));
            }
        });
        Ok(tonic::Response::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
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
