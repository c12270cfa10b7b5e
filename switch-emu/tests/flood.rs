//! Hostile load on a real `mlcc-switchd` process. First the bench generator measures what the
//! switch sustains on this machine, now (well-formed sessions at a modest load); then it floods
//! the switch with ten times that rate while other clients send garbage bytes, invalid and
//! oversized requests, and open sessions they never read. A well-formed client keeps calling
//! FetchFeedback with a one-slot deadline throughout; the switch must stay up, keep answering it,
//! refuse every malformed call with an error, and keep its memory bounded.
//!
//! The flood is relative to the sustained rate measured in the same run, so the test means the
//! same on a fast machine and on a loaded 2-core CI runner in a debug build. Figures are printed
//! as one JSON line. Scale from the environment: FLOOD_SECONDS (flood phase, default 8),
//! FLOOD_BASELINE_HOSTS (default 50), FLOOD_FACTOR (default 10), FLOOD_MAX_HOSTS (default 5000),
//! e.g. `FLOOD_SECONDS=20 cargo test --release -p mlcc-switch-emu --test flood -- --nocapture`.
//!
//! A binary of its own, so that cargo runs it after the other cases and not beside them: the
//! flood is sized by the rate measured in its first phase, and the other cases' switches,
//! started and stopped while it runs, would load the machine differently in each phase.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::KillOnDrop;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_client::SwitchClient;
use tonic::transport::Channel;

const BIN: &str = env!("CARGO_BIN_EXE_mlcc-switchd");

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts the server on an ephemeral port; returns it and its address.
fn server(hosts: u64) -> (KillOnDrop, String) {
    let topo = std::env::temp_dir().join(format!("mlcc-flood-{}.toml", std::process::id()));
    std::fs::write(
        &topo,
        format!("[generate]\nkind = \"single-switch\"\nhosts = {hosts}\nhost_link = \"25Gbit\"\n"),
    )
    .unwrap();
    let (child, addr, _, log) = common::switchd(
        "--metrics-listen 127.0.0.1:0 --tau 60ms --horizon 10 --worker-threads 1",
        &topo,
    );
    // The server has read its topology once it listens; the file is not needed after that.
    let _ = std::fs::remove_file(&topo);
    // Keep draining its logs so a full pipe never blocks the server.
    std::thread::spawn(move || for _ in log {});
    (child, addr)
}

fn fetch(host: &str, flows: usize) -> pb::FetchFeedbackRequest {
    pb::FetchFeedbackRequest {
        host: host.into(),
        slot: 0,
        flows: (0..flows)
            .map(|i| pb::FeedbackQuery {
                flow_id: format!("probe/{host}>h{}/agg", i + 2),
                links: vec![format!("sw1->h{}", i + 2)],
                rank: 1,
                committed: false,
            })
            .collect(),
    }
}

#[derive(Default)]
struct Counts {
    garbage_conns: AtomicU64,
    garbage_closed: AtomicU64,
    invalid_sent: AtomicU64,
    invalid_refused: AtomicU64,
    oversize_sent: AtomicU64,
    oversize_refused: AtomicU64,
    unread_sessions: AtomicU64,
}

