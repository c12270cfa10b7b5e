//! `mlcc-switchd bench`: a load generator that drives a running switch emulator the way a
//! cluster of schedulers would — N hosts, each making one `FetchFeedback` and one
//! `UpdateSchedule` per slot with F flows — and reports throughput, latency, wire bytes and
//! the CPU both sides used.
//!
//! `--mode session` (the default) gives every host its own `Session` stream, the hosts sharing
//! a few HTTP/2 connections; `--mode unary` makes two unary calls per host per slot. The session
//! generator is built to cost little per message, so that it is not what limits the figure: each
//! host's two requests are encoded once and each slot patches their slot numbers, rates and seq
//! into the bytes (no protobuf encoding per message, which was 15 % of the generator's core at
//! 200 k flow-updates/s), and replies are decoded into a skeleton that skips the per-link loads.

use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use mlcc_core::slot::{Slot, SlotConfig};
use mlcc_daemon::clock::{Clock, SystemClock};
use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_client::SwitchClient;
use prost::Message;
use prost::bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

mod encoded;
use encoded::{Encoded, Kind, Spec};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};

/// gRPC frames each message with 1 flag byte and a 4-byte length.
const GRPC_FRAME_BYTES: usize = 5;
/// HTTP/2 frame header (length, type, flags, stream id) of a DATA frame.
const H2_FRAME_BYTES: usize = 9;

/// How the generator talks to the switch.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One `Session` stream per host; fetch and update are messages on it.
    Session,
    /// Two unary calls per host per slot.
    Unary,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Session => "session",
            Mode::Unary => "unary",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Address of the running mlcc-switchd, e.g. 127.0.0.1:50061.
    #[arg(long, value_name = "ADDR")]
    pub target: String,
    /// Simulated hosts (schedulers); named {host-prefix}1..={host-prefix}N, which must be
    /// hosts of the switch's topology.
    #[arg(long, default_value_t = 1000)]
    pub hosts: usize,
    /// Flows per host; each one crosses one of the switch's links (round robin).
    #[arg(long, default_value_t = 6)]
    pub flows: usize,
    /// Slots to measure.
    #[arg(long, default_value_t = 50)]
    pub slots: u64,
    /// Slots every host runs before the measured ones, recording nothing: the first slot
    /// creates every flow's entries, grows the connections' windows and the allocator's pools
    /// (and the queue it builds drains in the next), which a switch serving long-lived
    /// sessions goes through once, not every slot.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub warmup_slots: u64,
    /// Session streams (one per host) or unary calls.
    #[arg(long, value_enum, default_value_t = Mode::Session)]
    pub mode: Mode,
    /// TCP connections the hosts share [default: 8 in session mode (each host has its own
    /// stream on one of them); one per host in unary mode].
    #[arg(long, value_name = "N")]
    pub connections: Option<usize>,
    /// Process id of the server, to report the CPU it used during the run (from /proc).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Generator runtime threads [default: the CPUs this process may run on; 1 means a
    /// current-thread runtime].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Fire every host at the slot boundary. By default host i starts at i·τ/N into the slot,
    /// as unsynchronized schedulers would.
    #[arg(long)]
    pub burst: bool,
    /// The pacer releases hosts due within this many µs of each other together. Each release
    /// wakes the generator's runtime from another thread; at 1000 hosts per 60 ms that is
    /// 17,000 wake-ups a second if every host goes alone (0), which took a third of the
    /// generator's core. At 200 µs, about three hosts go at once.
    #[arg(long, default_value_t = 200, value_name = "US")]
    pub pace_grain_us: u64,
    /// Release hosts with the runtime's timers instead of the pacer thread. Tokio's timers
    /// have 1 ms resolution, so hosts start in groups (N/τ·1 ms at once: 17 for 1000 hosts
    /// and 60 ms), which the switch sees as bursts that the phases were meant to spread.
    #[arg(long)]
    pub tick_arrivals: bool,
    #[arg(long, default_value = "h")]
    pub host_prefix: String,
    /// Spread the flows over only the first N of the switch's links (round robin), so that
    /// each carries hosts × flows / N of them: a core switch's busy downlinks. Default: all.
    #[arg(long, value_name = "N")]
    pub links: Option<usize>,
    /// The flows' precedence ranks: `same` puts every flow in one rank (the worst case for a
    /// table that walks a rank), `per-job` gives each job of 8 hosts its own.
    #[arg(long, value_enum, default_value_t = Ranks::Same)]
    pub ranks: Ranks,
    /// Whether each feedback query also asks for the load lower-ranked flows committed in the
    /// slot itself, as mlccd does under its default policy (`committed_now`); `false` asks for
    /// the K-slot load alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub committed: bool,
}

