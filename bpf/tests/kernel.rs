//! Root tests of the kernel datapath in network namespaces. They share the machine (CC names,
//! namespaces, the link's CPU), so they run one at a time behind `SERIAL`; without root each
//! prints why it skipped and passes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlcc_bpf::testbed::{Receiver, Sender, VethPair, unique_name};
use mlcc_bpf::{
    CcName, Datapath, Expiry, KernelDatapath, LoadOptions, Rate, RateOrder, SocketKey, SocketStats,
};

static SERIAL: Mutex<()> = Mutex::new(());

const LINK_BITS: u64 = 1_000_000_000;
const SLOT: Duration = Duration::from_millis(50);

fn root(test: &str) -> Option<MutexGuard<'static, ()>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped {test}: needs root (BPF struct_ops, network namespaces, bpffs)");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// A datapath with a unique CC name and pin directory, unloaded however the test ends.
struct Loaded {
    dp: Option<KernelDatapath>,
    dir: PathBuf,
}

impl Loaded {
    fn new() -> Self {
        let n = unique_name("m");
        let dir = PathBuf::from(format!("/sys/fs/bpf/mlcc-test-{n}"));
        let name = CcName::new(&n.replace('-', "")).expect("test CC name");
        let dp = KernelDatapath::load(&LoadOptions {
            cc_name: name,
            pin_dir: dir.clone(),
            ..LoadOptions::default()
        })
        .expect("load datapath");
        Self { dp: Some(dp), dir }
    }

    fn dp(&mut self) -> &mut KernelDatapath {
        self.dp.as_mut().expect("datapath loaded")
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        self.dp.take();
        let _ = mlcc_bpf::unload_pinned(&self.dir);
    }
}

fn mbit(m: u64) -> Rate {
    Rate::from_bits_per_sec(m * 1_000_000).expect("nonzero")
}

fn order(key: SocketKey, rate: Rate, ttl: Duration) -> RateOrder {
    RateOrder {
        key,
        rate,
        expiry: Expiry::After(ttl),
    }
}

fn stats(dp: &KernelDatapath, key: &SocketKey) -> SocketStats {
    dp.stats_of(key)
        .expect("read stats")
        .expect("socket has stats")
}

/// Achieved goodput between two samples, from the CC's own ACK timestamps.
fn rate_between(a: &SocketStats, b: &SocketStats) -> f64 {
    let dt = b.updated.saturating_since(a.updated).as_secs_f64();
    if dt <= 0.0 {
        0.0
    } else {
        (b.bytes_acked - a.bytes_acked) as f64 / dt
    }
}

fn sleep_until(t: Instant) {
    if let Some(d) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

struct Summary {
    mean: f64,
    p95: f64,
    max: f64,
}

fn summarize(mut errs: Vec<f64>) -> Summary {
    errs.sort_by(f64::total_cmp);
    let n = errs.len().max(1);
    Summary {
        mean: errs.iter().sum::<f64>() / n as f64,
        p95: errs
            .get((n as f64 * 0.95) as usize)
            .or(errs.last())
            .copied()
            .unwrap_or(0.0),
        max: errs.last().copied().unwrap_or(0.0),
    }
}

#[test]
fn rate_follows_a_schedule_changed_every_slot() {
    let Some(_serial) = root("rate_follows_a_schedule_changed_every_slot") else {
        return;
    };
    let mut loaded = Loaded::new();
    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let cc = loaded.dp().cc_name().clone();
    let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
    assert_eq!(
        mlcc_bpf::congestion_control(&tx.stream).unwrap(),
        cc.as_str()
    );

    // Orders are rewritten every slot like mlccd does; the planned rate steps every 5 slots.
    let steps_mbit = [
        100, 300, 50, 600, 200, 800, 150, 400, 700, 250, 500, 100, 900, 300, 50, 450, 650, 200,
    ];
    let slots_per_step = 5;
    let dp = loaded.dp();
    let key = tx.key;
    dp.set_rates(&[order(key, mbit(steps_mbit[0]), 3 * SLOT)])
        .unwrap();
    std::thread::sleep(Duration::from_millis(200)); // connection and first ACKs
    let start = Instant::now();
    let mut prev = stats(dp, &key);
    let (mut steady, mut first) = (Vec::new(), Vec::new());
    for (i, target) in steps_mbit
        .iter()
        .flat_map(|&m| std::iter::repeat_n(m, slots_per_step))
        .enumerate()
    {
        dp.set_rates(&[order(key, mbit(target), 3 * SLOT)]).unwrap();
        sleep_until(start + SLOT * (i as u32 + 1));
        let now = stats(dp, &key);
        let got = rate_between(&prev, &now);
        let want = mbit(target).bytes_per_sec() as f64;
        let err = (got - want).abs() / want;
        if i % slots_per_step == 0 {
            first.push(err)
        } else {
            steady.push(err)
        }
        prev = now;
    }
    let sent = tx.finish().unwrap();
    let got = rx.finish().unwrap();
    assert_eq!(sent, got, "payload differs end to end");
    let (s, f) = (summarize(steady), summarize(first));
    println!(
        "rate accuracy over {} slots of 50 ms: after the first slot of a step mean {:.2}% p95 {:.2}% max {:.2}%; \
         first slot of a step mean {:.2}% p95 {:.2}% max {:.2}%",
        steps_mbit.len() * slots_per_step,
        s.mean * 100.0,
        s.p95 * 100.0,
        s.max * 100.0,
        f.mean * 100.0,
        f.p95 * 100.0,
        f.max * 100.0
    );
    assert!(
        s.mean <= 0.05,
        "mean relative error {:.2}% > 5%",
        s.mean * 100.0
    );
}
