//! Root tests of the MLTCP congestion control (`mlcc_bpf::mltcp`) on this kernel, over Reno and
//! over CUBIC: it registers under its own name, two real TCP flows through a shaped switch port
//! grow their windows by F(r) of the ratios written for them, and a socket without a ratio is
//! its base. They share the machine (CC names, namespaces), so they run one at a time behind
//! `SERIAL`; without root each prints why it skipped and passes.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlcc_bpf::mltcp::{self, Base, MltcpDatapath, RatioOrder};
use mlcc_bpf::testbed::{Netns, Receiver, Sender, unique_name};
use mlcc_bpf::{CcName, SocketKey};

static SERIAL: Mutex<()> = Mutex::new(());

fn root(test: &str) -> Option<MutexGuard<'static, ()>> {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped {test}: needs root (BPF struct_ops, network namespaces, bpffs)");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The CC under a unique name and pin directory, unloaded however the test ends.
struct Loaded {
    dp: Option<MltcpDatapath>,
    dir: PathBuf,
    name: CcName,
}

impl Loaded {
    /// Named `mltcp` + r or c (the base) + pid + counter: the kernel takes no '-'.
    fn new(base: Base) -> Self {
        let n = unique_name(&base.as_str()[..1]);
        let dir = PathBuf::from(format!("/sys/fs/bpf/mltcp-test-{n}"));
        let name = CcName::new(&format!("mltcp{}", n.replace('-', ""))).expect("test CC name");
        let dp = MltcpDatapath::load(&name, base, &dir).expect("load the MLTCP CC");
        Self {
            dp: Some(dp),
            dir,
            name,
        }
    }

    fn dp(&self) -> &MltcpDatapath {
        self.dp.as_ref().expect("loaded")
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Some(Ok(n)) = self.dp.as_ref().map(MltcpDatapath::ssthresh_repairs) {
            println!("{}: {n} stale ssthresh value(s) repaired", self.name);
        }
        self.dp.take();
        let _ = mlcc_bpf::unload_pinned(&self.dir);
    }
}

fn available() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("read tcp_available_congestion_control")
}

#[test]
fn mltcp_registers_under_its_own_name_and_refuses_a_second_of_that_name() {
    let Some(_serial) =
        root("mltcp_registers_under_its_own_name_and_refuses_a_second_of_that_name")
    else {
        return;
    };
    // Both bases at once, each its own CC.
    let loaded = Base::ALL.map(Loaded::new);
    for (base, loaded) in Base::ALL.into_iter().zip(&loaded) {
        let name = loaded.name.clone();
        assert!(
            available().split_whitespace().any(|n| n == name.as_str()),
            "{name} ({base}) not in {}",
            available()
        );
        // A second registration of the name fails (names are global in the kernel) and
        // leaves no pins behind; the first stays registered.
        for other_base in Base::ALL {
            let other = PathBuf::from(format!("/sys/fs/bpf/mltcp-test-{}", unique_name("dup")));
            let err =
                MltcpDatapath::load(&name, other_base, &other).expect_err("duplicate name refused");
            assert!(err.to_string().contains("already registered"), "{err}");
            assert!(!other.exists(), "{} left behind", other.display());
        }
        assert!(available().split_whitespace().any(|n| n == name.as_str()));
        // Reopening the pins (what the feeder does) works and sees no sockets yet.
        let again = MltcpDatapath::open(&loaded.dir).expect("open the pins");
        assert!(again.sockets().expect("list sockets").is_empty());
    }
    for loaded in loaded {
        let (name, dir) = (loaded.name.clone(), loaded.dir.clone());
        drop(loaded);
        assert!(
            !available().split_whitespace().any(|n| n == name.as_str()),
            "{name} still registered after unload"
        );
        assert!(!dir.exists());
    }
}

const SENDER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const RECEIVER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);

/// Sender and receiver namespaces joined through a bridge in a third one, whose port towards
/// the receiver is the bottleneck: TBF with a drop-tail queue, like the testbed's switch ports
/// (20 ms deep rather than their 5 ms, so that Reno's windows span tens of segments and a
/// timeout is rare). Not a shaper on the sender's own interface: there TCP small queues hold each
/// socket to about a millisecond of data in the qdisc, the queue never overflows, and the
/// flows share it by arrival order whatever their windows (measured: 48 vs 47 Mbit/s for F = 2
/// vs 0.25), a bottleneck no congestion control can weigh.
struct SwitchedPath {
    sender: Netns,
    receiver: Netns,
    _switch: Netns,
}