/// How the generator ranks its flows (see [`BenchArgs::ranks`]).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranks {
    Same,
    PerJob,
}

/// Hosts per job in the `per-job` rank profile.
const HOSTS_PER_JOB: usize = 8;

#[derive(Default)]
struct Stats {
    fetch_us: Vec<u32>,
    update_us: Vec<u32>,
    fetch_errors: u64,
    update_errors: u64,
    accepted: u64,
    rejected: u64,
    overruns: u64,
    /// Replies that came after their message had timed out (session mode).
    late_replies: u64,
    /// Messages the switch answered DEADLINE_EXCEEDED: it read them after their deadline and
    /// shed them unapplied.
    shed: u64,
    /// Messages with no reply within the host's timeout.
    timed_out: u64,
    /// Summed over all host-slots: fetch request, fetch reply, update request, update reply.
    bytes: [u64; 4],
    host_slots: u64,
}

impl Stats {
    /// Sorts a failed unary call: DEADLINE_EXCEEDED is a timeout (the client's, or the
    /// server's two-slot limit), anything else (load shedding, a refusal) is counted as shed.
    fn count_status(&mut self, s: &Status) {
        if s.code() == tonic::Code::DeadlineExceeded {
            self.timed_out += 1;
        } else {
            self.shed += 1;
        }
    }

    /// Sorts a session message answered with an error: DEADLINE_EXCEEDED means the switch
    /// read it too late and shed it.
    fn count_error_reply(&mut self, e: Option<&pb::SessionError>) {
        if e.is_some_and(|e| e.code == tonic::Code::DeadlineExceeded as i32) {
            self.shed += 1;
        }
    }

    /// Sorts a session message that got no reply at all.
    fn count_lost(&mut self, e: &str) {
        if e.starts_with("no reply") {
            self.timed_out += 1;
        }
    }

    /// Room for every sample of one host up front: growing 1000 hosts' vectors in the same
    /// slot is an allocation burst inside the measurement.
    fn with_capacity(slots: u64) -> Self {
        let n = usize::try_from(slots).unwrap_or(0).min(1 << 20);
        Stats {
            fetch_us: Vec::with_capacity(n),
            update_us: Vec::with_capacity(n),
            ..Stats::default()
        }
    }

    fn merge(&mut self, o: Stats) {
        self.fetch_us.extend(o.fetch_us);
        self.update_us.extend(o.update_us);
        self.fetch_errors += o.fetch_errors;
        self.update_errors += o.update_errors;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.overruns += o.overruns;
        self.late_replies += o.late_replies;
        self.shed += o.shed;
        self.timed_out += o.timed_out;
        for (a, b) in self.bytes.iter_mut().zip(o.bytes) {
            *a += b;
        }
        self.host_slots += o.host_slots;
    }
}

fn latency(v: &mut [u32], errors: u64) -> Value {
    v.sort_unstable();
    let pct = |p: f64| -> u32 {
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    };
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64
    };
    json!({
        "count": v.len(),
        "errors": errors,
        "p50_us": pct(0.50),
        "p90_us": pct(0.90),
        "p99_us": pct(0.99),
        "max_us": v.last().copied().unwrap_or(0),
        "mean_us": (mean * 10.0).round() / 10.0,
    })
}

