//! Hosts as network namespaces, switches as bridges in namespaces of their own, shaped veth
//! links (TBF: this kernel has no fq or netem). Every object is named after the run, so a run
//! can always be found and removed (`mlcc-testbed down`).

use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use crate::scenario::Scenario;

/// Every namespace of every run starts with this.
pub const PREFIX: &str = "mlcc-tb-";

/// Runs a command; a non-zero exit becomes an error carrying its stderr.
pub fn sh(cmd: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running {cmd}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[derive(Clone, Debug)]
pub struct HostNet {
    pub name: String,
    pub ns: String,
    pub ip: Ipv4Addr,
    /// 1-based rack (= switch) number.
    pub rack: u32,
}

#[derive(Clone, Debug)]
pub struct SwitchNet {
    pub name: String,
    pub ns: String,
    /// The bridge's address, where this switch's emulator listens.
    pub ip: Ipv4Addr,
}

/// The addressing plan of one run: 10.201.<rack>.<host> /16, switches at 10.201.<rack>.254.
#[derive(Clone, Debug)]
pub struct NetPlan {
    pub run: String,
    pub hosts: Vec<HostNet>,
    pub switches: Vec<SwitchNet>,
    pub host_link_bits: u64,
    pub inter_switch_bits: Option<u64>,
    /// Every link's TBF bucket, as line time ([`crate::scenario::DEFAULT_LINK_BURST`]).
    pub link_burst: Duration,
    /// Fill classes every port serves beneath its default class ([`mlcc_bpf::classes`]).
    pub link_classes: u8,
}

impl NetPlan {
    pub fn new(run: &str, s: &Scenario) -> Self {
        let switches = (1..=s.racks)
            .map(|r| SwitchNet {
                name: format!("tor{r}"),
                ns: format!("{PREFIX}{run}-tor{r}"),
                ip: Ipv4Addr::new(10, 201, r as u8, 254),
            })
            .collect();
        let hosts = (1..=s.hosts())
            .map(|h| {
                let rack = (h - 1) / s.hosts_per_rack + 1;
                HostNet {
                    name: format!("h{h}"),
                    ns: format!("{PREFIX}{run}-h{h}"),
                    ip: Ipv4Addr::new(10, 201, rack as u8, h as u8),
                    rack,
                }
            })
            .collect();
        NetPlan {
            run: run.to_string(),
            hosts,
            switches,
            host_link_bits: s.host_link_bits,
            inter_switch_bits: s.inter_switch_bits,
            link_burst: s.link_burst,
            link_classes: s.link_classes,
        }
    }

    pub fn host(&self, name: &str) -> Option<&HostNet> {
        self.hosts.iter().find(|h| h.name == name)
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.switches
            .iter()
            .map(|s| s.ns.as_str())
            .chain(self.hosts.iter().map(|h| h.ns.as_str()))
    }

    /// Creates everything; on error removes what it made.
    pub fn create(&self) -> io::Result<()> {
        let r = self.try_create();
        if r.is_err() {
            self.destroy();
        }
        r
    }

    fn try_create(&self) -> io::Result<()> {
        for ns in self.namespaces() {
            sh("ip", &["netns", "add", ns])?;
            sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            // Socket buffers deep enough that a descheduled trainer thread (2 shared cores)
            // does not decide a flow's rate.
            sh(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "sh",
                    "-c",
                    "echo '4096 4194304 16777216' > /proc/sys/net/ipv4/tcp_rmem && echo '4096 4194304 16777216' > /proc/sys/net/ipv4/tcp_wmem",
                ],
            )?;
        }
        for sw in &self.switches {
            sh(
                "ip",
                &["-n", &sw.ns, "link", "add", "br0", "type", "bridge"],
            )?;
            sh("ip", &["-n", &sw.ns, "link", "set", "br0", "up"])?;
            sh(
                "ip",
                &[
                    "-n",
                    &sw.ns,
                    "addr",
                    "add",
                    &format!("{}/16", sw.ip),
                    "dev",
                    "br0",
                ],
            )?;
        }
        let rate = self.host_link_bits;
        for h in &self.hosts {
            let sw = &self.switches[(h.rack - 1) as usize];
            // eth0 in the host, a port named after the host on the switch.
            sh(
                "ip",
                &[
                    "-n", &h.ns, "link", "add", "eth0", "type", "veth", "peer", "name", &h.name,
                    "netns", &sw.ns,
                ],
            )?;
            sh(
                "ip",
                &[
                    "-n",
                    &h.ns,
                    "addr",
                    "add",
                    &format!("{}/16", h.ip),
                    "dev",
                    "eth0",
                ],
            )?;
            sh("ip", &["-n", &h.ns, "link", "set", "eth0", "up"])?;
            sh(
                "ip",
                &["-n", &sw.ns, "link", "set", &h.name, "master", "br0", "up"],
            )?;
            let port = self.port(rate);
            shape(&h.ns, "eth0", &port, self.link_classes)?; // uplink
            shape(&sw.ns, &h.name, &port, self.link_classes)?; // downlink: the switch port's queue
        }
        if let ([a, b], Some(isl)) = (self.switches.as_slice(), self.inter_switch_bits) {
            sh(
                "ip",
                &[
                    "-n", &a.ns, "link", "add", "isl", "type", "veth", "peer", "name", "isl",
                    "netns", &b.ns,
                ],
            )?;
            for s in [a, b] {
                sh(
                    "ip",
                    &["-n", &s.ns, "link", "set", "isl", "master", "br0", "up"],
                )?;
                shape(&s.ns, "isl", &self.port(isl), self.link_classes)?;
            }
        }
        Ok(())
    }

    /// A port of `bits` per second: TBF with this run's bucket and a ~5 ms queue (what a
    /// shallow-buffered ToR port holds).
    fn port(&self, bits: u64) -> mlcc_bpf::classes::Port {
        mlcc_bpf::classes::Port {
            bits_per_sec: bits,
            burst_bytes: bucket_bytes(bits, self.link_burst),
            latency: Duration::from_millis(5),
        }
    }

    /// Deletes this run's namespaces (their links go with them). Idempotent.
    pub fn destroy(&self) {
        for ns in self.namespaces() {
            delete_namespace(ns);
        }
    }
}

