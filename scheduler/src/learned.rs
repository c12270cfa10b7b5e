//! Processes on the CC with no progress file: core's [`Learner`] reads their iterations from
//! their sockets' bytes, and a confident estimate stands in for the progress file they lack
//! (docs/design.md §9, "No progress file"). This module only says where the bytes come from:
//! which process owns which of the datapath's sockets, and what a progress file would have
//! held. Whether the traffic is periodic, and what it moves per iteration, is core's.
//!
//! A learned process starts as a job of its own (`learned-<host>-<pid>`, an all-reduce of world
//! size unknown) and takes the name of its peers' job as their reports reach it: each report of
//! a learned flow names its sockets, and the process at this end of one goes by the least label
//! it hears (core's [`identity`] rule). Once its ranks agree, the job's flows follow one another
//! in Alg. 2 across hosts as a job with progress files does. A progress file, when one appears
//! for the process, wins.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use mlcc_core::Slot;
use mlcc_core::job::{Arch, Role};
use mlcc_core::learn::identity::{Identity, Label};
use mlcc_core::learn::{Learned, Learner, LearnerConfig, Reading, Unlearned};

use crate::datapath::{SocketInode, SocketKey, SocketStats, canonical};
use crate::host::{HeardLabel, ProcessObs};
use crate::progress::{ProgressHeader, ProgressSnapshot};
use crate::sockets::{SocketSource, TcpConn};

/// Slots between looks for new processes (≈1 s at τ = 30 ms): a job's first iterations are
/// learned from its counters whenever it is found, so finding it late costs nothing but slots.
pub const SCAN_SLOTS: u64 = 32;

// The socket source keeps what it resolved of a process between two scans.
const _: () = assert!(crate::sockets::FORGET_SLOTS > 2 * SCAN_SLOTS);

/// The fewest slots between two scans a new socket brings forward (≈120 ms). A learner
/// counts from the bytes acked when its process is found: found as it connects, a job shows
/// its learner its first iteration whole, where a scan up to [`SCAN_SLOTS`] late found it
/// mid-way through its first or second. A host opening many connections at once walks its
/// processes a few times, not once a slot.
pub const NEW_SOCKET_SCAN_SLOTS: u64 = 4;

/// Scans between two looks at a process that owned none of the sockets sought (≈16 s): a
/// host's other processes are not walked every second, while one that connects late is still
/// found.
pub const RECHECK_SCANS: u64 = 16;

/// The learned processes of one host.
pub struct LearnedProcesses {
    cfg: LearnerConfig,
    /// Read how many iterations a process's job runs from its environment
    /// (`MLCC_TOTAL_ITERATIONS`) when it is found.
    read_environ: bool,
    host: String,
    tau_ns: u64,
    next_scan: u64,
    /// The first slot a new socket may bring the next scan forward to.
    soonest_scan: u64,
    /// This host's datapath sockets at the last scan: one not among them is new.
    scanned: HashSet<(SocketAddr, SocketAddr)>,
    scans: u64,
    procs: BTreeMap<u32, Tracked>,
    /// Processes looked at that owned none of the sockets sought, and the scan they were.
    passed: HashMap<u32, u64>,
    /// The sockets sought at the last scan, with their inodes as then known: a socket not
    /// among them may belong to a process passed over before it connected, and an inode newly
    /// known (an accepted connection's, at its first ACK after the accept) to one passed over
    /// on its inodes, so every process is looked at again.
    sought: HashSet<((SocketAddr, SocketAddr), SocketInode)>,
}

struct Tracked {
    learner: Learner,
    conns: Vec<TcpConn>,
    /// The process's job and iteration count as its peers' reports settle them (what was
    /// heard over a connection is kept while the connection is open).
    identity: Identity<(SocketAddr, SocketAddr)>,
    /// Each socket's `bytes_acked` when last read, and the bytes acked over all of them since
    /// the process was found (a socket closing takes nothing back).
    acked: HashMap<SocketKey, u64>,
    total: u64,
    /// The iterations its environment says its job runs, as a progress file's header would: the
    /// rank rules then order it by the bytes it has left.
    total_iterations: Option<u64>,
}

/// What a learned process looks like to an operator (`mlccctl jobs`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LearnedStatus {
    pub pid: u32,
    pub job_id: String,
    /// `None` while below the confidence bar: the process is left to the kernel's CC.
    pub confidence: Option<f64>,
    pub period_ms: Option<f64>,
    pub bytes_per_iteration: Option<f64>,
    pub iteration: Option<u64>,
    /// Which reading of its traffic stands: `period` or `pauses` ([`Reading`]).
    pub reading: Option<Reading>,
    /// Below the bar, why the bytes per slot give no estimate ([`Unlearned::as_str`]).
    pub unlearned: Option<&'static str>,
    /// The iterations its environment says its job runs (`MLCC_TOTAL_ITERATIONS`), if it does.
    pub total_iterations: Option<u64>,
}