/// What one simulated host needs.
struct Host {
    name: String,
    /// (flow id, link, capacity)
    flows: Vec<(String, String, f64)>,
    /// The rank of every flow of this host.
    rank: u64,
    /// Whether its feedback queries ask for the committed load.
    committed: bool,
    phase: Duration,
    /// Where the pacer thread says "start this slot's calls now"; `None`: the runtime's timer.
    go: Option<mpsc::UnboundedReceiver<()>>,
}

impl Host {
    /// Waits for slot `s` of the span to start for this host; its slot and start time.
    async fn start_slot(&mut self, span: &Span, s: u64) -> (Slot, u64) {
        let slot = span.start.plus(s);
        let begin = span.slots.start_ns(slot) + self.phase.as_nanos() as u64;
        match &mut self.go {
            Some(rx) => {
                let _ = rx.recv().await;
            }
            None => sleep_until_ns(begin).await,
        }
        (slot, begin)
    }
}

/// The slots a host runs: `warmup` unrecorded ones from `start`, then `count` measured ones.
#[derive(Clone, Copy)]
struct Span {
    slots: SlotConfig,
    start: Slot,
    warmup: u64,
    count: u64,
    /// How long a host waits for a reply.
    timeout: Duration,
}

impl Span {
    fn total(&self) -> u64 {
        self.warmup + self.count
    }

    /// The first measured slot.
    fn measured(&self) -> Slot {
        self.start.plus(self.warmup)
    }
}

/// A host's figures: the measured slots' and the warm-up's, which are dropped.
struct Recorder {
    warmup: u64,
    measured: Stats,
    warm: Stats,
}

impl Recorder {
    fn new(span: &Span) -> Self {
        Recorder {
            warmup: span.warmup,
            measured: Stats::with_capacity(span.count),
            warm: Stats::default(),
        }
    }

    /// Where slot `s` of the span (counted from its first warm-up slot) records.
    fn slot(&mut self, s: u64) -> &mut Stats {
        if s < self.warmup {
            &mut self.warm
        } else {
            &mut self.measured
        }
    }
}

/// Releases every host at its phase of every slot, to within the OS's sleep precision (tens of
/// µs) rather than the runtime timer's 1 ms. Runs on its own thread; ends when the slots are
/// done or every host has gone.
fn pace_hosts(
    go: Vec<(Duration, mpsc::UnboundedSender<()>)>,
    slots: SlotConfig,
    start: Slot,
    count: u64,
    grain: Duration,
) {
    let grain_ns = grain.as_nanos() as u64;
    for s in 0..count {
        let base = slots.start_ns(start.plus(s));
        let mut alive = false;
        for (phase, tx) in &go {
            let at = base + phase.as_nanos() as u64;
            let now = SystemClock.now_ns();
            // Hosts due within the grain go now with this one: one wake-up of the generator's
            // runtime for the group instead of one per host.
            if at > now + grain_ns {
                std::thread::sleep(Duration::from_nanos(at - now));
            }
            alive |= tx.send(()).is_ok();
        }
        if !alive {
            return;
        }
    }
}

fn sleep_until_ns(target_ns: u64) -> tokio::time::Sleep {
    let now = SystemClock.now_ns();
    tokio::time::sleep(Duration::from_nanos(target_ns.saturating_sub(now)))
}

/// The rate flow `j` books for its plan's slot `t` in the span's slot `s`: a quarter of its
/// link's capacity times 0–3, shifted every slot, so that every update changes the table.
fn bench_rate(flows: &[(String, String, f64)], s: u64, j: usize, t: usize) -> f64 {
    flows[j].2 / 4.0 * ((s as usize + j + t) % 4) as f64
}

/// What `host`'s messages carry, apart from the host, which each slot borrows to wait.
fn spec_of(host: &Host, horizon: usize) -> Spec {
    Spec {
        host: host.name.clone(),
        flows: host.flows.clone(),
        rank: host.rank,
        committed: host.committed,
        horizon,
    }
}

