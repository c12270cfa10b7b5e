//! Network-namespace fixtures for the root tests and the bench: namespaces and veth links with
//! unique names, removed on drop (also when a test fails), and TCP flows with end-to-end
//! checksums. Needs root, `ip` and `tc` (iproute2).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::CcName;
use crate::key::SocketKey;
use crate::sys;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `<prefix>-<pid>-<n>`: unique on the machine while this process lives.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a command, turning a non-zero exit into an error that carries its stderr.
pub fn run(cmd: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running {cmd}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Where the cgroup v2 hierarchy is mounted: `/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one.
pub fn cgroup2_root() -> io::Result<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts")?;
    mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2"))
        .and_then(|f| f.get(1).map(std::path::PathBuf::from))
        .ok_or_else(|| io::Error::other("no cgroup2 mount (cgroup v2 is needed for sock_ops)"))
}

/// A cgroup v2 directory under [`cgroup2_root`], removed on drop once its processes are gone.
pub struct Cgroup {
    dir: std::path::PathBuf,
}

impl Cgroup {
    pub fn create(name: &str) -> io::Result<Self> {
        let dir = cgroup2_root()?.join(name);
        std::fs::create_dir(&dir)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
        Ok(Self { dir })
    }

    /// One that exists already (to remove it).
    pub fn adopt(dir: &std::path::Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Its `cgroup.procs`, open for writing: a child that writes `0` to it between fork and
    /// exec runs in the cgroup from its first instruction.
    pub fn procs(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
    }

    /// Removes the directory, waiting up to `patience` for its last processes to go.
    pub fn remove(&self, patience: std::time::Duration) -> io::Result<()> {
        let until = std::time::Instant::now() + patience;
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) if std::time::Instant::now() >= until => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("removing {}: {e}", self.dir.display()),
                    ));
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = self.remove(std::time::Duration::from_secs(2));
    }
}

/// A named network namespace (`ip netns`), deleted on drop.
pub struct Netns {
    name: String,
    fd: File,
}

impl Netns {
    pub fn create(prefix: &str) -> io::Result<Self> {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name])?;
        let fd = match File::open(format!("/run/netns/{name}")) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = run("ip", &["netns", "del", &name]);
                return Err(e);
            }
        };
        let ns = Self { name, fd };
        ns.ip(&["link", "set", "lo", "up"])?;
        // Socket buffers that ride out a few ms of CPU starvation of the test's threads (CI
        // machines are small and shared); otherwise a descheduled reader or writer, not the CC,
        // decides a slot's rate.
        ns.enter(|| {
            std::fs::write("/proc/sys/net/ipv4/tcp_rmem", "4096 4194304 16777216")?;
            std::fs::write("/proc/sys/net/ipv4/tcp_wmem", "4096 4194304 16777216")
        })?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> args...`
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `tc -n <ns> args...`
    pub fn tc(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("tc", &all)
    }

    /// Runs `f` on a thread inside the namespace; sockets it creates stay in the namespace.
    pub fn enter<R: Send>(&self, f: impl FnOnce() -> io::Result<R> + Send) -> io::Result<R> {
        sys::in_netns(self.fd.as_fd(), f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// Two namespaces joined by a veth pair, `eth0` on each side.
pub struct VethPair {
    pub sender: Netns,
    pub receiver: Netns,
    pub sender_addr: Ipv4Addr,
    pub receiver_addr: Ipv4Addr,
}

impl VethPair {
    /// Optionally shaped to `rate_bits_per_sec` on the sender's egress with TBF (this kernel has
    /// no fq or netem; TBF keeps a small queue so the link rate is what a flow can get).
    pub fn create(rate_bits_per_sec: Option<u64>) -> io::Result<Self> {
        Self::build(rate_bits_per_sec.map(|r| (r, 0)))
    }

    /// Shaped on the sender's egress to `rate_bits_per_sec` as a switch port that serves
    /// `fill_classes` fill classes beneath the default one ([`crate::classes::Port`]).
    pub fn with_classes(rate_bits_per_sec: u64, fill_classes: u8) -> io::Result<Self> {
        Self::build(Some((rate_bits_per_sec, fill_classes)))
    }

    fn build(shaped: Option<(u64, u8)>) -> io::Result<Self> {
        let sender = Netns::create("mlcc-s")?;
        let receiver = Netns::create("mlcc-r")?;
        let (sender_addr, receiver_addr) =
            (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
        sender.ip(&[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            receiver.name(),
        ])?;
        sender.ip(&["addr", "add", "10.77.0.1/24", "dev", "eth0"])?;
        receiver.ip(&["addr", "add", "10.77.0.2/24", "dev", "eth0"])?;
        sender.ip(&["link", "set", "eth0", "up"])?;
        receiver.ip(&["link", "set", "eth0", "up"])?;
        if let Some((rate, fill_classes)) = shaped {
            let port = crate::classes::Port {
                bits_per_sec: rate,
                burst_bytes: 256 * 1024,
                latency: std::time::Duration::from_millis(5),
            };
            for cmd in port.tc_commands("eth0", fill_classes) {
                let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
                sender.tc(&cmd)?;
            }
        }
        Ok(Self {
            sender,
            receiver,
            sender_addr,
            receiver_addr,
        })
    }
}

/// An order-sensitive checksum of a byte stream, fed in arbitrary pieces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamSum {
    pub bytes: u64,
    sum: u64,
}

impl StreamSum {
    pub fn feed(&mut self, data: &[u8]) {
        for &b in data {
            self.bytes += 1;
            self.sum = self.sum.rotate_left(5) ^ u64::from(b).wrapping_mul(self.bytes | 1);
        }
    }
}

/// Accepts one connection and reads it to EOF.
pub struct Receiver {
    pub addr: SocketAddr,
    handle: JoinHandle<io::Result<StreamSum>>,
}

impl Receiver {
    pub fn start(ns: &Netns, addr: SocketAddr) -> io::Result<Self> {
        let listener = ns.enter(|| TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept()?;
            let mut sum = StreamSum::default();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => return Ok(sum),
                    Ok(n) => sum.feed(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        });
        Ok(Self { addr, handle })
    }

    pub fn finish(self) -> io::Result<StreamSum> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("receiver panicked")))
    }
}