impl LearnedStatus {
    /// Where its job's figures come from, as `mlccctl jobs` shows it: the reading that stands
    /// and its confidence, or `learning` below the bar, where the process is the kernel CC's
    /// (said rather than hidden), with why (`learning:no-period`).
    pub fn source(&self) -> String {
        match (self.reading, self.confidence, self.unlearned) {
            (Some(r), Some(c), _) => format!("learned:{}:{c:.2}", r.as_str()),
            (_, _, Some(why)) => format!("learning:{why}"),
            _ => "learning".into(),
        }
    }
}

impl LearnedProcesses {
    pub fn new(cfg: LearnerConfig, host: &str, tau_ns: u64) -> Self {
        Self {
            cfg,
            read_environ: true,
            host: host.to_string(),
            tau_ns: tau_ns.max(1),
            next_scan: 0,
            soonest_scan: 0,
            scanned: HashSet::new(),
            scans: 0,
            procs: BTreeMap::new(),
            passed: HashMap::new(),
            sought: HashSet::new(),
        }
    }

    /// Whether a process's environment is read for how many iterations its job runs
    /// (`MLCC_TOTAL_ITERATIONS`; on unless turned off).
    pub fn reading_environ(self, on: bool) -> Self {
        Self {
            read_environ: on,
            ..self
        }
    }

    /// One slot: finds processes owning datapath sockets no progress file accounts for, feeds
    /// each one's bytes to its learner, and returns the observations of those learned.
    /// `known` are the processes with progress files; `mine` says which local addresses are
    /// this host's; `heard` the labels peers' reports carried, by connection.
    pub fn step(
        &mut self,
        slot: Slot,
        known: &[ProcessObs],
        stats: Option<&[(SocketKey, SocketStats)]>,
        mine: &dyn Fn(&SocketAddr) -> bool,
        sockets: &dyn SocketSource,
        heard: &[HeardLabel],
    ) -> Vec<ProcessObs> {
        let Some(stats) = stats else {
            return Vec::new();
        };
        let known_pids: HashSet<u32> = known.iter().map(|p| p.header.pid).collect();
        self.procs.retain(|pid, _| !known_pids.contains(pid));
        self.refresh_connections(sockets);
        if self.scan_due(slot, stats, mine) {
            self.next_scan = slot.0 + SCAN_SLOTS;
            self.soonest_scan = slot.0 + NEW_SOCKET_SCAN_SLOTS;
            self.scanned = local_tuples(stats, mine).collect();
            self.scan(known, &known_pids, stats, mine, sockets);
        }
        self.hear(heard);
        self.feed(slot, stats);
        self.observations()
    }

    /// Whether to look for new processes this slot: every [`SCAN_SLOTS`], and sooner (but
    /// not before [`NEW_SOCKET_SCAN_SLOTS`] since the last look) once a socket appears that
    /// the last look did not see.
    fn scan_due(
        &self,
        slot: Slot,
        stats: &[(SocketKey, SocketStats)],
        mine: &dyn Fn(&SocketAddr) -> bool,
    ) -> bool {
        slot.0 >= self.next_scan
            || (slot.0 >= self.soonest_scan
                && local_tuples(stats, mine).any(|t| !self.scanned.contains(&t)))
    }

    /// Each learned or learning process, for operators.
    pub fn status(&self) -> Vec<LearnedStatus> {
        let ms = self.tau_ns as f64 / 1e6;
        self.procs
            .iter()
            .map(|(&pid, t)| {
                let e = t.learner.estimate();
                LearnedStatus {
                    pid,
                    job_id: self.job_id(pid),
                    confidence: e.map(|e| e.confidence),
                    period_ms: e.map(|e| e.period_slots * ms),
                    bytes_per_iteration: e.map(|e| e.bytes_per_iteration),
                    iteration: e.map(|e| t.identity.iteration(e.iteration)),
                    reading: e.map(|e| e.reading),
                    unlearned: match e {
                        Some(_) => None,
                        None => t.learner.unlearned().map(Unlearned::as_str),
                    },
                    total_iterations: t.total_iterations,
                }
            })
            .collect()
    }

    fn job_id(&self, pid: u32) -> String {
        self.procs.get(&pid).map_or_else(
            || Label::own(&self.host, pid).job_id(),
            |t| t.identity.label().job_id(),
        )
    }

