//! A synthetic data-parallel job member (docs/design.md §14): compute = sleep, communication = the
//! job's real byte pattern over TCP, verified at every receiver, progress through the C header.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::progress::{Progress, Role};
use crate::wire::{self, Tag};

#[derive(Clone, Debug)]
pub enum Shape {
    /// Ring all-reduce: `world` workers, this one `rank`; sends to `next`, receives from the
    /// previous worker, which connects to `listen`.
    Ring { world: u32, next: SocketAddr },
    /// A PS worker pushing to every server, which reply with the aggregated slice.
    PsWorker { servers: Vec<SocketAddr> },
    /// PS server `rank` of `servers`, waiting for `workers` workers; it holds 1/servers of the model.
    PsServer { workers: u32, servers: u32 },
}

#[derive(Clone, Debug)]
pub struct TrainerConfig {
    pub job: String,
    pub rank: u32,
    pub shape: Shape,
    pub listen: SocketAddr,
    pub model_bytes: u64,
    pub iterations: u32,
    pub compute: Duration,
    /// TCP congestion control for data sockets; `None` keeps the namespace default, and a job
    /// with a progress file takes the header's (MLCC_CC) instead.
    pub cc: Option<String>,
    /// How long to keep retrying connections to peers that are not listening yet.
    pub connect_timeout: Duration,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerReport {
    pub job: String,
    pub role: String,
    pub rank: u32,
    pub iterations: u32,
    /// Seconds per iteration (compute + communication).
    pub iteration_s: Vec<f64>,
    /// Unix time (s) at the end of each iteration: which of its own iterations the member was
    /// in when mlccd's learner first read it.
    #[serde(default)]
    pub iteration_end_unix_s: Vec<f64>,
    /// From start (before connecting) to the end of the last iteration.
    pub jct_s: f64,
    pub bytes_sent: u64,
    /// Payload bytes received and verified byte for byte.
    pub bytes_verified: u64,
    pub progress_file: bool,
    pub cc: String,
    /// (Unix time s, bytes acknowledged on this member's sending sockets) every
    /// [`SAMPLE_EVERY`]: each job's sending rate over time, for the paper's Fig. 1 / 11.
    #[serde(default)]
    pub acked: Vec<(f64, u64)>,
    /// The member's process: whose sockets mlccd's learner reads without a progress file.
    #[serde(default)]
    pub pid: Option<u32>,
    /// A PyTorch rank's iterations on the CPU (s): forward, backward with the all-reduces,
    /// optimizer step ([`crate::torch::IterationPhases`]); none from this trainer.
    #[serde(default)]
    pub phases_s: Vec<[f64; 3]>,
}

/// The time now, in Unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How often a member samples what its sending sockets had acknowledged.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// Samples `tcpi_bytes_acked` of a member's sending sockets on a thread of its own until
/// [`Self::finish`].
struct AckSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, u64)>>,
}

impl AckSampler {
    fn start(sockets: &[&TcpStream]) -> Result<Self, TrainerError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let socks = sockets
            .iter()
            .map(|s| s.try_clone())
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_err("cloning a socket for sampling"))?;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !halt.load(Ordering::Relaxed) {
                let acked: u64 = socks.iter().filter_map(bytes_acked).sum();
                out.push((unix_now(), acked));
                std::thread::sleep(SAMPLE_EVERY);
            }
            out
        });
        Ok(Self { stop, thread })
    }

    fn finish(self) -> Vec<(f64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// `tcp_info.tcpi_bytes_acked`: bytes the peer acknowledged on `s`.
fn bytes_acked(s: &TcpStream) -> Option<u64> {
    mlcc_bpf::tcp_info(s).ok().map(|i| i.tcpi_bytes_acked)
}

#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Setup(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TrainerError {
    let what = what.into();
    move |source| TrainerError::Io { what, source }
}

struct Ctx {
    cfg: TrainerConfig,
    progress: Progress,
    job: u32,
}

impl Ctx {
    fn tag(&self, iteration: u32, step: u32, sender: u32) -> Tag {
        Tag {
            job: self.job,
            iteration,
            step,
            sender,
        }
    }

