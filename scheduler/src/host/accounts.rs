//! Progress accounting: progress files, their processes' connections and the datapath's
//! counters become flow groups with their bytes sent and left in the current iteration, the
//! application's backlog and last slot's delivery — what core's policy observes.

use mlcc_core::learn::identity::Label;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;

use mlcc_core::flow::{FlowParts, FlowRole};
use mlcc_core::hash::{self, Set};
use mlcc_core::job::{self, Arch, FlowGroup, Job, Role};
use mlcc_core::topology::NodeId;
use mlcc_core::{FlowId, Slot};

use super::fabric::Fabric;
use super::flow_state::{Counters, FlowSpec, FlowState, SocketCounters};
use super::flows::Flows;
use super::group_ids::GroupIds;
use super::notes::Notes;
use super::split::shares;
use super::{HostConfig, Observation, ProcessObs, Source};
use crate::datapath::{SocketKey, SocketStats, canonical};
use crate::progress::ProgressHeader;
use crate::sockets::TcpConn;

/// The local flow groups, and the jobs added by hand.
#[derive(Default)]
pub(super) struct Accounts {
    pub flows: Flows,
    /// Flows gone since last slot whose schedules must still be withdrawn.
    pub gone: Vec<FlowState>,
    /// Per process, why its connections group as they do (for operators); logged when it
    /// changes, so it is kept as counts and formatted only then.
    pub notes: Notes,
    group_ids: GroupIds,
    pub admin_jobs: BTreeMap<String, AdminJob>,
}

/// A job added by hand, with its flow groups worked out once (they follow from the job alone;
/// recomputing them every slot was a tenth of a busy host's slot).
pub(super) struct AdminJob {
    pub job: Job,
    pub groups: Vec<FlowGroup>,
}

/// The datapath's sockets this slot: by 4-tuple (/proc does not give the netns cookie, the
/// datapath does), and their counters.
struct Sockets {
    by_tuple: hash::Map<(SocketAddr, SocketAddr), TupleKeys>,
    counters: Counters,
}

/// The datapath's sockets with one 4-tuple: one, unless network namespaces reuse addresses.
/// Held without a vector of its own in the common case: a busy host has hundreds per slot.
enum TupleKeys {
    One(SocketKey),
    More(Vec<SocketKey>),
}

impl TupleKeys {
    fn push(&mut self, k: SocketKey) {
        match self {
            TupleKeys::One(first) => *self = TupleKeys::More(vec![*first, k]),
            TupleKeys::More(keys) => keys.push(k),
        }
    }

    fn as_slice(&self) -> &[SocketKey] {
        match self {
            TupleKeys::One(k) => std::slice::from_ref(k),
            TupleKeys::More(keys) => keys,
        }
    }
}

impl Sockets {
    fn of(stats: Option<&[(SocketKey, SocketStats)]>) -> Self {
        let stats = stats.unwrap_or_default();
        let mut s = Sockets {
            by_tuple: hash::map_with_capacity(stats.len()),
            counters: hash::map_with_capacity(stats.len()),
        };
        for (k, st) in stats {
            match s.by_tuple.entry((k.src, k.dst)) {
                Entry::Occupied(mut e) => e.get_mut().push(*k),
                Entry::Vacant(e) => {
                    e.insert(TupleKeys::One(*k));
                }
            }
            s.counters.insert(*k, SocketCounters::of(st));
        }
        s
    }

    fn acked(&self, keys: &[SocketKey]) -> u64 {
        keys.iter()
            .map(|k| self.counters.get(k).map_or(0, |c| c.acked))
            .fold(0u64, u64::saturating_add)
    }
}

/// One process's outgoing connections grouped by remote host: the datapath's sockets of each
/// and how many connections each has.
type Groups = BTreeMap<NodeId, (Vec<SocketKey>, usize)>;

