//! Root tests of the MLTCP congestion control (`mlcc_bpf::mltcp`) on this kernel: it registers
//! under its own name, and two real TCP flows through a shaped switch port grow their windows
//! by F(r) of the ratios written for them. They share the machine (CC names, namespaces), so
//! they run one at a time behind `SERIAL`; without root each prints why it skipped and passes.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlcc_bpf::mltcp::{self, MltcpDatapath, RatioOrder};
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
    fn new() -> Self {
        let n = unique_name("t");
        let dir = PathBuf::from(format!("/sys/fs/bpf/mltcp-test-{n}"));
        let name = CcName::new(&format!("mltcp{}", n.replace('-', ""))).expect("test CC name");
        let dp = MltcpDatapath::load(&name, &dir).expect("load the MLTCP CC");
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
    let loaded = Loaded::new();
    let name = loaded.name.clone();
    assert!(
        available().split_whitespace().any(|n| n == name.as_str()),
        "{name} not in {}",
        available()
    );
    // A second registration of the name fails (names are global in the kernel) and leaves no
    // pins behind; the first stays registered.
    let other = PathBuf::from(format!("/sys/fs/bpf/mltcp-test-{}", unique_name("dup")));
    let err = MltcpDatapath::load(&name, &other).expect_err("duplicate name refused");
    assert!(err.to_string().contains("already registered"), "{err}");
    assert!(!other.exists(), "{} left behind", other.display());
    assert!(available().split_whitespace().any(|n| n == name.as_str()));
    // Reopening the pins (what the feeder does) works and sees no sockets yet.
    let again = MltcpDatapath::open(&loaded.dir).expect("open the pins");
    assert!(again.sockets().expect("list sockets").is_empty());
    drop(again);
    let dir = loaded.dir.clone();
    drop(loaded);
    assert!(
        !available().split_whitespace().any(|n| n == name.as_str()),
        "{name} still registered after unload"
    );
    assert!(!dir.exists());
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
}

/// cwnd growth in congestion avoidance, from 10 ms samples of `tcp_info`: the increase between
/// consecutive samples that are both in the Open state with cwnd at or above ssthresh and no
/// decrease between them (a loss), over the time they span in RTTs. Reno grows one segment per
/// RTT there; MLTCP F segments.
#[derive(Default)]
struct Growth {
    last: Option<(Instant, u32, bool)>,
    segments: f64,
    rtts: f64,
}

impl Growth {
    fn sample(&mut self, i: &libc::tcp_info) {
        const TCP_CA_OPEN: u8 = 0;
        let now = Instant::now();
        let avoiding = i.tcpi_ca_state == TCP_CA_OPEN && i.tcpi_snd_cwnd >= i.tcpi_snd_ssthresh;
        if let Some((t, cwnd, was_avoiding)) = self.last
            && was_avoiding
            && avoiding
            && i.tcpi_snd_cwnd >= cwnd
            && i.tcpi_rtt > 0
        {
            self.segments += f64::from(i.tcpi_snd_cwnd - cwnd);
            self.rtts += (now - t).as_secs_f64() / (f64::from(i.tcpi_rtt) * 1e-6);
        }
        self.last = Some((now, i.tcpi_snd_cwnd, avoiding));
    }

    fn per_rtt(&self) -> f64 {
        if self.rtts > 0.0 {
            self.segments / self.rtts
        } else {
            0.0
        }
    }
}

/// Keeps both ratios written (as the feeder would, every 10 ms) for `d`, sampling both flows.
fn run_with(
    dp: &MltcpDatapath,
    flows: [(&Sender, f64); 2],
    d: Duration,
    measure: Duration,
) -> Observed {
    let start = Instant::now();
    let mut from: Option<[u64; 2]> = None;
    let mut growth = [Growth::default(), Growth::default()];
    while start.elapsed() < d {
        let orders: Vec<RatioOrder> = flows
            .iter()
            .map(|(s, r)| RatioOrder {
                key: s.key,
                ratio: *r,
                ttl: Duration::from_millis(100),
            })
            .collect();
        dp.set_ratios(&orders).expect("write ratios");
        let infos = flows.map(|(s, _)| mlcc_bpf::tcp_info(&s.stream).expect("tcp_info"));
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
    }
}

