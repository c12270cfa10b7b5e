//! Root tests of the kernel datapath in network namespaces. They share the machine (CC names,
//! namespaces, the link's CPU), so they run one at a time behind `SERIAL`; without root each
//! prints why it skipped and passes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlcc_bpf::testbed::{Receiver, Sender, StreamSum, VethPair, unique_name};
use mlcc_bpf::{
    CcName, Datapath, Expiry, Fallback, KernelDatapath, LoadOptions, MaxSockets, MonotonicNs,
    Pacing, Rate, RateOrder, SocketInode, SocketKey, SocketStats,
};

static SERIAL: Mutex<()> = Mutex::new(());

// Tolerances: the schedule test holds the CC to a 5 % mean error; the isolation, fallback and
// restart tests check that the right order reaches the right socket, and allow 10 % so that a
// shared, loaded CI host starving the test's threads for a few ms does not fail them.

const LINK_BITS: u64 = 1_000_000_000;
const SLOT: Duration = Duration::from_millis(50);
const SECS_30: Duration = Duration::from_secs(30);

fn root(test: &str) -> Option<MutexGuard<'static, ()>> {
    if !rustix::process::geteuid().is_root() {
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
        Self::with_fallback(Fallback::default())
    }

    fn with_fallback(fallback: Fallback) -> Self {
        Self::with(LoadOptions {
            fallback,
            ..LoadOptions::default()
        })
    }

    /// `opts` under a unique CC name and pin directory.
    fn with(opts: LoadOptions) -> Self {
        let n = unique_name("m");
        let dir = PathBuf::from(format!("/sys/fs/bpf/mlcc-test-{n}"));
        let name = CcName::new(&n.replace('-', "")).expect("test CC name");
        let dp = KernelDatapath::load(&LoadOptions {
            cc_name: name,
            pin_dir: dir.clone(),
            ..opts
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
        fill: None,
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

/// Delivered rate between two samples (segments that reached the receiver, SACKed included, at
/// a full segment each): under loss, cumulative ACKs wait for each hole's retransmission and
/// shift bytes between windows; deliveries do not.
fn delivered_between(a: &SocketStats, b: &SocketStats) -> f64 {
    const MSS: f64 = 1448.0;
    let dt = b.updated.saturating_since(a.updated).as_secs_f64();
    if dt <= 0.0 {
        0.0
    } else {
        f64::from(b.delivered_segments.wrapping_sub(a.delivered_segments)) * MSS / dt
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

/// Orders are rewritten every slot like mlccd does; the planned rate steps every 5 slots.
const STEPS_MBIT: [u64; 18] = [
    100, 300, 50, 600, 200, 800, 150, 400, 700, 250, 500, 100, 900, 300, 50, 450, 650, 200,
];
const SLOTS_PER_STEP: usize = 5;

/// Runs the schedule once; relative errors of the steady slots and of each step's first slot.
fn run_schedule(dp: &mut KernelDatapath, key: SocketKey, scale: f64) -> (Summary, Summary) {
    let scaled = |m: u64| ((m as f64 * scale).round() as u64).max(1);
    // Warm-up under the first step's rate, long enough to drain what the first unpaced ACKs
    // queued at the shaper; the order must outlive it or Reno refills the queue.
    dp.set_rates(&[order(
        key,
        mbit(scaled(STEPS_MBIT[0])),
        Duration::from_secs(1),
    )])
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let mut prev = stats(dp, &key);
    let (mut steady, mut first) = (Vec::new(), Vec::new());
    let schedule = STEPS_MBIT
        .iter()
        .flat_map(|&m| std::iter::repeat_n(scaled(m), SLOTS_PER_STEP));
    for (i, target) in schedule.enumerate() {
        dp.set_rates(&[order(key, mbit(target), 3 * SLOT)]).unwrap();
        sleep_until(start + SLOT * (i as u32 + 1));
        let now = stats(dp, &key);
        let got = rate_between(&prev, &now);
        let want = mbit(target).bytes_per_sec() as f64;
        let err = (got - want).abs() / want;
        if std::env::var_os("MLCC_TEST_VERBOSE").is_some() {
            println!(
                "slot {i:3} target {target:4} Mbit got {:7.1} Mbit err {:5.1}% cwnd {} srtt {:?}",
                got * 8e-6,
                err * 100.0,
                now.cwnd_segments,
                now.srtt
            );
        }
        if i % SLOTS_PER_STEP == 0 {
            first.push(err)
        } else {
            steady.push(err)
        }
        prev = now;
    }
    (summarize(steady), summarize(first))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
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

    // A host busy with other work starves the flow's threads and softirqs for milliseconds,
    // which no CC can hide; a CC error fails every attempt, a noisy neighbour rarely five.
    let (mut attempts, mut passed) = (Vec::new(), false);
    for attempt in 1..=5 {
        // Let background work settle first (write-back after a big build showed up as starved
        // slots); a CC fault fails every attempt regardless.
        rustix::fs::sync();
        if attempt > 1 {
            std::thread::sleep(Duration::from_secs(1));
        }
        // What this host can carry at all: the flow unpaced (no order: Reno) for 0.5 s. A host
        // whose CPUs cannot drive the top steps (a throttled VM measured 290-580 Mbit/s for a
        // 600-800 Mbit/s order while cwnd was not limiting) would charge its own limit to the
        // CC; the schedule is scaled to stay within 90 % of what was measured, and says so.
        loaded.dp().clear_rates(&[tx.key]).unwrap();
        let unpaced = rate_over(
            &sample_for(loaded.dp(), &tx.key, Duration::from_millis(600)),
            0.1,
            0.6,
        ) * 8e-6;
        let top = *STEPS_MBIT.iter().max().unwrap() as f64;
        let scale = (0.9 * unpaced / top).clamp(0.2, 1.0);
        let (s, f) = run_schedule(loaded.dp(), tx.key, scale);
        let line = format!(
            "rate accuracy (attempt {attempt}, {} slots of 50 ms, load {}, host carries {unpaced:.0} \
             Mbit/s unpaced, steps x {scale:.2}): after the first slot of a step mean {:.2}% p95 \
             {:.2}% max {:.2}%; first slot of a step mean {:.2}% p95 {:.2}% max {:.2}%",
            STEPS_MBIT.len() * SLOTS_PER_STEP,
            load_average(),
            s.mean * 100.0,
            s.p95 * 100.0,
            s.max * 100.0,
            f.mean * 100.0,
            f.p95 * 100.0,
            f.max * 100.0
        );
        println!("{line}");
        attempts.push(line);
        if s.mean <= 0.05 {
            passed = true;
            break;
        }
    }
    let sent = tx.finish().unwrap();
    let got = rx.finish().unwrap();
    assert_eq!(sent, got, "payload differs end to end");
    assert!(
        passed,
        "mean relative error above 5% in every attempt:\n{}",
        attempts.join("\n")
    );
}

/// The samples taken in `[from, to]` seconds of a run.
fn within(
    samples: &[(Duration, SocketStats)],
    from: f64,
    to: f64,
) -> impl Iterator<Item = &SocketStats> {
    samples
        .iter()
        .filter(move |(t, _)| (from..=to).contains(&t.as_secs_f64()))
        .map(|(_, s)| s)
}

/// Achieved rate over the samples taken in `[from, to]` seconds of a run.
fn rate_over(samples: &[(Duration, SocketStats)], from: f64, to: f64) -> f64 {
    let inside: Vec<&SocketStats> = within(samples, from, to).collect();
    match (inside.first(), inside.last()) {
        (Some(a), Some(b)) => rate_between(a, b),
        _ => 0.0,
    }
}

/// The median cwnd (segments) of the samples taken in `[from, to]` seconds of a run.
fn median_cwnd(samples: &[(Duration, SocketStats)], from: f64, to: f64) -> u32 {
    let mut cwnd: Vec<u32> = within(samples, from, to).map(|s| s.cwnd_segments).collect();
    cwnd.sort_unstable();
    cwnd.get(cwnd.len() / 2).copied().unwrap_or(0)
}

/// The pacing rate the CC last applied, when every sample of the final quarter agrees on it.
fn paced_at(samples: &[(Duration, SocketStats)]) -> Option<u64> {
    let tail = &samples[samples.len() * 3 / 4..];
    let rates: Vec<Option<u64>> = tail
        .iter()
        .map(|(_, s)| match s.pacing {
            Pacing::Paced { bytes_per_sec } => Some(bytes_per_sec),
            Pacing::Fallback => None,
        })
        .collect();
    rates
        .first()
        .copied()
        .flatten()
        .filter(|r| rates.iter().all(|x| *x == Some(*r)))
}

fn sample_for(
    dp: &KernelDatapath,
    key: &SocketKey,
    total: Duration,
) -> Vec<(Duration, SocketStats)> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut i = 0;
    while start.elapsed() < total {
        out.push((start.elapsed(), stats(dp, key)));
        i += 1;
        sleep_until(start + SLOT * i);
    }
    out
}

#[test]
fn the_loader_sizes_the_per_socket_maps_and_a_reopened_datapath_tells_the_size() {
    let Some(_serial) = root("the_loader_sizes_the_per_socket_maps") else {
        return;
    };
    let mut default = Loaded::new();
    assert_eq!(
        default.dp().max_sockets().unwrap(),
        MaxSockets::default().get()
    );
    let mut small = Loaded::with(LoadOptions {
        max_sockets: MaxSockets::new(1024).unwrap(),
        ..LoadOptions::default()
    });
    assert_eq!(small.dp().max_sockets().unwrap(), 1024);
    let reopened = KernelDatapath::open(&small.dir).expect("open the pinned datapath");
    assert_eq!(reopened.max_sockets().unwrap(), 1024);
    assert!(reopened.read_stats().unwrap().is_empty());
}

#[test]
fn flows_in_namespaces_with_equal_addresses_get_their_own_rates() {
    let Some(_serial) = root("flows_in_namespaces_with_equal_addresses_get_their_own_rates") else {
        return;
    };
    let mut loaded = Loaded::new();
    let cc = loaded.dp().cc_name().clone();
    let rates = [100, 250, 400];
    let links: Vec<VethPair> = rates
        .iter()
        .map(|_| VethPair::create(Some(LINK_BITS)).expect("veth pair"))
        .collect();
    let mut flows = Vec::new();
    for link in &links {
        // The same 4-tuple in every pair of namespaces: only the netns cookie tells them apart.
        let rx = Receiver::start(
            &link.receiver,
            SocketAddr::new(link.receiver_addr.into(), 5201),
        )
        .expect("receiver");
        let from = SocketAddr::new(link.sender_addr.into(), 40000);
        let tx = Sender::start(&link.sender, Some(from), rx.addr, Some(&cc)).expect("sender");
        flows.push((rx, tx));
    }
    let keys: Vec<SocketKey> = flows.iter().map(|(_, tx)| tx.key).collect();
    assert!(
        keys.windows(2)
            .all(|w| w[0].src() == w[1].src() && w[0].dst() == w[1].dst())
    );
    assert!(
        keys.windows(2)
            .all(|w| w[0].netns_cookie() != w[1].netns_cookie())
    );

    let dp = loaded.dp();
    let orders: Vec<RateOrder> = keys
        .iter()
        .zip(rates)
        .map(|(&k, m)| order(k, mbit(m), Duration::from_secs(10)))
        .collect();
    dp.set_rates(&orders).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let listed = dp.read_stats().unwrap();
    for k in &keys {
        assert!(
            listed.iter().any(|(l, _)| l == k),
            "{k} missing from read_stats"
        );
        assert!(
            dp.sockets().unwrap().contains(k),
            "{k} missing from sockets"
        );
    }
    // On a loaded 2-core host the user-space sender can be starved of CPU for a window, which
    // no CC can hide: measure up to three windows; every flow must be within 10 % in one of
    // them. A wrong order reaching the wrong socket fails all three.
    let mut report = Vec::new();
    let mut passed = false;
    for attempt in 1..=3 {
        let before: Vec<SocketStats> = keys.iter().map(|k| stats(dp, k)).collect();
        std::thread::sleep(Duration::from_millis(1500));
        let after: Vec<SocketStats> = keys.iter().map(|k| stats(dp, k)).collect();
        let mut all_ok = true;
        for (i, m) in rates.iter().enumerate() {
            let got = rate_between(&before[i], &after[i]);
            let want = mbit(*m).bytes_per_sec() as f64;
            let line = format!(
                "isolation (window {attempt}, load {}): flow {i} ordered {m} Mbit/s, got {:.1} Mbit/s ({:+.2}%)",
                load_average(),
                got * 8e-6,
                (got / want - 1.0) * 100.0
            );
            println!("{line}");
            report.push(line);
            all_ok &= (got - want).abs() / want <= 0.10;
        }
        if all_ok {
            passed = true;
            break;
        }
    }
    assert!(
        passed,
        "some flow missed its rate by more than 10% in every window:\n{}",
        report.join("\n")
    );
    for (rx, tx) in flows {
        let sent = tx.finish().unwrap();
        assert_eq!(sent, rx.finish().unwrap(), "payload differs end to end");
    }
    // `release` removes each closed socket's stats and order, when the kernel destroys the
    // socket: after its close handshake, which a loaded host (or a retransmitted FIN) can take
    // past a second or two.
    let deadline = Instant::now() + Duration::from_secs(10);
    while keys.iter().any(|k| dp.stats_of(k).unwrap().is_some()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (k, link) in keys.iter().zip(&links) {
        assert!(
            dp.stats_of(k).unwrap().is_none(),
            "stats of closed {k} not removed; its namespace's sockets:\n{}",
            link.sender
                .enter(|| std::process::Command::new("ss").arg("-tanei").output())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("(ss failed: {e})"))
        );
    }
    assert!(
        dp.orders().unwrap().is_empty(),
        "orders of closed sockets not removed"
    );
}

/// Orders `tx` paced at `rate` for a second and samples it for 2.4 s, nothing renewing the
/// order (mlccd died), then stops both ends and checks the payload end to end. Returns the
/// samples and what arrived.
fn lapsing_order(
    dp: &mut KernelDatapath,
    tx: Sender,
    rx: Receiver,
    rate: Rate,
) -> (Vec<(Duration, SocketStats)>, StreamSum) {
    dp.set_rates(&[order(tx.key, rate, Duration::from_secs(1))])
        .unwrap();
    let samples = sample_for(dp, &tx.key, Duration::from_millis(2400));
    let sent = tx.finish().unwrap();
    let got = rx.finish().unwrap();
    assert_eq!(sent, got, "payload differs end to end");
    (samples, got)
}

#[test]
fn expired_order_falls_back_to_reno_without_losing_data() {
    let Some(_serial) = root("expired_order_falls_back_to_reno_without_losing_data") else {
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
    let (samples, got) = lapsing_order(loaded.dp(), tx, rx, mbit(100));

    let paced = rate_over(&samples, 0.3, 0.95) * 8e-6;
    let after = rate_over(&samples, 1.5, 2.0) * 8e-6;
    let modes_after: Vec<Pacing> = samples
        .iter()
        .filter(|(t, _)| *t > Duration::from_millis(1100))
        .map(|(_, s)| s.pacing)
        .collect();
    println!(
        "fallback: {paced:.1} Mbit/s under the 100 Mbit/s order, {after:.1} Mbit/s in [0.5 s, 1 s] after it expired; \
         {} bytes checksummed end to end",
        got.bytes
    );
    assert!(
        (paced - 100.0).abs() <= 10.0,
        "paced at {paced:.1} Mbit/s, ordered 100"
    );
    assert!(
        modes_after.iter().all(|p| *p == Pacing::Fallback),
        "still paced after expiry: {modes_after:?}"
    );
    assert!(
        after >= 0.5 * LINK_BITS as f64 * 1e-6,
        "fallback reached only {after:.1} Mbit/s"
    );
}

#[test]
fn orders_apply_after_the_loader_restarts() {
    let Some(_serial) = root("orders_apply_after_the_loader_restarts") else {
        return;
    };
    let n = unique_name("r");
    let dir = PathBuf::from(format!("/sys/fs/bpf/mlcc-test-{n}"));
    let name = n.replace('-', "");
    // Guard first, so the pins go even if an assertion fails.
    let guard = Loaded {
        dp: None,
        dir: dir.clone(),
    };
    // A separate loader process that exits: only the pins keep the datapath alive.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlcc-bpf"))
        .args(["--pin-dir", dir.to_str().unwrap(), "load", "--name", &name])
        .output()
        .expect("run mlcc-bpf load");
    assert!(
        out.status.success(),
        "mlcc-bpf load: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let cc = CcName::new(&name).unwrap();
    let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
    assert_eq!(mlcc_bpf::congestion_control(&tx.stream).unwrap(), name);

    let mut first = KernelDatapath::open(&dir).expect("open pins");
    assert_eq!(first.cc_name(), &cc);
    // The counter of window.h's repairs is pinned with the rest and read back.
    assert!(first.ssthresh_repairs().unwrap().is_some());
    first
        .set_rates(&[order(tx.key, mbit(100), Duration::from_secs(10))])
        .unwrap();
    let s = sample_for(&first, &tx.key, Duration::from_millis(800));
    let r1 = rate_over(&s, 0.3, 0.8) * 8e-6;
    let p1 = paced_at(&s);
    drop(first); // mlccd exits

    let mut second = KernelDatapath::open(&dir).expect("re-open pins");
    second
        .set_rates(&[order(tx.key, mbit(300), Duration::from_secs(10))])
        .unwrap();
    let s = sample_for(&second, &tx.key, Duration::from_millis(1600));
    let r2 = rate_over(&s, 0.6, 1.6) * 8e-6;
    let p2 = paced_at(&s);
    let sent = tx.finish().unwrap();
    assert_eq!(sent, rx.finish().unwrap(), "payload differs end to end");
    println!(
        "restart: paced at {p1:?} B/s, achieved {r1:.1} Mbit/s ordered 100 by the first opener; \
         paced at {p2:?} B/s, achieved {r2:.1} Mbit/s ordered 300 after re-opening"
    );
    // What this test is for: the re-opened datapath's order reaches the socket. The kernel's
    // pacing rate is the exact witness; how closely a user-space sender on a loaded CI host
    // achieves it is the rate-accuracy test's job (two CI runs measured 88/260 and 262 here),
    // so throughput only has to follow the step clearly.
    assert_eq!(
        p1,
        Some(mbit(100).bytes_per_sec()),
        "first order not applied"
    );
    assert_eq!(
        p2,
        Some(mbit(300).bytes_per_sec()),
        "re-opened order not applied"
    );
    assert!(
        (r1 - 100.0).abs() <= 25.0 && (r2 - 300.0).abs() <= 75.0 && r2 >= 2.0 * r1,
        "achieved {r1:.1} / {r2:.1} Mbit/s do not follow the 100 -> 300 orders"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlcc-bpf"))
        .args(["--pin-dir", dir.to_str().unwrap(), "unload"])
        .output()
        .expect("run mlcc-bpf unload");
    assert!(
        out.status.success(),
        "mlcc-bpf unload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists(), "pins left after unload");
    drop(guard);
}

/// A cgroup v2 directory for the test; the process is moved back and the cgroup removed on drop.
struct TestCgroup {
    dir: PathBuf,
    home: PathBuf,
}

impl TestCgroup {
    fn create() -> Self {
        let root = mlcc_bpf::testbed::cgroup2_root().expect("a cgroup2 mount");
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup2 membership");
        let home = root.join(rel.trim_start_matches('/'));
        let dir = root.join(unique_name("mlcc-test-cg"));
        std::fs::create_dir(&dir).expect("create test cgroup");
        Self { dir, home }
    }

    fn enter(&self) {
        std::fs::write(
            self.dir.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .expect("join test cgroup");
    }

    fn leave(&self) {
        std::fs::write(
            self.home.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .expect("leave test cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.home.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn sock_ops_puts_only_sockets_of_the_chosen_cgroup_on_the_cc() {
    let Some(_serial) = root("sock_ops_puts_only_sockets_of_the_chosen_cgroup_on_the_cc") else {
        return;
    };
    let loaded = Loaded::new();
    let dp = loaded.dp.as_ref().expect("loaded");
    let cg = TestCgroup::create();
    dp.attach_cgroup(&cg.dir).expect("attach sock_ops");
    let ns = mlcc_bpf::testbed::Netns::create("mlcc-cg").expect("netns");
    let listener = ns
        .enter(|| std::net::TcpListener::bind("127.0.0.1:0"))
        .expect("listen");
    let addr = listener.local_addr().unwrap();

    cg.enter();
    let inside = ns.enter(|| std::net::TcpStream::connect(addr));
    cg.leave();
    let inside = inside.expect("connect from the cgroup");
    let (inside_peer, _) = listener.accept().unwrap();
    let outside = ns
        .enter(|| std::net::TcpStream::connect(addr))
        .expect("connect from outside");
    let (outside_peer, _) = listener.accept().unwrap();

    let cc = |s: &std::net::TcpStream| mlcc_bpf::congestion_control(s).unwrap();
    println!(
        "sock_ops: in cgroup {} (its peer {}), outside {} (its peer {})",
        cc(&inside),
        cc(&inside_peer),
        cc(&outside),
        cc(&outside_peer)
    );
    assert_eq!(cc(&inside), dp.cc_name().as_str());
    assert_ne!(
        cc(&inside_peer),
        dp.cc_name().as_str(),
        "the listener is outside the cgroup"
    );
    assert_ne!(cc(&outside), dp.cc_name().as_str());
    assert_ne!(cc(&outside_peer), dp.cc_name().as_str());

    dp.detach_cgroup(&cg.dir).expect("detach sock_ops");
    cg.enter();
    let later = ns.enter(|| std::net::TcpStream::connect(addr));
    cg.leave();
    let later = later.expect("connect after detach");
    assert_ne!(
        cc(&later),
        dp.cc_name().as_str(),
        "detached cgroup still selects the CC"
    );
}

/// `/run/netns/<name>`, what `LossInjector::attach` opens.
fn netns_path(ns: &mlcc_bpf::testbed::Netns) -> PathBuf {
    PathBuf::from(format!("/run/netns/{}", ns.name()))
}

fn tcp_info(stream: &std::net::TcpStream) -> libc::tcp_info {
    mlcc_bpf::tcp_info(stream).expect("TCP_INFO")
}

/// One window of a paced lossy flow beside a lossless control at the same plan: what each
/// delivered, and what may explain a shortfall.
struct Window {
    mbit: f64,
    control_mbit: f64,
    /// Retransmission timeouts that fired in the window (None on kernels before 6.7).
    rtos: Option<u16>,
    /// CPU time the hypervisor took from this machine in the window (None without /proc/stat).
    steal_ms: Option<u64>,
}

impl Window {
    /// 95 % of the plan, or of what the control delivered where the host gave it less: a
    /// millisecond the host takes from both flows is not the lossy flow's loss recovery.
    fn floor(&self, plan_mbit: u64) -> f64 {
        0.95 * self.control_mbit.min(plan_mbit as f64)
    }

    fn describe(&self, plan_mbit: u64) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
        let rates = format!("{:.0}/{:.0}", self.mbit, self.control_mbit);
        if self.mbit >= self.floor(plan_mbit) {
            rates
        } else {
            format!(
                "{rates}[rto {} steal {} ms]",
                opt(self.rtos.map(|r| r.to_string())),
                opt(self.steal_ms.map(|s| s.to_string()))
            )
        }
    }
}

/// Slots in each measured window of the loss test (see [`paced_windows_beside_a_control`]), and
/// in each of its attempts (2 s).
const LOSS_WINDOW_SLOTS: u32 = 2;
const LOSS_ATTEMPT_SLOTS: u32 = 40;

/// Orders both flows at `plan_mbit` every slot, as mlccd does, and measures them over windows of
/// [`LOSS_WINDOW_SLOTS`] slots, in attempts of [`LOSS_ATTEMPT_SLOTS`] on the same connections
/// until one attempt's windows (but a first one's start) all reach their floor, at most
/// `attempts` of them.
///
/// The control shares the link, the CC, the CPUs and the hypervisor with the lossy flow, so a
/// window where the host starved the flows' threads or softirqs moves its floor down with it; on
/// a CI host that stalled for 5-8 ms about once a second, a floor at the plan alone failed now
/// and then with no timeout in any window. A datapath that lets loss recovery throttle the flow
/// fails every attempt: a retransmission timeout stalls it for the 10 ms RTO floor, a tenth of a
/// window, and without the floor empties two windows; a pace halved only while the socket is in
/// Recovery (~4 % of its bytes) failed every attempt of both runs that tried it.
///
/// Windows are two slots long because deliveries are counted per ACK, and the receiver here ACKs
/// about 45 segments (64 KB, one GRO batch) at a time: at 300 Mbit/s a 50-ms window holds ~1300
/// segments, so one ACK more or less at either edge moves it by 3.5 %, most of the margin that
/// 1 % of retransmissions leaves under a 95 % floor. Per-millisecond samples of both flows'
/// segments sent showed the lossy flow sending at the control's rate through those short
/// windows.
fn paced_windows_beside_a_control(
    dp: &mut KernelDatapath,
    lossy: &Sender,
    control: &Sender,
    plan_mbit: u64,
    attempts: usize,
) -> Vec<Vec<Window>> {
    let plan = mbit(plan_mbit);
    let start = Instant::now();
    let mut prev = (stats(dp, &lossy.key), stats(dp, &control.key));
    let mut prev_rto = total_rto(&lossy.stream);
    let mut prev_steal = steal_ms();
    let mut done: Vec<Vec<Window>> = Vec::new();
    let mut i = 0u32;
    for _ in 0..attempts {
        let mut windows = Vec::new();
        for _ in 0..LOSS_ATTEMPT_SLOTS / LOSS_WINDOW_SLOTS {
            for _ in 0..LOSS_WINDOW_SLOTS {
                let ttl = 3 * SLOT;
                dp.set_rates(&[order(lossy.key, plan, ttl), order(control.key, plan, ttl)])
                    .unwrap();
                i += 1;
                sleep_until(start + SLOT * i);
            }
            let now = (stats(dp, &lossy.key), stats(dp, &control.key));
            let (rto, steal) = (total_rto(&lossy.stream), steal_ms());
            windows.push(Window {
                mbit: delivered_between(&prev.0, &now.0) * 8e-6,
                control_mbit: delivered_between(&prev.1, &now.1) * 8e-6,
                rtos: rto.zip(prev_rto).map(|(a, b)| a.wrapping_sub(b)),
                steal_ms: steal.zip(prev_steal).map(|(a, b)| a.saturating_sub(b)),
            });
            (prev, prev_rto, prev_steal) = (now, rto, steal);
        }
        let ok = windows
            .iter()
            .skip(usize::from(done.is_empty()))
            .all(|w| w.mbit >= w.floor(plan_mbit));
        done.push(windows);
        if ok {
            break;
        }
    }
    done
}

/// Retransmission timeouts on `stream` so far (None on kernels before 6.7).
fn total_rto(stream: &std::net::TcpStream) -> Option<u16> {
    mlcc_bpf::tcp_total_rto(stream).ok().flatten()
}

/// Milliseconds of CPU time stolen from this machine by its hypervisor, all CPUs together
/// (/proc/stat's eighth field, in USER_HZ ticks of 10 ms).
fn steal_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: u64 = stat
        .lines()
        .next()?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()?;
    Some(ticks * 10)
}

/// Segments the kernel retransmitted on `stream` (`tcp_info.tcpi_total_retrans`).
fn total_retrans(stream: &std::net::TcpStream) -> u32 {
    tcp_info(stream).tcpi_total_retrans
}

/// The socket's retransmission timeout after `rounds` request/response exchanges: the kernel
/// lets the RTT variance (and with it the RTO) fall to the floor over a few RTTs of samples.
fn rto_after_exchanges(
    a: &mut std::net::TcpStream,
    b: &mut std::net::TcpStream,
    rounds: usize,
) -> Duration {
    use std::io::{Read, Write};
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    let mut byte = [0u8; 1];
    for _ in 0..rounds {
        a.write_all(b"x").unwrap();
        b.read_exact(&mut byte).unwrap();
        b.write_all(b"y").unwrap();
        a.read_exact(&mut byte).unwrap();
    }
    Duration::from_micros(tcp_info(a).tcpi_rto.into())
}

#[test]
fn sockets_joining_the_cc_get_its_rto_floor_and_others_keep_the_kernels() {
    let Some(_serial) =
        root("sockets_joining_the_cc_get_its_rto_floor_and_others_keep_the_kernels")
    else {
        return;
    };
    let mut loaded = Loaded::new();
    let dp = loaded.dp();
    let floor = dp
        .rto_floor()
        .expect("config")
        .get()
        .expect("a floor by default");
    let ns = mlcc_bpf::testbed::Netns::create("mlcc-rto").expect("netns");
    let listener = ns
        .enter(|| std::net::TcpListener::bind("127.0.0.1:0"))
        .expect("listen");
    let addr = listener.local_addr().unwrap();
    let pair = || {
        let a = ns
            .enter(|| std::net::TcpStream::connect(addr))
            .expect("connect");
        let (b, _) = listener.accept().unwrap();
        (a, b)
    };
    let (mut on_cc, mut on_cc_peer) = pair();
    mlcc_bpf::set_congestion_control(&on_cc, dp.cc_name()).expect("TCP_CONGESTION");
    let (mut plain, mut plain_peer) = pair();
    let rto_cc = rto_after_exchanges(&mut on_cc, &mut on_cc_peer, 200);
    let rto_plain = rto_after_exchanges(&mut plain, &mut plain_peer, 200);
    println!(
        "RTO floor {floor:?}: a socket on {} has RTO {rto_cc:?}, one on {} {rto_plain:?} (loopback)",
        dp.cc_name(),
        mlcc_bpf::congestion_control(&plain).unwrap()
    );
    // Loopback RTTs are microseconds: the RTO is the floor rounded up to timer ticks.
    assert!(
        rto_cc >= floor && rto_cc < 4 * floor,
        "RTO {rto_cc:?} on the CC, floor {floor:?}"
    );
    assert!(
        rto_plain >= Duration::from_millis(200),
        "a socket not on the CC has RTO {rto_plain:?}, below the kernel's 200 ms floor"
    );
}

/// Drop probability of the loss tests, and how many standard deviations of the binomial the
/// observed ratio may stray.
const LOSS_P: f64 = 0.02;
const LOSS_SIGMAS: f64 = 5.0;

#[test]
fn loss_program_drops_data_segments_at_its_probability_and_nothing_else() {
    let Some(_serial) =
        root("loss_program_drops_data_segments_at_its_probability_and_nothing_else")
    else {
        return;
    };
    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    let lossy = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let clean = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let port = lossy.addr.port();
    let spec = mlcc_bpf::LossSpec::new(LOSS_P, 7, port..=port).expect("spec");
    mlcc_bpf::send_single_segments(&netns_path(&link.sender), "eth0").expect("gso");
    // Data segments arrive at the receiver: lost there, as on the wire.
    let mut rx_side =
        mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec.clone())
            .expect("attach on the receiver");
    // The sender only gets ACKs on the data port: pure ACKs, none to drop.
    let tx_side = mlcc_bpf::LossInjector::attach(&netns_path(&link.sender), "eth0", spec)
        .expect("attach on the sender");

    let a = Sender::start(&link.sender, None, lossy.addr, None).expect("sender");
    let b = Sender::start(&link.sender, None, clean.addr, None).expect("sender");
    std::thread::sleep(Duration::from_millis(1500));
    let (a_stream, b_stream) = (a.stream.try_clone().unwrap(), b.stream.try_clone().unwrap());
    let (sent_a, sent_b) = (a.finish().unwrap(), b.finish().unwrap());
    assert_eq!(
        sent_a,
        lossy.finish().unwrap(),
        "lossy flow's payload differs"
    );
    assert_eq!(
        sent_b,
        clean.finish().unwrap(),
        "clean flow's payload differs"
    );
    // Read to the end: every lost segment has been sent again.
    let (a_retrans, b_retrans) = (total_retrans(&a_stream), total_retrans(&b_stream));

    let c = rx_side.counters().expect("counters");
    let r = tx_side.counters().expect("counters");
    let n = c.data_segments as f64;
    let sd = (LOSS_P * (1.0 - LOSS_P) / n).sqrt();
    println!(
        "loss: {} of {} data segments dropped ({:.3} %, asked {:.1} % ± {:.3} at {LOSS_SIGMAS} sd), \
         {} other packets passed; the clean flow retransmitted {b_retrans}, the lossy one {a_retrans}; \
         the sender's side (ACKs) saw {} data segments and {} other packets",
        c.dropped_segments,
        c.data_segments,
        c.drop_ratio() * 100.0,
        LOSS_P * 100.0,
        LOSS_SIGMAS * sd * 100.0,
        c.other_packets,
        r.data_segments,
        r.other_packets,
    );
    assert!(c.data_segments > 10_000, "too few segments: {c:?}");
    assert!(
        (c.drop_ratio() - LOSS_P).abs() <= LOSS_SIGMAS * sd,
        "dropped {:.4}, asked {LOSS_P}",
        c.drop_ratio()
    );
    // What the program counted as data is the lossy flow's segments (first sends and
    // retransmissions), not the clean flow's, which went by as other traffic (its own
    // retransmits are the shaper's queue overflowing).
    let mss = 1448;
    let lossy_segments = sent_a.bytes / mss;
    assert!(
        c.data_segments >= lossy_segments
            && c.data_segments <= lossy_segments + lossy_segments / 10 + u64::from(a_retrans),
        "{} data segments for a flow of {lossy_segments} segments and {a_retrans} retransmits",
        c.data_segments
    );
    assert!(
        c.other_packets >= sent_b.bytes / mss,
        "the clean flow's {} segments were not all passed as other traffic: {c:?}",
        sent_b.bytes / mss
    );
    assert!(
        u64::from(a_retrans) >= c.dropped_segments,
        "{a_retrans} retransmitted, {} dropped",
        c.dropped_segments
    );
    assert_eq!(
        (r.data_segments, r.dropped_segments),
        (0, 0),
        "ACKs counted as data: {r:?}"
    );
    assert!(r.other_packets > 1000, "receiver's ACKs not seen: {r:?}");

    // Removing leaves the device as it was: no clsact qdisc, no filter.
    rx_side.remove().expect("remove");
    drop(tx_side);
    for ns in [&link.sender, &link.receiver] {
        let out = std::process::Command::new("tc")
            .args(["-n", ns.name(), "qdisc", "show", "dev", "eth0"])
            .output()
            .expect("tc");
        let qdiscs = String::from_utf8_lossy(&out.stdout);
        assert!(
            !qdiscs.contains("clsact"),
            "clsact left behind in {}: {qdiscs}",
            ns.name()
        );
    }
}

#[test]
fn paced_flow_keeps_its_plan_through_random_loss_and_fallback_reno_backs_off() {
    let Some(_serial) =
        root("paced_flow_keeps_its_plan_through_random_loss_and_fallback_reno_backs_off")
    else {
        return;
    };
    const PLAN_MBIT: u64 = 300;
    const LOSS: f64 = 0.01;
    const ATTEMPTS: usize = 8;
    let mut loaded = Loaded::new();
    let cc = loaded.dp().cc_name().clone();
    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    mlcc_bpf::send_single_segments(&netns_path(&link.sender), "eth0").expect("gso");
    let any = SocketAddr::new(link.receiver_addr.into(), 0);

    // Fallback Reno (no order), unpaced, first without loss, then with it: its goodput, its
    // retransmissions, and its median cwnd over the same window. The cwnd is what backing off
    // means; on this link's sub-millisecond RTT a cwnd of a dozen segments still fills 1 Gbit/s,
    // so the goodputs differ by a few percent, less than a loaded host moves them.
    let goodput = |dp: &mut KernelDatapath, lossy: bool| -> (f64, u32, u32) {
        let rx = Receiver::start(&link.receiver, any).expect("receiver");
        let port = rx.addr.port();
        let injector = lossy.then(|| {
            let spec = mlcc_bpf::LossSpec::new(LOSS, 11, port..=port).expect("spec");
            mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec)
                .expect("attach")
        });
        let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
        let samples = sample_for(dp, &tx.key, Duration::from_millis(1600));
        let retrans = total_retrans(&tx.stream);
        let sent = tx.finish().unwrap();
        assert_eq!(sent, rx.finish().unwrap(), "payload differs end to end");
        if let Some(i) = &injector {
            let c = i.counters().expect("counters");
            assert!(c.dropped_segments > 0, "no loss was injected: {c:?}");
        }
        drop(injector);
        assert!(
            samples.iter().all(|(_, s)| s.pacing == Pacing::Fallback),
            "an unordered socket was paced"
        );
        (
            rate_over(&samples, 0.4, 1.6) * 8e-6,
            retrans,
            median_cwnd(&samples, 0.4, 1.6),
        )
    };
    let (clean_reno, _, clean_cwnd) = goodput(loaded.dp(), false);
    let (lossy_reno, reno_retrans, lossy_cwnd) = goodput(loaded.dp(), true);

    // Paced at a plan, renewed every slot as mlccd does, through the same loss; beside it a
    // control flow on the same link and CC at the same plan, to a port the injector leaves
    // alone.
    let rx = Receiver::start(&link.receiver, any).expect("receiver");
    let rx_control = Receiver::start(&link.receiver, any).expect("receiver");
    let port = rx.addr.port();
    let spec = mlcc_bpf::LossSpec::new(LOSS, 13, port..=port).expect("spec");
    let injector =
        mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec).expect("attach");
    let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
    let control = Sender::start(&link.sender, None, rx_control.addr, Some(&cc)).expect("sender");
    let attempts = paced_windows_beside_a_control(loaded.dp(), &tx, &control, PLAN_MBIT, ATTEMPTS);
    let retrans = total_retrans(&tx.stream);
    let (sent, sent_control) = (tx.finish().unwrap(), control.finish().unwrap());
    let got = rx.finish().unwrap();
    assert_eq!(
        sent_control,
        rx_control.finish().unwrap(),
        "control payload differs"
    );
    let dropped = injector.counters().expect("counters");
    drop(injector);
    assert_eq!(sent, got, "payload differs end to end");

    // The first window holds the connections' start (slow start, the first order).
    let last = attempts.last().expect("one attempt");
    let steady = &last[usize::from(attempts.len() == 1)..];
    let worst = steady
        .iter()
        .map(|w| w.mbit / w.floor(PLAN_MBIT))
        .fold(f64::INFINITY, f64::min);
    // The means are over every attempt, not only the one that passed: a datapath that throttles
    // the flow now and then must not pass on its best two seconds.
    let every = || attempts.iter().flatten().skip(1);
    let mean = |f: fn(&Window) -> f64| every().map(f).sum::<f64>() / every().count() as f64;
    let (lossy_mean, control_mean) = (mean(|w| w.mbit), mean(|w| w.control_mbit));
    println!(
        "under {:.0} % loss: paced at {PLAN_MBIT} Mbit/s, delivered {lossy_mean:.1} on average over all attempts \
         (the lossless control {control_mean:.1}), the worst 100 ms window at {:.1} % of its floor \
         (attempt {} of {ATTEMPTS}; {} retransmits, {} of {} segments dropped, {} bytes \
         checksummed); fallback Reno {lossy_reno:.1} Mbit/s ({reno_retrans} retransmits, median \
         cwnd {lossy_cwnd}) against {clean_reno:.1} without loss (median cwnd {clean_cwnd}); \
         load {}",
        LOSS * 100.0,
        worst * 100.0,
        attempts.len(),
        retrans,
        dropped.dropped_segments,
        dropped.data_segments,
        got.bytes,
        load_average()
    );
    assert!(
        dropped.dropped_segments > 0,
        "no loss was injected: {dropped:?}"
    );
    assert!(
        steady.iter().all(|w| w.mbit >= w.floor(PLAN_MBIT)),
        "in every attempt a 100 ms window of the lossy flow delivered below 95 % of the plan and \
         of what the lossless control delivered in it (Mbit/s lossy/control, and for each short \
         window the retransmission timeouts and the ms stolen by the hypervisor in it):\n{}",
        attempts
            .iter()
            .map(|a| a
                .iter()
                .map(|w| w.describe(PLAN_MBIT))
                .collect::<Vec<_>>()
                .join(" "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        lossy_mean >= 0.97 * control_mean.min(PLAN_MBIT as f64),
        "the lossy flow averaged {lossy_mean:.1} Mbit/s, the control {control_mean:.1}: loss \
         recovery costs the paced flow more than its retransmissions"
    );
    assert!(
        reno_retrans > 0 && 2 * lossy_cwnd <= clean_cwnd,
        "fallback Reno did not back off: median cwnd {lossy_cwnd} segments under loss \
         ({reno_retrans} retransmits), {clean_cwnd} without"
    );
}

/// How far a socket with no order cuts cwnd at a loss, under each fallback: the median over the
/// losses of a lossy transfer of the new ssthresh against the largest cwnd seen since the last
/// cut. Reno halves (`tcp_reno_ssthresh`), Cubic keeps 717/1024 (`cubictcp_recalc_ssthresh`).
/// Sampling every 100 us misses a few segments either way (growth after the last sample, a
/// peak from before recovery ended), so each band is wide; they do not overlap.
#[test]
fn an_unordered_socket_backs_off_as_its_fallback_cc_does() {
    let Some(_serial) = root("an_unordered_socket_backs_off_as_its_fallback_cc_does") else {
        return;
    };
    let link = VethPair::create(Some(LINK_BITS / 4)).expect("veth pair");
    let any = SocketAddr::new(link.receiver_addr.into(), 0);
    let cut = |fallback: Fallback| -> (f64, usize) {
        let mut loaded = Loaded::with_fallback(fallback);
        let cc = loaded.dp().cc_name().clone();
        let rx = Receiver::start(&link.receiver, any).expect("receiver");
        let port = rx.addr.port();
        let spec = mlcc_bpf::LossSpec::new(0.002, 17, port..=port).expect("spec");
        let injector = mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec)
            .expect("attach");
        let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
        let (mut ratios, mut peak, mut ssthresh) = (Vec::new(), 0u32, u32::MAX);
        let end = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < end {
            let info = tcp_info(&tx.stream);
            if info.tcpi_snd_ssthresh != ssthresh {
                if ssthresh != u32::MAX && peak > 8 && info.tcpi_snd_ssthresh < peak {
                    ratios.push(f64::from(info.tcpi_snd_ssthresh) / f64::from(peak));
                }
                (ssthresh, peak) = (info.tcpi_snd_ssthresh, 0);
            }
            peak = peak.max(info.tcpi_snd_cwnd);
            std::thread::sleep(Duration::from_micros(100));
        }
        let sent = tx.finish().unwrap();
        assert_eq!(sent, rx.finish().unwrap(), "payload differs end to end");
        drop(injector);
        assert!(
            !ratios.is_empty(),
            "{fallback}: no loss cut cwnd in 1.5 s at 0.2 % loss"
        );
        ratios.sort_by(f64::total_cmp);
        (ratios[ratios.len() / 2], ratios.len())
    };
    let (reno, reno_n) = cut(Fallback::Reno);
    let (cubic, cubic_n) = cut(Fallback::Cubic);
    println!(
        "median ssthresh / cwnd at a loss: reno {reno:.3} over {reno_n} cuts, cubic {cubic:.3} \
         over {cubic_n}; load {}",
        load_average()
    );
    assert!(
        (0.4..0.6).contains(&reno),
        "fallback reno: cwnd cut to {reno:.3} of itself, not half"
    );
    assert!(
        (0.62..0.8).contains(&cubic),
        "fallback cubic: cwnd cut to {cubic:.3} of itself, not 0.7"
    );
}

/// What an unordered socket did on a lossy link: how often its ssthresh changed, the segments it
/// retransmitted, and its goodput over the window's second half, Mbit/s.
struct UnorderedUnderLoss {
    ssthresh_changes: usize,
    /// Changes to a lower ssthresh.
    ssthresh_cuts: usize,
    /// The ssthresh at the start and after each change (segments).
    ssthresh_seen: Vec<u32>,
    retransmits: u32,
    mbit: f64,
}

/// Sends for `total` with no order through `link` at 0.2 % loss, sampling tcp_info every ms.
fn unordered_under_loss(
    loaded: &mut Loaded,
    link: &VethPair,
    total: Duration,
) -> (UnorderedUnderLoss, Sender, Receiver) {
    let cc = loaded.dp().cc_name().clone();
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let port = rx.addr.port();
    let spec = mlcc_bpf::LossSpec::new(0.002, 29, port..=port).expect("spec");
    let injector =
        mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec).expect("attach");
    let tx = Sender::start(&link.sender, None, rx.addr, Some(&cc)).expect("sender");
    let start = Instant::now();
    let mut ssthresh = tcp_info(&tx.stream).tcpi_snd_ssthresh;
    let mut ssthresh_changes = 0;
    let mut ssthresh_cuts = 0;
    let mut ssthresh_seen = vec![ssthresh];
    let mut half = None;
    while start.elapsed() < total {
        let now = tcp_info(&tx.stream).tcpi_snd_ssthresh;
        if now != ssthresh {
            ssthresh_changes += 1;
            ssthresh_cuts += usize::from(now < ssthresh);
            ssthresh_seen.push(now);
        }
        ssthresh = now;
        if half.is_none() && start.elapsed() >= total / 2 {
            half = Some(stats(loaded.dp(), &tx.key));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let end = stats(loaded.dp(), &tx.key);
    drop(injector);
    let out = UnorderedUnderLoss {
        ssthresh_changes,
        ssthresh_cuts,
        ssthresh_seen,
        retransmits: total_retrans(&tx.stream),
        mbit: half.map_or(0.0, |h| rate_between(&h, &end) * 8e-6),
    };
    (out, tx, rx)
}

/// With the BBR fallback an unordered socket runs the kernel's BBR through its kfuncs: random
/// loss never cuts its ssthresh (`bbr_ssthresh` keeps it; BBR itself sets it once, to the
/// bytes in flight, when it leaves STARTUP), where the Cubic fallback, the control on a link
/// like it, cuts it at every loss. An order then paces the socket as it paces any, and when the
/// order lapses BBR takes the socket back, data intact.
#[test]
fn an_unordered_socket_on_the_bbr_fallback_runs_bbr_and_obeys_orders() {
    let Some(_serial) = root("an_unordered_socket_on_the_bbr_fallback_runs_bbr_and_obeys_orders")
    else {
        return;
    };
    // A link each: a connection may take its predecessor's ssthresh from tcp_metrics.
    let link = || VethPair::create(Some(LINK_BITS / 4)).expect("veth pair");
    let unordered = Duration::from_millis(1500);
    let mut cubic = Loaded::with_fallback(Fallback::Cubic);
    let (control, tx, rx) = unordered_under_loss(&mut cubic, &link(), unordered);
    assert_eq!(
        tx.finish().unwrap(),
        rx.finish().unwrap(),
        "payload differs end to end"
    );
    drop(cubic);

    let link = link();
    let mut bbr = Loaded::with_fallback(Fallback::Bbr);
    let (ours, tx, rx) = unordered_under_loss(&mut bbr, &link, unordered);
    let (samples, _) = lapsing_order(bbr.dp(), tx, rx, mbit(50));
    let paced = rate_over(&samples, 0.3, 0.95) * 8e-6;
    let after = rate_over(&samples, 1.5, 2.0) * 8e-6;
    let link_mbit = LINK_BITS as f64 / 4.0 * 1e-6;
    println!(
        "0.2 % loss, unordered: bbr fallback {:.1} Mbit/s ({} retransmits, ssthresh changed {} \
         times), cubic fallback {:.1} Mbit/s ({} retransmits, ssthresh changed {} times); bbr \
         socket paced at {paced:.1} Mbit/s under a 50 Mbit/s order, {after:.1} Mbit/s after it \
         lapsed; bbr socket's ssthresh {:?}; load {}",
        ours.mbit,
        ours.retransmits,
        ours.ssthresh_changes,
        control.mbit,
        control.retransmits,
        control.ssthresh_changes,
        ours.ssthresh_seen,
        load_average()
    );
    assert!(
        control.ssthresh_changes >= 5,
        "the cubic control cut at {} losses only",
        control.ssthresh_changes
    );
    assert!(ours.retransmits > 0, "no loss reached the bbr socket");
    // Cuts, not changes: the kernel's undo of a recovery that DSACKs or timestamps prove
    // spurious puts back the ssthresh from before it (tcp_undo_cwnd_reduction), which for a
    // recovery entered in STARTUP is infinity again; a CI run on a loaded machine saw
    // two changes once.
    assert!(
        ours.ssthresh_cuts <= 1,
        "losses cut the bbr socket's ssthresh {} times: {:?}",
        ours.ssthresh_cuts,
        ours.ssthresh_seen
    );
    assert!(
        ours.mbit >= 0.6 * link_mbit,
        "bbr fallback at {:.1} Mbit/s of {link_mbit:.0} under 0.2 % loss",
        ours.mbit
    );
    assert!(
        (paced - 50.0).abs() <= 5.0,
        "paced at {paced:.1} Mbit/s, ordered 50"
    );
    assert!(
        after >= 0.5 * link_mbit,
        "after the order lapsed bbr reached only {after:.1} Mbit/s"
    );
}

/// In Recovery a socket with no order sets cwnd by proportional rate reduction, as the kernel
/// does for its own CCs (and skips for a CC with cong_control): cwnd is what is in flight plus
/// PRR's share of what was delivered, so it moves with every ACK and only ends at ssthresh.
/// Cutting cwnd straight to ssthresh, as the datapath did before, pins it there: about 1 % of
/// Recovery samples were off ssthresh then, against 99 % under the kernel's Cubic and with PRR.
/// The kernel's Cubic on the same link is the control.
#[test]
fn in_recovery_an_unordered_socket_reduces_cwnd_proportionally() {
    let Some(_serial) = root("in_recovery_an_unordered_socket_reduces_cwnd_proportionally") else {
        return;
    };
    const TCP_CA_RECOVERY: u8 = 3;
    let link = VethPair::create(Some(LINK_BITS / 4)).expect("veth pair");
    let any = SocketAddr::new(link.receiver_addr.into(), 0);
    let off_ssthresh = |cc: &CcName| -> (usize, usize) {
        let rx = Receiver::start(&link.receiver, any).expect("receiver");
        let port = rx.addr.port();
        let spec = mlcc_bpf::LossSpec::new(0.002, 23, port..=port).expect("spec");
        let injector = mlcc_bpf::LossInjector::attach(&netns_path(&link.receiver), "eth0", spec)
            .expect("attach");
        let tx = Sender::start(&link.sender, None, rx.addr, Some(cc)).expect("sender");
        let (mut off, mut recovering) = (0usize, 0usize);
        let end = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < end {
            let info = tcp_info(&tx.stream);
            if info.tcpi_ca_state == TCP_CA_RECOVERY {
                recovering += 1;
                off += usize::from(info.tcpi_snd_cwnd != info.tcpi_snd_ssthresh);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let sent = tx.finish().unwrap();
        assert_eq!(sent, rx.finish().unwrap(), "payload differs end to end");
        drop(injector);
        (off, recovering)
    };
    let mut loaded = Loaded::with_fallback(Fallback::Cubic);
    let mlcc = loaded.dp().cc_name().clone();
    let (ours, ours_n) = off_ssthresh(&mlcc);
    let (kernel, kernel_n) = off_ssthresh(&CcName::new("cubic").expect("cubic"));
    println!(
        "Recovery samples with cwnd off ssthresh: fallback {ours} of {ours_n}, kernel cubic \
         {kernel} of {kernel_n}; load {}",
        load_average()
    );
    assert!(
        kernel_n >= 20 && ours_n >= 20,
        "too few samples in Recovery to judge: {ours_n} and {kernel_n} (0.2 % loss for 1.5 s)"
    );
    let share = |a: usize, n: usize| a as f64 / n as f64;
    assert!(
        share(kernel, kernel_n) > 0.5,
        "the kernel's Cubic kept cwnd at ssthresh in Recovery ({kernel} of {kernel_n} samples \
         off it): the test cannot tell PRR from a straight cut here"
    );
    assert!(
        share(ours, ours_n) > 0.5,
        "the fallback's cwnd sat at ssthresh in Recovery ({ours} of {ours_n} samples off it, \
         kernel Cubic {kernel} of {kernel_n}): it cuts at once instead of following PRR"
    );
}

/// Bytes each HTB class of `dev` in `ns` has sent, by class id ("10:1", ...).
fn class_bytes(ns: &mlcc_bpf::testbed::Netns, dev: &str) -> Vec<(String, u64)> {
    let out = std::process::Command::new("tc")
        .args(["-n", ns.name(), "-s", "class", "show", "dev", dev])
        .output()
        .expect("tc");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = Vec::new();
    let mut id = None;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() == Some(&"class") && w.len() > 2 {
            id = Some(w[2].to_string());
        }
        if w.first() == Some(&"Sent")
            && let (Some(i), Some(b)) = (id.take(), w.get(1).and_then(|b| b.parse().ok()))
        {
            v.push((i, b));
        }
    }
    v
}

/// The classes' link in the fill test: half the other tests' rate. What is tested is the port's
/// priority, which only decides while the port is the bottleneck; at 1 Gbit/s two flows, their
/// receivers' checksums and their softirqs took both cores of a CI host (the two flows carried
/// 900 of the 940 Mbit/s), the CPU became the bottleneck and served both flows alike.
const CLASS_LINK_BITS: u64 = 500_000_000;

#[test]
fn a_fill_flow_takes_what_a_planned_flow_leaves_and_the_whole_link_once_it_stops() {
    let Some(_serial) =
        root("a_fill_flow_takes_what_a_planned_flow_leaves_and_the_whole_link_once_it_stops")
    else {
        return;
    };
    let mut loaded = Loaded::new();
    let cc = loaded.dp().cc_name().clone();
    let link = VethPair::with_classes(CLASS_LINK_BITS, 1).expect("veth pair with classes");
    let dp = loaded.dp();
    link.sender
        .enter(|| dp.attach_marker("eth0").map_err(std::io::Error::other))
        .expect("attach the marker");
    let rx_a = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 5201),
    )
    .expect("receiver");
    let rx_b = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 5202),
    )
    .expect("receiver");
    let a = Sender::start(&link.sender, None, rx_a.addr, Some(&cc)).expect("sender");
    let b = Sender::start(&link.sender, None, rx_b.addr, Some(&cc)).expect("sender");
    // a: planned at 200 Mbit/s in the default class. b: nothing guaranteed (the datapath's
    // least order), everything beyond it in fill class 0.
    let planned = mbit(200);
    let fill = RateOrder {
        fill: mlcc_bpf::classes::fill_dscp(0),
        ..order(b.key, Rate::from_bytes_per_sec(12_500).unwrap(), SECS_30)
    };
    dp.set_rates(&[order(a.key, planned, SECS_30), fill])
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    // Up to three windows (a loaded host can starve a sender thread for one): the planned flow
    // within 5 % of its plan, the fill flow with at least 85 % of what it leaves of the line.
    let line = CLASS_LINK_BITS as f64 / 8.0 * 0.94;
    let mut report = Vec::new();
    let mut shared = false;
    for attempt in 1..=3 {
        let (a0, b0) = (stats(dp, &a.key), stats(dp, &b.key));
        std::thread::sleep(Duration::from_millis(1000));
        let (a1, b1) = (stats(dp, &a.key), stats(dp, &b.key));
        let (ra, rb) = (rate_between(&a0, &a1), rate_between(&b0, &b1));
        let want = planned.bytes_per_sec() as f64;
        let line_msg = format!(
            "window {attempt} (load {}): planned {:.1} Mbit/s ({:+.1} %), fill {:.1} Mbit/s",
            load_average(),
            ra * 8e-6,
            (ra / want - 1.0) * 100.0,
            rb * 8e-6
        );
        println!("{line_msg}");
        report.push(line_msg);
        if (ra - want).abs() / want <= 0.05 && rb >= 0.85 * (line - want) {
            shared = true;
            break;
        }
    }
    assert!(shared, "{}", report.join("\n"));
    let classes = class_bytes(&link.sender, "eth0");
    let sent = |id: &str| classes.iter().find(|(c, _)| c == id).map_or(0, |(_, b)| *b);
    // Half a second and a window at least: 25 MB of each in its class (37 MB planned, ~50 MB
    // fill).
    assert!(
        sent("10:2") > 25_000_000,
        "the fill flow's bytes are not in the fill class: {classes:?}"
    );
    assert!(sent("10:1") > 25_000_000, "{classes:?}");

    // The planned flow stops: within a few RTTs of its last byte's delivery (the sender's queued
    // bytes still leave after it closes, ~1 s of them at 200 Mbit/s), the fill flow has the
    // whole link.
    let sent_a = a.finish().unwrap();
    assert_eq!(sent_a, rx_a.finish().unwrap(), "payload differs end to end");
    std::thread::sleep(Duration::from_millis(50));
    let mut alone = Vec::new();
    let mut took = false;
    for _ in 0..3 {
        let b0 = stats(dp, &b.key);
        std::thread::sleep(Duration::from_millis(300));
        let rb = rate_between(&b0, &stats(dp, &b.key));
        alone.push(format!("{:.1} Mbit/s", rb * 8e-6));
        if rb >= 0.85 * line {
            took = true;
            break;
        }
    }
    assert!(took, "the fill flow alone: {alone:?}");
    let sent_b = b.finish().unwrap();
    assert_eq!(sent_b, rx_b.finish().unwrap(), "payload differs end to end");
}

/// A connection over a shaped veth pair whose connecting end runs the loaded CC: the link
/// (which must outlive the sockets), the connecting end and the accepted one.
fn connected_on_cc(loaded: &mut Loaded) -> (VethPair, std::net::TcpStream, std::net::TcpStream) {
    let cc = loaded.dp().cc_name().clone();
    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    let (tx, rx) = connected_on(&link, &cc);
    (link, tx, rx)
}

/// A listener on the link's receiver, and its address.
fn listening(link: &VethPair) -> (std::net::TcpListener, SocketAddr) {
    let any = SocketAddr::new(link.receiver_addr.into(), 0);
    let listener = link
        .receiver
        .enter(|| std::net::TcpListener::bind(any))
        .expect("listen");
    let to = listener.local_addr().unwrap();
    (listener, to)
}

/// A socket on `cc` from the link's sender, and its peer accepted on the receiver.
fn connected_on(link: &VethPair, cc: &CcName) -> (std::net::TcpStream, std::net::TcpStream) {
    let (listener, to) = listening(link);
    let tx = link
        .sender
        .enter(|| {
            let s = std::net::TcpStream::connect(to)?;
            mlcc_bpf::set_congestion_control(&s, cc)?;
            Ok(s)
        })
        .expect("connect");
    let (rx, _) = listener.accept().expect("accept");
    (tx, rx)
}

/// What a socket holds for its process (written, not yet acknowledged) is in its stats: more
/// than nothing while the peer does not read, nothing once the peer has read and acknowledged
/// all of it. mlccd reads it as the backlog of a job it learned, which has no progress file to
/// say what its library handed over.
#[test]
fn stats_say_what_a_socket_holds_unacknowledged() {
    use std::io::{Read, Write};
    let Some(_serial) = root("stats_say_what_a_socket_holds_unacknowledged") else {
        return;
    };
    let mut loaded = Loaded::new();
    let (_link, mut tx, mut rx) = connected_on_cc(&mut loaded);
    let key = SocketKey::of_stream(&tx).expect("key");

    // The peer does not read: the socket keeps what its window and buffers do not pass.
    tx.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match tx.write(&chunk) {
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let held = stats(loaded.dp(), &key);
    // The kernel's bytes_acked counts the SYN of an active open.
    let acked_data = |s: &SocketStats| s.bytes_acked.saturating_sub(1);
    let unacked = written - acked_data(&held);
    println!(
        "peer not reading: {written} B written, {} acked, queue {:?} at the last ACK",
        held.bytes_acked, held.queued_bytes
    );
    let q = u64::from(held.queued_bytes.expect("this datapath records the queue"));
    assert!(
        unacked > 0,
        "everything was acked with the peer not reading"
    );
    assert!(
        q > 0 && q <= unacked,
        "queue {q} B at the last ACK, {unacked} B unacknowledged now"
    );

    // The peer reads everything: once all is acknowledged, the socket holds nothing.
    let mut buf = vec![0u8; 256 * 1024];
    let mut read = 0u64;
    while read < written {
        read += rx.read(&mut buf).expect("read") as u64;
    }
    let end = Instant::now() + Duration::from_secs(2);
    let mut drained = stats(loaded.dp(), &key);
    while acked_data(&drained) < written && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
        drained = stats(loaded.dp(), &key);
    }
    assert_eq!(acked_data(&drained), written, "not all acknowledged in 2 s");
    assert_eq!(drained.queued_bytes, Some(0), "{drained:?}");
}

/// The inode `/proc/<pid>/fd/<fd>` names a socket by (`socket:[N]`).
fn fd_inode(s: &impl std::os::fd::AsRawFd) -> u64 {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", s.as_raw_fd())).expect("readlink");
    let text = link.to_string_lossy();
    text.strip_prefix("socket:[")
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a socket: {text}"))
}

/// A socket's stats name the file it is, on both ends of a connection once each has sent and
/// heard an ACK: mlccd finds the process holding a scheduled socket by it, without walking the
/// kernel's TCP table.
#[test]
fn stats_name_the_inode_of_each_socket() {
    use std::io::{Read, Write};
    let Some(_serial) = root("stats_name_the_inode_of_each_socket") else {
        return;
    };
    let mut loaded = Loaded::new();
    let (_link, mut tx, mut rx) = connected_on_cc(&mut loaded);
    let cc = loaded.dp().cc_name().clone();
    mlcc_bpf::set_congestion_control(&rx, &cc).expect("CC on the accepted socket");
    let (tx_key, rx_key) = (
        SocketKey::of_stream(&tx).expect("key"),
        SocketKey::of_stream(&rx).expect("key"),
    );
    let mut buf = [0u8; 4096];
    tx.write_all(&[1u8; 4096]).expect("write");
    rx.read_exact(&mut buf).expect("read");
    rx.write_all(&[2u8; 4096]).expect("write back");
    tx.read_exact(&mut buf).expect("read back");
    let end = Instant::now() + Duration::from_secs(2);
    let want = [
        (tx_key, SocketInode::Is(fd_inode(&tx))),
        (rx_key, SocketInode::Is(fd_inode(&rx))),
    ];
    let mut got = want.map(|(k, _)| stats(loaded.dp(), &k).inode);
    while got != want.map(|(_, i)| i) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
        got = want.map(|(k, _)| stats(loaded.dp(), &k).inode);
    }
    assert_eq!(got, want.map(|(_, i)| i), "connecting end, accepted end");
}

#[test]
fn the_stats_map_is_read_whole_across_batches_and_again_with_the_same_buffers() {
    let Some(_serial) =
        root("the_stats_map_is_read_whole_across_batches_and_again_with_the_same_buffers")
    else {
        return;
    };
    let mut loaded = Loaded::new();
    let dp = loaded.dp();
    // More than two batches of 1024, not a multiple of one.
    let entries: Vec<(SocketKey, SocketStats)> = (0..2500u32)
        .map(|i| {
            let src = SocketAddr::from(([10, 9, (i >> 8) as u8, i as u8], 40000));
            let dst = SocketAddr::from(([10, 8, 0, 1], 5000 + (i % 7) as u16));
            let stats = SocketStats {
                bytes_sent: u64::from(i) * 1000 + 1,
                bytes_acked: u64::from(i) * 1000,
                retransmits: i % 5,
                srtt: Duration::from_micros(100 + u64::from(i)),
                min_rtt: Some(Duration::from_micros(50)),
                delivery_rate_bytes_per_sec: 125_000_000,
                pacing: Pacing::Fallback,
                cwnd_segments: 10 + i,
                delivered_segments: i,
                updated: MonotonicNs::now(),
                queued_bytes: Some(i),
                inode: SocketInode::Is(u64::from(i) + 1),
            };
            (SocketKey::new(u64::from(i % 3) + 1, src, dst), stats)
        })
        .collect();
    dp.insert_stats_for_bench(&entries)
        .expect("fill the stats map");
    let mut want = entries.clone();
    want.sort_by_key(|(k, _)| *k);
    for read in 0..2 {
        let mut got = dp.read_stats().expect("read the stats map");
        got.sort_by_key(|(k, _)| *k);
        assert_eq!(got.len(), want.len(), "read {read}: entries");
        assert!(got == want, "read {read}: an entry came back different");
    }
}

/// A socket on `cc` from the link's sender, with a thread that reads all it sends.
fn drained_on(link: &VethPair, cc: &CcName) -> std::net::TcpStream {
    use std::io::Read;
    let (tx, mut rx) = connected_on(link, cc);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while matches!(rx.read(&mut buf), Ok(n) if n > 0) {}
    });
    tx
}

/// cwnd after a burst that grows it, and cwnd and ssthresh at the first send after `idle`.
struct AcrossIdle {
    before: u32,
    after: u32,
    ssthresh_after: u32,
}

/// Sends 8 MB (all acknowledged), waits `idle`, then writes one segment and reads tcp_info at
/// once, before its ACK can move cwnd.
fn cwnd_across_idle(tx: &mut std::net::TcpStream, idle: Duration) -> AcrossIdle {
    use std::io::Write;
    let chunk = vec![1u8; 1 << 20];
    for _ in 0..8 {
        tx.write_all(&chunk).expect("write");
    }
    let end = Instant::now() + Duration::from_secs(5);
    while tcp_info(tx).tcpi_unacked > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = tcp_info(tx).tcpi_snd_cwnd;
    std::thread::sleep(idle);
    tx.write_all(&chunk[..1000]).expect("write");
    let info = tcp_info(tx);
    AcrossIdle {
        before,
        after: info.tcpi_snd_cwnd,
        ssthresh_after: info.tcpi_snd_ssthresh,
    }
}

/// The kernel halves an unpaced CC's window for each RTO it sat idle (RFC 2861) but skips it
/// for a CC with cong_control, as the datapath's is, so the datapath does it for its fallback:
/// an unordered socket starts its next burst from what the kernel's Cubic would, not from its
/// last burst's whole window. A short pause keeps the window, and the kernel's
/// `net.ipv4.tcp_slow_start_after_idle = 0` turns the restart off as for every CC. Cubic on the
/// same link is the control.
#[test]
fn an_unordered_socket_restarts_its_window_after_idle_as_the_kernel_cc_does() {
    let Some(_serial) =
        root("an_unordered_socket_restarts_its_window_after_idle_as_the_kernel_cc_does")
    else {
        return;
    };
    let mut loaded = Loaded::new();
    let cc = loaded.dp().cc_name().clone();
    let cubic = CcName::new("cubic").unwrap();
    let link = VethPair::create(Some(LINK_BITS)).expect("veth pair");
    // Past the kernel's RTO (its 200-ms floor and the RTT) at least twice: halved for each.
    let long = Duration::from_millis(650);
    let short = Duration::from_millis(60);

    let control = cwnd_across_idle(&mut drained_on(&link, &cubic), long);
    let ours = cwnd_across_idle(&mut drained_on(&link, &cc), long);
    let brief = cwnd_across_idle(&mut drained_on(&link, &cc), short);
    let path = "/proc/sys/net/ipv4/tcp_slow_start_after_idle";
    link.sender
        .enter(|| std::fs::write(path, "0"))
        .expect("turn off slow start after idle in the sender's namespace");
    let off = cwnd_across_idle(&mut drained_on(&link, &cc), long);
    println!(
        "cwnd before -> after idle (ssthresh after): cubic {} -> {} ({}), mlcc {} -> {} ({}), \
         mlcc after {short:?} {} -> {}, mlcc with the sysctl off {} -> {}",
        control.before,
        control.after,
        control.ssthresh_after,
        ours.before,
        ours.after,
        ours.ssthresh_after,
        brief.before,
        brief.after,
        off.before,
        off.after
    );
    for (who, r) in [("cubic", &control), ("mlcc", &ours)] {
        assert!(
            r.before > 40,
            "{who}: a burst of 8 MB left cwnd at {}",
            r.before
        );
        assert!(
            r.after <= (r.before / 4).max(10),
            "{who}: cwnd {} -> {} after {long:?} idle, not a quarter or less (halved per RTO)",
            r.before,
            r.after
        );
        // 3/4 of cwnd as the kernel reckons it (tcp_current_ssthresh): one below cwnd · 3 / 4
        // for a cwnd of 4k + 3, as the kernel's Cubic once gave here (183 -> 136).
        let held = (r.before >> 1) + (r.before >> 2);
        assert!(
            r.ssthresh_after >= held,
            "{who}: ssthresh {} after the restart, below 3/4 of cwnd {} ({held})",
            r.ssthresh_after,
            r.before
        );
    }
    assert!(
        brief.after * 10 >= brief.before * 9,
        "cwnd {} -> {} after a pause shorter than the RTO",
        brief.before,
        brief.after
    );
    assert!(
        off.after * 10 >= off.before * 9,
        "cwnd {} -> {} after idle with tcp_slow_start_after_idle = 0",
        off.before,
        off.after
    );
}

/// Bytes and packets the sender's `eth0` has sent: a TSO burst leaves a veth as one packet.
fn tx_counters(ns: &mlcc_bpf::testbed::Netns) -> (u64, u64) {
    let dev = ns
        .enter(|| std::fs::read_to_string("/proc/thread-self/net/dev"))
        .expect("/proc/net/dev");
    let line = dev
        .lines()
        .find(|l| l.trim_start().starts_with("eth0:"))
        .expect("eth0 in /proc/net/dev");
    let f: Vec<u64> = line
        .split_once(':')
        .unwrap()
        .1
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (f[8], f[9])
}

/// The mean TSO burst a sender on `cc` leaves the link's sender in over a second, written to
/// as fast as it takes, after half a second to settle; ordered `paced` first if given.
fn mean_burst(
    loaded: &mut Loaded,
    link: &VethPair,
    cc: Option<&CcName>,
    paced: Option<Rate>,
) -> f64 {
    let rx = Receiver::start(
        &link.receiver,
        SocketAddr::new(link.receiver_addr.into(), 0),
    )
    .expect("receiver");
    let tx = Sender::start(&link.sender, None, rx.addr, cc).expect("sender");
    if let Some(rate) = paced {
        loaded
            .dp()
            .set_rates(&[order(tx.key, rate, SECS_30)])
            .expect("order");
    }
    std::thread::sleep(Duration::from_millis(500));
    let (b0, p0) = tx_counters(&link.sender);
    std::thread::sleep(Duration::from_secs(1));
    let (b1, p1) = tx_counters(&link.sender);
    let sent = tx.finish().expect("sender");
    assert_eq!(
        sent,
        rx.finish().expect("receiver"),
        "payload differs end to end"
    );
    (b1 - b0) as f64 / (p1 - p0).max(1) as f64
}

/// mlccd sets `net.ipv4.tcp_tso_rtt_log` to 0 so that a paced order sends bursts of its rate;
/// a socket with no order on the BBR fallback still sends the bursts the kernel's BBR would
/// (up to 64 KB at a small min RTT, whatever the rate), as the kernel's default log gives them.
/// Sent at the smaller bursts, behind another CC's standing queue, its window stayed a third of
/// the kernel's BBR's (testbed `micro-coexistence`: 20–22 s against 16–17). The control is the
/// kernel's BBR on the same link at the default log (9), measured in the same run: a busy CPU
/// that defers and merges sends grows both alike (the kernel's BBR at log 0 is printed to show
/// what the sysctl alone does, and not compared: it merges too, and once reached half the
/// fallback's bursts on a loaded machine). The socket under an order sends its rate's bursts.
#[test]
fn an_unordered_socket_on_the_bbr_fallback_sends_the_kernels_tso_bursts() {
    let Some(_serial) =
        root("an_unordered_socket_on_the_bbr_fallback_sends_the_kernels_tso_bursts")
    else {
        return;
    };
    let link = VethPair::create(Some(LINK_BITS / 10)).expect("veth pair");
    let tso_rtt_log = |log: &str| {
        link.sender
            .enter(|| std::fs::write("/proc/sys/net/ipv4/tcp_tso_rtt_log", log))
            .expect("tcp_tso_rtt_log");
    };
    let mut bbr = Loaded::with_fallback(Fallback::Bbr);
    let cc = bbr.dp().cc_name().clone();
    let kernel_bbr = CcName::new("bbr").unwrap();
    tso_rtt_log("9");
    let kernel = mean_burst(&mut bbr, &link, Some(&kernel_bbr), None);
    tso_rtt_log("0");
    let kernel_log0 = mean_burst(&mut bbr, &link, Some(&kernel_bbr), None);
    let unordered = mean_burst(&mut bbr, &link, Some(&cc), None);
    let ordered = mean_burst(&mut bbr, &link, Some(&cc), Some(mbit(80)));
    println!(
        "mean burst at 100 Mbit/s: the kernel's bbr at tcp_tso_rtt_log 9 {kernel:.0} B; at log 0: \
         the kernel's bbr {kernel_log0:.0} B, unordered on the bbr fallback {unordered:.0} B, \
         ordered 80 Mbit/s {ordered:.0} B; load {}",
        load_average()
    );
    let ratio = unordered / kernel.max(1.0);
    assert!(
        (0.7..=1.0 / 0.7).contains(&ratio),
        "unordered {unordered:.0} B a burst at log 0, the kernel's bbr at log 9 {kernel:.0}"
    );
    assert!(
        unordered >= 2.0 * ordered,
        "unordered {unordered:.0} B a burst, ordered {ordered:.0}"
    );
}

/// The send buffer of a socket put on `cc` before it connects, once connected: the kernel
/// sizes it at the handshake to so many windows of ten segments (`tcp_sndbuf_expand`), as many
/// as the CC asks for.
fn first_send_buffer(link: &VethPair, cc: &CcName) -> usize {
    let (listener, to) = listening(link);
    let size = link
        .sender
        .enter(|| {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            mlcc_bpf::set_congestion_control(&s, cc)?;
            s.connect(&to.into())?;
            s.send_buffer_size()
        })
        .expect("connect");
    listener.accept().expect("accept");
    size
}

/// A socket on the BBR fallback gets the send buffer the kernel's BBR asks for (three windows),
/// and one on the Cubic fallback the kernel's Cubic's (two).
#[test]
fn a_socket_gets_the_send_buffer_its_fallback_cc_asks_for() {
    let Some(_serial) = root("a_socket_gets_the_send_buffer_its_fallback_cc_asks_for") else {
        return;
    };
    let link = VethPair::create(None).expect("veth pair");
    // Room above what any of them asks for: the default 4 MB cap is reached at the handshake.
    link.sender
        .enter(|| std::fs::write("/proc/sys/net/ipv4/tcp_wmem", "4096 16384 268435456"))
        .expect("tcp_wmem");
    let kernel = |name: &str| first_send_buffer(&link, &CcName::new(name).unwrap());
    let (bbr, cubic) = (kernel("bbr"), kernel("cubic"));
    let ours = |fallback| {
        let mut loaded = Loaded::with_fallback(fallback);
        let cc = loaded.dp().cc_name().clone();
        first_send_buffer(&link, &cc)
    };
    let (our_bbr, our_cubic) = (ours(Fallback::Bbr), ours(Fallback::Cubic));
    println!(
        "send buffer after the handshake: bbr {bbr} B, ours on its fallback {our_bbr}; cubic \
         {cubic}, ours on its fallback {our_cubic}"
    );
    assert!(bbr > cubic, "the kernel's bbr {bbr} B, cubic {cubic} B");
    assert_eq!(our_bbr, bbr, "on the bbr fallback");
    assert_eq!(our_cubic, cubic, "on the cubic fallback");
}
