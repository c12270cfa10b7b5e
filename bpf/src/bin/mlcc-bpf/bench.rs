//! `mlcc-bpf bench`: what a slot of mlccd costs in the datapath (map writes and reads for N
//! flows) and what each ACK costs in the CC program.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mlcc_bpf::testbed::{Receiver, Sender, VethPair, unique_name};
use mlcc_bpf::{
    CcName, Datapath, Expiry, KernelDatapath, LoadOptions, MonotonicNs, Pacing, ProgRunStats, Rate,
    RateOrder, SocketInode, SocketKey, SocketStats, enable_bpf_run_time_stats,
};
use serde_json::json;

use crate::BoxError;

/// Unloads the bench's own datapath however the bench ends.
struct Loaded(Option<KernelDatapath>);

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Some(dp) = self.0.take() {
            let _ = dp.unload();
        }
    }
}

fn summary(mut ns: Vec<f64>) -> serde_json::Value {
    ns.sort_by(f64::total_cmp);
    let n = ns.len().max(1);
    let mean = ns.iter().sum::<f64>() / n as f64;
    let pct = |p: f64| {
        ns.get(((n as f64 * p) as usize).min(n - 1))
            .copied()
            .unwrap_or(0.0)
    };
    json!({ "mean_ns": mean.round(), "p50_ns": pct(0.5).round(), "p99_ns": pct(0.99).round(), "samples": ns.len() })
}

fn time_ns(f: impl FnOnce() -> Result<(), BoxError>) -> Result<f64, BoxError> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_nanos() as f64)
}

fn per_run(before: &[ProgRunStats], after: &[ProgRunStats], name: &str) -> serde_json::Value {
    let find = |v: &[ProgRunStats]| {
        v.iter()
            .find(|p| p.name == name)
            .map(|p| (p.run_count, p.run_time_ns))
            .unwrap_or((0, 0))
    };
    let (c0, t0) = find(before);
    let (c1, t1) = find(after);
    let runs = c1.saturating_sub(c0);
    let ns = t1.saturating_sub(t0);
    json!({ "program": name, "runs": runs, "ns_per_run": if runs > 0 { ns as f64 / runs as f64 } else { 0.0 } })
}

pub fn run(flows: u32, traffic: Duration) -> Result<(), BoxError> {
    let name = format!("mlccb{}", std::process::id());
    let opts = LoadOptions {
        cc_name: CcName::new(&name)?,
        pin_dir: PathBuf::from(format!("/sys/fs/bpf/{}", unique_name("mlcc-bench"))),
        ..LoadOptions::default()
    };
    let mut loaded = Loaded(Some(KernelDatapath::load(&opts)?));
    let dp = loaded.0.as_mut().ok_or("datapath vanished")?;

    let keys: Vec<SocketKey> = (0..flows)
        .map(|i| {
            let src = SocketAddr::new(
                Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8).into(),
                40000 + (i % 20000) as u16,
            );
            SocketKey::new(1, src, "10.2.0.1:5201".parse().expect("literal address"))
        })
        .collect();
    let rate = Rate::from_bits_per_sec(1_000_000_000).ok_or("zero rate")?;
    let orders: Vec<RateOrder> = keys
        .iter()
        .map(|&key| RateOrder {
            key,
            rate,
            expiry: Expiry::After(Duration::from_millis(180)),
            fill: None,
        })
        .collect();

    let mut single = Vec::new();
    for _ in 0..5 {
        for o in &orders {
            single.push(time_ns(|| Ok(dp.set_rates(std::slice::from_ref(o))?))?);
        }
    }
    let mut batch = Vec::new();
    for _ in 0..50 {
        batch.push(time_ns(|| Ok(dp.set_rates(&orders)?))?);
    }
    let mut clear = Vec::new();
    for _ in 0..20 {
        dp.set_rates(&orders)?;
        clear.push(time_ns(|| Ok(dp.clear_rates(&keys)?))?);
    }

    let fake = SocketStats {
        bytes_sent: 1 << 30,
        bytes_acked: 1 << 30,
        retransmits: 0,
        srtt: Duration::from_micros(50),
        min_rtt: Some(Duration::from_micros(30)),
        delivery_rate_bytes_per_sec: 125_000_000,
        pacing: Pacing::Paced {
            bytes_per_sec: 125_000_000,
        },
        cwnd_segments: 100,
        delivered_segments: 0,
        updated: MonotonicNs::now(),
        queued_bytes: Some(0),
        inode: SocketInode::NotYet,
    };
    let entries: Vec<(SocketKey, SocketStats)> = keys.iter().map(|&k| (k, fake)).collect();
    dp.insert_stats_for_bench(&entries)?;
    let mut read_single = Vec::new();
    for _ in 0..5 {
        for k in &keys {
            read_single.push(time_ns(|| {
                dp.stats_of(k)?.ok_or("stats entry missing")?;
                Ok(())
            })?);
        }
    }
    let mut read_batch = Vec::new();
    let mut seen = 0;
    for _ in 0..50 {
        read_batch.push(time_ns(|| {
            seen = dp.read_stats()?.len();
            Ok(())
        })?);
    }
    if seen != keys.len() {
        return Err(format!("batch read returned {seen} of {} entries", keys.len()).into());
    }
    dp.clear_rates(&keys)?;

    let per_ack = if traffic.is_zero() {
        json!(null)
    } else {
        per_ack_cost(dp, traffic)?
    };
    let per_flow = |v: &serde_json::Value| {
        let per = |k: &str| v[k].as_f64().unwrap_or(0.0) / f64::from(flows.max(1));
        json!({ "mean_ns": per("mean_ns"), "p50_ns": per("p50_ns") })
    };
    let report = json!({
        "flows": flows,
        "rate_update_single": summary(single),
        "rate_update_batch": summary(batch.clone()),
        "rate_update_batch_per_flow_ns": per_flow(&summary(batch)),
        "rate_clear_batch": summary(clear),
        "stats_read_single": summary(read_single),
        "stats_read_batch": summary(read_batch.clone()),
        "stats_read_batch_per_flow_ns": per_flow(&summary(read_batch)),
        "per_ack": per_ack,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// One flow over a 1 Gbit/s veth: half the time paced at 500 Mbit/s, half on the fallback CC.
fn per_ack_cost(dp: &mut KernelDatapath, traffic: Duration) -> Result<serde_json::Value, BoxError> {
    let _stats_on = enable_bpf_run_time_stats()?;
    let link = VethPair::create(Some(1_000_000_000))?;
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )?;
    let tx = Sender::start(&link.sender, None, rx.addr, Some(dp.cc_name()))?;
    let rate = Rate::from_bits_per_sec(500_000_000).ok_or("zero rate")?;
    dp.set_rates(&[RateOrder {
        key: tx.key,
        rate,
        expiry: Expiry::Never,
        fill: None,
    }])?;
    let p0 = dp.prog_run_stats()?;
    std::thread::sleep(traffic / 2);
    let p1 = dp.prog_run_stats()?;
    dp.clear_rates(&[tx.key])?;
    std::thread::sleep(traffic / 2);
    let p2 = dp.prog_run_stats()?;
    let sent = tx.finish()?;
    let got = rx.finish()?;
    if sent != got {
        return Err("bench flow lost data".into());
    }
    let name = p0.first().map(|p| p.name.clone()).unwrap_or_default();
    Ok(
        json!({ "paced": per_run(&p0, &p1, &name), "fallback": per_run(&p1, &p2, &name), "bytes": got.bytes }),
    )
}
