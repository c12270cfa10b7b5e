//! Jobs to simulate: generated from a documented arrival model, or read from a CSV trace.
//!
//! The paper drove its simulation with arrival rates extracted from Google cluster traces,
//! which are not available here. Cluster traces (Google 2011/2019, Microsoft Philly, SenseTime
//! Helios) share two features that matter for contention: a strong slow cycle in the
//! submission rate (diurnal: peak ≈ 2–3× trough) and short bursts of submissions (sweeps,
//! retries). The generator reproduces both, compressed onto the simulated span:
//!
//! λ(t) = λ̄ · (1 + 0.5·sin(2π·t/T − π/2)) · (2.5 inside a burst window, else 1)
//!
//! with T the arrival span (one "day" per run, starting at the trough) and three burst windows
//! of T/20 each at seeded positions. Arrivals are drawn by thinning a homogeneous Poisson
//! process of rate λ_max (Lewis & Shedler 1979). Models are drawn with fixed weights and
//! iteration counts log-uniformly (job lengths in traces are heavy-tailed). Everything comes
//! from [`crate::rng::Rng`] with per-purpose streams, so a seed pins the workload exactly.

use std::path::Path;

use mlcc_core::job::Arch;

use crate::model_zoo::{self, MODELS, Model};
use crate::rng::Rng;

#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    pub id: String,
    pub arrival_s: f64,
    pub model: &'static Model,
    pub arch: Arch,
    pub workers: u32,
    pub servers: u32,
    pub iterations: u32,
    /// Hosts, model bytes and compute time fixed by a testbed scenario
    /// ([`crate::testbed`]) instead of the placement rule and the model table.
    pub pinned: Option<Pinned>,
}

/// A job exactly as a testbed scenario runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pinned {
    /// Host names, in rank order.
    pub workers: Vec<String>,
    pub servers: Vec<String>,
    pub model_bytes: u64,
    pub compute_s: f64,
    /// A PS replies only once every worker's push has arrived in full, as the testbed's
    /// trainer does (it moves one slice per server and iteration), where PS-Lite forwards key
    /// by key and the simulator's broadcast otherwise pipelines byte by byte behind the
    /// pushes ([`crate::physics`]).
    pub whole_aggregate: bool,
}

impl JobSpec {
    pub fn gpus(&self) -> u32 {
        self.workers + self.servers
    }

    /// Bytes of the model (per iteration): the testbed's where pinned, else the model table's.
    pub fn model_bytes(&self) -> u64 {
        self.pinned
            .as_ref()
            .map_or(self.model.bytes, |p| p.model_bytes)
    }

    /// Compute time of one iteration (s).
    pub fn compute_secs(&self) -> f64 {
        self.pinned
            .as_ref()
            .map_or_else(|| self.model.compute_secs(self.workers), |p| p.compute_s)
    }
}

/// Knobs of the generator.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrivalModel {
    /// Mean arrival rate λ̄ (jobs per second).
    pub jobs_per_sec: f64,
    /// T: arrivals happen in [0, T).
    pub span_s: f64,
    pub min_iterations: u32,
    pub max_iterations: u32,
    /// Relative weights of vgg19, vgg16, resnet50, gpt2 (the order of [`MODELS`]).
    pub mix: [f64; 4],
}

const AMPLITUDE: f64 = 0.5;
const BURSTS: usize = 3;
const BURST_GAIN: f64 = 2.5;
const BURST_FRACTION: f64 = 0.05;

/// Stream tags, so each purpose draws from its own sequence.
const TAG_BURSTS: u64 = 1;
const TAG_ARRIVALS: u64 = 2;
const TAG_JOBS: u64 = 3;

impl ArrivalModel {
    /// λ(t) for burst windows starting at `bursts` (seconds).
    fn rate(&self, t: f64, bursts: &[f64]) -> f64 {
        let phase = 2.0 * std::f64::consts::PI * t / self.span_s - std::f64::consts::FRAC_PI_2;
        let burst = bursts
            .iter()
            .any(|&b| t >= b && t < b + BURST_FRACTION * self.span_s);
        self.jobs_per_sec * (1.0 + AMPLITUDE * phase.sin()) * if burst { BURST_GAIN } else { 1.0 }
    }

    pub fn generate(&self, seed: u64) -> Vec<JobSpec> {
        let mut br = Rng::derive(seed, TAG_BURSTS);
        let bursts: Vec<f64> = (0..BURSTS)
            .map(|_| br.unit() * (1.0 - BURST_FRACTION) * self.span_s)
            .collect();
        let lambda_max = self.jobs_per_sec * (1.0 + AMPLITUDE) * BURST_GAIN;
        let mut ar = Rng::derive(seed, TAG_ARRIVALS);
        let mut jr = Rng::derive(seed, TAG_JOBS);
        let total: f64 = self.mix.iter().sum();
        let (lo, hi) = (
            f64::from(self.min_iterations.max(1)),
            f64::from(self.max_iterations.max(self.min_iterations).max(1)),
        );
        let mut jobs = Vec::new();
        let mut t = 0.0;
        if !(lambda_max > 0.0 && self.span_s > 0.0 && total > 0.0) {
            return jobs;
        }
        loop {
            t += ar.exp(1.0 / lambda_max);
            if t >= self.span_s {
                break;
            }
            if ar.unit() * lambda_max > self.rate(t, &bursts) {
                continue;
            }
            let mut pick = jr.unit() * total;
            let mut model = &MODELS[MODELS.len() - 1];
            for (m, w) in MODELS.iter().zip(self.mix) {
                if pick < w {
                    model = m;
                    break;
                }
                pick -= w;
            }
            let iterations = (lo * (hi / lo).powf(jr.unit())).round() as u32;
            jobs.push(JobSpec {
                id: format!("j{}-{}", jobs.len(), model.name),
                arrival_s: t,
                model,
                arch: model.arch,
                workers: model.workers,
                servers: model.servers,
                iterations: iterations.max(1),
                pinned: None,
            });
        }
        jobs
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading trace {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("trace line {line}: {msg}")]
    Line { line: usize, msg: String },
    #[error("trace has no jobs")]
    Empty,
}

pub const TRACE_HEADER: &str = "arrival_s,model,arch,workers,servers,iterations";

/// Reads `arrival_s,model,arch,workers,servers,iterations` (a header line is optional; `#`
/// starts a comment). `arch` is `ring`/`allreduce` or `ps`. Jobs are sorted by arrival.
pub fn read_trace(path: &Path) -> Result<Vec<JobSpec>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_trace(&text)
}