/// Writes a pseudo-random stream as fast as the socket takes it until stopped.
pub struct Sender {
    pub key: SocketKey,
    pub stream: TcpStream,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<io::Result<StreamSum>>,
}

impl Sender {
    /// Connects from `ns` (bound to `from` if given, so tests can make 4-tuples collide across
    /// namespaces) and puts the socket on `cc` if given.
    pub fn start(
        ns: &Netns,
        from: Option<SocketAddr>,
        to: SocketAddr,
        cc: Option<&CcName>,
    ) -> io::Result<Self> {
        let stream = ns.enter(|| {
            let s = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
            // Keep ~100 ms of data queued even at 1 Gbit/s: with the autotuned buffer (~2 cwnd,
            // ~10 ms at 100 Mbit/s) a sender thread descheduled for a few ms drained it and the
            // rate tests measured thread scheduling instead of the CC. Best effort (root only).
            let _ = sys::force_send_buffer(s.as_fd(), 16 << 20);
            if let Some(from) = from {
                s.set_reuse_address(true)?;
                s.bind(&from.into())?;
            }
            if let Some(cc) = cc {
                sys::set_tcp_congestion(s.as_fd(), cc.as_str())?;
            }
            s.connect(&to.into())?;
            Ok(TcpStream::from(s))
        })?;
        let key = SocketKey::of_stream(&stream)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = stream.try_clone()?;
        let stop2 = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut buf = vec![0u8; 128 * 1024];
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let mut sum = StreamSum::default();
            let mut off = 0usize;
            while !stop2.load(Ordering::Relaxed) {
                let n = match w.write(&buf[off..]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                sum.feed(&buf[off..off + n]);
                off = (off + n) % buf.len();
            }
            w.flush()?;
            w.shutdown(std::net::Shutdown::Write)?;
            Ok(sum)
        });
        Ok(Self {
            key,
            stream,
            stop,
            handle,
        })
    }

    /// Stops writing, half-closes, and returns what was written.
    pub fn finish(self) -> io::Result<StreamSum> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("sender panicked")))
    }
}
