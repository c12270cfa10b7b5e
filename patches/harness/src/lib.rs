//! Test support for mlcc's library patches (`patches/`): builds the C/C++ pieces, runs them in
//! network namespaces, and watches their progress files the way mlccd does (docs/design.md §9, §13).
//!
//! The tests live in `tests/`: `nccl_profiler.rs` drives `libnccl-profiler-mlcc.so` through a C
//! harness for every profiler API version; `ps_lite.rs` builds the BytePS fork of ps-lite with
//! and without the mlcc flag and runs its own benchmark across three namespaces.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mlcc_scheduler::progress::{ProgressReader, parse_file_name};
use rustix::process::{Pid, Signal, kill_process};

/// The repository root (this crate lives in `patches/harness`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The workspace's target directory: `$CARGO_TARGET_DIR` or `<repo>/target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// Where built artifacts and downloads are cached: `<target>/mlcc-patches`.
pub fn cache_dir() -> PathBuf {
    let dir = target_dir().join("mlcc-patches");
    std::fs::create_dir_all(&dir).expect("create the cache dir");
    dir
}

/// Runs a command to completion; panics with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The C compiler: `$CC` or `cc`.
pub fn c_compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Whether this process runs as root (namespaces, TCP_CONGESTION on any CC).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A set of network namespaces `<prefix>-h1..hN` joined by a bridge in `<prefix>-sw`,
/// host i at 10.199.0.i/24. Everything is deleted on drop (also when a test panics).
pub struct Netns {
    pub names: Vec<String>,
    switch: String,
}

impl Netns {
    /// Creates `hosts` namespaces. The prefix must be unique to the test run (e.g. contain the
    /// pid); interface names inside the namespaces are private to them.
    pub fn new(prefix: &str, hosts: usize) -> io::Result<Netns> {
        let mut ns = Netns {
            names: Vec::new(),
            switch: format!("{prefix}-sw"),
        };
        ip(&["netns", "add", &ns.switch])?;
        ip(&["-n", &ns.switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &ns.switch, "link", "set", "br0", "up"])?;
        for i in 1..=hosts {
            let name = format!("{prefix}-h{i}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            let port = format!("p{i}");
            ip(&[
                "-n", &ns.switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &name,
            ])?;
            ip(&[
                "-n", &ns.switch, "link", "set", &port, "master", "br0", "up",
            ])?;
            ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("10.199.0.{i}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    /// The address of host `i` (1-based).
    pub fn addr(&self, i: usize) -> String {
        format!("10.199.0.{i}")
    }

    /// A command run inside namespace `i` (1-based).
    pub fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i - 1]]).arg(program);
        c
    }