async fn run_host(mut client: SwitchClient<Channel>, mut host: Host, span: Span) -> Stats {
    let Span { slots, timeout, .. } = span;
    let mut rec = Recorder::new(&span);
    let spec = spec_of(&host, slots.horizon());
    for s in 0..span.total() {
        let st = rec.slot(s);
        let (slot, begin) = host.start_slot(&span, s).await;
        let fetch = spec.fetch_request(slot);
        st.bytes[0] += (fetch.encoded_len() + GRPC_FRAME_BYTES) as u64;
        let mut req = tonic::Request::new(fetch);
        req.set_timeout(timeout);
        let t = Instant::now();
        match client.fetch_feedback(req).await {
            Ok(r) => {
                st.fetch_us.push(t.elapsed().as_micros() as u32);
                st.bytes[1] += (r.get_ref().encoded_len() + GRPC_FRAME_BYTES) as u64;
            }
            Err(e) => {
                st.fetch_errors += 1;
                st.count_status(&e);
                tracing::debug!("fetch_feedback: {e}");
            }
        }
        let update = spec.update_request(slot, |j, t| bench_rate(&spec.flows, s, j, t));
        st.bytes[2] += (update.encoded_len() + GRPC_FRAME_BYTES) as u64;
        let mut req = tonic::Request::new(update);
        req.set_timeout(timeout);
        let t = Instant::now();
        match client.update_schedule(req).await {
            Ok(r) => {
                st.update_us.push(t.elapsed().as_micros() as u32);
                let r = r.into_inner();
                st.accepted += u64::from(r.accepted);
                st.rejected += r.rejected.len() as u64;
                st.bytes[3] += (r.encoded_len() + GRPC_FRAME_BYTES) as u64;
            }
            Err(e) => {
                st.update_errors += 1;
                st.count_status(&e);
                tracing::debug!("update_schedule: {e}");
            }
        }
        st.host_slots += 1;
        if SystemClock.now_ns() > begin + slots.tau_ns() {
            st.overruns += 1;
        }
    }
    rec.measured
}

// ---------------------------------------------------------------------------------------------
// Session mode.

/// The part of a `SessionReply` the generator looks at. Same field numbers as mlcc.proto; prost
/// skips the fields left out (the per-link loads), so decoding allocates next to nothing.
#[derive(Clone, PartialEq, prost::Message)]
struct ReplySkeleton {
    #[prost(uint64, tag = "1")]
    seq: u64,
    #[prost(message, optional, tag = "2")]
    fetch_feedback: Option<FetchSkeleton>,
    #[prost(message, optional, tag = "3")]
    update_schedule: Option<UpdateSkeleton>,
    #[prost(message, optional, tag = "4")]
    error: Option<pb::SessionError>,
}

/// A message whose fields are all skipped: counts repeated items without keeping them (a Vec
/// of a zero-sized type never allocates).
#[derive(Clone, Copy, PartialEq, prost::Message)]
struct Skipped {}

#[derive(Clone, PartialEq, prost::Message)]
struct FetchSkeleton {
    #[prost(message, repeated, tag = "3")]
    flows: Vec<Skipped>,
    #[prost(message, repeated, tag = "4")]
    rejected: Vec<Skipped>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct UpdateSkeleton {
    #[prost(uint32, tag = "2")]
    accepted: u32,
    #[prost(message, repeated, tag = "3")]
    rejected: Vec<Skipped>,
}

/// Writes a pre-encoded request as it is; decodes replies into (wire size, skeleton).
struct BenchCodec;

struct BytesEncoder;

struct SkeletonDecoder;

impl Codec for BenchCodec {
    type Encode = Bytes;
    type Decode = (usize, ReplySkeleton);
    type Encoder = BytesEncoder;
    type Decoder = SkeletonDecoder;
    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }
    fn decoder(&mut self) -> SkeletonDecoder {
        SkeletonDecoder
    }
}

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for SkeletonDecoder {
    type Item = (usize, ReplySkeleton);
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        use prost::bytes::Buf;
        let n = src.remaining();
        ReplySkeleton::decode(src)
            .map(|r| Some((n, r)))
            .map_err(|e| Status::internal(format!("decode: {e}")))
    }
}

/// A host's two requests, encoded once ([`encoded`]); each slot patches seq, slot, first
/// slots and rates into them.
struct Prebuilt {
    fetch: Encoded,
    update: Encoded,
}