    fn prepare(&self, s: &TcpStream) -> Result<String, TrainerError> {
        s.set_nodelay(true).map_err(io_err("TCP_NODELAY"))?;
        if self.progress.is_open() {
            self.progress.set_cc(s).map_err(TrainerError::Setup)?;
        } else if let Some(cc) = &self.cfg.cc {
            set_cc(s, cc)?;
        }
        mlcc_bpf::congestion_control(s)
            .map_err(|e| TrainerError::Setup(format!("reading TCP_CONGESTION: {e}")))
    }

    fn connect(&self, to: SocketAddr) -> Result<TcpStream, TrainerError> {
        let start = Instant::now();
        loop {
            match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                Ok(s) => return Ok(s),
                Err(e) if start.elapsed() < self.cfg.connect_timeout => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(io_err(format!("connecting to {to}"))(e)),
            }
        }
    }
}

fn set_cc(s: &TcpStream, cc: &str) -> Result<(), TrainerError> {
    let name = mlcc_bpf::CcName::new(cc)
        .map_err(|e| TrainerError::Setup(format!("congestion control {cc:?}: {e}")))?;
    mlcc_bpf::set_congestion_control(s.as_fd(), &name)
        .map_err(|e| TrainerError::Setup(format!("TCP_CONGESTION={cc}: {e}")))
}

pub fn run(cfg: TrainerConfig) -> Result<TrainerReport, TrainerError> {
    let start = Instant::now();
    let role = match cfg.shape {
        Shape::PsServer { .. } => Role::Server,
        _ => Role::Worker,
    };
    let progress = Progress::open_env(role, cfg.rank).map_err(TrainerError::Setup)?;
    let ctx = Ctx {
        job: wire::job_hash(&cfg.job),
        cfg,
        progress,
    };
    let listener = TcpListener::bind(ctx.cfg.listen)
        .map_err(io_err(format!("listening on {}", ctx.cfg.listen)))?;
    let mut report = TrainerReport {
        job: ctx.cfg.job.clone(),
        role: match ctx.cfg.shape {
            Shape::Ring { .. } => "ring-worker",
            Shape::PsWorker { .. } => "ps-worker",
            Shape::PsServer { .. } => "ps-server",
        }
        .to_string(),
        rank: ctx.cfg.rank,
        iterations: ctx.cfg.iterations,
        iteration_s: Vec::new(),
        iteration_end_unix_s: Vec::new(),
        jct_s: 0.0,
        bytes_sent: 0,
        bytes_verified: 0,
        progress_file: ctx.progress.is_open(),
        cc: String::new(),
        acked: Vec::new(),
        pid: Some(std::process::id()),
        phases_s: Vec::new(),
    };
    match ctx.cfg.shape.clone() {
        Shape::Ring { world, next } => ring(&ctx, &listener, world, next, &mut report)?,
        Shape::PsWorker { servers } => ps_worker(&ctx, &servers, &mut report)?,
        Shape::PsServer { workers, servers } => {
            ps_server(&ctx, &listener, workers, servers, &mut report)?
        }
    }
    report.jct_s = start.elapsed().as_secs_f64();
    Ok(report)
}

fn compute(ctx: &Ctx) {
    if !ctx.cfg.compute.is_zero() {
        std::thread::sleep(ctx.cfg.compute);
    }
}

