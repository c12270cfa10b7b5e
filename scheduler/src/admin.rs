//! The Admin service mlccctl talks to over the daemon's Unix socket: a read-only view of the
//! scheduler's state plus `job add/remove`.

use std::collections::BTreeMap;
use std::sync::Arc;

use mlcc_core::flow::FlowRole;
use mlcc_core::job::{Arch, Job, Member, Role};
use mlcc_core::{Bytes, FeedbackMode, Slot};
use mlcc_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::host::Source;
use crate::state::Shared;

pub struct AdminService(Arc<Shared>);

impl AdminService {
    pub fn new(shared: Arc<Shared>) -> Self {
        AdminService(shared)
    }
}

fn flow_role(r: FlowRole) -> i32 {
    match r {
        FlowRole::Agg => pb::FlowRole::Agg as i32,
        FlowRole::Bcast => pb::FlowRole::Bcast as i32,
        FlowRole::Ring => pb::FlowRole::Ring as i32,
    }
}

fn arch_to_pb(a: Arch) -> i32 {
    match a {
        Arch::Allreduce => pb::Architecture::Allreduce as i32,
        Arch::Ps => pb::Architecture::Ps as i32,
    }
}

fn role_to_pb(r: Role) -> i32 {
    match r {
        Role::Worker => pb::Role::Worker as i32,
        Role::Server => pb::Role::Server as i32,
        Role::Scheduler => pb::Role::Scheduler as i32,
    }
}