/// Per group, what one process contributes.
struct Contribution {
    sockets: Vec<SocketKey>,
    conns: usize,
    /// This process's share of the group's iteration bytes, and what it is based on.
    expected: f64,
    expected_from: &'static str,
    sent_share: f64,
    iteration: u64,
    iteration_start_ns: u64,
    model_bytes: u64,
    total_iterations: u64,
    slack: f64,
    last_iteration_bytes: f64,
}

/// Per flow group id: its job, role, receiving host and what each process contributes. The
/// order does not matter: each group becomes one flow's update.
type Contributions<'a> = hash::Map<FlowId, (&'a str, FlowRole, NodeId, Vec<Contribution>)>;

/// How a process's bytes per iteration split over its flow groups.
#[derive(Clone, Copy)]
enum Split {
    /// In the share each group's sockets carried ([`shares`]).
    Carried,
    /// Evenly over the servers a PS worker pushes to.
    PerServer,
    /// Each group moves all of it (a ring step, a broadcast).
    Whole,
}

/// What a process moves in an iteration, and how that splits over its groups.
struct Expected {
    bytes: f64,
    from: &'static str,
    split: Split,
}

impl Expected {
    /// What `h`'s process in `role` moves per iteration, having moved `last` in its last
    /// whole one (0: none seen yet).
    fn of(h: &ProgressHeader, role: FlowRole, last: u64) -> Self {
        let e = |bytes: u64, from, split| Expected {
            bytes: bytes as f64,
            from,
            split,
        };
        if last > 0 {
            // What each group's sockets carried is known once an iteration is over.
            return e(last, "last iteration", Split::Carried);
        }
        let (m, world) = (h.model_bytes, u64::from(h.world_size));
        match role {
            _ if m == 0 => e(0, "unknown", Split::Whole),
            FlowRole::Ring if world >= 2 => {
                e(job::ring_flow_bytes(m, world), "model", Split::Whole)
            }
            FlowRole::Ring => e(m, "model (world size unknown)", Split::Whole),
            // A worker talks to every server: P = the server hosts it reaches. Not what each
            // group carried so far: in the first slots of the first iteration, the server
            // acked first would take all of it.
            FlowRole::Agg => e(m, "model / servers", Split::PerServer),
            // A server does not know P before the first iteration: assume it holds it all.
            FlowRole::Bcast => e(m, "model (server count unknown)", Split::Whole),
        }
    }

    /// One group's part, the group's share of the process's bytes being `w` of `n` groups.
    fn part(&self, w: f64, n: usize) -> f64 {
        match self.split {
            Split::Carried => self.bytes * w,
            Split::PerServer => job::ps_flow_bytes(self.bytes as u64, n as u64) as f64,
            Split::Whole => self.bytes,
        }
    }
}

/// Which flow role a process's outgoing traffic has, or why it has none.
fn role_of(arch: Option<Arch>, role: Role) -> Result<FlowRole, &'static str> {
    match (arch, role) {
        (_, Role::Scheduler) => Err("PS-Lite scheduler: control traffic only"),
        (None, _) => Err("architecture unknown (MLCC_JOB_ARCH unset; use mlccctl job add)"),
        (Some(Arch::Ps), Role::Worker) => Ok(FlowRole::Agg),
        (Some(Arch::Ps), Role::Server) => Ok(FlowRole::Bcast),
        (Some(Arch::Allreduce), Role::Worker) => Ok(FlowRole::Ring),
        (Some(Arch::Allreduce), Role::Server) => Err("all-reduce job with a server role"),
    }
}

