//! Shared test harness: a switch emulator on 127.0.0.1 with an ephemeral port and a clock the
//! test moves by hand, so slots are explicit and nothing sleeps.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::{Slot, SlotConfig};
use mlcc_core::topology::Topology;
use mlcc_core::units::BytesPerSec;
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::switch_client::SwitchClient;
use mlcc_switch_emu::server::{self, Running};
use mlcc_switch_emu::{Clock, Emulator, ManualClock};
use tonic::transport::Channel;

pub const K: usize = 4;
pub const TAU: Duration = Duration::from_millis(20);
pub const CAP: f64 = 1e9;
pub const START: u64 = 1_000_000;

pub fn slots() -> SlotConfig {
    SlotConfig::new(TAU, K).unwrap()
}

/// Hosts h1..h4 on switch sw1, 8 Gbit/s (1e9 B/s) links; the switch owns sw1->h1..sw1->h4.
pub fn topology() -> Topology {
    Topology::single_switch(4, BytesPerSec(CAP)).unwrap()
}

pub struct Harness {
    pub clock: Arc<ManualClock>,
    pub running: Running,
    pub mode: FeedbackMode,
}

impl Harness {
    pub async fn start(mode: FeedbackMode) -> Harness {
        Self::start_on("127.0.0.1:0".parse().unwrap(), mode, Slot(START)).await
    }

    pub async fn start_on(addr: SocketAddr, mode: FeedbackMode, slot: Slot) -> Harness {
        let clock = Arc::new(ManualClock::new(slots().start_ns(slot)));
        let emu = Emulator::new(&topology(), "sw1", slots(), mode, slot).unwrap();
        let listener = bind(addr).await;
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let running = server::start(
            emu,
            clock.clone() as Arc<dyn Clock>,
            listener,
            Some(metrics),
        )
        .await
        .unwrap();
        Harness {
            clock,
            running,
            mode,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn set_slot(&self, s: u64) {
        self.clock.set(slots().start_ns(Slot(s)));
    }

    pub async fn client(&self) -> SwitchClient<Channel> {
        client(self.addr()).await
    }

    pub fn check_invariants(&self) {
        self.running
            .shared
            .lock()
            .table()
            .check_invariants()
            .unwrap();
    }
}

/// Binds, retrying briefly: rebinding the port of a server that just stopped can race with
/// the kernel releasing it.
async fn bind(addr: SocketAddr) -> tokio::net::TcpListener {
    for _ in 0..50 {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("cannot bind {addr}");
}

pub async fn client(addr: SocketAddr) -> SwitchClient<Channel> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    SwitchClient::new(ch).max_decoding_message_size(64 << 20)
}

pub fn item(flow: &str, link: &str, first: u64, rates: &[f64]) -> pb::ScheduleItem {
    pb::ScheduleItem {
        flow_id: flow.into(),
        links: vec![link.into()],
        first_slot: first,
        rates_bytes_per_sec: rates.to_vec(),
        rank: 0,
        done: false,
    }
}

pub fn query(flow: &str, links: &[&str], key: u64) -> pb::FeedbackQuery {
    pb::FeedbackQuery {
        flow_id: flow.into(),
        links: links.iter().map(|l| l.to_string()).collect(),
        rank: key,
        committed: false,
    }
}

pub async fn publish(
    c: &mut SwitchClient<Channel>,
    host: &str,
    items: Vec<pb::ScheduleItem>,
) -> pb::UpdateScheduleReply {
    c.update_schedule(pb::UpdateScheduleRequest {
        host: host.into(),
        slot: 0,
        flows: items,
    })
    .await
    .unwrap()
    .into_inner()
}

/// The load a flow of `host` sees on one link, from slot `from` (0 = switch's slot).
pub async fn load(
    c: &mut SwitchClient<Channel>,
    host: &str,
    q: pb::FeedbackQuery,
    from: u64,
) -> Vec<f64> {
    let r = c
        .fetch_feedback(pb::FetchFeedbackRequest {
            host: host.into(),
            slot: from,
            flows: vec![q],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.rejected.is_empty(), "{:?}", r.rejected);
    r.flows[0].links[0].load_bytes_per_sec.clone()
}

/// A `mlcc-switchd` process, killed if the test fails half-way so it does not outlive the test
/// (and hold the test runner's output pipe open).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The log a [`switchd`] process writes after its announcement.
pub type Log = std::io::Lines<std::io::BufReader<std::process::ChildStderr>>;

/// Starts the crate's `mlcc-switchd` with `args` (split at whitespace), on an ephemeral port as
/// switch `sw1` with JSON logs at info and `topology`, and reads its log until it announces its
/// gRPC address; returns the process, the address, the announcement and the rest of its log.
pub fn switchd(args: &str, topology: &std::path::Path) -> (KillOnDrop, String, String, Log) {
    use std::io::BufRead;
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_mlcc-switchd"))
            .args(args.split_whitespace())
            .args(["--listen", "127.0.0.1:0", "--switch", "sw1"])
            .args(["--log-format", "json", "--topology"])
            .arg(topology)
            .env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut log = std::io::BufReader::new(child.0.stderr.take().unwrap()).lines();
    let (addr, announcement) = announced_addr(&mut log);
    (child, addr, announcement, log)
}

/// Reads a `mlcc-switchd` process's JSON log lines (`--log-format json`) until it announces its
/// gRPC address, as the switch and `bench-baseline` both do ("serving mlcc.v1.Switch…");
/// returns the address and the announcement.
pub fn announced_addr(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
) -> (String, String) {
    loop {
        let line = lines.next().expect("exited before serving").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
        let message = v["fields"]["message"].as_str().unwrap_or_default();
        if let (true, Some(a)) = (
            message.starts_with("serving mlcc.v1.Switch"),
            v["fields"]["addr"].as_str(),
        ) {
            return (a.to_string(), message.to_string());
        }
    }
}
