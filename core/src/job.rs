//! Jobs, their flow groups and the dependencies between them (DESIGN.md §5).
//!
//! A flow group is all of one job's traffic from one host to another in one role; NCCL and
//! PS-Lite spread a transfer evenly over their sockets, so the group is what gets one rate.
//! Traffic between processes on the same host never touches the network and is not scheduled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::flow::{FlowId, FlowRole};
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
        let workers = self.members_of(Role::Worker);
        if workers.is_empty() {
            return Err(JobError::NoWorkers(self.id.clone()));
        }
        let m = self.model_bytes.0 as u128;
        // (src, dst, role) → bytes; BTreeMap keeps the output deterministic.
        let mut pairs: BTreeMap<(String, String, FlowRole), u128> = BTreeMap::new();
        let mut add = |src: &str, dst: &str, role: FlowRole, bytes: u128| {
            if src != dst {
                *pairs
                    .entry((src.to_string(), dst.to_string(), role))
                    .or_default() += bytes;
            }
        };
        let slack = match self.arch {
            Arch::Allreduce => {
                let n = workers.len() as u128;
                if n < 2 {
                    return Err(JobError::RingTooSmall(self.id.clone()));
                }
                let per_flow = 2 * (n - 1) * m / n;
                for (i, w) in workers.iter().enumerate() {
                    let next = workers[(i + 1) % workers.len()];
                    add(&w.host, &next.host, FlowRole::Ring, per_flow);
                }
                (m / n) as u64
            }
            Arch::Ps => {
                let servers = self.members_of(Role::Server);
                if servers.is_empty() {
                    return Err(JobError::NoServers(self.id.clone()));
                }
                let per_flow = m / servers.len() as u128;
                for w in &workers {
                    for p in &servers {
                        add(&w.host, &p.host, FlowRole::Agg, per_flow);
                        add(&p.host, &w.host, FlowRole::Bcast, per_flow);
                    }
                }
                0
            }
        };
        let ids: Vec<(FlowId, &(String, String, FlowRole))> = pairs
            .keys()
            .map(|k| (FlowId::for_group(&self.id, &k.0, &k.1, k.2), k))
            .collect();
        let mut groups: Vec<FlowGroup> = ids
            .iter()
            .map(|(id, (src, dst, role))| {
                let upstream = ids
                    .iter()
                    .filter(|(_, (s2, d2, r2))| match role {
                        // Broadcast flows leaving the PS this flow feeds.
                        FlowRole::Agg => *r2 == FlowRole::Bcast && s2 == dst,
                        // Aggregation flows arriving at the PS this flow leaves.
                        FlowRole::Bcast => *r2 == FlowRole::Agg && d2 == src,
                        // Ring flows arriving at this flow's sender.
                        FlowRole::Ring => *r2 == FlowRole::Ring && d2 == src,
                    })
                    .map(|(id2, _)| id2.clone())
                    .collect();
                FlowGroup {
                    id: id.clone(),
                    job: self.id.clone(),
                    src: src.clone(),
                    dst: dst.clone(),
                    role: *role,
                    bytes_per_iteration: Bytes(
                        pairs[&(src.clone(), dst.clone(), *role)].min(u64::MAX as u128) as u64,
                    ),
                    upstream,
                    slack_bytes: Bytes(slack),
                }
            })
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(groups)
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
