//! `mlcc-switchd bench`: a load generator that drives a running switch emulator the way a
//! cluster of schedulers would — N hosts, each making one `FetchFeedback` and one
//! `UpdateSchedule` per slot with F flows — and reports throughput, latency and wire bytes.

use std::time::{Duration, Instant};

use clap::Args;
use mlcc_core::slot::{Slot, SlotConfig};
use mlcc_proto::MAX_MESSAGE_BYTES;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_client::SwitchClient;
use prost::Message;
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};

use crate::clock::{Clock, SystemClock};

/// gRPC frames each message with 1 flag byte and a 4-byte length.
const GRPC_FRAME_BYTES: usize = 5;

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
    /// Slots to run.
    #[arg(long, default_value_t = 50)]
    pub slots: u64,
    /// TCP connections the hosts share [default: one per host, like real schedulers].
    #[arg(long, value_name = "N")]
    pub connections: Option<usize>,
    /// Fire every host at the slot boundary. By default host i starts at i·τ/N into the slot,
    /// as unsynchronized schedulers would.
    #[arg(long)]
    pub burst: bool,
    #[arg(long, default_value = "h")]
    pub host_prefix: String,
}

#[derive(Default)]
struct Stats {
    fetch_us: Vec<u32>,
    update_us: Vec<u32>,
    fetch_errors: u64,
    update_errors: u64,
    accepted: u64,
    rejected: u64,
    overruns: u64,
    /// Summed over all host-slots: fetch request, fetch reply, update request, update reply.
    bytes: [u64; 4],
    host_slots: u64,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        self.fetch_us.extend(o.fetch_us);
        self.update_us.extend(o.update_us);
        self.fetch_errors += o.fetch_errors;
        self.update_errors += o.update_errors;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.overruns += o.overruns;
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
    phase: Duration,
}

fn sleep_until_ns(target_ns: u64) -> tokio::time::Sleep {
    let now = SystemClock.now_ns();
    tokio::time::sleep(Duration::from_nanos(target_ns.saturating_sub(now)))
}

async fn run_host(
    mut client: SwitchClient<Channel>,
    host: Host,
    slots: SlotConfig,
    start: Slot,
    count: u64,
    timeout: Duration,
) -> Stats {
    let mut st = Stats::default();
    let k = slots.horizon();
    for s in 0..count {
        let slot = start.plus(s);
        let begin = slots.start_ns(slot) + host.phase.as_nanos() as u64;
        sleep_until_ns(begin).await;
        let fetch = pb::FetchFeedbackRequest {
            host: host.name.clone(),
            slot: slot.0,
            flows: host
                .flows
                .iter()
                .map(|(f, l, _)| pb::FeedbackQuery {
                    flow_id: f.clone(),
                    links: vec![l.clone()],
                    iteration_start_slot: start.0,
                })
                .collect(),
        };
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
                tracing::debug!("fetch_feedback: {e}");
            }
        }
        let update = pb::UpdateScheduleRequest {
            host: host.name.clone(),
            slot: slot.0,
            flows: host
                .flows
                .iter()
                .enumerate()
                .map(|(j, (f, l, cap))| pb::ScheduleItem {
                    flow_id: f.clone(),
                    links: vec![l.clone()],
                    first_slot: slot.0,
                    rates_bytes_per_sec: (0..k)
                        .map(|t| cap / 4.0 * ((s as usize + j + t) % 4) as f64)
                        .collect(),
                    iteration_start_slot: start.0,
                    done: false,
                })
                .collect(),
        };
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
                tracing::debug!("update_schedule: {e}");
            }
        }
        st.host_slots += 1;
        if SystemClock.now_ns() > begin + slots.tau_ns() {
            st.overruns += 1;
        }
    }
    st
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
    let connections = args.connections.unwrap_or(args.hosts).clamp(1, args.hosts);
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
    // Start two slots out so every host task is waiting before the first boundary.
    let start = slots.slot_at(SystemClock.now_ns()).plus(2);
    let timeout = slots.tau() / 3;
    let mut tasks = Vec::with_capacity(args.hosts);
    for i in 0..args.hosts {
        let name = format!("{}{}", args.host_prefix, i + 1);
        let flows = (0..args.flows)
            .map(|j| {
                let l = &d.links[(i * args.flows + j) % d.links.len()];
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
        let host = Host { name, flows, phase };
        tasks.push(tokio::spawn(run_host(
            client(&channels[i % connections]),
            host,
            slots,
            start,
            args.slots,
            timeout,
        )));
    }
    let mut st = Stats::default();
    for t in tasks {
        st.merge(t.await.map_err(|e| format!("host task failed: {e}"))?);
    }
    let elapsed = (SystemClock.now_ns().saturating_sub(slots.start_ns(start))) as f64 * 1e-9;
    let per = |b: u64| (b as f64 / st.host_slots.max(1) as f64).round() as u64;
    let bytes: Vec<u64> = st.bytes.iter().map(|&b| per(b)).collect();
    Ok(json!({
        "target": args.target,
        "switch": d.switch_name,
        "hosts": args.hosts,
        "flows_per_host": args.flows,
        "slots": args.slots,
        "tau_ms": slots.tau().as_secs_f64() * 1e3,
        "horizon": slots.horizon(),
        "connections": connections,
        "burst": args.burst,
        "elapsed_secs": (elapsed * 1000.0).round() / 1000.0,
        "offered_flow_updates_per_sec": (args.hosts * args.flows) as f64 / slots.tau_secs(),
        "flow_updates_per_sec": (st.accepted as f64 / elapsed.max(1e-9)).round(),
        "accepted_items": st.accepted,
        "rejected_items": st.rejected,
        "slot_overruns": st.overruns,
        "rpc": {
            "fetch_feedback": latency(&mut st.fetch_us, st.fetch_errors),
            "update_schedule": latency(&mut st.update_us, st.update_errors),
        },
        "bytes_per_slot_per_host": {
            "note": "protobuf payload + 5-byte gRPC frame; HTTP/2 headers, TCP/IP not counted",
            "fetch_feedback_request": bytes[0],
            "fetch_feedback_reply": bytes[1],
            "update_schedule_request": bytes[2],
            "update_schedule_reply": bytes[3],
            "total": bytes.iter().sum::<u64>(),
        },
    }))
}
