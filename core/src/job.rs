//! Jobs, their flow groups and the dependencies between them (docs/design.md §5).
//!
//! A flow group is all of one job's traffic from one host to another in one role; NCCL and
//! PS-Lite spread a transfer evenly over their sockets, so the group is what gets one rate.
//! Traffic between processes on the same host never touches the network and is not scheduled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dependency;
use crate::flow::{FlowId, FlowParts, FlowRole};
use crate::units::Bytes;

/// How a job synchronizes gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Ring all-reduce (NCCL, Horovod).
    Allreduce,
    /// Parameter server (PS-Lite, BytePS).
    Ps,
}

/// What a job member does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Worker,
    Server,
    /// PS-Lite's scheduler process: control traffic only, never scheduled.
    Scheduler,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub host: String,
    pub role: Role,
    pub rank: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub arch: Arch,
    pub members: Vec<Member>,
    /// M: bytes of the model (gradients per iteration); 0 when unknown.
    pub model_bytes: Bytes,
}

/// One scheduled flow group of a job and what it depends on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowGroup {
    pub id: FlowId,
    pub job: String,
    pub src: String,
    pub dst: String,
    pub role: FlowRole,
    /// Bytes the group carries per iteration (estimate from M; replaced by what is observed).
    pub bytes_per_iteration: Bytes,
    /// The flows whose progress this one follows in Alg. 2: for an aggregation flow the PS's
    /// broadcast flows, for a broadcast flow the PS's aggregation flows, for a ring flow the
    /// flow(s) into its sender.
    pub upstream: Vec<FlowId>,
    /// How far a ring flow may run ahead of its predecessor: one chunk M/N.
    pub slack_bytes: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("job {0}: no workers")]
    NoWorkers(String),
    #[error("job {0}: a ring needs at least 2 workers")]
    RingTooSmall(String),
    #[error("job {0}: a parameter-server job needs at least one server")]
    NoServers(String),
    #[error("job {job}: rank {rank} of role {role:?} appears twice")]
    DuplicateRank { job: String, role: Role, rank: u32 },
    #[error("job id: {0}")]
    BadId(String),
}

/// Bytes each flow of a ring all-reduce of `workers` carries per iteration of a `model`-byte
/// model: 2(N−1)/N·M (each of the N steps of reduce-scatter and all-gather moves a chunk M/N).
pub fn ring_flow_bytes(model: u64, workers: u64) -> u64 {
    let n = u128::from(workers.max(1));
    (2 * (n - 1) * u128::from(model) / n).min(u128::from(u64::MAX)) as u64
}

/// How far a ring flow may run ahead of its predecessor: one chunk M/N (each worker sends its
/// own chunk first). Where the ring's size is unknown (0: a learned job, whose `model` is the
/// bytes an iteration moves), the chunk of the smallest ring, half of it: at least any
/// larger ring's, so the dependency never holds a flow back further than its ring does.
pub fn ring_slack_bytes(model: u64, workers: u64) -> u64 {
    model / workers.max(2)
}

/// Bytes each worker pushes to, and pulls from, each of `servers` parameter servers per
/// iteration: M/P.
pub fn ps_flow_bytes(model: u64, servers: u64) -> u64 {
    model / servers.max(1)
}

/// How far a job is through its life, as the rank rules measure it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobProgress {
    /// M: the bytes one iteration moves (0: unknown).
    pub model_bytes: u64,
    /// Iterations completed.
    pub completed: u64,
    /// Iterations the job runs (0: it did not say).
    pub total: u64,
}

impl JobProgress {
    /// Bytes the job has moved in its completed iterations.
    pub fn attained_bytes(&self) -> Option<f64> {
        (self.model_bytes > 0).then_some(self.completed as f64 * self.model_bytes as f64)
    }

    /// Bytes the job still moves, the current iteration included, where it said how many
    /// iterations it runs.
    pub fn remaining_bytes(&self) -> Option<f64> {
        (self.model_bytes > 0 && self.total > 0)
            .then(|| self.total.saturating_sub(self.completed) as f64 * self.model_bytes as f64)
    }
}

