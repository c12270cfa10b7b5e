//! Which TCP sockets a training process owns (docs/design.md §5, §11 step 1).
//!
//! A progress file names its writer's pid; the process's open fds that are `socket:[inode]`
//! links, matched against `/proc/<pid>/net/tcp{,6}` (which lists sockets of the process's own
//! network namespace with their 4-tuple and inode), give its connections without any extra
//! crate or privilege beyond reading `/proc/<pid>/fd`. Whether a connection was accepted (the
//! local port is one the process listens on) tells the direction of ring traffic: NCCL's
//! receiver listens and its sender connects, so only connections the process opened carry its
//! outgoing ring data.
//!
//! Reading `/proc/<pid>/net/tcp` walks the namespace's whole socket hash table (and restarts
//! the walk for every page read): with 32 trainers it was 92 % of mlccd's CPU, read once per
//! process per slot. So [`ProcSockets`] remembers what each socket inode of a process resolved
//! to and reads the table only when a process holds an inode it has not looked up yet, at most
//! once per network namespace per slot; inodes that were not an established or listening TCP
//! socket (Unix and UDP sockets, a connect in flight) are looked up again after
//! [`RETRY_SLOTS`], twice that after a lookup that resolved none of them, and so on up to
//! [`RETRY_BACKOFF_MAX`] doublings (a PyTorch rank holds such sockets for its whole run); and
//! a process is kept for [`FORGET_SLOTS`] after it was last asked about, so the learner's
//! scans do not look all its sockets up again. A 4-tuple never changes while its fd stays
//! open, so the cache is exact for the sockets it holds. Only fd numbers not seen before are
//! resolved (`readlink`, then 13 % of mlccd's CPU at 32 trainers, as was `stat` of the
//! namespace at 6 %). The fd list itself
//! (`getdents`, a dentry per fd: 12 % next) is read only when the process's fd count changed:
//! procfs reports it as the size of `<pid>/fd` (Linux ≥ 6.2), one `fstat` of the directory
//! held open; a changed count re-resolves every fd, so reused numbers are seen at once. Every
//! [`RETRY_SLOTS`] (4x that with counts: only a close and an open within one slot hide from
//! them) all of a process's fds and its namespace are resolved again. That one `fstat` per
//! process per slot was still 6 % of mlccd's CPU at 32 trainers, so while the datapath's own
//! socket list stays the same ([`DatapathSockets::Same`]: no socket on mlcc's CC opened or
//! closed) a process's fds are looked at only every [`QUIET_CHECK_SLOTS`].
//!
//! The learner looks at every process on the machine, most of which hold none of the datapath's
//! sockets (on the testbed, the other hosts' processes in their own namespaces, and every
//! short-lived iperf3 client). [`SocketSource::socket_inodes`] gives a process's socket inodes
//! from its fds alone, which the datapath's stats name for each socket, so such a process is
//! passed over without a table read. A socket on mlcc's CC whose inode the datapath has
//! recorded ([`SocketSource::datapath_stats`]) is resolved from that, with no table read
//! either: a table is read for what only it can tell (a listening socket, a socket not on
//! the CC or not yet named by the datapath) and for what nothing resolves (Unix sockets).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::datapath::{SocketInode, SocketKey, SocketStats};

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
    /// The processes there are, to find those with no progress file.
    fn pids(&self) -> std::io::Result<Vec<u32>>;
    /// The inodes of the sockets a process holds (what its fds link to), without resolving
    /// them to connections; `None` where this source cannot tell.
    fn socket_inodes(&self, _pid: u32) -> Option<std::io::Result<HashSet<u64>>> {
        None
    }
    /// How many iterations the process's environment says its job runs
    /// (`MLCC_TOTAL_ITERATIONS`, as a job with a progress file says it in its header), where it
    /// says so and this source can read it.
    fn total_iterations(&self, _pid: u32) -> Option<u64> {
        None
    }
    /// A new slot begins: what was read in the last one may be stale. Processes not asked
    /// about in the slot that ended are forgotten. `datapath` says whether the datapath's own
    /// socket list moved since the last slot.
    fn next_slot(&self, _datapath: DatapathSockets) {}
    /// This slot's datapath stats (after [`SocketSource::next_slot`]; `None`: unreadable): a
    /// process's socket whose inode they name is had without reading its namespace's TCP table.
    fn datapath_stats(&self, _stats: Option<&[(SocketKey, SocketStats)]>) {}
}

/// Socket inode → (local, remote) address, as the datapath's stats name them. Socket inodes
/// are unique across namespaces while the socket lives, and a 4-tuple never changes while its
/// fd stays open, so an entry stands for the row the TCP table would give.
type DatapathInodes = HashMap<u64, (SocketAddr, SocketAddr)>;

/// The inodes the datapath recorded among `stats`, with their sockets' addresses.
fn named_inodes(
    stats: &[(SocketKey, SocketStats)],
) -> impl Iterator<Item = (u64, (SocketAddr, SocketAddr))> {
    stats.iter().filter_map(|(k, s)| match s.inode {
        SocketInode::Is(i) => Some((i, (k.src, k.dst))),
        _ => None,
    })
}

