//! Does the simulator predict the testbed? `mlcc-testbed predict` simulates each scenario's jobs
//! on its hosts (`mlcc_sim::testbed`: same trace, links, bytes, compute times and slots; cross
//! traffic is not simulated) and puts the simulator's ratios beside what the testbed measured in
//! `results/<scenario>/summary.json`.

use std::path::Path;

use mlcc_core::routing::Routes;
use mlcc_sim::run::run_policy;
use serde::Serialize;

use crate::scenario::Scenario;

/// One scenario: the simulator's mean JCTs and the testbed's ratio where it ran.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub scenario: String,
    pub quick: bool,
    pub cross_traffic: bool,
    pub sim_mlcc_s: f64,
    pub sim_fair_s: f64,
    pub sim_isolated_s: f64,
    /// The better of the simulator's two exact, instant orderings (`priority`: SRPT between
    /// jobs; `sincronia`: BSSI over each iteration's coflow), and its mean JCT: how far any
    /// order of the same jobs gets below fair sharing in the fluid model, where the
    /// testbed's targets ask how far mlcc gets below TCP.
    pub sim_best_order: String,
    pub sim_best_order_s: f64,
    /// mlcc / fair and mlcc / isolated in the simulator.
    pub sim_mlcc_to_fair: f64,
    pub sim_mlcc_to_isolated: f64,
    /// The testbed's mlcc / best TCP and mlcc / isolated, from its summary.json.
    pub testbed_mlcc_to_best_tcp: Option<f64>,
    pub testbed_mlcc_to_isolated: Option<f64>,
    /// The testbed's mlcc mean JCT, and the simulator's over it − 1: how close the simulator's
    /// physics comes in seconds, beside how close its ratio comes.
    pub testbed_mlcc_s: Option<f64>,
    pub seconds_error: Option<f64>,
    /// sim mlcc/fair over testbed mlcc/best TCP − 1: the simulator's error on the ratio.
    pub error: Option<f64>,
}