    /// Drops the processes gone (their connections cannot be listed) and keeps the others'
    /// connections current, and what was heard over those still open.
    fn refresh_connections(&mut self, sockets: &dyn SocketSource) {
        self.procs.retain(|&pid, t| match sockets.connections(pid) {
            Ok(c) => {
                t.conns = c;
                let conns = &t.conns;
                t.identity
                    .retain(|k| conns.iter().any(|c| tuple(c.local, c.remote) == *k));
                true
            }
            Err(_) => false,
        });
    }

    /// Gives each label heard to the process at this end of its connection.
    fn hear(&mut self, heard: &[HeardLabel]) {
        if heard.is_empty() {
            return;
        }
        let mut owner: HashMap<(SocketAddr, SocketAddr), u32> = HashMap::new();
        for (&pid, t) in &self.procs {
            for c in &t.conns {
                owner.insert(tuple(c.local, c.remote), pid);
            }
        }
        for h in heard {
            if let Some(t) = owner.get(&h.conn).and_then(|pid| self.procs.get_mut(pid)) {
                let mine = t.learner.estimate().map(|e| e.iteration);
                t.identity.hear(h.conn, h.report.clone(), mine);
            }
        }
    }

    /// Starts learning every process that owns one of this host's datapath sockets no progress
    /// file or learned process accounts for.
    fn scan(
        &mut self,
        known: &[ProcessObs],
        known_pids: &HashSet<u32>,
        stats: &[(SocketKey, SocketStats)],
        mine: &dyn Fn(&SocketAddr) -> bool,
        sockets: &dyn SocketSource,
    ) {
        let owned: HashSet<(SocketAddr, SocketAddr)> = known
            .iter()
            .flat_map(|p| p.conns.iter())
            .chain(self.procs.values().flat_map(|t| t.conns.iter()))
            .map(|c| tuple(c.local, c.remote))
            .collect();
        let sought: HashSet<((SocketAddr, SocketAddr), SocketInode)> = stats
            .iter()
            .filter(|(k, _)| mine(&k.src) && !owned.contains(&(k.src, k.dst)))
            .map(|(k, s)| ((k.src, k.dst), s.inode))
            .collect();
        if sought.is_empty() {
            return;
        }
        let unowned: HashSet<(SocketAddr, SocketAddr)> = sought.iter().map(|(t, _)| *t).collect();
        let unowned_inodes = inodes_of(sought.iter().map(|(_, i)| *i));
        let Ok(pids) = sockets.pids() else {
            return;
        };
        self.scans += 1;
        let scan = self.scans;
        if !sought.is_subset(&self.sought) {
            self.passed.clear();
        }
        self.sought = sought;
        let live: HashSet<u32> = pids.iter().copied().collect();
        self.passed.retain(|pid, _| live.contains(pid));
        for pid in pids {
            let recent = self
                .passed
                .get(&pid)
                .is_some_and(|&at| scan - at < RECHECK_SCANS);
            if known_pids.contains(&pid) || self.procs.contains_key(&pid) || recent {
                continue;
            }
            // A process holding none of the sockets sought is passed over on its fds alone:
            // resolving them to connections walks its namespace's TCP table.
            if let Some(sought) = &unowned_inodes
                && let Some(Ok(held)) = sockets.socket_inodes(pid)
                && held.is_disjoint(sought)
            {
                self.passed.insert(pid, scan);
                continue;
            }
            let Ok(conns) = sockets.connections(pid) else {
                continue;
            };
            if !conns
                .iter()
                .any(|c| unowned.contains(&tuple(c.local, c.remote)))
            {
                self.passed.insert(pid, scan);
            } else {
                let total_iterations = self
                    .read_environ
                    .then(|| sockets.total_iterations(pid))
                    .flatten();
                tracing::info!(
                    pid,
                    total_iterations = ?total_iterations,
                    "learning the iterations of a process with no progress file"
                );
                self.procs.insert(
                    pid,
                    Tracked {
                        learner: Learner::new(self.cfg.clone()),
                        conns,
                        identity: Identity::new(Label::own(&self.host, pid)),
                        acked: HashMap::new(),
                        total: 0,
                        total_iterations,
                    },
                );
            }
        }
    }