/// What the datapath's socket list did since the last slot. Every socket on mlcc's CC is in
/// it from its first ACK to its release, so where it did not move no process opened or closed
/// a scheduled connection, and a process's fd table need not be looked at every slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatapathSockets {
    /// The same sockets as in the last slot.
    Same,
    /// Sockets came or went, or the datapath could not tell (none, or unreadable).
    Changed,
}

impl DatapathSockets {
    /// The datapath's sockets now against `last`, an order-independent sum of their keys'
    /// hashes with their number, which it updates; `None`: the datapath could not tell.
    pub fn since<'a>(
        last: &mut Option<u64>,
        now: Option<impl ExactSizeIterator<Item = &'a SocketKey>>,
    ) -> Self {
        use std::hash::BuildHasher;
        let hasher = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default();
        let print = now.map(|keys| {
            let n = keys.len() as u64;
            keys.fold(n, |sum, k| sum.wrapping_add(hasher.hash_one(k)))
        });
        let same = print.is_some() && print == *last;
        *last = print;
        if same {
            DatapathSockets::Same
        } else {
            DatapathSockets::Changed
        }
    }
}

/// Slots between looks at a process's fd count while the datapath's sockets stay the same:
/// what only a socket off mlcc's CC changes (one the datapath cannot order anyway) is seen
/// within this many slots (240 ms at τ = 30 ms) rather than at once.
pub const QUIET_CHECK_SLOTS: u64 = 8;

/// Slots before an inode that was not an established or listening TCP socket is looked up
/// again (≈1 s at τ = 60 ms): a connect still in flight is seen soon, while a process's Unix
/// and UDP sockets do not make every slot read the TCP table.
pub const RETRY_SLOTS: u64 = 16;

/// How many times the wait before the next lookup of a process's unresolved inodes doubles
/// when lookups in a row resolve none of them: at most `RETRY_SLOTS << RETRY_BACKOFF_MAX`
/// slots (3.8 s at τ = 30 ms) for a socket connected long after it was made. A new socket
/// inode is looked up at once and starts the doubling over.
pub const RETRY_BACKOFF_MAX: u32 = 3;

/// Slots a process's resolved sockets are kept after it was last asked about (3.8 s at
/// τ = 30 ms). The learner asks about every process on the machine once a scan
/// (`learned::SCAN_SLOTS`), and a process forgotten between two scans had all its sockets
/// looked up again in the TCP table at the next: on `torch-paper-small` that was most of
/// mlccd's table reads.
pub const FORGET_SLOTS: u64 = 128;

/// Reads `/proc` (or another root, for tests).
#[derive(Debug)]
pub struct ProcSockets {
    root: PathBuf,
    cache: Mutex<SocketCache>,
    /// `root` is a procfs, whose `<pid>/fd` reports the number of open fds as its size (Linux
    /// ≥ 6.2; 0 before): one stat tells whether a process's fd table changed, and the listing
    /// (a dentry per fd, the bulk of mlccd's own CPU) is skipped when it did not.
    counts_fds: bool,
}

/// A network namespace as `stat` of `/proc/<pid>/ns/net` names it (device, inode); a process
/// whose namespace cannot be told gets a table of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum NetNs {
    Id(u64, u64),
    OfPid(u32),
}

#[derive(Debug, Default)]
struct SocketCache {
    slot: u64,
    /// The datapath's sockets are the same as in the last slot.
    quiet: bool,
    /// TCP tables read this slot, by namespace: inode → row.
    tables: HashMap<NetNs, HashMap<u64, TcpRow>>,
    /// The sockets the datapath names, as of this slot.
    datapath: DatapathInodes,
    procs: HashMap<u32, ProcEntry>,
    /// Table reads so far (tests check the cache saves them).
    table_reads: u64,
    /// fd directory listings so far (tests check the fd count saves them).
    fd_listings: u64,
    /// Looks at a process's fd table (its count, or the listing itself) so far.
    fd_looks: u64,
}

impl SocketCache {
    /// Last slot's answer for `pid`, where the datapath's sockets have not moved, the process
    /// was looked at less than [`QUIET_CHECK_SLOTS`] ago and no relisting or lookup is due.
    fn quiet_answer(&mut self, pid: u32) -> Option<Vec<TcpConn>> {
        let slot = self.slot;
        let e = self.procs.get_mut(&pid)?;
        let due = slot >= e.relink_at
            || slot >= e.looked_at + QUIET_CHECK_SLOTS
            || (slot >= e.retry_at && e.inodes.values().any(Option::is_none));
        if !self.quiet || due {
            return None;
        }
        e.last_asked = slot;
        e.answer.clone()
    }
}

