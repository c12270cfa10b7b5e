//! PyTorch DDP jobs on the testbed (a trace's `torch-ddp` kind): each rank is
//! `python3 -m mlcc.torch.job` (the repository's `python/` package) in its host's namespace,
//! all-reducing over Gloo's own TCP connections, its progress from mlcc's comm hook.
//!
//! Gloo's sockets are the library's, not ours. Under mlcc the CC reaches them the way it reaches
//! any unpatched library: through the datapath's `sock_ops` program on a cgroup of the run that
//! every rank joins before it runs (docs/design.md §12, "Selecting sockets"). Under a kernel
//! CC each rank puts its own sockets on it once Gloo has connected them (`--cc`), as the trainer
//! does: a namespace's default may only be one of `net.ipv4.tcp_allowed_congestion_control`,
//! a machine-wide list.
//!
//! Importing PyTorch and meeting the other ranks takes seconds on a loaded machine and is not
//! what the CCs differ in: every torch job starts before the run's clock, and its ranks wait at
//! a barrier (`--ready-file`, `--start-file`) until the clock starts, then begin training at
//! their arrival. Their JCT counts from arrival, as every job's.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::{Binaries, Cc, EmulatedCluster, RunError, ns_command};
use crate::scenario::{JobKind, JobSpec, Scenario};

/// A rank's first iterations, left out of [`IterationPhases`]: Gloo connects and DDP builds
/// its buckets in them.
const WARMUP_ITERATIONS: usize = 2;

/// Where a PyTorch job's iterations went (ms), from its ranks' `phases_s`: the forward pass,
/// the backward pass with the all-reduces DDP overlaps with it (it returns once every bucket is
/// reduced, so a slower network shows here), and the optimizer step. Medians over every rank's
/// iterations after the first [`WARMUP_ITERATIONS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IterationPhases {
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub step_ms: f64,
}

impl IterationPhases {
    /// The medians of the ranks' `phases` (seconds per iteration: forward, backward, step);
    /// `None` where no rank reported an iteration past its warm-up (a job that is not PyTorch's,
    /// or ran on a GPU).
    pub fn of_ranks<'a>(ranks: impl IntoIterator<Item = &'a [[f64; 3]]>) -> Option<Self> {
        let steady: Vec<&[f64; 3]> = ranks
            .into_iter()
            .flat_map(|p| p.iter().skip(WARMUP_ITERATIONS))
            .collect();
        let median_ms = |k: usize| {
            let mut v: Vec<f64> = steady.iter().map(|p| p[k] * 1e3).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        (!steady.is_empty()).then(|| IterationPhases {
            forward_ms: median_ms(0),
            backward_ms: median_ms(1),
            step_ms: median_ms(2),
        })
    }

    /// The mean of several runs' phases (one job's under one CC, over the repetitions).
    pub fn mean(runs: &[IterationPhases]) -> Option<Self> {
        let n = runs.len() as f64;
        let sum = |f: fn(&IterationPhases) -> f64| runs.iter().map(f).sum::<f64>() / n;
        (!runs.is_empty()).then(|| IterationPhases {
            forward_ms: sum(|p| p.forward_ms),
            backward_ms: sum(|p| p.backward_ms),
            step_ms: sum(|p| p.step_ms),
        })
    }
}

/// How long the ranks of every torch job of a run may take to import PyTorch and meet.
const READY_TIMEOUT: Duration = Duration::from_secs(240);

/// The Python that runs torch jobs and where it finds the `mlcc` package.
#[derive(Clone, Debug)]
pub struct TorchRuntime {
    /// `MLCC_TESTBED_PYTHON`, else Debian's `/usr/bin/python3` (whose `python3-torch` it is).
    pub python: PathBuf,
    /// `MLCC_PYTHONPATH`, else the checkout's `python/`.
    pub pythonpath: PathBuf,
}

impl TorchRuntime {
    pub fn locate() -> Self {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            python: env("MLCC_TESTBED_PYTHON").unwrap_or_else(|| "/usr/bin/python3".into()),
            pythonpath: env("MLCC_PYTHONPATH")
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../python")),
        }
    }

    /// Whether this Python imports PyTorch and `mlcc.torch`; says what to install if not.
    pub fn check(&self) -> Result<(), RunError> {
        let out = Command::new(&self.python)
            .args(["-c", "import torch, torch.distributed, mlcc.torch"])
            .env("PYTHONPATH", &self.pythonpath)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                RunError::Setup(format!("torch-ddp jobs: {}: {e}", self.python.display()))
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(RunError::Setup(format!(
            "torch-ddp jobs need PyTorch and the mlcc package: {} with PYTHONPATH={} says: {} \
             (apt install python3-torch; MLCC_TESTBED_PYTHON and MLCC_PYTHONPATH choose others)",
            self.python.display(),
            self.pythonpath.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("no output")
        )))
    }
}