impl SwitchedPath {
    fn create(bits: u64) -> std::io::Result<Self> {
        let sender = Netns::create("mltcp-s")?;
        let receiver = Netns::create("mltcp-r")?;
        let switch = Netns::create("mltcp-w")?;
        for (host, port, addr) in [(&sender, "ps", SENDER), (&receiver, "pr", RECEIVER)] {
            host.ip(&[
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                switch.name(),
            ])?;
            host.ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            host.ip(&["link", "set", "eth0", "up"])?;
        }
        switch.ip(&["link", "add", "br0", "type", "bridge"])?;
        for port in ["ps", "pr"] {
            switch.ip(&["link", "set", port, "master", "br0", "up"])?;
        }
        switch.ip(&["link", "set", "br0", "up"])?;
        switch.tc(&[
            "qdisc",
            "add",
            "dev",
            "pr",
            "root",
            "tbf",
            "rate",
            &format!("{bits}bit"),
            "burst",
            "32kb",
            "latency",
            "20ms",
        ])?;
        Ok(Self {
            sender,
            receiver,
            _switch: switch,
        })
    }
}

/// Bytes each socket got acked between two instants, from the kernel's own counters.
fn acked(s: &Sender) -> u64 {
    mlcc_bpf::tcp_info(&s.stream)
        .expect("tcp_info")
        .tcpi_bytes_acked
}

/// What two flows did over a phase.
struct Observed {
    /// Bytes acked over the measured tail of the phase.
    bytes: [u64; 2],
    /// Congestion-avoidance growth, segments per RTT (see [`Growth`]).
    growth: [f64; 2],
    /// Median multiplicative decrease (see [`Growth`]), if the flow lost at all.
    decrease: [Option<f64>; 2],
    /// RTTs the growth was measured over (see [`Growth`]).
    avoiding_rtts: [f64; 2],
    /// Samples whose window no flow through this port can have (see [`impossible`]).
    impossible: Vec<String>,
}

/// A window (cwnd, or an ssthresh other than the kernel's "infinite") above this many segments
/// is impossible here: the path holds ~200 (100 Mbit/s x 22 ms, a 32 kB queue). The kernel now
/// and then stores ssthresh 0x81104110, a stale stack word, not the CC's answer, and its PRR
/// opens cwnd to ~10^9 from it before the CC's next callback repairs it (see
/// `bpf/src/bpf/window.h`); once growth averaged that in as 10^7 segments per RTT.
const IMPOSSIBLE_WINDOW: u32 = 100_000;
const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

fn window_possible(info: &libc::tcp_info) -> bool {
    let (cwnd, ssthresh) = (info.tcpi_snd_cwnd, info.tcpi_snd_ssthresh);
    cwnd <= IMPOSSIBLE_WINDOW
        && (ssthresh <= IMPOSSIBLE_WINDOW || ssthresh == TCP_INFINITE_SSTHRESH)
}

/// Says what is impossible in flow `i`'s sample, if anything.
fn impossible(i: usize, at: Duration, info: &libc::tcp_info) -> Option<String> {
    (!window_possible(info)).then(|| {
        format!(
            "flow {i} at {:.2}s: cwnd {}, ssthresh {:#x}, state {}",
            at.as_secs_f64(),
            info.tcpi_snd_cwnd,
            info.tcpi_snd_ssthresh,
            info.tcpi_ca_state
        )
    })
}

/// cwnd growth in congestion avoidance, from 10 ms samples of `tcp_info`: the increase between
/// consecutive samples that are both in the Open state with cwnd at or above ssthresh and no
/// decrease between them (a loss), over the time they span in RTTs. Reno grows one segment per
/// RTT there; MLTCP over Reno F segments. And the decreases: ssthresh after a loss over cwnd at
/// the sample before it, in congestion avoidance: Reno's 0.5, CUBIC's 0.7 (slightly above, the
/// window having grown a little between that sample and the loss). A sample with an impossible
/// window is no congestion avoidance: the kernel's, not the CC's.
#[derive(Default)]
struct Growth {
    last: Option<(Instant, u32, u32, bool)>,
    segments: f64,
    rtts: f64,
    decreases: Vec<f64>,
}