#[derive(Debug)]
struct ProcEntry {
    ns: NetNs,
    /// Fd number → the socket inode it linked to (`None`: not a socket) when last resolved.
    fds: HashMap<u64, Option<u64>>,
    /// The slot from which every fd and the namespace are resolved again.
    relink_at: u64,
    /// `<pid>/fd`'s size when `fds` was listed (0: unknown).
    fd_count: u64,
    /// `<pid>/fd` held open: fstat(2) on it gives the count without walking the path.
    fd_dir: Option<std::fs::File>,
    /// Socket inode → its established or listening row, or `None` (not one, when looked up).
    inodes: HashMap<u64, Option<TcpRow>>,
    /// The slot from which `None` inodes are looked up again.
    retry_at: u64,
    /// Lookups in a row that resolved none of its `None` inodes (each doubles the wait before
    /// the next, up to [`RETRY_BACKOFF_MAX`]).
    misses: u32,
    /// What the last call answered; reused while nothing it was built from changed.
    answer: Option<Vec<TcpConn>>,
    last_asked: u64,
    /// The slot the fd table was last looked at.
    looked_at: u64,
}

impl ProcEntry {
    fn new(ns: NetNs, slot: u64) -> Self {
        ProcEntry {
            ns,
            fds: HashMap::new(),
            relink_at: 0,
            fd_count: 0,
            fd_dir: None,
            inodes: HashMap::new(),
            retry_at: 0,
            misses: 0,
            answer: None,
            last_asked: slot,
            looked_at: slot,
        }
    }
}

impl Default for ProcSockets {
    fn default() -> Self {
        Self::with_root("/proc")
    }
}