    /// Adds each process's bytes acked since last slot and shows its learner the total.
    fn feed(&mut self, slot: Slot, stats: &[(SocketKey, SocketStats)]) {
        if self.procs.is_empty() {
            return;
        }
        let mut by_tuple: HashMap<(SocketAddr, SocketAddr), Vec<(SocketKey, u64)>> = HashMap::new();
        for (k, s) in stats {
            by_tuple
                .entry((k.src, k.dst))
                .or_default()
                .push((*k, s.bytes_acked));
        }
        let ms = self.tau_ns as f64 / 1e6;
        for (&pid, t) in self.procs.iter_mut() {
            let mut seen = HashMap::new();
            for c in &t.conns {
                for &(key, acked) in by_tuple
                    .get(&tuple(c.local, c.remote))
                    .into_iter()
                    .flatten()
                {
                    let before = t.acked.get(&key).copied().unwrap_or(acked);
                    t.total = t.total.saturating_add(acked.saturating_sub(before));
                    seen.insert(key, acked);
                }
            }
            t.acked = seen;
            let was = t.learner.estimate().is_some();
            let peers = t.identity.take_peer_bytes();
            if !peers.is_empty() {
                tracing::trace!(target: "mlcc_learn", pid, slot = slot.0, ?peers);
            }
            t.learner.hear(slot, peers);
            // The learner's whole input, for replaying a run offline when a job is not learned.
            tracing::trace!(target: "mlcc_learn", pid, slot = slot.0, total = t.total);
            t.learner.observe(slot, t.total);
            log_change(pid, was, t.learner.estimate(), ms);
        }
    }

    /// What a progress file would say for each process learned.
    fn observations(&self) -> Vec<ProcessObs> {
        self.procs
            .iter()
            .filter_map(|(&pid, t)| {
                let e = t.learner.estimate()?;
                Some(ProcessObs {
                    header: self.header(pid, e, t.total_iterations.unwrap_or(0)),
                    snapshot: self.snapshot(t.total, e, t.identity.iteration(e.iteration)),
                    conns: t.conns.clone(),
                })
            })
            .collect()
    }

    fn header(&self, pid: u32, e: &Learned, total_iterations: u64) -> ProgressHeader {
        ProgressHeader {
            job_id: self.job_id(pid),
            arch: Some(Arch::Allreduce),
            role: Role::Worker,
            rank: 0,
            // Unknown: no ring slack and no model-based guess, only the bytes seen.
            world_size: 0,
            model_bytes: e.bytes_per_iteration as u64,
            pid,
            start_time_ns: 0,
            cc_name: "mlcc".to_string(),
            total_iterations,
        }
    }

    /// What a progress file would say, the iteration counted as the job counts it.
    fn snapshot(&self, total: u64, e: &Learned, iteration: u64) -> ProgressSnapshot {
        let sent = (e.sent_this_iteration as u64).min(total);
        ProgressSnapshot {
            bytes_sent: total,
            bytes_received: 0,
            iteration,
            iteration_start_ns: e.iteration_start.0 * self.tau_ns,
            iteration_start_sent: total - sent,
            last_iteration_bytes: e.last_iteration_bytes as u64,
            last_update_ns: 0,
        }
    }
}

/// Says when a process crosses the bar, either way: the figures an operator checks the
/// learner by (the testbed's per-job table of learned against true bytes reads these lines).
fn log_change(pid: u32, was: bool, now: Option<&Learned>, slot_ms: f64) {
    match (was, now) {
        (false, Some(e)) => tracing::info!(
            pid,
            iteration = e.iteration,
            bytes_per_iteration = e.bytes_per_iteration as u64,
            period_ms = e.period_slots * slot_ms,
            confidence = e.confidence,
            "learned a process's iterations; scheduling it"
        ),
        (true, None) => {
            tracing::info!(pid, "no longer periodic; leaving it to the kernel's CC")
        }
        _ => {}
    }
}

/// The (local, remote) address pairs of this host's sockets among `stats`.
fn local_tuples<'a>(
    stats: &'a [(SocketKey, SocketStats)],
    mine: &'a dyn Fn(&SocketAddr) -> bool,
) -> impl Iterator<Item = (SocketAddr, SocketAddr)> + 'a {
    stats
        .iter()
        .filter(|(k, _)| mine(&k.src))
        .map(|(k, _)| (k.src, k.dst))
}

/// The inodes known of `sockets`, or `None` where the datapath does not record them. A socket
/// whose inode is not known yet has had no ACK since a process held it (an accepted connection
/// that only receives, or one closed and draining): it sends nothing a learner could read, so
/// it is left out.
fn inodes_of(sockets: impl Iterator<Item = SocketInode>) -> Option<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for i in sockets {
        match i {
            SocketInode::Is(i) => {
                inodes.insert(i);
            }
            SocketInode::NotYet => {}
            SocketInode::Unrecorded => return None,
        }
    }
    Some(inodes)
}

