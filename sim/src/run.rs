//! Runs one policy over one workload and collects what the reports need.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use mlcc_core::SlotConfig;
use mlcc_core::routing::Routes;
use mlcc_core::topology::Topology;

use crate::engine::{Engine, EngineError, Phase, RunStats};
use crate::placement::Placement;
use crate::policy::{self, Context};
use crate::state::JobRecord;
use crate::workload::JobSpec;

pub struct PolicyRun {
    pub policy: String,
    pub jobs: Vec<JobRecord>,
    pub stats: RunStats,
    /// Sorted decision latencies in µs (mlcc only).
    pub latencies_us: Vec<f32>,
}

pub struct RunConfig<'a> {
    pub topo: &'a Topology,
    pub routes: &'a Routes,
    pub slots: SlotConfig,
    pub placement: Placement,
    pub seed: u64,
    /// Stop after this many slots even if jobs are left (they are reported unfinished).
    pub max_slots: u64,
    pub progress: bool,
    /// Whether switches keep load tables (false: cloud mode).
    pub switch_tables: bool,
    /// Whether jobs communicate layer by layer as the backward pass goes
    /// ([`crate::layers`]) instead of one blob after the compute.
    pub per_layer: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("unknown policy {0:?} (known: {1})")]
    UnknownPolicy(String, String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

pub fn run_policy(
    name: &str,
    specs: &[JobSpec],
    cfg: &RunConfig<'_>,
) -> Result<PolicyRun, RunError> {
    let entry = policy::by_name(name)
        .ok_or_else(|| RunError::UnknownPolicy(name.into(), policy::names().join(", ")))?;
    let mut pol = entry.build(&Context {
        topo: cfg.topo,
        slots: cfg.slots,
        switch_tables: cfg.switch_tables,
    });
    let mut engine = Engine::new(
        cfg.topo,
        cfg.routes,
        cfg.slots,
        specs,
        cfg.placement,
        cfg.seed,
    )?
    .with_per_layer(cfg.per_layer);
    let bar = if cfg.progress {
        let b = ProgressBar::new(specs.len() as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{prefix:>16} [{elapsed_precise}] {wide_bar} {pos}/{len} jobs  {msg}  ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_prefix(name.to_string());
        b
    } else {
        ProgressBar::hidden()
    };
    let started = Instant::now();
    let tau = cfg.slots.tau_secs();
    let mut truncated = false;
    let mut steps = 0u64;
    while !engine.finished() {
        if engine.now() >= cfg.max_slots {
            truncated = true;
            break;
        }
        engine.step(pol.as_mut())?;
        steps += 1;
        if steps.is_multiple_of(64) {
            let done = engine
                .jobs
                .iter()
                .filter(|j| j.phase == Phase::Done)
                .count();
            bar.set_position(done as u64);
            bar.set_message(format!("sim t = {:.0} s", engine.now() as f64 * tau));
        }
    }
    bar.finish_and_clear();
    let mut stats = engine.stats.clone();
    stats.wall_secs = started.elapsed().as_secs_f64();
    stats.truncated = truncated;
    let jobs = engine
        .jobs
        .iter()
        .map(|j| JobRecord::from_job(j, tau))
        .collect();
    let mut latencies_us = pol.decision_latencies_us().to_vec();
    latencies_us.sort_by(f32::total_cmp);
    Ok(PolicyRun {
        policy: name.into(),
        jobs,
        stats,
        latencies_us,
    })
}