pub fn has_torch_jobs(scn: &Scenario) -> bool {
    scn.jobs.iter().any(|j| j.kind == JobKind::TorchDdp)
}

/// What a run needs for its torch jobs: the cgroup its ranks join (mlcc) and the barrier.
pub struct TorchRun {
    cgroup: Option<mlcc_bpf::testbed::Cgroup>,
    ready_dir: PathBuf,
    start_file: PathBuf,
}

impl TorchRun {
    /// Puts the run's torch jobs on its CC: each host's default for a kernel CC, the
    /// datapath's `sock_ops` on a cgroup of the run (`cgroup`, e.g. `mlcc-tb-1a2b3c`) for mlcc.
    pub fn prepare(c: &EmulatedCluster, cgroup: &str) -> Result<Self, RunError> {
        let cgroup = match &c.cc {
            Cc::Kernel { .. } | Cc::Isolated(_) => None,
            Cc::Mlcc { .. } => Some(attach_selector(c, cgroup)?),
            Cc::Mltcp { .. } => {
                return Err(RunError::Setup(
                    "torch-ddp jobs run under kernel CCs and mlcc, not MLTCP (its feeder needs \
                     each socket in a progress file of its own)"
                        .into(),
                ));
            }
        };
        let ready_dir = c.dir.join("torch-ready");
        fs::create_dir_all(&ready_dir)
            .map_err(|e| RunError::Setup(format!("creating {}: {e}", ready_dir.display())))?;
        Ok(Self {
            cgroup,
            ready_dir,
            start_file: c.dir.join("torch-start"),
        })
    }

    /// The command of rank `rank` of `spec` (a torch job, `idx`-th of the scenario, its rank 0
    /// serving the rendezvous on `master`).
    pub fn command(
        &self,
        c: &EmulatedCluster,
        bins: &Binaries,
        scn: &Scenario,
        spec: &JobSpec,
        rank: usize,
        master: &str,
    ) -> Result<Command, RunError> {
        let host = c.plan.host(&spec.workers[rank]).ok_or_else(|| {
            RunError::Setup(format!("job {}: no host {}", spec.name, spec.workers[rank]))
        })?;
        let t = &scn.torch;
        let mut cmd = ns_command(&host.ns, &bins.torch.python)?;
        let args: Vec<OsString> = [
            "-m",
            "mlcc.torch.job",
            "--job",
            &spec.name,
            "--rank",
            &rank.to_string(),
            "--world",
            &spec.workers.len().to_string(),
            "--master",
            master,
            "--backend",
            &t.backend,
            "--model-bytes",
            &spec.model_bytes.to_string(),
            "--layers",
            &t.layers.to_string(),
            "--batch",
            &t.batch.to_string(),
            "--iterations",
            &spec.iterations.to_string(),
            "--bucket-mb",
            &t.bucket_mb.to_string(),
            "--threads",
            &t.threads.to_string(),
            "--arrival-s",
            &spec.arrival.as_secs_f64().to_string(),
        ]
        .map(OsString::from)
        .into_iter()
        .collect();
        cmd.args(args)
            .arg("--ready-file")
            .arg(self.ready_dir.join(format!("{}-w{rank}", spec.name)))
            .arg("--start-file")
            .arg(&self.start_file)
            .env("PYTHONPATH", &bins.torch.pythonpath)
            .env("GLOO_SOCKET_IFNAME", "eth0")
            .env("OMP_NUM_THREADS", t.threads.to_string())
            .env("PYTHONUNBUFFERED", "1");
        if let Cc::Kernel { cc, .. } | Cc::Isolated(cc) = &c.cc {
            cmd.args(["--cc", cc]);
        }
        if c.cc.tells_total_iterations() {
            cmd.env("MLCC_TOTAL_ITERATIONS", spec.iterations.to_string());
        }
        if c.cc.is_mlcc() && c.cc.uses_progress_files() {
            cmd.env("MLCC_JOB_ID", &spec.name)
                .env("MLCC_JOB_ARCH", "allreduce")
                .env("MLCC_TOTAL_ITERATIONS", spec.iterations.to_string())
                .env("MLCC_SHM_DIR", c.shm_dir(&spec.workers[rank]));
        }
        if let Some(cg) = &self.cgroup {
            join_cgroup(&mut cmd, cg)?;
        }
        Ok(cmd)
    }