/// Converts an AddJob request into a core job, saying what is wrong.
pub fn job_from_pb(j: &pb::Job) -> Result<Job, String> {
    let arch = match pb::Architecture::try_from(j.architecture) {
        Ok(pb::Architecture::Allreduce) => Arch::Allreduce,
        Ok(pb::Architecture::Ps) => Arch::Ps,
        _ => return Err("architecture must be allreduce or ps".into()),
    };
    let members = j
        .members
        .iter()
        .map(|m| {
            let role = match pb::Role::try_from(m.role) {
                Ok(pb::Role::Worker) => Role::Worker,
                Ok(pb::Role::Server) => Role::Server,
                Ok(pb::Role::Scheduler) => Role::Scheduler,
                _ => return Err(format!("member on {}: role must be set", m.host)),
            };
            Ok(Member {
                host: m.host.clone(),
                role,
                rank: m.rank,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Job {
        id: j.job_id.clone(),
        arch,
        members,
        model_bytes: Bytes(j.model_bytes),
    })
}

pub fn job_to_pb(j: &Job, source: &str) -> pb::Job {
    pb::Job {
        job_id: j.id.clone(),
        architecture: arch_to_pb(j.arch),
        members: j
            .members
            .iter()
            .map(|m| pb::JobMember {
                host: m.host.clone(),
                role: role_to_pb(m.role),
                rank: m.rank,
            })
            .collect(),
        model_bytes: j.model_bytes.0,
        source: source.into(),
        iteration: 0,
        last_iteration_bytes: 0,
        total_iterations: 0,
    }
}

fn p99(v: &std::collections::VecDeque<std::time::Duration>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mut s: Vec<u128> = v.iter().map(|d| d.as_nanos()).collect();
    s.sort_unstable();
    let i = ((s.len() as f64 * 0.99).ceil() as usize).clamp(1, s.len()) - 1;
    s[i] as u64
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn status(
        &self,
        _: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let (host, slot, slots, mode, flows, jobs) = {
            let h = self.0.host();
            let mut jobs: Vec<String> = h.flows().map(|f| f.job.clone()).collect();
            jobs.extend(h.admin_jobs().map(|j| j.id.clone()));
            jobs.sort();
            jobs.dedup();
            (
                h.config().host.clone(),
                h.slot(),
                h.config().policy.slots,
                h.config().policy.mode,
                h.flows().count(),
                jobs.len(),
            )
        };
        let st = self.0.status();
        Ok(Response::new(pb::StatusReply {
            host,
            version: env!("CARGO_PKG_VERSION").into(),
            slot: slot.0,
            slot_ns: slots.tau_ns(),
            horizon: slots.horizon() as u32,
            feedback_mode: match mode {
                FeedbackMode::AllOthers => pb::FeedbackMode::AllOthers as i32,
                FeedbackMode::Precedence => pb::FeedbackMode::Precedence as i32,
            },
            jobs: jobs as u32,
            flows: flows as u32,
            last_slot_work_ns: st.last_work.as_nanos() as u64,
            p99_slot_work_ns: p99(&st.recent_work),
            degraded: st.degraded.clone(),
            uptime_secs: self.0.started.elapsed().as_secs(),
        }))
    }

    async fn list_jobs(
        &self,
        _: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsReply>, Status> {
        let h = self.0.host();
        let mut jobs: BTreeMap<String, pb::Job> = BTreeMap::new();
        for j in h.admin_jobs() {
            jobs.insert(j.id.clone(), job_to_pb(j, "admin"));
        }
        for f in h.flows() {
            if f.source != Source::Admin {
                let e = jobs.entry(f.job.clone()).or_insert_with(|| pb::Job {
                    job_id: f.job.clone(),
                    source: "progress".into(),
                    ..Default::default()
                });
                e.architecture = match f.role {
                    FlowRole::Ring => pb::Architecture::Allreduce as i32,
                    _ => pb::Architecture::Ps as i32,
                };
                e.iteration = e.iteration.max(f.iteration);
                // This host's outgoing bytes of the job's last complete iteration.
                e.last_iteration_bytes += f.last_iteration_bytes;
            }
        }
        drop(h);
        let me = self.0.host().config().host.clone();
        for p in &self.0.status().local_processes {
            let e = jobs.entry(p.job_id.clone()).or_insert_with(|| pb::Job {
                job_id: p.job_id.clone(),
                source: "progress".into(),
                ..Default::default()
            });
            if let Some(a) = p.arch {
                e.architecture = arch_to_pb(a);
            }
            e.model_bytes = e.model_bytes.max(p.model_bytes);
            e.total_iterations = e.total_iterations.max(p.total_iterations);
            let m = pb::JobMember {
                host: me.clone(),
                role: role_to_pb(p.role),
                rank: p.rank,
            };
            if !e.members.contains(&m) {
                e.members.push(m);
            }
        }
        for l in &self.0.status().learned {
            let e = jobs.entry(l.job_id.clone()).or_insert_with(|| pb::Job {
                job_id: l.job_id.clone(),
                architecture: pb::Architecture::Allreduce as i32,
                ..Default::default()
            });
            e.source = l.source();
            e.iteration = e.iteration.max(l.iteration.unwrap_or(0));
            e.total_iterations = e.total_iterations.max(l.total_iterations.unwrap_or(0));
            let m = pb::JobMember {
                host: me.clone(),
                role: role_to_pb(mlcc_core::job::Role::Worker),
                rank: 0,
            };
            if !e.members.contains(&m) {
                e.members.push(m);
            }
        }
        Ok(Response::new(pb::ListJobsReply {
            jobs: jobs.into_values().collect(),
        }))
    }

    async fn list_flows(
        &self,
        req: Request<pb::ListFlowsRequest>,
    ) -> Result<Response<pb::ListFlowsReply>, Status> {
        let job = req.into_inner().job_id;
        let h = self.0.host();
        let me = h.config().host.clone();
        let flows = h
            .flows()
            .filter(|f| job.is_empty() || f.job == job)
            .map(|f| {
                let d = f.decision.as_ref();
                pb::FlowStatus {
                    flow_id: f.id.to_string(),
                    job_id: f.job.clone(),
                    role: flow_role(f.role),
                    src_host: me.clone(),
                    dst_host: f.dst_host.clone(),
                    path: f.path_names.clone(),
                    planned_rate_bytes_per_sec: f.last_rate(),
                    achieved_rate_bytes_per_sec: f.achieved.unwrap_or(0.0),
                    sent_bytes: f.sent_bytes as u64,
                    finish_bytes: d.map_or(0, |d| d.progress as u64),
                    achievable_rate_bytes_per_sec: d.map_or(0.0, |d| d.achievable),
                    remaining_bytes: f.remaining_bytes.map_or(0, |r| r as u64),
                    plan_first_slot: h.slot().0,
                    plan_bytes_per_sec: d.map(|d| d.plan.clone()).unwrap_or_default(),
                    rank: f.rank().0,
                    sockets: f.sockets.len() as u32,
                    app_backlog_bytes: f.app_backlog.map(|b| b as u64),
                    enforced_rate_bytes_per_sec: f.enforced_rate,
                    expected_bytes: f.expected_bytes.map_or(0, |e| e as u64),
                    retransmitted_segments: f.retransmits,
                    queue_loss_segments: f.queue_loss,
                }
            })
            .collect();
        Ok(Response::new(pb::ListFlowsReply {
            slot: h.slot().0,
            flows,
        }))
    }

    async fn list_links(
        &self,
        _: Request<pb::ListLinksRequest>,
    ) -> Result<Response<pb::ListLinksReply>, Status> {
        let h = self.0.host();
        let t = h.table();
        let now = h.slot();
        let k = t.horizon() as u64;
        let links = t
            .links()
            .map(|l| {
                let entries = t.entries(l).unwrap_or_default();
                pb::LinkTable {
                    link: h.topology().link(l).name.clone(),
                    capacity_bytes_per_sec: t.capacity(l).map_or(0.0, |c| c.0),
                    load_bytes_per_sec: (0..k)
                        .map(|i| t.load(l, Slot(now.0 + i)).unwrap_or(0.0))
                        .collect(),
                    max_recent_load_bytes_per_sec: t.max_recent_load(l).unwrap_or(0.0),
                    entry_count: entries.len() as u32,
                    entries: entries
                        .into_iter()
                        .map(|(id, e)| pb::TableEntry {
                            flow_id: id.to_string(),
                            publisher: e.publisher.clone(),
                            first_slot: e.first_slot.0,
                            rates_bytes_per_sec: e.rates.clone(),
                            rank: e.key.rank.0,
                            refreshed_slot: e.refreshed.0,
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Response::new(pb::ListLinksReply { slot: now.0, links }))
    }

    async fn list_switches(
        &self,
        _: Request<pb::ListSwitchesRequest>,
    ) -> Result<Response<pb::ListSwitchesReply>, Status> {
        let st = self.0.status();
        Ok(Response::new(pb::ListSwitchesReply {
            switches: st
                .switches
                .iter()
                .map(|(name, v)| pb::SwitchStatus {
                    switch_name: name.clone(),
                    address: v.address.clone(),
                    reachable: v.reachable(),
                    skew_slots: v.skew_slots,
                    skew_ns: v.skew_ns,
                    last_reply_slot: v.last_reply_slot,
                    failed_calls: v.failed_calls,
                    last_rtt_secs: v.last_rtt.as_secs_f64(),
                })
                .collect(),
        }))
    }

    async fn add_job(
        &self,
        req: Request<pb::AddJobRequest>,
    ) -> Result<Response<pb::AddJobReply>, Status> {
        let j = req
            .into_inner()
            .job
            .ok_or_else(|| Status::invalid_argument("no job given"))?;
        let job = job_from_pb(&j).map_err(Status::invalid_argument)?;
        let id = job.id.clone();
        self.0
            .host()
            .add_job(job)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::info!(job = %id, "job added by mlccctl");
        Ok(Response::new(pb::AddJobReply { job_id: id }))
    }

    async fn remove_job(
        &self,
        req: Request<pb::RemoveJobRequest>,
    ) -> Result<Response<pb::RemoveJobReply>, Status> {
        let id = req.into_inner().job_id;
        let removed = self.0.host().remove_job(&id);
        if removed {
            tracing::info!(job = %id, "job removed by mlccctl");
        }
        Ok(Response::new(pb::RemoveJobReply { removed }))
    }
}