/// A flow group's sending host, receiving host and role.
type HostPair = (String, String, FlowRole);

fn pair_parts<'a>(job: &'a str, (src, dst, role): &'a HostPair) -> FlowParts<'a> {
    FlowParts {
        job,
        src,
        dst,
        role: *role,
    }
}

impl Job {
    fn members_of(&self, role: Role) -> Vec<&Member> {
        let mut v: Vec<&Member> = self.members.iter().filter(|m| m.role == role).collect();
        v.sort_by_key(|m| m.rank);
        v
    }

    fn validate(&self) -> Result<(), JobError> {
        if self.id.is_empty() || self.id.len() > 63 || self.id.contains(['/', '>']) {
            return Err(JobError::BadId(format!(
                "{:?} must be 1..=63 bytes without '/' or '>'",
                self.id
            )));
        }
        for role in [Role::Worker, Role::Server] {
            let ms = self.members_of(role);
            for w in ms.windows(2) {
                if w[0].rank == w[1].rank {
                    return Err(JobError::DuplicateRank {
                        job: self.id.clone(),
                        role,
                        rank: w[0].rank,
                    });
                }
            }
        }
        Ok(())
    }

    /// The job's scheduled flow groups, in a stable order (by id).
    pub fn flow_groups(&self) -> Result<Vec<FlowGroup>, JobError> {
        self.validate()?;
        let (pairs, slack) = self.host_pairs()?;
        let parts = |k| pair_parts(&self.id, k);
        let mut groups: Vec<FlowGroup> = pairs
            .iter()
            .map(|(k, &bytes)| {
                let upstream = dependency::upstream(
                    &parts(k),
                    pairs
                        .keys()
                        .map(|k2| (parts(k2), FlowId::for_group(&self.id, &k2.0, &k2.1, k2.2))),
                );
                let (src, dst, role) = k.clone();
                FlowGroup {
                    id: FlowId::for_group(&self.id, &src, &dst, role),
                    job: self.id.clone(),
                    src,
                    dst,
                    role,
                    bytes_per_iteration: Bytes(bytes.min(u128::from(u64::MAX)) as u64),
                    upstream,
                    slack_bytes: Bytes(slack),
                }
            })
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(groups)
    }