impl Accounts {
    /// Takes slot `slot`'s observation: every process's contribution to its flow groups,
    /// the admin jobs' groups, and the flows no longer observed (to withdraw).
    pub fn observe(&mut self, fabric: &Fabric, cfg: &HostConfig, slot: Slot, obs: &Observation) {
        let sockets = Sockets::of(obs.stats.as_deref());
        self.notes.begin();
        self.group_ids.begin();
        self.flows.begin();
        let mut contribs = hash::map_with_capacity(self.flows.len());
        for p in &obs.processes {
            self.contribute(fabric, cfg, p, &sockets, &mut contribs);
        }
        let admin = self.admin_groups(fabric, &cfg.host, &contribs, &sockets, slot);
        let tau_ns = cfg.policy.slots.tau_ns();
        for (id, (job, role, dst, cs)) in contribs {
            let spec = merge(job, role, dst, cs, slot, tau_ns);
            self.update(fabric, cfg, slot, id, spec, &sockets.counters);
        }
        for (id, spec) in admin {
            self.update(fabric, cfg, slot, id, spec, &sockets.counters);
        }
        self.notes.end();
        self.group_ids.end();
        self.flows.end(|f| self.gone.push(f));
    }

    /// Adds what process `p` contributes to its flow groups this slot, or notes why it has
    /// none.
    fn contribute<'a>(
        &mut self,
        fabric: &Fabric,
        cfg: &HostConfig,
        p: &'a ProcessObs,
        sockets: &Sockets,
        contribs: &mut Contributions<'a>,
    ) {
        let h = &p.header;
        let arch = h
            .arch
            .or_else(|| self.admin_jobs.get(&h.job_id).map(|j| j.job.arch));
        let role = match role_of(arch, h.role) {
            Ok(r) => r,
            Err(why) => {
                self.notes.process(h, Note::Text(why.to_string()));
                return;
            }
        };
        let (groups, note) = group_connections(fabric, cfg, p, arch, role, sockets);
        self.notes.process(h, note);
        if groups.is_empty() {
            return;
        }
        let me = &fabric.topo().node(fabric.me()).name;
        let ids: Vec<FlowId> = groups
            .keys()
            .map(|&remote| {
                let parts = FlowParts {
                    job: &h.job_id,
                    src: me,
                    dst: &fabric.topo().node(remote).name,
                    role,
                };
                self.group_ids.of(h.pid, remote, parts)
            })
            .collect();
        let keys: Vec<&[SocketKey]> = groups.values().map(|(k, _)| k.as_slice()).collect();
        let s = &p.snapshot;
        // One split for what the iteration will move and what it has handed over, so a group
        // whose share is all sent is done.
        let parts = self.split(
            s.iteration,
            s.last_iteration_bytes > 0,
            &ids,
            &keys,
            sockets,
        );
        let sent = s.sent_this_iteration() as f64;
        let expected = Expected::of(h, role, s.last_iteration_bytes);
        let slack = if role == FlowRole::Ring {
            job::ring_slack_bytes(h.model_bytes, u64::from(h.world_size)) as f64
        } else {
            0.0
        };
        let n = groups.len();
        for (((remote, (sockets, conns)), id), w) in groups.into_iter().zip(ids).zip(parts) {
            contribs
                .entry(id)
                .or_insert_with(|| (&h.job_id, role, remote, Vec::new()))
                .3
                .push(Contribution {
                    sockets,
                    conns,
                    expected: expected.part(w, n),
                    expected_from: expected.from,
                    sent_share: sent * w,
                    iteration: s.iteration,
                    iteration_start_ns: s.iteration_start_ns,
                    model_bytes: h.model_bytes,
                    total_iterations: h.total_iterations,
                    slack,
                    last_iteration_bytes: s.last_iteration_bytes as f64 * w,
                });
        }
    }

    /// How one process's bytes of this iteration — what it will move and what it has handed
    /// over (its progress file's counts) — split over its flow groups (`ids`, their sockets
    /// `keys`): each group the share that its sockets carried in the iteration before, once a
    /// whole iteration is behind (`settled`) and every group's split basis is this
    /// iteration's; otherwise (the first iteration, a group first seen, an iteration just
    /// begun, no datapath counters) its share of what its sockets carried since the iteration
    /// began, or, before they carried anything, since they opened.
    /// A group whose sockets carry next to nothing — PS-Lite's connections to and from its
    /// scheduler — holds next to none. Split evenly, they credited the idle group towards a
    /// PS-Lite scheduler with half of a worker's pushes, planned at line rate, while the real
    /// group looked idle and crawled at the rate floor (dmlc/ps-lite's benchmark, 34× slower
    /// than cubic).
    ///
    /// Each group's share is its own, not what the others leave: splitting what is not acked
    /// yet over the groups (by what each had due, or over those whose sockets moved) coupled
    /// them, so one group's counting error (a baseline off by a tail) took another's backlog,
    /// and paper-small's ResNet50 PS job ran 7-12 % slower.
    fn split(
        &self,
        iteration: u64,
        settled: bool,
        ids: &[FlowId],
        keys: &[&[SocketKey]],
        sockets: &Sockets,
    ) -> Vec<f64> {
        // A process with one group (a ring rank and its successor) gives it all, whatever
        // the basis: skip working it out.
        if ids.len() == 1 {
            return vec![1.0];
        }
        let basis = || -> Option<Vec<Option<u64>>> {
            ids.iter()
                .zip(keys)
                .map(|(id, keys)| {
                    let f = self.flows.get(id)?;
                    Some(Some(f.split_basis(iteration, keys, &sockets.counters)?))
                })
                .collect()
        };
        // Unsettled: what each group carried since this iteration began (or its sockets were
        // first seen), once something has; until then, since they opened. Since they opened
        // only, a connection that once carried much (rank 0's share of DDP's initial broadcast
        // over every pair) kept half of the first iteration for a group that sends nothing.
        let recent = || -> Option<Vec<Option<u64>>> {
            let v: Vec<Option<u64>> = ids
                .iter()
                .zip(keys)
                .map(|(id, keys)| {
                    Some(Some(
                        self.flows
                            .get(id)?
                            .carried_since_start(keys, &sockets.counters)?,
                    ))
                })
                .collect::<Option<_>>()?;
            (v.iter().flatten().sum::<u64>() > 0).then_some(v)
        };
        let opened = || {
            keys.iter()
                .map(|keys| (!keys.is_empty()).then(|| sockets.acked(keys)))
                .collect::<Vec<_>>()
        };
        match settled.then(basis).flatten() {
            Some(before) => shares(&before),
            None => shares(&recent().unwrap_or_else(opened)),
        }
    }

    /// Admin jobs: their groups from this host take the datapath's sockets towards their
    /// members that no progress-file group claimed, if exactly one admin group wants that
    /// remote host.
    fn admin_groups(
        &self,
        fabric: &Fabric,
        me: &str,
        contribs: &Contributions<'_>,
        sockets: &Sockets,
        slot: Slot,
    ) -> Vec<(FlowId, FlowSpec<'static>)> {
        let mut groups = Vec::new();
        for job in self.admin_jobs.values() {
            for g in &job.groups {
                if g.src == me
                    && !contribs.contains_key(&g.id)
                    && let Some(dst) = fabric.topo().node_by_name(&g.dst)
                {
                    groups.push((g, dst));
                }
            }
        }
        if groups.is_empty() {
            return Vec::new();
        }
        let claimed: Set<SocketKey> = contribs
            .values()
            .flat_map(|c| c.3.iter().flat_map(|x| x.sockets.iter().copied()))
            .collect();
        let mut wanted: hash::Map<NodeId, usize> = hash::map_with_capacity(groups.len());
        for (_, dst) in &groups {
            *wanted.entry(*dst).or_default() += 1;
        }
        let mut keys_by_host: hash::Map<NodeId, Vec<SocketKey>> =
            hash::map_with_capacity(groups.len());
        for k in sockets.counters.keys() {
            if !claimed.contains(k)
                && let Some(h) = fabric.topo().host_by_ip(k.dst.ip())
            {
                keys_by_host.entry(h).or_default().push(*k);
            }
        }
        groups
            .into_iter()
            .map(|(g, dst)| {
                // A host with one group towards it owns every unclaimed socket to it; with
                // several, nothing tells which socket is whose.
                let mut keys = match wanted.get(&dst) {
                    Some(1) => keys_by_host.remove(&dst).unwrap_or_default(),
                    _ => Vec::new(),
                };
                keys.sort();
                (g.id.clone(), admin_spec(g, dst, keys, slot))
            })
            .collect()
    }

    /// Takes `spec` into flow `id`, routing it first if it is new. Paths do not change during
    /// a flow (docs/design.md §4; a new topology re-creates every flow).
    fn update(
        &mut self,
        fabric: &Fabric,
        cfg: &HostConfig,
        slot: Slot,
        id: FlowId,
        spec: FlowSpec<'_>,
        counters: &Counters,
    ) {
        if let Some(f) = self.flows.touch(&id) {
            f.update(slot, spec, counters, cfg.policy.slots.tau_secs());
            return;
        }
        let path = match fabric.route(spec.dst, id.as_str()) {
            Ok(p) => p,
            Err(e) => {
                self.notes
                    .flow(id.as_str(), Note::Text(format!("no path: {e}")));
                return;
            }
        };
        let topo = fabric.topo();
        let names = path.iter().map(|&l| topo.link(l).name.clone()).collect();
        let dst = topo.node(spec.dst).name.clone();
        let by_switch = fabric.switch_parts(&path);
        let mut f = FlowState::new(id.clone(), &spec, dst, path, names, by_switch, slot);
        f.update(slot, spec, counters, cfg.policy.slots.tau_secs());
        self.flows.insert(f);
    }
}