fn f_seen(dp: &MltcpDatapath, key: &SocketKey) -> u32 {
    dp.socket(key)
        .expect("read socket")
        .expect("socket on the CC")
        .f_milli
}

/// Two fresh flows through `path`, the first connected given `ratios[0]`, the second
/// `ratios[1]`, for 8 s: what they did (bytes over the last 5 s), the F the CC applied to each,
/// and the F of the first once its ratio expired.
fn phase(loaded: &Loaded, path: &SwitchedPath, ratios: [f64; 2]) -> (Observed, [u32; 2], u32) {
    let dp = loaded.dp();
    let rx: Vec<Receiver> = (0..2)
        .map(|_| {
            Receiver::start(&path.receiver, SocketAddr::new(RECEIVER.into(), 0)).expect("receiver")
        })
        .collect();
    let tx: Vec<Sender> = rx
        .iter()
        .map(|r| Sender::start(&path.sender, None, r.addr, Some(&loaded.name)).expect("sender"))
        .collect();
    assert_eq!(
        mlcc_bpf::congestion_control(&tx[0].stream).unwrap(),
        loaded.name.as_str()
    );
    let keys: Vec<SocketKey> = dp.sockets().unwrap().into_iter().map(|(k, _)| k).collect();
    assert!(tx.iter().all(|t| keys.contains(&t.key)), "{keys:?}");
    let seen = run_with(
        dp,
        [(&tx[0], ratios[0]), (&tx[1], ratios[1])],
        Duration::from_secs(8),
        MEASURE,
    );
    let f = [f_seen(dp, &tx[0].key), f_seen(dp, &tx[1].key)];
    // Without a fresh ratio the CC runs plain Reno.
    std::thread::sleep(Duration::from_millis(300));
    let expired = f_seen(dp, &tx[0].key);
    let mut rx = rx.into_iter();
    for t in tx {
        let sent = t.finish().unwrap();
        let got = rx.next().unwrap().finish().unwrap();
        assert_eq!(sent, got, "payload differs end to end");
    }
    (seen, f, expired)
}

const MEASURE: Duration = Duration::from_secs(5);

#[test]
fn the_window_grows_f_segments_per_rtt_and_the_bytes_are_reported() {
    let Some(_serial) = root("the_window_grows_f_segments_per_rtt_and_the_bytes_are_reported")
    else {
        return;
    };
    let loaded = Loaded::new();
    let path = SwitchedPath::create(100_000_000).expect("switched path");
    // Near the end of its iteration (F = 2) against just starting (F = 0.25), with the high
    // ratio on the first-connected flow, then on the second: neither order nor port decides.
    let (first, f1, expired) = phase(&loaded, &path, [1.0, 0.0]);
    let (second, f2, _) = phase(&loaded, &path, [0.0, 1.0]);
    let mbit = |b: u64| b as f64 * 8.0 / MEASURE.as_secs_f64() / 1e6;
    let (hi_bytes, lo_bytes) = (
        first.bytes[0] + second.bytes[1],
        first.bytes[1] + second.bytes[0],
    );
    let share = hi_bytes as f64 / lo_bytes.max(1) as f64;
    println!(
        "MLTCP, two flows through a 100 Mbit/s switch port, r=1 vs r=0: congestion-avoidance \
         growth {:.2} vs {:.2} and {:.2} vs {:.2} segments per RTT; over the last 5 s {:.1} vs \
         {:.1} and {:.1} vs {:.1} Mbit/s (x{share:.2} in all)",
        first.growth[0],
        first.growth[1],
        second.growth[1],
        second.growth[0],
        mbit(first.bytes[0]),
        mbit(first.bytes[1]),
        mbit(second.bytes[1]),
        mbit(second.bytes[0]),
    );
    assert_eq!(f1, [mltcp::f_milli(1_000_000), mltcp::f_milli(0)]);
    assert_eq!(f2, [f1[1], f1[0]]);
    assert_eq!(
        expired,
        mltcp::F_ONE,
        "an expired ratio leaves F = 1 (Reno)"
    );
    // The window grows F segments per RTT in congestion avoidance (Reno: 1). Sampling every
    // 10 ms against an RTT of 12-22 ms blurs it little; measured 1.94-1.96 and 0.25.
    for (what, hi, lo) in [
        ("first", first.growth[0], first.growth[1]),
        ("second", second.growth[1], second.growth[0]),
    ] {
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