    /// Bytes per iteration per (src, dst, role) between distinct hosts (members on one host
    /// merge), and a ring flow's slack.
    fn host_pairs(&self) -> Result<(BTreeMap<HostPair, u128>, u64), JobError> {
        let workers = self.members_of(Role::Worker);
        if workers.is_empty() {
            return Err(JobError::NoWorkers(self.id.clone()));
        }
        let m = self.model_bytes.0;
        // BTreeMap keeps the output deterministic.
        let mut pairs: BTreeMap<HostPair, u128> = BTreeMap::new();
        let mut add = |src: &str, dst: &str, role: FlowRole, bytes: u64| {
            if src != dst {
                *pairs
                    .entry((src.to_string(), dst.to_string(), role))
                    .or_default() += u128::from(bytes);
            }
        };
        let slack = match self.arch {
            Arch::Allreduce => {
                let n = workers.len() as u64;
                if n < 2 {
                    return Err(JobError::RingTooSmall(self.id.clone()));
                }
                for (i, w) in workers.iter().enumerate() {
                    let next = workers[(i + 1) % workers.len()];
                    add(&w.host, &next.host, FlowRole::Ring, ring_flow_bytes(m, n));
                }
                ring_slack_bytes(m, n)
            }
            Arch::Ps => {
                let servers = self.members_of(Role::Server);
                if servers.is_empty() {
                    return Err(JobError::NoServers(self.id.clone()));
                }
                let per_flow = ps_flow_bytes(m, servers.len() as u64);
                for w in &workers {
                    for p in &servers {
                        add(&w.host, &p.host, FlowRole::Agg, per_flow);
                        add(&p.host, &w.host, FlowRole::Bcast, per_flow);
                    }
                }
                0
            }
        };
        Ok((pairs, slack))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(host: &str, role: Role, rank: u32) -> Member {
        Member {
            host: host.into(),
            role,
            rank,
        }
    }

    fn ids(v: &[FlowId]) -> Vec<&str> {
        v.iter().map(FlowId::as_str).collect()
    }

    #[test]
    fn ring_of_three_has_three_flows_with_predecessors() {
        let job = Job {
            id: "r".into(),
            arch: Arch::Allreduce,
            members: vec![
                member("h3", Role::Worker, 2),
                member("h1", Role::Worker, 0),
                member("h2", Role::Worker, 1),
            ],
            model_bytes: Bytes(300),
        };
        let g = job.flow_groups().unwrap();
        assert_eq!(g.len(), 3);
        let f12 = g.iter().find(|f| f.id.as_str() == "r/h1>h2/ring").unwrap();
        // 2(N−1)/N·M = 2·2/3·300 = 400 bytes; slack one chunk M/N = 100.
        assert_eq!(f12.bytes_per_iteration, Bytes(400));
        assert_eq!(f12.slack_bytes, Bytes(100));
        assert_eq!(ids(&f12.upstream), vec!["r/h3>h1/ring"]);
    }

    #[test]
    fn ps_flows_depend_across_the_server() {
        // 2 workers, 2 servers on four hosts: M/P = 50 per flow.
        let job = Job {
            id: "p".into(),
            arch: Arch::Ps,
            members: vec![
                member("w1", Role::Worker, 0),
                member("w2", Role::Worker, 1),
                member("s1", Role::Server, 0),
                member("s2", Role::Server, 1),
                member("w1", Role::Scheduler, 0),
            ],
            model_bytes: Bytes(100),
        };
        let g = job.flow_groups().unwrap();
        assert_eq!(g.len(), 8);
        let agg = g.iter().find(|f| f.id.as_str() == "p/w1>s1/agg").unwrap();
        assert_eq!(agg.bytes_per_iteration, Bytes(50));
        assert_eq!(ids(&agg.upstream), vec!["p/s1>w1/bcast", "p/s1>w2/bcast"]);
        let bc = g.iter().find(|f| f.id.as_str() == "p/s2>w2/bcast").unwrap();
        assert_eq!(ids(&bc.upstream), vec!["p/w1>s2/agg", "p/w2>s2/agg"]);
    }

    #[test]
    fn co_located_members_merge_and_intra_host_is_dropped() {
        // Worker 0 and the server share host a: only b's flows cross the network.
        let job = Job {
            id: "p".into(),
            arch: Arch::Ps,
            members: vec![
                member("a", Role::Worker, 0),
                member("b", Role::Worker, 1),
                member("b", Role::Worker, 2),
                member("a", Role::Server, 0),
            ],
            model_bytes: Bytes(100),
        };
        let g = job.flow_groups().unwrap();
        assert_eq!(
            g.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            vec!["p/a>b/bcast", "p/b>a/agg"]
        );
        // Two workers on b → the group carries both: 2·M/P.
        assert!(g.iter().all(|f| f.bytes_per_iteration == Bytes(200)));
    }

    #[test]
    fn bad_jobs_are_refused_with_the_job_named() {
        let mut job = Job {
            id: "bad".into(),
            arch: Arch::Allreduce,
            members: vec![member("a", Role::Worker, 0)],
            model_bytes: Bytes(1),
        };
        assert_eq!(
            job.flow_groups().unwrap_err(),
            JobError::RingTooSmall("bad".into())
        );
        job.arch = Arch::Ps;
        assert_eq!(
            job.flow_groups().unwrap_err(),
            JobError::NoServers("bad".into())
        );
        job.members.push(member("b", Role::Worker, 0));
        assert!(matches!(
            job.flow_groups().unwrap_err(),
            JobError::DuplicateRank { rank: 0, .. }
        ));
        job.id = "a/b".into();
        assert!(matches!(job.flow_groups(), Err(JobError::BadId(_))));
    }
}