/// Process `p`'s outgoing connections grouped by remote host, and a note on the ones skipped.
fn group_connections(
    fabric: &Fabric,
    cfg: &HostConfig,
    p: &ProcessObs,
    arch: Option<Arch>,
    role: FlowRole,
    sockets: &Sockets,
) -> (Groups, Note) {
    let mut groups = Groups::new();
    let (mut unknown, mut local, mut inbound, mut sched) = (0, 0, 0, 0);
    let to_ps_scheduler =
        |c: &TcpConn| arch == Some(Arch::Ps) && cfg.ps_scheduler_port == Some(c.remote.port());
    // A process connected to the PS-Lite scheduler speaks PS-Lite's ZMQ van, which binds one
    // ROUTER to receive and sends over the DEALER it connects to each peer's ROUTER (ps-lite
    // src/zmq_van.h): what it accepted only brings data in. Counted as a group, the
    // scheduler's connection into a server took the whole model while the server had no
    // iteration behind it, on a link the server never sends on.
    let zmq_van = p.conns.iter().any(to_ps_scheduler);
    for c in &p.conns {
        if to_ps_scheduler(c) {
            sched += 1;
            continue;
        }
        let Some(remote) = fabric.topo().host_by_ip(c.remote.ip()) else {
            unknown += 1;
            continue;
        };
        if remote == fabric.me() {
            local += 1;
            continue;
        }
        let keys = sockets
            .by_tuple
            .get(&(canonical(c.local), canonical(c.remote)))
            .map(TupleKeys::as_slice);
        if c.accepted && (zmq_van || (role == FlowRole::Ring && !sends_data(keys, sockets))) {
            inbound += 1;
            continue;
        }
        let g = groups.entry(remote).or_default();
        g.1 += 1;
        if let Some(keys) = keys {
            g.0.extend_from_slice(keys);
        }
    }
    let note = Note::Grouped(GroupCounts {
        groups: groups.len(),
        role,
        conns: p.conns.len(),
        unknown,
        local,
        inbound,
        sched,
    });
    (groups, note)
}

