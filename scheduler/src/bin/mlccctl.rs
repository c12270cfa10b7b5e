//! mlccctl: the operator CLI of mlccd, over its Admin service on a Unix socket (docs/design.md §10).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use mlcc_core::units::{parse_bytes, parse_duration};
use mlcc_proto::v1 as pb;
use mlcc_proto::v1::admin_client::AdminClient;
use mlcc_scheduler::config::DEFAULT_ADMIN_SOCKET;
use serde_json::{Value, json};
use tonic::transport::Channel;

#[derive(Parser, Debug)]
#[command(name = "mlccctl", version, about = "Inspect and steer the local mlccd")]
struct Cli {
    /// mlccd's Admin socket.
    #[arg(long, env = "MLCC_ADMIN_SOCKET", default_value = DEFAULT_ADMIN_SOCKET)]
    socket: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Slot, work per slot, degraded modes.
    Status,
    /// Jobs known from progress files and from `job add`.
    Jobs,
    /// Local flows: planned vs achieved rate, S/F/B, plan.
    Flows {
        /// Only this job's flows.
        #[arg(long)]
        job: Option<String>,
    },
    /// This host's own links (uplinks) and their bookings.
    Links,
    /// Switches on active paths: reachability, clock skew, RTT.
    Switches,
    /// Jobs whose library writes no progress files.
    Job {
        #[command(subcommand)]
        cmd: JobCmd,
    },
    /// Flows by planned rate, refreshed until interrupted.
    Top {
        /// Refresh period, e.g. 1s or 500ms.
        #[arg(long, default_value = "1s", value_parser = parse_dur)]
        interval: Duration,
        /// Stop after this many refreshes (0: never).
        #[arg(long, default_value_t = 0)]
        count: u64,
    },
}

#[derive(Subcommand, Debug)]
enum JobCmd {
    /// Adds (or replaces) a job: mlccctl job add ID --arch ps --model 1.2GB --member h1:worker:0 ...
    Add {
        id: String,
        #[arg(long, value_enum)]
        arch: ArchArg,
        /// Model bytes M, e.g. 1.2GB.
        #[arg(long, value_parser = parse_size)]
        model: u64,
        /// HOST:ROLE:RANK, ROLE one of worker, server, scheduler; repeat per member.
        #[arg(long = "member", required = true, value_parser = parse_member)]
        members: Vec<pb::JobMember>,
    },
    /// Forgets a job added with `job add`.
    Remove { id: String },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ArchArg {
    Allreduce,
    Ps,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn parse_size(s: &str) -> Result<u64, String> {
    parse_bytes(s).map(|b| b.0).map_err(|e| e.to_string())
}

fn parse_member(s: &str) -> Result<pb::JobMember, String> {
    let mut it = s.split(':');
    let (Some(host), Some(role), Some(rank), None) = (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(format!("{s:?}: expected HOST:ROLE:RANK, e.g. h1:worker:0"));
    };
    let role = match role {
        "worker" => pb::Role::Worker,
        "server" => pb::Role::Server,
        "scheduler" => pb::Role::Scheduler,
        r => return Err(format!("{r:?}: role is worker, server or scheduler")),
    };
    let rank = rank
        .parse()
        .map_err(|_| format!("{rank:?}: rank is a number"))?;
    Ok(pb::JobMember {
        host: host.to_string(),
        role: role as i32,
        rank,
    })
}

async fn connect(path: PathBuf) -> Result<AdminClient<Channel>, String> {
    let p = path.clone();
    // The URI is required by the API and ignored by the connector.
    let ch = tonic::transport::Endpoint::from_static("http://mlccd.admin")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let p = p.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(p).await?,
                ))
            }
        }))
        .await
        .map_err(|e| {
            format!(
                "cannot reach mlccd at {}: {e} (is it running? --socket / MLCC_ADMIN_SOCKET)",
                path.display()
            )
        })?;
    Ok(AdminClient::new(ch))
}

fn mbit(bytes_per_sec: f64) -> String {
    format!("{:.1}", bytes_per_sec * 8.0 / 1e6)
}

fn arch_name(a: i32) -> &'static str {
    match pb::Architecture::try_from(a) {
        Ok(pb::Architecture::Allreduce) => "allreduce",
        Ok(pb::Architecture::Ps) => "ps",
        _ => "?",
    }
}