impl Prebuilt {
    fn new(spec: &Spec, slot: Slot) -> Self {
        Prebuilt {
            fetch: Encoded::new(Kind::Fetch, spec, slot),
            update: Encoded::new(Kind::Update, spec, slot),
        }
    }

    /// This slot's fetch.
    fn fetch(&mut self, spec: &Spec, seq: u64, slot: Slot, deadline_ns: u64) -> Bytes {
        self.fetch
            .message(spec, (seq, slot, deadline_ns), |_, _| 0.0)
    }

    /// This slot's update, at [`bench_rate`] as in unary mode.
    fn update(&mut self, spec: &Spec, seq: u64, (slot, s): (Slot, u64), deadline_ns: u64) -> Bytes {
        self.update.message(spec, (seq, slot, deadline_ns), |j, t| {
            bench_rate(&spec.flows, s, j, t)
        })
    }
}

/// The wire size of a session request: protobuf, gRPC prefix and the DATA frame header.
fn session_bytes(payload: usize) -> u64 {
    (payload + GRPC_FRAME_BYTES + H2_FRAME_BYTES) as u64
}

type Replies = tonic::Streaming<(usize, ReplySkeleton)>;

/// Waits for the reply to `seq`, skipping replies to messages that had already timed out.
async fn reply_to(
    replies: &mut Replies,
    seq: u64,
    timeout: Duration,
    st: &mut Stats,
) -> Result<(usize, ReplySkeleton), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, replies.message()).await {
            Err(_) => return Err(format!("no reply to #{seq} within {timeout:?}")),
            Ok(Err(s)) => return Err(format!("session ended: {s}")),
            Ok(Ok(None)) => return Err("session closed by the switch".into()),
            Ok(Ok(Some((_, r)))) if r.seq < seq => st.late_replies += 1,
            Ok(Ok(Some(r))) if r.1.seq == seq => return Ok(r),
            Ok(Ok(Some((_, r)))) => {
                return Err(format!("reply #{} while waiting for #{seq}", r.seq));
            }
        }
    }
}

/// Opens a host's session; `None` (counted as errors by the caller) if the switch refuses.
async fn open_session(ch: Channel) -> Result<Session, String> {
    let mut grpc = tonic::client::Grpc::new(ch).max_decoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready().await.map_err(|e| format!("channel: {e}"))?;
    let (tx, rx) = mpsc::channel(4);
    let replies = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            tonic::codegen::http::uri::PathAndQuery::from_static("/mlcc.v1.Switch/Session"),
            BenchCodec,
        )
        .await
        .map_err(|e| format!("Session: {e}"))?
        .into_inner();
    Ok((tx, replies))
}

type Session = (mpsc::Sender<Bytes>, Replies);