/// Why a process's connections group as they do, or why they do not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    Grouped(GroupCounts),
    Text(String),
}

/// A process's connections: how many groups they made and how many were skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCounts {
    groups: usize,
    role: FlowRole,
    conns: usize,
    unknown: usize,
    local: usize,
    inbound: usize,
    sched: usize,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = match self {
            Note::Text(t) => return f.write_str(t),
            Note::Grouped(c) => c,
        };
        write!(
            f,
            "{} {} group(s) from {} connection(s); skipped {} to hosts outside the topology, \
             {} intra-host, {} inbound only (a ring's, or accepted under PS-Lite's ZMQ), {} to \
             the PS scheduler",
            c.groups,
            c.role.as_str(),
            c.conns,
            c.unknown,
            c.local,
            c.inbound,
            c.sched
        )
    }
}

/// Bytes an accepted connection of a ring job must have carried out before it counts as one
/// the process sends over: more than a connection handshake or a rendezvous store's replies.
const ACCEPTED_SENDS_DATA: u64 = 64 * 1024;

/// Whether an accepted connection of a ring job carries the job's data out. A ring of our
/// trainer, NCCL's socket transport or PS-Lite sends only over the connections it opened; what
/// it accepted brings data in. Gloo opens one connection per pair of ranks, from whichever side
/// its address order picks, and sends both ways over it (gloo/transport/tcp/pair.cc): rank r's
/// ring sends to rank r-1, over a connection r may have accepted. Skipped, half of a Gloo
/// ring's flows went unscheduled.
fn sends_data(keys: Option<&[SocketKey]>, sockets: &Sockets) -> bool {
    keys.is_some_and(|k| sockets.acked(k) > ACCEPTED_SENDS_DATA)
}