impl Growth {
    fn sample(&mut self, i: &libc::tcp_info) {
        const TCP_CA_OPEN: u8 = 0;
        let now = Instant::now();
        let avoiding = i.tcpi_ca_state == TCP_CA_OPEN
            && i.tcpi_snd_cwnd >= i.tcpi_snd_ssthresh
            && window_possible(i);
        if let Some((t, cwnd, ssthresh, was_avoiding)) = self.last
            && was_avoiding
        {
            if avoiding && i.tcpi_snd_cwnd >= cwnd && i.tcpi_rtt > 0 {
                self.segments += f64::from(i.tcpi_snd_cwnd - cwnd);
                self.rtts += (now - t).as_secs_f64() / (f64::from(i.tcpi_rtt) * 1e-6);
            }
            // A new ssthresh below the last window: a loss (HyStart sets it at cwnd, and in
            // slow start, which `was_avoiding` leaves out).
            if i.tcpi_snd_ssthresh != ssthresh && i.tcpi_snd_ssthresh < cwnd {
                self.decreases
                    .push(f64::from(i.tcpi_snd_ssthresh) / f64::from(cwnd));
            }
        }
        self.last = Some((now, i.tcpi_snd_cwnd, i.tcpi_snd_ssthresh, avoiding));
    }

    fn decrease(&self) -> Option<f64> {
        let mut d = self.decreases.clone();
        d.sort_by(f64::total_cmp);
        d.get(d.len() / 2).copied()
    }

    fn per_rtt(&self) -> f64 {
        if self.rtts > 0.0 {
            self.segments / self.rtts
        } else {
            0.0
        }
    }
}