pub fn parse_trace(text: &str) -> Result<Vec<JobSpec>, TraceError> {
    let mut jobs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.split('#').next().unwrap_or("").trim();
        if l.is_empty() || l.replace(' ', "") == TRACE_HEADER {
            continue;
        }
        let err = |msg: String| TraceError::Line { line, msg };
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() != 6 {
            return Err(err(format!(
                "expected 6 fields ({TRACE_HEADER}), got {}",
                f.len()
            )));
        }
        let arrival_s: f64 = f[0]
            .parse()
            .map_err(|_| err(format!("arrival_s {:?} is not a number", f[0])))?;
        if !arrival_s.is_finite() || arrival_s < 0.0 {
            return Err(err(format!("arrival_s {arrival_s} must be finite and ≥ 0")));
        }
        let model = model_zoo::by_name(f[1]).ok_or_else(|| {
            let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
            err(format!(
                "unknown model {:?} (known: {})",
                f[1],
                known.join(", ")
            ))
        })?;
        let arch = match f[2].to_ascii_lowercase().as_str() {
            "ring" | "allreduce" => Arch::Allreduce,
            "ps" => Arch::Ps,
            other => return Err(err(format!("arch {other:?} is not ring or ps"))),
        };
        let num = |s: &str, what: &str, max: u32| -> Result<u32, TraceError> {
            s.parse::<u32>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| err(format!("{what} {s:?} is not an integer in 0..={max}")))
        };
        let workers = num(f[3], "workers", 1024)?;
        let servers = num(f[4], "servers", 1024)?;
        let iterations = num(f[5], "iterations", 10_000_000)?;
        match arch {
            Arch::Allreduce if workers < 2 => {
                return Err(err("a ring job needs at least 2 workers".into()));
            }
            Arch::Ps if workers < 1 || servers < 1 => {
                return Err(err("a PS job needs at least 1 worker and 1 server".into()));
            }
            _ => {}
        }
        if iterations == 0 {
            return Err(err("iterations must be at least 1".into()));
        }
        jobs.push(JobSpec {
            id: format!("t{}-{}", jobs.len(), model.name),
            arrival_s,
            model,
            arch,
            workers,
            servers: if arch == Arch::Ps { servers } else { 0 },
            iterations,
            pinned: None,
        });
    }
    if jobs.is_empty() {
        return Err(TraceError::Empty);
    }
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(jobs)
}

/// Writes jobs in the trace format, so a generated workload can be edited and replayed.
pub fn to_csv(jobs: &[JobSpec]) -> String {
    let mut s = format!("{TRACE_HEADER}\n");
    for j in jobs {
        s += &format!(
            "{:.3},{},{},{},{},{}\n",
            j.arrival_s,
            j.model.name,
            if j.arch == Arch::Ps { "ps" } else { "ring" },
            j.workers,
            j.servers,
            j.iterations
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ArrivalModel {
        ArrivalModel {
            jobs_per_sec: 2.0,
            span_s: 100.0,
            min_iterations: 10,
            max_iterations: 100,
            mix: [1.0; 4],
        }
    }

    #[test]
    fn generator_is_seeded_and_sorted() {
        let a = model().generate(1);
        assert_eq!(a, model().generate(1));
        assert_ne!(a, model().generate(2));
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        // Mean rate 2/s over 100 s, with bursts adding ~ 3·5%·1.5 ≈ 22%.
        assert!((150..320).contains(&a.len()), "{}", a.len());
        assert!(a.iter().all(|j| (10..=100).contains(&j.iterations)));
    }

    #[test]
    fn trace_round_trips_and_bad_lines_are_named() {
        let jobs = model().generate(3);
        let back = parse_trace(&to_csv(&jobs)).unwrap();
        assert_eq!(back.len(), jobs.len());
        assert_eq!(back[5].model.name, jobs[5].model.name);
        for (bad, what) in [
            ("1,vgg16,ps,2,2", "6 fields"),
            ("x,vgg16,ps,2,2,5", "not a number"),
            ("1,bert,ps,2,2,5", "unknown model"),
            ("1,vgg16,tree,2,2,5", "not ring or ps"),
            ("1,vgg19,ring,1,0,5", "at least 2"),
            ("1,vgg16,ps,2,-1,5", "servers"),
            ("-1,vgg16,ps,2,2,5", "≥ 0"),
            ("1,vgg16,ps,2,2,0", "iterations"),
        ] {
            let e = parse_trace(&format!("{TRACE_HEADER}\n{bad}\n")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("line 2") && msg.contains(what), "{msg}");
        }
        assert!(matches!(parse_trace("# nothing\n"), Err(TraceError::Empty)));
    }
}