/// One group's spec from what its processes contribute.
fn merge(
    job: &str,
    role: FlowRole,
    dst: NodeId,
    mut cs: Vec<Contribution>,
    slot: Slot,
    tau_ns: u64,
) -> FlowSpec<'_> {
    // One process (the usual group) hands its sockets over; several pool theirs.
    let mut sockets = match cs.as_mut_slice() {
        [one] => std::mem::take(&mut one.sockets),
        all => all.iter().flat_map(|c| c.sockets.iter().copied()).collect(),
    };
    sockets.sort();
    sockets.dedup();
    let start_ns = cs.iter().map(|c| c.iteration_start_ns).max().unwrap_or(0);
    let last_iteration: f64 = cs.iter().map(|c| c.last_iteration_bytes).sum();
    FlowSpec {
        source: match Label::of_job(job) {
            Some(_) => Source::Learned,
            None => Source::Progress,
        },
        job: Cow::Borrowed(job),
        role,
        dst,
        sockets,
        conns: cs.iter().map(|c| c.conns).sum(),
        expected: cs.iter().map(|c| c.expected).sum(),
        expected_from: cs.first().map_or("unknown", |c| c.expected_from),
        sent_share: Some(cs.iter().map(|c| c.sent_share).sum()),
        iteration: Some(cs.iter().map(|c| c.iteration).max().unwrap_or(0)),
        start: if start_ns > 0 {
            Slot(start_ns / tau_ns.max(1))
        } else {
            slot
        },
        slack: cs.iter().map(|c| c.slack).fold(0.0, f64::max),
        last_iteration_bytes: last_iteration as u64,
        job_bytes: cs.iter().map(|c| c.model_bytes).max().unwrap_or(0),
        job_total_iterations: cs.iter().map(|c| c.total_iterations).max().unwrap_or(0),
    }
}

/// An admin group's spec: the bytes `mlccctl job add` gave, over the sockets it took.
fn admin_spec(
    g: &FlowGroup,
    dst: NodeId,
    sockets: Vec<SocketKey>,
    slot: Slot,
) -> FlowSpec<'static> {
    FlowSpec {
        job: Cow::Owned(g.job.clone()),
        role: g.role,
        dst,
        source: Source::Admin,
        conns: sockets.len(),
        sockets,
        expected: g.bytes_per_iteration.as_f64(),
        expected_from: "mlccctl job add",
        sent_share: None,
        iteration: None,
        start: slot,
        slack: g.slack_bytes.as_f64(),
        last_iteration_bytes: 0,
        job_bytes: g.bytes_per_iteration.as_f64() as u64,
        job_total_iterations: 0,
    }
}
