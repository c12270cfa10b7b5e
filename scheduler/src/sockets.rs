//! Which TCP sockets a training process owns (DESIGN.md §5, §11 step 1).
//!
//! A progress file names its writer's pid; the process's open fds that are `socket:[inode]`
//! links, matched against `/proc/<pid>/net/tcp{,6}` (which lists sockets of the process's own
//! network namespace with their 4-tuple and inode), give its connections without any extra
//! crate or privilege beyond reading `/proc/<pid>/fd`. Whether a connection was accepted (the
//! local port is one the process listens on) tells the direction of ring traffic: NCCL's
//! receiver listens and its sender connects, so only connections the process opened carry its
//! outgoing ring data.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// One established TCP connection of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TcpConn {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The local port is a listening port of the process: the peer connected to us.
    pub accepted: bool,
}

/// Lists a process's established TCP connections.
pub trait SocketSource: Send {
    fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>>;
}

/// Reads `/proc` (or another root, for tests).
#[derive(Clone, Debug)]
pub struct ProcSockets {
    root: PathBuf,
}

impl Default for ProcSockets {
    fn default() -> Self {
        ProcSockets {
            root: PathBuf::from("/proc"),
        }
    }
}

impl ProcSockets {
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        ProcSockets { root: root.into() }
    }
}

const TCP_ESTABLISHED: u8 = 0x01;
const TCP_LISTEN: u8 = 0x0A;

/// One row of `/proc/net/tcp{,6}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpRow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: u8,
    pub inode: u64,
}

fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        // The kernel prints the address as host-order 32-bit words.
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_ne_bytes(),
        )),
        32 => {
            let mut o = [0u8; 16];
            for (i, chunk) in o.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(o)).to_canonical()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Parses the text of `/proc/<pid>/net/tcp` or `tcp6`; malformed rows are skipped.
pub fn parse_tcp_table(text: &str) -> Vec<TcpRow> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            Some(TcpRow {
                local: parse_addr(f.get(1)?)?,
                remote: parse_addr(f.get(2)?)?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// Joins a process's socket inodes with its namespace's TCP table.
pub fn connections_of(inodes: &HashSet<u64>, rows: &[TcpRow]) -> Vec<TcpConn> {
    let listening: HashSet<u16> = rows
        .iter()
        .filter(|r| r.state == TCP_LISTEN && inodes.contains(&r.inode))
        .map(|r| r.local.port())
        .collect();
    let mut v: Vec<TcpConn> = rows
        .iter()
        .filter(|r| r.state == TCP_ESTABLISHED && inodes.contains(&r.inode))
        .map(|r| TcpConn {
            local: r.local,
            remote: r.remote,
            accepted: listening.contains(&r.local.port()),
        })
        .collect();
    v.sort_by_key(|c| (c.local, c.remote));
    v.dedup();
    v
}

impl SocketSource for ProcSockets {
    fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>> {
        let proc = self.root.join(pid.to_string());
        let mut inodes = HashSet::new();
        for e in std::fs::read_dir(proc.join("fd"))? {
            let Ok(e) = e else { continue };
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            if let Some(n) = t
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok())
            {
                inodes.insert(n);
            }
        }
        let mut rows = Vec::new();
        for table in ["tcp", "tcp6"] {
            // tcp6 is absent on kernels without IPv6: not an error.
            if let Ok(text) = std::fs::read_to_string(proc.join("net").join(table)) {
                rows.extend(parse_tcp_table(&text));
            }
        }
        Ok(connections_of(&inodes, &rows))
    }
}

/// A socket source fed by the caller: tests and the in-process cluster.
#[derive(Clone, Debug, Default)]
pub struct StaticSockets {
    by_pid: Arc<Mutex<HashMap<u32, Vec<TcpConn>>>>,
}

impl StaticSockets {
    pub fn set(&self, pid: u32, conns: Vec<TcpConn>) {
        self.by_pid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, conns);
    }
}

impl SocketSource for StaticSockets {
    fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>> {
        Ok(self
            .by_pid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
            .cloned()
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:C351 0200007F:1F91 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:C352 0200007F:1F92 01 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 20 4 30 10 -1
   4: garbage
";

    #[test]
    fn parses_the_kernel_table_and_tells_accepted_from_opened() {
        let rows = parse_tcp_table(TCP);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(rows[1].remote, "127.0.0.1:50000".parse().unwrap());
        let mine: HashSet<u64> = [111, 222, 333].into();
        let c = connections_of(&mine, &rows);
        assert_eq!(c.len(), 2, "444 belongs to another process");
        let acc = c.iter().find(|c| c.local.port() == 8080).unwrap();
        assert!(acc.accepted);
        let out = c.iter().find(|c| c.local.port() == 0xC351).unwrap();
        assert!(!out.accepted);
        assert_eq!(out.remote, "127.0.0.2:8081".parse().unwrap());
    }

    #[test]
    fn parses_ipv6_and_maps_v4() {
        // ::ffff:10.0.0.1 as the kernel prints it on little-endian machines.
        let row = "0: 0000000000000000FFFF00000100000A:1F90 00000000000000000000000001000000:0050 01 0:0 0:0 0 0 0 77 1";
        let rows = parse_tcp_table(&format!("header\n{row}\n"));
        if cfg!(target_endian = "little") {
            assert_eq!(rows[0].local, "10.0.0.1:8080".parse().unwrap());
            assert_eq!(rows[0].remote, "[::1]:80".parse().unwrap());
        }
        assert_eq!(rows[0].inode, 77);
    }

    #[test]
    fn own_process_is_readable() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(addr).unwrap();
        let (_s, _) = l.accept().unwrap();
        let conns = ProcSockets::default()
            .connections(std::process::id())
            .unwrap();
        let opened = conns
            .iter()
            .find(|x| x.local == c.local_addr().unwrap())
            .unwrap();
        assert!(!opened.accepted);
        assert!(conns.iter().any(|x| x.local == addr && x.accepted));
    }
}
