//! Fig. 7a, rate consistency: one long flow on mlcc's BPF datapath over a 1 Gbit/s link, its
//! order rewritten every 50 ms (the paper's interval) to a schedule of large steps, and what the
//! receiver acknowledged per 10 ms beside what was ordered. The paper drives iperf with its
//! user-space scheduler; here the order goes straight into the datapath's rate map, as mlccd's
//! does, so the figure shows the enforcement alone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mlcc_bpf::testbed::{Receiver, Sender, VethPair, unique_name};
use mlcc_bpf::{CcName, Datapath, Expiry, KernelDatapath, LoadOptions, Rate, RateOrder};
use mlcc_sim::plot::{COLORS, err, legend};
use plotters::prelude::*;
use serde::Serialize;

/// The link the flow crosses (TBF on the sender's egress).
pub const LINK_MBIT: u64 = 1000;
/// How often the order changes, as in the paper.
pub const INTERVAL: Duration = Duration::from_millis(50);
/// How finely the delivered rate is sampled.
pub const SAMPLE: Duration = Duration::from_millis(10);
/// Ordered Mbit/s, one per interval: the paper's 20 → 5 Gbit/s step and others, scaled to the
/// 1 Gbit/s link.
const SCHEDULE_MBIT: [u64; 16] = [
    800, 800, 800, 200, 200, 600, 600, 100, 900, 900, 400, 400, 50, 700, 300, 800,
];

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the schedule began.
    pub t_s: f64,
    pub ordered_mbit: f64,
    /// Acknowledged over the preceding [`SAMPLE`].
    pub delivered_mbit: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RateConsistency {
    pub samples: Vec<Sample>,
    /// Per interval after the first 10 ms of each: |delivered − ordered| / ordered.
    pub mean_error: f64,
    pub p95_error: f64,
    pub bytes_verified: u64,
}

/// Loads a datapath of its own (unique CC name and pins), runs the schedule, removes it all.
pub fn measure() -> Result<RateConsistency, String> {
    let name = unique_name("f7a").replace('-', "");
    let pins = PathBuf::from(format!("/sys/fs/bpf/mlcc-fig7a-{name}"));
    let dp = KernelDatapath::load(&LoadOptions {
        cc_name: CcName::new(&name).map_err(|e| e.to_string())?,
        pin_dir: pins.clone(),
        ..LoadOptions::default()
    })
    .map_err(|e| format!("loading the BPF datapath: {e}"))?;
    let r = run(dp);
    let _ = mlcc_bpf::unload_pinned(&pins);
    r
}

fn run(mut dp: KernelDatapath) -> Result<RateConsistency, String> {
    let io = |what: &'static str| move |e: std::io::Error| format!("{what}: {e}");
    let link = VethPair::create(Some(LINK_MBIT * 1_000_000)).map_err(io("veth pair"))?;
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .map_err(io("receiver"))?;
    let cc = dp.cc_name().clone();
    let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).map_err(io("sender"))?;
    let order = |mbit: u64, ttl: Duration| -> Result<RateOrder, String> {
        Ok(RateOrder {
            key: tx.key,
            rate: Rate::from_bits_per_sec(mbit * 1_000_000).ok_or("zero rate")?,
            expiry: Expiry::After(ttl),
            fill: None,
        })
    };
    let acked = |dp: &KernelDatapath| -> Result<u64, String> {
        Ok(dp
            .stats_of(&tx.key)
            .map_err(|e| e.to_string())?
            .map_or(0, |s| s.bytes_acked))
    };
    // Warm-up at the first rate: the first unpaced ACKs' queue drains before the clock starts.
    dp.set_rates(&[order(SCHEDULE_MBIT[0], Duration::from_secs(1))?])
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let per = (INTERVAL.as_micros() / SAMPLE.as_micros()) as usize;
    let start = Instant::now();
    let mut last = (start, acked(&dp)?);
    let mut samples = Vec::new();
    for (i, &mbit) in SCHEDULE_MBIT.iter().enumerate() {
        dp.set_rates(&[order(mbit, 3 * INTERVAL)?])
            .map_err(|e| e.to_string())?;
        for k in 0..per {
            let due = start + INTERVAL * i as u32 + SAMPLE * (k as u32 + 1);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            let now = (Instant::now(), acked(&dp)?);
            let dt = now.0.duration_since(last.0).as_secs_f64().max(1e-6);
            samples.push(Sample {
                t_s: now.0.duration_since(start).as_secs_f64(),
                ordered_mbit: mbit as f64,
                delivered_mbit: now.1.saturating_sub(last.1) as f64 * 8.0 / dt / 1e6,
            });
            last = now;
        }
    }
    let sent = tx.finish().map_err(io("sender"))?;
    let got = rx.finish().map_err(io("receiver"))?;
    if sent != got {
        return Err(format!(
            "payload differs end to end: sent {} bytes, received {}",
            sent.bytes, got.bytes
        ));
    }
    // Per interval, leaving out its first sample (the ACKs of bytes sent under the previous
    // order still arrive then).
    let mut errs: Vec<f64> = samples
        .chunks(per)
        .map(|c| {
            let tail = &c[1.min(c.len())..];
            let d = tail.iter().map(|s| s.delivered_mbit).sum::<f64>() / tail.len().max(1) as f64;
            let o = c.first().map_or(1.0, |s| s.ordered_mbit);
            (d - o).abs() / o
        })
        .collect();
    errs.sort_by(f64::total_cmp);
    let mean_error = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
    let p95_error = errs
        .get((errs.len() as f64 * 0.95) as usize)
        .or(errs.last())
        .copied()
        .unwrap_or(0.0);
    Ok(RateConsistency {
        samples,
        mean_error,
        p95_error,
        bytes_verified: got.bytes,
    })
}

/// Ordered (steps) and delivered (per 10 ms) rate over time.
pub fn plot(r: &RateConsistency, path: &Path) -> Result<(), String> {
    let t_max = r.samples.last().map_or(1.0, |s| s.t_s);
    let root = SVGBackend::new(path, (1000, 480)).into_drawing_area();
    let mut chart = crate::report::rate_chart(
        &root,
        "Fig. 7a: ordered vs delivered rate, one flow on mlcc's datapath",
        0.0..t_max,
        LINK_MBIT as f64,
    )?;
    let (c0, c1) = (COLORS[0], COLORS[1]);
    chart
        .draw_series(LineSeries::new(
            r.samples.iter().map(|s| (s.t_s, s.delivered_mbit)),
            c1.stroke_width(2),
        ))
        .map_err(err)?
        .label(format!("delivered (per {} ms)", SAMPLE.as_millis()))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c1));
    let mut steps = Vec::new();
    let mut prev_t = 0.0;
    for s in &r.samples {
        steps.push((prev_t, s.ordered_mbit));
        steps.push((s.t_s, s.ordered_mbit));
        prev_t = s.t_s;
    }
    chart
        .draw_series(LineSeries::new(steps, c0.stroke_width(2)))
        .map_err(err)?
        .label(format!("ordered (every {} ms)", INTERVAL.as_millis()))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c0));
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)
}