impl ProcSockets {
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        ProcSockets {
            counts_fds: is_procfs(&root),
            root,
            cache: Mutex::default(),
        }
    }

    /// Slots between full relistings of a process's fds (and its namespace). With fd counts
    /// only a close and an open within one slot go unnoticed until then, so it can be longer.
    fn relink_slots(&self) -> u64 {
        if self.counts_fds {
            4 * RETRY_SLOTS
        } else {
            RETRY_SLOTS
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, SocketCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times a process's fd directory was listed.
    pub fn fd_listings(&self) -> u64 {
        self.cache().fd_listings
    }

    /// How many times a TCP table was read.
    pub fn table_reads(&self) -> u64 {
        self.cache().table_reads
    }

    /// How many times a process's fd table was looked at.
    pub fn fd_looks(&self) -> u64 {
        self.cache().fd_looks
    }

    /// The fd numbers of a process (one directory listing, no per-fd syscall).
    fn fd_numbers(proc: &std::path::Path) -> std::io::Result<Vec<u64>> {
        Ok(std::fs::read_dir(proc.join("fd"))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    }

    /// The socket inode an fd links to, `None` if it is something else (or already closed).
    fn fd_socket(proc: &std::path::Path, fd: u64) -> Option<u64> {
        let target = std::fs::read_link(proc.join("fd").join(fd.to_string())).ok()?;
        target
            .to_str()?
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    }

    fn read_table(proc: &std::path::Path) -> HashMap<u64, TcpRow> {
        let mut rows = HashMap::new();
        for table in ["tcp", "tcp6"] {
            // tcp6 is absent on kernels without IPv6: not an error.
            if let Ok(text) = std::fs::read_to_string(proc.join("net").join(table)) {
                for r in parse_tcp_table(&text) {
                    if r.inode != 0 && matches!(r.state, TCP_ESTABLISHED | TCP_LISTEN) {
                        rows.insert(r.inode, r);
                    }
                }
            }
        }
        rows
    }
}

impl ProcSockets {
    /// Brings `pid`'s entry up to date with its fd table: its fd count, its fds listed where
    /// the count moved (or no count is had), its namespace and every fd again at a relisting.
    /// Returns whether the fds may have changed (listed or relinked).
    fn look_at_fds(&self, c: &mut SocketCache, pid: u32) -> std::io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let proc = self.root.join(pid.to_string());
        c.fd_looks += 1;
        let slot = c.slot;
        let relink = c.procs.get(&pid).is_none_or(|e| slot >= e.relink_at);
        // The fd count, read before the listing: an fd opened after it changes the count seen
        // next slot. The directory handle is reopened at each relisting (a reused pid).
        let new_dir = (self.counts_fds && relink)
            .then(|| std::fs::File::open(proc.join("fd")).ok())
            .flatten();
        let count = new_dir
            .as_ref()
            .or_else(|| c.procs.get(&pid).and_then(|e| e.fd_dir.as_ref()))
            .and_then(|f| f.metadata().ok())
            .map(|m| m.len())
            .filter(|&n| n > 0);
        // Same number of fds as when last listed: the same fds, but for a close and an open in
        // one slot, which the full relisting every RETRY_SLOTS catches.
        let unchanged =
            !relink && count.is_some_and(|n| c.procs.get(&pid).is_some_and(|e| e.fd_count == n));
        let fds = if unchanged {
            None
        } else {
            c.fd_listings += 1;
            Some(Self::fd_numbers(&proc)?)
        };
        let ns = match c.procs.get(&pid) {
            Some(e) if !relink => e.ns,
            _ => std::fs::metadata(proc.join("ns").join("net"))
                .map_or(NetNs::OfPid(pid), |m| NetNs::Id(m.dev(), m.ino())),
        };
        let e = c
            .procs
            .entry(pid)
            .or_insert_with(|| ProcEntry::new(ns, slot));
        e.last_asked = slot;
        e.looked_at = slot;
        if e.ns != ns {
            // Moved to another namespace (or a reused pid): nothing cached holds.
            e.ns = ns;
            e.inodes.clear();
            e.answer = None;
        }
        if relink {
            e.fds.clear();
            e.relink_at = slot + self.relink_slots();
            e.fd_dir = new_dir;
        }
        let changed = relink || fds.is_some();
        if let Some(fds) = fds {
            let open: HashSet<u64> = fds.iter().copied().collect();
            e.fds.retain(|fd, _| open.contains(fd));
            // With counts, a listing means the fd table changed: every fd is looked at again,
            // since a number may now stand for another file (a closed socket's number reused,
            // a new socket on a file's). Without counts the listing runs every slot and only
            // new numbers are looked at; a reused one waits for the relisting.
            if self.counts_fds {
                e.fds.clear();
            }
            for fd in fds {
                e.fds
                    .entry(fd)
                    .or_insert_with(|| Self::fd_socket(&proc, fd));
            }
            e.fd_count = count.unwrap_or(0);
        }
        Ok(changed)
    }

    /// `pid`'s connections from its socket inodes, the new ones (and, when due, the
    /// unresolved ones) taken from the datapath's sockets where it names them, else looked up
    /// in the namespace's TCP table, read at most once a slot.
    fn resolve_inodes(&self, c: &mut SocketCache, pid: u32) -> Vec<TcpConn> {
        let slot = c.slot;
        let e = c.procs.get_mut(&pid).expect("looked at just now");
        let inodes: HashSet<u64> = e.fds.values().flatten().copied().collect();
        e.inodes.retain(|i, _| inodes.contains(i));
        for i in &inodes {
            if let Some(&(local, remote)) = c.datapath.get(i)
                && e.inodes.get(i).is_none_or(Option::is_none)
            {
                let row = TcpRow {
                    local,
                    remote,
                    state: TCP_ESTABLISHED,
                    inode: *i,
                };
                e.inodes.insert(*i, Some(row));
            }
        }
        let unseen = inodes.iter().any(|i| !e.inodes.contains_key(i));
        let retry = slot >= e.retry_at && e.inodes.values().any(Option::is_none);
        if unseen || retry {
            let ns = e.ns;
            if !c.tables.contains_key(&ns) {
                tracing::debug!(
                    target: "mlcc_sockets",
                    pid,
                    unseen = inodes.iter().filter(|i| !e.inodes.contains_key(i)).count(),
                    unresolved = e.inodes.values().filter(|r| r.is_none()).count(),
                    "TCP table read"
                );
                c.table_reads += 1;
                c.tables
                    .insert(ns, Self::read_table(&self.root.join(pid.to_string())));
            }
            let table = &c.tables[&ns];
            let mut resolved = false;
            for i in &inodes {
                let row = table.get(i).copied();
                resolved |= row.is_some() && e.inodes.get(i) == Some(&None);
                e.inodes.insert(*i, row);
            }
            e.misses = if unseen || resolved {
                0
            } else {
                (e.misses + 1).min(RETRY_BACKOFF_MAX)
            };
            e.retry_at = slot + (RETRY_SLOTS << e.misses);
        }
        let rows: Vec<TcpRow> = e.inodes.values().flatten().copied().collect();
        let answer = connections_of(&inodes, &rows);
        e.answer = Some(answer.clone());
        answer
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

/// Whether `path` is on a procfs (statfs magic), whose fd directories report their fd count.
fn is_procfs(path: &std::path::Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|st| st.f_type == rustix::fs::PROC_SUPER_MAGIC)
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
    fn pids(&self) -> std::io::Result<Vec<u32>> {
        Ok(std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    }

    fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>> {
        let mut guard = self.cache();
        let c = &mut *guard;
        if let Some(a) = c.quiet_answer(pid) {
            return Ok(a);
        }
        let changed = self.look_at_fds(c, pid)?;
        let slot = c.slot;
        let e = c.procs.get_mut(&pid).expect("looked at just now");
        // An unresolved inode is looked up again when its wait is over or the datapath names it.
        let lookup_due = e
            .inodes
            .iter()
            .any(|(i, r)| r.is_none() && (slot >= e.retry_at || c.datapath.contains_key(i)));
        // Same fds and no lookup due: last slot's answer holds.
        if !changed
            && !lookup_due
            && let Some(a) = &e.answer
        {
            return Ok(a.clone());
        }
        Ok(self.resolve_inodes(c, pid))
    }

    fn socket_inodes(&self, pid: u32) -> Option<std::io::Result<HashSet<u64>>> {
        let mut guard = self.cache();
        let c = &mut *guard;
        Some(
            self.look_at_fds(c, pid)
                .map(|_| c.procs[&pid].fds.values().flatten().copied().collect()),
        )
    }

    fn total_iterations(&self, pid: u32) -> Option<u64> {
        let environ = std::fs::read(self.root.join(pid.to_string()).join("environ")).ok()?;
        total_iterations_in(&environ)
    }

    fn next_slot(&self, datapath: DatapathSockets) {
        let mut c = self.cache();
        let ended = c.slot;
        c.slot += 1;
        c.quiet = datapath == DatapathSockets::Same;
        c.tables.clear();
        c.procs.retain(|_, e| e.last_asked + FORGET_SLOTS > ended);
    }

    fn datapath_stats(&self, stats: Option<&[(SocketKey, SocketStats)]>) {
        let mut c = self.cache();
        let stats = stats.unwrap_or_default();
        // The same sockets as last slot and as many named: the same map, as a socket's inode
        // never changes once named. Rebuilt only when a socket came, went or was named.
        if c.quiet && named_inodes(stats).count() == c.datapath.len() {
            return;
        }
        c.datapath = named_inodes(stats).collect();
    }
}

/// The variable a job's launcher sets to say how many iterations it runs.
const TOTAL_ITERATIONS_VAR: &[u8] = b"MLCC_TOTAL_ITERATIONS=";

/// `MLCC_TOTAL_ITERATIONS` in a process's environment as `/proc/<pid>/environ` holds it
/// (`NAME=value` entries, each ended by a NUL), if set to a whole number above 0. Nothing else
/// of the environment is kept.
pub fn total_iterations_in(environ: &[u8]) -> Option<u64> {
    environ
        .split(|&b| b == 0)
        .find_map(|e| e.strip_prefix(TOTAL_ITERATIONS_VAR))
        .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
        .filter(|&n| n > 0)
}

/// A socket source fed by the caller: tests and the in-process cluster.
#[derive(Clone, Debug, Default)]
pub struct StaticSockets {
    by_pid: Arc<Mutex<HashMap<u32, Vec<TcpConn>>>>,
    told: Arc<Mutex<HashMap<u32, u64>>>,
}

impl StaticSockets {
    pub fn set(&self, pid: u32, conns: Vec<TcpConn>) {
        self.by_pid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, conns);
    }

    /// Process `pid`'s environment says its job runs `n` iterations.
    pub fn tell_total_iterations(&self, pid: u32, n: u64) {
        self.told
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid, n);
    }
}

impl SocketSource for StaticSockets {
    fn pids(&self) -> std::io::Result<Vec<u32>> {
        let by_pid = self.by_pid.lock().unwrap_or_else(|e| e.into_inner());
        Ok(by_pid.keys().copied().collect())
    }

    fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>> {
        Ok(self
            .by_pid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pid)
            .cloned()
            .unwrap_or_default())
    }

    fn total_iterations(&self, pid: u32) -> Option<u64> {
        let told = self.told.lock().unwrap_or_else(|e| e.into_inner());
        told.get(&pid).copied()
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
    fn the_total_iterations_are_read_from_the_environment_and_nothing_malformed_is_taken() {
        let env = |entries: &[&[u8]]| {
            entries
                .join(&b'\0')
                .into_iter()
                .chain([0])
                .collect::<Vec<u8>>()
        };
        assert_eq!(
            total_iterations_in(&env(&[b"PATH=/bin", b"MLCC_TOTAL_ITERATIONS=5000", b"X=1"])),
            Some(5000)
        );
        assert_eq!(total_iterations_in(&env(&[b"PATH=/bin"])), None);
        assert_eq!(total_iterations_in(b""), None);
        for bad in [
            &b"MLCC_TOTAL_ITERATIONS=0"[..],
            b"MLCC_TOTAL_ITERATIONS=-3",
            b"MLCC_TOTAL_ITERATIONS=many",
            b"MLCC_TOTAL_ITERATIONS=",
            b"MLCC_TOTAL_ITERATIONS=\xff\xfe",
            b"MLCC_TOTAL_ITERATIONS=99999999999999999999999",
            b"MLCC_TOTAL_ITERATIONS_OLD=12",
            b"XMLCC_TOTAL_ITERATIONS=12",
        ] {
            assert_eq!(total_iterations_in(&env(&[bad])), None, "{bad:?}");
        }
        // A torn read (the last entry cut short) still yields the whole entries before it.
        assert_eq!(
            total_iterations_in(b"MLCC_TOTAL_ITERATIONS=12\0PAT"),
            Some(12)
        );
    }

    #[test]
    fn a_process_environment_says_its_total_iterations() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("MLCC_TOTAL_ITERATIONS", "777")
            .spawn()
            .expect("spawn sleep");
        let quiet = std::process::Command::new("sleep")
            .arg("30")
            .env_remove("MLCC_TOTAL_ITERATIONS")
            .spawn();
        // spawn returns once the child's exec has begun, before the kernel has set where the
        // new environment lies: until then /proc/<pid>/environ reads empty.
        let exec_done = |pid: u32| {
            let path = format!("/proc/{pid}/environ");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::fs::read(&path).is_ok_and(|e| e.is_empty())
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        exec_done(child.id());
        if let Ok(q) = &quiet {
            exec_done(q.id());
        }
        let proc = ProcSockets::default();
        let told = proc.total_iterations(child.id());
        let untold = quiet.as_ref().ok().map(|q| proc.total_iterations(q.id()));
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(mut q) = quiet {
            let _ = q.kill();
            let _ = q.wait();
        }
        assert_eq!(told, Some(777));
        assert_eq!(untold, Some(None));
        // A process that is gone says nothing.
        assert_eq!(proc.total_iterations(u32::MAX), None);
    }

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

    /// The tests that open sockets in this process: each reads the whole process's table, so
    /// one's sockets would show up in (and trigger table reads for) the other.
    static OWN_SOCKETS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn own_process_is_readable() {
        let _one_at_a_time = OWN_SOCKETS.lock().unwrap_or_else(|e| e.into_inner());
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

    /// A process with no sockets, past its exec (which closes the fds it inherited).
    fn sleeping_child() -> std::process::Child {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        child
    }

    #[test]
    fn an_unchanged_fd_count_skips_the_listing_on_procfs() {
        let mut child = sleeping_child();
        let src = ProcSockets::default();
        let pid = child.id();
        let mut listings = Vec::new();
        let period = src.relink_slots();
        for _ in 0..period + 2 {
            assert!(src.connections(pid).unwrap().is_empty());
            listings.push(src.fd_listings());
            src.next_slot(DatapathSockets::Changed);
        }
        let _ = child.kill();
        let _ = child.wait();
        let counted = std::fs::metadata("/proc/self/fd").is_ok_and(|m| m.len() > 0);
        if src.counts_fds && counted {
            // Listed in the first slot and again at the full relisting `period` slots later.
            assert_eq!(listings.last(), Some(&2), "{listings:?}");
        } else {
            println!("this kernel does not report fd counts (< 6.2): the listing runs every slot");
            assert_eq!(listings.last(), Some(&(period + 2)));
        }
    }

    #[test]
    fn the_datapath_sockets_are_the_same_in_any_order_and_changed_otherwise() {
        let key = |port| {
            SocketKey::new(
                7,
                SocketAddr::from(([10, 0, 0, 1], port)),
                "10.0.0.2:80".parse().unwrap(),
            )
        };
        let (a, b, c) = (key(5000), key(5001), key(5002));
        let mut last = None;
        let mut since =
            |keys: Option<&[SocketKey]>| DatapathSockets::since(&mut last, keys.map(|k| k.iter()));
        assert_eq!(
            since(Some(&[a, b])),
            DatapathSockets::Changed,
            "nothing to compare with"
        );
        assert_eq!(since(Some(&[b, a])), DatapathSockets::Same);
        assert_eq!(
            since(Some(&[a, c])),
            DatapathSockets::Changed,
            "one went, one came"
        );
        assert_eq!(since(Some(&[a, c, c])), DatapathSockets::Changed);
        assert_eq!(since(None), DatapathSockets::Changed, "unreadable");
        assert_eq!(
            since(Some(&[a, c])),
            DatapathSockets::Changed,
            "readable again"
        );
        assert_eq!(since(Some(&[])), DatapathSockets::Changed);
        assert_eq!(since(Some(&[])), DatapathSockets::Same);
    }

    #[test]
    fn while_the_datapath_sockets_stay_the_same_fd_tables_are_looked_at_every_few_slots() {
        let mut child = sleeping_child();
        let src = ProcSockets::default();
        let pid = child.id();
        let looks = |datapath, slots| {
            let before = src.fd_looks();
            for _ in 0..slots {
                src.next_slot(datapath);
                assert!(src.connections(pid).unwrap().is_empty());
            }
            src.fd_looks() - before
        };
        assert_eq!(
            looks(DatapathSockets::Changed, 1),
            1,
            "a new process is looked at"
        );
        // Sockets came or went: every slot; the same sockets: once per QUIET_CHECK_SLOTS.
        assert_eq!(looks(DatapathSockets::Changed, 5), 5);
        assert_eq!(looks(DatapathSockets::Same, 3 * QUIET_CHECK_SLOTS), 3);
        assert_eq!(
            looks(DatapathSockets::Changed, 1),
            1,
            "a change is looked at at once"
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_connection_opened_while_the_datapath_looks_the_same_is_seen_within_the_quiet_period() {
        use std::io::Write;
        // The listener and the accepted end are this process's sockets.
        let _one_at_a_time = OWN_SOCKETS.lock().unwrap_or_else(|e| e.into_inner());
        let src = ProcSockets::default();
        if !src.counts_fds {
            println!("this kernel does not report fd counts (< 6.2): fds are listed every slot");
            return;
        }
        // A child connects when told to: this test process's own fd table would not do, as the
        // tests running beside it open and close fds, and a close with the connect in one slot
        // keeps the count the same (the relisting catches that, later than this test waits).
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "read _; exec 3<>/dev/tcp/{}/{}; sleep 30",
                addr.ip(),
                addr.port()
            ))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let pid = child.id();
        src.next_slot(DatapathSockets::Changed);
        assert!(src.connections(pid).unwrap().is_empty());
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        let (_c, _) = l.accept().unwrap();
        let mut slots = 0;
        while slots <= QUIET_CHECK_SLOTS {
            src.next_slot(DatapathSockets::Same);
            slots += 1;
            let now = src.connections(pid).unwrap();
            if now.iter().any(|x| x.remote == addr) {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            slots <= QUIET_CHECK_SLOTS,
            "not seen in {slots} quiet slots"
        );
    }

    /// A Python child running `script`, told what to do on its stdin, once it printed "ready".
    fn python_child(
        script: &str,
    ) -> (
        std::process::Child,
        std::io::BufReader<std::process::ChildStdout>,
    ) {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        (child, out)
    }

    #[test]
    fn sockets_that_are_no_tcp_connection_are_looked_up_less_and_less_often() {
        use std::io::{BufRead, Write};
        let _one_at_a_time = OWN_SOCKETS.lock().unwrap_or_else(|e| e.into_inner());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // A child holding a Unix socket pair for good and a TCP socket it made but connects
        // only when told to (neither is in the TCP table until then), as a PyTorch rank holds
        // sockets that are no TCP connection for its whole run.
        let script = format!(
            "import socket, sys, time\n\
             a, b = socket.socketpair()\n\
             t = socket.socket()\n\
             print('ready', flush=True)\n\
             sys.stdin.readline()\n\
             t.connect(('{}', {}))\n\
             print('connected', flush=True)\n\
             time.sleep(60)\n",
            addr.ip(),
            addr.port()
        );
        let (mut child, mut out) = python_child(&script);
        let mut line = String::new();
        let pid = child.id();
        let src = ProcSockets::default();
        let reads_over = |slots: u64| {
            let before = src.table_reads();
            for _ in 0..slots {
                src.next_slot(DatapathSockets::Changed);
                assert!(src.connections(pid).unwrap().is_empty());
            }
            src.table_reads() - before
        };
        assert_eq!(reads_over(1), 1, "new socket inodes are looked up at once");
        // Then after 16, 32, 64 and 128 slots: four reads where a fixed period reads 15.
        let doublings: Vec<u64> = (0..=RETRY_BACKOFF_MAX).map(|k| RETRY_SLOTS << k).collect();
        let horizon: u64 = doublings.iter().sum();
        assert_eq!(reads_over(horizon), doublings.len() as u64);
        assert_eq!(
            reads_over(RETRY_SLOTS << RETRY_BACKOFF_MAX),
            1,
            "no more than doubled"
        );
        // A socket connected long after it was made is still found, within the longest wait.
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "connected");
        let mut slots = 0;
        while slots <= RETRY_SLOTS << RETRY_BACKOFF_MAX {
            src.next_slot(DatapathSockets::Changed);
            slots += 1;
            if src
                .connections(pid)
                .unwrap()
                .iter()
                .any(|c| c.remote == addr)
            {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            slots <= RETRY_SLOTS << RETRY_BACKOFF_MAX,
            "not found in {slots} slots"
        );
    }

    #[test]
    fn a_process_s_socket_inodes_are_had_without_reading_the_table() {
        use std::os::fd::AsRawFd;
        let _one_at_a_time = OWN_SOCKETS.lock().unwrap_or_else(|e| e.into_inner());
        let src = ProcSockets::default();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let inode = |fd: i32| ProcSockets::fd_socket(std::path::Path::new("/proc/self"), fd as u64);
        let held = src
            .socket_inodes(std::process::id())
            .expect("procfs tells")
            .unwrap();
        for fd in [l.as_raw_fd(), a.as_raw_fd()] {
            let i = inode(fd).expect("a socket");
            assert!(held.contains(&i), "inode {i} of fd {fd} not in {held:?}");
        }
        assert_eq!(src.table_reads(), 0);
        // Resolving them to connections reads the table, once.
        let conns = src.connections(std::process::id()).unwrap();
        assert!(conns.iter().any(|c| c.local == a.local_addr().unwrap()));
        assert_eq!(src.table_reads(), 1);
        assert!(StaticSockets::default().socket_inodes(1).is_none());
    }

    #[test]
    fn a_socket_the_datapath_names_is_resolved_without_reading_the_table() {
        use std::io::{BufRead, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // A child that connects when told to, twice, and says each socket's inode and address.
        let script = format!(
            "import os, socket, sys\n\
             held = []\n\
             print('ready', flush=True)\n\
             for _ in range(2):\n\
             \x20   sys.stdin.readline()\n\
             \x20   t = socket.create_connection(('{}', {}))\n\
             \x20   held.append(t)\n\
             \x20   print(os.fstat(t.fileno()).st_ino, t.getsockname()[1], flush=True)\n\
             sys.stdin.readline()\n",
            addr.ip(),
            addr.port()
        );
        let (mut child, mut out) = python_child(&script);
        let mut line = String::new();
        let pid = child.id();
        let mut accepted = Vec::new();
        let mut connect = || {
            writeln!(child.stdin.as_mut().unwrap()).unwrap();
            accepted.push(l.accept().unwrap().0);
            line.clear();
            out.read_line(&mut line).unwrap();
            let mut f = line.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            let (inode, port) = (f.next().unwrap(), f.next().unwrap());
            (inode, SocketAddr::from(([127, 0, 0, 1], port as u16)))
        };
        let src = ProcSockets::default();
        let slot = |named: &[(SocketKey, SocketStats)]| {
            src.next_slot(DatapathSockets::Changed);
            src.datapath_stats(Some(named));
            src.connections(pid).unwrap()
        };
        // Not named by the datapath: the table is read for it.
        let (first, first_local) = connect();
        let conns = slot(&[]);
        assert!(
            conns
                .iter()
                .any(|c| c.local == first_local && c.remote == addr)
        );
        assert_eq!(src.table_reads(), 1);
        // Named by the datapath: had from that, as the table gives it.
        let (second, second_local) = connect();
        let conns = slot(&[
            datapath_socket(first_local, addr, SocketInode::Is(first)),
            datapath_socket(second_local, addr, SocketInode::Is(second)),
        ]);
        assert_eq!(src.table_reads(), 1, "no table read");
        let second_conn = TcpConn {
            local: second_local,
            remote: addr,
            accepted: false,
        };
        assert!(conns.contains(&second_conn), "{conns:?}");
        assert_eq!(conns.len(), 2, "{conns:?}");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// A socket on the datapath from `local` to `remote`, its inode as `inode` says.
    fn datapath_socket(
        local: SocketAddr,
        remote: SocketAddr,
        inode: SocketInode,
    ) -> (SocketKey, SocketStats) {
        let stats = SocketStats {
            inode,
            ..SocketStats::default()
        };
        (SocketKey::new(1, local, remote), stats)
    }

    #[test]
    fn the_datapath_s_names_are_taken_again_when_a_socket_comes_goes_or_is_named() {
        let src = ProcSockets::default();
        let peer: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let a = |inode| datapath_socket("10.0.0.1:5000".parse().unwrap(), peer, inode);
        let b = datapath_socket("10.0.0.1:5001".parse().unwrap(), peer, SocketInode::Is(9));
        let named = |datapath, stats: &[(SocketKey, SocketStats)]| {
            src.next_slot(datapath);
            src.datapath_stats(Some(stats));
            let mut v: Vec<u64> = src.cache().datapath.keys().copied().collect();
            v.sort();
            v
        };
        assert!(named(DatapathSockets::Changed, &[a(SocketInode::NotYet)]).is_empty());
        // Named later, the socket list the same.
        assert_eq!(named(DatapathSockets::Same, &[a(SocketInode::Is(7))]), [7]);
        assert_eq!(named(DatapathSockets::Same, &[a(SocketInode::Is(7))]), [7]);
        assert_eq!(
            named(DatapathSockets::Changed, &[b]),
            [9],
            "one went, one came"
        );
        src.next_slot(DatapathSockets::Changed);
        src.datapath_stats(None);
        assert!(src.cache().datapath.is_empty(), "unreadable: nothing named");
    }

    #[test]
    fn the_table_is_read_only_for_sockets_not_looked_up_yet() {
        let _one_at_a_time = OWN_SOCKETS.lock().unwrap_or_else(|e| e.into_inner());
        let src = ProcSockets::default();
        let me = std::process::id();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let a = std::net::TcpStream::connect(addr).unwrap();
        let (_a2, _) = l.accept().unwrap();
        let first = src.connections(me).unwrap();
        assert!(first.iter().any(|c| c.local == a.local_addr().unwrap()));
        let reads = src.table_reads();
        assert!(reads >= 1);
        // Same slot, other processes of the namespace would share the read; same fds next
        // slot: served from the cache.
        src.next_slot(DatapathSockets::Changed);
        assert_eq!(src.connections(me).unwrap(), first);
        assert_eq!(src.table_reads(), reads, "no new socket, no table read");
        // A new connection is seen in the next slot if its fd number is new, and within
        // RETRY_SLOTS if it reuses one resolved before as something else (here it usually
        // takes the number the fd listing itself used, and other tests open files meanwhile).
        let b = std::net::TcpStream::connect(addr).unwrap();
        let (_b2, _) = l.accept().unwrap();
        let mut slots = 0;
        let second = loop {
            src.next_slot(DatapathSockets::Changed);
            slots += 1;
            let now = src.connections(me).unwrap();
            if now.iter().any(|c| c.local == b.local_addr().unwrap()) || slots > RETRY_SLOTS {
                break now;
            }
        };
        assert!(
            second.iter().any(|c| c.local == b.local_addr().unwrap()),
            "not seen in {slots} slots"
        );
        assert!(src.table_reads() > reads);
        // A closed one is gone without a table read: in the next slot if its fd left the list,
        // within RETRY_SLOTS if the number was reused meanwhile (here by the fd listing).
        let reads = src.table_reads();
        let gone = a.local_addr().unwrap();
        drop(a);
        let mut slots = 0;
        let third = loop {
            src.next_slot(DatapathSockets::Changed);
            slots += 1;
            let now = src.connections(me).unwrap();
            if !now.iter().any(|c| c.local == gone) || slots > RETRY_SLOTS {
                break now;
            }
        };
        assert!(
            !third.iter().any(|c| c.local == gone),
            "still there after {slots} slots"
        );
        assert_eq!(src.table_reads(), reads);
        // A process not asked about for FORGET_SLOTS is forgotten, not before.
        for _ in 0..FORGET_SLOTS {
            src.next_slot(DatapathSockets::Changed);
        }
        assert!(src.cache().procs.contains_key(&me));
        src.next_slot(DatapathSockets::Changed);
        assert!(src.cache().procs.is_empty());
    }
}
