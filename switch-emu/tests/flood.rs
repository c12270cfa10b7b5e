//! Hostile load on a real `mlcc-switchd` process: the bench generator floods it with sessions
//! while other clients send garbage bytes, invalid and oversized requests, and open sessions
//! they never read. A well-formed client keeps calling FetchFeedback with a deadline; the
//! switch must stay up, keep answering it, and refuse every malformed call with an error.
//!
//! Scale from the environment, so the same test is the full-scale run:
//! `FLOOD_HOSTS=10000 FLOOD_SECONDS=20 cargo test --release -p mlcc-switch-emu --test flood -- --nocapture`
//! (10x the benchmark's 1000 hosts x 6 flows per 60 ms slot). Defaults are small for CI. The
//! figures are printed as one JSON line; only success and liveness are asserted, never timings.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

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

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the server on an ephemeral port; returns it and its address.
fn server(hosts: u64) -> (KillOnDrop, String) {
    let topo = std::env::temp_dir().join(format!("mlcc-flood-{}.toml", std::process::id()));
    std::fs::write(
        &topo,
        format!("[generate]\nkind = \"single-switch\"\nhosts = {hosts}\nhost_link = \"25Gbit\"\n"),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--switch", "sw1", "--tau", "60ms", "--horizon", "10"])
        .args(["--log-format", "json", "--worker-threads", "1"])
        .arg("--topology")
        .arg(&topo)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("server exited before serving").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
        if let Some(a) = v["fields"]["addr"].as_str()
            && v["fields"]["message"] == "serving mlcc.v1.Switch"
        {
            break a.to_string();
        }
    };
    // Keep draining its logs so a full pipe never blocks the server.
    std::thread::spawn(move || for _ in lines {});
    (KillOnDrop(child), addr)
}

fn fetch(host: &str, flows: usize) -> pb::FetchFeedbackRequest {
    pb::FetchFeedbackRequest {
        host: host.into(),
        slot: 0,
        flows: (0..flows)
            .map(|i| pb::FeedbackQuery {
                flow_id: format!("probe/{host}>h{}/agg", i + 2),
                links: vec![format!("sw1->h{}", i + 2)],
                iteration_start_slot: 1,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load test, not yet passing: in a debug build on a loaded 2-core machine even 200 \
            flooding hosts saturate the switch and the probe gets ~10-25% answers; run it \
            with --ignored (release) while working on load shedding"]
async fn a_flooded_switch_stays_up_and_serves_well_formed_clients() {
    let hosts = env("FLOOD_HOSTS", 200);
    let seconds = env("FLOOD_SECONDS", 3);
    let (mut srv, addr) = server(hosts + 1);
    let url = format!("http://{addr}");
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());

    // 1. The flood: the bench generator, every host firing at the slot boundary.
    let slots = seconds * 1000 / 60 + 1;
    let flood = Command::new(BIN)
        .args(["bench", "--target", &addr, "--burst", "--flows", "6"])
        .args(["--hosts", &hosts.to_string(), "--slots", &slots.to_string()])
        .args(["--connections", "16"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let flood = KillOnDrop(flood);

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
    let probe = format!("h{}", hosts + 1);
    let mut lat = Vec::new();
    let (mut ok, mut failed) = (0u64, 0u64);
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let mut req = tonic::Request::new(fetch(&probe, 6));
        req.set_timeout(Duration::from_millis(60));
        let t = Instant::now();
        match c.fetch_feedback(req).await {
            Ok(r) => {
                ok += 1;
                lat.push(t.elapsed());
                assert_eq!(r.into_inner().flows.len(), 6);
            }
            Err(_) => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let flood_out = tokio::task::spawn_blocking(move || {
        let mut f = flood;
        let mut out = String::new();
        // The generator ends after its slots; give it a bound.
        let deadline = Instant::now() + Duration::from_secs(seconds + 30);
        while f.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(mut o) = f.0.stdout.take()
            && f.0.try_wait().unwrap().is_some()
        {
            let _ = o.read_to_string(&mut out);
        }
        out
    })
    .await
    .unwrap();

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
    let flood_json: serde_json::Value =
        serde_json::from_str(flood_out.trim()).unwrap_or(serde_json::Value::Null);
    let report = serde_json::json!({
        "flood_hosts": hosts,
        "flood_flows_per_host": 6,
        "seconds": seconds,
        "probe_ok": ok,
        "probe_failed": failed,
        "probe_success_ratio": ok as f64 / (ok + failed).max(1) as f64,
        "probe_p50_us": pct(0.5),
        "probe_p99_us": pct(0.99),
        "probe_max_us": pct(1.0),
        "garbage_connections": c.garbage_conns.load(Relaxed),
        "garbage_connections_closed_by_server": c.garbage_closed.load(Relaxed),
        "invalid_sent": c.invalid_sent.load(Relaxed),
        "invalid_refused": c.invalid_refused.load(Relaxed),
        "oversize_sent": c.oversize_sent.load(Relaxed),
        "oversize_refused": c.oversize_refused.load(Relaxed),
        "unread_sessions": c.unread_sessions.load(Relaxed),
        "flood_generator": flood_json,
    });
    println!("{report}");

    assert!(ok > 0, "{report}");
    assert!(
        ok as f64 / (ok + failed) as f64 >= 0.9,
        "the well-formed client got too few answers: {report}"
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