fn role_name(r: i32) -> &'static str {
    match pb::Role::try_from(r) {
        Ok(pb::Role::Worker) => "worker",
        Ok(pb::Role::Server) => "server",
        Ok(pb::Role::Scheduler) => "scheduler",
        _ => "?",
    }
}

fn flow_role_name(r: i32) -> &'static str {
    match pb::FlowRole::try_from(r) {
        Ok(pb::FlowRole::Agg) => "agg",
        Ok(pb::FlowRole::Bcast) => "bcast",
        Ok(pb::FlowRole::Ring) => "ring",
        _ => "?",
    }
}

fn status_json(s: &pb::StatusReply) -> Value {
    json!({
        "host": s.host, "version": s.version, "slot": s.slot, "slot_ns": s.slot_ns,
        "horizon": s.horizon, "jobs": s.jobs, "flows": s.flows,
        "last_slot_work_ns": s.last_slot_work_ns, "p99_slot_work_ns": s.p99_slot_work_ns,
        "degraded": s.degraded, "uptime_secs": s.uptime_secs,
    })
}

fn flow_json(f: &pb::FlowStatus) -> Value {
    json!({
        "flow_id": f.flow_id, "job_id": f.job_id, "role": flow_role_name(f.role),
        "src_host": f.src_host, "dst_host": f.dst_host, "path": f.path,
        "planned_rate_bytes_per_sec": f.planned_rate_bytes_per_sec,
        "achieved_rate_bytes_per_sec": f.achieved_rate_bytes_per_sec,
        "sent_bytes": f.sent_bytes, "finish_bytes": f.finish_bytes,
        "achievable_rate_bytes_per_sec": f.achievable_rate_bytes_per_sec,
        "remaining_bytes": f.remaining_bytes, "plan_first_slot": f.plan_first_slot,
        "plan_bytes_per_sec": f.plan_bytes_per_sec,
        "rank": f.rank, "sockets": f.sockets,
        "app_backlog_bytes": f.app_backlog_bytes,
        "enforced_rate_bytes_per_sec": f.enforced_rate_bytes_per_sec,
        "expected_bytes": f.expected_bytes,
        "retransmitted_segments": f.retransmitted_segments,
        "queue_loss_segments": f.queue_loss_segments,
    })
}

fn print_flows(slot: u64, flows: &mut [pb::FlowStatus]) {
    flows.sort_by(|a, b| {
        b.planned_rate_bytes_per_sec
            .total_cmp(&a.planned_rate_bytes_per_sec)
    });
    println!("slot {slot}, {} flow(s); rates in Mbit/s", flows.len());
    println!(
        "{:<32} {:>5} {:>9} {:>9} {:>9} {:>12} {:>12} {:>4} {:>8} {:>8}",
        "FLOW",
        "ROLE",
        "PLANNED",
        "ACHIEVED",
        "B_f",
        "SENT",
        "REMAINING",
        "SOCK",
        "RETRANS",
        "Q-LOSS"
    );
    for f in flows.iter() {
        println!(
            "{:<32} {:>5} {:>9} {:>9} {:>9} {:>12} {:>12} {:>4} {:>8} {:>8}",
            f.flow_id,
            flow_role_name(f.role),
            mbit(f.planned_rate_bytes_per_sec),
            mbit(f.achieved_rate_bytes_per_sec),
            mbit(f.achievable_rate_bytes_per_sec),
            f.sent_bytes,
            f.remaining_bytes,
            f.sockets,
            f.retransmitted_segments,
            f.queue_loss_segments
        );
    }
}

/// The admin client and how to print: what every command takes.
struct Ctl {
    c: AdminClient<Channel>,
    json: bool,
}

fn rpc_error(e: tonic::Status) -> String {
    format!("mlccd: {}", e.message())
}

