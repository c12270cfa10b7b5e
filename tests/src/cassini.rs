//! Cassini on real TCP: the time shifts of the simulator's `cassini` policy
//! ([`mlcc_sim::policy::cassini`]) computed for a testbed scenario — same jobs, hosts, links,
//! bytes, compute times and slots as `mlcc-testbed predict` simulates — and applied by the
//! testbed as Cassini's job scheduler applies them: each job's start is held back by its shift.
//! The network underneath is the kernel's CC, unchanged (Cassini changes neither switches nor
//! CCs). A job's completion time still counts from its arrival, so the shift is paid for.

use std::time::Duration;

use mlcc_core::routing::Routes;
use mlcc_sim::run::run_policy;

use crate::scenario::Scenario;

/// Each job's shift, in the order of `scn.jobs`: the delay the simulator's Cassini gave the job's
/// first compute phase when it placed it. A job the simulator cannot model (an unknown model
/// name) is not shifted.
pub fn shifts(scn: &Scenario) -> Result<Vec<Duration>, String> {
    let topo = scn.topology()?;
    let routes = Routes::new(&topo);
    let cfg = scn.run_config(&topo, &routes, 10_000_000)?;
    let r = run_policy("cassini", &scn.sim_jobs(), &cfg).map_err(|e| e.to_string())?;
    Ok(scn
        .jobs
        .iter()
        .map(|j| {
            r.jobs
                .iter()
                .find(|s| s.id == j.name)
                .map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.shift_s))
        })
        .collect())
}

/// `scn` with every job arriving `shift` later: what the testbed runs for Cassini.
pub fn shifted(scn: &Scenario, shifts: &[Duration]) -> Scenario {
    let mut s = scn.clone();
    for (j, d) in s.jobs.iter_mut().zip(shifts) {
        j.arrival += *d;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_jobs_get_a_shift_and_it_moves_their_arrival() {
        // micro-two-jobs: two VGG19 rings on the same hosts, arriving together: Cassini delays
        // one of them (the simulator's own test shows why), never the first to arrive.
        let scn = Scenario::find("micro-two-jobs").unwrap().quick();
        let sh = shifts(&scn).unwrap();
        assert_eq!(sh.len(), scn.jobs.len());
        assert_eq!(sh[0], Duration::ZERO, "{sh:?}");
        assert!(sh.iter().any(|d| !d.is_zero()), "{sh:?}");
        let moved = shifted(&scn, &sh);
        for ((a, b), d) in scn.jobs.iter().zip(&moved.jobs).zip(&sh) {
            assert_eq!(b.arrival, a.arrival + *d);
        }
    }
}