    /// `sysctl net.ipv4.tcp_congestion_control` inside namespace `i`.
    pub fn default_cc(&self, i: usize) -> String {
        let out = run(Command::new("ip").args([
            "netns",
            "exec",
            &self.names[i - 1],
            "cat",
            "/proc/sys/net/ipv4/tcp_congestion_control",
        ]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Established TCP sockets in namespace `i` as `ss -tin` shows them.
    pub fn tcp_sockets(&self, i: usize) -> Vec<TcpSocket> {
        // `ss -N` enters the namespace itself: cheaper than `ip netns exec` on a loaded host.
        let out = run(Command::new("ss").args([
            "-N",
            &self.names[i - 1],
            "-tinH",
            "state",
            "established",
        ]));
        parse_ss(&String::from_utf8_lossy(&out.stdout))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in self.names.iter().chain(std::iter::once(&self.switch)) {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// One established TCP socket: addresses and the congestion control `ss -i` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: String,
    pub peer: String,
    pub cc: String,
}

impl TcpSocket {
    fn ip(addr: &str) -> &str {
        addr.rsplit_once(':').map_or(addr, |(ip, _)| ip)
    }

    /// Between two different hosts (not loopback, not to itself).
    pub fn crosses_hosts(&self) -> bool {
        Self::ip(&self.local) != Self::ip(&self.peer)
    }
}

/// Parses `ss -tinH state established`: a socket line (`Recv-Q Send-Q Local Peer`) followed
/// by an indented line of TCP info whose first word is the congestion control.
pub fn parse_ss(text: &str) -> Vec<TcpSocket> {
    let mut out = Vec::new();
    let mut pending: Option<(String, String)> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some((local, peer)) = pending.take() {
                let cc = line.split_whitespace().next().unwrap_or("").to_string();
                out.push(TcpSocket { local, peer, cc });
            }
        } else {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 4 {
                pending = Some((f[2].to_string(), f[3].to_string()));
            }
        }
    }
    out
}

/// The workspace's `mlccd` binary (`<target>/debug/mlccd`; `cargo test` builds the dev
/// profile). `env!("CARGO_BIN_EXE_mlccd")` exists only inside mlcc-scheduler, so when the
/// binary is missing, or older than a source of mlccd or of a workspace crate it uses, this runs
/// `cargo build -p mlcc-scheduler --bin mlccd` first (cargo does not hold its build lock while
/// tests run, so this does not deadlock under `cargo test`).
pub fn mlccd_binary() -> PathBuf {
    let bin = target_dir().join("debug/mlccd");
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let root = repo_root();
    let newest_source = [
        "scheduler/src",
        "scheduler/Cargo.toml",
        "scheduler/build.rs",
        "core/src",
        "proto",
        "bpf/src",
        "bpf/build.rs",
        "Cargo.lock",
    ]
    .iter()
    .filter_map(|p| newest_mtime(&root.join(p)))
    .max();
    if built.is_none() || newest_source > built {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(cargo).current_dir(&root).args([
            "build",
            "-p",
            "mlcc-scheduler",
            "--bin",
            "mlccd",
        ]));
    }
    assert!(bin.exists(), "{} missing after cargo build", bin.display());
    bin
}

/// The newest modification time of a file or of any file below a directory.
fn newest_mtime(path: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

/// A topology file for mlccd in cloud mode: the given (name, ip) hosts on one switch `sw1`
/// without an emulator, 1 Gbit/s links.
pub fn write_topology(path: &Path, hosts: &[(String, String)]) -> io::Result<()> {
    let mut t = String::from("[[switch]]\nname = \"sw1\"\n");
    for (name, ip) in hosts {
        t.push_str(&format!("\n[[host]]\nname = \"{name}\"\nip = \"{ip}\"\n"));
    }
    for (name, _) in hosts {
        t.push_str(&format!(
            "\n[[link]]\na = \"{name}\"\nb = \"sw1\"\ncapacity = \"1Gbit\"\n"
        ));
    }
    std::fs::write(path, t)
}

/// Child processes killed (by their own pid) when dropped, so a failing test leaves none.
#[derive(Default)]
pub struct Children {
    pub list: Vec<(String, Child)>,
}

impl Children {
    pub fn spawn(&mut self, name: &str, cmd: &mut Command, log: &Path) {
        let f = std::fs::File::create(log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log file"))
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        self.list.push((name.to_string(), child));
    }

    /// Waits for all to exit; returns each name with its exit success. Panics after `timeout`.
    pub fn wait_all(&mut self, timeout: Duration) -> Vec<(String, bool)> {
        let deadline = Instant::now() + timeout;
        let mut done = BTreeMap::new();
        while done.len() < self.list.len() {
            for (name, child) in &mut self.list {
                if done.contains_key(name) {
                    continue;
                }
                if let Some(st) = child.try_wait().expect("wait") {
                    done.insert(name.clone(), st.success());
                }
            }
            if Instant::now() > deadline {
                let running: Vec<_> = self
                    .list
                    .iter()
                    .filter(|(n, _)| !done.contains_key(n))
                    .map(|(n, _)| n.clone())
                    .collect();
                panic!("processes still running after {timeout:?}: {running:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        done.into_iter().collect()
    }

    /// Sends SIGTERM to every child still running and waits up to `timeout` for them; returns
    /// each name with whether it exited successfully (`false` also for one that had to be
    /// killed, which `Drop` then does).
    pub fn terminate(&mut self, timeout: Duration) -> Vec<(String, bool)> {
        for (_, c) in &mut self.list {
            if let Ok(None) = c.try_wait() {
                // Our own child, not reaped yet, so the pid is still its.
                if let Some(pid) = i32::try_from(c.id()).ok().and_then(Pid::from_raw) {
                    let _ = kill_process(pid, Signal::TERM);
                }
            }
        }
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        for (name, c) in &mut self.list {
            let ok = loop {
                match c.try_wait() {
                    Ok(Some(st)) => break st.success(),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => break false,
                }
            };
            out.push((name.clone(), ok));
        }
        out
    }

    /// Whether any process has exited.
    pub fn any_exited(&mut self) -> bool {
        self.list
            .iter_mut()
            .any(|(_, c)| matches!(c.try_wait(), Ok(Some(_))))
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.list {
            if let Ok(None) = c.try_wait() {
                // `ip netns exec` execs the program, so this pid is the program itself.
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Opens every progress file that appears in `dir` (like mlccd's monitor) and keeps its
/// mapping: the counters stay readable after the process unlinks the file at exit.
#[derive(Default)]
pub struct ProgressWatch {
    pub readers: BTreeMap<String, ProgressReader>,
}

impl ProgressWatch {
    /// Opens files not seen yet. A file whose header is not complete yet is retried next time.
    pub fn scan(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if self.readers.contains_key(&name) || parse_file_name(&name).is_none() {
                continue;
            }
            if let Ok(r) = ProgressReader::open(&e.path()) {
                self.readers.insert(name, r);
            }
        }
    }

    /// The reader of the file for (role, rank), e.g. ("worker", 0).
    pub fn get(&self, role: &str, rank: u32) -> Option<&ProgressReader> {
        self.readers.iter().find_map(|(name, r)| {
            let f = parse_file_name(name)?;
            (format!("{:?}", f.role).eq_ignore_ascii_case(role) && f.rank == rank).then_some(r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_file_loads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        let hosts: Vec<_> = (1..=3)
            .map(|i| (format!("h{i}"), format!("10.199.0.{i}")))
            .collect();
        write_topology(&p, &hosts).unwrap();
        let t = mlcc_core::topology::Topology::load(&p).unwrap();
        let ip: std::net::IpAddr = "10.199.0.2".parse().unwrap();
        let h2 = t.host_by_ip(ip).expect("h2 by its ip");
        assert_eq!(t.node(h2).name, "h2");
    }

    #[test]
    fn ss_output_parses() {
        let text = "0      0      10.199.0.3:43210 10.199.0.2:9000\n\t cubic wscale:7,7 rto:204 \
                    rtt:0.05/0.02\n0 0 127.0.0.1:1 127.0.0.1:2\n\t reno wscale:7,7\n";
        let s = parse_ss(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].cc, "cubic");
        assert!(s[0].crosses_hosts());
        assert_eq!(s[1].cc, "reno");
        assert!(!s[1].crosses_hosts());
    }
}