/// TBF's bucket for a link of `bits` per second: `burst` of line time, at least 32 KiB (below
/// that TBF splits every TSO burst).
pub fn bucket_bytes(bits: u64, burst: Duration) -> u64 {
    ((bits as f64 / 8.0 * burst.as_secs_f64()) as u64).max(32 * 1024)
}

/// Device `dev` in `ns` as `port`, serving `classes` fill classes beneath its default class
/// ([`crate::scenario::DEFAULT_LINK_BURST`] says why the bucket is small).
fn shape(ns: &str, dev: &str, port: &mlcc_bpf::classes::Port, classes: u8) -> io::Result<()> {
    for cmd in port.tc_commands(dev, classes) {
        let mut args = vec!["-n", ns];
        args.extend(cmd.iter().map(String::as_str));
        sh("tc", &args)?;
    }
    Ok(())
}

/// Kills every process still in the namespace, then deletes it.
pub fn delete_namespace(ns: &str) {
    if let Ok(pids) = sh("ip", &["netns", "pids", ns]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok().filter(|&p| p > 0))
            .filter_map(Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
    let _ = sh("ip", &["netns", "del", ns]);
}

/// Namespaces of any testbed run present on the machine.
pub fn existing_namespaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    v.sort();
    v
}

/// Runs `f` on a thread inside namespace `ns` (sockets it opens, /proc/thread-self/net views).
pub fn in_netns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> io::Result<R> {
    use std::os::fd::AsFd;
    let fd = std::fs::File::open(Path::new("/run/netns").join(ns))?;
    mlcc_bpf::in_netns(fd.as_fd(), || Ok(f()))
}

/// Per-interface (rx, tx) byte counters as seen from inside `ns`.
pub fn counters(ns: &str) -> io::Result<Vec<(String, u64, u64)>> {
    let text = in_netns(ns, || std::fs::read_to_string("/proc/thread-self/net/dev"))??;
    Ok(parse_net_dev(&text))
}

fn parse_net_dev(text: &str) -> Vec<(String, u64, u64)> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            Some((name.trim().to_string(), *f.first()?, *f.get(8)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_parses() {
        let t = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:     100       1    0    0    0     0          0         0      200       2    0    0    0     0       0          0\n    h1: 12345 10 0 0 0 0 0 0 67890 20 0 0 0 0 0 0\n";
        assert_eq!(
            parse_net_dev(t),
            vec![("lo".into(), 100, 200), ("h1".into(), 12345, 67890)]
        );
    }

    #[test]
    fn a_bucket_is_its_line_time_and_never_below_32_kib() {
        let ms = Duration::from_millis;
        assert_eq!(bucket_bytes(1_000_000_000, ms(2)), 250_000);
        assert_eq!(bucket_bytes(1_000_000_000, ms(4)), 500_000);
        assert_eq!(bucket_bytes(10_000_000_000, ms(2)), 2_500_000);
        assert_eq!(bucket_bytes(100_000_000, ms(2)), 32 * 1024);
    }
}