fn tuple(local: SocketAddr, remote: SocketAddr) -> (SocketAddr, SocketAddr) {
    (canonical(local), canonical(remote))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockets::StaticSockets;
    use mlcc_core::learn::identity::Report;

    fn report(label: Label, iteration: u64, bytes_per_iteration: u64) -> Report {
        Report {
            label,
            iteration,
            bytes_per_iteration,
        }
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn conn(local: &str, remote: &str) -> TcpConn {
        TcpConn {
            local: addr(local),
            remote: addr(remote),
            accepted: false,
        }
    }

    fn stats(c: &TcpConn, acked: u64) -> (SocketKey, SocketStats) {
        let key = SocketKey::new(7, c.local, c.remote);
        let s = SocketStats {
            bytes_acked: acked,
            bytes_sent: acked,
            ..Default::default()
        };
        (key, s)
    }

    fn mine(a: &SocketAddr) -> bool {
        a.ip().to_string() == "10.0.0.1"
    }

    fn with_file(pid: u32, c: TcpConn) -> ProcessObs {
        ProcessObs {
            header: ProgressHeader {
                job_id: format!("job-{pid}"),
                arch: Some(Arch::Allreduce),
                role: Role::Worker,
                rank: 0,
                world_size: 2,
                model_bytes: 1,
                pid,
                start_time_ns: 0,
                cc_name: "mlcc".into(),
                total_iterations: 0,
            },
            snapshot: ProgressSnapshot::default(),
            conns: vec![c],
        }
    }

    /// Runs `slots` slots of a host with a periodic job (pid 10: 8 slots of 2 MB, 4 quiet),
    /// a bulk transfer (pid 20) and a process with a progress file (pid 30), and returns the
    /// last slot's learned observations and statuses.
    fn run(slots: u64, with_progress_file: bool) -> (Vec<ProcessObs>, Vec<LearnedStatus>) {
        run_told(slots, with_progress_file, None, true)
    }

    /// [`run`], pid 10's environment saying its job runs `told` iterations, read or not.
    fn run_told(
        slots: u64,
        with_progress_file: bool,
        told: Option<u64>,
        read_environ: bool,
    ) -> (Vec<ProcessObs>, Vec<LearnedStatus>) {
        let sockets = StaticSockets::default();
        if let Some(n) = told {
            sockets.tell_total_iterations(10, n);
        }
        let (job, bulk, known) = (
            conn("10.0.0.1:4000", "10.0.0.2:5000"),
            conn("10.0.0.1:4001", "10.0.0.3:5201"),
            conn("10.0.0.1:4002", "10.0.0.2:6000"),
        );
        sockets.set(10, vec![job]);
        sockets.set(20, vec![bulk]);
        sockets.set(30, vec![known]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000)
            .reading_environ(read_environ);
        let (mut job_total, mut out) = (0u64, Vec::new());
        for s in 0..slots {
            if s % 12 < 8 {
                job_total += 2_000_000;
            }
            let st = vec![
                stats(&job, job_total),
                stats(&bulk, s * 3_000_000),
                stats(&known, s * 1_000),
            ];
            let mut known_procs = vec![with_file(30, known)];
            if with_progress_file {
                known_procs.push(with_file(10, job));
            }
            out = l.step(
                Slot(1000 + s),
                &known_procs,
                Some(&st),
                &mine,
                &sockets,
                &[],
            );
        }
        (out, l.status())
    }

    #[test]
    fn a_periodic_process_is_learned_and_reads_like_a_progress_file() {
        let (out, status) = run(80, false);
        assert_eq!(out.len(), 1, "{out:?}");
        let p = &out[0];
        assert_eq!(p.header.job_id, "learned-h1-10");
        assert_eq!(p.header.pid, 10);
        assert_eq!(p.header.arch, Some(Arch::Allreduce));
        assert_eq!(p.conns.len(), 1);
        // 8 slots of 2 MB an iteration.
        assert_eq!(p.snapshot.last_iteration_bytes, 16_000_000);
        assert!(p.snapshot.iteration >= 4, "{:?}", p.snapshot);
        assert!(p.snapshot.sent_this_iteration() <= 16_000_000);
        // The bulk transfer is followed, never learned; the known process is not followed.
        let by_pid: BTreeMap<u32, &LearnedStatus> = status.iter().map(|s| (s.pid, s)).collect();
        assert!(by_pid[&10].confidence.is_some_and(|c| c > 0.6));
        assert_eq!(by_pid[&10].reading, Some(Reading::Period));
        assert!(
            by_pid[&10].source().starts_with("learned:period:"),
            "{status:?}"
        );
        // Bulk moves no iterations: no period, said so.
        assert_eq!(by_pid[&20].source(), "learning:no-period");
        assert!((by_pid[&10].period_ms.unwrap() - 360.0).abs() < 30.0);
        assert_eq!((by_pid[&20].confidence, by_pid[&20].reading), (None, None));
        assert!(!by_pid.contains_key(&30), "{status:?}");
        // Its environment said nothing of its length.
        assert_eq!(p.header.total_iterations, 0);
    }

    #[test]
    fn a_learned_process_says_the_total_iterations_its_environment_gives_unless_told_not_to_read_it()
     {
        let (out, status) = run_told(80, false, Some(500), true);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].header.total_iterations, 500);
        let told: Vec<(u32, Option<u64>)> =
            status.iter().map(|s| (s.pid, s.total_iterations)).collect();
        assert_eq!(
            told,
            [(10, Some(500)), (20, None)],
            "operators see who was told"
        );
        // The estimate is the learner's either way.
        assert_eq!(out[0].snapshot.last_iteration_bytes, 16_000_000);
        let (out, _) = run_told(80, false, Some(500), false);
        assert_eq!(out[0].header.total_iterations, 0);
        // Told, but not learned yet: nothing is scheduled on the environment alone.
        let (out, status) = run_told(6, false, Some(500), true);
        assert!(out.is_empty(), "{out:?}");
        assert!(status.iter().all(|s| s.confidence.is_none()), "{status:?}");
    }

    #[test]
    fn a_process_passed_over_before_it_connected_is_found_when_its_socket_appears() {
        let sockets = StaticSockets::default();
        let other = conn("10.0.0.1:4100", "10.0.0.3:5201");
        let late = conn("10.0.0.1:4000", "10.0.0.2:5000");
        sockets.set(10, vec![]);
        sockets.set(99, vec![]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        // A socket nobody here owns (another namespace's): pid 10, not connected yet, is
        // looked at and passed over.
        l.step(
            Slot(0),
            &[],
            Some(&[stats(&other, 1)]),
            &mine,
            &sockets,
            &[],
        );
        assert!(l.procs.is_empty());
        sockets.set(10, vec![late]);
        let both = [stats(&other, 1), stats(&late, 1)];
        l.step(Slot(SCAN_SLOTS), &[], Some(&both), &mine, &sockets, &[]);
        assert!(
            l.procs.contains_key(&10),
            "found at the next scan, not {RECHECK_SCANS} later"
        );
    }

    #[test]
    fn a_new_socket_brings_the_next_scan_forward_and_nothing_else_does() {
        let sockets = StaticSockets::default();
        let other = conn("10.0.0.1:4100", "10.0.0.3:5201");
        let late = conn("10.0.0.1:4000", "10.0.0.2:5000");
        sockets.set(10, vec![]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        // A socket nobody here owns: looked for at slot 0, then only every SCAN_SLOTS.
        for s in 0..=SCAN_SLOTS {
            l.step(
                Slot(s),
                &[],
                Some(&[stats(&other, s)]),
                &mine,
                &sockets,
                &[],
            );
        }
        assert_eq!(l.scans, 2, "the same sockets brought no scan forward");
        // Pid 10 connects at slot 40, mid-way to the next scan at 64, and sends at once.
        sockets.set(10, vec![late]);
        let first = 40;
        let mut found = None;
        for s in first..first + NEW_SOCKET_SCAN_SLOTS + 1 {
            let st = [stats(&other, s), stats(&late, (s - first) * 1_000_000)];
            l.step(Slot(s), &[], Some(&st), &mine, &sockets, &[]);
            if found.is_none() && l.procs.contains_key(&10) {
                found = Some(s);
            }
        }
        assert_eq!(found, Some(first), "found in the slot its socket appeared");
        assert_eq!(l.scans, 3, "one scan for the new socket");
        // Found before it sent a byte: its learner has counted every one since.
        assert_eq!(l.procs[&10].total, NEW_SOCKET_SCAN_SLOTS * 1_000_000);
    }

    /// Sockets with inodes: counts the processes whose connections were asked for.
    #[derive(Default)]
    struct InodeSockets {
        procs: HashMap<u32, (HashSet<u64>, Vec<TcpConn>)>,
        resolved: std::sync::Mutex<Vec<u32>>,
    }

    impl SocketSource for InodeSockets {
        fn pids(&self) -> std::io::Result<Vec<u32>> {
            Ok(self.procs.keys().copied().collect())
        }

        fn connections(&self, pid: u32) -> std::io::Result<Vec<TcpConn>> {
            self.resolved.lock().unwrap().push(pid);
            Ok(self
                .procs
                .get(&pid)
                .map(|p| p.1.clone())
                .unwrap_or_default())
        }

        fn socket_inodes(&self, pid: u32) -> Option<std::io::Result<HashSet<u64>>> {
            Some(Ok(self
                .procs
                .get(&pid)
                .map(|p| p.0.clone())
                .unwrap_or_default()))
        }
    }

    #[test]
    fn a_process_holding_no_socket_sought_is_passed_over_on_its_inodes() {
        let (job, elsewhere) = (
            conn("10.0.0.1:4000", "10.0.0.2:5000"),
            conn("10.0.0.9:4000", "10.0.0.2:5000"),
        );
        let sockets = InodeSockets {
            procs: HashMap::from([
                (10, (HashSet::from([101, 102]), vec![job])),
                // Another namespace's process: none of this datapath's sockets.
                (20, (HashSet::from([555]), vec![elsewhere])),
            ]),
            ..Default::default()
        };
        let with_inode = |c: &TcpConn, inode| {
            let (k, s) = stats(c, 1);
            (k, SocketStats { inode, ..s })
        };
        let recorded = [with_inode(&job, SocketInode::Is(101))];
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        l.step(Slot(0), &[], Some(&recorded), &mine, &sockets, &[]);
        assert!(l.procs.contains_key(&10));
        assert_eq!(
            *sockets.resolved.lock().unwrap(),
            vec![10],
            "only pid 10 resolved"
        );
        assert!(l.passed.contains_key(&20));

        // An accepted connection's inode is known only from its first ACK after the accept:
        // its process is passed over until then, and looked at again at the next scan.
        let accepted = conn("10.0.0.1:5000", "10.0.0.2:4000");
        let accepting = InodeSockets {
            procs: HashMap::from([(30, (HashSet::from([301]), vec![accepted]))]),
            ..Default::default()
        };
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        let pending = [with_inode(&accepted, SocketInode::NotYet)];
        l.step(Slot(0), &[], Some(&pending), &mine, &accepting, &[]);
        assert!(l.passed.contains_key(&30));
        let known = [with_inode(&accepted, SocketInode::Is(301))];
        l.step(Slot(SCAN_SLOTS), &[], Some(&known), &mine, &accepting, &[]);
        assert!(
            l.procs.contains_key(&30),
            "found at the next scan, not {RECHECK_SCANS} later"
        );

        // A datapath that does not record inodes: every process is resolved, as before.
        sockets.resolved.lock().unwrap().clear();
        let unrecorded = [with_inode(&job, SocketInode::Unrecorded)];
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        l.step(Slot(0), &[], Some(&unrecorded), &mine, &sockets, &[]);
        assert!(l.procs.contains_key(&10));
        let mut resolved = sockets.resolved.lock().unwrap().clone();
        resolved.sort();
        assert_eq!(resolved, vec![10, 20]);
    }

    #[test]
    fn a_progress_file_wins() {
        let (out, status) = run(80, true);
        assert!(out.iter().all(|p| p.header.pid != 10), "{out:?}");
        assert!(status.iter().all(|s| s.pid != 10), "{status:?}");
    }

    #[test]
    fn a_closed_socket_takes_nothing_back_and_no_datapath_learns_nothing() {
        let sockets = StaticSockets::default();
        let c = conn("10.0.0.1:4000", "10.0.0.2:5000");
        sockets.set(10, vec![c]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h1", 30_000_000);
        assert!(l.step(Slot(1), &[], None, &mine, &sockets, &[]).is_empty());
        l.step(
            Slot(2),
            &[],
            Some(&[stats(&c, 5_000_000)]),
            &mine,
            &sockets,
            &[],
        );
        l.step(
            Slot(3),
            &[],
            Some(&[stats(&c, 9_000_000)]),
            &mine,
            &sockets,
            &[],
        );
        // The socket is gone from the datapath: the total stays where it was.
        l.step(Slot(4), &[], Some(&[]), &mine, &sockets, &[]);
        assert_eq!(l.procs[&10].total, 4_000_000);
    }

    #[test]
    fn a_process_takes_the_least_label_heard_over_its_connections_while_they_are_open() {
        let sockets = StaticSockets::default();
        let (c, other) = (
            conn("10.0.0.1:4000", "10.0.0.2:5000"),
            conn("10.0.0.1:4001", "10.0.0.3:5000"),
        );
        sockets.set(10, vec![c, other]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h5", 30_000_000);
        let tup = |c: &TcpConn| tuple(c.local, c.remote);
        let heard = |conn, label| HeardLabel {
            conn,
            report: report(label, 5, 0),
        };
        let heard = [
            heard(tup(&c), Label::own("h2", 77)),
            heard(tup(&other), Label::own("h9", 1)),
            // Over a connection of no process here: nobody takes it.
            heard(
                tuple(addr("10.0.0.1:9"), addr("10.0.0.4:9")),
                Label::own("a", 1),
            ),
        ];
        let st = [stats(&c, 1), stats(&other, 1)];
        l.step(Slot(0), &[], Some(&st), &mine, &sockets, &heard);
        assert_eq!(l.status()[0].job_id, "learned-h2-77");
        // A greater label changes nothing; what was heard stays while its connection does.
        let greater = [HeardLabel {
            conn: tup(&other),
            report: report(Label::own("h7", 1), 5, 0),
        }];
        l.step(Slot(1), &[], Some(&st), &mine, &sockets, &greater);
        assert_eq!(l.status()[0].job_id, "learned-h2-77");
        l.step(Slot(2), &[], Some(&st), &mine, &sockets, &[]);
        assert_eq!(l.status()[0].job_id, "learned-h2-77");
        // The connection it came over closes: the least still heard is the process's own.
        sockets.set(10, vec![other]);
        l.step(Slot(3), &[], Some(&st), &mine, &sockets, &[]);
        assert_eq!(l.status()[0].job_id, "learned-h5-10");
    }

    /// Once its peer's reports reach it, a learned process reads as its peer's job would: the
    /// peer's label, and the peer's iteration count (here 3 ahead of its own).
    #[test]
    fn a_learned_process_reports_its_peers_job_and_count() {
        let sockets = StaticSockets::default();
        let job = conn("10.0.0.1:4000", "10.0.0.2:5000");
        sockets.set(10, vec![job]);
        let mut l = LearnedProcesses::new(LearnerConfig::default(), "h5", 30_000_000);
        let (mut total, mut out) = (0u64, Vec::new());
        for s in 0..80u64 {
            if s % 12 < 8 {
                total += 2_000_000;
            }
            let count = l
                .procs
                .get(&10)
                .and_then(|t| t.learner.estimate())
                .map(|e| e.iteration);
            let heard: Vec<HeardLabel> = count
                .map(|it| HeardLabel {
                    conn: tuple(job.local, job.remote),
                    report: report(Label::own("h1", 4), it + 3, 0),
                })
                .into_iter()
                .collect();
            out = l.step(
                Slot(s),
                &[],
                Some(&[stats(&job, total)]),
                &mine,
                &sockets,
                &heard,
            );
        }
        let p = &out[0];
        assert_eq!(p.header.job_id, "learned-h1-4");
        let own = l.procs[&10].learner.estimate().unwrap().iteration;
        assert_eq!(p.snapshot.iteration, own + 3);
        assert_eq!(l.status()[0].iteration, Some(own + 3));
    }

    /// A process whose own traffic shows no period yet is learned at the bytes its learned
    /// peer's reports carry once its own pauses fall that many bytes apart twice; the same
    /// traffic heard with no bytes is not.
    #[test]
    fn a_process_takes_its_peers_bytes_where_its_own_pauses_show_them() {
        let job = conn("10.0.0.1:4000", "10.0.0.2:5000");
        // Iterations of 20 MB over 6, 9, 14, 7 slots (pauses mid-way of one slot), then 4 of
        // compute: too few and too uneven for a period.
        let lengths = [6u64, 9, 14, 7];
        let run = |bytes_heard: u64| {
            let sockets = StaticSockets::default();
            sockets.set(10, vec![job]);
            let mut l = LearnedProcesses::new(LearnerConfig::default(), "h5", 30_000_000);
            let heard = [HeardLabel {
                conn: tuple(job.local, job.remote),
                report: report(Label::own("h1", 4), 9, bytes_heard),
            }];
            let (mut total, mut slot) = (0u64, 0u64);
            let step = |l: &mut LearnedProcesses, total: u64, slot: &mut u64| {
                let st = [stats(&job, total)];
                l.step(Slot(*slot), &[], Some(&st), &mine, &sockets, &heard);
                *slot += 1;
            };
            for len in lengths {
                for i in 0..len {
                    if i == len / 3 {
                        step(&mut l, total, &mut slot);
                    }
                    total += 20_000_000 / len;
                    step(&mut l, total, &mut slot);
                }
                for _ in 0..4 {
                    step(&mut l, total, &mut slot);
                }
            }
            step(&mut l, total + 1_000_000, &mut slot);
            l.status().remove(0)
        };
        let with = run(20_000_000 / 6 * 6);
        assert_eq!(with.reading, Some(Reading::Peer), "{with:?}");
        assert_eq!(with.bytes_per_iteration, Some((20_000_000 / 6 * 6) as f64));
        assert_eq!(with.source().split(':').nth(1), Some("peer"));
        assert_eq!(run(0).reading, None);
    }
}