    /// Waits until the `members` ranks have set up (each wrote its ready file), failing early
    /// if one exits, then starts the clock: the ranks begin `--arrival-s` after now.
    pub fn start_clock(
        &self,
        members: usize,
        mut exited: impl FnMut() -> Option<String>,
    ) -> Result<(), RunError> {
        let until = Instant::now() + READY_TIMEOUT;
        loop {
            if crate::cluster::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(RunError::Interrupted);
            }
            if let Some(who) = exited() {
                return Err(RunError::Setup(format!("{who} exited while setting up")));
            }
            let ready = fs::read_dir(&self.ready_dir).map_or(0, |d| d.count());
            if ready >= members {
                break;
            }
            if Instant::now() > until {
                return Err(RunError::Setup(format!(
                    "torch jobs: {ready} of {members} ranks ready after {READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let now = crate::trainer::unix_now();
        let tmp = self.start_file.with_extension("tmp");
        fs::write(&tmp, format!("{now:.6}\n"))
            .and_then(|()| fs::rename(&tmp, &self.start_file))
            .map_err(|e| RunError::Setup(format!("writing {}: {e}", self.start_file.display())))
    }

    /// Removes the cgroup (its ranks are gone by now).
    pub fn finish(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.remove(Duration::from_secs(5));
        }
    }
}

/// A cgroup for the run's torch ranks with the run's datapath `sock_ops` on it.
fn attach_selector(c: &EmulatedCluster, name: &str) -> Result<mlcc_bpf::testbed::Cgroup, RunError> {
    let pins = c
        .pin_dir()
        .ok_or_else(|| RunError::Setup("the run's BPF datapath is not loaded".into()))?;
    let cg = mlcc_bpf::testbed::Cgroup::create(name)
        .map_err(|e| RunError::Setup(format!("torch jobs' cgroup: {e}")))?;
    mlcc_bpf::KernelDatapath::open(pins)
        .and_then(|dp| dp.attach_cgroup(cg.dir()))
        .map_err(|e| RunError::Setup(format!("sock_ops on {}: {e}", cg.dir().display())))?;
    Ok(cg)
}

/// The child joins `cg` between fork and exec: every socket it ever opens is the cgroup's.
fn join_cgroup(cmd: &mut Command, cg: &mlcc_bpf::testbed::Cgroup) -> Result<(), RunError> {
    use std::os::unix::process::CommandExt;
    let procs = cg
        .procs()
        .map_err(|e| RunError::Setup(format!("{}: {e}", cg.dir().display())))?;
    // SAFETY: one write(2) (async-signal-safe) between fork and exec; the closure owns the
    // File until the Command is dropped.
    unsafe {
        cmd.pre_exec(move || {
            rustix::io::write(&procs, b"0")?;
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_the_medians_of_every_ranks_iterations_after_its_warm_up() {
        // Two ranks; each one's first two iterations (connecting, building buckets) are slow.
        let warm = [[0.5, 2.0, 0.1], [0.3, 1.0, 0.1]];
        let rank = |b: [f64; 3]| -> Vec<[f64; 3]> {
            warm.iter()
                .copied()
                .chain(b.iter().map(|&b| [0.08, b, 0.004]))
                .collect()
        };
        let (r0, r1) = (rank([0.245, 0.250, 0.300]), rank([0.246, 0.251, 0.260]));
        let p = IterationPhases::of_ranks([r0.as_slice(), r1.as_slice()]).unwrap();
        // The six steady backward passes sorted: 245 246 250 251 260 300; the upper median.
        assert!((p.backward_ms - 251.0).abs() < 1e-9, "{p:?}");
        assert!((p.forward_ms - 80.0).abs() < 1e-9 && (p.step_ms - 4.0).abs() < 1e-9);
        // Nothing past the warm-up, or no ranks' phases at all (the trainer's jobs): none.
        assert_eq!(IterationPhases::of_ranks([&warm[..]]), None);
        assert_eq!(IterationPhases::of_ranks(std::iter::empty()), None);
        let m = IterationPhases::mean(&[p, IterationPhases::default()]).unwrap();
        assert!((m.backward_ms - 125.5).abs() < 1e-9);
        assert_eq!(IterationPhases::mean(&[]), None);
    }
}