/// Runs one host's session; returns its figures and its session, which the caller closes
/// when every host is done: a host that finished first must not tear its stream down while
/// the others are still measuring.
async fn run_session_host(
    ch: Channel,
    mut session: Option<Session>,
    mut host: Host,
    span: Span,
) -> (Stats, Option<Session>) {
    let Span { slots, timeout, .. } = span;
    let mut rec = Recorder::new(&span);
    let spec = spec_of(&host, slots.horizon());
    let mut pre = Prebuilt::new(&spec, span.start);
    let mut seq = 0u64;
    for s in 0..span.total() {
        let st = rec.slot(s);
        let (slot, begin) = host.start_slot(&span, s).await;
        st.host_slots += 1;
        // Reopen the session if the switch ended it (or it could not be opened before the start).
        if session.is_none() {
            match open_session(ch.clone()).await {
                Ok(x) => session = Some(x),
                Err(e) => {
                    tracing::debug!("{}: {e}", host.name);
                    st.fetch_errors += 1;
                    st.update_errors += 1;
                    continue;
                }
            }
        }
        let Some((tx, replies)) = session.as_mut() else {
            continue;
        };
        seq += 1;
        // The switch sheds a message it reads after the host has stopped waiting for it.
        let deadline = || SystemClock.now_ns() + timeout.as_nanos() as u64;
        let fetch = pre.fetch(&spec, seq, slot, deadline());
        st.bytes[0] += session_bytes(fetch.len());
        let t = Instant::now();
        let fetched = match tx.send(fetch).await {
            Ok(()) => reply_to(replies, seq, timeout, st).await,
            Err(_) => Err("session closed".into()),
        };
        match fetched {
            Ok((n, r)) if r.error.is_none() => {
                st.fetch_us.push(t.elapsed().as_micros() as u32);
                st.bytes[1] += session_bytes(n);
                if let Some(f) = r.fetch_feedback {
                    st.rejected += f.rejected.len() as u64;
                }
            }
            Ok((_, r)) => {
                st.fetch_errors += 1;
                st.count_error_reply(r.error.as_ref());
                tracing::debug!("fetch_feedback: {:?}", r.error);
            }
            Err(e) => {
                st.fetch_errors += 1;
                st.count_lost(&e);
                tracing::debug!("fetch_feedback: {e}");
            }
        }
        seq += 1;
        let update = pre.update(&spec, seq, (slot, s), deadline());
        st.bytes[2] += session_bytes(update.len());
        let t = Instant::now();
        let updated = match tx.send(update).await {
            Ok(()) => reply_to(replies, seq, timeout, st).await,
            Err(_) => Err("session closed".into()),
        };
        match updated {
            Ok((n, r)) if r.error.is_none() => {
                st.update_us.push(t.elapsed().as_micros() as u32);
                st.bytes[3] += session_bytes(n);
                if let Some(u) = r.update_schedule {
                    st.accepted += u64::from(u.accepted);
                    st.rejected += u.rejected.len() as u64;
                }
            }
            Ok((_, r)) => {
                st.update_errors += 1;
                st.count_error_reply(r.error.as_ref());
                tracing::debug!("update_schedule: {:?}", r.error);
            }
            Err(e) => {
                st.update_errors += 1;
                st.count_lost(&e);
                tracing::debug!("update_schedule: {e}");
                // A session that ended is reopened next slot; a timeout keeps it (the late
                // reply is skipped).
                if e.starts_with("session") {
                    session = None;
                }
            }
        }
        if SystemClock.now_ns() > begin + slots.tau_ns() {
            st.overruns += 1;
        }
    }
    (rec.measured, session)
}

// ---------------------------------------------------------------------------------------------
// CPU accounting.

/// CPU seconds (user + system) a process used so far, from /proc/<pid>/stat; `None` if it
/// cannot be read. Linux reports them in USER_HZ = 100 ticks per second on every architecture.
fn cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The 1-minute load average, to tell a quiet machine from a busy one.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A generator using this share of its core or more is what limits the offered load.
const GENERATOR_LIMIT_SHARE: f64 = 0.9;

/// The share of one core a process used over `elapsed` seconds.
fn cpu_share(before: Option<f64>, after: Option<f64>, elapsed: f64) -> Option<f64> {
    Some((after? - before?) / elapsed.max(1e-9))
}

fn cpu_json(before: Option<f64>, after: Option<f64>, elapsed: f64) -> Value {
    match (before, after) {
        (Some(b), Some(a)) => json!({
            "cpu_secs": ((a - b) * 100.0).round() / 100.0,
            "cpu_percent_of_one_core": ((a - b) / elapsed.max(1e-9) * 1000.0).round() / 10.0,
        }),
        _ => Value::Null,
    }
}