/// Keeps the ratios given written (as the feeder would, every 10 ms) for `d`, sampling both
/// flows.
fn run_with(
    dp: &MltcpDatapath,
    flows: [(&Sender, Option<f64>); 2],
    d: Duration,
    measure: Duration,
) -> Observed {
    let start = Instant::now();
    let mut from: Option<[u64; 2]> = None;
    let mut growth = [Growth::default(), Growth::default()];
    let mut wrong = Vec::new();
    while start.elapsed() < d {
        let orders: Vec<RatioOrder> = flows
            .iter()
            .filter_map(|(s, r)| {
                r.map(|ratio| RatioOrder {
                    key: s.key,
                    ratio,
                    ttl: Duration::from_millis(100),
                })
            })
            .collect();
        dp.set_ratios(&orders).expect("write ratios");
        let infos = flows.map(|(s, _)| mlcc_bpf::tcp_info(&s.stream).expect("tcp_info"));
        wrong.extend(
            infos
                .iter()
                .enumerate()
                .filter_map(|(i, info)| impossible(i, start.elapsed(), info)),
        );
        // The first second is slow start and its losses.
        if start.elapsed() >= Duration::from_secs(1) {
            for (g, i) in growth.iter_mut().zip(&infos) {
                g.sample(i);
            }
        }
        if std::env::var_os("MLCC_TEST_VERBOSE").is_some() {
            let st: Vec<String> = infos
                .iter()
                .map(|i| {
                    format!(
                        "cwnd {} ssthresh {} state {} retrans {} rtt {}us acked {}",
                        i.tcpi_snd_cwnd,
                        i.tcpi_snd_ssthresh,
                        i.tcpi_ca_state,
                        i.tcpi_total_retrans,
                        i.tcpi_rtt,
                        i.tcpi_bytes_acked,
                    )
                })
                .collect();
            println!("{:6.2}s {}", start.elapsed().as_secs_f64(), st.join(" | "));
        }
        if from.is_none() && start.elapsed() >= d - measure {
            from = Some(infos.map(|i| i.tcpi_bytes_acked));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let from = from.expect("measured");
    Observed {
        bytes: [acked(flows[0].0) - from[0], acked(flows[1].0) - from[1]],
        growth: [growth[0].per_rtt(), growth[1].per_rtt()],
        decrease: [growth[0].decrease(), growth[1].decrease()],
        avoiding_rtts: [growth[0].rtts, growth[1].rtts],
        impossible: wrong,
    }
}

/// The F the CC last applied to a socket; None if the socket is not on it.
fn f_seen(dp: &MltcpDatapath, key: &SocketKey) -> Option<u32> {
    dp.socket(key).expect("read socket").map(|s| s.f_milli)
}

/// One flow of a phase: the CC it connects under (the loaded MLTCP or a kernel CC) and the
/// ratio kept written for it (None: as if the feeder knew nothing of it).
#[derive(Clone, Copy)]
struct Flow<'a> {
    cc: &'a CcName,
    ratio: Option<f64>,
}

/// What a phase saw: the flows' behaviour, the F the CC applied to each at the end (None for a
/// flow not on it), and the same once the ratios stopped being written.
struct Phase {
    seen: Observed,
    f: [Option<u32>; 2],
    expired: [Option<u32>; 2],
}

/// Congestion-avoidance RTTs below which a phase does not measure a flow's growth: a phase
/// gives each flow 330-380 (8 s at RTTs of 12-22 ms, the first second left out). At a drop-tail
/// port the faster-growing flow can lose again and again, or wait out 200 ms timeouts, and
/// spend most of the phase out of congestion avoidance: in one CI run the F = 2 flow moved
/// 2.9 Mbit/s for 5 s and its few samples in between gave 1.27 segments per RTT.
const MIN_AVOIDING_RTTS: f64 = 150.0;

/// [`phase_once`] until both flows spent at least [`MIN_AVOIDING_RTTS`] in congestion
/// avoidance, three tries at most (the last is returned whatever it measured).
fn phase(loaded: &Loaded, path: &SwitchedPath, flows: [Flow; 2]) -> Phase {
    const TRIES: usize = 3;
    let mut p = phase_once(loaded, path, flows);
    for attempt in 2..=TRIES {
        let rtts = p.seen.avoiding_rtts;
        if rtts.iter().all(|&r| r >= MIN_AVOIDING_RTTS) {
            break;
        }
        println!(
            "phase measured again (try {attempt} of {TRIES}): the flows were in congestion \
             avoidance for {:.0} and {:.0} RTTs",
            rtts[0], rtts[1]
        );
        p = phase_once(loaded, path, flows);
    }
    p
}

/// Two fresh flows through `path`, connected in this order, for 8 s (bytes over the last 5 s).
fn phase_once(loaded: &Loaded, path: &SwitchedPath, flows: [Flow; 2]) -> Phase {
    let dp = loaded.dp();
    let rx: Vec<Receiver> = (0..2)
        .map(|_| {
            Receiver::start(&path.receiver, SocketAddr::new(RECEIVER.into(), 0)).expect("receiver")
        })
        .collect();
    let tx: Vec<Sender> = rx
        .iter()
        .zip(&flows)
        .map(|(r, f)| Sender::start(&path.sender, None, r.addr, Some(f.cc)).expect("sender"))
        .collect();
    let keys: Vec<SocketKey> = dp.sockets().unwrap().into_iter().map(|(k, _)| k).collect();
    for (t, f) in tx.iter().zip(&flows) {
        assert_eq!(
            mlcc_bpf::congestion_control(&t.stream).unwrap(),
            f.cc.as_str()
        );
        assert_eq!(keys.contains(&t.key), *f.cc == loaded.name, "{keys:?}");
    }
    let seen = run_with(
        dp,
        [(&tx[0], flows[0].ratio), (&tx[1], flows[1].ratio)],
        Duration::from_secs(8),
        MEASURE,
    );
    // An impossible window comes from a stale ssthresh the kernel stored; the CC must have
    // found and repaired it (the count is the CC's since it was loaded).
    if !seen.impossible.is_empty() {
        let repairs = dp.ssthresh_repairs().expect("read the repairs");
        println!(
            "impossible windows, {repairs} repaired: {:?}",
            seen.impossible
        );
        assert!(
            repairs > 0,
            "impossible windows the CC did not repair: {:?}",
            seen.impossible
        );
    }
    let f = [f_seen(dp, &tx[0].key), f_seen(dp, &tx[1].key)];
    // Without a fresh ratio the CC runs its base. The ratios expire 100 ms after the last
    // write; F is recorded at the next ACK that may raise cwnd, which a flow in loss recovery
    // or waiting out a timeout (the F = 2 flow over Reno now and then) does not see for a
    // while: wait for it, up to 5 s (after a burst from a stale ssthresh, see `IMPOSSIBLE_WINDOW`,
    // the flow waited out RTO backoffs for over 2 s).
    let at_base = |f: Option<u32>| f.is_none_or(|f| f == mltcp::F_ONE);
    let waited = Instant::now();
    let expired = loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = [f_seen(dp, &tx[0].key), f_seen(dp, &tx[1].key)];
        if now.into_iter().all(at_base) || waited.elapsed() > Duration::from_secs(5) {
            break now;
        }
    };
    let mut rx = rx.into_iter();
    for t in tx {
        let sent = t.finish().unwrap();
        let got = rx.next().unwrap().finish().unwrap();
        assert_eq!(sent, got, "payload differs end to end");
    }
    Phase { seen, f, expired }
}