fn mean_jct(jobs: &[mlcc_sim::state::JobRecord]) -> f64 {
    let v: Vec<f64> = jobs.iter().filter_map(|j| j.jct_s).collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The exact orderings [`Prediction::sim_best_order`] is the better of.
const ORDERS: [&str; 2] = ["priority", "sincronia"];

/// Simulates `scn` (already shortened if `quick`) under mlcc, fair, isolated and the exact
/// orderings ([`ORDERS`]) and reads the
/// testbed's `results_dir/<scenario>/summary.json` if there is one.
pub fn predict(scn: &Scenario, quick: bool, results_dir: &Path) -> Result<Prediction, String> {
    let topo = scn.topology()?;
    let routes = Routes::new(&topo);
    let cfg = scn.run_config(&topo, &routes, 10_000_000)?;
    let jobs = scn.sim_jobs();
    let mean = |p: &str| -> Result<f64, String> {
        let r = run_policy(p, &jobs, &cfg).map_err(|e| e.to_string())?;
        Ok(mean_jct(&r.jobs))
    };
    let (m, f, i) = (mean("mlcc")?, mean("fair")?, mean("isolated")?);
    let mut best = (String::new(), f64::INFINITY);
    for p in ORDERS {
        let s = mean(p)?;
        if s < best.1 {
            best = (p.to_string(), s);
        }
    }
    // The testbed's summary.json (report::Summary), read for the fields compared.
    let tb: Option<serde_json::Value> =
        std::fs::read_to_string(results_dir.join(&scn.name).join("summary.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    let mlcc = tb.as_ref().and_then(|s| {
        s["ccs"]
            .as_array()?
            .iter()
            .find(|c| c["cc"] == "mlcc")
            .cloned()
    });
    let to_best = mlcc.as_ref().and_then(|c| c["ratio_to_best_tcp"].as_f64());
    let tb_mlcc = mlcc.as_ref().and_then(|c| c["mean_jct_s"].as_f64());
    let to_iso = mlcc.as_ref().and_then(|c| {
        let iso = tb.as_ref()?["isolated_mean_jct_s"].as_f64()?;
        Some(c["mean_jct_s"].as_f64()? / iso)
    });
    Ok(Prediction {
        scenario: scn.name.clone(),
        quick,
        cross_traffic: scn.cross.is_some(),
        sim_mlcc_s: m,
        sim_fair_s: f,
        sim_isolated_s: i,
        sim_best_order: best.0,
        sim_best_order_s: best.1,
        sim_mlcc_to_fair: m / f,
        sim_mlcc_to_isolated: m / i,
        testbed_mlcc_to_best_tcp: to_best,
        testbed_mlcc_to_isolated: to_iso,
        testbed_mlcc_s: tb_mlcc,
        seconds_error: tb_mlcc.filter(|t| *t > 0.0).map(|t| m / t - 1.0),
        error: to_best.map(|t| m / f / t - 1.0),
    })
}

pub fn markdown(rows: &[Prediction]) -> String {
    let mut t = String::from(
        "| scenario | sim mlcc / fair | testbed mlcc / best TCP | error | sim mlcc / isolated | testbed mlcc / isolated | sim mlcc, fair, isolated (s) | sim best order / fair | sim isolated / fair | testbed mlcc (s) | sim mlcc vs it |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let opt = |x: Option<f64>| x.map_or("–".to_string(), |v| format!("{v:.3}"));
    for r in rows {
        t += &format!(
            "| {}{}{} | {:.3} | {} | {} | {:.3} | {} | {:.2}, {:.2}, {:.2} | {:.3} ({}) | {:.3} | {} | {} |\n",
            r.scenario,
            if r.quick { " (quick)" } else { "" },
            if r.cross_traffic {
                " (cross traffic not simulated)"
            } else {
                ""
            },
            r.sim_mlcc_to_fair,
            opt(r.testbed_mlcc_to_best_tcp),
            r.error
                .map_or("–".to_string(), |e| format!("{:+.1} %", e * 100.0)),
            r.sim_mlcc_to_isolated,
            opt(r.testbed_mlcc_to_isolated),
            r.sim_mlcc_s,
            r.sim_fair_s,
            r.sim_isolated_s,
            r.sim_best_order_s / r.sim_fair_s,
            r.sim_best_order,
            r.sim_isolated_s / r.sim_fair_s,
            r.testbed_mlcc_s
                .map_or("–".to_string(), |v| format!("{v:.2}")),
            r.seconds_error
                .map_or("–".to_string(), |e| format!("{:+.1} %", e * 100.0)),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulators_ratios_sit_beside_the_testbeds() {
        let scn = Scenario::find("micro-two-jobs").unwrap().quick();
        let dir = std::env::temp_dir().join(format!("mlcc-predict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // No results yet: the simulator's side alone.
        let p = predict(&scn, true, &dir).unwrap();
        assert!(p.testbed_mlcc_to_best_tcp.is_none() && p.error.is_none());
        assert!(p.sim_isolated_s > 0.0 && p.sim_isolated_s <= p.sim_fair_s + 1e-9);
        assert!((p.sim_mlcc_to_fair - p.sim_mlcc_s / p.sim_fair_s).abs() < 1e-12);
        // No order beats every job alone; the better of the two is the one named.
        assert!(ORDERS.contains(&p.sim_best_order.as_str()), "{p:?}");
        assert!(p.sim_best_order_s >= p.sim_isolated_s - 1e-9, "{p:?}");
        // A testbed summary as `run` writes it (the fields compared).
        std::fs::create_dir_all(dir.join("micro-two-jobs")).unwrap();
        std::fs::write(
            dir.join("micro-two-jobs/summary.json"),
            r#"{"isolated_mean_jct_s": 8.0, "ccs": [
                {"cc": "cubic", "mean_jct_s": 10.0, "ratio_to_best_tcp": 1.0},
                {"cc": "mlcc", "mean_jct_s": 9.0, "ratio_to_best_tcp": 0.9}]}"#,
        )
        .unwrap();
        let p = predict(&scn, true, &dir).unwrap();
        assert_eq!(p.testbed_mlcc_to_best_tcp, Some(0.9));
        assert_eq!(p.testbed_mlcc_to_isolated, Some(9.0 / 8.0));
        assert_eq!(p.testbed_mlcc_s, Some(9.0));
        assert!((p.seconds_error.unwrap() - (p.sim_mlcc_s / 9.0 - 1.0)).abs() < 1e-12);
        assert!((p.error.unwrap() - (p.sim_mlcc_to_fair / 0.9 - 1.0)).abs() < 1e-12);
        let md = markdown(&[p]);
        assert!(
            md.contains("micro-two-jobs (quick)") && md.contains("0.900"),
            "{md}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