/// Runs the bench generator against `addr` until it ends (at most `limit`); its JSON report.
fn bench(addr: &str, hosts: u64, slots: u64, burst: bool, limit: Duration) -> serde_json::Value {
    let mut cmd = Command::new(BIN);
    cmd.args(["bench", "--target", addr, "--flows", "6"])
        .args(["--hosts", &hosts.to_string(), "--slots", &slots.to_string()])
        .args(["--connections", "16"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if burst {
        cmd.arg("--burst");
    }
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let deadline = Instant::now() + limit;
    while child.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    if child.0.try_wait().unwrap().is_some()
        && let Some(mut o) = child.0.stdout.take()
    {
        let _ = o.read_to_string(&mut out);
    }
    serde_json::from_str(out.trim()).unwrap_or(serde_json::Value::Null)
}

/// Resident memory of a process in KiB, from /proc.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Share of the well-formed client's calls that must be answered within their one-slot
/// deadline. The switch serves its connection in turn with the flood's (one runtime thread), so
/// each call waits for at most one round of the other tasks, which admission control keeps short;
/// 75% leaves room for a debug build on a loaded 2-core machine, where this process, the
/// generator and the switch share the cores (measured 99% there, 80% when the switch decoded an
/// over-cap call whole before refusing it), without letting a switch
/// that starves the client pass: without session admission control it answered 4%.
const MIN_PROBE_SUCCESS: f64 = 0.75;

/// Longest the well-formed client may go without an answer: ten slots (K). A scheduler that
/// misses a few slots plans on stale feedback; one that misses K loses its bookings to expiry.
/// Measured 0.16-0.28 s in a debug build on a loaded 2-core machine (0.43-0.61 s when the switch
/// decoded an over-cap call whole); 7.8 s without admission control.
const MAX_PROBE_GAP: Duration = Duration::from_millis(600);

/// RSS growth allowed over the flood. The switch's state is bounded (entries expire within K
/// slots, replies queued per session are capped, HTTP/2 windows bound what each connection can
/// buffer); what grows with hostile input beyond this would be a leak or an unbounded queue.
const MAX_RSS_GROWTH_KIB: u64 = 256 * 1024;

/// Slot length of the switch under test.
const TAU: Duration = Duration::from_millis(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_switch_stays_up_and_serves_well_formed_clients() {
    let seconds = env("FLOOD_SECONDS", 8);
    let baseline_hosts = env("FLOOD_BASELINE_HOSTS", 50);
    let factor = env("FLOOD_FACTOR", 10);
    let max_hosts = env("FLOOD_MAX_HOSTS", 5000);
    let (mut srv, addr) = server(max_hosts + 1);
    let pid = srv.0.id();
    let url = format!("http://{addr}");
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());

    // 1. What the switch sustains here and now: well-formed sessions for ~3 s.
    let baseline = {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            bench(&addr, baseline_hosts, 50, false, Duration::from_secs(30))
        })
        .await
        .unwrap()
    };
    let sustained = baseline["flow_updates_per_sec"].as_f64().unwrap_or(0.0);
    assert!(
        sustained > 0.0,
        "the baseline run served nothing: {baseline}"
    );
    // Hosts that offer `factor` times that rate, at 6 flows per host per slot.
    let flood_hosts =
        ((factor as f64 * sustained * TAU.as_secs_f64() / 6.0).ceil() as u64).clamp(1, max_hosts);
    let rss_before = rss_kib(pid);

    // 2. The flood: the bench generator, every host firing at the slot boundary.
    let flood = {
        let addr = addr.clone();
        let slots = seconds * 1000 / TAU.as_millis() as u64 + 1;
        tokio::task::spawn_blocking(move || {
            bench(
                &addr,
                flood_hosts,
                slots,
                true,
                Duration::from_secs(seconds + 30),
            )
        })
    };
    // Memory, sampled through the flood.
    let rss_peak = Arc::new(AtomicU64::new(0));
    let rss_task = {
        let (stop, peak) = (stop.clone(), rss_peak.clone());
        tokio::spawn(async move {
            while !stop.load(Relaxed) {
                if let Some(r) = rss_kib(pid) {
                    peak.fetch_max(r, Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let mut tasks = Vec::new();
    // 2. Garbage bytes on the gRPC port, over and over.
    {
        let (stop, counts, addr) = (stop.clone(), counts.clone(), addr.clone());
        let garbage = env("FLOOD_GARBAGE", 1) == 1;
        tasks.push(tokio::task::spawn_blocking(move || {
            let mut i = 0u64;
            while garbage && !stop.load(Relaxed) {
                i += 1;
                let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
                    continue;
                };
                counts.garbage_conns.fetch_add(1, Relaxed);
                let junk: Vec<u8> = (0..4096u64)
                    .map(|j| (j.wrapping_mul(31) ^ i) as u8)
                    .collect();
                let _ = s.write_all(&junk);
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 1024];
                // The server answers with a GOAWAY and closes: read until EOF or error.
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                counts.garbage_closed.fetch_add(1, Relaxed);
                // Paced like the invalid calls below: unpaced, this loop's rate would be set by
                // how fast the switch closes connections, not by the test.
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    // 3. Invalid and oversized requests from a client of their own.
    {
        let (stop, counts, url) = (stop.clone(), counts.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let ch = Channel::from_shared(url).unwrap().connect().await.unwrap();
            let mut c = SwitchClient::new(ch).max_encoding_message_size(64 << 20);
            let big = "x".repeat(mlcc_proto::MAX_MESSAGE_BYTES + 1);
            while !stop.load(Relaxed) {
                counts.invalid_sent.fetch_add(1, Relaxed);
                let mut bad = fetch("h1", 3);
                bad.host = "no-such-host".into();
                if c.fetch_feedback(bad).await.is_err() {
                    counts.invalid_refused.fetch_add(1, Relaxed);
                }
                counts.invalid_sent.fetch_add(1, Relaxed);
                let mut many = fetch("h1", 1);
                many.flows = vec![many.flows[0].clone(); mlcc_proto::MAX_FLOWS_PER_CALL + 1];
                if c.fetch_feedback(many).await.is_err() {
                    counts.invalid_refused.fetch_add(1, Relaxed);
                }
                counts.oversize_sent.fetch_add(1, Relaxed);
                let mut huge = fetch("h1", 1);
                huge.host = big.clone();
                if c.fetch_feedback(huge).await.is_err() {
                    counts.oversize_refused.fetch_add(1, Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    // 4. Sessions that send and never read their replies.
    {
        let (stop, counts, url) = (stop.clone(), counts.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let ch = Channel::from_shared(url).unwrap().connect().await.unwrap();
            let mut held = Vec::new();
            let n = env("FLOOD_UNREAD_SESSIONS", 8);
            for s in 0..n {
                let msgs = (0..200u64).map(move |i| pb::SessionRequest {
                    seq: s * 1000 + i,
                    request: Some(pb::session_request::Request::FetchFeedback(fetch("h1", 6))),
                    deadline_unix_ns: 0,
                });
                let mut c = SwitchClient::new(ch.clone());
                if let Ok(r) = c.session(tokio_stream::iter(msgs)).await {
                    counts.unread_sessions.fetch_add(1, Relaxed);
                    held.push(r); // kept, never read
                }
            }
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            drop(held);
        }));
    }

    // 5. The well-formed client: FetchFeedback with a one-slot deadline, back to back.
    let ch = Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = SwitchClient::new(ch);
    let probe = format!("h{}", max_hosts + 1);
    let mut lat = Vec::new();
    let (mut ok, mut failed) = (0u64, 0u64);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    // Longest time without a successful answer, from the start to the end of the flood.
    let (mut last_ok, mut max_gap) = (started, Duration::ZERO);
    while Instant::now() < until {
        let mut req = tonic::Request::new(fetch(&probe, 6));
        req.set_timeout(TAU);
        let t = Instant::now();
        match c.fetch_feedback(req).await {
            Ok(r) => {
                ok += 1;
                lat.push(t.elapsed());
                max_gap = max_gap.max(t.elapsed() + (t - last_ok));
                last_ok = Instant::now();
                assert_eq!(r.into_inner().flows.len(), 6);
            }
            Err(_) => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    max_gap = max_gap.max(last_ok.elapsed());
    let rss_end = rss_kib(pid);
    stop.store(true, Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let _ = rss_task.await;
    let flood_json = flood.await.unwrap();

    // Still alive and still serving.
    assert!(srv.0.try_wait().unwrap().is_none(), "mlcc-switchd died");
    let ch = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let d = SwitchClient::new(ch)
        .describe(pb::DescribeRequest {})
        .await
        .expect("Describe after the flood");
    assert_eq!(d.into_inner().switch_name, "sw1");

    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    let c = &counts;
    let rss_peak = rss_peak.load(Relaxed);
    let report = serde_json::json!({
        "baseline_hosts": baseline_hosts,
        "sustained_flow_updates_per_sec": sustained,
        "factor": factor,
        "flood_hosts": flood_hosts,
        "flood_flows_per_host": 6,
        "flood_offered_flow_updates_per_sec": flood_hosts as f64 * 6.0 / TAU.as_secs_f64(),
        "seconds": seconds,
        "probe_ok": ok,
        "probe_failed": failed,
        "probe_success_ratio": ok as f64 / (ok + failed).max(1) as f64,
        "probe_p50_us": pct(0.5),
        "probe_p99_us": pct(0.99),
        "probe_max_us": pct(1.0),
        "probe_max_gap_ms": max_gap.as_millis() as u64,
        "rss_kib": { "before_flood": rss_before, "peak": rss_peak, "end": rss_end },
        "garbage_connections": c.garbage_conns.load(Relaxed),
        "garbage_connections_closed_by_server": c.garbage_closed.load(Relaxed),
        "invalid_sent": c.invalid_sent.load(Relaxed),
        "invalid_refused": c.invalid_refused.load(Relaxed),
        "oversize_sent": c.oversize_sent.load(Relaxed),
        "oversize_refused": c.oversize_refused.load(Relaxed),
        "unread_sessions": c.unread_sessions.load(Relaxed),
        "baseline_generator": baseline,
        "flood_generator": flood_json,
    });
    println!("{report}");

    assert!(ok > 0, "{report}");
    assert!(
        ok as f64 / (ok + failed) as f64 >= MIN_PROBE_SUCCESS,
        "the well-formed client got too few answers within a slot: {report}"
    );
    assert!(
        max_gap <= MAX_PROBE_GAP,
        "the well-formed client went unanswered for longer than {MAX_PROBE_GAP:?}: {report}"
    );
    let rss_before = rss_before.expect("RSS from /proc");
    assert!(
        rss_peak <= rss_before + MAX_RSS_GROWTH_KIB,
        "memory grew by more than {MAX_RSS_GROWTH_KIB} KiB under the flood: {report}"
    );
    assert!(c.garbage_conns.load(Relaxed) > 0, "{report}");
    assert_eq!(
        c.garbage_conns.load(Relaxed),
        c.garbage_closed.load(Relaxed),
        "{report}"
    );
    assert!(c.invalid_sent.load(Relaxed) > 0, "{report}");
    assert_eq!(
        c.invalid_sent.load(Relaxed),
        c.invalid_refused.load(Relaxed),
        "{report}"
    );
    assert_eq!(
        c.oversize_sent.load(Relaxed),
        c.oversize_refused.load(Relaxed),
        "{report}"
    );
    srv.0.kill().unwrap();
}