/// Two flows on the loaded CC, r = 1 (F = 2) against r = 0 (F = 0.25), with the high ratio on
/// the first-connected flow, then on the second: neither order nor port decides. The
/// observations of each phase are given high flow first.
fn high_against_low(loaded: &Loaded, path: &SwitchedPath) -> [(Observed, [usize; 2]); 2] {
    let on = |ratio| Flow {
        cc: &loaded.name,
        ratio: Some(ratio),
    };
    let first = phase(loaded, path, [on(1.0), on(0.0)]);
    let second = phase(loaded, path, [on(0.0), on(1.0)]);
    let (hi, lo) = (Some(mltcp::f_milli(1_000_000)), Some(mltcp::f_milli(0)));
    assert_eq!(first.f, [hi, lo]);
    assert_eq!(second.f, [lo, hi]);
    for p in [&first, &second] {
        assert_eq!(
            p.expired,
            [Some(mltcp::F_ONE); 2],
            "an expired ratio leaves F = 1 (the base)"
        );
    }
    [(first.seen, [0, 1]), (second.seen, [1, 0])]
}

fn mbit(b: u64) -> f64 {
    b as f64 * 8.0 / MEASURE.as_secs_f64() / 1e6
}

/// Bytes of the high flows over those of the low ones, both phases together.
fn share(phases: &[(Observed, [usize; 2]); 2]) -> f64 {
    let sum = |which: usize| -> u64 { phases.iter().map(|(o, i)| o.bytes[i[which]]).sum() };
    sum(0) as f64 / sum(1).max(1) as f64
}

fn describe(phases: &[(Observed, [usize; 2]); 2]) -> String {
    let one = |(o, [h, l]): &(Observed, [usize; 2])| {
        format!(
            "growth {:.2} vs {:.2} segments per RTT (over {:.0} and {:.0} RTTs), {:.1} vs {:.1} \
             Mbit/s, decrease {:.2?} vs {:.2?}",
            o.growth[*h],
            o.growth[*l],
            o.avoiding_rtts[*h],
            o.avoiding_rtts[*l],
            mbit(o.bytes[*h]),
            mbit(o.bytes[*l]),
            o.decrease[*h],
            o.decrease[*l],
        )
    };
    format!(
        "{}; then {} (x{:.2} the bytes in all)",
        one(&phases[0]),
        one(&phases[1]),
        share(phases)
    )
}

const MEASURE: Duration = Duration::from_secs(5);

#[test]
fn the_window_grows_f_segments_per_rtt_and_the_bytes_are_reported() {
    let Some(_serial) = root("the_window_grows_f_segments_per_rtt_and_the_bytes_are_reported")
    else {
        return;
    };
    let loaded = Loaded::new(Base::Reno);
    let path = SwitchedPath::create(100_000_000).expect("switched path");
    let phases = high_against_low(&loaded, &path);
    println!(
        "MLTCP over Reno, two flows through a 100 Mbit/s switch port, r=1 vs r=0: {}",
        describe(&phases)
    );
    // The window grows F segments per RTT in congestion avoidance (Reno: 1). Sampling every
    // 10 ms against an RTT of 12-22 ms blurs it little; measured 1.94-1.96 and 0.25.
    for (what, (o, [h, l])) in ["first", "second"].iter().zip(&phases) {
        let (hi, lo) = (o.growth[*h], o.growth[*l]);
        assert!(
            (1.3..=2.7).contains(&hi) && (0.1..=0.45).contains(&lo),
            "{what} phase: growth {hi:.2} (F = 2) and {lo:.2} (F = 0.25) segments per RTT"
        );
    }
    // The bytes are printed, not asserted: they do not follow F reliably. Two AIMD flows hold
    // windows in the ratio of their increases only when they lose together; at a drop-tail
    // port the losses fall mostly on the flow whose faster growth overflows the queue, while
    // the slow one can go seconds without a loss and catch up. 5 s shares measured from 0.6x
    // to 4.3x for F 8x apart (both orders together 1.1x to 2.9x).
}