/// Runs the benchmark and returns its report.
pub async fn run(args: &BenchArgs) -> Result<Value, String> {
    if args.hosts == 0 || args.flows == 0 || args.slots == 0 {
        return Err("--hosts, --flows and --slots must be at least 1".into());
    }
    let uri = if args.target.contains("://") {
        args.target.clone()
    } else {
        format!("http://{}", args.target)
    };
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| format!("bad --target {:?}: {e}", args.target))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5));
    let default_connections = match args.mode {
        Mode::Session => 8,
        Mode::Unary => args.hosts,
    };
    let connections = args
        .connections
        .unwrap_or(default_connections)
        .clamp(1, args.hosts);
    let mut channels = Vec::with_capacity(connections);
    for _ in 0..connections {
        channels.push(
            endpoint
                .connect()
                .await
                .map_err(|e| format!("cannot connect to {uri}: {e}"))?,
        );
    }
    let client =
        |c: &Channel| SwitchClient::new(c.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let d = client(&channels[0])
        .describe(pb::DescribeRequest {})
        .await
        .map_err(|e| format!("Describe on {uri}: {e}"))?
        .into_inner();
    let slots = SlotConfig::new(Duration::from_nanos(d.slot_ns), d.horizon as usize)
        .map_err(|e| format!("the switch reports an invalid slot configuration: {e}"))?;
    if d.links.is_empty() {
        return Err(format!("switch {} reports no links", d.switch_name));
    }
    // Sessions are opened before the first slot, as a scheduler keeps its session open across
    // slots: opening 1000 streams inside the first slot would measure a start-up burst.
    let mut sessions: Vec<Option<Session>> = Vec::new();
    if args.mode == Mode::Session {
        let opening: Vec<_> = (0..args.hosts)
            .map(|i| tokio::spawn(open_session(channels[i % connections].clone())))
            .collect();
        for o in opening {
            let s = o.await.map_err(|e| format!("session task failed: {e}"))?;
            if let Err(e) = &s {
                tracing::debug!("opening a session: {e}");
            }
            sessions.push(s.ok());
        }
    }
    let mut sessions = sessions.into_iter();
    // Start two slots out so every host task is waiting before the first boundary.
    let span = Span {
        slots,
        start: slots.slot_at(SystemClock.now_ns()).plus(2),
        warmup: args.warmup_slots,
        count: args.slots,
        timeout: slots.tau() / 3,
    };
    let mut tasks = Vec::with_capacity(args.hosts);
    let mut pacer = Vec::new();
    let links = &d.links[..args.links.unwrap_or(d.links.len()).clamp(1, d.links.len())];
    for i in 0..args.hosts {
        let name = format!("{}{}", args.host_prefix, i + 1);
        let flows = (0..args.flows)
            .map(|j| {
                let l = &links[(i * args.flows + j) % links.len()];
                (
                    format!("bench/{name}>{}/f{j}", l.link),
                    l.link.clone(),
                    l.capacity_bytes_per_sec,
                )
            })
            .collect();
        let phase = if args.burst {
            Duration::ZERO
        } else {
            slots.tau() * i as u32 / args.hosts as u32
        };
        let go = if args.tick_arrivals {
            None
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            pacer.push((phase, tx));
            Some(rx)
        };
        let rank = match args.ranks {
            Ranks::Same => span.start.0,
            Ranks::PerJob => span.start.0 + (i / HOSTS_PER_JOB) as u64,
        };
        let host = Host {
            name,
            flows,
            rank,
            committed: args.committed,
            phase,
            go,
        };
        let ch = &channels[i % connections];
        tasks.push(match args.mode {
            Mode::Session => tokio::spawn(run_session_host(
                ch.clone(),
                sessions.next().flatten(),
                host,
                span,
            )),
            Mode::Unary => {
                let host = run_host(client(ch), host, span);
                tokio::spawn(async move { (host.await, None) })
            }
        });
    }
    if !pacer.is_empty() {
        let (start, count) = (span.start, span.total());
        let grain = Duration::from_micros(args.pace_grain_us);
        std::thread::Builder::new()
            .name("bench-pacer".into())
            .spawn(move || pace_hosts(pacer, slots, start, count, grain))
            .map_err(|e| format!("starting the pacer thread: {e}"))?;
    }
    // CPU from the first measured slot on; set-up and warm-up are not part of the figure.
    let start = span.measured();
    sleep_until_ns(slots.start_ns(start)).await;
    let server_pid = args.server_pid.map(|p| p.to_string());
    let server_before = server_pid.as_deref().and_then(cpu_secs);
    let self_before = cpu_secs("self");
    let load_before = loadavg();
    // Hosts' figures are merged (and their buffers freed) only when all are done: doing it as
    // each host finishes put a few milliseconds of the generator's own work into the last
    // slot's latencies.
    let mut done = Vec::with_capacity(tasks.len());
    for t in tasks {
        done.push(t.await.map_err(|e| format!("host task failed: {e}"))?);
    }
    let elapsed = (SystemClock.now_ns().saturating_sub(slots.start_ns(start))) as f64 * 1e-9;
    let server_after = server_pid.as_deref().and_then(cpu_secs);
    let self_after = cpu_secs("self");
    let mut st = Stats::default();
    for (stats, _session) in done {
        st.merge(stats);
    }
    let per = |b: u64| (b as f64 / st.host_slots.max(1) as f64).round() as u64;
    let offered_items = st.host_slots * args.flows as u64;
    let not_applied = offered_items.saturating_sub(st.accepted);
    let generator_cpu = cpu_share(self_before, self_after, elapsed);
    // A generator near a full core cannot offer more: the figure is then its limit, not the
    // switch's.
    let limit = if generator_cpu.is_some_and(|c| c >= GENERATOR_LIMIT_SHARE) {
        "generator"
    } else if not_applied > 0 || st.overruns > 0 {
        "switch"
    } else {
        "none"
    };
    let bytes: Vec<u64> = st.bytes.iter().map(|&b| per(b)).collect();
    let bytes_note = match args.mode {
        Mode::Session => {
            "protobuf payload + 5-byte gRPC prefix + 9-byte HTTP/2 DATA frame header per \
             message; the stream's opening HEADERS (once per host, not per slot), TCP/IP not \
             counted"
        }
        Mode::Unary => {
            "protobuf payload + 5-byte gRPC prefix; HTTP/2 HEADERS/DATA frames and trailers \
             (per call), TCP/IP not counted"
        }
    };
    Ok(json!({
        "target": args.target,
        "switch": d.switch_name,
        "mode": args.mode.name(),
        "committed": args.committed,
        "hosts": args.hosts,
        "flows_per_host": args.flows,
        "slots": args.slots,
        "warmup_slots": span.warmup,
        "tau_ms": slots.tau().as_secs_f64() * 1e3,
        "horizon": slots.horizon(),
        "connections": connections,
        "arrivals": if args.tick_arrivals {
            "runtime timer (1 ms ticks)".to_string()
        } else {
            format!("pacer thread, {} us grain", args.pace_grain_us)
        },
        "burst": args.burst,
        "elapsed_secs": (elapsed * 1000.0).round() / 1000.0,
        "offered_flow_updates_per_sec": (args.hosts * args.flows) as f64 / slots.tau_secs(),
        "flow_updates_per_sec": (st.accepted as f64 / elapsed.max(1e-9)).round(),
        "accepted_items": st.accepted,
        "rejected_items": st.rejected,
        "refused": {
            "note": "flow-updates offered in the measured slots and not applied (an item \
                     rejected, an update shed by the switch, timed out or lost), and why",
            "flow_updates": not_applied,
            "fraction": (not_applied as f64 / offered_items.max(1) as f64 * 1e4).round() / 1e4,
            "shed_messages": st.shed,
            "timed_out_messages": st.timed_out,
            "late_replies": st.late_replies,
        },
        "limit": limit,
        "slot_overruns": st.overruns,
        "rpc": {
            "fetch_feedback": latency(&mut st.fetch_us, st.fetch_errors),
            "update_schedule": latency(&mut st.update_us, st.update_errors),
        },
        "bytes_per_slot_per_host": {
            "note": bytes_note,
            "fetch_feedback_request": bytes[0],
            "fetch_feedback_reply": bytes[1],
            "update_schedule_request": bytes[2],
            "update_schedule_reply": bytes[3],
            "total": bytes.iter().sum::<u64>(),
        },
        "cpu": {
            "server": cpu_json(server_before, server_after, elapsed),
            "generator": cpu_json(self_before, self_after, elapsed),
        },
        "loadavg_1m": { "before": load_before, "after": loadavg() },
    }))
}