/// Ring all-reduce: reduce-scatter then all-gather, 2(N-1) steps of model/N bytes each. A step's
/// send waits for the previous step's receive (the data it forwards), as in NCCL's ring.
fn ring(
    ctx: &Ctx,
    listener: &TcpListener,
    world: u32,
    next: SocketAddr,
    rep: &mut TrainerReport,
) -> Result<(), TrainerError> {
    if world < 2 {
        return Err(TrainerError::Setup(
            "a ring needs at least 2 workers".into(),
        ));
    }
    // Connect out while accepting in: every worker listens before anyone connects.
    let (out, inp) = std::thread::scope(|s| {
        let acc = s.spawn(|| {
            listener
                .accept()
                .map(|(s, _)| s)
                .map_err(io_err("accepting the ring predecessor"))
        });
        let out = ctx.connect(next);
        (
            out,
            acc.join()
                .unwrap_or_else(|_| Err(TrainerError::Setup("accept thread panicked".into()))),
        )
    });
    let (mut out, mut inp) = (out?, inp?);
    rep.cc = ctx.prepare(&out)?;
    ctx.prepare(&inp)?;
    let sampler = AckSampler::start(&[&out])?;
    let chunk = ctx.cfg.model_bytes.div_ceil(u64::from(world));
    let prev = (ctx.cfg.rank + world - 1) % world;
    let steps = 2 * (world - 1);
    // The receive side reads ahead on its own thread, step after step and through the compute
    // phase, as NCCL's proxy posts receives ahead into its FIFO: a receiver that read only in
    // its own step would close its window on a predecessor that is one step ahead, and the
    // predecessor's sender would stall with data queued whatever its CC allowed.
    // On a send error the reader may wait on a live peer forever: shutting the socket down
    // through this handle wakes it so the scope can end.
    let wake = inp.try_clone().map_err(io_err("clone"))?;
    std::thread::scope(|s| {
        let (got_tx, got_rx) = std::sync::mpsc::channel::<io::Result<u64>>();
        let inp = &mut inp;
        s.spawn(move || {
            for it in 0..ctx.cfg.iterations {
                for step in 0..steps {
                    let r = wire::recv(inp, ctx.tag(it, step, prev), |n| ctx.progress.received(n));
                    let failed = r.is_err();
                    if got_tx.send(r).is_err() || failed {
                        return;
                    }
                }
            }
        });
        let mut exchange = || {
            for it in 0..ctx.cfg.iterations {
                let t0 = Instant::now();
                compute(ctx);
                // The iteration's communication starts now: mlccd plans its bytes from here,
                // rather than booking links for slots in which the job only computes.
                ctx.progress.iteration_begin();
                for step in 0..steps {
                    wire::send(&mut out, ctx.tag(it, step, ctx.cfg.rank), chunk, |n| {
                        ctx.progress.sent(n)
                    })
                    .map_err(io_err(format!(
                        "iteration {it} step {step}: sending to {next}"
                    )))?;
                    let got = got_rx
                        .recv()
                        .unwrap_or_else(|_| Err(io::Error::other("receive thread ended")));
                    rep.bytes_verified += got.map_err(io_err(format!(
                        "iteration {it} step {step}: receiving from rank {prev}"
                    )))?;
                    rep.bytes_sent += chunk;
                }
                rep.iteration_s.push(t0.elapsed().as_secs_f64());
                rep.iteration_end_unix_s.push(unix_now());
            }
            Ok::<(), TrainerError>(())
        };
        let r = exchange();
        if r.is_err() {
            let _ = wake.shutdown(Shutdown::Both);
        }
        r
    })?;
    let r = finish(&mut out, &mut inp);
    rep.acked = sampler.finish();
    r
}

/// Orderly end: FIN after the last byte, then wait for the peer's, so no process exits while
/// its data is still in flight.
fn finish(out: &mut TcpStream, inp: &mut TcpStream) -> Result<(), TrainerError> {
    out.flush().map_err(io_err("flush"))?;
    out.shutdown(Shutdown::Write).map_err(io_err("shutdown"))?;
    let mut rest = Vec::new();
    inp.read_to_end(&mut rest)
        .map_err(io_err("draining the peer"))?;
    if !rest.is_empty() {
        return Err(TrainerError::Setup(format!(
            "{} unexpected bytes after the last iteration",
            rest.len()
        )));
    }
    Ok(())
}

/// [`finish`] for connections that carry both directions.
fn finish_all(conns: &mut [TcpStream]) -> Result<(), TrainerError> {
    for c in conns {
        let mut d = c.try_clone().map_err(io_err("clone"))?;
        finish(c, &mut d)?;
    }
    Ok(())
}

/// Runs `f(index, connection)` on every connection at once, a thread each (a PS talks to all
/// its peers in parallel); the first error in index order wins.
fn on_each<T: Send>(
    conns: &mut [TcpStream],
    f: impl Fn(usize, &mut TcpStream) -> Result<T, TrainerError> + Sync,
) -> Result<Vec<T>, TrainerError> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(i, c)| s.spawn(move || f(i, c)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(TrainerError::Setup("connection thread panicked".into()))
                })
            })
            .collect()
    })
}

/// Hello: a worker names its rank first, so servers know which stream is whose.
fn hello(s: &mut TcpStream, rank: u32) -> io::Result<()> {
    s.write_all(&rank.to_le_bytes())
}