#[test]
fn over_cubic_a_high_ratio_grows_the_window_faster_than_a_low_one() {
    let Some(_serial) = root("over_cubic_a_high_ratio_grows_the_window_faster_than_a_low_one")
    else {
        return;
    };
    let loaded = Loaded::new(Base::Cubic);
    let path = SwitchedPath::create(100_000_000).expect("switched path");
    let phases = high_against_low(&loaded, &path);
    println!(
        "MLTCP over CUBIC, two flows through a 100 Mbit/s switch port, r=1 vs r=0: {}",
        describe(&phases)
    );
    // CUBIC's window on a path this small (a BDP of tens of segments) follows its Reno-friendly
    // estimate, 3(1 - β)/(1 + β) = 0.53 segments per RTT (the kernel's cubic: 0.51-0.52, in
    // the test below); its cubic curve, C · (t - K)³ with K = ∛(W_max (1 - β) / C) = 3 s or
    // more, lags behind it. F scales that estimate's growth too (it counts ACKed segments), so
    // F = 2 grows about 1.06 segments per RTT and F = 0.25 about 0.13, more, we think, where a
    // flow that went seconds without a loss reaches the convex part of its curve, which grows
    // by time, not by ACKs (measured: 1.00-1.04 and 0.12-0.33). The decrease is CUBIC's,
    // β = 0.7, whatever F.
    for (what, (o, [h, l])) in ["first", "second"].iter().zip(&phases) {
        let (hi, lo) = (o.growth[*h], o.growth[*l]);
        assert!(
            (0.7..=1.5).contains(&hi) && lo <= 0.5 && hi >= 2.0 * lo,
            "{what} phase: growth {hi:.2} (F = 2) and {lo:.2} (F = 0.25) segments per RTT"
        );
        for d in o.decrease.iter().flatten() {
            assert!(
                (0.62..=0.8).contains(d),
                "{what} phase: decrease {d:.2}, not CUBIC's 0.7"
            );
        }
    }
}

#[test]
fn over_cubic_a_socket_without_a_ratio_is_plain_cubic() {
    let Some(_serial) = root("over_cubic_a_socket_without_a_ratio_is_plain_cubic") else {
        return;
    };
    let loaded = Loaded::new(Base::Cubic);
    let path = SwitchedPath::create(100_000_000).expect("switched path");
    let cubic = CcName::new("cubic").expect("cubic");
    let mltcp = Flow {
        cc: &loaded.name,
        ratio: None,
    };
    let kernel = Flow {
        cc: &cubic,
        ratio: None,
    };
    let first = phase(&loaded, &path, [mltcp, kernel]);
    let second = phase(&loaded, &path, [kernel, mltcp]);
    assert_eq!(first.f, [Some(mltcp::F_ONE), None]);
    assert_eq!(second.f, [None, Some(mltcp::F_ONE)]);
    let phases = [(first.seen, [0, 1]), (second.seen, [1, 0])];
    println!(
        "MLTCP over CUBIC without a ratio vs the kernel's cubic, through a 100 Mbit/s switch \
         port: {}",
        describe(&phases)
    );
    // Side by side through the same port, the two grow alike in congestion avoidance (measured
    // 0.50-0.52 against 0.51-0.53 segments per RTT, the Reno-friendly estimate) and cut their
    // windows alike, by CUBIC's β = 0.7 (Reno's 0.5). The bytes are printed, not asserted.
    for (what, (o, [m, k])) in ["first", "second"].iter().zip(&phases) {
        let (mltcp, kernel) = (o.growth[*m], o.growth[*k]);
        assert!(
            (0.35..=0.8).contains(&mltcp) && (0.7..=1.4).contains(&(mltcp / kernel)),
            "{what} phase: growth {mltcp:.2} under MLTCP without a ratio, {kernel:.2} under cubic"
        );
        for d in o.decrease.iter().flatten() {
            assert!(
                (0.62..=0.8).contains(d),
                "{what} phase: decrease {d:.2}, not CUBIC's 0.7"
            );
        }
        assert!(
            o.decrease[*m].is_some(),
            "{what} phase: the flow under MLTCP never lost"
        );
    }
}
