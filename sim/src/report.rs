//! Per-job CSV, `summary.json` and a Markdown table.

use std::fmt::Write as _;

use serde::Serialize;

use crate::run::PolicyRun;
pub use crate::state::JobRecord;

pub fn jobs_csv(run: &PolicyRun) -> String {
    let mut s = String::from(
        "policy,job,model,arch,workers,servers,iterations,completed_iterations,arrival_s,start_s,finish_s,jct_s,comm_s,hosts\n",
    );
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
    for j in &run.jobs {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.3},{},{},{},{:.3},{}",
            run.policy,
            j.id,
            j.model,
            j.arch,
            j.workers,
            j.servers,
            j.iterations,
            j.completed_iterations,
            j.arrival_s,
            opt(j.start_s),
            opt(j.finish_s),
            opt(j.jct_s),
            j.comm_s,
            j.hosts
        );
    }
    s
}

#[derive(Clone, Debug, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    pub jobs: usize,
    pub finished: usize,
    pub mean_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    /// Mean JCT per model.
    pub mean_jct_by_model_s: Vec<(String, f64)>,
    /// (policy − mlcc) / policy: how much lower mlcc's mean JCT is (the paper's "33.6 % below
    /// MCS"); absent when the run has no mlcc.
    pub mlcc_reduction_vs_this: Option<f64>,
    /// this / reference mlcc.
    pub ratio_to_mlcc: Option<f64>,
    pub bytes_expected: f64,
    pub bytes_delivered: f64,
    /// Bytes held back while their whole path had room (see `RunStats::idle_capacity_bytes`).
    pub idle_capacity_bytes: f64,
    pub overbooked_bytes: f64,
    pub slots: u64,
    pub busy_slots: u64,
    pub wall_s: f64,
    pub busy_slots_per_sec: f64,
    pub truncated: bool,
    /// µs per host Planner::plan call (mlcc policies only).
    pub decision_latency_us: Option<Percentiles>,
    pub decisions: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub topology: String,
    pub seed: u64,
    pub jobs: usize,
    pub reference: Option<String>,
    pub policies: Vec<PolicySummary>,
}

/// The `q`-quantile of sorted values (nearest rank).
pub fn quantile<T: Copy + Into<f64>>(sorted: &[T], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].into()
}

pub fn summarize(scenario: &str, topology: &str, seed: u64, runs: &[PolicyRun]) -> Summary {
    // The reference is the first mlcc variant in the list.
    let reference = runs.iter().find(|r| r.policy.starts_with("mlcc"));
    let mean = |r: &PolicyRun| {
        let v: Vec<f64> = r.jobs.iter().filter_map(|j| j.jct_s).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let ref_mean = reference.map(mean);
    let policies = runs
        .iter()
        .map(|r| {
            let mut jct: Vec<f64> = r.jobs.iter().filter_map(|j| j.jct_s).collect();
            jct.sort_by(f64::total_cmp);
            let m = mean(r);
            let mut models: Vec<(String, f64)> = Vec::new();
            for name in crate::model_zoo::MODELS.iter().map(|m| m.name) {
                let v: Vec<f64> = r
                    .jobs
                    .iter()
                    .filter(|j| j.model == name)
                    .filter_map(|j| j.jct_s)
                    .collect();
                if !v.is_empty() {
                    models.push((name.into(), v.iter().sum::<f64>() / v.len() as f64));
                }
            }
            let lat = (!r.latencies_us.is_empty()).then(|| Percentiles {
                p50: quantile(&r.latencies_us, 0.5),
                p90: quantile(&r.latencies_us, 0.9),
                p99: quantile(&r.latencies_us, 0.99),
            });
            PolicySummary {
                policy: r.policy.clone(),
                jobs: r.jobs.len(),
                finished: jct.len(),
                mean_jct_s: m,
                p50_jct_s: quantile(&jct, 0.5),
                p99_jct_s: quantile(&jct, 0.99),
                mean_jct_by_model_s: models,
                mlcc_reduction_vs_this: ref_mean.map(|rm| (m - rm) / m),
                ratio_to_mlcc: ref_mean.map(|rm| m / rm),
                bytes_expected: r.stats.bytes_expected,
                bytes_delivered: r.stats.bytes_delivered,
                idle_capacity_bytes: r.stats.idle_capacity_bytes,
                overbooked_bytes: r.stats.overbooked_bytes,
                slots: r.stats.slots,
                busy_slots: r.stats.busy_slots,
                wall_s: r.stats.wall_secs,
                busy_slots_per_sec: r.stats.busy_slots as f64 / r.stats.wall_secs.max(1e-9),
                truncated: r.stats.truncated,
                decision_latency_us: lat,
                decisions: r.latencies_us.len(),
            }
        })
        .collect();
    Summary {
        scenario: scenario.into(),
        topology: topology.into(),
        seed,
        jobs: runs.first().map_or(0, |r| r.jobs.len()),
        reference: reference.map(|r| r.policy.clone()),
        policies,
    }
}

pub fn markdown(s: &Summary) -> String {
    let mut out = format!(
        "# mlcc-sim: {} (seed {})\n\n{}; {} jobs.\n\n",
        s.scenario, s.seed, s.topology, s.jobs
    );
    let reference = s.reference.as_deref().unwrap_or("mlcc");
    let _ = writeln!(
        out,
        "| policy | finished | mean JCT (s) | p50 (s) | p99 (s) | {reference} below this (mean) | slots/s | wall (s) |"
    );
    out += "|---|---|---|---|---|---|---|---|\n";
    for p in &s.policies {
        let _ = writeln!(
            out,
            "| {} | {}/{} | {:.1} | {:.1} | {:.1} | {} | {:.0} | {:.1} |",
            p.policy,
            p.finished,
            p.jobs,
            p.mean_jct_s,
            p.p50_jct_s,
            p.p99_jct_s,
            p.mlcc_reduction_vs_this
                .map_or("–".into(), |r| format!("{:+.1} %", r * 100.0)),
            p.busy_slots_per_sec,
            p.wall_s
        );
    }
    let lat: Vec<&PolicySummary> = s
        .policies
        .iter()
        .filter(|p| p.decision_latency_us.is_some())
        .collect();
    if !lat.is_empty() {
        out += "\nDecision latency per host `Planner::plan` call (µs):\n\n| policy | decisions | p50 | p90 | p99 |\n|---|---|---|---|---|\n";
        for p in lat {
            if let Some(l) = &p.decision_latency_us {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.1} | {:.1} |",
                    p.policy, p.decisions, l.p50, l.p90, l.p99
                );
            }
        }
    }
    out += "\nMean JCT per model (s):\n\n| policy |";
    let models: Vec<&str> = crate::model_zoo::MODELS.iter().map(|m| m.name).collect();
    for m in &models {
        let _ = write!(out, " {m} |");
    }
    out += "\n|---|";
    out += &"---|".repeat(models.len());
    out += "\n";
    for p in &s.policies {
        let _ = write!(out, "| {} |", p.policy);
        for m in &models {
            let v = p.mean_jct_by_model_s.iter().find(|(n, _)| n == m);
            let _ = write!(
                out,
                " {} |",
                v.map_or("–".into(), |(_, x)| format!("{x:.1}"))
            );
        }
        out += "\n";
    }
    out
}