async fn run(cli: Cli) -> Result<(), String> {
    let c = connect(cli.socket.clone()).await?;
    let ctl = &mut Ctl { c, json: cli.json };
    match cli.cmd {
        Cmd::Status => status(ctl).await,
        Cmd::Jobs => jobs(ctl).await,
        Cmd::Flows { job } => flows(ctl, job).await,
        Cmd::Links => links(ctl).await,
        Cmd::Switches => switches(ctl).await,
        Cmd::Job {
            cmd:
                JobCmd::Add {
                    id,
                    arch,
                    model,
                    members,
                },
        } => job_add(ctl, id, arch, model, members).await,
        Cmd::Job {
            cmd: JobCmd::Remove { id },
        } => job_remove(ctl, id).await,
        Cmd::Top { interval, count } => top(ctl, interval, count).await,
    }
}

async fn status(ctl: &mut Ctl) -> Result<(), String> {
    let s = ctl
        .c
        .status(pb::StatusRequest {})
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        println!("{}", status_json(&s));
    } else {
        println!("host      {} (mlccd {})", s.host, s.version);
        println!(
            "slot      {} (τ = {} ms, K = {})",
            s.slot,
            s.slot_ns / 1_000_000,
            s.horizon
        );
        println!("jobs      {}   flows {}", s.jobs, s.flows);
        println!(
            "work/slot {:.2} ms last, {:.2} ms p99 (1 min)",
            s.last_slot_work_ns as f64 / 1e6,
            s.p99_slot_work_ns as f64 / 1e6
        );
        println!("uptime    {} s", s.uptime_secs);
        if s.degraded.is_empty() {
            println!("degraded  none");
        }
        for d in &s.degraded {
            println!("degraded  {d}");
        }
    }
    Ok(())
}