fn ps_worker(
    ctx: &Ctx,
    servers: &[SocketAddr],
    rep: &mut TrainerReport,
) -> Result<(), TrainerError> {
    if servers.is_empty() {
        return Err(TrainerError::Setup(
            "a PS worker needs at least one server".into(),
        ));
    }
    let mut conns = Vec::new();
    for &a in servers {
        let mut s = ctx.connect(a)?;
        rep.cc = ctx.prepare(&s)?;
        hello(&mut s, ctx.cfg.rank).map_err(io_err(format!("hello to {a}")))?;
        conns.push(s);
    }
    let sampler = AckSampler::start(&conns.iter().collect::<Vec<_>>())?;
    let slice = ctx.cfg.model_bytes.div_ceil(servers.len() as u64);
    for it in 0..ctx.cfg.iterations {
        let t0 = Instant::now();
        compute(ctx);
        // The iteration's communication starts now: mlccd plans its bytes from here, rather
        // than booking links for slots in which the job only computes.
        ctx.progress.iteration_begin();
        // Push every slice, then pull every aggregate, all servers in parallel.
        let got = on_each(&mut conns, |i, c| {
            wire::send(c, ctx.tag(it, 0, ctx.cfg.rank), slice, |n| {
                ctx.progress.sent(n)
            })
            .map_err(io_err(format!("iteration {it}: push to server {i}")))?;
            wire::recv(c, ctx.tag(it, 1, 1000 + i as u32), |n| {
                ctx.progress.received(n)
            })
            .map_err(io_err(format!("iteration {it}: pull from server {i}")))
        })?;
        rep.bytes_verified += got.iter().sum::<u64>();
        rep.bytes_sent += slice * got.len() as u64;
        rep.iteration_s.push(t0.elapsed().as_secs_f64());
        rep.iteration_end_unix_s.push(unix_now());
    }
    let r = finish_all(&mut conns);
    rep.acked = sampler.finish();
    r
}

fn ps_server(
    ctx: &Ctx,
    listener: &TcpListener,
    workers: u32,
    servers: u32,
    rep: &mut TrainerReport,
) -> Result<(), TrainerError> {
    let mut conns: Vec<Option<TcpStream>> = (0..workers).map(|_| None).collect();
    for _ in 0..workers {
        let (mut s, from) = listener.accept().map_err(io_err("accepting a worker"))?;
        rep.cc = ctx.prepare(&s)?;
        let mut r = [0u8; 4];
        s.read_exact(&mut r)
            .map_err(io_err(format!("hello from {from}")))?;
        let rank = u32::from_le_bytes(r);
        match conns.get_mut(rank as usize) {
            Some(slot @ None) => *slot = Some(s),
            _ => {
                return Err(TrainerError::Setup(format!(
                    "{from}: unexpected worker rank {rank}"
                )));
            }
        }
    }
    let mut conns: Vec<TcpStream> = conns.into_iter().flatten().collect();
    let sampler = AckSampler::start(&conns.iter().collect::<Vec<_>>())?;
    let slice = ctx.cfg.model_bytes.div_ceil(u64::from(servers.max(1)));
    for it in 0..ctx.cfg.iterations {
        let t0 = Instant::now();
        // Aggregation: every worker's push must arrive before any reply (a PS cannot broadcast
        // what it has not aggregated).
        let got = on_each(&mut conns, |w, c| {
            wire::recv(c, ctx.tag(it, 0, w as u32), |n| ctx.progress.received(n))
                .map_err(io_err(format!("iteration {it}: push from worker {w}")))
        })?;
        rep.bytes_verified += got.iter().sum::<u64>();
        // The server's own transfers (the replies) start now.
        ctx.progress.iteration_begin();
        let sent = on_each(&mut conns, |w, c| {
            wire::send(c, ctx.tag(it, 1, 1000 + ctx.cfg.rank), slice, |n| {
                ctx.progress.sent(n)
            })
            .map_err(io_err(format!("iteration {it}: reply to worker {w}")))
        })?;
        rep.bytes_sent += slice * sent.len() as u64;
        rep.iteration_s.push(t0.elapsed().as_secs_f64());
        rep.iteration_end_unix_s.push(unix_now());
    }
    let r = finish_all(&mut conns);
    rep.acked = sampler.finish();
    r
}
