//! mlcc-trainer: one member of a synthetic data-parallel job (ring all-reduce or parameter
//! server). Prints its per-iteration times and JCT as one JSON line on stdout; exits non-zero
//! if any byte it received differs from what its peer had to send.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use mlcc_core::units::{parse_bytes, parse_duration};
use mlcc_testbed::trainer::{self, Shape, TrainerConfig};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    /// Ring all-reduce worker.
    Ring,
    /// Parameter-server worker.
    PsWorker,
    /// Parameter server.
    PsServer,
}

/// A synthetic training job member: compute (sleep), then the job's communication pattern
/// over TCP, every received byte verified. Progress goes to mlccd through the C progress
/// header when MLCC_JOB_ID is set (MLCC_JOB_ARCH, MLCC_MODEL_BYTES, MLCC_WORLD_SIZE,
/// MLCC_SHM_DIR, MLCC_CC as for patched NCCL / PS-Lite).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Job name (also the tag of every transfer).
    #[arg(long)]
    job: String,
    #[arg(long, value_enum)]
    kind: Kind,
    /// Rank among the job's workers (ring, PS worker) or servers (PS server).
    #[arg(long)]
    rank: u32,
    /// Address to listen on (ring predecessor, PS workers connect here).
    #[arg(long)]
    listen: SocketAddr,
    /// Ring: number of workers.
    #[arg(long)]
    world: Option<u32>,
    /// Ring: the successor's listen address.
    #[arg(long)]
    next: Option<SocketAddr>,
    /// PS worker: the servers' addresses in server-rank order.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<SocketAddr>,
    /// PS server: number of workers and of servers.
    #[arg(long)]
    workers: Option<u32>,
    #[arg(long)]
    num_servers: Option<u32>,
    /// Model (gradient) bytes exchanged per iteration, e.g. "22MB".
    #[arg(long, value_parser = |s: &str| parse_bytes(s).map(|b| b.0).map_err(|e| e.to_string()))]
    model_bytes: u64,
    #[arg(long)]
    iterations: u32,
    /// Compute time per iteration, e.g. "440ms".
    #[arg(long, value_parser = |s: &str| parse_duration(s).map_err(|e| e.to_string()), default_value = "0ms")]
    compute: Duration,
    /// TCP congestion control of the data sockets (ignored when a progress file names one).
    #[arg(long)]
    cc: Option<String>,
    /// How long to retry connecting to peers that are not listening yet.
    #[arg(long, value_parser = |s: &str| parse_duration(s).map_err(|e| e.to_string()), default_value = "30s")]
    connect_timeout: Duration,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let shape = match a.kind {
        Kind::Ring => match (a.world, a.next) {
            (Some(world), Some(next)) => Shape::Ring { world, next },
            _ => return fail("--kind ring needs --world and --next"),
        },
        Kind::PsWorker if !a.servers.is_empty() => Shape::PsWorker { servers: a.servers },
        Kind::PsWorker => return fail("--kind ps-worker needs --servers"),
        Kind::PsServer => match (a.workers, a.num_servers) {
            (Some(workers), Some(servers)) => Shape::PsServer { workers, servers },
            _ => return fail("--kind ps-server needs --workers and --num-servers"),
        },
    };
    let cfg = TrainerConfig {
        job: a.job,
        rank: a.rank,
        shape,
        listen: a.listen,
        model_bytes: a.model_bytes,
        iterations: a.iterations,
        compute: a.compute,
        cc: a.cc,
        connect_timeout: a.connect_timeout,
    };
    match trainer::run(cfg) {
        Ok(r) => {
            println!("{}", serde_json::to_string(&r).expect("report serializes"));
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("mlcc-trainer: {msg}");
    ExitCode::FAILURE
}