async fn jobs(ctl: &mut Ctl) -> Result<(), String> {
    let r = ctl
        .c
        .list_jobs(pb::ListJobsRequest {})
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        let v: Vec<Value> = r
            .jobs
            .iter()
            .map(|j| {
                json!({
                    "job_id": j.job_id, "architecture": arch_name(j.architecture),
                    "model_bytes": j.model_bytes, "source": j.source,
                    "iteration": j.iteration, "last_iteration_bytes": j.last_iteration_bytes,
                    "total_iterations": j.total_iterations,
                    "members": j.members.iter().map(|m| json!({
                        "host": m.host, "role": role_name(m.role), "rank": m.rank,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", Value::Array(v));
    } else {
        println!(
            "{:<24} {:<9} {:>14} {:<8} {:>9} MEMBERS",
            "JOB", "ARCH", "MODEL_BYTES", "SOURCE", "ITERATION"
        );
        for j in &r.jobs {
            let members: Vec<String> = j
                .members
                .iter()
                .map(|m| format!("{}:{}:{}", m.host, role_name(m.role), m.rank))
                .collect();
            // Of how many, where the job says (its header, or a learned process's environment).
            let iteration = match j.total_iterations {
                0 => j.iteration.to_string(),
                n => format!("{}/{n}", j.iteration),
            };
            println!(
                "{:<24} {:<9} {:>14} {:<8} {:>9} {}",
                j.job_id,
                arch_name(j.architecture),
                j.model_bytes,
                j.source,
                iteration,
                members.join(" ")
            );
        }
    }
    Ok(())
}

async fn flows(ctl: &mut Ctl, job: Option<String>) -> Result<(), String> {
    let mut r = ctl
        .c
        .list_flows(pb::ListFlowsRequest {
            job_id: job.unwrap_or_default(),
        })
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        let v: Vec<Value> = r.flows.iter().map(flow_json).collect();
        println!("{}", json!({"slot": r.slot, "flows": v}));
    } else {
        print_flows(r.slot, &mut r.flows);
    }
    Ok(())
}

async fn links(ctl: &mut Ctl) -> Result<(), String> {
    let r = ctl
        .c
        .list_links(pb::ListLinksRequest {})
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        let v: Vec<Value> = r
            .links
            .iter()
            .map(|l| {
                json!({
                    "link": l.link, "capacity_bytes_per_sec": l.capacity_bytes_per_sec,
                    "load_bytes_per_sec": l.load_bytes_per_sec,
                    "max_recent_load_bytes_per_sec": l.max_recent_load_bytes_per_sec,
                    "entry_count": l.entry_count,
                })
            })
            .collect();
        println!("{}", json!({"slot": r.slot, "links": v}));
    } else {
        println!("slot {}; loads in Mbit/s for the next K slots", r.slot);
        for l in &r.links {
            let loads: Vec<String> = l.load_bytes_per_sec.iter().map(|x| mbit(*x)).collect();
            println!(
                "{:<20} cap {:>8} entries {:>3} recent max {:>8}  [{}]",
                l.link,
                mbit(l.capacity_bytes_per_sec),
                l.entry_count,
                mbit(l.max_recent_load_bytes_per_sec),
                loads.join(" ")
            );
        }
    }
    Ok(())
}

async fn switches(ctl: &mut Ctl) -> Result<(), String> {
    let r = ctl
        .c
        .list_switches(pb::ListSwitchesRequest {})
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        let v: Vec<Value> = r
            .switches
            .iter()
            .map(|s| {
                json!({
                    "switch": s.switch_name, "address": s.address, "reachable": s.reachable,
                    "skew_slots": s.skew_slots, "skew_ns": s.skew_ns,
                    "last_reply_slot": s.last_reply_slot, "failed_calls": s.failed_calls,
                    "last_rtt_secs": s.last_rtt_secs,
                })
            })
            .collect();
        println!("{}", Value::Array(v));
    } else {
        println!(
            "{:<16} {:<22} {:<9} {:>5} {:>8} {:>9}",
            "SWITCH", "ADDRESS", "REACHABLE", "SKEW", "FAILED", "RTT_MS"
        );
        for s in &r.switches {
            println!(
                "{:<16} {:<22} {:<9} {:>5} {:>8} {:>9.2}",
                s.switch_name,
                s.address,
                if s.reachable { "yes" } else { "NO" },
                s.skew_slots,
                s.failed_calls,
                s.last_rtt_secs * 1e3
            );
        }
    }
    Ok(())
}

async fn job_add(
    ctl: &mut Ctl,
    id: String,
    arch: ArchArg,
    model: u64,
    members: Vec<pb::JobMember>,
) -> Result<(), String> {
    let architecture = match arch {
        ArchArg::Allreduce => pb::Architecture::Allreduce,
        ArchArg::Ps => pb::Architecture::Ps,
    } as i32;
    let r = ctl
        .c
        .add_job(pb::AddJobRequest {
            job: Some(pb::Job {
                job_id: id,
                architecture,
                members,
                model_bytes: model,
                ..Default::default()
            }),
        })
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        println!("{}", json!({"added": r.job_id}));
    } else {
        println!("job {} added", r.job_id);
    }
    Ok(())
}

async fn job_remove(ctl: &mut Ctl, id: String) -> Result<(), String> {
    let r = ctl
        .c
        .remove_job(pb::RemoveJobRequest { job_id: id.clone() })
        .await
        .map_err(rpc_error)?
        .into_inner();
    if ctl.json {
        println!("{}", json!({"job_id": id, "removed": r.removed}));
    } else if r.removed {
        println!("job {id} removed");
    } else {
        return Err(format!("no job {id:?} added with `job add`"));
    }
    Ok(())
}

async fn top(ctl: &mut Ctl, interval: Duration, count: u64) -> Result<(), String> {
    let mut n = 0u64;
    loop {
        let s = ctl
            .c
            .status(pb::StatusRequest {})
            .await
            .map_err(rpc_error)?
            .into_inner();
        let mut r = ctl
            .c
            .list_flows(pb::ListFlowsRequest::default())
            .await
            .map_err(rpc_error)?
            .into_inner();
        if ctl.json {
            let v: Vec<Value> = r.flows.iter().map(flow_json).collect();
            println!("{}", json!({"status": status_json(&s), "flows": v}));
        } else {
            // Clear the screen and go home, like top.
            print!("\x1b[2J\x1b[H");
            println!(
                "{}  slot {}  work {:.2} ms (p99 {:.2})  degraded: {}",
                s.host,
                s.slot,
                s.last_slot_work_ns as f64 / 1e6,
                s.p99_slot_work_ns as f64 / 1e6,
                if s.degraded.is_empty() {
                    "none".to_string()
                } else {
                    s.degraded.join("; ")
                }
            );
            print_flows(r.slot, &mut r.flows);
        }
        n += 1;
        if count > 0 && n >= count {
            break;
        }
        tokio::time::sleep(interval).await;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mlccctl: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlccctl: {e}");
            ExitCode::FAILURE
        }
    }
}
